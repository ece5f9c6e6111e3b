//! One cycle of the loop: observe → propose → validate → plan → measure →
//! judge → record → stage. Exactly one experiment and one verdict per cycle:
//!
//! 1. when the noise floor of a protocol the menu needs is missing or stale,
//!    the cycle is a scheduled A/A of the live profile (a `remeasure`);
//! 2. else, when the last experiment was an unconfirmed win on the live
//!    profile, the cycle is its independent confirmation (and stages it when
//!    it wins again);
//! 3. else the proposer chooses one experiment from the menu.
//!
//! Every step leaves rows in the ledger. A ledger write failure is the one
//! error that escapes: the daemon must stop rather than run unrecorded.

mod floor;
mod line;
mod scorer;
mod screen;

use std::path::{Path, PathBuf};

use serde_json::json;

pub use floor::{CurrentFloor, Freshness};
pub use line::CycleReport;
pub use scorer::{Scorers, StackScorer};

use crate::brain::{self, LedgerDuplicates, Proposer, Situation};
use crate::clock::Clock;
use crate::config::Config;
use crate::judge::{self, Policy, Step};
use crate::ledger::{
    CycleId, CycleOutcome, ExperimentId, ExperimentOutcome, Interval, Ledger, LedgerError,
    NewExperiment, NewObservation, NewVerdict, ProposalId,
};
use crate::measure::ab::{AbError, AbRunner, AbVerdict, NoiseOutcome, RecordedRun};
use crate::measure::gate::HashGate;
use crate::measure::scorer::Scorer;
use crate::menu::{Menu, MenuId, Proposal};
use crate::observe;
use crate::plan::{self, PinList, Plan, PlanContext, PlanRefusal};
use crate::process::cancel::Cancel;
use crate::profile::{Profile, ProfileFile};
use crate::progress::{Progress, phase};
use crate::vocab::{Arm, Digest, Method, ProposerKind, VerdictKind};

/// Everything a cycle uses; built once by the daemon.
pub struct Cycle<'a, P, C> {
    pub config: &'a Config,
    pub policy: Policy,
    pub menu: &'a Menu,
    pub ledger: &'a Ledger,
    pub proposer: &'a mut P,
    pub scorers: &'a Scorers,
    pub clock: &'a C,
    pub cancel: Cancel,
    pub http: &'a reqwest::Client,
    /// Where the cycle says what it is doing (see [`crate::progress`]).
    pub progress: Progress,
}

/// Why a cycle stopped early.
enum Stop {
    /// The ledger could not be written: fatal for the daemon.
    Ledger(LedgerError),
    /// Shutdown: the cycle is recorded `aborted`.
    Aborted(String),
    /// It could not go on: the cycle is recorded `failed`, loudly.
    Failed(String),
}

impl From<LedgerError> for Stop {
    fn from(e: LedgerError) -> Stop {
        Stop::Ledger(e)
    }
}

impl<P: Proposer, C: Clock> Cycle<'_, P, C> {
    /// Runs one cycle to its end and records it. Only a ledger failure is an
    /// error; every other failure is a recorded `failed` cycle.
    pub async fn run(&mut self) -> Result<CycleReport, LedgerError> {
        let started = self.clock.now();
        let id = self
            .ledger
            .open_cycle(started, self.proposer.kind())
            .await?;
        let mut report = CycleReport::new(id);
        self.progress.start_cycle(id.get());
        let stop = self.body(id, &mut report).await;
        self.progress.phase(phase::RECORD, "");
        let now = self.clock.now();
        report.seconds = (now - started).as_seconds_f64();
        let outcome = match stop {
            Ok(()) if report.verdict == Some(VerdictKind::Failed) => {
                CycleOutcome::Failed(report.reason.clone().unwrap_or_default())
            }
            Ok(()) => CycleOutcome::Completed,
            Err(Stop::Ledger(e)) => return Err(e),
            Err(Stop::Aborted(why)) => {
                self.record_failure(&mut report, &format!("aborted: {why}"))
                    .await?;
                CycleOutcome::Aborted(why)
            }
            Err(Stop::Failed(why)) => {
                self.record_failure(&mut report, &why).await?;
                CycleOutcome::Failed(why)
            }
        };
        if let CycleOutcome::Failed(why) = &outcome {
            tracing::error!(cycle = %id, "cycle failed: {why}");
        }
        report.status = Some(match &outcome {
            CycleOutcome::Completed => crate::vocab::CycleStatus::Completed,
            CycleOutcome::Failed(_) => crate::vocab::CycleStatus::Failed,
            CycleOutcome::Aborted(_) => crate::vocab::CycleStatus::Aborted,
        });
        tracing::debug!(cycle = %id, "phase record");
        let closed = self.ledger.close_cycle(id, &outcome, now).await;
        self.progress.end_cycle();
        closed?;
        Ok(report)
    }

    /// Records a `failed` verdict unless the cycle already has its verdict.
    async fn record_failure(&self, r: &mut CycleReport, why: &str) -> Result<(), LedgerError> {
        if r.verdict.is_some() {
            return Ok(());
        }
        let v = NewVerdict::refusal(VerdictKind::Failed, why, self.clock.now());
        match r.experiment_id {
            Some(e) => self.ledger.insert_verdict(e, &v).await?,
            None => self.ledger.insert_cycle_verdict(r.cycle_id, &v).await?,
        };
        r.verdict = Some(VerdictKind::Failed);
        r.reason = Some(why.to_string());
        Ok(())
    }

    async fn body(&mut self, id: CycleId, r: &mut CycleReport) -> Result<(), Stop> {
        // The phase lines (debug level) mark the cycle's timeline for
        // people reading a log and for the crash-consistency test.
        tracing::debug!(cycle = %id, "phase observe");
        let cfg = self.config;
        let live = ProfileFile::load(&cfg.stack.live_profile).map_err(|e| {
            Stop::Failed(format!(
                "the live profile cannot be read ({e}); fix it or approve a stage to rewrite it"
            ))
        })?;
        let live_digest = live.profile.digest();
        let now = self.clock.now();
        let expired = self
            .ledger
            .expire_stale_stages(
                &live_digest,
                "the live profile changed since it was measured",
                now,
            )
            .await?;
        if !expired.is_empty() {
            tracing::info!(?expired, "expired staged wins whose base is no longer live");
        }

        let obs = observe::observe(cfg.stack.metrics.as_ref(), self.http)
            .await
            .map_err(|e| Stop::Failed(e.to_string()))?;
        warn_new_gaps(&obs.gaps);
        self.ledger
            .insert_observation(&NewObservation {
                cycle_id: id,
                observed_at: now,
                metrics: obs.metrics_json(),
                heat: obs.heat_json(),
                live_profile_digest: live_digest.clone(),
            })
            .await?;
        r.live_metric = obs.metrics.seconds_per_token;

        // A win waiting for its confirmation needs a floor measured after
        // it: the two decisions must not share the noise of one floor.
        let pending = self.pending_win(&live).await?;
        let not_before = match pending {
            Some(first) => self.ledger.verdict(first).await?.map(|v| v.decided_at),
            None => None,
        };

        // 1. A floor the menu's experiments need is missing or stale.
        let methods = self.candidate_methods();
        for &method in &methods {
            let current = self.floor(method, &live, not_before).await?;
            if current.stale {
                let scorer = self
                    .scorers
                    .for_live(method)
                    .ok_or_else(|| Stop::Failed(no_scorer(method)))?;
                r.scheduled = Some("noise floor refresh");
                if let Some(why) = &current.why {
                    tracing::info!(cycle = %id, "measuring the noise floor: {why}");
                }
                return self.remeasure(id, None, &live, &scorer, r).await;
            }
        }

        // 2. An unconfirmed win on the live profile is confirmed first.
        if let Some(first) = pending {
            return self.confirm(id, first, &live, r).await;
        }

        // 3. The proposer chooses.
        let bench_floor = match methods.first() {
            Some(m) => self.floor(*m, &live, None).await?,
            None => CurrentFloor {
                row: None,
                stale: true,
                why: None,
            },
        };
        let history = self
            .ledger
            .recent_experiments(cfg.cycle.history.max(64))
            .await?;
        let floor_state = bench_floor.state(self.policy.min_floor, now);
        let duplicates = LedgerDuplicates {
            ledger: self.ledger,
            base_digest: &live_digest,
        };
        // The live profile's own values and what was decided or refused on
        // it leave the schema, the validator and the bandit's grid.
        let menu = self
            .menu
            .clone()
            .excluding(brain::exclusions::live(plan::unchanged(&live.profile)))
            .excluding(duplicates.refused(self.menu).await?);
        let stack = brain::StackDescription::of(cfg, self.menu);
        let live_knobs = live_knobs(self.menu, &live.profile);
        let situation = Situation {
            menu: &menu,
            stack: &stack,
            live_knobs: &live_knobs,
            target_seconds_per_token: cfg.objective.target_seconds_per_token.get(),
            metrics: &obs.metrics,
            noise_floor: &floor_state,
            history: &history,
        };
        let current_pins = live_pins(&live);
        let profiles_dir = profiles_dir(&cfg.stack.live_profile);
        let ctx = PlanContext {
            live: &live.profile,
            live_path: &live.path,
            profiles_dir: &profiles_dir,
            expert_bytes: cfg.stack.expert_bytes,
            cache_spare_slots: cfg.stack.cache_spare_slots,
            heat: obs.heat.as_ref(),
            trace: obs.trace.as_ref(),
            current_pins: current_pins.as_ref(),
            top_k: None,
        };
        let screen = screen::Screen::new(duplicates, &ctx);
        tracing::debug!(cycle = %id, "phase propose");
        self.progress
            .phase(phase::PROPOSE, self.proposer.kind().as_str());
        // The proposer's HTTP call is abandoned on shutdown (dropping the
        // future closes the connection); nothing of it is half-recorded.
        let outcome = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => {
                return Err(Stop::Aborted("shutdown while the proposer was choosing".into()));
            }
            outcome = self.proposer.propose(&situation, &screen) => outcome,
        };
        // The metrics above were read before the model was asked; the
        // window its decoding fell in is closed now, so the next cycle's
        // live speed is the stack's serving, not the model's answers.
        if outcome.proposer == ProposerKind::Model {
            observe::end_window(cfg.stack.metrics.as_ref(), self.http).await;
        }
        let mut last_proposal: Option<ProposalId> = None;
        for p in outcome.new_proposals(id, self.clock.now()) {
            last_proposal = Some(self.ledger.insert_proposal(&p).await?);
        }
        let proposal = match outcome.decision {
            brain::Decision::Chosen(p) => p,
            brain::Decision::Rejected => {
                let last = outcome
                    .attempts
                    .last()
                    .and_then(|a| a.rejection.as_ref())
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "no attempt".into());
                let why = format!(
                    "every answer of the proposer was refused ({} attempts; last: {last})",
                    outcome.attempts.len()
                );
                self.cycle_verdict(r, VerdictKind::Rejected, &why).await?;
                return Ok(());
            }
            brain::Decision::Failed(e) => return Err(Stop::Failed(format!("proposer: {e}"))),
        };
        r.menu_id = Some(proposal.experiment);
        r.params = Some(brain::params_value(&proposal));

        if proposal.experiment == MenuId::Remeasure {
            let method = self
                .menu
                .entry(MenuId::Remeasure)
                .map_err(|e| Stop::Failed(e.to_string()))?
                .method;
            let scorer = self
                .scorers
                .for_live(method)
                .ok_or_else(|| Stop::Failed(no_scorer(method)))?;
            return self.remeasure(id, last_proposal, &live, &scorer, r).await;
        }
        tracing::debug!(cycle = %id, "phase plan");
        self.progress
            .phase(phase::PLAN, proposal.experiment.as_str());
        let plan = screen.plan(&proposal);
        self.experiment(id, last_proposal, &proposal, plan, &live, r)
            .await
    }

    /// The protocols the menu's (non-remeasure) experiments are measured with.
    fn candidate_methods(&self) -> Vec<Method> {
        let mut methods: Vec<Method> = self
            .menu
            .entries()
            .iter()
            .filter(|e| e.id != MenuId::Remeasure)
            .filter_map(|e| self.scorers.for_candidate(e.method))
            .map(|s| s.method())
            .collect();
        methods.sort_by_key(|m| m.as_str());
        methods.dedup();
        methods
    }

    async fn floor(
        &self,
        method: Method,
        live: &ProfileFile,
        not_before: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<CurrentFloor, LedgerError> {
        // The machine now, as the stack's own runs felt it: the pressure of
        // the last runs, comparable with the floor's (both include the
        // stack's own threads), where the kernel's idle average is not.
        let recent = self.ledger.recent_cpu_pressure(RECENT_RUNS).await?;
        let now = crate::measure::pressure::Pressure {
            cpu: judge::noise::median(&recent),
            ..Default::default()
        };
        let rules = Freshness {
            max_age: self.config.measure.noise_floor_max_age_s.duration(),
            max_floor: self.policy.max_floor,
            now,
            pressure_shift: self.config.measure.floor_pressure_shift,
            not_before,
        };
        CurrentFloor::load(
            self.ledger,
            &self.config.stack.name,
            method,
            &live.profile.digest(),
            &rules,
            self.clock.now(),
        )
        .await
    }

    /// The last experiment, when it is a win on the live profile that no
    /// experiment has confirmed yet.
    ///
    /// A confirmation cut short by a shutdown or a crash (its cycle
    /// `aborted`, its verdict `failed`) did not judge the win, so the win is
    /// confirmed again, up to [`MAX_INTERRUPTED_CONFIRMATIONS`] times; else
    /// a daemon stopped at the wrong moment would silently drop a win.
    async fn pending_win(&self, live: &ProfileFile) -> Result<Option<ExperimentId>, LedgerError> {
        // The floor refreshes scheduled between a win and its confirmation
        // (a fresh floor comes first) do not hide the win.
        let recent = self
            .ledger
            .recent_experiments(MAX_REFRESHES_BEFORE_CONFIRMATION)
            .await?;
        let Some(last) = recent
            .into_iter()
            .find(|e| !(e.menu_id == MenuId::Remeasure && e.proposer.is_none()))
        else {
            return Ok(None);
        };
        let Some(first) = win_to_confirm(&last, &live.profile.digest()) else {
            return Ok(None);
        };
        let confirmations = self.ledger.confirmations(first).await?;
        if confirmations.len() >= MAX_INTERRUPTED_CONFIRMATIONS {
            return Ok(None);
        }
        for c in &confirmations {
            let cycle = self.ledger.cycle(c.cycle_id).await?;
            let verdict = self.ledger.verdict(c.id).await?.map(|v| v.kind);
            let interrupted = cycle.status == crate::vocab::CycleStatus::Aborted
                && verdict == Some(VerdictKind::Failed);
            if !interrupted {
                return Ok(None);
            }
        }
        if first != last.experiment_id {
            let original = self.ledger.verdict(first).await?.map(|v| v.kind);
            if original != Some(VerdictKind::Win) {
                return Ok(None);
            }
            tracing::info!(
                experiment = %first,
                "the confirmation of this win was interrupted; confirming it again"
            );
        }
        Ok(Some(first))
    }

    async fn cycle_verdict(
        &self,
        r: &mut CycleReport,
        kind: VerdictKind,
        why: &str,
    ) -> Result<(), LedgerError> {
        let v = NewVerdict::refusal(kind, why, self.clock.now());
        self.ledger.insert_cycle_verdict(r.cycle_id, &v).await?;
        r.verdict = Some(kind);
        r.reason = Some(why.to_string());
        Ok(())
    }

    /// Plans, records and measures one proposed experiment.
    async fn experiment(
        &mut self,
        id: CycleId,
        proposal_id: Option<ProposalId>,
        proposal: &Proposal,
        plan: Result<Plan, PlanRefusal>,
        live: &ProfileFile,
        r: &mut CycleReport,
    ) -> Result<(), Stop> {
        // The model's answers were screened by the planner already; a
        // bandit's choice is refused here.
        let plan = match plan {
            Ok(plan) => plan,
            Err(refusal) => {
                let why = format!("not measured: {}", screen::refusal_text(proposal, &refusal));
                self.cycle_verdict(r, VerdictKind::Rejected, &why).await?;
                return Ok(());
            }
        };
        plan::write_plan(&plan).map_err(|e| {
            Stop::Failed(format!(
                "writing the candidate profile {}: {e}",
                plan.candidate_path.display()
            ))
        })?;
        let candidate = ProfileFile {
            path: plan.candidate_path.clone(),
            profile: plan.candidate.clone(),
        };
        let entry = self
            .menu
            .entry(proposal.experiment)
            .map_err(|e| Stop::Failed(e.to_string()))?;
        let scorer = self
            .scorers
            .for_candidate(entry.method)
            .ok_or_else(|| Stop::Failed(no_scorer(entry.method)))?;
        let experiment_id = self
            .ledger
            .insert_experiment(&NewExperiment {
                cycle_id: id,
                proposal_id,
                confirmation_of: None,
                created_at: self.clock.now(),
                menu_id: proposal.experiment,
                parameters: brain::params_value(proposal),
                method: scorer.method(),
                base_profile: live.profile.canonical(),
                base_digest: live.profile.digest(),
                candidate_profile: plan.candidate.canonical(),
                candidate_digest: plan.candidate.digest(),
                planner_notes: Some(plan.notes.clone()),
            })
            .await?;
        r.experiment_id = Some(experiment_id);
        self.ab(experiment_id, live, &candidate, &scorer, r).await
    }

    /// The independent second A/B of a win; stages it when it wins again.
    async fn confirm(
        &mut self,
        id: CycleId,
        first: ExperimentId,
        live: &ProfileFile,
        r: &mut CycleReport,
    ) -> Result<(), Stop> {
        let original = self.ledger.experiment(first).await?;
        r.menu_id = Some(original.menu_id);
        r.params = Some(original.parameters.clone());
        r.scheduled = Some("confirmation");
        let candidate = Profile::parse(
            &original.candidate_profile,
            Path::new("the staged candidate"),
        )
        .map_err(|e| Stop::Failed(e.to_string()))?;
        let path = profiles_dir(&self.config.stack.live_profile)
            .join(format!("candidate-{}.toml", candidate.digest().short()));
        let candidate = ProfileFile::write(&path, candidate).map_err(|e| {
            Stop::Failed(format!("rewriting the candidate for its confirmation: {e}"))
        })?;
        let scorer = self
            .scorers
            .for_candidate(original.method)
            .ok_or_else(|| Stop::Failed(no_scorer(original.method)))?;
        let experiment_id = self
            .ledger
            .insert_experiment(&NewExperiment {
                cycle_id: id,
                proposal_id: None,
                confirmation_of: Some(first),
                created_at: self.clock.now(),
                menu_id: original.menu_id,
                parameters: original.parameters.clone(),
                method: scorer.method(),
                base_profile: live.profile.canonical(),
                base_digest: live.profile.digest(),
                candidate_profile: candidate.profile.canonical(),
                candidate_digest: candidate.profile.digest(),
                planner_notes: original.planner_notes.clone(),
            })
            .await?;
        r.experiment_id = Some(experiment_id);
        // Failed once it is recorded, so the next cycle does not retry it.
        if let Err(e) = self.menu.entry(original.menu_id) {
            return Err(Stop::Failed(unconfirmable(first, &e)));
        }
        self.ab(experiment_id, live, &candidate, &scorer, r).await?;
        if r.verdict == Some(VerdictKind::Win) {
            tracing::debug!(experiment = %experiment_id, "phase stage");
            let stage = self
                .ledger
                .insert_stage(first, experiment_id, self.clock.now())
                .await?;
            tracing::info!(%stage, "a confirmed win is staged: `orchestrator stage show {stage}`");
            r.staged = Some(stage);
        }
        Ok(())
    }

    /// Runs the A/B and records its verdict.
    async fn ab(
        &mut self,
        experiment_id: ExperimentId,
        live: &ProfileFile,
        candidate: &ProfileFile,
        scorer: &StackScorer,
        r: &mut CycleReport,
    ) -> Result<(), Stop> {
        let current = self.floor(scorer.method(), live, None).await?;
        let floor = current.floor(self.policy.min_floor).ok_or_else(|| {
            Stop::Failed(format!(
                "no noise floor has been measured for the {} protocol; the next cycle measures it",
                scorer.method()
            ))
        })?;
        let (mut gate, runner) = self.measuring(scorer).await?;
        let measuring = match (r.scheduled, r.menu_id) {
            (Some("confirmation"), Some(m)) => format!("confirmation A/B of {}", m.as_str()),
            (_, Some(m)) => format!("A/B of {}", m.as_str()),
            _ => "A/B".into(),
        };
        self.progress.phase(phase::MEASURE, &measuring);
        tracing::debug!(experiment = %experiment_id, "phase measure");
        let result = runner
            .run_ab(
                experiment_id,
                live,
                candidate,
                &mut gate,
                self.policy,
                floor,
            )
            .await;
        tracing::debug!(experiment = %experiment_id, "phase judge");
        let report = result.map_err(ab_stop)?;
        r.note_runs(&report.runs);
        let verdict = report.verdict.to_new_verdict(self.clock.now());
        self.ledger.insert_verdict(experiment_id, &verdict).await?;
        r.verdict = Some(verdict.kind);
        r.floor = Some(floor.get());
        if let (Some(e), Some(i)) = (verdict.effect, verdict.interval) {
            r.effect = Some((e, i));
        }
        // Failures, hash mismatches and a machine too noisy to decide say why.
        if verdict.reason.is_some() {
            r.reason = verdict.reason.clone();
        }
        // A changed output is a broken engine: as loud as a failed run.
        if let VerdictKind::Failed | VerdictKind::HashMismatch = verdict.kind {
            tracing::error!(
                experiment = %experiment_id,
                verdict = verdict.kind.as_str(),
                "{}",
                verdict.reason.as_deref().unwrap_or("")
            );
        }
        Ok(())
    }

    /// The hash gate of the scorer's prompt set and a runner over the scorer.
    async fn measuring<'s>(
        &'s self,
        scorer: &'s StackScorer,
    ) -> Result<(HashGate, AbRunner<'s, StackScorer, C>), LedgerError> {
        let gate = HashGate::load(
            self.ledger,
            &self.config.stack.name,
            &scorer.prompt_set(self.config),
        )
        .await?;
        let runner = AbRunner {
            scorer,
            ledger: self.ledger,
            clock: self.clock,
            cancel: self.cancel.clone(),
            warmups_per_arm: self.config.measure.warmup_runs as usize,
            deadline_cap: Some(self.config.measure.run_timeout_s.duration()),
            progress: self.progress.clone(),
        };
        Ok((gate, runner))
    }

    /// An A/A of the live profile: a new noise floor, and a verdict on it.
    async fn remeasure(
        &mut self,
        id: CycleId,
        proposal_id: Option<ProposalId>,
        live: &ProfileFile,
        scorer: &StackScorer,
        r: &mut CycleReport,
    ) -> Result<(), Stop> {
        r.menu_id = Some(MenuId::Remeasure);
        r.params = Some(json!({}));
        let digest = live.profile.digest();
        let experiment_id = self
            .ledger
            .insert_experiment(&NewExperiment {
                cycle_id: id,
                proposal_id,
                confirmation_of: None,
                created_at: self.clock.now(),
                menu_id: MenuId::Remeasure,
                parameters: json!({}),
                method: scorer.method(),
                base_profile: live.profile.canonical(),
                base_digest: digest.clone(),
                candidate_profile: live.profile.canonical(),
                candidate_digest: digest.clone(),
                planner_notes: None,
            })
            .await?;
        r.experiment_id = Some(experiment_id);
        let (mut gate, runner) = self.measuring(scorer).await?;
        self.progress.phase(phase::MEASURE_FLOOR, scorer.label());
        tracing::debug!(experiment = %experiment_id, "phase measure");
        let result = runner
            .measure_noise_floor(experiment_id, live, &mut gate, self.policy)
            .await;
        tracing::debug!(experiment = %experiment_id, "phase judge");
        let report = result.map_err(ab_stop)?;
        r.note_runs(&report.runs);
        let now = self.clock.now();
        let row = report.to_new_noise_floor(
            &floor::key(&self.config.stack.name, scorer.method()),
            &digest,
            now,
            Some(experiment_id),
        );
        let (floor, pairs) = match report.outcome {
            NoiseOutcome::Measured { floor, pairs } => (floor, pairs),
            NoiseOutcome::Failed { reason } => {
                let v = NewVerdict::refusal(VerdictKind::Failed, &reason, now);
                self.ledger.insert_verdict(experiment_id, &v).await?;
                r.verdict = Some(VerdictKind::Failed);
                r.reason = Some(reason);
                return Ok(());
            }
            NoiseOutcome::TooNoisy { reason, pairs } => {
                // No floor to judge with; the verdict still says what the
                // runs showed, against a floor from all of them.
                // Its scale is for the record only, so it may come from
                // fewer pairs than a floor needs (a bound of one discarded
                // block stops after two).
                let ratios: Vec<f64> = pairs.iter().map(|(a, b)| (b / a).ln()).collect();
                let scale = judge::noise::qn(&ratios).max(self.policy.min_floor.get());
                let v = match judge::Floor::try_from(scale.min(0.999)) {
                    Ok(f) => aa_verdict(&pairs, f, &self.policy, now, Some(&reason)),
                    Err(_) => NewVerdict::refusal(VerdictKind::Failed, &reason, now),
                };
                return self.record_aa(experiment_id, v, r).await;
            }
        };
        if let Some(row) = &row {
            self.ledger.insert_noise_floor(row).await?;
        }
        r.floor = Some(floor.value.get());
        // Kept in the ledger (the report shows it), but too wide to judge
        // anything with: `CurrentFloor` calls it stale, so the next cycle
        // measures again.
        let too_wide = self
            .policy
            .max_floor
            .filter(|max| floor.value > *max)
            .map(|max| {
                format!(
                    "machine too noisy to decide: noise floor {} > [measure] max_noise_floor {max}; nothing is measured against it. Stop the competing work, or raise max_noise_floor",
                    floor.value
                )
            });
        // The A/A's own verdict: what the sequential test says of identical
        // profiles under the new floor (normally within_noise).
        let v = aa_verdict(&pairs, floor.value, &self.policy, now, too_wide.as_deref());
        self.record_aa(experiment_id, v, r).await
    }

    async fn record_aa(
        &self,
        experiment_id: ExperimentId,
        verdict: NewVerdict,
        r: &mut CycleReport,
    ) -> Result<(), Stop> {
        self.ledger.insert_verdict(experiment_id, &verdict).await?;
        r.verdict = Some(verdict.kind);
        r.reason = verdict.reason.clone();
        if let (Some(e), Some(i)) = (verdict.effect, verdict.interval) {
            r.effect = Some((e, i));
        }
        Ok(())
    }
}

/// The verdict of an A/A's pairs under `floor`; with `too_noisy`, it is
/// `inconclusive` with that reason whatever the interval says (the machine
/// decided it), and keeps the interval for the record.
fn aa_verdict(
    pairs: &[(f64, f64)],
    floor: judge::Floor,
    policy: &Policy,
    now: chrono::DateTime<chrono::Utc>,
    too_noisy: Option<&str>,
) -> NewVerdict {
    let mut v = match judge::decide(pairs, floor, policy) {
        Ok(Step::Decided(d)) => AbVerdict::Decided(d).to_new_verdict(now),
        Ok(Step::Continue {
            pairs,
            estimate: Some(e),
        }) => NewVerdict {
            kind: VerdictKind::Inconclusive,
            decided_at: now,
            effect: Some(e.log_ratio),
            interval: Some(Interval {
                low: e.interval.0,
                high: e.interval.1,
            }),
            noise_floor: Some(floor.get()),
            pairs: u32::try_from(pairs).unwrap_or(u32::MAX),
            method: Some(judge::sequential::METHOD.to_string()),
            reason: None,
        },
        // `decide` reports where it stands as `Continue`, never `Discarded`.
        Ok(_) => NewVerdict::refusal(VerdictKind::Failed, "too few A/A blocks to judge", now),
        Err(e) => NewVerdict::refusal(VerdictKind::Failed, &e.to_string(), now),
    };
    if let Some(why) = too_noisy
        && v.effect.is_some()
    {
        v.kind = VerdictKind::Inconclusive;
        v.reason = Some(why.to_string());
    }
    v
}

/// Says each observation gap at WARN, every cycle it happens (a fault),
/// except a stack configured without a metrics endpoint: a fact of the
/// config, told once per run and at DEBUG after. Every gap is also in the
/// ledger's observation row.
fn warn_new_gaps(gaps: &[String]) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static TOLD: AtomicBool = AtomicBool::new(false);
    for gap in gaps {
        if gap == observe::NO_METRICS_ENDPOINT && TOLD.swap(true, Ordering::Relaxed) {
            tracing::debug!("observe: {gap}");
        } else if gap.starts_with(observe::NO_HEAT_YET) {
            // Expected until the stack's first run; not a warning.
            tracing::info!("observe: {gap}");
        } else {
            tracing::warn!("observe: {gap}");
        }
    }
}

/// The live pin list, when the live profile names one that can be read.
fn live_pins(live: &ProfileFile) -> Option<PinList> {
    let path = live.profile.pins_path(&live.path)?;
    match PinList::load(&path) {
        Ok(list) => Some(list),
        Err(e) => {
            tracing::warn!("the live pin list cannot be read: {e}");
            None
        }
    }
}

/// The live value of every knob the menu's entries touch, in knob order.
fn live_knobs(
    menu: &Menu,
    live: &Profile,
) -> Vec<(crate::profile::Knob, crate::profile::KnobValue)> {
    let mut knobs: Vec<crate::profile::Knob> = menu
        .entries()
        .iter()
        .flat_map(|e| e.touches.iter().copied())
        .collect();
    knobs.sort();
    knobs.dedup();
    knobs.into_iter().map(|k| (k, live.get(k))).collect()
}

/// Why the win `first` of an entry the stack has since declared
/// unsupported is not confirmed, and the fix.
fn unconfirmable(first: ExperimentId, e: &crate::menu::UnsupportedEntry) -> String {
    format!(
        "experiment #{first}'s entry `{id}` is unsupported by the stack {stack} ([stack] unsupported); its confirmation cannot run. Remove \"{id}\" from [stack] unsupported to confirm it",
        id = e.id,
        stack = e.stack,
    )
}

/// Runs whose pressure says what the machine is like now (two blocks).
const RECENT_RUNS: u32 = 8;

/// How many scheduled floor refreshes may stand between a win and its
/// confirmation before the win is given up on (a machine that stays too
/// noisy to measure a usable floor).
const MAX_REFRESHES_BEFORE_CONFIRMATION: u32 = 8;

/// How many confirmations of one win may be cut short (shutdown, crash)
/// before the win is given up on.
const MAX_INTERRUPTED_CONFIRMATIONS: usize = 3;

/// Candidates and pin lists live next to the live profile, so relative
/// paths inside profiles mean the same in all of them.
pub fn profiles_dir(live_profile: &Path) -> PathBuf {
    live_profile
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn no_scorer(method: Method) -> String {
    format!(
        "the config has no way to measure with the {method} protocol: add [stack.bench], or [stack.surface] (and [stack.shadow] for candidates)"
    )
}

fn ab_stop(e: AbError) -> Stop {
    match e {
        AbError::Cancelled { runs } => Stop::Aborted(format!(
            "shutdown during the measurement, after {runs} run(s)"
        )),
        AbError::Ledger(e) => Stop::Ledger(e),
        AbError::Gate(e) => Stop::Failed(e.to_string()),
        other => Stop::Failed(other.to_string()),
    }
}

/// Stops the indicator and clears its line.
/// Runs of an arm that produced a metric, for the cycle line.
pub(crate) fn valid_times(runs: &[RecordedRun], arm: Arm) -> Vec<f64> {
    runs.iter()
        .filter(|r| r.run.arm == arm && !r.run.refused)
        .filter_map(|r| r.run.seconds_per_token)
        .collect()
}

/// The win the last experiment asks to confirm, if any: its own win, or the
/// win its interrupted (`failed`) confirmation was judging, on the profile
/// that is still live. A remeasure never asks: it is an A/A of the live
/// profile, so its "win" is noise that crossed the floor, with no candidate
/// to confirm or stage.
fn win_to_confirm(last: &ExperimentOutcome, live: &Digest) -> Option<ExperimentId> {
    if last.menu_id == MenuId::Remeasure || &last.base_digest != live {
        return None;
    }
    match last.confirmation_of {
        None if last.verdict == Some(VerdictKind::Win) => Some(last.experiment_id),
        Some(first) if last.verdict == Some(VerdictKind::Failed) => Some(first),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn last(
        menu_id: MenuId,
        verdict: VerdictKind,
        confirmation_of: Option<i64>,
    ) -> ExperimentOutcome {
        ExperimentOutcome {
            experiment_id: ExperimentId(7),
            cycle_id: CycleId(7),
            created_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap(),
            menu_id,
            parameters: serde_json::json!({}),
            base_digest: Digest::of(b"live"),
            proposer: None,
            confirmation_of: confirmation_of.map(ExperimentId),
            verdict: Some(verdict),
            effect: None,
            interval: None,
            noise_floor: None,
            pairs: None,
        }
    }

    #[test]
    fn a_win_is_confirmed_but_never_a_remeasure_s() {
        let live = Digest::of(b"live");
        use VerdictKind::*;
        let split = MenuId::RebalanceTrunkCache;
        assert_eq!(
            win_to_confirm(&last(split, Win, None), &live),
            Some(ExperimentId(7))
        );
        // An interrupted confirmation asks again for the win it judged.
        assert_eq!(
            win_to_confirm(&last(split, Failed, Some(3)), &live),
            Some(ExperimentId(3))
        );
        assert_eq!(win_to_confirm(&last(split, Win, Some(3)), &live), None);
        assert_eq!(win_to_confirm(&last(split, Loss, None), &live), None);
        // Another live profile: the win is out of date.
        assert_eq!(
            win_to_confirm(&last(split, Win, None), &Digest::of(b"other")),
            None
        );
        // An A/A that crossed the floor by chance has nothing to confirm.
        assert_eq!(
            win_to_confirm(&last(MenuId::Remeasure, Win, None), &live),
            None
        );
    }
}
