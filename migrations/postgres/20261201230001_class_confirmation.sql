-- Mirror of ../20261201230001_class_confirmation.sql.
CREATE TABLE confirmation_claims (
    win_experiment_id  BIGINT      PRIMARY KEY REFERENCES experiments (id),
    stack              TEXT        CHECK (stack IS NULL OR stack <> ''),
    claimed_at         TIMESTAMPTZ NOT NULL,
    confirmation_id    BIGINT      NOT NULL UNIQUE REFERENCES experiments (id),
    CHECK (win_experiment_id <> confirmation_id)
);

ALTER TABLE stages ADD COLUMN confirmed_by_stack TEXT
    CHECK (confirmed_by_stack IS NULL OR confirmed_by_stack <> '');

CREATE INDEX experiments_by_base ON experiments (base_digest, id);

ALTER TABLE stages ADD COLUMN approved_for_class TEXT
    CHECK (approved_for_class IS NULL OR approved_for_class <> '')
    CHECK (approved_for_class IS NULL OR state = 'approved');

CREATE TABLE stage_applies (
    stage_id    BIGINT      NOT NULL REFERENCES stages (id),
    stack       TEXT        NOT NULL CHECK (stack <> ''),
    applied_at  TIMESTAMPTZ,
    applied_to  TEXT        NOT NULL CHECK (applied_to <> ''),
    applied_by  TEXT        NOT NULL CHECK (applied_by <> ''),
    refusal     TEXT        CHECK (refusal IS NULL OR refusal <> ''),
    refused_at  TIMESTAMPTZ,
    CHECK ((refusal IS NULL) = (refused_at IS NULL)),
    CHECK ((applied_at IS NULL) <> (refusal IS NULL)),
    PRIMARY KEY (stage_id, stack)
);
