-- Manual experiments (`orchestrator compare`): see the SQLite migration of
-- the same version. PostgreSQL changes the CHECK in place.
--
-- NEVER edit this file once a ledger has applied it; add a new migration.

ALTER TABLE experiments DROP CONSTRAINT experiments_menu_id_check;
ALTER TABLE experiments ADD CONSTRAINT experiments_menu_id_check
    CHECK (menu_id IN ('rerank_pins', 'deepen_warm_set', 'stage_speculative', 'rebalance_trunk_cache', 'remeasure', 'manual'));
-- No proposer chose a manual experiment.
ALTER TABLE experiments ADD CONSTRAINT experiments_manual_unproposed
    CHECK (menu_id <> 'manual' OR proposal_id IS NULL);
