-- What an approved stage realized on its stack's live server. Once the live
-- server runs an applied stage's profile, the stack's daemon measures the
-- live server (the candidate arm) against a shadow of the profile the stage
-- replaced (the baseline arm) in an ordinary experiment with runs and a
-- verdict, judged like every A/B; this table names those experiments as the
-- stage's realization attempts. The realized effect is the verdict of the
-- first attempt that decided (win, within_noise, loss); one that failed or
-- was too noisy to decide is tried again. Realization experiments are no
-- proposals: the proposers' history, the duplicate checks and a classmate's
-- wins leave them out, and the report counts them apart.
--
-- `realization_notes`: the daemon's latest word on why a stage is not
-- realized (yet): the live server does not run its profile, the stack
-- cannot start a shadow of the replaced one, ... One row per stage,
-- replaced when the reason changes.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.
CREATE TABLE realizations (
    experiment_id  INTEGER PRIMARY KEY REFERENCES experiments (id),
    stage_id       INTEGER NOT NULL REFERENCES stages (id)
) STRICT;
CREATE INDEX realizations_by_stage ON realizations (stage_id);

CREATE TABLE realization_notes (
    stage_id   INTEGER PRIMARY KEY REFERENCES stages (id),
    noted_at   TEXT    NOT NULL CHECK (length(noted_at) = 27 AND noted_at GLOB '????-??-??T??:??:??.??????Z'),
    note       TEXT    NOT NULL CHECK (trim(note) <> '')
) STRICT;
