-- Mirror of ../20261201120001_refused_on_live.sql.
CREATE INDEX observations_by_live_profile ON observations (live_profile_digest);
