-- Mirror of ../20261204183001_waits_and_engine_time.sql.
CREATE TABLE waits (
    id           BIGSERIAL   PRIMARY KEY,
    stack        TEXT        CHECK (stack IS NULL OR stack <> ''),
    kind         TEXT        NOT NULL CHECK (kind IN ('converged', 'budget')),
    started_at   TIMESTAMPTZ NOT NULL,
    after_cycle  BIGINT      REFERENCES cycles (id),
    reason       TEXT        NOT NULL CHECK (trim(reason) <> ''),
    wakes_on     TEXT        NOT NULL CHECK (json_valid(wakes_on) AND json_typeof(wakes_on::json) = 'array'),
    next_look_at TIMESTAMPTZ NOT NULL,
    backoff_s    DOUBLE PRECISION NOT NULL CHECK (backoff_s >= 0),
    looks        BIGINT      NOT NULL DEFAULT 0 CHECK (looks >= 0),
    ended_at     TIMESTAMPTZ,
    woken_by     TEXT        CHECK (woken_by IS NULL OR trim(woken_by) <> ''),
    CHECK ((ended_at IS NULL) = (woken_by IS NULL)),
    CHECK (ended_at IS NULL OR ended_at >= started_at),
    CHECK (next_look_at >= started_at)
);
CREATE INDEX waits_by_start ON waits (started_at);
CREATE INDEX waits_open ON waits (ended_at) WHERE ended_at IS NULL;

CREATE INDEX runs_by_start ON runs (started_at);
