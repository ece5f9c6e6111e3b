-- Hosts of one class confirm each other (issue #18 item 4). A win on stack
-- A of class K may be confirmed by the independent A/B on stack B of class
-- K whose live profile is the win's base.
--
-- `confirmation_claims`: who confirms a win. A daemon takes the claim in
-- the write transaction that records its confirmation experiment, before
-- measuring, so of two daemons (the win's own, a classmate) exactly one
-- confirms it; the other's cycle does something else. The primary key is
-- the guarantee. A claim whose confirmation was interrupted (its cycle
-- `aborted`, its verdict `failed`) may be taken over, by the same rule as
-- a daemon confirms its own win again.
--
-- `stages.confirmed_by_stack`: the stack whose cycle ran the confirmation
-- (the win's own stack, or a classmate's); NULL for stages from before
-- this migration, whose confirmation always ran on the win's stack.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
CREATE TABLE confirmation_claims (
    win_experiment_id  INTEGER PRIMARY KEY REFERENCES experiments (id),
    stack              TEXT    NOT NULL CHECK (stack <> ''),
    claimed_at         TEXT    NOT NULL CHECK (length(claimed_at) = 27 AND claimed_at GLOB '????-??-??T??:??:??.??????Z'),
    -- The confirmation experiment measuring it now (or last).
    confirmation_id    INTEGER NOT NULL UNIQUE REFERENCES experiments (id),
    CHECK (win_experiment_id <> confirmation_id)
) STRICT;

ALTER TABLE stages ADD COLUMN confirmed_by_stack TEXT
    CHECK (confirmed_by_stack IS NULL OR confirmed_by_stack <> '');

-- The classmates' wins on one base profile (`Ledger::classmate_wins`).
CREATE INDEX experiments_by_base ON experiments (base_digest, id);
