-- Which stack ran each cycle and staged each win (issue #18: many daemons,
-- one database). `stack` is the config's `[stack] name`, unique in a fleet;
-- `class` its `[stack] class` (hosts of one hardware model), NULL when the
-- config names none. Cycles, floors (already keyed by stack) and stages are
-- per stack: a daemon aborts, schedules and expires only its own.
--
-- Rows written before this migration have no stack (NULL). The first daemon
-- to open the ledger adopts them (`Ledger::adopt_unowned`): a ledger written
-- before stacks were recorded held one stack's history.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
ALTER TABLE cycles ADD COLUMN stack TEXT CHECK (stack IS NULL OR stack <> '');
ALTER TABLE cycles ADD COLUMN class TEXT CHECK (class IS NULL OR class <> '');
CREATE INDEX cycles_by_stack ON cycles (stack, started_at);
ALTER TABLE stages ADD COLUMN stack TEXT CHECK (stack IS NULL OR stack <> '');
CREATE INDEX stages_by_stack ON stages (stack, state, created_at);
