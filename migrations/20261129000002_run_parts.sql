-- The measured parts of a token a stack may report beside its speed (the
-- bench JSON's optional `trunk_seconds_per_token`, `expert_seconds_per_token`,
-- `far_hit_share`, `draft_acceptance`), kept per run so the report can
-- project from measured figures only. NULL when the stack does not report
-- them (kimi-k3-in-c, llama-server) and on every run that is not a valid
-- measurement: like seconds_per_token, a refused or failed run carries none.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

ALTER TABLE runs ADD COLUMN trunk_seconds_per_token REAL
    CHECK (trunk_seconds_per_token IS NULL OR (trunk_seconds_per_token >= 0 AND seconds_per_token IS NOT NULL));
ALTER TABLE runs ADD COLUMN expert_seconds_per_token REAL
    CHECK (expert_seconds_per_token IS NULL OR (expert_seconds_per_token >= 0 AND seconds_per_token IS NOT NULL));
ALTER TABLE runs ADD COLUMN far_hit_share REAL
    CHECK (far_hit_share IS NULL OR (far_hit_share >= 0 AND far_hit_share <= 1 AND seconds_per_token IS NOT NULL));
ALTER TABLE runs ADD COLUMN draft_acceptance REAL
    CHECK (draft_acceptance IS NULL OR (draft_acceptance >= 0 AND draft_acceptance <= 1 AND seconds_per_token IS NOT NULL));
