-- Mirror of ../20261201220004_stages_by_stack_time.sql.
CREATE INDEX stages_by_stack_time ON stages (stack, created_at);
