//! The seeded random choice of `--random`: a counter shared by every
//! invocation (a file under an exclusive `flock`), hashed with the seed.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::fault::Fault;

/// SplitMix64's finaliser (Steele, Lea & Flood, "Fast splittable
/// pseudorandom number generators", OOPSLA 2014): a well-mixed 64-bit hash.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The fault of invocation `counter`: with probability `rate` one of the
/// non-`none` kinds, uniformly, else `none`.
pub fn choose(seed: u64, counter: u64, rate: f64) -> Fault {
    let h = mix(seed ^ mix(counter));
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    if u < rate {
        let kinds = Fault::INJECTED;
        kinds[(mix(h) % kinds.len() as u64) as usize]
    } else {
        Fault::None
    }
}

/// Opens `path` and holds an exclusive lock on it until the file is dropped.
fn locked(path: &Path) -> std::io::Result<File> {
    let f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    // SAFETY: flock on an fd we own; released when `f` is closed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(f)
}

/// Pops the first line of the queue file `path` as the fault of this
/// invocation; `none` when the queue is empty.
pub fn pop(path: &Path) -> std::io::Result<Fault> {
    let mut f = locked(path)?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else {
        return Ok(Fault::None);
    };
    let fault = Fault::from_name(first.trim()).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("queues `{}`, not a fault kind", first.trim()),
        )
    })?;
    let rest: String = lines.map(|l| format!("{l}\n")).collect();
    f.seek(SeekFrom::Start(0))?;
    f.set_len(0)?;
    f.write_all(rest.as_bytes())?;
    f.sync_data()?;
    Ok(fault)
}

/// Takes the next counter value from `state` (atomically, under a file
/// lock) and returns the fault it draws and the counter.
pub fn next(state: &Path, seed: u64, rate: f64) -> std::io::Result<(Fault, u64)> {
    let mut f = locked(state)?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let counter: u64 = match text.trim() {
        "" => 0,
        t => t.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("holds `{t}`, not a counter; delete it to start over"),
            )
        })?,
    };
    f.seek(SeekFrom::Start(0))?;
    f.set_len(0)?;
    f.write_all(format!("{}\n", counter + 1).as_bytes())?;
    f.sync_data()?;
    Ok((choose(seed, counter, rate), counter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_respected_and_every_kind_is_drawn() {
        let n = 20_000;
        let faults: Vec<Fault> = (0..n).map(|c| choose(42, c, 0.25)).collect();
        let injected = faults.iter().filter(|f| **f != Fault::None).count();
        let rate = injected as f64 / n as f64;
        assert!((0.23..0.27).contains(&rate), "{rate}");
        for k in Fault::INJECTED {
            let c = faults.iter().filter(|f| **f == k).count();
            assert!(c > injected / 8, "{k:?} drawn {c} times of {injected}");
        }
        assert!((0..1000).all(|c| choose(1, c, 0.0) == Fault::None));
        assert!((0..1000).all(|c| choose(1, c, 1.0) != Fault::None));
    }

    #[test]
    fn the_counter_advances_once_per_invocation_and_is_seeded() {
        let dir = std::env::temp_dir().join(format!("fw-pick-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state = dir.join("state");
        let _ = std::fs::remove_file(&state);
        let a: Vec<u64> = (0..5).map(|_| next(&state, 9, 0.5).unwrap().1).collect();
        assert_eq!(a, [0, 1, 2, 3, 4]);
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "5\n");
        assert_eq!(next(&state, 9, 0.5).unwrap().0, choose(9, 5, 0.5));
        let queue = dir.join("queue");
        std::fs::write(&queue, "hang\n\nexit4\n").unwrap();
        assert_eq!(pop(&queue).unwrap(), Fault::Hang);
        assert_eq!(pop(&queue).unwrap(), Fault::Exit4);
        assert_eq!(pop(&queue).unwrap(), Fault::None);
        std::fs::write(&queue, "boom\n").unwrap();
        assert!(pop(&queue).unwrap_err().to_string().contains("boom"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
