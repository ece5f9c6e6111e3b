-- Mirror of ../20261201220002_stage_applies.sql.
ALTER TABLE stages
    ADD COLUMN applied_at TIMESTAMPTZ,
    ADD COLUMN apply_refused_at TIMESTAMPTZ,
    ADD COLUMN apply_refusal TEXT CHECK (apply_refusal IS NULL OR apply_refusal <> ''),
    ADD COLUMN applied_by TEXT CHECK (applied_by IS NULL OR applied_by <> ''),
    ADD COLUMN applied_to TEXT CHECK (applied_to IS NULL OR applied_to <> ''),
    ADD CHECK ((apply_refusal IS NULL) = (apply_refused_at IS NULL)),
    ADD CHECK ((applied_at IS NULL AND apply_refusal IS NULL) OR state = 'approved'),
    ADD CHECK (applied_at IS NULL OR apply_refusal IS NULL),
    ADD CHECK (applied_at IS NULL OR applied_at >= decided_at),
    ADD CHECK (apply_refused_at IS NULL OR apply_refused_at >= decided_at),
    ADD CHECK ((applied_by IS NULL) = (applied_at IS NULL AND apply_refusal IS NULL)),
    ADD CHECK ((applied_to IS NULL) = (applied_by IS NULL));

UPDATE stages SET applied_at = decided_at,
    applied_by = '`orchestrator stage approve` (before applies were recorded)',
    applied_to = 'the live profile of its stack'
    WHERE state = 'approved';
