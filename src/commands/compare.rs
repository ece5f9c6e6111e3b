//! `orchestrator compare`: the judge as a command. A profile a person or a
//! tuner made is judged against the live profile (or `--base`) exactly as
//! a proposed candidate is: the cycle's own A/B ([`CycleRunner::run_manual`]),
//! with its floor rules, and for a win the independent confirmation a
//! staged win needs. Both are recorded as manual experiments, in cycles of
//! their own; nothing is staged and the live profile is never written.
//!
//! Like the daemon, it holds the ledger's daemon lock while it measures
//! (two processes measuring one stack disturb each other's runs), kills
//! what a dead daemon left running, and starts the embedded stack when the
//! config has one.
//!
//! Exit status: 0 when judged, whatever the verdict (it is in the output);
//! 1 when the comparison could not be measured (recorded `failed`); 2 for a
//! usage or configuration problem, before anything is measured.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use serde_json::json;

use super::UsageError;
use crate::cli::CompareArgs;
use crate::clock::SystemClock;
use crate::config::Config;
use crate::cycle::{CycleRunner, CycleSummary};
use crate::display;
use crate::ledger::{CycleId, ExperimentId, Ledger, Run};
use crate::measure::by_protocol::Scorers;
use crate::menu::Menu;
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;
use crate::progress::Progress;
use crate::vocab::{Arm, CycleStatus, Digest, VerdictKind};

pub fn run(config_path: &Path, args: &CompareArgs) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let menu = crate::stack_support::stack_menu(&config, &Menu::load(&config.menu_dir)?)?;
    // Both profiles are read before anything is locked, started or measured.
    let candidate = read_profile(&args.candidate, "--candidate")?;
    let base = args
        .base
        .as_deref()
        .map(|p| read_profile(p, "--base"))
        .transpose()?;
    let comparison = super::runtime()?.block_on(compare(&config, &menu, candidate, base))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", comparison.text());
    }
    match comparison.failure() {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// A profile named on the command line; any problem with it is the
/// user's to fix (exit 2).
fn read_profile(path: &Path, flag: &str) -> Result<ProfileFile, UsageError> {
    ProfileFile::load(path).map_err(|e| {
        UsageError(format!(
            "{flag} {}: {e}; give the path of a TOML profile with the live profile's keys",
            path.display()
        ))
    })
}

async fn compare(
    config: &Config,
    menu: &Menu,
    candidate: ProfileFile,
    base: Option<ProfileFile>,
) -> anyhow::Result<Comparison> {
    if let Some(dir) = config.ledger_path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the ledger's directory {}", dir.display()))?;
    }
    // Held until this function returns: no daemon measures beside us.
    let _lock = crate::daemon::lock::DaemonLock::acquire(&config.ledger_path)
        .context("a comparison measures the stack the daemon measures, and each would disturb the other's runs: stop the daemon while comparing")?;
    crate::daemon::reap_orphans(&config.ledger_path)?;
    let ledger = match &config.ledger_postgres {
        Some(pg) => pg.open(crate::ledger::DEFAULT_BUSY_TIMEOUT).await?,
        None => Ledger::open(&config.ledger_path).await?,
    };
    let _stack_lock = match &config.ledger_postgres {
        Some(_) => Some(ledger.lock_stack(&config.stack.name).await?),
        None => None,
    };
    let ledger = ledger.scoped(config.stack.scope());
    // Holding the locks, a `running` cycle is a dead process's.
    ledger
        .abort_running_cycles(
            "found `running` when `orchestrator compare` started: the process that ran it ended mid-cycle",
            chrono::Utc::now(),
        )
        .await?;

    let (handle, cancel) = Cancel::new();
    let signals = tokio::spawn(crate::daemon::watch_signals(handle));
    let mut stack = None;
    if let Some(e) = &config.embedded {
        crate::embedded::prepare(config, e, &cancel).await?;
        stack = Some(crate::embedded::start(config, e, &cancel).await?);
    }
    let judged = judge(config, menu, &ledger, &cancel, candidate, base).await;
    signals.abort();
    if let Some(stack) = stack {
        stack.stop().await;
    }
    ledger.close().await;
    judged
}

/// The A/B, and its confirmation when it wins, then what the ledger holds
/// of them.
async fn judge(
    config: &Config,
    menu: &Menu,
    ledger: &Ledger,
    cancel: &Cancel,
    candidate: ProfileFile,
    base: Option<ProfileFile>,
) -> anyhow::Result<Comparison> {
    let live = &config.stack.live_profile;
    let base_is_live = base.is_none();
    let base = match base {
        Some(b) => b,
        None => ProfileFile::load(live).map_err(|e| {
            UsageError(format!(
                "the live profile {}: {e}; compare against another profile with --base, or fix `[stack] live_profile` in {}",
                live.display(),
                config.path.display()
            ))
        })?,
    };
    if base.profile.digest() == candidate.profile.digest() {
        return Err(UsageError(format!(
            "{} is the same profile as {} (digest {}): there is nothing to compare",
            candidate.path.display(),
            base.path.display(),
            candidate.profile.digest().short()
        ))
        .into());
    }
    let scorers = Scorers::from_config(config);
    if !base_is_live && scorers.bench.is_none() {
        // A floor of the surface protocol is an A/A of the live server
        // (`measure::by_protocol`), which says nothing of another base.
        return Err(UsageError(format!(
            "--base needs a stack measured by a bench command: {} measures candidates through the serving surface, whose noise floor is the live server's; compare against the live profile (leave out --base), or add [stack.bench]",
            config.path.display()
        ))
        .into());
    }
    let notes = json!({
        "candidate_file": absolute(&candidate.path),
        "base_file": absolute(&base.path),
        "base_is_live": base_is_live,
    });
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .context("building the HTTP client")?;
    let progress = Progress::default();
    let reporter = progress.spawn_reporter(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let mut runner = CycleRunner {
        config,
        policy: config.policy,
        menu,
        ledger,
        // A manual comparison asks no proposer.
        proposer: &mut (),
        scorers: &scorers,
        clock: &SystemClock,
        cancel: cancel.clone(),
        http: &http,
        progress,
        // A comparison a person asked for runs when asked: standing aside
        // for the live server's users is the daemon's (`daemon::stand_aside`).
        stand_aside: None,
        // No daemon waited before it.
        glances: &[],
    };
    let first = runner.run_manual(&base, &candidate, None, &notes).await?;
    let confirmation = match (first.verdict, first.experiment_id) {
        (Some(VerdictKind::Win), Some(win)) if !cancel.is_cancelled() => Some(
            runner
                .run_manual(&base, &candidate, Some(win), &notes)
                .await?,
        ),
        _ => None,
    };
    reporter.abort();
    let ab = Judged::read(ledger, &first).await?;
    let confirmation = match &confirmation {
        Some(c) => Some(Judged::read(ledger, c).await?),
        None => None,
    };
    Ok(Comparison::new(
        Side::of(&candidate, false),
        Side::of(&base, base_is_live),
        ab,
        confirmation,
    ))
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// What `compare` prints (as JSON with `--json`).
#[derive(Debug, Serialize)]
struct Comparison {
    /// The judgment at a staged win's standard: a `win` only when the A/B
    /// and its confirmation both won; else the verdict that ended it.
    verdict: Option<VerdictKind>,
    /// The A/B won and its confirmation won again.
    confirmed: bool,
    /// The effect claimed (the confirmation's, as a stage's is; else the
    /// A/B's): log ratio candidate/base of seconds per token.
    effect_log_ratio: Option<f64>,
    interval_log_ratio: Option<[f64; 2]>,
    /// Base over candidate seconds per token: above 1 is faster.
    speedup: Option<f64>,
    speedup_interval: Option<[f64; 2]>,
    candidate: Side,
    base: Side,
    ab: Judged,
    confirmation: Option<Judged>,
    /// Recorded wall time of every engine run of the comparison (floors included).
    engine_s: f64,
    /// Always false: a comparison is never staged.
    staged: bool,
}

#[derive(Debug, Serialize)]
struct Side {
    path: PathBuf,
    digest: Digest,
    /// The base is the live profile (no `--base`).
    live: bool,
}

impl Side {
    fn of(p: &ProfileFile, live: bool) -> Side {
        Side {
            path: absolute(&p.path),
            digest: p.profile.digest(),
            live,
        }
    }
}

/// One judged A/B (a cycle of its own), as the ledger holds it.
#[derive(Debug, Serialize)]
struct Judged {
    cycle_id: CycleId,
    status: Option<CycleStatus>,
    experiment_id: Option<ExperimentId>,
    verdict: Option<VerdictKind>,
    effect_log_ratio: Option<f64>,
    interval_log_ratio: Option<[f64; 2]>,
    /// The floor the verdict was judged against, as a log ratio.
    noise_floor: Option<f64>,
    /// `noise_floor` is the bound `[measure] max_noise_floor`: no floor was
    /// needed to decide.
    floor_is_bound: bool,
    pairs: u32,
    reason: Option<String>,
    runs: Runs,
    /// The floor's A/A this cycle measured (the bound could not decide and
    /// no valid floor of the base existed), with its runs.
    floor_measured: Option<FloorAa>,
}

#[derive(Debug, Serialize)]
struct FloorAa {
    experiment_id: ExperimentId,
    verdict: Option<VerdictKind>,
    runs: Runs,
}

/// The runs of one experiment.
#[derive(Debug, Default, Serialize)]
struct Runs {
    baseline: u32,
    candidate: u32,
    warmup: u32,
    /// Runs without a figure (failed or refused).
    failed: u32,
    /// Runs of blocks the judge discarded (interference or discordance).
    discarded: u32,
    engine_s: f64,
}

impl Runs {
    fn of(runs: &[Run]) -> Runs {
        let mut out = Runs::default();
        for r in runs {
            match r.arm {
                Arm::Baseline => out.baseline += 1,
                Arm::Candidate => out.candidate += 1,
                Arm::Warmup => out.warmup += 1,
            }
            out.failed += u32::from(r.seconds_per_token.is_none());
            out.discarded += u32::from(r.discarded);
            out.engine_s += r.duration_s;
        }
        out
    }
}

impl Judged {
    async fn read(ledger: &Ledger, cycle: &CycleSummary) -> anyhow::Result<Judged> {
        let mut judged = Judged {
            cycle_id: cycle.cycle_id,
            status: cycle.status,
            experiment_id: cycle.experiment_id,
            verdict: cycle.verdict,
            effect_log_ratio: None,
            interval_log_ratio: None,
            noise_floor: None,
            floor_is_bound: false,
            pairs: 0,
            reason: cycle.reason.clone(),
            runs: Runs::default(),
            floor_measured: None,
        };
        if let Some(id) = cycle.experiment_id {
            if let Some(v) = ledger.verdict(id).await? {
                judged.verdict = Some(v.kind);
                judged.effect_log_ratio = v.effect;
                judged.interval_log_ratio = v.interval.map(|i| [i.low, i.high]);
                judged.noise_floor = v.noise_floor;
                judged.floor_is_bound = v.floor_is_bound;
                judged.pairs = v.pairs;
                judged.reason = v.reason.clone().or(judged.reason);
            }
            judged.runs = Runs::of(&ledger.runs(id).await?);
        }
        for other in ledger.cycle_experiments(cycle.cycle_id).await? {
            if Some(other) != cycle.experiment_id {
                judged.floor_measured = Some(FloorAa {
                    experiment_id: other,
                    verdict: ledger.verdict(other).await?.map(|v| v.kind),
                    runs: Runs::of(&ledger.runs(other).await?),
                });
            }
        }
        Ok(judged)
    }

    fn engine_s(&self) -> f64 {
        self.runs.engine_s
            + self
                .floor_measured
                .as_ref()
                .map_or(0.0, |f| f.runs.engine_s)
    }

    /// Why it (`what`) could not be judged: the run failed or was cut short.
    fn failure(&self, what: &str) -> Option<String> {
        match (self.status, self.verdict) {
            (Some(CycleStatus::Completed), Some(v)) if v != VerdictKind::Failed => None,
            (status, _) => Some(format!(
                "{what} (cycle {}) could not be measured ({}): {}",
                self.cycle_id,
                status.map_or("not closed", CycleStatus::as_str),
                self.reason.as_deref().unwrap_or("no reason recorded")
            )),
        }
    }

    fn line(&self, label: &str) -> String {
        let verdict = self.verdict.map_or("-", VerdictKind::as_str);
        let effect = match (self.effect_log_ratio, self.interval_log_ratio) {
            (Some(e), Some([lo, hi])) => format!("  {}", display::effect(e, lo, hi)),
            _ => String::new(),
        };
        let floor = match self.noise_floor {
            Some(f) => format!("  floor {}", display::verdict_floor(f, self.floor_is_bound)),
            None => String::new(),
        };
        let mut out = format!(
            "{label:<13} cycle {}, experiment #{}: {verdict}{effect}{floor}\n",
            self.cycle_id,
            self.experiment_id.map_or("-".into(), |e| e.to_string()),
        );
        out.push_str(&format!(
            "{:<13} runs: {} base, {} candidate, {} warmup ({} failed, {} discarded), {:.2} engine s\n",
            "",
            self.runs.baseline,
            self.runs.candidate,
            self.runs.warmup,
            self.runs.failed,
            self.runs.discarded,
            self.runs.engine_s
        ));
        if let Some(f) = &self.floor_measured {
            out.push_str(&format!(
                "{:<13} the floor's A/A (experiment #{}, {}): {} runs, {:.2} engine s\n",
                "",
                f.experiment_id,
                f.verdict.map_or("-", VerdictKind::as_str),
                f.runs.baseline + f.runs.candidate + f.runs.warmup,
                f.runs.engine_s
            ));
        }
        if let Some(r) = &self.reason {
            out.push_str(&format!("{:<13} {r}\n", ""));
        }
        out
    }
}

impl Comparison {
    fn new(candidate: Side, base: Side, ab: Judged, confirmation: Option<Judged>) -> Comparison {
        let last = confirmation.as_ref().unwrap_or(&ab);
        let confirmed = ab.verdict == Some(VerdictKind::Win)
            && confirmation
                .as_ref()
                .is_some_and(|c| c.verdict == Some(VerdictKind::Win));
        let engine_s = ab.engine_s() + confirmation.as_ref().map_or(0.0, Judged::engine_s);
        Comparison {
            verdict: last.verdict,
            confirmed,
            effect_log_ratio: last.effect_log_ratio,
            interval_log_ratio: last.interval_log_ratio,
            speedup: last.effect_log_ratio.map(|e| (-e).exp()),
            speedup_interval: last
                .interval_log_ratio
                .map(|[lo, hi]| [(-hi).exp(), (-lo).exp()]),
            candidate,
            base,
            ab,
            confirmation,
            engine_s,
            staged: false,
        }
    }

    /// Why the comparison could not be judged (exit 1), if so.
    fn failure(&self) -> Option<String> {
        self.ab.failure("the A/B").or_else(|| {
            self.confirmation
                .as_ref()
                .and_then(|c| c.failure("the confirmation"))
        })
    }

    fn text(&self) -> String {
        let base = if self.base.live {
            format!("the live profile {}", self.base.path.display())
        } else {
            self.base.path.display().to_string()
        };
        let mut out = format!(
            "compare {} ({}) against {base} ({})\n",
            self.candidate.path.display(),
            self.candidate.digest.short(),
            self.base.digest.short()
        );
        out.push_str(&self.ab.line("A/B"));
        if let Some(c) = &self.confirmation {
            out.push_str(&c.line("confirmation"));
        }
        let verdict = self.verdict.map_or("-", VerdictKind::as_str);
        let claim = match (self.effect_log_ratio, self.interval_log_ratio) {
            (Some(e), Some([lo, hi])) => format!(
                ": {} (x{:.2} [x{:.2}, x{:.2}] the base's speed)",
                display::effect(e, lo, hi),
                (-e).exp(),
                (-hi).exp(),
                (-lo).exp()
            ),
            _ => String::new(),
        };
        let standing = match (self.verdict, self.confirmed) {
            (Some(VerdictKind::Win), true) => "a confirmed win",
            (_, _) if self.ab.verdict == Some(VerdictKind::Win) => {
                "a win the confirmation did not repeat"
            }
            _ => "no win",
        };
        out.push_str(&format!(
            "verdict: {verdict}, {standing}{claim}; {:.2} engine s; recorded as a manual experiment, nothing staged\n",
            self.engine_s
        ));
        out
    }
}
