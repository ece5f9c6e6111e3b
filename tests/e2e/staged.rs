//! Helpers of the crash and concurrency tests: confirmed wins staged through
//! the ledger API (while a daemon may be writing the same ledger), `ledger
//! --check`, and the processes a test's temp dir has running.

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use orchestrator::ledger::{
    CycleOutcome, ExperimentId, Interval, Ledger, NewComposition, NewExperiment, NewRun,
    NewVerdict, RecordedWin, StageId, TimingSource, TokenParts,
};
use orchestrator::menu::MenuId;
use orchestrator::profile::Profile;
use orchestrator::vocab::{Arm, Method, ProposerKind, VerdictKind};
use serde_json::{Value, json};

/// Stages a confirmed win of `candidate` over `base` in the ledger at `db`,
/// as the loop would record one (a cycle, a win, its confirmation, both with
/// ABBA runs, one transaction), while other processes may write too.
pub fn stage_win(db: &Path, base: &Profile, candidate: &Profile) -> StageId {
    let win = Win::default();
    record_win(db, base, candidate, true, &win).expect("a confirmed win is staged")
}

/// What a seeded win is filed under and how good its evidence says it is.
pub struct Win {
    pub menu_id: MenuId,
    pub parameters: Value,
    /// The effect both A/Bs report, and its interval (log ratios).
    pub effect: (f64, f64, f64),
    /// The measured noise floor both verdicts record.
    pub floor: f64,
    /// Each A/B's ABBA blocks, by the candidate's log gap in each: its two
    /// runs are `0.040 · e^(g/2)` and `0.040 · e^(-g/2)` s/token (the
    /// baseline's both 0.050).
    pub candidate_gaps: Vec<f64>,
}

impl Default for Win {
    fn default() -> Win {
        Win {
            menu_id: MenuId::RebalanceTrunkCache,
            parameters: json!({"trunk_fraction": 0.5}),
            effect: (-0.2, -0.25, -0.15),
            floor: 0.02,
            candidate_gaps: vec![0.0],
        }
    }
}

/// [`stage_win`] of `win`'s menu entry, parameters and effect.
pub fn stage_win_as(db: &Path, base: &Profile, candidate: &Profile, win: &Win) -> StageId {
    record_win(db, base, candidate, true, win).expect("a confirmed win is staged")
}

/// A win of `candidate` over `base` that no experiment has confirmed yet:
/// the daemon's next cycle, finding it last, measures its confirmation.
pub fn unconfirmed_win(db: &Path, base: &Profile, candidate: &Profile) {
    record_win(db, base, candidate, false, &Win::default());
}

fn record_win(
    db: &Path,
    base: &Profile,
    candidate: &Profile,
    confirmed: bool,
    win: &Win,
) -> Option<StageId> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = Ledger::open(db).await.unwrap();
        let stage = record_win_on(&ledger, base, candidate, confirmed, win).await;
        ledger.close().await;
        stage
    })
}

/// [`stage_win`] through an open ledger handle (a PostgreSQL one, or one
/// scoped to a stack, whose cycle and stage then carry that stack).
pub async fn stage_win_on(ledger: &Ledger, base: &Profile, candidate: &Profile) -> StageId {
    record_win_on(ledger, base, candidate, true, &Win::default())
        .await
        .expect("a confirmed win is staged")
}

/// [`unconfirmed_win`] of `win` through an open ledger handle (scoped to
/// a stack and class, whose cycle then carries them).
pub async fn unconfirmed_win_on(ledger: &Ledger, base: &Profile, candidate: &Profile, win: &Win) {
    record_win_on(ledger, base, candidate, false, win).await;
}

async fn record_win_on(
    ledger: &Ledger,
    base: &Profile,
    candidate: &Profile,
    confirmed: bool,
    win: &Win,
) -> Option<StageId> {
    let now = Utc::now();
    let mut tx = ledger.begin_write().await.unwrap();
    let cycle = tx.open_cycle(now, ProposerKind::Human).await.unwrap();
    let mut ids: Vec<ExperimentId> = vec![];
    let mut wins: Vec<RecordedWin> = vec![];
    for _ in 0..if confirmed { 2 } else { 1 } {
        let e = tx
            .insert_experiment(&NewExperiment {
                cycle_id: cycle,
                proposal_id: None,
                confirmation_of: ids.first().copied(),
                created_at: now,
                menu_id: win.menu_id,
                parameters: win.parameters.clone(),
                method: Method::Bench,
                base_profile: base.canonical(),
                base_digest: base.digest(),
                candidate_profile: candidate.canonical(),
                candidate_digest: candidate.digest(),
                planner_notes: None,
            })
            .await
            .unwrap();
        let arms = [Arm::Baseline, Arm::Candidate, Arm::Candidate, Arm::Baseline];
        let runs = win.candidate_gaps.iter().flat_map(|g| {
            let candidate = [0.040 * (g / 2.0).exp(), 0.040 * (-g / 2.0).exp()];
            arms.into_iter()
                .zip([0.050, candidate[0], candidate[1], 0.050])
        });
        for (order, (arm, spt)) in runs.enumerate() {
            tx.insert_run(&NewRun {
                experiment_id: e,
                arm,
                order_index: order as u32,
                pair_index: Some(order as u32 / 2),
                started_at: now,
                seconds_per_token: Some(spt),
                timing_source: Some(TimingSource::Engine),
                tokens: Some(8),
                output_hash: Some("00000000deadbeef".into()),
                exit_code: Some(0),
                duration_s: 0.1,
                stderr_tail: String::new(),
                refused: false,
                error: None,
                parts: TokenParts::default(),
                pressure: Default::default(),
            })
            .await
            .unwrap();
        }
        let verdict = NewVerdict {
            kind: VerdictKind::Win,
            decided_at: now,
            effect: Some(win.effect.0),
            interval: Some(Interval {
                low: win.effect.1,
                high: win.effect.2,
            }),
            noise_floor: Some(win.floor),
            floor_is_bound: false,
            pairs: 2 * win.candidate_gaps.len() as u32,
            method: Some("staged by the test".into()),
            reason: None,
        };
        tx.insert_verdict(e, &verdict).await.unwrap();
        ids.push(e);
        wins.push(RecordedWin::of(e, &verdict).unwrap());
    }
    let stage = if confirmed {
        Some(tx.insert_stage(&wins[0], &wins[1], now).await.unwrap())
    } else {
        None
    };
    tx.close_cycle(cycle, &CycleOutcome::Completed, now)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    stage
}

/// Records an attempt at realizing stage `id` that decided nothing, as
/// the daemon records one whose live server was too noisy: a cycle, the
/// realization A/B (the stage's profiles, on the surface) and an
/// `inconclusive` verdict now. Its experiment's id.
pub fn undecided_realization(db: &Path, id: StageId) -> ExperimentId {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = Ledger::open(db).await.unwrap();
        let stage = ledger.stage(id).await.unwrap();
        let original = ledger.experiment(stage.experiment_id).await.unwrap();
        let now = Utc::now();
        let cycle = ledger.open_cycle(now, ProposerKind::Bandit).await.unwrap();
        let e = ledger
            .insert_realization(
                &stage,
                &NewExperiment {
                    cycle_id: cycle,
                    proposal_id: None,
                    confirmation_of: None,
                    created_at: now,
                    menu_id: original.menu_id,
                    parameters: original.parameters.clone(),
                    method: Method::Surface,
                    base_profile: original.base_profile.clone(),
                    base_digest: stage.base_digest.clone(),
                    candidate_profile: original.candidate_profile.clone(),
                    candidate_digest: stage.candidate_digest.clone(),
                    planner_notes: None,
                },
            )
            .await
            .unwrap();
        let verdict = NewVerdict {
            kind: VerdictKind::Inconclusive,
            decided_at: now,
            effect: Some(-0.05),
            interval: Some(Interval {
                low: -0.6,
                high: 0.5,
            }),
            noise_floor: Some(0.5),
            floor_is_bound: true,
            pairs: 2,
            method: Some("seeded by the test".into()),
            reason: Some("the live server was too noisy to decide (seeded by the test)".into()),
        };
        ledger.insert_verdict(e, &verdict).await.unwrap();
        ledger
            .close_cycle(cycle, &CycleOutcome::Completed, now)
            .await
            .unwrap();
        ledger.close().await;
        e
    })
}

/// The live profile with its expert cache changed to `cache_gb`.
pub fn variant(live: &Profile, cache_gb: f64) -> Profile {
    let mut p = live.clone();
    p.memory.cache_gb = cache_gb;
    p
}

/// `orchestrator ledger --check --json` on `config`: (exit code, report).
pub fn check(config: &Path) -> (i32, Value) {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
        .arg("--config")
        .arg(config)
        .args(["ledger", "--check", "--json"])
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ledger --check printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

/// Every stage's (id, state, decided_by) from `stage list --all --json`.
pub fn stages(config: &Path) -> Vec<(i64, String, Option<String>)> {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
        .arg("--config")
        .arg(config)
        .args(["stage", "list", "--all", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut v: Vec<_> = list
        .iter()
        .map(|s| {
            (
                s["id"].as_i64().unwrap(),
                s["state"].as_str().unwrap().to_string(),
                s["decided_by"].as_str().map(str::to_string),
            )
        })
        .collect();
    v.sort();
    v
}

/// A process: pid and its start time (clock ticks since boot), which
/// together name it even if the pid is reused later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub start: u64,
}

fn stat_fields(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state is field 3, starttime field 22 (1-based).
    Some((f.first()?.chars().next()?, f.get(19)?.parse().ok()?))
}

impl Proc {
    /// Still the same, running (not zombie) process.
    pub fn alive(&self) -> bool {
        matches!(stat_fields(self.pid), Some((s, start)) if start == self.start && s != 'Z' && s != 'X')
    }
}

/// Running processes whose command line mentions `needle` (a test's temp
/// dir: the engines it started all name their checkpoint there).
pub fn processes_mentioning(needle: &str, except: &[i32]) -> Vec<(Proc, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if except.contains(&pid) || pid == std::process::id() as i32 {
            continue;
        }
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.contains(needle) {
            continue;
        }
        if let Some((state, start)) = stat_fields(pid)
            && state != 'Z'
            && state != 'X'
        {
            out.push((Proc { pid, start }, cmd));
        }
    }
    out
}

/// Waits until none of `procs` is alive, up to `limit`; returns the living.
pub fn wait_gone(procs: &[Proc], limit: Duration) -> Vec<Proc> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left: Vec<Proc> = procs.iter().copied().filter(Proc::alive).collect();
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Records the staged win `composite` as the composition of `parts` (best
/// first), as the loop's composition cycle does.
pub fn link_composite(db: &Path, composite: StageId, parts: &[StageId]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = Ledger::open(db).await.unwrap();
        let stage = ledger.stage(composite).await.unwrap();
        let experiment = ledger.experiment(stage.experiment_id).await.unwrap();
        ledger
            .insert_composition(&NewComposition {
                cycle_id: experiment.cycle_id,
                created_at: Utc::now(),
                base_digest: stage.base_digest.clone(),
                experiment_id: Some(stage.experiment_id),
                refusal: None,
                parts: parts.to_vec(),
            })
            .await
            .unwrap();
        ledger.close().await;
    });
}
