-- Mirror of ../20261201000001_pressure.sql: pressure stall information per
-- run and per noise floor, and the judge's discarded blocks.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

ALTER TABLE runs ADD COLUMN load1 DOUBLE PRECISION CHECK (load1 IS NULL OR load1 >= 0);
ALTER TABLE runs ADD COLUMN cpu_pressure DOUBLE PRECISION
    CHECK (cpu_pressure IS NULL OR (cpu_pressure >= 0 AND cpu_pressure <= 1));
ALTER TABLE runs ADD COLUMN memory_pressure DOUBLE PRECISION
    CHECK (memory_pressure IS NULL OR (memory_pressure >= 0 AND memory_pressure <= 1));
ALTER TABLE runs ADD COLUMN io_pressure DOUBLE PRECISION
    CHECK (io_pressure IS NULL OR (io_pressure >= 0 AND io_pressure <= 1));
ALTER TABLE runs ADD COLUMN discarded BOOLEAN NOT NULL DEFAULT false;

ALTER TABLE noise_floors ADD COLUMN load1 DOUBLE PRECISION CHECK (load1 IS NULL OR load1 >= 0);
ALTER TABLE noise_floors ADD COLUMN cpu_pressure DOUBLE PRECISION
    CHECK (cpu_pressure IS NULL OR (cpu_pressure >= 0 AND cpu_pressure <= 1));
