-- Mirror of ../20261201210001_stacks.sql.
ALTER TABLE cycles ADD COLUMN stack TEXT CHECK (stack IS NULL OR stack <> '');
ALTER TABLE cycles ADD COLUMN class TEXT CHECK (class IS NULL OR class <> '');
CREATE INDEX cycles_by_stack ON cycles (stack, started_at);
ALTER TABLE stages ADD COLUMN stack TEXT CHECK (stack IS NULL OR stack <> '');
CREATE INDEX stages_by_stack ON stages (stack, state, created_at);
