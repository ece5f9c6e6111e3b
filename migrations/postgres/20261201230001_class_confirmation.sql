-- Mirror of ../20261201230001_class_confirmation.sql.
CREATE TABLE confirmation_claims (
    win_experiment_id  BIGINT      PRIMARY KEY REFERENCES experiments (id),
    stack              TEXT        NOT NULL CHECK (stack <> ''),
    claimed_at         TIMESTAMPTZ NOT NULL,
    confirmation_id    BIGINT      NOT NULL UNIQUE REFERENCES experiments (id),
    CHECK (win_experiment_id <> confirmation_id)
);

ALTER TABLE stages ADD COLUMN confirmed_by_stack TEXT
    CHECK (confirmed_by_stack IS NULL OR confirmed_by_stack <> '');

CREATE INDEX experiments_by_base ON experiments (base_digest, id);
