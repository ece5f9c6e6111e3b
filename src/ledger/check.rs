//! `orchestrator ledger --check`: the ledger's invariants, read back from the
//! file. The schema's CHECK and FOREIGN KEY constraints keep a working
//! program from writing an illegal row; this re-reads what is there, so a
//! damaged file, a hand edit, a bug that bypassed a constraint or a crash
//! between two writes is found and named by row id.
//!
//! The rules: SQLite's own `PRAGMA integrity_check` and `foreign_key_check`;
//! every cycle is closed (a `running` cycle is legal only while a daemon
//! holds the ledger, and then only the newest running one); every closed cycle has a
//! verdict and every experiment of a closed cycle has its verdict; no run
//! without its experiment; no verdict without runs unless it is `rejected`
//! or `failed`; stage states legal and every stage backed by a win and its
//! winning confirmation; no stage left `staged` whose profile is already the
//! live one (an approval interrupted between writing the file and recording
//! the decision); every confirmation claim's experiment confirms its win;
//! a host apply (`stage_applies`) only of a stage approved for the class,
//! and never for the stage's own stack.

use serde::Serialize;
use sqlx::Row;

use super::error::Ctx;
use super::{Backend, Conn};
use super::{Ledger, Result};
use crate::vocab::Digest;

/// Which rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// `PRAGMA integrity_check` found damage in the file.
    Integrity,
    /// A row refers to a row that does not exist.
    ForeignKey,
    /// A cycle is still `running` with no daemon holding the ledger, or
    /// beside a newer running cycle.
    UnclosedCycle,
    /// A cycle's status is not one the program knows.
    CycleStatus,
    /// A closed cycle without any verdict, or an experiment of a closed
    /// cycle without its verdict.
    MissingVerdict,
    /// A run whose experiment does not exist.
    RunWithoutExperiment,
    /// A measured verdict (not `rejected` or `failed`) with no run behind it.
    VerdictWithoutRuns,
    /// A stage whose state or decision fields are not a legal combination.
    StageState,
    /// A stage not backed by a win and its winning confirmation.
    StageEvidence,
    /// A stage still `staged` although the live profile already is its
    /// candidate: an approval wrote the file and died before recording it.
    StageLive,
    /// A win's confirmation claim names an experiment that does not
    /// confirm that win.
    ConfirmationClaim,
    /// A host's apply of a stage that was not approved for its class, or
    /// recorded for the stage's own stack (whose apply is the stage's own).
    ClassApply,
}

/// One broken rule, with the ids of the rows involved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    pub rule: Rule,
    /// The row the message is about (a cycle, run, verdict, stage ... id).
    pub id: Option<i64>,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

fn v(rule: Rule, id: Option<i64>, message: String) -> Violation {
    Violation { rule, id, message }
}

/// What the check knows from outside the database.
#[derive(Debug, Clone, Default)]
pub struct CheckContext {
    /// A daemon holds the ledger now (its lock is taken), so its newest
    /// cycle may legally be `running`.
    pub daemon_running: bool,
    /// On a ledger several stacks share: the stacks whose daemon holds its
    /// lock now (each may have one running cycle, its newest). `None`:
    /// `daemon_running` speaks for every stack (one daemon per ledger).
    pub daemon_stacks: Option<Vec<String>>,
    /// The digest of the live profile, when it could be read.
    pub live_digest: Option<Digest>,
}

async fn strings(c: Conn<'_>, cx: &Ctx, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
    on_db!(c, |c| {
        let rows = sqlx::query(sql)
            .fetch_all(&mut *c)
            .await
            .map_err(cx.err("check the ledger"))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut cols = Vec::new();
            for i in 0..row.len() {
                // Every column read as text; integers and NULLs convert.
                let text: Option<String> = row
                    .try_get::<Option<String>, _>(i)
                    .or_else(|_| {
                        row.try_get::<Option<i64>, _>(i)
                            .map(|n| n.map(|n| n.to_string()))
                    })
                    .map_err(cx.err("check the ledger"))?;
                cols.push(text);
            }
            out.push(cols);
        }
        Ok(out)
    })
}

fn num(s: &Option<String>) -> Option<i64> {
    s.as_deref().and_then(|s| s.parse().ok())
}

fn text(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("NULL")
}

/// SQLite's own check of its file. PostgreSQL has no counterpart to run
/// from a client (the server checksums its pages; `amcheck` needs a
/// superuser), so there the rule is the server's.
async fn integrity(mut c: Conn<'_>, cx: &Ctx, out: &mut Vec<Violation>) {
    if cx.backend == Backend::Postgres {
        return;
    }
    match strings(c.re(), cx, "PRAGMA integrity_check").await {
        Ok(rows) => {
            for row in rows {
                let msg = text(&row[0]).to_string();
                if msg != "ok" {
                    out.push(v(Rule::Integrity, None, format!("integrity_check: {msg}")));
                }
            }
        }
        Err(e) => out.push(v(
            Rule::Integrity,
            None,
            format!("integrity_check could not run: {e}"),
        )),
    }
}

const SQL_RUN_ORPHANS: &str = "SELECT r.id, r.experiment_id FROM runs r \
     LEFT JOIN experiments e ON e.id = r.experiment_id WHERE e.id IS NULL ORDER BY r.id";

const SQL_RUNNING: &str = "SELECT id, stack FROM cycles WHERE status = 'running' ORDER BY id";

const SQL_BAD_STATUS: &str = "SELECT id, status FROM cycles \
     WHERE status NOT IN ('running', 'completed', 'failed', 'aborted') ORDER BY id";

const SQL_CYCLES_WITHOUT_VERDICT: &str = "SELECT c.id, c.status FROM cycles c \
     WHERE c.status <> 'running' \
       AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.cycle_id = c.id) ORDER BY c.id";

const SQL_EXPERIMENTS_WITHOUT_VERDICT: &str = "SELECT e.id, e.cycle_id FROM experiments e \
     JOIN cycles c ON c.id = e.cycle_id \
     WHERE c.status <> 'running' \
       AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.experiment_id = e.id) ORDER BY e.id";

const SQL_VERDICTS_WITHOUT_RUNS: &str = "SELECT v.id, v.experiment_id, v.kind FROM verdicts v \
     WHERE v.kind NOT IN ('rejected', 'failed') \
       AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.experiment_id = v.experiment_id) \
     ORDER BY v.id";

const SQL_BAD_STAGE_STATES: &str = "SELECT id, state FROM stages \
     WHERE state NOT IN ('staged', 'approved', 'rejected', 'expired') \
        OR ((state = 'staged') <> (decided_at IS NULL)) \
        OR ((state = 'staged') <> (decided_by IS NULL)) \
        OR (state IN ('rejected', 'expired') AND note IS NULL) \
     ORDER BY id";

const SQL_STAGE_EVIDENCE: &str = "SELECT s.id, s.experiment_id, s.confirmation_id, \
       c.confirmation_of, ve.kind, vc.kind FROM stages s \
     LEFT JOIN experiments c ON c.id = s.confirmation_id \
     LEFT JOIN verdicts ve ON ve.experiment_id = s.experiment_id \
     LEFT JOIN verdicts vc ON vc.experiment_id = s.confirmation_id \
     WHERE c.confirmation_of IS DISTINCT FROM s.experiment_id \
        OR ve.kind IS DISTINCT FROM 'win' OR vc.kind IS DISTINCT FROM 'win' \
     ORDER BY s.id";

/// Staged stages whose candidate is already the live profile, unless an
/// approved stage with that same candidate explains it: two wins can reach
/// one profile (other parameters, another base), and once one is approved
/// the other is simply out of date, not an approval cut short. (`stage
/// approve` now expires such a stage in the approval's own transaction;
/// ledgers written before that can still hold one.)
///
/// The live profile is the checking host's: on a handle scoped to its stack
/// (`ledger --check` always is) only that stack's stages, and those no stack
/// owns yet, are compared with it; identical hosts reach identical profiles.
const SQL_STAGED_BUT_LIVE: &str = "SELECT id FROM stages WHERE state = 'staged' AND candidate_digest = $1 \
       AND (CAST($2 AS TEXT) IS NULL OR stack IS NULL OR stack = $2) \
       AND NOT EXISTS (SELECT 1 FROM stages a WHERE a.state = 'approved' AND a.candidate_digest = $1 \
         AND (CAST($2 AS TEXT) IS NULL OR a.stack IS NULL OR a.stack = $2)) \
     ORDER BY id";

async fn cycles(
    mut c: Conn<'_>,
    cx: &Ctx,
    ctx: &CheckContext,
    out: &mut Vec<Violation>,
) -> Result<()> {
    let running: Vec<(i64, Option<String>)> = strings(c.re(), cx, SQL_RUNNING)
        .await?
        .iter()
        .filter_map(|r| Some((num(&r[0])?, r[1].clone())))
        .collect();
    // Whether the daemon of a running cycle's stack holds its lock now.
    let held = |stack: &Option<String>| match (&ctx.daemon_stacks, stack) {
        (Some(live), Some(s)) => live.contains(s),
        (Some(_), None) | (None, _) => ctx.daemon_running,
    };
    for (id, stack) in &running {
        let id = *id;
        // A daemon runs one cycle at a time: its stack's newest running
        // cycle is the current one, any older one was left by a dead process.
        let newest = running
            .iter()
            .filter(|(_, s)| s == stack)
            .map(|(i, _)| *i)
            .max();
        if !held(stack) {
            out.push(v(
                Rule::UnclosedCycle,
                Some(id),
                match stack {
                    Some(s) if ctx.daemon_stacks.is_some() => format!(
                        "cycle {id} of stack {s:?} is `running` but no daemon of that stack holds its lock: \
                         a process died mid-cycle; the stack's next `orchestrator run` closes it as aborted"
                    ),
                    _ => format!(
                        "cycle {id} is `running` but no daemon holds the ledger: a process died mid-cycle; \
                         the next `orchestrator run` closes it as aborted"
                    ),
                },
            ));
        } else if Some(id) != newest {
            out.push(v(
                Rule::UnclosedCycle,
                Some(id),
                format!(
                    "cycle {id} is `running` beside the newer running cycle {}; a daemon runs one \
                     cycle at a time, so it was left open by a process that died",
                    newest.unwrap_or_default()
                ),
            ));
        }
    }
    for row in strings(c.re(), cx, SQL_BAD_STATUS).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::CycleStatus,
            id,
            format!(
                "cycle {} has status {:?}, not running, completed, failed or aborted",
                id.unwrap_or_default(),
                text(&row[1])
            ),
        ));
    }
    for row in strings(c.re(), cx, SQL_CYCLES_WITHOUT_VERDICT).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::MissingVerdict,
            id,
            format!(
                "cycle {} is {} without any verdict; every cycle ends in one",
                id.unwrap_or_default(),
                text(&row[1])
            ),
        ));
    }
    for row in strings(c.re(), cx, SQL_EXPERIMENTS_WITHOUT_VERDICT).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::MissingVerdict,
            id,
            format!(
                "experiment {} of the closed cycle {} has no verdict; every experiment has exactly one",
                id.unwrap_or_default(),
                text(&row[1])
            ),
        ));
    }
    Ok(())
}

async fn evidence(mut c: Conn<'_>, cx: &Ctx, out: &mut Vec<Violation>) -> Result<()> {
    for row in strings(c.re(), cx, SQL_RUN_ORPHANS).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::RunWithoutExperiment,
            id,
            format!(
                "run {} belongs to experiment {}, which does not exist",
                id.unwrap_or_default(),
                text(&row[1])
            ),
        ));
    }
    // Every other dangling reference (runs are reported above by name).
    // PostgreSQL enforces every foreign key, always: nothing to look for.
    let dangling = match cx.backend {
        Backend::Sqlite => strings(c.re(), cx, "PRAGMA foreign_key_check").await?,
        Backend::Postgres => Vec::new(),
    };
    for row in dangling {
        let table = text(&row[0]).to_string();
        if table == "runs" && text(&row[2]) == "experiments" {
            continue;
        }
        let id = num(&row[1]);
        out.push(v(
            Rule::ForeignKey,
            id,
            format!(
                "{table} row {} refers to a row of {} that does not exist",
                text(&row[1]),
                text(&row[2])
            ),
        ));
    }
    for row in strings(c.re(), cx, SQL_VERDICTS_WITHOUT_RUNS).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::VerdictWithoutRuns,
            id,
            format!(
                "verdict {} ({}) of experiment {} has no run behind it; only `rejected` and `failed` may",
                id.unwrap_or_default(),
                text(&row[2]),
                text(&row[1])
            ),
        ));
    }
    Ok(())
}

const SQL_BAD_CLAIMS: &str = "SELECT k.win_experiment_id, k.confirmation_id, e.confirmation_of \
     FROM confirmation_claims k JOIN experiments e ON e.id = k.confirmation_id \
     WHERE e.confirmation_of IS DISTINCT FROM k.win_experiment_id ORDER BY k.win_experiment_id";

const SQL_BAD_CLASS_APPLIES: &str = "SELECT a.stage_id, a.stack, s.stack, s.approved_for_class \
     FROM stage_applies a JOIN stages s ON s.id = a.stage_id \
     WHERE s.approved_for_class IS NULL OR a.stack = s.stack ORDER BY a.stage_id, a.stack";

/// The claims and the class applies of hosts of one class.
async fn class(mut c: Conn<'_>, cx: &Ctx, out: &mut Vec<Violation>) -> Result<()> {
    for row in strings(c.re(), cx, SQL_BAD_CLAIMS).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::ConfirmationClaim,
            id,
            format!(
                "the confirmation claim on win {} names experiment {}, which confirms {}, not that win",
                text(&row[0]),
                text(&row[1]),
                text(&row[2])
            ),
        ));
    }
    for row in strings(c.re(), cx, SQL_BAD_CLASS_APPLIES).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::ClassApply,
            id,
            format!(
                "stage {} records an apply by stack {} but was approved for no class it shares \
                 (its stack {}, approved for class {}); a stage's own stack records its apply \
                 on the stage",
                text(&row[0]),
                text(&row[1]),
                text(&row[2]),
                text(&row[3])
            ),
        ));
    }
    Ok(())
}

async fn stages(
    mut c: Conn<'_>,
    cx: &Ctx,
    ctx: &CheckContext,
    out: &mut Vec<Violation>,
) -> Result<()> {
    for row in strings(c.re(), cx, SQL_BAD_STAGE_STATES).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::StageState,
            id,
            format!(
                "stage {} is {:?} with decision fields that do not fit: staged means undecided, \
                 every decision says who and when, a rejection or expiry says why",
                id.unwrap_or_default(),
                text(&row[1])
            ),
        ));
    }
    for row in strings(c.re(), cx, SQL_STAGE_EVIDENCE).await? {
        let id = num(&row[0]);
        out.push(v(
            Rule::StageEvidence,
            id,
            format!(
                "stage {} is not backed by its evidence: experiment {} verdict {}, confirmation {} \
                 (confirms {}) verdict {}; a stage needs a win confirmed by a second win",
                id.unwrap_or_default(),
                text(&row[1]),
                text(&row[4]),
                text(&row[2]),
                text(&row[3]),
                text(&row[5])
            ),
        ));
    }
    if let Some(live) = &ctx.live_digest {
        let ids: Vec<i64> = on_db!(c, |c| sqlx::query_scalar(SQL_STAGED_BUT_LIVE)
            .bind(live)
            .bind(cx.stack())
            .fetch_all(c)
            .await
            .map_err(cx.err("check the ledger"))?);
        for id in ids {
            out.push(v(
                Rule::StageLive,
                Some(id),
                format!(
                    "stage {id} is still staged but the live profile already is its candidate \
                     ({}): an approval was interrupted after writing the file; run \
                     `orchestrator stage approve {id}` to record it",
                    live.short()
                ),
            ));
        }
    }
    Ok(())
}

impl Ledger {
    /// Every broken invariant, in rule order (empty when consistent). Only a
    /// failure to read the ledger at all is an error; damage that stops a
    /// single rule from running is itself reported as a violation.
    pub async fn check(&self, ctx: &CheckContext) -> Result<Vec<Violation>> {
        // One read transaction: a consistent snapshot while a daemon writes
        // (else a cycle closed and a new one opened between two queries
        // would look like two running cycles).
        let mut tx = self
            .pool
            .begin_read()
            .await
            .map_err(self.ctx.err("check the ledger"))?;
        let cx = &self.ctx;
        let mut out = Vec::new();
        integrity(tx.conn(), cx, &mut out).await;
        if out.iter().any(|v| v.message.contains("could not run")) {
            return Ok(out);
        }
        let results = [
            ("cycles", cycles(tx.conn(), cx, ctx, &mut out).await),
            ("runs and verdicts", evidence(tx.conn(), cx, &mut out).await),
            ("stages", stages(tx.conn(), cx, ctx, &mut out).await),
            (
                "claims and class applies",
                class(tx.conn(), cx, &mut out).await,
            ),
        ];
        for (what, result) in results {
            if let Err(e) = result {
                out.push(v(
                    Rule::Integrity,
                    None,
                    format!("the {what} could not be checked: {e}"),
                ));
            }
        }
        Ok(out)
    }
}
