//! `check` on a PostgreSQL ledger: connects (never migrating, never taking
//! the stack's lock) and reports, each with its fix, that the server was
//! reached, that the password was accepted, whether the schema is migrated,
//! and whether the stack's lock is held and by whom.

use crate::config::Config;
use crate::ledger::{LedgerError, PostgresTarget, SchemaState};

use super::Findings;

pub(super) fn check(
    config: &Config,
    pg: &PostgresTarget,
    found: &mut Findings,
) -> anyhow::Result<()> {
    let stack = &config.stack.name;
    super::super::runtime()?.block_on(async {
        let ledger = match pg.connect_unmigrated(crate::ledger::DEFAULT_BUSY_TIMEOUT).await {
            Ok(l) => l,
            Err(e @ LedgerError::PasswordUnset { .. }) => {
                found.1 = true;
                found.fail("", "ledger password", &e.to_string());
                return Ok(());
            }
            Err(LedgerError::OpenPostgres { source, .. }) if source.reached() => {
                println!("         server: reached (it speaks PostgreSQL)");
                found.fail("", "ledger login", &source.to_string());
                return Ok(());
            }
            Err(LedgerError::OpenPostgres { source, .. }) => {
                found.fail("", "ledger server", &format!("server: {source}"));
                return Ok(());
            }
            Err(e) => {
                found.fail("", "ledger", &e.to_string());
                return Ok(());
            }
        };
        println!("         server: reached; password: accepted");
        match ledger.schema_state().await {
            Ok(SchemaState::Current { applied }) => {
                println!("         schema: migrated ({applied} migrations, all this build knows)");
                match super::engine::lines(config, &ledger, chrono::Utc::now()).await {
                    Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
                    Err(e) => println!("engine   not read: {e}"),
                }
            }
            Ok(SchemaState::Pending { applied, pending }) => println!(
                "         schema: not migrated yet ({pending} of {} migrations to apply): `orchestrator run` (or any command but `check`) applies them",
                applied + pending
            ),
            Ok(other) => found.fail(
                "",
                "ledger schema",
                &format!("schema: {other:?}: every command would refuse this ledger; use the orchestrator version that wrote it, or restore the database"),
            ),
            Err(e) => found.fail("", "ledger schema", &format!("schema: {e}")),
        }
        match ledger.stack_lock_holder(stack).await {
            Ok(Some(holder)) => println!(
                "         stack lock {stack}: held by {holder}; a second `orchestrator run` of this stack is refused until it stops"
            ),
            Ok(None) => println!(
                "         stack lock {stack}: free (no daemon runs this stack now); `orchestrator run` takes it"
            ),
            Err(e) => found.fail("", "ledger stack lock", &format!("stack lock: {e}")),
        }
        ledger.close().await;
        Ok(())
    })
}
