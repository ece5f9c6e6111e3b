-- Mirror of ../20261203100001_observation_base.sql.
ALTER TABLE observations ADD COLUMN base_profile_digest TEXT
    CHECK (base_profile_digest IS NULL OR base_profile_digest ~ '^[0-9a-f]{64}$');
UPDATE observations SET base_profile_digest = live_profile_digest;
CREATE INDEX observations_by_base_profile ON observations (base_profile_digest);
