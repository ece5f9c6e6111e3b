//! Every report query walks an index: `EXPLAIN QUERY PLAN` shows no full
//! `SCAN` of a table and no temporary sort, on an empty ledger and on the
//! fixture (SQLite may plan differently once tables hold rows).

use crate::report_fixture;
use orchestrator::ledger::{Ledger, NamedQuery};

const REPORT_QUERIES: &[(NamedQuery, &str)] = &[
    (NamedQuery::ReportCycles, "cycles_by_stack"),
    (NamedQuery::ReportUnownedCycles, "cycles_by_stack"),
    (NamedQuery::ReportVerdicts, "cycles_by_stack"),
    (NamedQuery::ReportUnownedVerdicts, "cycles_by_stack"),
    (NamedQuery::ReportProposals, "cycles_by_stack"),
    (NamedQuery::ReportUnownedProposals, "cycles_by_stack"),
    (NamedQuery::ReportRuns, "experiments_by_time"),
    (NamedQuery::ReportUnownedRuns, "experiments_by_time"),
    (NamedQuery::ReportNoiseFloors, "noise_floors_by_stack"),
    (NamedQuery::ReportStages, "stages_by_stack_time"),
    (NamedQuery::ReportUnownedStages, "stages_by_stack_time"),
    (NamedQuery::ReportLeverRuns, "sqlite_autoindex_runs_1"),
    (NamedQuery::ReportStacks, "cycles_by_stack"),
    (NamedQuery::ReportLatestCycle, "cycles_by_stack"),
    (NamedQuery::ReportLatestUnownedCycle, "cycles_by_stack"),
];

async fn check(ledger: &Ledger, when: &str) {
    for &(q, index) in REPORT_QUERIES {
        let plan = ledger.query_plan(q).await.unwrap();
        for line in plan.lines() {
            let full_scan = line.starts_with("SCAN ") && !line.contains(" USING ");
            assert!(!full_scan, "{q:?} ({when}) scans a whole table:\n{plan}");
            assert!(
                !line.contains("TEMP B-TREE"),
                "{q:?} ({when}) sorts rows:\n{plan}"
            );
        }
        assert!(
            plan.contains(index),
            "{q:?} ({when}) does not use {index}:\n{plan}"
        );
    }
    assert!(
        ledger
            .query_plan(NamedQuery::ReportRuns)
            .await
            .unwrap()
            .contains("sqlite_autoindex_runs_1"),
        "runs must be reached by experiment id"
    );
}

#[test]
fn report_queries_use_indexes() {
    // The fixture site runs its own runtime, so build it before this one.
    let site = report_fixture::Site::new(true);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let empty = Ledger::open_in_memory().await.unwrap();
        check(&empty, "empty ledger").await;
        let filled = Ledger::open(site.ledger_path()).await.unwrap();
        check(&filled, "fixture ledger").await;
        filled.close().await;
    });
}
