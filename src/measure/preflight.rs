//! The memory pre-flight: refuse to start a run the machine cannot hold.
//!
//! A big stack that swaps, or starves the GPU driver, can lock up a whole
//! workstation; a refused run costs nothing. Before each run, `MemAvailable`
//! (the kernel's estimate of memory available without swapping, from
//! `/proc/meminfo`) must cover the profile's `memory.budget_gb` plus the
//! configured `[measure] memory_headroom_gb`.

use crate::profile::Profile;

/// A GB as profiles count it (10^9 bytes).
pub const GB: f64 = 1e9;

/// What the pre-flight saw when it let a run start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preflight {
    pub available_bytes: u64,
    pub needed_bytes: u64,
}

/// Why the pre-flight refused, with the numbers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "refused to start: {:.2} GB of memory is available, but the profile's budget ({budget_gb} GB) plus the configured headroom ({headroom_gb} GB) need {:.2} GB; free memory (stop other programs), lower memory.budget_gb in the profile, or lower [measure] memory_headroom_gb",
        *available_bytes as f64 / GB, budget_gb + headroom_gb
    )]
    Refused {
        available_bytes: u64,
        budget_gb: f64,
        headroom_gb: f64,
    },
    #[error(
        "cannot tell how much memory is available ({problem}), so no run is started; this check needs Linux's /proc/meminfo with MemAvailable (kernel 3.14+)"
    )]
    Unknown { problem: String },
}

/// `MemAvailable` in bytes, from the text of `/proc/meminfo`.
pub fn mem_available_bytes(meminfo: &str) -> Option<u64> {
    let rest = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
    kb.checked_mul(1024)
}

/// Checks the live machine.
pub fn check(profile: &Profile, headroom_gb: f64) -> Result<Preflight, PreflightError> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| PreflightError::Unknown {
        problem: format!("/proc/meminfo: {e}"),
    })?;
    check_with(&text, profile.memory.budget_gb, headroom_gb)
}

/// Checks against given `/proc/meminfo` text.
pub fn check_with(
    meminfo: &str,
    budget_gb: f64,
    headroom_gb: f64,
) -> Result<Preflight, PreflightError> {
    let available_bytes = mem_available_bytes(meminfo).ok_or_else(|| PreflightError::Unknown {
        problem: "no MemAvailable line in /proc/meminfo".into(),
    })?;
    let needed = (budget_gb + headroom_gb) * GB;
    if (available_bytes as f64) < needed {
        return Err(PreflightError::Refused {
            available_bytes,
            budget_gb,
            headroom_gb,
        });
    }
    Ok(Preflight {
        available_bytes,
        needed_bytes: needed as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str =
        "MemTotal:       24683656 kB\nMemFree:  100 kB\nMemAvailable:    2000000 kB\n";

    #[test]
    fn reads_mem_available() {
        assert_eq!(mem_available_bytes(MEMINFO), Some(2_048_000_000));
        assert_eq!(mem_available_bytes("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn refuses_with_the_numbers_and_the_fix() {
        assert!(check_with(MEMINFO, 1.0, 1.0).is_ok());
        let err = check_with(MEMINFO, 1.5, 1.0).unwrap_err();
        let msg = err.to_string();
        for needle in ["2.05 GB", "1.5 GB", "1 GB", "2.50 GB", "memory_headroom_gb"] {
            assert!(msg.contains(needle), "{needle}: {msg}");
        }
        assert!(matches!(
            check_with("", 1.0, 1.0),
            Err(PreflightError::Unknown { .. })
        ));
    }

    #[test]
    fn this_machine_reports_its_memory() {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        assert!(mem_available_bytes(&text).unwrap() > 0);
    }
}
