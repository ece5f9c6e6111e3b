//! The ledger's read queries by name, and SQLite's plan for each, so a test
//! (and the report's benchmark) can assert that they use indexes.

use serde::Serialize;
use sqlx::Row;

use super::{
    Conn, Ledger, Result, claims, compositions, cycles, engine_time, experiments, noise, proposals,
    references, report, runs, stages, verdicts, waits,
};

/// A query whose plan matters because it runs every cycle or every report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NamedQuery {
    AbortRunningCycles,
    RecentCycles,
    CycleVerdicts,
    RecentExperiments,
    DuplicateDecided,
    PlannerRefused,
    DecidedOn,
    PlannerRefusalsOn,
    Confirmations,
    ClassmateWins,
    ExperimentRuns,
    ExperimentVerdict,
    LatestNoiseFloor,
    CurrentReferenceHash,
    StagesByState,
    AllStages,
    CompositionsOn,
    CompositeParts,
    StagedCompositesOfPart,
    ReportCycles,
    ReportUnownedCycles,
    ReportVerdicts,
    ReportUnownedVerdicts,
    ReportProposals,
    ReportUnownedProposals,
    ReportRuns,
    ReportUnownedRuns,
    ReportNoiseFloors,
    ReportStages,
    ReportUnownedStages,
    ReportLeverRuns,
    ReportStacks,
    ReportLatestCycle,
    ReportLatestUnownedCycle,
    EngineRuns,
    ReportEngineRuns,
    ReportUnownedEngineRuns,
    RecentWaits,
    RecentLiveMetric,
}

impl NamedQuery {
    pub const ALL: &'static [NamedQuery] = &[
        NamedQuery::AbortRunningCycles,
        NamedQuery::RecentCycles,
        NamedQuery::CycleVerdicts,
        NamedQuery::RecentExperiments,
        NamedQuery::DuplicateDecided,
        NamedQuery::PlannerRefused,
        NamedQuery::DecidedOn,
        NamedQuery::PlannerRefusalsOn,
        NamedQuery::Confirmations,
        NamedQuery::ClassmateWins,
        NamedQuery::ExperimentRuns,
        NamedQuery::ExperimentVerdict,
        NamedQuery::LatestNoiseFloor,
        NamedQuery::CurrentReferenceHash,
        NamedQuery::StagesByState,
        NamedQuery::AllStages,
        NamedQuery::CompositionsOn,
        NamedQuery::CompositeParts,
        NamedQuery::StagedCompositesOfPart,
        NamedQuery::ReportCycles,
        NamedQuery::ReportUnownedCycles,
        NamedQuery::ReportVerdicts,
        NamedQuery::ReportUnownedVerdicts,
        NamedQuery::ReportProposals,
        NamedQuery::ReportUnownedProposals,
        NamedQuery::ReportRuns,
        NamedQuery::ReportUnownedRuns,
        NamedQuery::ReportNoiseFloors,
        NamedQuery::ReportStages,
        NamedQuery::ReportUnownedStages,
        NamedQuery::ReportLeverRuns,
        NamedQuery::ReportStacks,
        NamedQuery::ReportLatestCycle,
        NamedQuery::ReportLatestUnownedCycle,
        NamedQuery::EngineRuns,
        NamedQuery::ReportEngineRuns,
        NamedQuery::ReportUnownedEngineRuns,
        NamedQuery::RecentWaits,
        NamedQuery::RecentLiveMetric,
    ];

    /// The exact SQL the ledger runs for it.
    pub fn sql(self) -> &'static str {
        match self {
            NamedQuery::AbortRunningCycles => cycles::SQL_ABORT_RUNNING,
            NamedQuery::RecentCycles => cycles::SQL_RECENT_CYCLES,
            NamedQuery::CycleVerdicts => cycles::SQL_CYCLE_VERDICTS,
            NamedQuery::RecentExperiments => experiments::SQL_RECENT_EXPERIMENTS,
            NamedQuery::DuplicateDecided => experiments::SQL_DUPLICATE_DECIDED,
            NamedQuery::PlannerRefused => proposals::SQL_PLANNER_REFUSED,
            NamedQuery::DecidedOn => experiments::SQL_DECIDED_ON,
            NamedQuery::PlannerRefusalsOn => proposals::SQL_PLANNER_REFUSALS_ON,
            NamedQuery::Confirmations => experiments::SQL_CONFIRMATIONS,
            NamedQuery::ClassmateWins => claims::SQL_CLASSMATE_WINS,
            NamedQuery::ExperimentRuns => runs::SQL_EXPERIMENT_RUNS,
            NamedQuery::ExperimentVerdict => verdicts::SQL_EXPERIMENT_VERDICT,
            NamedQuery::LatestNoiseFloor => noise::SQL_LATEST_NOISE_FLOOR,
            NamedQuery::CurrentReferenceHash => references::SQL_CURRENT_REFERENCE,
            NamedQuery::StagesByState => stages::SQL_STAGES_BY_STATE,
            NamedQuery::AllStages => stages::SQL_ALL_STAGES,
            NamedQuery::CompositionsOn => compositions::SQL_COMPOSITIONS_ON,
            NamedQuery::CompositeParts => compositions::SQL_PARTS_OF_EXPERIMENT,
            NamedQuery::StagedCompositesOfPart => compositions::SQL_STAGED_COMPOSITES_OF_PART,
            NamedQuery::ReportCycles => report::SQL_REPORT_CYCLES,
            NamedQuery::ReportUnownedCycles => report::SQL_REPORT_UNOWNED_CYCLES,
            NamedQuery::ReportVerdicts => report::SQL_REPORT_VERDICTS,
            NamedQuery::ReportUnownedVerdicts => report::SQL_REPORT_UNOWNED_VERDICTS,
            NamedQuery::ReportProposals => report::SQL_REPORT_PROPOSALS,
            NamedQuery::ReportUnownedProposals => report::SQL_REPORT_UNOWNED_PROPOSALS,
            NamedQuery::ReportRuns => report::SQL_REPORT_RUNS,
            NamedQuery::ReportUnownedRuns => report::SQL_REPORT_UNOWNED_RUNS,
            NamedQuery::ReportNoiseFloors => report::SQL_REPORT_NOISE_FLOORS,
            NamedQuery::ReportStages => report::SQL_REPORT_STAGES,
            NamedQuery::ReportUnownedStages => report::SQL_REPORT_UNOWNED_STAGES,
            NamedQuery::ReportLeverRuns => report::SQL_REPORT_LEVER_RUNS,
            NamedQuery::ReportStacks => report::SQL_REPORT_STACKS,
            NamedQuery::ReportLatestCycle => report::SQL_REPORT_LATEST_CYCLE,
            NamedQuery::ReportLatestUnownedCycle => report::SQL_REPORT_LATEST_UNOWNED_CYCLE,
            NamedQuery::EngineRuns => engine_time::SQL_ENGINE_RUNS,
            NamedQuery::ReportEngineRuns => report::SQL_REPORT_ENGINE_RUNS,
            NamedQuery::ReportUnownedEngineRuns => report::SQL_REPORT_UNOWNED_ENGINE_RUNS,
            NamedQuery::RecentWaits => waits::SQL_RECENT_WAITS,
            NamedQuery::RecentLiveMetric => cycles::SQL_RECENT_LIVE_METRIC,
        }
    }
}

impl Ledger {
    /// SQLite's `EXPLAIN QUERY PLAN` for a named query, one step per line
    /// (parameters unbound, which SQLite plans as NULL).
    pub async fn query_plan(&self, query: NamedQuery) -> Result<String> {
        let op = "explain a query";
        let mut c = self.conn(op).await?;
        // PostgreSQL cannot plan a statement with unbound parameters, and its
        // plans for tiny test tables are scans by design.
        let Conn::Sqlite(c) = c.conn() else {
            return Err(self.ctx.not_on_postgres("the query-plan check"));
        };
        let sql = format!("EXPLAIN QUERY PLAN {}", query.sql());
        let rows = sqlx::query(&sql)
            .fetch_all(&mut *c)
            .await
            .map_err(self.ctx.err(op))?;
        let mut lines = Vec::with_capacity(rows.len());
        for row in rows {
            let detail: String = row.try_get("detail").map_err(self.ctx.err(op))?;
            lines.push(detail);
        }
        Ok(lines.join("\n"))
    }
}
