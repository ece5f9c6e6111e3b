-- Why this proposer answered in this cycle when it was not the configured
-- one: the bandit standing in for a served model whose answers were refused
-- `[model] bandit_fallback_after` cycles in a row. NULL otherwise.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

ALTER TABLE proposals ADD COLUMN note TEXT CHECK (note IS NULL OR note <> '');
