-- Mirror of ../20261203180001_stage_reverts.sql.
CREATE TABLE stage_reverts (
    stage_id      BIGINT      PRIMARY KEY REFERENCES stages (id),
    requested_at  TIMESTAMPTZ NOT NULL,
    requested_by  TEXT        NOT NULL CHECK (requested_by <> ''),
    reason        TEXT        NOT NULL CHECK (trim(reason) <> ''),
    applied_at    TIMESTAMPTZ,
    refusal       TEXT        CHECK (refusal IS NULL OR refusal <> ''),
    refused_at    TIMESTAMPTZ,
    applied_by    TEXT        CHECK (applied_by IS NULL OR applied_by <> ''),
    applied_to    TEXT        CHECK (applied_to IS NULL OR applied_to <> ''),
    restarted_at  TIMESTAMPTZ,
    CHECK ((refusal IS NULL) = (refused_at IS NULL)),
    CHECK (applied_at IS NULL OR refusal IS NULL),
    CHECK ((applied_by IS NULL) = (applied_at IS NULL AND refusal IS NULL)),
    CHECK ((applied_to IS NULL) = (applied_by IS NULL)),
    CHECK (applied_at IS NULL OR applied_at >= requested_at),
    CHECK (refused_at IS NULL OR refused_at >= requested_at),
    CHECK (restarted_at IS NULL OR applied_at IS NOT NULL)
);

ALTER TABLE stages ADD COLUMN restarted_at TIMESTAMPTZ
    CHECK (restarted_at IS NULL OR applied_at IS NOT NULL);
