//! A fixed week of the loop (2026-W47), written through the ledger API with
//! fixed timestamps, for the report's snapshot, browser and plan tests.
//!
//! It holds one of everything the report shows: wins, a confirmed and
//! staged win, an approved stage from the week before, a rejected stage,
//! refusals (within noise, a hash mismatch), failures (an unreachable model
//! whose error quotes a bearer token, a corrupt bench run, a SIGTERM), model
//! and bandit proposals with retries and a duplicate, measured parts of a
//! token on every valid run (for the projection), and a noise floor and a baseline that both shift mid-week.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, NaiveDate, Utc};
use orchestrator::ledger::{
    CycleId, CycleOutcome, ExperimentId, Interval, Ledger, NewExperiment, NewNoiseFloor,
    NewObservation, NewProposal, NewRun, NewVerdict, ProposalId, ProposalRejection, RecordedWin,
    StageDecision, TimingSource, TokenParts, WriteTx,
};
use orchestrator::menu::MenuId;
use orchestrator::vocab::{Arm, Digest, Method, ProposerKind, VerdictKind};
use serde_json::{Value, json};

/// The bearer token one stored error quotes; no report may show it.
pub const LEAKED_TOKEN: &str = "sk-live-abcdefghijklmnop";
/// A credential quoted in a stage note.
pub const NOTE_TOKEN: &str = "abc123xyz";

/// Monday of 2026-W47 plus `day` days and `hour` hours, UTC.
pub fn t(day: i64, hour: i64) -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(2026, 11, 16)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        + Duration::days(day)
        + Duration::hours(hour)
}

pub fn live() -> Digest {
    Digest::of(b"live profile")
}

fn old_base() -> Digest {
    Digest::of(b"last week's live profile")
}

fn candidate(menu: MenuId, params: &Value) -> Digest {
    Digest::of(format!("{menu} {params}").as_bytes())
}

/// A deterministic wiggle in [-0.5, 0.5).
fn wiggle(i: u32) -> f64 {
    ((f64::from(i) * 12.9898).sin() * 43758.5453).fract() - 0.5
}

/// The live profile's speed: it drops on Wednesday noon (a background job
/// ended), which the baseline change-point test should flag.
fn level(at: DateTime<Utc>) -> f64 {
    if at < t(2, 12) { 1.30 } else { 1.18 }
}

const METHOD: &str = "paired log ratios, anytime-valid confidence sequence (fixture)";

/// What one experiment measured and decided.
struct Exp {
    menu: MenuId,
    params: Value,
    base: Digest,
    kind: VerdictKind,
    effect: Option<f64>,
    floor: f64,
    reason: Option<&'static str>,
    /// The candidate's runs are refused (a hash mismatch).
    refused: bool,
}

impl Exp {
    fn new(menu: MenuId, params: Value, kind: VerdictKind, effect: Option<f64>) -> Exp {
        Exp {
            menu,
            params,
            base: live(),
            kind,
            effect,
            floor: 0.01,
            reason: None,
            refused: false,
        }
    }
}

struct Fill<'a> {
    tx: &'a mut WriteTx,
    seq: u32,
    /// Whether runs carry measured parts (tinyk3 does; kimi-k3-in-c and
    /// llama-server do not).
    parts: bool,
}

impl Fill<'_> {
    async fn cycle(&mut self, at: DateTime<Utc>, proposer: ProposerKind) -> CycleId {
        let c = self.tx.open_cycle(at, proposer).await.unwrap();
        self.seq += 1;
        let s = f64::from(self.seq);
        self.tx
            .insert_observation(&NewObservation {
                cycle_id: c,
                observed_at: at,
                metrics: json!({
                    "seconds_per_token": level(at),
                    "far_hit_share": 0.10 + s / 200.0,
                }),
                heat: None,
                live_profile_digest: live(),
                base_profile_digest: live(),
            })
            .await
            .unwrap();
        c
    }

    async fn proposal(
        &mut self,
        cycle: CycleId,
        proposer: ProposerKind,
        attempt: u32,
        at: DateTime<Utc>,
        parsed: Option<Value>,
        rejection: Option<(&str, &str)>,
    ) -> ProposalId {
        self.tx
            .insert_proposal(&NewProposal {
                cycle_id: cycle,
                proposer,
                attempt,
                created_at: at,
                prompt: (proposer == ProposerKind::Model).then(|| "choose one experiment".into()),
                raw_answer: parsed.as_ref().map(Value::to_string),
                parsed,
                rejection: rejection.map(|(kind, reason)| ProposalRejection {
                    kind: kind.into(),
                    reason: reason.into(),
                }),
                note: None,
            })
            .await
            .unwrap()
    }

    async fn experiment(
        &mut self,
        cycle: CycleId,
        proposal: Option<ProposalId>,
        confirmation_of: Option<ExperimentId>,
        at: DateTime<Utc>,
        e: &Exp,
    ) -> ExperimentId {
        let id = self
            .tx
            .insert_experiment(&NewExperiment {
                cycle_id: cycle,
                proposal_id: proposal,
                confirmation_of,
                created_at: at,
                menu_id: e.menu,
                parameters: e.params.clone(),
                method: Method::Bench,
                base_profile: format!("# base {}\n", e.base.short()),
                base_digest: e.base.clone(),
                candidate_profile: format!("# {} {}\n", e.menu, e.params),
                candidate_digest: candidate(e.menu, &e.params),
                planner_notes: None,
            })
            .await
            .unwrap();
        let measured = e.kind != VerdictKind::Failed;
        let pairs = if measured { 4 } else { 0 };
        let mut order = 0;
        let effect = e.effect.unwrap_or(0.0);
        let with_parts = self.parts;
        let mut run = |arm: Arm, pair: Option<u32>, spt: Option<f64>, refused: bool| {
            let r = NewRun {
                experiment_id: id,
                arm,
                order_index: order,
                pair_index: pair,
                started_at: at + Duration::seconds(i64::from(order) * 30),
                seconds_per_token: spt,
                timing_source: spt.map(|_| TimingSource::Engine),
                tokens: Some(24),
                output_hash: Some(
                    if refused {
                        "9f3a00000000beef"
                    } else {
                        "1c2d00000000cafe"
                    }
                    .into(),
                ),
                exit_code: Some(if measured { 0 } else { 4 }),
                duration_s: 30.0,
                stderr_tail: String::new(),
                refused,
                error: (!measured).then(|| "exit code 4: an expert failed to load".to_string()),
                parts: spt
                    .filter(|_| with_parts && !refused)
                    .map_or_else(TokenParts::default, |s| parts(e.menu, arm, s, effect)),
                pressure: Default::default(),
            };
            order += 1;
            r
        };
        let mut runs = vec![run(
            Arm::Warmup,
            None,
            measured.then_some(level(at) * 1.2),
            false,
        )];
        for p in 0..pairs {
            let b = level(at) * (1.0 + 0.01 * wiggle(self.seq * 10 + p));
            let c = b * e.effect.unwrap_or(0.0).exp();
            // The daemon's own run order.
            for arm in orchestrator::judge::pair_order(p as usize) {
                let refused = arm == Arm::Candidate && e.refused;
                let spt = match arm {
                    _ if refused => None,
                    Arm::Baseline => Some(b),
                    _ => Some(c),
                };
                runs.push(run(arm, Some(p), spt, refused));
            }
        }
        if !measured {
            runs.truncate(1);
        }
        for r in &runs {
            self.tx.insert_run(r).await.unwrap();
        }
        let stats = matches!(
            e.kind,
            VerdictKind::Win
                | VerdictKind::Loss
                | VerdictKind::WithinNoise
                | VerdictKind::Inconclusive
        );
        self.tx
            .insert_verdict(
                id,
                &NewVerdict {
                    kind: e.kind,
                    decided_at: at + Duration::minutes(10),
                    effect: e.effect.filter(|_| stats),
                    interval: e.effect.filter(|_| stats).map(|x| Interval {
                        low: x - 0.01,
                        high: x + 0.01,
                    }),
                    noise_floor: stats.then_some(e.floor),
                    floor_is_bound: false,
                    pairs: if stats { pairs } else { 0 },
                    method: stats.then(|| METHOD.to_string()),
                    reason: e.reason.map(str::to_string),
                },
            )
            .await
            .unwrap();
        id
    }

    async fn close(&mut self, cycle: CycleId, at: DateTime<Utc>, outcome: CycleOutcome) {
        self.tx
            .close_cycle(cycle, &outcome, at + Duration::minutes(20))
            .await
            .unwrap();
    }

    /// One proposer-chosen experiment in its own cycle.
    async fn simple(&mut self, at: DateTime<Utc>, proposer: ProposerKind, e: Exp) -> ExperimentId {
        let c = self.cycle(at, proposer).await;
        let p = self
            .proposal(
                c,
                proposer,
                1,
                at,
                Some(json!({"menu_id": e.menu, "parameters": e.params})),
                None,
            )
            .await;
        let id = self.experiment(c, Some(p), None, at, &e).await;
        self.close(c, at, CycleOutcome::Completed).await;
        id
    }

    /// A win and its confirmation in one cycle, then staged.
    async fn confirmed(
        &mut self,
        at: DateTime<Utc>,
        proposer: ProposerKind,
        mut e: Exp,
        confirmed: f64,
    ) -> orchestrator::ledger::StageId {
        let c = self.cycle(at, proposer).await;
        let p = self
            .proposal(
                c,
                proposer,
                1,
                at,
                Some(json!({"menu_id": e.menu, "parameters": e.params})),
                None,
            )
            .await;
        let first = self.experiment(c, Some(p), None, at, &e).await;
        e.effect = Some(confirmed);
        let second = self
            .experiment(c, None, Some(first), at + Duration::minutes(5), &e)
            .await;
        // The two wins as their verdicts recorded them.
        let mut wins = Vec::new();
        for id in [first, second] {
            let v = self.tx.verdict(id).await.unwrap().unwrap();
            wins.push(RecordedWin::of(id, &v).unwrap());
        }
        let s = self
            .tx
            .insert_stage(&wins[0], &wins[1], at + Duration::minutes(20))
            .await
            .unwrap();
        self.close(c, at, CycleOutcome::Completed).await;
        s
    }
}

/// Writes the fixture week (and the weeks of noise floors before it).
pub async fn fill(ledger: &Ledger) {
    fill_with(ledger, true).await;
}

/// The same week from a stack whose bench reports no parts of a token.
pub async fn fill_without_parts(ledger: &Ledger) {
    fill_with(ledger, false).await;
}

async fn fill_with(ledger: &Ledger, parts: bool) {
    let mut tx = ledger.begin_write().await.unwrap();
    let mut f = Fill {
        tx: &mut tx,
        seq: 0,
        parts,
    };
    noise_floors(&mut f).await;
    let approved = last_week(&mut f).await;
    monday(&mut f).await;
    let rejected = tuesday(&mut f).await;
    wednesday(&mut f).await;
    thursday(&mut f).await;
    friday_to_sunday(&mut f).await;
    decisions(&mut f, approved, rejected).await;
    tx.commit().await.unwrap();
}

/// Noise floors: steady near 1% for eight weeks, then 3% from Thursday.
async fn noise_floors(f: &mut Fill<'_>) {
    for w in 1..=8 {
        let v = 0.010 + 0.002 * (wiggle(w) + 0.5);
        floor(f, t(-7 * i64::from(w), 6), v).await;
    }
    for (day, v) in [
        (0, 0.011),
        (1, 0.010),
        (2, 0.012),
        (3, 0.031),
        (4, 0.029),
        (5, 0.030),
        (6, 0.032),
    ] {
        floor(f, t(day, 1), v).await;
    }
}

/// Last week: a confirmed win on the old live profile, approved on Tuesday
/// (by `decisions`). Returns its stage.
async fn last_week(f: &mut Fill<'_>) -> orchestrator::ledger::StageId {
    let mut old = Exp::new(
        MenuId::RerankPins,
        json!({"count": 48}),
        VerdictKind::Win,
        Some(-0.07),
    );
    old.base = old_base();
    f.confirmed(t(-5, 10), ProposerKind::Model, old, -0.06)
        .await
}

/// Monday: within noise, a refused out-of-bounds answer, a confirmed win
/// staged and left open (no decision names it), a bandit loss.
async fn monday(f: &mut Fill<'_>) {
    use MenuId::*;
    use ProposerKind::{Bandit, Model};
    use VerdictKind::*;
    f.simple(
        t(0, 2),
        Model,
        Exp::new(RerankPins, json!({"count": 64}), WithinNoise, Some(-0.008)),
    )
    .await;
    let c = f.cycle(t(0, 10), Model).await;
    f.proposal(
        c,
        Model,
        1,
        t(0, 10),
        None,
        Some(("out_of_bounds", "warm_set 4096 is above the bound 1024")),
    )
    .await;
    f.close(c, t(0, 10), CycleOutcome::Completed).await;
    let _open = f
        .confirmed(
            t(0, 11),
            Model,
            Exp::new(DeepenWarmSet, json!({"warm_set": 128}), Win, Some(-0.06)),
            -0.05,
        )
        .await;
    f.simple(
        t(0, 18),
        Bandit,
        Exp::new(
            RebalanceTrunkCache,
            json!({"trunk_gb": 0.5}),
            Loss,
            Some(0.04),
        ),
    )
    .await;
}

/// Tuesday: a duplicate refused, a confirmed win staged (rejected by
/// `decisions`), a hash mismatch, a bandit remeasure. Returns the stage
/// that is rejected.
async fn tuesday(f: &mut Fill<'_>) -> orchestrator::ledger::StageId {
    use MenuId::*;
    use ProposerKind::{Bandit, Model};
    use VerdictKind::*;
    let c = f.cycle(t(1, 2), Model).await;
    f.proposal(
        c,
        Model,
        1,
        t(1, 2),
        Some(json!({"menu_id": "rerank_pins", "parameters": {"count": 64}})),
        Some((
            "duplicate",
            "rerank_pins {count: 64} was already decided: within_noise",
        )),
    )
    .await;
    f.close(c, t(1, 2), CycleOutcome::Completed).await;
    let rejected = f
        .confirmed(
            t(1, 3),
            Model,
            Exp::new(StageSpeculative, json!({"draft_len": 4}), Win, Some(-0.10)),
            -0.09,
        )
        .await;
    let mut mismatch = Exp::new(RerankPins, json!({"count": 96}), HashMismatch, None);
    mismatch.reason =
        Some("candidate output hash 9f3a00000000beef differs from the reference 1c2d00000000cafe");
    mismatch.refused = true;
    f.simple(t(1, 10), Model, mismatch).await;
    f.simple(
        t(1, 18),
        Bandit,
        Exp::new(Remeasure, json!({}), WithinNoise, Some(0.002)),
    )
    .await;
    rejected
}

/// Wednesday: the model is unreachable (its error quotes a bearer token),
/// then answers nonsense three times; a bandit inconclusive.
async fn wednesday(f: &mut Fill<'_>) {
    use MenuId::*;
    use ProposerKind::{Bandit, Model};
    use VerdictKind::*;
    let c = f.cycle(t(2, 2), Model).await;
    let why = format!(
        "model endpoint http://127.0.0.1:8181/v1 unreachable: connection refused (Authorization: Bearer {LEAKED_TOKEN})"
    );
    f.tx.insert_cycle_verdict(c, &refusal(Failed, t(2, 2), &why))
        .await
        .unwrap();
    f.close(c, t(2, 2), CycleOutcome::Failed(why.clone())).await;
    let c = f.cycle(t(2, 10), Model).await;
    for (attempt, kind) in [(1, "unparseable"), (2, "unparseable"), (3, "off_menu")] {
        f.proposal(
            c,
            Model,
            attempt,
            t(2, 10),
            None,
            Some((kind, "the answer was refused")),
        )
        .await;
    }
    f.tx.insert_cycle_verdict(
        c,
        &refusal(Rejected, t(2, 10), "no valid proposal after 3 attempts"),
    )
    .await
    .unwrap();
    f.close(c, t(2, 10), CycleOutcome::Completed).await;
    f.simple(
        t(2, 18),
        Bandit,
        Exp::new(
            RebalanceTrunkCache,
            json!({"trunk_gb": 0.375}),
            Inconclusive,
            Some(-0.012),
        ),
    )
    .await;
}

/// Thursday: a corrupt bench run, a SIGTERM, a refusal under the new floor.
async fn thursday(f: &mut Fill<'_>) {
    use MenuId::*;
    use ProposerKind::{Bandit, Model};
    use VerdictKind::*;
    let mut broken = Exp::new(RerankPins, json!({"count": 80}), Failed, None);
    broken.reason = Some("bench exited 4: an expert failed to load (output corrupt)");
    let c = f.cycle(t(3, 2), Model).await;
    let p = f
        .proposal(
            c,
            Model,
            1,
            t(3, 2),
            Some(json!({"menu_id": "rerank_pins", "parameters": {"count": 80}})),
            None,
        )
        .await;
    f.experiment(c, Some(p), None, t(3, 2), &broken).await;
    f.close(
        c,
        t(3, 2),
        CycleOutcome::Failed("bench exited 4: an expert failed to load (output corrupt)".into()),
    )
    .await;
    let c = f.cycle(t(3, 10), Bandit).await;
    f.proposal(
        c,
        Bandit,
        1,
        t(3, 10),
        Some(json!({"menu_id": "remeasure", "parameters": {}})),
        None,
    )
    .await;
    f.close(
        c,
        t(3, 10),
        CycleOutcome::Aborted("interrupted by SIGTERM; the daemon is shutting down".into()),
    )
    .await;
    let mut wide = Exp::new(
        DeepenWarmSet,
        json!({"warm_set": 192}),
        WithinNoise,
        Some(-0.015),
    );
    wide.floor = 0.03;
    f.simple(t(3, 18), Model, wide).await;
}

/// Friday to Sunday: a bandit win, a loss, within noise under the wide
/// floor, a remeasure.
async fn friday_to_sunday(f: &mut Fill<'_>) {
    use MenuId::*;
    use ProposerKind::{Bandit, Model};
    use VerdictKind::*;
    f.simple(
        t(4, 2),
        Bandit,
        Exp::new(RerankPins, json!({"count": 72}), Win, Some(-0.04)),
    )
    .await;
    f.simple(
        t(4, 10),
        Model,
        Exp::new(StageSpeculative, json!({"draft_len": 2}), Loss, Some(0.05)),
    )
    .await;
    let mut big = Exp::new(
        RebalanceTrunkCache,
        json!({"trunk_gb": 0.625}),
        WithinNoise,
        Some(0.02),
    );
    big.floor = 0.03;
    f.simple(t(5, 10), Model, big).await;
    f.simple(
        t(6, 10),
        Bandit,
        Exp::new(Remeasure, json!({}), WithinNoise, Some(-0.003)),
    )
    .await;
}

/// The decisions on the stages: last week's approved on Tuesday, Tuesday's
/// rejected on Saturday with a note quoting a credential.
async fn decisions(
    f: &mut Fill<'_>,
    approved: orchestrator::ledger::StageId,
    rejected: orchestrator::ledger::StageId,
) {
    f.tx.decide_stage(approved, StageDecision::Approved, "bob", None, t(1, 9))
        .await
        .unwrap();
    let note = format!("needs 2 GB more RAM than the host has; token={NOTE_TOKEN}");
    f.tx.decide_stage(
        rejected,
        StageDecision::Rejected,
        "alice",
        Some(&note),
        t(5, 12),
    )
    .await
    .unwrap();
}

/// Adds to the fixture week a first-A/B win its own confirmation refuted
/// (`stage_speculative` −47.9%, then a +62.1% loss), and a win still waiting
/// for its confirmation at the end of the week (`rebalance_trunk_cache`).
/// Returns (refuted win, its confirmation, pending win).
pub async fn fill_refuted_and_pending_wins(
    ledger: &Ledger,
) -> (ExperimentId, ExperimentId, ExperimentId) {
    use MenuId::*;
    let mut tx = ledger.begin_write().await.unwrap();
    let mut f = Fill {
        tx: &mut tx,
        seq: 100,
        parts: true,
    };
    let mut e = Exp::new(
        StageSpeculative,
        json!({"draft_len": 6}),
        VerdictKind::Win,
        Some(0.521f64.ln()),
    );
    let c = f.cycle(t(5, 14), ProposerKind::Model).await;
    let p = f
        .proposal(
            c,
            ProposerKind::Model,
            1,
            t(5, 14),
            Some(json!({"menu_id": e.menu, "parameters": e.params})),
            None,
        )
        .await;
    let won = f.experiment(c, Some(p), None, t(5, 14), &e).await;
    f.close(c, t(5, 14), CycleOutcome::Completed).await;
    // The daemon confirms a win in the next cycle, with no proposal.
    e.kind = VerdictKind::Loss;
    e.effect = Some(1.621f64.ln());
    let c = f.cycle(t(5, 15), ProposerKind::Model).await;
    let refuting = f.experiment(c, None, Some(won), t(5, 15), &e).await;
    f.close(c, t(5, 15), CycleOutcome::Completed).await;
    let pending = f
        .simple(
            t(6, 20),
            ProposerKind::Bandit,
            Exp::new(
                RebalanceTrunkCache,
                json!({"trunk_gb": 0.75}),
                VerdictKind::Win,
                Some(-0.03),
            ),
        )
        .await;
    tx.commit().await.unwrap();
    (won, refuting, pending)
}

/// Noise floors stored under `key` as the daemon stores them
/// (`STACK/PROTOCOL`, e.g. `llama-server/surface`), one per `(time, value)`.
pub async fn floors(ledger: &Ledger, key: &str, rows: &[(DateTime<Utc>, f64)]) {
    for &(at, value) in rows {
        ledger
            .insert_noise_floor(&NewNoiseFloor {
                stack: key.into(),
                profile_digest: live(),
                value,
                n: 20,
                method: "A/A paired log ratios, Qn scale (fixture)".into(),
                measured_at: at,
                experiment_id: None,
                load1: Some(0.5),
                cpu_pressure: Some(0.02),
                contention: Some(1.0),
            })
            .await
            .unwrap();
    }
}

/// The measured parts of a valid run, as tinyk3's bench reports them: the
/// live profile spends 30% of a token in the trunk, 62% in experts, 8% in
/// the rest; each lever's candidate moves the parts it acts on.
fn parts(menu: MenuId, arm: Arm, spt: f64, effect: f64) -> TokenParts {
    let base = if arm == Arm::Candidate {
        spt / effect.exp()
    } else {
        spt
    };
    let (trunk, expert, rest) = (0.30 * base, 0.62 * base, 0.08 * base);
    let saved = base - spt;
    let (trunk, expert, far, accept) = match (arm, menu) {
        (Arm::Candidate, MenuId::RerankPins) => (trunk, expert - saved, 0.20, None),
        (Arm::Candidate, MenuId::DeepenWarmSet) => (trunk, expert - saved, 0.34, None),
        (Arm::Candidate, MenuId::RebalanceTrunkCache) => {
            (0.8 * trunk, spt - 0.8 * trunk - rest, 0.20, None)
        }
        (Arm::Candidate, MenuId::StageSpeculative) => {
            (trunk * spt / base, expert * spt / base, 0.20, Some(0.72))
        }
        _ => (trunk, expert, 0.20, None),
    };
    TokenParts {
        trunk_seconds_per_token: Some(trunk),
        expert_seconds_per_token: Some(expert),
        far_hit_share: Some(far),
        draft_acceptance: accept,
    }
}

fn refusal(kind: VerdictKind, at: DateTime<Utc>, reason: &str) -> NewVerdict {
    NewVerdict::refusal(kind, reason, at)
}

async fn floor(f: &mut Fill<'_>, at: DateTime<Utc>, value: f64) {
    // Stored as the daemon stores it: per protocol, `STACK/PROTOCOL`.
    f.tx.insert_noise_floor(&NewNoiseFloor {
        stack: "tinyk3/bench".into(),
        profile_digest: live(),
        value,
        n: 8,
        method: "A/A paired log ratios, 95% quantile (fixture)".into(),
        measured_at: at,
        experiment_id: None,
        load1: Some(0.4),
        cpu_pressure: Some(0.03),
        contention: Some(1.0),
    })
    .await
    .unwrap();
}

/// A temp dir with the repository's config.toml (its ledger path inside the
/// temp dir) and, if `filled`, the fixture ledger.
pub struct Site {
    pub dir: tempfile::TempDir,
}

impl Site {
    pub fn new(filled: bool) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let config = std::fs::read_to_string(root.join("config.toml"))
            .unwrap()
            .replace(
                "dir = \"experiments\"",
                &format!("dir = {:?}", root.join("experiments")),
            );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        std::fs::create_dir_all(dir.path().join("ledger/profiles")).unwrap();
        std::fs::write(
            dir.path().join("ledger/profiles/live.toml"),
            "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n",
        )
        .unwrap();
        let site = Site { dir };
        let db = site.ledger_path();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let ledger = Ledger::open(&db).await.unwrap();
                if filled {
                    fill(&ledger).await;
                }
                ledger.close().await;
            });
        site
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger/orchestrator.db")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }
}
