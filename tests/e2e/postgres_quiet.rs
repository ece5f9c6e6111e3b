//! A PostgreSQL ledger's commands print no server notice: the schema's
//! `CREATE TABLE IF NOT EXISTS _sqlx_migrations` answers "relation already
//! exists, skipping" on every connection after the first migration, and
//! sqlx logs each notice at INFO, the daemon's default level. Every
//! connection asks for `client_min_messages = warning`
//! (`ledger/connect.rs`), so no command's stderr carries one.

use std::process::Output;

use crate::common;
use crate::postgres_stack_lock::{PG_PASSWORD_VAR, fresh_database, host_config, orchestrator};

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn no_command_on_a_migrated_postgres_ledger_prints_a_server_notice() {
    let _heavy = common::heavy();
    let url = fresh_database("quiet_notices");
    let dir = tempfile::tempdir().unwrap();
    let bench = common::script(
        dir.path(),
        "bench-double-that-fails.sh",
        "echo 'cannot load the model' >&2; exit 3",
    );
    let config = host_config(dir.path(), &url, "quiet", &bench);
    let password = std::env::var(PG_PASSWORD_VAR).unwrap();
    // The first run migrates; everything after meets a migrated schema,
    // which is where the notices came from. `--log info` is the default
    // level, spelled out so a quieter default cannot hide a notice.
    let commands: &[&[&str]] = &[
        &["run", "--cycles", "1"],
        &["run", "--cycles", "1"],
        &["check"],
        &["ledger"],
        &["ledger", "--check"],
        &["stage", "list", "--all"],
        &["report"],
    ];
    let mut seen = 0;
    for args in commands {
        let out = orchestrator(&config)
            .env(PG_PASSWORD_VAR, &password)
            .args(["--log", "info"])
            .args(*args)
            .output()
            .unwrap();
        let stderr = stderr_of(&out);
        // The runs fail on the failing engine double (exit 1); what matters
        // is that each command reached the ledger and printed no notice.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?} exited {:?}: {stderr}",
            out.status.code()
        );
        assert!(
            !stderr.contains("_sqlx_migrations") && !stderr.contains("postgres::notice"),
            "{args:?} printed a PostgreSQL notice on stderr:\n{stderr}"
        );
        seen += 1;
    }
    assert_eq!(seen, commands.len());
}
