-- Who wrote an approved stage's profile to its stack's live profile, and
-- when, or why it was not written (issue #18: approval from anywhere). On
-- a PostgreSQL ledger `stage approve` runs on any machine and only records
-- the approval; the stack's own daemon, on its host, writes the live
-- profile when it next sees the approval and records it here. On SQLite
-- `stage approve` writes the file itself and records the same columns.
--
-- `applied_by` names what settled the apply, whether it wrote the file or
-- refused to: "the daemon of stack S on host H" or "`orchestrator stage
-- approve` on host H". `applied_to` is the live profile path on that host.
-- `apply_refusal` says why the file was not written (the live profile was
-- no longer the stage's base, its pin list was missing, ...).
--
-- Approved stages from before this migration were written by
-- `stage approve` in the approval's own transaction: they read as applied
-- when they were approved.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
ALTER TABLE stages ADD COLUMN applied_at TEXT
    CHECK (applied_at IS NULL OR (length(applied_at) = 27 AND applied_at GLOB '????-??-??T??:??:??.??????Z'));
ALTER TABLE stages ADD COLUMN apply_refused_at TEXT
    CHECK (apply_refused_at IS NULL OR (length(apply_refused_at) = 27 AND apply_refused_at GLOB '????-??-??T??:??:??.??????Z'));
ALTER TABLE stages ADD COLUMN apply_refusal TEXT
    CHECK (apply_refusal IS NULL OR apply_refusal <> '')
    -- Refused exactly when it says when.
    CHECK ((apply_refusal IS NULL) = (apply_refused_at IS NULL))
    -- Only an approved stage is applied or refused, and never both.
    CHECK ((applied_at IS NULL AND apply_refusal IS NULL) OR state = 'approved')
    CHECK (applied_at IS NULL OR apply_refusal IS NULL)
    CHECK (applied_at IS NULL OR applied_at >= decided_at)
    CHECK (apply_refused_at IS NULL OR apply_refused_at >= decided_at);
ALTER TABLE stages ADD COLUMN applied_by TEXT
    CHECK (applied_by IS NULL OR applied_by <> '')
    -- Every settled apply says by what, and nothing else does.
    CHECK ((applied_by IS NULL) = (applied_at IS NULL AND apply_refusal IS NULL));
ALTER TABLE stages ADD COLUMN applied_to TEXT
    CHECK (applied_to IS NULL OR applied_to <> '')
    CHECK ((applied_to IS NULL) = (applied_by IS NULL));

UPDATE stages SET applied_at = decided_at,
    applied_by = '`orchestrator stage approve` (before applies were recorded)',
    applied_to = 'the live profile of its stack'
    WHERE state = 'approved';
