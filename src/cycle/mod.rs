//! One cycle of the loop: observe → propose → validate → plan → measure →
//! judge → record → stage. Exactly one experiment and one verdict per cycle,
//! plus the A/A of the floor its A/B measured when the bound
//! (`max_noise_floor`) could not decide it without one ([`experiment`]).
//! This file observes and dispatches; the kind of cycle is, in order:
//!
//! 1. when the noise floor of a protocol the menu needs is missing or stale
//!    and the policy has no bound, the cycle is a scheduled A/A of the live
//!    profile (a `remeasure`, [`floor_refresh`]);
//! 2. else, when the last experiment was an unconfirmed win on the live
//!    profile, the cycle is its independent confirmation (and stages it when
//!    it wins again, [`confirmation`]); with no win of its own, a stack of a
//!    `[stack] class` confirms a classmate's unconfirmed win on its live
//!    profile instead ([`classmate`]). Whoever confirms claims the win
//!    first; a cycle that loses the claim goes on to 3. A stack with
//!    `[stack] class_confirm_wait_s` leaves its own win that long to its
//!    classmates, refreshing its noise floor meanwhile;
//! 3. else, when confirmed wins on two or more different menu entries are
//!    staged against the live profile and their combination was not tried
//!    yet, the cycle measures the combined candidate ([`composition`]);
//! 4. else the proposer chooses one experiment from the menu ([`proposal`]).
//!
//! Between 1 and 2: when the live profile is an applied stage's that the
//! live server now runs, and what it realized is not measured yet, the
//! cycle measures it: the live server against a shadow of the profile the
//! stage replaced ([`realization`]).
//!
//! Every kind works from the live profile, or from the one confirmed win
//! that waits for approval on it ([`base`], `[cycle] build_on_staged`).
//! What the kinds share (the experiment row, the A/B and its verdict) is in
//! [`experiment`]; which floor is current in [`floor`]. Each kind returns
//! what it did as a value ([`outcome`]), from which the cycle's record and
//! summary line are built ([`summary`]). A proposer is offered `remeasure`
//! only with a reason ([`remeasure_offer`]); [`converged`] is the daemon's
//! look before a cycle, which says when no cycle would tell the loop
//! anything new.
//!
//! Every step leaves rows in the ledger. A ledger write failure is the one
//! error that escapes: the daemon must stop rather than run unrecorded.

mod base;
mod classmate;
mod composition;
mod confirmation;
mod converged;
mod deferral;
mod duplicate_check;
mod experiment;
mod floor;
mod floor_carry;
mod floor_refresh;
mod manual;
mod outcome;
mod proposal;
mod realization;
mod remeasure_offer;
mod summary;

use std::path::{Path, PathBuf};

use confirmation::Pending;
pub use converged::Converged;
pub use floor::{CurrentFloor, Freshness};
use outcome::{Done, Judged, Tried};
pub use summary::CycleSummary;

use crate::brain::Proposer;
use crate::clock::Clock;
use crate::config::Config;
use crate::judge::{self, Policy};
use crate::ledger::{
    CycleId, CycleOutcome, Ledger, LedgerError, NewObservation, NewVerdict, StageId,
};
use crate::measure::ab::AbError;
use crate::measure::by_protocol::Scorers;
use crate::measure::scorer::Scorer;
use crate::measure::stand_aside::Deferral;
use crate::menu::{Menu, MenuId};
use crate::observe::{self, Observation};
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;
use crate::progress::{Progress, phase};
use crate::vocab::{DeferredAt, Method, Scheduled, VerdictKind};

/// Runs cycles: everything a cycle uses; built once by the daemon.
pub struct CycleRunner<'a, P, C> {
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
    /// The live server's users first ([`deferral`]); `None` where the live
    /// load is not read.
    pub stand_aside: Option<&'a crate::measure::stand_aside::StandAside>,
    /// The live seconds per token a waiting daemon glanced at since its
    /// last cycle (`daemon::wait`): observations too, so a drift that woke
    /// it also offers `remeasure` ([`remeasure_offer`]).
    pub glances: &'a [(chrono::DateTime<chrono::Utc>, f64)],
}

/// Why a cycle stopped early.
enum Stop {
    /// The ledger could not be written: fatal for the daemon.
    Ledger(LedgerError),
    /// Shutdown: the cycle is recorded `aborted`.
    Aborted(String, Tried),
    /// It could not go on: the cycle is recorded `failed`, loudly.
    Failed(String, Tried),
    /// The live server's users kept it waiting too long: recorded deferred
    /// ([`deferral`]).
    Deferred(DeferredAt, Deferral, Tried),
}

impl From<LedgerError> for Stop {
    fn from(e: LedgerError) -> Stop {
        Stop::Ledger(e)
    }
}

impl Stop {
    fn failed(why: impl Into<String>) -> Stop {
        Stop::Failed(why.into(), Tried::default())
    }

    fn aborted(why: impl Into<String>) -> Stop {
        Stop::Aborted(why.into(), Tried::default())
    }

    /// Says what the cycle had under way, unless a callee said it already.
    fn during(self, tried: &Tried) -> Stop {
        match self {
            Stop::Aborted(why, t) if t.is_empty() => Stop::Aborted(why, tried.clone()),
            Stop::Failed(why, t) if t.is_empty() => Stop::Failed(why, tried.clone()),
            Stop::Deferred(at, d, t) if t.is_empty() => Stop::Deferred(at, d, tried.clone()),
            other => other,
        }
    }
}

/// What the cycle saw before it chose what to do: the profile it builds
/// on, the waiting win that profile is (if it is one), and the live
/// stack's metrics and heat.
struct Seen {
    base: ProfileFile,
    built_on: Option<StageId>,
    /// An applied stage the live server runs, whose realization is due.
    realizing: Option<realization::Due>,
    obs: Observation,
    now: chrono::DateTime<chrono::Utc>,
}

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// Runs one cycle to its end and records it. Only a ledger failure is an
    /// error; every other failure is a recorded `failed` cycle.
    pub async fn run(&mut self) -> Result<CycleSummary, LedgerError> {
        let started = self.clock.now();
        // Before the cycle opens: it is recorded under the proposer that
        // will choose in it, which may depend on the recent record.
        let recent = self.history().await?;
        self.proposer.prepare(&recent);
        let id = self
            .ledger
            .open_cycle(started, self.proposer.kind())
            .await?;
        self.progress.start_cycle(id.get());
        let (built_on, live_metric, ended) = match self.observe(id).await {
            Ok(seen) => {
                let ended = self.dispatch(id, &seen).await;
                // A realization measures the live profile itself.
                let built_on = seen.built_on.filter(|_| seen.realizing.is_none());
                (built_on, seen.obs.metrics.seconds_per_token, ended)
            }
            Err(stop) => (None, None, Err(stop)),
        };
        self.finish(id, started, ended, built_on, live_metric).await
    }
}

// What needs no proposer: closing a cycle, the floors, the protocols. A
// manual comparison ([`manual`]) runs with none.
impl<P, C: Clock> CycleRunner<'_, P, C> {
    /// Records how cycle `id` ended (`ended`) and closes it. Only a ledger
    /// failure is an error.
    async fn finish(
        &mut self,
        id: CycleId,
        started: chrono::DateTime<chrono::Utc>,
        ended: Result<Done, Stop>,
        built_on: Option<StageId>,
        live_metric: Option<f64>,
    ) -> Result<CycleSummary, LedgerError> {
        self.progress.phase(phase::RECORD, "");
        let now = self.clock.now();
        let mut deferred = None;
        let (outcome, done) = match ended {
            Ok(done) if done.judged.verdict == VerdictKind::Failed => (
                CycleOutcome::Failed(done.judged.reason.clone().unwrap_or_default()),
                done,
            ),
            Ok(done) => (CycleOutcome::Completed, done),
            Err(Stop::Ledger(e)) => return Err(e),
            Err(Stop::Aborted(why, tried)) => {
                let done = self
                    .record_failure(id, tried, &format!("aborted: {why}"), &why)
                    .await?;
                (CycleOutcome::Aborted(why), done)
            }
            Err(Stop::Failed(why, tried)) => {
                let done = self.record_failure(id, tried, &why, &why).await?;
                (CycleOutcome::Failed(why), done)
            }
            Err(Stop::Deferred(at, d, tried)) => {
                deferred = Some(at);
                let (why, done) = self.record_deferral(id, at, &d, tried).await?;
                (CycleOutcome::Aborted(why), done)
            }
        };
        if let CycleOutcome::Failed(why) = &outcome {
            tracing::error!(cycle = %id, "cycle failed: {why}");
        }
        let status = match &outcome {
            CycleOutcome::Completed => crate::vocab::CycleStatus::Completed,
            CycleOutcome::Failed(_) => crate::vocab::CycleStatus::Failed,
            CycleOutcome::Aborted(_) => crate::vocab::CycleStatus::Aborted,
        };
        let mut summary = CycleSummary::of(
            id,
            status,
            done,
            built_on,
            live_metric,
            (now - started).as_seconds_f64(),
        );
        summary.deferred = deferred;
        tracing::debug!(cycle = %id, "phase record");
        let closed = self.ledger.close_cycle(id, &outcome, now).await;
        self.progress.end_cycle();
        closed?;
        Ok(summary)
    }

    /// Records the `failed` verdict (`why`) of the experiment the cycle had
    /// under way, or of the cycle when it had none, unless it is recorded
    /// already (then as `recorded_why`, the experiment's own words).
    async fn record_failure(
        &self,
        cycle: CycleId,
        tried: Tried,
        why: &str,
        recorded_why: &str,
    ) -> Result<Done, LedgerError> {
        if tried.recorded {
            let judged = Judged {
                floor: tried.floor,
                ..Judged::refusal(VerdictKind::Failed, recorded_why)
            };
            return Ok(Done::new(tried, judged));
        }
        let v = NewVerdict::refusal(VerdictKind::Failed, why, self.clock.now());
        match tried.experiment_id {
            Some(e) => self.ledger.insert_verdict(e, &v).await?,
            None => self.ledger.insert_cycle_verdict(cycle, &v).await?,
        };
        let judged = Judged {
            floor: tried.floor,
            ..Judged::refusal(VerdictKind::Failed, why)
        };
        Ok(Done::new(tried, judged))
    }

    /// The protocols the menu's (non-remeasure) experiments are measured with.
    fn candidate_methods(&self) -> Vec<Method> {
        candidate_methods_of(self.menu, |m| self.candidate_method(m))
    }

    /// The protocol an A/B of an entry whose menu method is `method` runs
    /// under: its scorer's (`None` when the config has none for it).
    fn candidate_method(&self, method: Method) -> Option<Method> {
        self.scorers.for_candidate(method).map(|s| s.method())
    }

    /// top-k as the checkpoint the config names declares it, and where:
    /// the planners' cache-slot rule needs it before any pin list or
    /// trace exists ([`plan::checkpoint`]).
    fn declared_top_k(&self) -> Option<(u32, String)> {
        crate::plan::checkpoint::declared_by(self.config)
            .top_k
            .map(|said| (said.value, said.from))
    }

    async fn floor(
        &self,
        method: Method,
        base: &ProfileFile,
        not_before: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<CurrentFloor, LedgerError> {
        // The machine now, as the stack's own runs felt it: the pressure of
        // the last runs, comparable with the floor's (both include the
        // stack's own threads), where the kernel's idle average is not.
        let recent = self.ledger.recent_cpu_pressure(RECENT_RUNS).await?;
        let contended = self.ledger.recent_contention(RECENT_RUNS).await?;
        let now = crate::measure::pressure::Pressure {
            cpu: judge::noise::median(&recent),
            contention: judge::noise::median(&contended),
            ..Default::default()
        };
        let rules = Freshness {
            max_age: self.config.measure.noise_floor_max_age_s.duration(),
            max_floor: self.policy.max_floor,
            now,
            pressure_shift: self.config.measure.floor_pressure_shift,
            contention_rise: self.policy.max_contention_rise,
            // A confirmation may use any floor still valid, its win's
            // included, unless `[measure] confirmation_new_floor` asks for
            // one measured after the win.
            not_before: not_before.filter(|_| self.policy.confirmation_new_floor),
        };
        let live = base.profile.digest();
        let now = self.clock.now();
        let current = CurrentFloor::load(
            self.ledger,
            &self.config.stack.name,
            method,
            &live,
            &rules,
            now,
        )
        .await?;
        // A floor a stage made stale (approved, or waiting for approval
        // and built on) may carry over to the stage's profile
        // (`floor_carry`).
        if let Some(latest) = current.row.as_ref().filter(|_| current.stale)
            && current.measured_on_another_profile(&live)
            && let Some(carried) = self.carry_floor(method, latest, &live).await?
        {
            let method = carried.method(latest);
            tracing::debug!("the noise floor carries over: {method}");
            return Ok(CurrentFloor::carried(
                latest,
                &live,
                carried.value,
                method,
                &rules,
                now,
            ));
        }
        Ok(current)
    }
}

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// Reads the live profile, expires what is no longer staged on it,
    /// observes the stack and settles the cycle's base, recording the
    /// observation.
    async fn observe(&self, id: CycleId) -> Result<Seen, Stop> {
        self.stand_aside_at_start().await?;
        // The phase lines (debug level) mark the cycle's timeline for
        // people reading a log and for the crash-consistency test.
        self.progress.phase(phase::OBSERVE, "");
        tracing::debug!(cycle = %id, "phase observe");
        let cfg = self.config;
        let live = ProfileFile::load(&cfg.stack.live_profile).map_err(|e| {
            Stop::failed(format!(
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
            .map_err(|e| Stop::failed(e.to_string()))?;
        warn_new_gaps(&obs.gaps);
        // An applied stage the live server now runs, not realized yet.
        let realizing = self.realization_due(&live).await?;
        // The profile the cycle builds on: the live profile, or a confirmed
        // win that waits for approval ([`base`]). The observation records
        // both: what the planner refuses in this cycle is filed under the
        // base.
        let (base, built_on) = self.working_base(live).await?;
        self.ledger
            .insert_observation(&NewObservation {
                cycle_id: id,
                observed_at: now,
                metrics: obs.metrics_json(),
                heat: obs.heat_json(),
                live_profile_digest: live_digest,
                base_profile_digest: base.profile.digest(),
            })
            .await?;
        Ok(Seen {
            base,
            built_on,
            realizing,
            obs,
            now,
        })
    }

    /// Chooses the kind of cycle and runs it.
    async fn dispatch(&mut self, id: CycleId, seen: &Seen) -> Result<Done, Stop> {
        let base = &seen.base;
        // A win waiting for its confirmation: with `[measure]
        // confirmation_new_floor`, a floor measured before it does not
        // judge the confirmation (`Self::floor`).
        let pending = self.pending_win(base).await?;
        let not_before = match pending {
            Some(p) => self.ledger.verdict(p.win()).await?.map(|v| v.decided_at),
            None => None,
        };

        // 1. A floor the menu's experiments need is missing or stale, and
        //    there is no bound to judge against without one. With a bound
        //    (`max_noise_floor`), the A/B is judged against it first and
        //    measures a floor only when the bound cannot decide
        //    (`experiment::ab`).
        let methods = self.candidate_methods();
        for &method in methods.iter().filter(|_| self.policy.max_floor.is_none()) {
            let current = self.floor(method, base, not_before).await?;
            if current.stale {
                let scorer = self
                    .scorers
                    .for_live(method)
                    .ok_or_else(|| Stop::failed(no_scorer(method)))?;
                if let Some(why) = &current.why {
                    tracing::info!(cycle = %id, "measuring the noise floor: {why}");
                }
                return self
                    .remeasure(id, None, Some(Scheduled::FloorRefresh), base, &scorer)
                    .await;
            }
        }

        // What an applied stage realized on the live server.
        if let Some(due) = &seen.realizing {
            return self.realize(id, due).await;
        }

        // 2. An unconfirmed win on the base is confirmed first (unless a
        //    classmate claimed it first).
        if let Some(Pending::Waiting { win, until }) = pending {
            return self.wait_for_classmates(id, win, until, base).await;
        }
        if let Some(Pending::Own(first) | Pending::Classmate(first)) = pending
            && let Some(done) = self.confirm(id, first, base).await?
        {
            return Ok(done);
        }

        // 3. Staged wins on different knobs are combined.
        if let Some(parts) = self.composition_due(base).await? {
            return self.compose(id, parts, base, &seen.obs).await;
        }

        // 4. The proposer chooses.
        self.propose(id, seen, &methods).await
    }
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

/// Runs whose pressure says what the machine is like now (two blocks).
const RECENT_RUNS: u32 = 8;

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
        AbError::Cancelled { runs } => Stop::aborted(format!(
            "shutdown during the measurement, after {runs} run(s)"
        )),
        AbError::Ledger(e) => Stop::Ledger(e),
        AbError::Gate(e) => Stop::failed(e.to_string()),
        AbError::Deferred { deferral, .. } => {
            Stop::Deferred(DeferredAt::BetweenRuns, deferral, Tried::default())
        }
        other => Stop::failed(other.to_string()),
    }
}

/// The protocols `menu`'s experiments other than `remeasure` are measured
/// with, each entry's menu method mapped by `measured_by` (the scorer an
/// A/B of it gets), sorted and without repeats.
fn candidate_methods_of(
    menu: &crate::menu::Menu,
    measured_by: impl Fn(Method) -> Option<Method>,
) -> Vec<Method> {
    let mut methods: Vec<Method> = menu
        .entries()
        .iter()
        .filter(|e| e.id != MenuId::Remeasure)
        .filter_map(|e| measured_by(e.method))
        .collect();
    methods.sort_by_key(|m| m.as_str());
    methods.dedup();
    methods
}
