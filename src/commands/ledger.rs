//! `orchestrator ledger`: recent cycles with their verdicts and the
//! daemon's waits among them (why, what wakes it, what did), or with
//! `--check` the ledger's invariants (see `ledger::check`).

use std::path::Path;

use anyhow::Context;

use crate::cli::LedgerArgs;
use crate::config::Config;
use crate::daemon::lock;
use crate::display;
use crate::ledger::{CheckContext, CycleSummary, Violation};
use crate::profile::Profile;

/// A live profile file that does not parse, found by `ledger --check`:
/// the file's fault, not the ledger's, so it is no rule the ledger breaks.
#[derive(Debug, thiserror::Error)]
#[error("the live profile {path} is not whole (see above); {ledger}")]
pub struct BadLiveProfile {
    pub path: String,
    /// What the check says of the ledger itself.
    pub ledger: String,
}

/// The violations found, as the error that makes the command exit 1.
#[derive(Debug, thiserror::Error)]
#[error("the ledger {path} breaks {n} rule(s) (listed above)")]
pub struct Inconsistent {
    pub path: String,
    pub n: usize,
}

pub fn run(config_path: &Path, args: &LedgerArgs) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    if args.check {
        return check(&config, args.json);
    }
    super::runtime()?.block_on(async {
        let opened = super::open_ledger(&config).await?;
        // A read handle scoped to one stack lists that stack's cycles only.
        let ledger = match super::scoped_to_stack(&config, &opened, args.stack.as_deref()).await {
            Ok(l) => l,
            Err(e) => {
                opened.close().await;
                return Err(e);
            }
        };
        let cycles = ledger.recent_cycles(args.limit).await;
        let waits = ledger.recent_waits(args.limit).await;
        ledger.close().await;
        let (cycles, waits) = (cycles?, waits?);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&cycles)?);
            return Ok(());
        }
        if cycles.is_empty() && waits.is_empty() {
            match args.stack.as_deref() {
                Some(stack) => println!(
                    "no cycles of stack `{stack}` recorded yet in {}",
                    super::ledger_name(&config)
                ),
                None => println!("no cycles recorded yet in {}", super::ledger_name(&config)),
            }
            return Ok(());
        }
        // Newest first, the daemon's waits among its cycles by when they
        // began, as many of each as the limit allows.
        let mut waits = waits.iter().peekable();
        for c in &cycles {
            while let Some(w) = waits.next_if(|w| w.started_at >= c.cycle.started_at) {
                print_wait(w);
            }
            let took = c
                .cycle
                .ended_at
                .map(|e| format!("{:.1}s", (e - c.cycle.started_at).as_seconds_f64()))
                .unwrap_or_else(|| "-".into());
            let chooser = chooser(c);
            let (status, note) = status_note(c);
            println!(
                "cycle {:>5}  {:<12} {}  {:<9} {:>8}  {chooser}{note}",
                c.cycle.id.0,
                c.cycle.stack.as_deref().unwrap_or("-"),
                c.cycle.started_at.format("%Y-%m-%d %H:%M:%S"),
                status,
                took,
            );
            for v in &c.verdicts {
                let what = match (&v.menu_id, &v.parameters) {
                    (Some(m), Some(p)) => format!("{m} {p}"),
                    _ if v.manual => "manual (orchestrator compare)".to_string(),
                    _ => "(no experiment)".to_string(),
                };
                let stats = match (v.verdict.effect, v.verdict.interval) {
                    (Some(e), Some(i)) => display::effect(e, i.low, i.high),
                    _ => String::new(),
                };
                println!(
                    "             {:<13} {what}  {stats}{}",
                    v.verdict.kind.as_str(),
                    v.verdict
                        .reason
                        .as_deref()
                        .map(|r| format!("  ({r})"))
                        .unwrap_or_default()
                );
            }
        }
        waits.for_each(print_wait);
        Ok(())
    })
}

/// A wait of the daemon: why, what wakes it, and what did.
fn print_wait(w: &crate::ledger::Wait) {
    let state = match (&w.ended_at, &w.woken_by) {
        (Some(end), Some(by)) => format!("ended after {}: {by}", display::age(*end - w.started_at)),
        _ => format!(
            "waiting, next look at {} at the latest",
            w.next_look_at.format("%Y-%m-%d %H:%M:%S")
        ),
    };
    println!(
        "wait  {:>5}  {:<12} {}  {:<9} {state}{}",
        w.id.0,
        w.stack.as_deref().unwrap_or("-"),
        w.started_at.format("%Y-%m-%d %H:%M:%S"),
        w.kind.as_str(),
        match w.looks {
            0 => String::new(),
            n => format!(" ({n} look(s) found it still due)"),
        }
    );
    println!("             why: {}", w.reason);
    if !w.wakes_on.is_empty() {
        println!("             wakes on: {}", w.wakes_on.join("; "));
    }
}

/// Who chose a cycle's experiment. Only a cycle that recorded a proposal
/// names a proposer (its A/B may have measured a floor too); one whose
/// experiment the orchestrator scheduled itself, or that ended before any
/// proposal, names none. A confirmation or composition that had to measure
/// a floor first is named for itself, not for that floor's A/A (whose
/// verdict comes first).
fn chooser(c: &CycleSummary) -> String {
    // A person's: `orchestrator compare`.
    if let Some(why) = c
        .verdicts
        .iter()
        .filter(|v| v.manual)
        .find_map(|v| v.scheduled())
    {
        return why.to_string();
    }
    match (
        c.cycle.proposer,
        c.verdicts.iter().filter_map(|v| v.scheduled()).max(),
    ) {
        (Some(p), _) => format!("proposer {p}"),
        (None, Some(why)) => format!("scheduled ({why})"),
        (None, None) => "no proposal".to_string(),
    }
}

/// A cycle's status and what follows it on its line: a deferred cycle is
/// `aborted` in the ledger, and says deferred, at which point, why and
/// after how long a wait.
fn status_note(c: &CycleSummary) -> (&'static str, String) {
    match &c.deferral {
        Some(d) => (
            "deferred",
            format!(
                "  deferred at {} after waiting {:.0} s: {}",
                d.during, d.waited_s, d.reason
            ),
        ),
        None => (
            c.cycle.status.as_str(),
            c.cycle
                .error
                .as_deref()
                .map(|e| format!("  error: {e}"))
                .unwrap_or_default(),
        ),
    }
}

/// `ledger --check`: reads the ledger (never writes it) and lists every
/// broken rule; a `running` cycle is legal only while a daemon holds the
/// ledger's lock (on PostgreSQL: the stack's advisory lock, from any host).
/// The live profile must parse (a torn file would not).
fn check(config: &Config, json: bool) -> anyhow::Result<()> {
    let path = &config.ledger_path;
    let name = super::ledger_name(config);
    super::require_ledger(config)?;
    let file_holder = match config.ledger_postgres {
        Some(_) => None,
        None => lock::holder(path)?,
    };
    let mut violations: Vec<Violation> = Vec::new();
    let live = &config.stack.live_profile;
    // The profile is the stack's file, not a row: one that does not parse
    // is said apart from the ledger's rules, with how to mend the file.
    let (live_digest, bad_profile) = match Profile::load(live) {
        Ok(p) => (Some(p.digest()), None),
        Err(_) if !live.exists() => (None, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let (found, holder) = super::runtime()?
        .block_on(async {
            // Scoped: the live profile read above is this host's stack's.
            let ledger = super::open_ledger(config)
                .await?
                .scoped(config.stack.scope());
            let holder = match config.ledger_postgres {
                Some(_) => ledger.stack_lock_holder(&config.stack.name).await?,
                None => file_holder,
            };
            // On a shared PostgreSQL ledger each stack's daemon holds its own
            // lock: ask the server for every stack with a running cycle.
            let daemon_stacks = match config.ledger_postgres {
                Some(_) => {
                    let mut live = Vec::new();
                    for stack in ledger.running_stacks().await? {
                        if ledger.stack_lock_holder(&stack).await?.is_some() {
                            live.push(stack);
                        }
                    }
                    Some(live)
                }
                None => None,
            };
            let ctx = CheckContext {
                daemon_running: holder.is_some(),
                daemon_stacks,
                live_digest,
            };
            let found = ledger.check(&ctx).await;
            ledger.close().await;
            anyhow::Ok((found?, holder))
        })
        .with_context(|| format!("checking the ledger {name}"))?;
    violations.extend(found);
    // The parser's message spans lines (a TOML excerpt): it goes under the
    // fix, indented, so the first line says whose fault it is.
    let profile_fix = bad_profile.as_ref().map(|e| {
        let why: Vec<String> = e.lines().map(|l| format!("          {l}")).collect();
        format!(
            "the live profile {} is not whole. This is the profile file, not the ledger: \
             correct the line named below, or write back the settings your stack runs with \
             (the candidates it was measured with are kept in {} by digest; `orchestrator \
             stage list --all` names them), then run `orchestrator check`\n{}",
            live.display(),
            crate::cycle::profiles_dir(live).display(),
            why.join("\n")
        )
    });
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "ledger": name,
                // The pid on SQLite; the holder's session on PostgreSQL.
                "daemon_pid": holder,
                "consistent": violations.is_empty(),
                "violations": violations,
                "live_profile": {
                    "path": live,
                    "whole": bad_profile.is_none(),
                    "error": bad_profile,
                },
            }))?
        );
    } else {
        for v in &violations {
            println!("VIOLATION {:<24} {}", format!("{:?}", v.rule), v.message);
        }
        if violations.is_empty() {
            println!(
                "ledger {} is consistent{}",
                name,
                holder
                    .as_deref()
                    .map(|p| match config.ledger_postgres {
                        Some(_) => format!(" (the stack's daemon holds it: {p})"),
                        None => format!(" (daemon pid {p} holds it)"),
                    })
                    .unwrap_or_default()
            );
        }
        if let Some(fix) = &profile_fix {
            println!("PROFILE   {fix}");
        }
    }
    if !violations.is_empty() {
        return Err(Inconsistent {
            path: name,
            n: violations.len(),
        }
        .into());
    }
    match bad_profile {
        None => Ok(()),
        Some(_) => Err(BadLiveProfile {
            path: live.display().to_string(),
            ledger: format!("the ledger {name} itself is consistent"),
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::LedgerArgs;
    use crate::ledger::tests::{PG_PASSWORD_VAR, bandit_proposal, fresh_postgres, staged_win, t};
    use crate::ledger::{Ledger, NewVerdict};
    use crate::vocab::{ProposerKind, VerdictKind};

    /// A cycle that got no proposal names no proposer, though the daemon
    /// that ran it was configured with one: one that failed before
    /// proposing, and one whose experiment the orchestrator scheduled.
    #[tokio::test]
    async fn a_cycle_without_a_proposal_names_no_proposer() {
        let ledger = Ledger::open_in_memory().await.unwrap();
        let failed = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        let v = NewVerdict::refusal(VerdictKind::Failed, "the live profile cannot be read", t(1));
        ledger.insert_cycle_verdict(failed, &v).await.unwrap();
        let (_, first, _) = staged_win(&ledger, 10).await;
        let proposed = ledger
            .open_cycle(t(100), ProposerKind::Bandit)
            .await
            .unwrap();
        ledger
            .insert_proposal(&bandit_proposal(proposed, t(101)))
            .await
            .unwrap();
        let cycles = ledger.recent_cycles(10).await.unwrap();
        let line = |id| chooser(cycles.iter().find(|c| c.cycle.id == id).unwrap());
        assert_eq!(line(failed), "no proposal");
        assert_eq!(line(proposed), "proposer bandit");
        // staged_win's cycle: a first A/B and its confirmation, no proposal.
        let win_cycle = cycles
            .iter()
            .find(|c| {
                c.verdicts
                    .iter()
                    .any(|v| v.verdict.experiment_id == Some(first))
            })
            .unwrap();
        assert_eq!(win_cycle.cycle.proposer, None);
        assert!(
            chooser(win_cycle).starts_with("scheduled"),
            "{}",
            chooser(win_cycle)
        );
        let json = serde_json::to_value(&cycles).unwrap();
        assert!(
            json.as_array()
                .unwrap()
                .iter()
                .any(|c| c["cycle"]["proposer"].is_null())
        );
    }

    /// A scheduled cycle is named for what it was scheduled for, and a
    /// confirmation or composition that measured a floor first is named for
    /// itself, not for that floor (whose verdict comes first).
    #[tokio::test]
    async fn a_scheduled_cycle_is_named_for_its_kind_not_its_floor() {
        use crate::ledger::tests::experiment;
        use crate::ledger::{ExperimentId, NewExperiment};
        use crate::menu::MenuId;
        let ledger = Ledger::open_in_memory().await.unwrap();
        let verdict = |kind| NewVerdict {
            kind,
            effect: Some(-0.1),
            interval: Some(crate::ledger::Interval {
                low: -0.2,
                high: -0.05,
            }),
            noise_floor: Some(0.03),
            pairs: 4,
            method: Some("test".into()),
            reason: None,
            ..NewVerdict::refusal(kind, "", t(2))
        };
        let record = async |e: NewExperiment, kind| -> ExperimentId {
            let id = ledger.insert_experiment(&e).await.unwrap();
            ledger.insert_verdict(id, &verdict(kind)).await.unwrap();
            id
        };
        let floor = |cycle| NewExperiment {
            menu_id: MenuId::Remeasure,
            parameters: serde_json::json!({}),
            ..experiment(cycle, 1, 1)
        };
        let opened = async || ledger.open_cycle(t(1), ProposerKind::Bandit).await.unwrap();
        let refresh = opened().await;
        record(floor(refresh), VerdictKind::WithinNoise).await;
        let composition = opened().await;
        record(floor(composition), VerdictKind::WithinNoise).await;
        let composite = record(experiment(composition, 1, 2), VerdictKind::Win).await;
        let confirmation = opened().await;
        record(floor(confirmation), VerdictKind::WithinNoise).await;
        let again = NewExperiment {
            confirmation_of: Some(composite),
            ..experiment(confirmation, 1, 2)
        };
        record(again, VerdictKind::Win).await;
        let cycles = ledger.recent_cycles(10).await.unwrap();
        let line = |id| chooser(cycles.iter().find(|c| c.cycle.id == id).unwrap());
        assert_eq!(line(refresh), "scheduled (noise floor refresh)");
        assert_eq!(line(composition), "scheduled (composition)");
        assert_eq!(line(confirmation), "scheduled (confirmation)");
    }

    /// `orchestrator ledger --check` on a PostgreSQL ledger named by the
    /// config: consistent passes; a cycle left running with no daemon is
    /// flagged (exit 1 through `Inconsistent`).
    #[test]
    fn ledger_check_works_on_a_postgres_ledger() {
        let rt = crate::commands::runtime().unwrap();
        let Some(ledger) = rt.block_on(fresh_postgres()) else {
            return;
        };
        let url = ledger.path().display().to_string();
        rt.block_on(staged_win(&ledger, 1));
        let dir = tempfile::tempdir().unwrap();
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
        let text = std::fs::read_to_string(shipped).unwrap().replace(
            "path = \"ledger/orchestrator.db\"",
            &format!("url = \"{url}\"\npassword_env = \"{PG_PASSWORD_VAR}\""),
        );
        let config = dir.path().join("config.toml");
        std::fs::write(&config, text).unwrap();
        let args = LedgerArgs {
            limit: 20,
            json: false,
            check: true,
            stack: None,
        };
        run(&config, &args).expect("a consistent PostgreSQL ledger passes");

        rt.block_on(ledger.open_cycle(t(1000), ProposerKind::Bandit))
            .unwrap();
        let err = run(&config, &args).unwrap_err();
        let found = err.downcast_ref::<Inconsistent>().expect("inconsistent");
        assert_eq!(found.n, 1, "{err}");
        assert_eq!(found.path, url);
        // While a daemon of this stack holds its lock, its newest running
        // cycle is legal.
        let config_now = Config::load(&config).unwrap();
        let lock = rt
            .block_on(ledger.lock_stack(&config_now.stack.name))
            .unwrap();
        run(&config, &args).expect("the running cycle of a live daemon is legal");
        drop(lock);
        // Nothing of the SQLite default was created beside the config.
        assert!(!dir.path().join("ledger").join("orchestrator.db").exists());
    }
}
