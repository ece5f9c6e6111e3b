//! `orchestrator ledger`: recent cycles with their verdicts.

use std::path::Path;

use crate::cli::LedgerArgs;
use crate::config::Config;
use crate::display;
use crate::ledger::Ledger;

pub fn run(config_path: &Path, args: LedgerArgs) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    super::runtime()?.block_on(async {
        let ledger = Ledger::open(&config.ledger_path).await?;
        let cycles = ledger.recent_cycles(args.limit).await;
        ledger.close().await;
        let cycles = cycles?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&cycles)?);
            return Ok(());
        }
        if cycles.is_empty() {
            println!("no cycles recorded yet in {}", config.ledger_path.display());
            return Ok(());
        }
        for c in &cycles {
            let took = c
                .cycle
                .ended_at
                .map(|e| format!("{:.1}s", (e - c.cycle.started_at).as_seconds_f64()))
                .unwrap_or_else(|| "-".into());
            println!(
                "cycle {:>5}  {}  {:<9} {:>8}  proposer {}{}",
                c.cycle.id.0,
                c.cycle.started_at.format("%Y-%m-%d %H:%M:%S"),
                c.cycle.status.as_str(),
                took,
                c.cycle.proposer,
                c.cycle
                    .error
                    .as_deref()
                    .map(|e| format!("  error: {e}"))
                    .unwrap_or_default()
            );
            for v in &c.verdicts {
                let what = match (&v.menu_id, &v.parameters) {
                    (Some(m), Some(p)) => format!("{m} {p}"),
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
        Ok(())
    })
}
