//! Secrets stop at the daemon: the environment variables that the config
//! names as holding a secret (`[ledger] password_env`, `[model]
//! api_key_env`) are removed from the environment of every child process,
//! so a bench, a shadow server, the embedded stack or a restart command,
//! any of which may be an arbitrary program, never sees them.
//!
//! A process-wide set, like the child tag in [`super::group`], because
//! every spawn site must honour it and none may forget: it is filled when
//! a config is loaded ([`crate::config::Config::load`]) and read by
//! [`super::group::Group::spawn`], the one place children are started.

use std::collections::BTreeSet;
use std::sync::RwLock;

static WITHHELD: RwLock<BTreeSet<String>> = RwLock::new(BTreeSet::new());

/// Withholds the variables `names` from every child spawned from now on.
/// Names add up: a process that loads two configs protects both's secrets.
pub fn withhold<I, S>(names: I)
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut set = WITHHELD.write().expect("secrets lock");
    set.extend(names.into_iter().map(Into::into));
}

/// The variables no child may inherit.
pub fn withheld() -> Vec<String> {
    WITHHELD
        .read()
        .expect("secrets lock")
        .iter()
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::process::cancel::Cancel;
    use crate::process::group::{Spec, run};

    /// A real child's `/proc/PID/environ` (here its own, read by `cat`)
    /// holds neither a withheld variable it would have inherited nor a
    /// withheld one the spec tried to pass on, while an ordinary variable
    /// gets through. The inherited one is `CARGO_PKG_NAME`, which cargo sets
    /// for every test process and no child of a test needs (setting a
    /// variable of our own would race the other tests' threads).
    #[tokio::test]
    async fn a_child_inherits_no_withheld_variable() {
        let inherited = "CARGO_PKG_NAME";
        assert!(
            std::env::var_os(inherited).is_some(),
            "{inherited} is not set: run this test through cargo"
        );
        withhold([inherited, "ORCH_SECRETS_TEST_PASSED"]);
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec {
            program: "sh".into(),
            args: vec!["-c".into(), "cat /proc/$$/environ".into()],
            env: BTreeMap::from([
                (
                    "ORCH_SECRETS_TEST_PASSED".to_string(),
                    "hunter3".to_string(),
                ),
                ("ORCH_SECRETS_TEST_PLAIN".to_string(), "visible".to_string()),
            ]),
            cwd: dir.path().to_path_buf(),
            timeout: Duration::from_secs(10),
            capture_stdout: true,
            cgroup_procs: None,
        };
        let out = run(&spec, &Cancel::never()).await.unwrap();
        let environ = String::from_utf8_lossy(&out.stdout).replace('\0', "\n");
        assert!(
            environ.contains("ORCH_SECRETS_TEST_PLAIN=visible"),
            "{environ}"
        );
        assert!(
            !environ.contains(&format!("{inherited}=")),
            "inherited secret leaked: {environ}"
        );
        assert!(
            !environ.contains("hunter3"),
            "passed-on secret leaked: {environ}"
        );
    }
}
