-- The fleet report (issue #18) reads one stack's stages open in a period,
-- in creation order: `stages_by_stack` puts the state between the stack and
-- the time, so that read would sort; this index walks it in order.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
CREATE INDEX stages_by_stack_time ON stages (stack, created_at);
