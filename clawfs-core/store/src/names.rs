//! The naming rules of P1.4 §2 for the names ClawFS itself creates or validates: workspaces,
//! agents and snapshots. Files *inside* a workspace are free-form.

use std::ffi::OsStr;

use crate::ToErrno;

/// A name that breaks the naming rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid name {name:?}: {reason}")]
pub struct NameError {
    /// The refused name, lossily decoded.
    pub name: String,
    /// Which rule it breaks.
    pub reason: &'static str,
}

impl NameError {
    /// `name` breaks the rule `reason`.
    pub fn new(name: &OsStr, reason: &'static str) -> Self {
        NameError {
            name: name.to_string_lossy().into_owned(),
            reason,
        }
    }
}

impl ToErrno for NameError {
    fn errno(&self) -> i32 {
        libc::EINVAL
    }
}

/// Longest workspace or agent name (P1.4 §2.4).
pub const MAX_NAME_LEN: usize = 64;

/// Workspace names that cannot be created (P1.4 §2.4). `default` exists from `clawfs init`.
pub const RESERVED_WORKSPACES: [&str; 3] = ["default", "system", "vault"];

/// The default agent roster (P1.4 §2.2).
pub const DEFAULT_AGENTS: [&str; 8] = [
    "kernel-engine",
    "ebpf-agent",
    "security-agent",
    "core-dev-agent",
    "wasm-agent",
    "fs-engine",
    "observability",
    "build-engine",
];

fn invalid(name: &OsStr, reason: &'static str) -> NameError {
    NameError::new(name, reason)
}

/// Checks the `[a-z0-9-]+`, ≤ 64 bytes rule shared by workspace and agent names.
pub fn check_system_name(name: &OsStr) -> Result<&str, NameError> {
    let s = name
        .to_str()
        .ok_or_else(|| invalid(name, "must be ASCII"))?;
    if s.is_empty() {
        return Err(invalid(name, "must not be empty"));
    }
    if s.len() > MAX_NAME_LEN {
        return Err(invalid(name, "must be at most 64 characters"));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(invalid(
            name,
            "may contain only lowercase letters, digits and hyphens ([a-z0-9-]+)",
        ));
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err(invalid(name, "must not start or end with a hyphen"));
    }
    Ok(s)
}

/// Checks a new workspace name: the shared rule plus the reserved names.
pub fn check_workspace_name(name: &OsStr) -> Result<&str, NameError> {
    let s = check_system_name(name)?;
    if RESERVED_WORKSPACES.contains(&s) {
        return Err(invalid(name, "is a reserved workspace name"));
    }
    Ok(s)
}

/// Checks a snapshot file name: `snapshot-YYYY-MM-DD.db` with a real date (P1.4 §2.5), or
/// `snapshot-YYYY-MM-DD-N.db` (N from 2) for the day's later snapshots.
pub fn check_snapshot_name(name: &OsStr) -> Result<&str, NameError> {
    const RULE: &str = "snapshots are named snapshot-YYYY-MM-DD.db or snapshot-YYYY-MM-DD-N.db";
    let s = name.to_str().ok_or_else(|| invalid(name, RULE))?;
    let stem = s
        .strip_prefix("snapshot-")
        .and_then(|r| r.strip_suffix(".db"))
        .ok_or_else(|| invalid(name, RULE))?;
    let (date, n) = match stem.get(10..) {
        Some("") => (stem, None),
        Some(rest) => (&stem[..10], Some(rest.strip_prefix('-').unwrap_or("x"))),
        None => return Err(invalid(name, RULE)),
    };
    let n_ok = n.is_none_or(|n| {
        !n.starts_with('0') && n.len() <= 6 && n.parse::<u32>().is_ok_and(|n| n >= 2)
    });
    chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d")
        .ok()
        .filter(|_| n_ok && date.is_ascii())
        .ok_or_else(|| invalid(name, RULE))?;
    Ok(s)
}

/// Whether `name` is a host's name: a DNS label (`[a-z0-9][a-z0-9-]*`, at most 63 bytes), so
/// that it is a safe file name and reads the same everywhere.
pub fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(f: fn(&OsStr) -> Result<&str, NameError>, s: &str) -> bool {
        f(OsStr::new(s)).is_ok()
    }

    #[test]
    fn system_names() {
        assert!(ok(check_system_name, "project-alpha"));
        assert!(ok(check_system_name, "a1"));
        for bad in ["", "Project", "a_b", "a b", "-a", "a-", "é", "a.b", "../x"] {
            assert!(!ok(check_system_name, bad), "{bad:?} accepted");
        }
        assert!(ok(check_system_name, &"a".repeat(64)));
        assert!(!ok(check_system_name, &"a".repeat(65)));
    }

    #[test]
    fn reserved_workspaces() {
        for r in RESERVED_WORKSPACES {
            assert!(!ok(check_workspace_name, r));
        }
        assert!(ok(check_workspace_name, "notes"));
    }

    #[test]
    fn snapshot_names() {
        assert!(ok(check_snapshot_name, "snapshot-2024-02-24.db"));
        assert!(ok(check_snapshot_name, "snapshot-2024-02-24-2.db"));
        assert!(ok(check_snapshot_name, "snapshot-2024-02-24-17.db"));
        for bad in [
            "snapshot-2024-02-24-1.db",
            "snapshot-2024-02-24-02.db",
            "snapshot-2024-02-24-.db",
            "snapshot-2024-02-24-x.db",
            "snapshot-2024-02-2499.db",
            "snapshot-2024-13-01.db",
            "snapshot-2024-2-24.db",
            "snap-2024-02-24.db",
            "snapshot-2024-02-24.sqlite",
        ] {
            assert!(!ok(check_snapshot_name, bad), "{bad:?} accepted");
        }
    }
}
