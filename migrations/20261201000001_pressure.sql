-- What else the machine was doing during each run, and under which
-- conditions each noise floor was measured: Linux pressure stall information
-- (the growth of `some total` over the run as a share of its wall time, 0..1)
-- and the 1-minute load average at its end. NULL where the kernel has no
-- /proc/pressure, and on ledgers written before this migration.
--
-- `discarded` marks the runs of a block the judge did not use (a run above
-- `[measure] max_pressure`, or arms that disagreed within themselves): they
-- stay as evidence, and the block was re-run for both arms.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

ALTER TABLE runs ADD COLUMN load1 REAL CHECK (load1 IS NULL OR load1 >= 0);
ALTER TABLE runs ADD COLUMN cpu_pressure REAL
    CHECK (cpu_pressure IS NULL OR (cpu_pressure >= 0 AND cpu_pressure <= 1));
ALTER TABLE runs ADD COLUMN memory_pressure REAL
    CHECK (memory_pressure IS NULL OR (memory_pressure >= 0 AND memory_pressure <= 1));
ALTER TABLE runs ADD COLUMN io_pressure REAL
    CHECK (io_pressure IS NULL OR (io_pressure >= 0 AND io_pressure <= 1));
ALTER TABLE runs ADD COLUMN discarded INTEGER NOT NULL DEFAULT 0 CHECK (discarded IN (0, 1));

-- The median conditions of the floor's own runs: a floor is re-measured
-- when the machine has moved away from them (`[measure] floor_pressure_shift`).
ALTER TABLE noise_floors ADD COLUMN load1 REAL CHECK (load1 IS NULL OR load1 >= 0);
ALTER TABLE noise_floors ADD COLUMN cpu_pressure REAL
    CHECK (cpu_pressure IS NULL OR (cpu_pressure >= 0 AND cpu_pressure <= 1));
