-- A verdict judged against the bound instead of a measured noise floor
-- (issue #16): an A/B with no valid floor is judged first against
-- `[measure] max_noise_floor`, and a win or loss there stands without a
-- floor. `noise_floor` then holds the bound, which is not a measurement;
-- this says so, for `report` and `stage show`. 0 for every older verdict.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
ALTER TABLE verdicts ADD COLUMN floor_is_bound INTEGER NOT NULL DEFAULT 0 CHECK (floor_is_bound IN (0, 1));
