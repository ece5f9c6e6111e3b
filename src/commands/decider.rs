//! Who decides a stage or re-pins a reference: `--by NAME`, else `$USER`,
//! else the login name of this session, else the name of this user id in
//! the password database; said on stderr when not given, so a person sees
//! what the ledger records about them.

use super::UsageError;

/// Resolves and validates the name recorded as the decider.
pub fn decider(by: Option<String>) -> Result<String, UsageError> {
    let (name, source) = match by {
        Some(name) => (name, None),
        None => from_environment().ok_or_else(|| {
            UsageError(
                "cannot tell who decides: $USER is unset, this session has no login name and \
                 this user id has no password entry; give --by NAME"
                    .to_string(),
            )
        })?,
    };
    let name = name.trim().to_string();
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
        return Err(UsageError(
            "--by must be a name of 1 to 64 printable characters".to_string(),
        ));
    }
    if let Some(source) = source {
        eprintln!("recording the decision as {name:?} (from {source}; give --by NAME to choose)");
    }
    Ok(name)
}

/// The first name found, and where it came from.
fn from_environment() -> Option<(String, Option<&'static str>)> {
    let non_empty = |s: String| (!s.trim().is_empty()).then_some(s);
    std::env::var("USER")
        .ok()
        .and_then(non_empty)
        .map(|n| (n, Some("$USER")))
        .or_else(|| {
            login_name()
                .and_then(non_empty)
                .map(|n| (n, Some("the login name")))
        })
        .or_else(|| {
            passwd_name()
                .and_then(non_empty)
                .map(|n| (n, Some("the password entry of this user id")))
        })
}

// The libc crate binds getlogin(3) but not its reentrant form on Linux, and
// nix neither (its `User` reads the password database, not the session's
// login); glibc and musl both export it (POSIX.1-2001). So this call stays
// raw, bounded by the buffer we pass.
unsafe extern "C" {
    fn getlogin_r(buf: *mut libc::c_char, bufsize: libc::size_t) -> libc::c_int;
}

/// `getlogin_r(3)`: the user logged in on this session's terminal, if any.
fn login_name() -> Option<String> {
    let mut buf = vec![0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let rc = unsafe { getlogin_r(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let name = std::ffi::CStr::from_bytes_until_nul(&buf).ok()?;
    Some(name.to_string_lossy().into_owned())
}

/// `getpwuid_r(3)` of the effective user id: its name in the password database.
pub(crate) fn passwd_name() -> Option<String> {
    let user = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok()??;
    Some(user.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_name_is_used_and_bad_ones_refused() {
        assert_eq!(decider(Some(" ann ".into())).unwrap(), "ann");
        assert!(decider(Some("".into())).is_err());
        assert!(decider(Some("a\nb".into())).is_err());
        assert!(decider(Some("x".repeat(65))).is_err());
    }

    #[test]
    fn this_user_id_has_a_name() {
        // Every test machine runs as a user with a passwd entry (root at least).
        assert!(passwd_name().is_some_and(|n| !n.is_empty()));
    }
}
