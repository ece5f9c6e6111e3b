-- Mirror of ../20261129000002_run_parts.sql: the measured parts of a token.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

ALTER TABLE runs ADD COLUMN trunk_seconds_per_token DOUBLE PRECISION
    CHECK (trunk_seconds_per_token IS NULL OR (trunk_seconds_per_token >= 0 AND seconds_per_token IS NOT NULL));
ALTER TABLE runs ADD COLUMN expert_seconds_per_token DOUBLE PRECISION
    CHECK (expert_seconds_per_token IS NULL OR (expert_seconds_per_token >= 0 AND seconds_per_token IS NOT NULL));
ALTER TABLE runs ADD COLUMN far_hit_share DOUBLE PRECISION
    CHECK (far_hit_share IS NULL OR (far_hit_share >= 0 AND far_hit_share <= 1 AND seconds_per_token IS NOT NULL));
ALTER TABLE runs ADD COLUMN draft_acceptance DOUBLE PRECISION
    CHECK (draft_acceptance IS NULL OR (draft_acceptance >= 0 AND draft_acceptance <= 1 AND seconds_per_token IS NOT NULL));
