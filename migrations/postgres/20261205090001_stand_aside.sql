-- Mirror of ../20261205090001_stand_aside.sql.
CREATE TABLE cycle_deferrals (
    cycle_id      BIGINT      PRIMARY KEY REFERENCES cycles (id),
    deferred_at   TIMESTAMPTZ NOT NULL,
    during        TEXT        NOT NULL CHECK (during IN ('start', 'between_runs')),
    reason        TEXT        NOT NULL CHECK (trim(reason) <> ''),
    waited_s      DOUBLE PRECISION NOT NULL CHECK (waited_s >= 0),
    live_requests DOUBLE PRECISION CHECK (live_requests IS NULL OR live_requests >= 0)
);

ALTER TABLE runs ADD COLUMN live_requests DOUBLE PRECISION
    CHECK (live_requests IS NULL OR live_requests >= 0);
