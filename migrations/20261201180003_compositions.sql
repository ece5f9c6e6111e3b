-- Compositions: the combined candidate of confirmed wins on different menu
-- entries staged against the same live profile (`cycle/composition.rs`).
-- A composition is measured as an ordinary experiment (its first A/B, then
-- a confirmation like any win); this table says which staged wins it is
-- made of, and why it was refused when it was: before measuring (the
-- pre-flight or a budget rule rejected the combined profile) or after (it
-- did not beat the best of its parts). A set of parts is tried once.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

CREATE TABLE compositions (
    id             INTEGER PRIMARY KEY,
    cycle_id       INTEGER NOT NULL REFERENCES cycles (id),
    created_at     TEXT    NOT NULL CHECK (length(created_at) = 27 AND created_at GLOB '????-??-??T??:??:??.??????Z'),
    base_digest    TEXT    NOT NULL CHECK (length(base_digest) = 64 AND base_digest NOT GLOB '*[^0-9a-f]*'),
    -- The composite's first A/B; NULL when it was refused before measuring.
    experiment_id  INTEGER          UNIQUE REFERENCES experiments (id),
    refusal        TEXT             CHECK (refusal IS NULL OR refusal <> ''),
    CHECK (experiment_id IS NOT NULL OR refusal IS NOT NULL)
) STRICT;
CREATE INDEX compositions_by_base ON compositions (base_digest);

CREATE TABLE composition_parts (
    composition_id  INTEGER NOT NULL REFERENCES compositions (id),
    -- A staged single win the composite applies.
    stage_id        INTEGER NOT NULL REFERENCES stages (id),
    -- Best part first (the most negative confirmed effect).
    position        INTEGER NOT NULL CHECK (position >= 0),
    PRIMARY KEY (composition_id, stage_id),
    UNIQUE (composition_id, position)
) STRICT;
CREATE INDEX composition_parts_by_stage ON composition_parts (stage_id);
