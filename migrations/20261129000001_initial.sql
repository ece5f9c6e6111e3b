-- The experiment ledger, first schema.
--
-- NEVER edit this file once a ledger has applied it: sqlx records its checksum
-- and refuses to open a ledger whose applied migrations differ. Add a new
-- migration instead.
--
-- Conventions (enforced by CHECK constraints so that a bug in the code cannot
-- store a state the rest of the system does not know):
-- * timestamps are UTC text of fixed width, `YYYY-MM-DDTHH:MM:SS.ffffffZ`, so
--   that text order is time order and range queries can use indexes;
-- * closed sets (verdicts, stage states, ...) are stored as the canonical
--   spellings of `src/vocab.rs`, listed again here;
-- * profile digests are 64 lowercase hex digits (sha256);
-- * JSON columns must hold valid JSON.
-- Tables are STRICT so a REAL never silently lands in a TEXT column.

CREATE TABLE cycles (
    id          INTEGER PRIMARY KEY,
    started_at  TEXT    NOT NULL CHECK (length(started_at) = 27 AND started_at GLOB '????-??-??T??:??:??.??????Z'),
    ended_at    TEXT             CHECK (ended_at IS NULL OR (length(ended_at) = 27 AND ended_at GLOB '????-??-??T??:??:??.??????Z')),
    status      TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'aborted')),
    error       TEXT,
    proposer    TEXT    NOT NULL CHECK (proposer IN ('model', 'bandit', 'human')),
    -- A running cycle has no end; a closed one has one, not before its start.
    CHECK ((status = 'running') = (ended_at IS NULL)),
    CHECK (ended_at IS NULL OR ended_at >= started_at),
    -- A failed or aborted cycle always says why (rule 4: fail loudly).
    CHECK ((status IN ('failed', 'aborted')) = (error IS NOT NULL))
) STRICT;
CREATE INDEX cycles_by_start ON cycles (started_at);
CREATE INDEX cycles_running ON cycles (status) WHERE status = 'running';

CREATE TABLE observations (
    id                   INTEGER PRIMARY KEY,
    cycle_id             INTEGER NOT NULL UNIQUE REFERENCES cycles (id),
    observed_at          TEXT    NOT NULL CHECK (length(observed_at) = 27 AND observed_at GLOB '????-??-??T??:??:??.??????Z'),
    metrics              TEXT    NOT NULL CHECK (json_valid(metrics)),
    heat                 TEXT             CHECK (heat IS NULL OR json_valid(heat)),
    live_profile_digest  TEXT    NOT NULL CHECK (length(live_profile_digest) = 64 AND live_profile_digest NOT GLOB '*[^0-9a-f]*')
) STRICT;

CREATE TABLE proposals (
    id              INTEGER PRIMARY KEY,
    cycle_id        INTEGER NOT NULL REFERENCES cycles (id),
    proposer        TEXT    NOT NULL CHECK (proposer IN ('model', 'bandit', 'human')),
    attempt         INTEGER NOT NULL CHECK (attempt >= 1),
    created_at      TEXT    NOT NULL CHECK (length(created_at) = 27 AND created_at GLOB '????-??-??T??:??:??.??????Z'),
    -- NULL for proposers that send no prompt (the bandit).
    prompt          TEXT,
    raw_answer      TEXT,
    parsed          TEXT             CHECK (parsed IS NULL OR json_valid(parsed)),
    -- A short snake_case code (e.g. `out_of_bounds`, `duplicate`) for counting,
    -- and the full message shown back to the model.
    rejection_kind  TEXT             CHECK (rejection_kind IS NULL OR (rejection_kind <> '' AND rejection_kind NOT GLOB '*[^a-z_]*')),
    rejection       TEXT,
    UNIQUE (cycle_id, attempt),
    CHECK ((rejection_kind IS NULL) = (rejection IS NULL)),
    -- Either it parsed, or it says why not (a duplicate both parsed and was refused).
    CHECK (parsed IS NOT NULL OR rejection IS NOT NULL)
) STRICT;

CREATE TABLE experiments (
    id                 INTEGER PRIMARY KEY,
    cycle_id           INTEGER NOT NULL REFERENCES cycles (id),
    -- NULL when no proposer chose it (e.g. a scheduled noise-floor refresh).
    proposal_id        INTEGER          REFERENCES proposals (id),
    -- Set on the independent second A/B that confirms a win.
    confirmation_of    INTEGER          REFERENCES experiments (id),
    created_at         TEXT    NOT NULL CHECK (length(created_at) = 27 AND created_at GLOB '????-??-??T??:??:??.??????Z'),
    menu_id            TEXT    NOT NULL CHECK (menu_id IN ('rerank_pins', 'deepen_warm_set', 'stage_speculative', 'rebalance_trunk_cache', 'remeasure')),
    -- Canonical JSON (keys sorted) so equal parameters are equal text.
    parameters         TEXT    NOT NULL CHECK (json_valid(parameters) AND json_type(parameters) = 'object'),
    method             TEXT    NOT NULL CHECK (method IN ('bench', 'surface')),
    base_profile       TEXT    NOT NULL,
    base_digest        TEXT    NOT NULL CHECK (length(base_digest) = 64 AND base_digest NOT GLOB '*[^0-9a-f]*'),
    candidate_profile  TEXT    NOT NULL,
    candidate_digest   TEXT    NOT NULL CHECK (length(candidate_digest) = 64 AND candidate_digest NOT GLOB '*[^0-9a-f]*'),
    planner_notes      TEXT             CHECK (planner_notes IS NULL OR json_valid(planner_notes)),
    CHECK (confirmation_of IS NULL OR confirmation_of <> id)
) STRICT;
CREATE INDEX experiments_by_cycle ON experiments (cycle_id);
CREATE INDEX experiments_by_identity ON experiments (menu_id, base_digest, parameters);
CREATE INDEX experiments_by_confirmation ON experiments (confirmation_of) WHERE confirmation_of IS NOT NULL;
CREATE INDEX experiments_by_time ON experiments (created_at);

CREATE TABLE runs (
    id                 INTEGER PRIMARY KEY,
    experiment_id      INTEGER NOT NULL REFERENCES experiments (id),
    arm                TEXT    NOT NULL CHECK (arm IN ('baseline', 'candidate', 'warmup')),
    -- Position in the whole run sequence of the experiment (ABBA order).
    order_index        INTEGER NOT NULL CHECK (order_index >= 0),
    -- Which A/B pair the run belongs to; warmups belong to none.
    pair_index         INTEGER          CHECK (pair_index IS NULL OR pair_index >= 0),
    started_at         TEXT    NOT NULL CHECK (length(started_at) = 27 AND started_at GLOB '????-??-??T??:??:??.??????Z'),
    seconds_per_token  REAL             CHECK (seconds_per_token IS NULL OR seconds_per_token > 0),
    -- Where seconds_per_token came from: the engine's JSON, the server's
    -- timings, or client-side token arrival.
    timing_source      TEXT             CHECK (timing_source IS NULL OR timing_source IN ('engine', 'server', 'client')),
    tokens             INTEGER          CHECK (tokens IS NULL OR tokens >= 0),
    output_hash        TEXT,
    exit_code          INTEGER,
    duration_s         REAL    NOT NULL CHECK (duration_s >= 0),
    stderr_tail        TEXT    NOT NULL DEFAULT '',
    -- Kept as evidence but never a metric (e.g. its output hash differed).
    refused            INTEGER NOT NULL DEFAULT 0 CHECK (refused IN (0, 1)),
    error              TEXT,
    UNIQUE (experiment_id, order_index),
    CHECK ((arm = 'warmup') = (pair_index IS NULL)),
    CHECK (refused = 0 OR seconds_per_token IS NULL)
) STRICT;

CREATE TABLE verdicts (
    id                 INTEGER PRIMARY KEY,
    cycle_id           INTEGER NOT NULL REFERENCES cycles (id),
    -- Exactly one verdict per experiment. NULL only for a cycle that ended
    -- before any experiment existed (bad proposal, model unreachable).
    experiment_id      INTEGER          UNIQUE REFERENCES experiments (id),
    kind               TEXT    NOT NULL CHECK (kind IN ('win', 'loss', 'within_noise', 'inconclusive', 'hash_mismatch', 'rejected', 'failed')),
    decided_at         TEXT    NOT NULL CHECK (length(decided_at) = 27 AND decided_at GLOB '????-??-??T??:??:??.??????Z'),
    -- Log ratio candidate/baseline of seconds per token; negative is faster.
    effect             REAL,
    interval_low       REAL,
    interval_high      REAL,
    noise_floor        REAL             CHECK (noise_floor IS NULL OR noise_floor >= 0),
    pairs              INTEGER NOT NULL DEFAULT 0 CHECK (pairs >= 0),
    method             TEXT,
    reason             TEXT,
    CHECK (experiment_id IS NOT NULL OR kind IN ('rejected', 'failed')),
    CHECK ((interval_low IS NULL) = (interval_high IS NULL)),
    CHECK (interval_low IS NULL OR interval_low <= interval_high),
    -- A measured decision carries its statistics ...
    CHECK (kind NOT IN ('win', 'loss', 'within_noise', 'inconclusive')
           OR (effect IS NOT NULL AND interval_low IS NOT NULL AND noise_floor IS NOT NULL AND method IS NOT NULL AND pairs > 0)),
    -- ... and a hash mismatch never shows a delta (the hash gate).
    CHECK (kind <> 'hash_mismatch' OR (effect IS NULL AND interval_low IS NULL)),
    -- A refusal says why.
    CHECK (kind NOT IN ('hash_mismatch', 'rejected', 'failed') OR reason IS NOT NULL)
) STRICT;
CREATE INDEX verdicts_by_cycle ON verdicts (cycle_id);
-- At most one experiment-less verdict per cycle.
CREATE UNIQUE INDEX verdicts_cycle_only ON verdicts (cycle_id) WHERE experiment_id IS NULL;

CREATE TABLE noise_floors (
    id              INTEGER PRIMARY KEY,
    stack           TEXT    NOT NULL CHECK (stack <> ''),
    profile_digest  TEXT    NOT NULL CHECK (length(profile_digest) = 64 AND profile_digest NOT GLOB '*[^0-9a-f]*'),
    value           REAL    NOT NULL CHECK (value >= 0),
    n               INTEGER NOT NULL CHECK (n >= 1),
    method          TEXT    NOT NULL CHECK (method <> ''),
    measured_at     TEXT    NOT NULL CHECK (length(measured_at) = 27 AND measured_at GLOB '????-??-??T??:??:??.??????Z'),
    -- The A/A experiment it was estimated from, when there was one.
    experiment_id   INTEGER          REFERENCES experiments (id)
) STRICT;
CREATE INDEX noise_floors_by_stack ON noise_floors (stack, measured_at);

-- Append-only: re-pinning (`orchestrator rebaseline`) adds a row with who and
-- why; the current reference is the latest one.
CREATE TABLE reference_hashes (
    id              INTEGER PRIMARY KEY,
    stack           TEXT    NOT NULL CHECK (stack <> ''),
    prompt_set      TEXT    NOT NULL CHECK (prompt_set <> ''),
    profile_digest  TEXT    NOT NULL CHECK (length(profile_digest) = 64 AND profile_digest NOT GLOB '*[^0-9a-f]*'),
    output_hash     TEXT    NOT NULL CHECK (output_hash <> ''),
    pinned_at       TEXT    NOT NULL CHECK (length(pinned_at) = 27 AND pinned_at GLOB '????-??-??T??:??:??.??????Z'),
    pinned_by       TEXT    NOT NULL CHECK (pinned_by <> ''),
    reason          TEXT    NOT NULL CHECK (reason <> '')
) STRICT;
CREATE INDEX reference_hashes_current ON reference_hashes (stack, prompt_set, pinned_at);

CREATE TABLE stages (
    id                 INTEGER PRIMARY KEY,
    -- The win, and the independent A/B that confirmed it.
    experiment_id      INTEGER NOT NULL UNIQUE REFERENCES experiments (id),
    confirmation_id    INTEGER NOT NULL UNIQUE REFERENCES experiments (id),
    state              TEXT    NOT NULL DEFAULT 'staged' CHECK (state IN ('staged', 'approved', 'rejected', 'expired')),
    base_digest        TEXT    NOT NULL CHECK (length(base_digest) = 64 AND base_digest NOT GLOB '*[^0-9a-f]*'),
    candidate_digest   TEXT    NOT NULL CHECK (length(candidate_digest) = 64 AND candidate_digest NOT GLOB '*[^0-9a-f]*'),
    candidate_profile  TEXT    NOT NULL,
    effect             REAL    NOT NULL,
    interval_low       REAL    NOT NULL,
    interval_high      REAL    NOT NULL CHECK (interval_low <= interval_high),
    noise_floor        REAL    NOT NULL CHECK (noise_floor >= 0),
    created_at         TEXT    NOT NULL CHECK (length(created_at) = 27 AND created_at GLOB '????-??-??T??:??:??.??????Z'),
    decided_at         TEXT             CHECK (decided_at IS NULL OR (length(decided_at) = 27 AND decided_at GLOB '????-??-??T??:??:??.??????Z')),
    decided_by         TEXT             CHECK (decided_by IS NULL OR decided_by <> ''),
    note               TEXT,
    CHECK (experiment_id <> confirmation_id),
    -- Undecided exactly while staged; every decision says who and when.
    CHECK ((state = 'staged') = (decided_at IS NULL)),
    CHECK ((state = 'staged') = (decided_by IS NULL)),
    CHECK (decided_at IS NULL OR decided_at >= created_at),
    -- A rejection or an expiry always says why.
    CHECK (state NOT IN ('rejected', 'expired') OR note IS NOT NULL)
) STRICT;
CREATE INDEX stages_by_state ON stages (state, created_at);
CREATE INDEX stages_by_time ON stages (created_at);
