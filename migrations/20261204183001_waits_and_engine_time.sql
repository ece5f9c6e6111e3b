-- The daemon's waits, and the index its engine-time budget reads by.
--
-- `waits`: a stretch of time in which the daemon ran no cycle on purpose,
-- one row per stretch (src/daemon/wait.rs):
-- * `converged`: no experiment on the profile the loop builds on is
--   expected to tell it anything new (src/cycle/converged.rs). It looks
--   again after `backoff_s` (doubling per look, capped by `[cycle]
--   max_wait_s`) and wakes at once on a change (`wakes_on`): a stage
--   approved or rejected, the config, menu or live profile changed, the
--   heat moved, the live metrics drifted.
-- * `budget`: the daemon's measurements took `[cycle] max_engine_share` of
--   the window's wall-clock time (src/daemon/budget.rs); it waits until
--   enough of the window's runs age out.
-- `looks` counts the looks that found it still waiting; `woken_by` says what
-- ended it (the change seen, `budget available`, `shutdown`, or, for a row a
-- dead daemon left open, what the next start found).
--
-- `runs_by_start`: the budget sums the engine time of the runs of a window.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
CREATE TABLE waits (
    id           INTEGER PRIMARY KEY,
    stack        TEXT             CHECK (stack IS NULL OR stack <> ''),
    kind         TEXT    NOT NULL CHECK (kind IN ('converged', 'budget')),
    started_at   TEXT    NOT NULL CHECK (length(started_at) = 27 AND started_at GLOB '????-??-??T??:??:??.??????Z'),
    -- The cycle before it, when there was one.
    after_cycle  INTEGER          REFERENCES cycles (id),
    reason       TEXT    NOT NULL CHECK (trim(reason) <> ''),
    -- A JSON list of what wakes it, in words.
    wakes_on     TEXT    NOT NULL CHECK (json_valid(wakes_on) AND json_type(wakes_on) = 'array'),
    -- When it looks again at the latest, and after what wait.
    next_look_at TEXT    NOT NULL CHECK (length(next_look_at) = 27 AND next_look_at GLOB '????-??-??T??:??:??.??????Z'),
    backoff_s    REAL    NOT NULL CHECK (backoff_s >= 0),
    looks        INTEGER NOT NULL DEFAULT 0 CHECK (looks >= 0),
    ended_at     TEXT             CHECK (ended_at IS NULL OR (length(ended_at) = 27 AND ended_at GLOB '????-??-??T??:??:??.??????Z')),
    woken_by     TEXT             CHECK (woken_by IS NULL OR trim(woken_by) <> ''),
    -- Ended exactly when it says what ended it.
    CHECK ((ended_at IS NULL) = (woken_by IS NULL)),
    CHECK (ended_at IS NULL OR ended_at >= started_at),
    CHECK (next_look_at >= started_at)
) STRICT;
CREATE INDEX waits_by_start ON waits (started_at);
CREATE INDEX waits_open ON waits (ended_at) WHERE ended_at IS NULL;

CREATE INDEX runs_by_start ON runs (started_at);
