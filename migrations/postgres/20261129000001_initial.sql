-- The experiment ledger, first schema, in PostgreSQL's types: the mirror of
-- ../20261129000001_initial.sql (same version, same tables, constraints and
-- indexes). Each SQLite migration has its mirror here with the same version.
--
-- NEVER edit this file once a ledger has applied it: sqlx records its checksum
-- and refuses to open a ledger whose applied migrations differ. Add a new
-- migration instead.
--
-- Differences from the SQLite schema, all in the column types: ids are
-- BIGSERIAL/BIGINT, timestamps TIMESTAMPTZ (the type enforces the shape the
-- SQLite CHECKs spell out), floats DOUBLE PRECISION, flags BOOLEAN; JSON
-- stays canonical TEXT (the duplicate check compares it as text), checked by
-- `json_valid` below; GLOB patterns are regular expressions.

-- SQLite's json_valid(), so the CHECKs read the same and an invalid JSON
-- text is a constraint violation, not a cast error.
CREATE FUNCTION json_valid(t TEXT) RETURNS BOOLEAN LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM t::json;
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;

CREATE TABLE cycles (
    id          BIGSERIAL PRIMARY KEY,
    started_at  TIMESTAMPTZ NOT NULL,
    ended_at    TIMESTAMPTZ,
    status      TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'aborted')),
    error       TEXT,
    proposer    TEXT    NOT NULL CHECK (proposer IN ('model', 'bandit', 'human')),
    CHECK ((status = 'running') = (ended_at IS NULL)),
    CHECK (ended_at IS NULL OR ended_at >= started_at),
    CHECK ((status IN ('failed', 'aborted')) = (error IS NOT NULL))
);
CREATE INDEX cycles_by_start ON cycles (started_at);
CREATE INDEX cycles_running ON cycles (status) WHERE status = 'running';

CREATE TABLE observations (
    id                   BIGSERIAL PRIMARY KEY,
    cycle_id             BIGINT  NOT NULL UNIQUE REFERENCES cycles (id),
    observed_at          TIMESTAMPTZ NOT NULL,
    metrics              TEXT    NOT NULL CHECK (json_valid(metrics)),
    heat                 TEXT             CHECK (heat IS NULL OR json_valid(heat)),
    live_profile_digest  TEXT    NOT NULL CHECK (live_profile_digest ~ '^[0-9a-f]{64}$')
);

CREATE TABLE proposals (
    id              BIGSERIAL PRIMARY KEY,
    cycle_id        BIGINT  NOT NULL REFERENCES cycles (id),
    proposer        TEXT    NOT NULL CHECK (proposer IN ('model', 'bandit', 'human')),
    attempt         BIGINT  NOT NULL CHECK (attempt >= 1),
    created_at      TIMESTAMPTZ NOT NULL,
    prompt          TEXT,
    raw_answer      TEXT,
    parsed          TEXT             CHECK (parsed IS NULL OR json_valid(parsed)),
    rejection_kind  TEXT             CHECK (rejection_kind IS NULL OR rejection_kind ~ '^[a-z_]+$'),
    rejection       TEXT,
    UNIQUE (cycle_id, attempt),
    CHECK ((rejection_kind IS NULL) = (rejection IS NULL)),
    CHECK (parsed IS NOT NULL OR rejection IS NOT NULL)
);

CREATE TABLE experiments (
    id                 BIGSERIAL PRIMARY KEY,
    cycle_id           BIGINT  NOT NULL REFERENCES cycles (id),
    proposal_id        BIGINT           REFERENCES proposals (id),
    confirmation_of    BIGINT           REFERENCES experiments (id),
    created_at         TIMESTAMPTZ NOT NULL,
    menu_id            TEXT    NOT NULL CHECK (menu_id IN ('rerank_pins', 'deepen_warm_set', 'stage_speculative', 'rebalance_trunk_cache', 'remeasure')),
    parameters         TEXT    NOT NULL CHECK (CASE WHEN json_valid(parameters) THEN json_typeof(parameters::json) = 'object' ELSE false END),
    method             TEXT    NOT NULL CHECK (method IN ('bench', 'surface')),
    base_profile       TEXT    NOT NULL,
    base_digest        TEXT    NOT NULL CHECK (base_digest ~ '^[0-9a-f]{64}$'),
    candidate_profile  TEXT    NOT NULL,
    candidate_digest   TEXT    NOT NULL CHECK (candidate_digest ~ '^[0-9a-f]{64}$'),
    planner_notes      TEXT             CHECK (planner_notes IS NULL OR json_valid(planner_notes)),
    CHECK (confirmation_of IS NULL OR confirmation_of <> id)
);
CREATE INDEX experiments_by_cycle ON experiments (cycle_id);
CREATE INDEX experiments_by_identity ON experiments (menu_id, base_digest, parameters);
CREATE INDEX experiments_by_confirmation ON experiments (confirmation_of) WHERE confirmation_of IS NOT NULL;
CREATE INDEX experiments_by_time ON experiments (created_at);

CREATE TABLE runs (
    id                 BIGSERIAL PRIMARY KEY,
    experiment_id      BIGINT  NOT NULL REFERENCES experiments (id),
    arm                TEXT    NOT NULL CHECK (arm IN ('baseline', 'candidate', 'warmup')),
    order_index        BIGINT  NOT NULL CHECK (order_index >= 0),
    pair_index         BIGINT           CHECK (pair_index IS NULL OR pair_index >= 0),
    started_at         TIMESTAMPTZ NOT NULL,
    seconds_per_token  DOUBLE PRECISION CHECK (seconds_per_token IS NULL OR seconds_per_token > 0),
    timing_source      TEXT             CHECK (timing_source IS NULL OR timing_source IN ('engine', 'server', 'client')),
    tokens             BIGINT           CHECK (tokens IS NULL OR tokens >= 0),
    output_hash        TEXT,
    exit_code          INTEGER,
    duration_s         DOUBLE PRECISION NOT NULL CHECK (duration_s >= 0),
    stderr_tail        TEXT    NOT NULL DEFAULT '',
    refused            BOOLEAN NOT NULL DEFAULT false,
    error              TEXT,
    UNIQUE (experiment_id, order_index),
    CHECK ((arm = 'warmup') = (pair_index IS NULL)),
    CHECK (NOT refused OR seconds_per_token IS NULL)
);

CREATE TABLE verdicts (
    id                 BIGSERIAL PRIMARY KEY,
    cycle_id           BIGINT  NOT NULL REFERENCES cycles (id),
    experiment_id      BIGINT           UNIQUE REFERENCES experiments (id),
    kind               TEXT    NOT NULL CHECK (kind IN ('win', 'loss', 'within_noise', 'inconclusive', 'hash_mismatch', 'rejected', 'failed')),
    decided_at         TIMESTAMPTZ NOT NULL,
    effect             DOUBLE PRECISION,
    interval_low       DOUBLE PRECISION,
    interval_high      DOUBLE PRECISION,
    noise_floor        DOUBLE PRECISION CHECK (noise_floor IS NULL OR noise_floor >= 0),
    pairs              BIGINT  NOT NULL DEFAULT 0 CHECK (pairs >= 0),
    method             TEXT,
    reason             TEXT,
    CHECK (experiment_id IS NOT NULL OR kind IN ('rejected', 'failed')),
    CHECK ((interval_low IS NULL) = (interval_high IS NULL)),
    CHECK (interval_low IS NULL OR interval_low <= interval_high),
    CHECK (kind NOT IN ('win', 'loss', 'within_noise', 'inconclusive')
           OR (effect IS NOT NULL AND interval_low IS NOT NULL AND noise_floor IS NOT NULL AND method IS NOT NULL AND pairs > 0)),
    CHECK (kind <> 'hash_mismatch' OR (effect IS NULL AND interval_low IS NULL)),
    CHECK (kind NOT IN ('hash_mismatch', 'rejected', 'failed') OR reason IS NOT NULL)
);
CREATE INDEX verdicts_by_cycle ON verdicts (cycle_id);
CREATE UNIQUE INDEX verdicts_cycle_only ON verdicts (cycle_id) WHERE experiment_id IS NULL;

CREATE TABLE noise_floors (
    id              BIGSERIAL PRIMARY KEY,
    stack           TEXT    NOT NULL CHECK (stack <> ''),
    profile_digest  TEXT    NOT NULL CHECK (profile_digest ~ '^[0-9a-f]{64}$'),
    value           DOUBLE PRECISION NOT NULL CHECK (value >= 0),
    n               BIGINT  NOT NULL CHECK (n >= 1),
    method          TEXT    NOT NULL CHECK (method <> ''),
    measured_at     TIMESTAMPTZ NOT NULL,
    experiment_id   BIGINT           REFERENCES experiments (id)
);
CREATE INDEX noise_floors_by_stack ON noise_floors (stack, measured_at);

CREATE TABLE reference_hashes (
    id              BIGSERIAL PRIMARY KEY,
    stack           TEXT    NOT NULL CHECK (stack <> ''),
    prompt_set      TEXT    NOT NULL CHECK (prompt_set <> ''),
    profile_digest  TEXT    NOT NULL CHECK (profile_digest ~ '^[0-9a-f]{64}$'),
    output_hash     TEXT    NOT NULL CHECK (output_hash <> ''),
    pinned_at       TIMESTAMPTZ NOT NULL,
    pinned_by       TEXT    NOT NULL CHECK (pinned_by <> ''),
    reason          TEXT    NOT NULL CHECK (reason <> '')
);
CREATE INDEX reference_hashes_current ON reference_hashes (stack, prompt_set, pinned_at);

CREATE TABLE stages (
    id                 BIGSERIAL PRIMARY KEY,
    experiment_id      BIGINT  NOT NULL UNIQUE REFERENCES experiments (id),
    confirmation_id    BIGINT  NOT NULL UNIQUE REFERENCES experiments (id),
    state              TEXT    NOT NULL DEFAULT 'staged' CHECK (state IN ('staged', 'approved', 'rejected', 'expired')),
    base_digest        TEXT    NOT NULL CHECK (base_digest ~ '^[0-9a-f]{64}$'),
    candidate_digest   TEXT    NOT NULL CHECK (candidate_digest ~ '^[0-9a-f]{64}$'),
    candidate_profile  TEXT    NOT NULL,
    effect             DOUBLE PRECISION NOT NULL,
    interval_low       DOUBLE PRECISION NOT NULL,
    interval_high      DOUBLE PRECISION NOT NULL CHECK (interval_low <= interval_high),
    noise_floor        DOUBLE PRECISION NOT NULL CHECK (noise_floor >= 0),
    created_at         TIMESTAMPTZ NOT NULL,
    decided_at         TIMESTAMPTZ,
    decided_by         TEXT             CHECK (decided_by IS NULL OR decided_by <> ''),
    note               TEXT,
    CHECK (experiment_id <> confirmation_id),
    CHECK ((state = 'staged') = (decided_at IS NULL)),
    CHECK ((state = 'staged') = (decided_by IS NULL)),
    CHECK (decided_at IS NULL OR decided_at >= created_at),
    CHECK (state NOT IN ('rejected', 'expired') OR note IS NOT NULL)
);
CREATE INDEX stages_by_state ON stages (state, created_at);
CREATE INDEX stages_by_time ON stages (created_at);
