//! Atomic file replacement: a reader sees the old file or the new one, never a
//! torn mix, even if the process dies halfway (write a temporary file in the
//! same directory, fsync it, rename it over the target, fsync the directory).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Replaces `path` with `bytes` atomically.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with_hook(path, bytes, || Ok(()))
}

/// [`write`] with a hook run after the temporary file is durable and before the
/// rename. Tests use it to fail at the worst moment; it also documents where
/// the point of no return is.
pub fn write_with_hook(
    path: &Path,
    bytes: &[u8],
    before_rename: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    let dir = parent_dir(path);
    let tmp = temp_path(path);
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        before_rename()?;
        fs::rename(&tmp, path)?;
        // The rename is only durable once the directory entry is.
        File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        // Best effort: the temporary file is ours and useless now.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes the temporary files of writes that died before their rename
/// (`.<name>.tmp.<pid>` whose process is gone) from `dir`. Best effort: a
/// leftover is garbage, never a partial target, so failures are ignored.
pub fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = name
            .strip_prefix('.')
            .and_then(|n| n.rsplit_once(".tmp."))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_string());
    parent_dir(path).join(format!(".{name}.tmp.{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live.toml");
        fs::write(&p, "old").unwrap();
        write(&p, b"new").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temp left");
    }

    #[test]
    fn failure_before_rename_leaves_old_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live.toml");
        fs::write(&p, "old content").unwrap();
        let err = write_with_hook(&p, b"new content", || Err(io::Error::other("disk on fire")))
            .unwrap_err();
        assert_eq!(err.to_string(), "disk on fire");
        assert_eq!(fs::read_to_string(&p).unwrap(), "old content");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "temp removed");
    }

    #[test]
    fn stale_temps_of_dead_writers_are_removed_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(".live.toml.tmp.999999999");
        let live = dir
            .path()
            .join(format!(".live.toml.tmp.{}", std::process::id()));
        let target = dir.path().join("live.toml");
        for p in [&dead, &live, &target] {
            fs::write(p, "x").unwrap();
        }
        remove_stale_temps(dir.path());
        assert!(!dead.exists());
        assert!(live.exists() && target.exists());
    }

    #[test]
    fn missing_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope").join("live.toml");
        assert!(write(&p, b"x").is_err());
    }
}
