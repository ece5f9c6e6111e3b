-- Mirror of ../20261201180003_compositions.sql.

CREATE TABLE compositions (
    id             BIGSERIAL PRIMARY KEY,
    cycle_id       BIGINT      NOT NULL REFERENCES cycles (id),
    created_at     TIMESTAMPTZ NOT NULL,
    base_digest    TEXT        NOT NULL CHECK (length(base_digest) = 64 AND base_digest !~ '[^0-9a-f]'),
    -- The composite's first A/B; NULL when it was refused before measuring.
    experiment_id  BIGINT               UNIQUE REFERENCES experiments (id),
    refusal        TEXT                 CHECK (refusal IS NULL OR refusal <> ''),
    CHECK (experiment_id IS NOT NULL OR refusal IS NOT NULL)
);
CREATE INDEX compositions_by_base ON compositions (base_digest);

CREATE TABLE composition_parts (
    composition_id  BIGINT NOT NULL REFERENCES compositions (id),
    -- A staged single win the composite applies.
    stage_id        BIGINT NOT NULL REFERENCES stages (id),
    -- Best part first (the most negative confirmed effect).
    position        BIGINT NOT NULL CHECK (position >= 0),
    PRIMARY KEY (composition_id, stage_id),
    UNIQUE (composition_id, position)
);
CREATE INDEX composition_parts_by_stage ON composition_parts (stage_id);
