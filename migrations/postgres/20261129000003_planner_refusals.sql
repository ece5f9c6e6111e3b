-- Mirror of ../20261129000003_planner_refusals.sql.
CREATE INDEX proposals_valid_by_parsed ON proposals (parsed) WHERE rejection IS NULL;
