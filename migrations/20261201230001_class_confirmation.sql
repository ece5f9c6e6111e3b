-- Hosts of one class confirm each other, and a stage can be approved for
-- the class (issue #18 item 4). A win on stack
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
CREATE TABLE confirmation_claims (
    win_experiment_id  INTEGER PRIMARY KEY REFERENCES experiments (id),
    -- NULL for an unscoped handle's claim (tests, benches), as cycles.stack.
    stack              TEXT             CHECK (stack IS NULL OR stack <> ''),
    claimed_at         TEXT    NOT NULL CHECK (length(claimed_at) = 27 AND claimed_at GLOB '????-??-??T??:??:??.??????Z'),
    -- The confirmation experiment measuring it now (or last).
    confirmation_id    INTEGER NOT NULL UNIQUE REFERENCES experiments (id),
    CHECK (win_experiment_id <> confirmation_id)
) STRICT;

ALTER TABLE stages ADD COLUMN confirmed_by_stack TEXT
    CHECK (confirmed_by_stack IS NULL OR confirmed_by_stack <> '');

-- The classmates' wins on one base profile (`Ledger::classmate_wins`).
CREATE INDEX experiments_by_base ON experiments (base_digest, id);

-- Approval for the class (`stage approve ID --class`): every daemon of the
-- stage's class applies it to its own live profile when that profile is
-- the stage's base, or records why not. `stages.approved_for_class` names
-- the class it was approved for (NULL: its own stack only). The stage's own
-- stack keeps recording its apply in the stages columns (migration
-- 20261201220002); `stage_applies` holds each other host's, one row per
-- (stage, stack), inserted once, when that host settles it: the primary
-- key is what makes a host apply a stage at most once.
ALTER TABLE stages ADD COLUMN approved_for_class TEXT
    CHECK (approved_for_class IS NULL OR approved_for_class <> '')
    CHECK (approved_for_class IS NULL OR state = 'approved');

CREATE TABLE stage_applies (
    stage_id    INTEGER NOT NULL REFERENCES stages (id),
    stack       TEXT    NOT NULL CHECK (stack <> ''),
    applied_at  TEXT             CHECK (applied_at IS NULL OR (length(applied_at) = 27 AND applied_at GLOB '????-??-??T??:??:??.??????Z')),
    applied_to  TEXT    NOT NULL CHECK (applied_to <> ''),
    applied_by  TEXT    NOT NULL CHECK (applied_by <> ''),
    refusal     TEXT             CHECK (refusal IS NULL OR refusal <> ''),
    refused_at  TEXT             CHECK (refused_at IS NULL OR (length(refused_at) = 27 AND refused_at GLOB '????-??-??T??:??:??.??????Z')),
    -- Refused exactly when it says when; applied or refused, never both.
    CHECK ((refusal IS NULL) = (refused_at IS NULL)),
    CHECK ((applied_at IS NULL) <> (refusal IS NULL)),
    PRIMARY KEY (stage_id, stack)
) STRICT;

-- NEVER edit this file once a ledger has applied it; add a new migration.
