//! A ledger that cannot be written stops the daemon with exit 1 and a
//! message naming the file, and nothing is half-written: the ledger passes
//! `ledger --check` (or, on a truly full disk, holds at most the open cycle
//! that the next start closes), and no partial profile or pin file exists.
//!
//! Three ways: SQLite's `max_page_count` (through `[ledger] max_size_mb`),
//! a read-only ledger, and a small tmpfs filled up. The last two mount a
//! tmpfs, which needs root; without it the read-only case uses file modes
//! and the full-disk case is skipped through [`crate::skip`] (a failure
//! under `CI=true`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::demo::Demo;
use crate::staged;
use orchestrator::profile::Profile;

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
const START: &str = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.03\ncache_gb = 0.002\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

fn demo() -> Demo {
    Demo::new("bandit", START, TINY_INIT, 3 * 64 * 128 * 4, 8)
}

/// Rewrites `[ledger]` of the demo's config.
fn set_ledger(demo: &Demo, path: &Path, extra: &str) {
    let config = demo.path("config.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "path = \"ledger/orchestrator.db\"\n",
        &format!("path = {:?}\n{extra}\n", path.display().to_string()),
    );
    std::fs::write(&config, text).unwrap();
}

fn run(demo: &Demo, args: &[&str]) -> std::process::Output {
    demo.cmd().arg("run").args(args).output().unwrap()
}

/// No temp file of an interrupted write and every profile whole.
fn assert_no_partial_files(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".tmp."), "a partial file is left: {name}");
        if name.ends_with(".toml") {
            Profile::load(&entry.path()).unwrap_or_else(|e| panic!("{name} is not whole: {e}"));
        }
    }
}

fn assert_stopped_naming(out: &std::process::Output, file: &Path, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
    eprintln!("{what}: the daemon's last lines: {tail:#?}");
    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
    assert!(
        stderr.contains(&file.display().to_string()),
        "{what}: the message does not name {}: {stderr}",
        file.display()
    );
}

/// A tmpfs of `size` mounted on `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

/// How to give the tests what mounting needs.
const MOUNT_HOW: &str = "run the e2e tests as root (or with CAP_SYS_ADMIN), as CI's container does";

fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Tmpfs {
    /// Mounted, or why this process may not mount (not root, or no
    /// CAP_SYS_ADMIN).
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        if !is_root() {
            return Err("mounting a tmpfs needs root, and the tests do not run as root".into());
        }
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }

    fn remount(&self, how: &str) {
        let s = Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(s.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_ledger_at_its_size_cap_stops_the_daemon_and_closes_the_cycle() {
    let _heavy = crate::common::heavy();
    let demo = demo();
    let db = demo.path("ledger/orchestrator.db");
    let first = run(&demo, &["--once"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // A cap two pages above what the first cycle left: the next cycles hit it.
    let size = std::fs::metadata(&db).unwrap().len();
    let cap_mb = (size + 2 * 4096) as f64 / (1024.0 * 1024.0);
    set_ledger(&demo, &db, &format!("max_size_mb = {cap_mb}"));
    let out = run(&demo, &["--cycles", "30"]);
    assert_stopped_naming(&out, &db, "size cap");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot grow"), "{stderr}");
    let (code, report) = staged::check(&demo.path("config.toml"));
    assert_eq!(code, 0, "{report:#}");
    assert_no_partial_files(&demo.path("ledger/profiles"));
    demo.assert_children_gone();
}

#[test]
fn a_read_only_ledger_stops_the_daemon_naming_the_file() {
    let _heavy = crate::common::heavy();
    let demo = demo();
    // Without a mount, file modes make the ledger read-only, which root
    // ignores: as root the mount is the only way.
    let mount = match Tmpfs::mount(&demo.path("ro"), "16m") {
        Ok(m) => Some(m),
        Err(why) if is_root() => {
            return crate::skip::skip(
                &format!("{why}, and file modes do not stop root"),
                "give the tests CAP_SYS_ADMIN (a privileged container), or run them as a user who is not root",
            );
        }
        Err(_) => None,
    };
    let dir = match &mount {
        Some(_) => demo.path("ro"),
        None => demo.path("ledger"),
    };
    let db = dir.join("orchestrator.db");
    set_ledger(&demo, &db, "");
    let first = run(&demo, &["--once"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let before = std::fs::read(&db).unwrap();
    match &mount {
        Some(m) => m.remount("ro"),
        None => {
            use std::os::unix::fs::PermissionsExt;
            let ro = std::fs::Permissions::from_mode(0o444);
            std::fs::set_permissions(&db, ro).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
    }
    let out = run(&demo, &["--once"]);
    assert_stopped_naming(&out, &db, "read-only");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is read-only"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&db).unwrap(), before, "the ledger changed");
    // Writable again (SQLite needs to create the WAL index to read a WAL
    // ledger): what the failed start left is whole and consistent.
    match &mount {
        Some(m) => m.remount("rw"),
        None => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let (code, report) = staged::check(&demo.path("config.toml"));
    assert_eq!(code, 0, "{report:#}");
    assert_no_partial_files(&demo.path("ledger/profiles"));
    demo.assert_children_gone();
}

#[test]
fn a_full_disk_stops_the_daemon_and_the_next_start_recovers() {
    let _heavy = crate::common::heavy();
    let demo = demo();
    let _mount = match Tmpfs::mount(&demo.path("small"), "4m") {
        Ok(m) => m,
        Err(why) => {
            return crate::skip::skip(
                &format!("a full disk needs a small tmpfs: {why}"),
                MOUNT_HOW,
            );
        }
    };
    let db = demo.path("small/orchestrator.db");
    set_ledger(&demo, &db, "");
    let first = run(&demo, &["--once"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // Fill the filesystem, leaving a little room so the daemon starts and
    // fails on a write in the middle of a cycle.
    let filler = demo.path("small/filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }
    let len = std::fs::metadata(&filler).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len.saturating_sub(48 * 1024))
        .unwrap();
    let out = run(&demo, &["--cycles", "30"]);
    assert_stopped_naming(&out, &db, "full disk");
    demo.assert_children_gone();
    std::fs::remove_file(&filler).unwrap();
    // Nothing is damaged; at most the cycle it could not close is open.
    let (_, report) = staged::check(&demo.path("config.toml"));
    let violations = report["violations"].as_array().unwrap();
    assert!(
        violations.iter().all(|v| v["rule"] == "unclosed_cycle"),
        "{report:#}"
    );
    assert_no_partial_files(&demo.path("ledger/profiles"));
    // With room again, the next start closes it and runs.
    let again = run(&demo, &["--once"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let (code, report) = staged::check(&demo.path("config.toml"));
    assert_eq!(code, 0, "{report:#}");
}
