-- Mirror of ../20261204120001_realizations.sql.
CREATE TABLE realizations (
    experiment_id  BIGINT PRIMARY KEY REFERENCES experiments (id),
    stage_id       BIGINT NOT NULL REFERENCES stages (id)
);
CREATE INDEX realizations_by_stage ON realizations (stage_id);

CREATE TABLE realization_notes (
    stage_id   BIGINT      PRIMARY KEY REFERENCES stages (id),
    noted_at   TIMESTAMPTZ NOT NULL,
    note       TEXT        NOT NULL CHECK (trim(note) <> '')
);
