-- Manual experiments (`orchestrator compare`): a profile a person or a
-- tuner made, judged against the live profile (or another base) with the
-- same floor, A/B and confirmation as a staged win, and never staged. Its
-- A/B and its confirmation are experiments of their own cycles (proposer
-- `human`, "a person, through the CLI") with `menu_id = 'manual'`: no menu
-- entry planned the candidate, so none is named. A manual experiment has
-- no proposal. The loop's own reads (the proposers' history, the win that
-- waits for its confirmation, the classmates' wins, the weekly report)
-- leave manual experiments out; `orchestrator ledger` lists them.
--
-- SQLite cannot change a CHECK constraint in place, so the table is
-- rebuilt (SQLite's documented procedure: create, copy, drop, rename,
-- re-index). `Ledger::migrate` runs migrations with foreign keys off and
-- checks them (`PRAGMA foreign_key_check`) before it commits, so the rows
-- that reference experiments (runs, verdicts, stages, claims,
-- compositions, confirmations) keep their ids and are checked again.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

CREATE TABLE experiments_new (
    id                 INTEGER PRIMARY KEY,
    cycle_id           INTEGER NOT NULL REFERENCES cycles (id),
    -- NULL when no proposer chose it (a scheduled noise-floor refresh, a
    -- confirmation, a manual experiment).
    proposal_id        INTEGER          REFERENCES proposals (id),
    -- Set on the independent second A/B that confirms a win.
    confirmation_of    INTEGER          REFERENCES experiments (id),
    created_at         TEXT    NOT NULL CHECK (length(created_at) = 27 AND created_at GLOB '????-??-??T??:??:??.??????Z'),
    menu_id            TEXT    NOT NULL CHECK (menu_id IN ('rerank_pins', 'deepen_warm_set', 'stage_speculative', 'rebalance_trunk_cache', 'remeasure', 'manual')),
    -- Canonical JSON (keys sorted) so equal parameters are equal text.
    parameters         TEXT    NOT NULL CHECK (json_valid(parameters) AND json_type(parameters) = 'object'),
    method             TEXT    NOT NULL CHECK (method IN ('bench', 'surface')),
    base_profile       TEXT    NOT NULL,
    base_digest        TEXT    NOT NULL CHECK (length(base_digest) = 64 AND base_digest NOT GLOB '*[^0-9a-f]*'),
    candidate_profile  TEXT    NOT NULL,
    candidate_digest   TEXT    NOT NULL CHECK (length(candidate_digest) = 64 AND candidate_digest NOT GLOB '*[^0-9a-f]*'),
    planner_notes      TEXT             CHECK (planner_notes IS NULL OR json_valid(planner_notes)),
    CHECK (confirmation_of IS NULL OR confirmation_of <> id),
    -- No proposer chose a manual experiment.
    CHECK (menu_id <> 'manual' OR proposal_id IS NULL)
) STRICT;

INSERT INTO experiments_new (id, cycle_id, proposal_id, confirmation_of, created_at, menu_id,
        parameters, method, base_profile, base_digest, candidate_profile, candidate_digest,
        planner_notes)
    SELECT id, cycle_id, proposal_id, confirmation_of, created_at, menu_id,
        parameters, method, base_profile, base_digest, candidate_profile, candidate_digest,
        planner_notes
    FROM experiments;

DROP TABLE experiments;
ALTER TABLE experiments_new RENAME TO experiments;

CREATE INDEX experiments_by_cycle ON experiments (cycle_id);
CREATE INDEX experiments_by_identity ON experiments (menu_id, base_digest, parameters);
CREATE INDEX experiments_by_confirmation ON experiments (confirmation_of) WHERE confirmation_of IS NOT NULL;
CREATE INDEX experiments_by_time ON experiments (created_at);
CREATE INDEX experiments_by_base ON experiments (base_digest, id);
