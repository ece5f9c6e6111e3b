-- Mirror of ../20261201180001_verdict_floor_bound.sql.
ALTER TABLE verdicts ADD COLUMN floor_is_bound BOOLEAN NOT NULL DEFAULT FALSE;
