-- Standing aside for the live server's users (`measure::stand_aside`).
--
-- `cycle_deferrals`: a cycle that waited longer than `[daemon]
-- stand_aside_max_wait_s` for the live server to be quiet, at its start
-- (`start`, before it asked the proposer or measured anything) or between
-- two runs of its measurement (`between_runs`). Such a cycle is closed
-- `aborted` with a `failed` verdict, as a cycle a shutdown cut short is
-- (it judged nothing, so an interrupted confirmation is run again), and
-- this row says it was deferred, why, after how long a wait, and how many
-- of the users' requests the live server held at the last reading.
--
-- `runs.live_requests`: the most requests of the live server's users (the
-- daemon's own excluded) read while the run went on; NULL where the live
-- load is not read. A run with more than `stand_aside_above` had its block
-- discarded and re-run.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
CREATE TABLE cycle_deferrals (
    cycle_id      INTEGER PRIMARY KEY REFERENCES cycles (id),
    deferred_at   TEXT    NOT NULL CHECK (length(deferred_at) = 27 AND deferred_at GLOB '????-??-??T??:??:??.??????Z'),
    during        TEXT    NOT NULL CHECK (during IN ('start', 'between_runs')),
    reason        TEXT    NOT NULL CHECK (trim(reason) <> ''),
    waited_s      REAL    NOT NULL CHECK (waited_s >= 0),
    live_requests REAL             CHECK (live_requests IS NULL OR live_requests >= 0)
) STRICT;

ALTER TABLE runs ADD COLUMN live_requests REAL
    CHECK (live_requests IS NULL OR live_requests >= 0);
