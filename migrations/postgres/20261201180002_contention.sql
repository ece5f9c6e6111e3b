-- Mirror of ../20261201180002_contention.sql.

ALTER TABLE runs ADD COLUMN contention DOUBLE PRECISION CHECK (contention IS NULL OR contention >= 1);
ALTER TABLE noise_floors ADD COLUMN contention DOUBLE PRECISION
    CHECK (contention IS NULL OR contention >= 1);
