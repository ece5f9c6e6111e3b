-- The profile a cycle built on (`[cycle] build_on_staged`, src/cycle/base.rs):
-- the live profile, or the candidate of a confirmed win that waits for
-- approval. What the planner refused is found by it
-- (`Ledger::planner_refused`, `Ledger::planner_refusals_on`): a refusal on a
-- waiting win's candidate is a refusal there, not on the live profile.
--
-- Rows written before this migration built on the live profile (there was
-- nothing else to build on before build_on_staged), so they take it. New rows
-- always carry it; the column stays nullable only because SQLite cannot add a
-- NOT NULL column without a default.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
ALTER TABLE observations ADD COLUMN base_profile_digest TEXT
    CHECK (base_profile_digest IS NULL
           OR (length(base_profile_digest) = 64 AND base_profile_digest NOT GLOB '*[^0-9a-f]*'));
UPDATE observations SET base_profile_digest = live_profile_digest;
CREATE INDEX observations_by_base_profile ON observations (base_profile_digest);
