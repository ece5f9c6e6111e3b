-- The duplicate check also looks for a valid proposal the planner refused on
-- the same live profile (`Ledger::planner_refused`): find it by its parsed
-- JSON among the valid answers.
CREATE INDEX proposals_valid_by_parsed ON proposals (parsed) WHERE rejection IS NULL;
