-- `orchestrator stage revert ID --reason TEXT` (issue #32 item 2): an
-- approved, applied stage's replaced profile is put back as the live
-- profile, recorded with who asked and why. One row per stage: a stage is
-- reverted at most once (a refused revert may be asked for again, which
-- replaces the refused row).
--
-- On SQLite `stage revert` writes the file itself in the request's own
-- transaction and settles the row at once; on PostgreSQL it records the
-- request and the stack's daemon writes the file on its host
-- (`daemon::applier`), settling the row as an apply is settled: written
-- (`applied_at`) or refused (`refusal`, `refused_at`: the live profile is no
-- longer the stage's), by what (`applied_by`), to which file (`applied_to`).
--
-- `restarted_at` (here and on `stages`): when `--restart` ran `[stack]
-- restart` after writing the profile and the live server answered again;
-- NULL when nobody restarted the stack through the orchestrator.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
CREATE TABLE stage_reverts (
    stage_id      INTEGER PRIMARY KEY REFERENCES stages (id),
    requested_at  TEXT    NOT NULL CHECK (length(requested_at) = 27 AND requested_at GLOB '????-??-??T??:??:??.??????Z'),
    requested_by  TEXT    NOT NULL CHECK (requested_by <> ''),
    reason        TEXT    NOT NULL CHECK (trim(reason) <> ''),
    applied_at    TEXT             CHECK (applied_at IS NULL OR (length(applied_at) = 27 AND applied_at GLOB '????-??-??T??:??:??.??????Z')),
    refusal       TEXT             CHECK (refusal IS NULL OR refusal <> ''),
    refused_at    TEXT             CHECK (refused_at IS NULL OR (length(refused_at) = 27 AND refused_at GLOB '????-??-??T??:??:??.??????Z')),
    applied_by    TEXT             CHECK (applied_by IS NULL OR applied_by <> ''),
    applied_to    TEXT             CHECK (applied_to IS NULL OR applied_to <> ''),
    restarted_at  TEXT             CHECK (restarted_at IS NULL OR (length(restarted_at) = 27 AND restarted_at GLOB '????-??-??T??:??:??.??????Z')),
    -- Refused exactly when it says when; written or refused, never both.
    CHECK ((refusal IS NULL) = (refused_at IS NULL)),
    CHECK (applied_at IS NULL OR refusal IS NULL),
    -- Every settled revert says by what and to which file, and nothing else does.
    CHECK ((applied_by IS NULL) = (applied_at IS NULL AND refusal IS NULL)),
    CHECK ((applied_to IS NULL) = (applied_by IS NULL)),
    CHECK (applied_at IS NULL OR applied_at >= requested_at),
    CHECK (refused_at IS NULL OR refused_at >= requested_at),
    -- Only a written profile is restarted on.
    CHECK (restarted_at IS NULL OR applied_at IS NOT NULL)
) STRICT;

ALTER TABLE stages ADD COLUMN restarted_at TEXT
    CHECK (restarted_at IS NULL OR (length(restarted_at) = 27 AND restarted_at GLOB '????-??-??T??:??:??.??????Z'))
    CHECK (restarted_at IS NULL OR applied_at IS NOT NULL);
