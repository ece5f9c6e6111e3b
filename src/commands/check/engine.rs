//! `check`'s engine-time lines: what the daemon's engine runs took, per day
//! of the last week and by what they bought, and the share of the budget
//! window (`[cycle] max_engine_share` over `engine_window_s`) they take
//! now. Read from a ledger whose schema is current, never migrating it.

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::daemon::budget::{Budget, Look};
use crate::ledger::{EngineSeconds, Ledger, LedgerError};

/// Days of engine time shown.
const DAYS: i64 = 7;

/// The lines, for the config's stack.
pub(super) async fn lines(
    config: &Config,
    ledger: &Ledger,
    now: DateTime<Utc>,
) -> Result<Vec<String>, LedgerError> {
    let ledger = ledger.clone().scoped(config.stack.scope());
    let budget = Budget::of(&config.cycle);
    let look = budget.read(&ledger, now).await?;
    let since = now - chrono::Duration::days(DAYS);
    let runs = ledger.engine_runs(since, now).await?;
    let mut out = vec![format!(
        "engine   {}{}",
        look.spent(),
        match &look {
            Look::Open(_) => "; a cycle may start".to_string(),
            Look::Over { reason, .. } => format!("; over budget: {reason}"),
        }
    )];
    let days = EngineSeconds::per_day(&runs);
    if days.is_empty() {
        out.push(format!(
            "         no engine runs of stack {} in the last {DAYS} days",
            config.stack.name
        ));
    }
    for (day, s) in days {
        out.push(format!("         {day}: {s}"));
    }
    Ok(out)
}
