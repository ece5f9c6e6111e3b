-- The proposer is shown (and its schema leaves out) every value already
-- refused by the planner on the live profile (`Ledger::planner_refusals_on`),
-- found through the cycles observed on that profile.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

CREATE INDEX observations_by_live_profile ON observations (live_profile_digest);
