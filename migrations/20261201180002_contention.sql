-- How contended the CPU was during each run: the mean number of runnable
-- tasks per core (at least 1; sampled from /proc/loadavg's running count),
-- and the typical (median) value over a noise floor's runs. The judge
-- re-runs a block whose run was contended beyond its floor's runs by more
-- than `[measure] max_contention_rise`, whatever the absolute load: the
-- PSI shares above saturate at 1 on a busy machine and cannot tell a
-- burst from a steady load. NULL where it could not be read, and on
-- ledgers written before this migration (an A/B judged against such a
-- floor discards nothing for contention).
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

ALTER TABLE runs ADD COLUMN contention REAL CHECK (contention IS NULL OR contention >= 1);
ALTER TABLE noise_floors ADD COLUMN contention REAL
    CHECK (contention IS NULL OR contention >= 1);
