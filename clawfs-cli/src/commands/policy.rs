//! `clawfs policy check FILE`: validates a policy file and prints every mistake as
//! `FILE:LINE:COL: message`, the way compilers do, so editors can jump to each one.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use clawfs_core::store::Store;
use clawfs_policy::Policy;

use crate::error::Failure;
use crate::mounts::store_path;

/// `clawfs policy check FILE`: prints `FILE: ok (N agents)` on success; otherwise prints every
/// error as `FILE:LINE:COL: message` on stderr and fails.
pub fn check(path: &Path) -> Result<(), Failure> {
    check_to(path, &mut io::stdout().lock(), &mut io::stderr().lock())
}

/// [`check`] of `bytes`, the policy read from `path` (read once, by the caller that installs
/// what it checked).
pub fn check_bytes(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    check_bytes_to(
        path,
        bytes,
        &mut io::stdout().lock(),
        &mut io::stderr().lock(),
    )
}

fn check_to(path: &Path, out: &mut dyn Write, err: &mut dyn Write) -> Result<(), Failure> {
    check_bytes_to(path, &crate::store_ops::read_input(path)?, out, err)
}

fn check_bytes_to(
    path: &Path,
    bytes: &[u8],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Failure> {
    let shown = path.display();
    let text = std::str::from_utf8(bytes).map_err(|_| anyhow!("{shown}: not UTF-8"))?;
    match Policy::parse(text) {
        Ok(policy) => {
            let n = policy.agents().len();
            let noun = if n == 1 { "agent" } else { "agents" };
            writeln!(out, "{shown}: ok ({n} {noun})").map_err(|e| anyhow!(e))?;
            Ok(())
        }
        Err(errors) => {
            for e in &errors {
                writeln!(err, "{shown}:{}:{}: {}", e.line, e.column, e.message)
                    .map_err(|e| anyhow!(e))?;
            }
            let noun = if errors.len() == 1 { "error" } else { "errors" };
            Err(anyhow!(
                "{shown}: {} {noun}; the policy was not accepted",
                errors.len()
            )
            .into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> (Result<(), Failure>, String, String, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, text).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let r = check_to(&path, &mut out, &mut err);
        (
            r,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            path,
        )
    }

    #[test]
    fn default_policy_is_ok() {
        let (r, out, err, path) = run(clawfs_policy::DEFAULT_POLICY_TOML);
        assert!(r.is_ok());
        assert_eq!(out, format!("{}: ok (8 agents)\n", path.display()));
        assert!(err.is_empty());
    }

    #[test]
    fn every_error_is_printed_with_its_position() {
        let (r, out, err, path) = run("version = 1\nusers = \"x\"\n[agents.A]\n");
        let f = r.unwrap_err();
        assert_eq!(f.exit_code(), 1);
        assert!(f.to_string().contains("2 errors"), "{f}");
        assert!(out.is_empty());
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        let p = path.display();
        assert!(lines[0].starts_with(&format!("{p}:2:9: ")), "{err}");
        assert!(lines[1].starts_with(&format!("{p}:3:9: ")), "{err}");
    }

    #[test]
    fn missing_file_fails() {
        let r = check_to(
            Path::new("/nonexistent/policy.toml"),
            &mut Vec::new(),
            &mut Vec::new(),
        );
        assert!(r
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/policy.toml"));
    }
}

/// Where the daemon reports the outcome of its last policy load.
pub const POLICY_STATUS: &str = "policy-status.json";

/// `clawfs policy reload [FILE]`: installs FILE (after checking it), then makes the daemon
/// re-read the policy and reports what it says.
pub fn reload(store: &Option<PathBuf>, file: Option<&Path>) -> Result<(), Failure> {
    let store = Store::open(&store_path(store))?;
    let target = store.root().join(clawfs_core::fs::POLICY_FILE);
    if let Some(file) = file {
        // Read once (a regular file, bounded): what is checked is what is installed.
        let text = crate::store_ops::read_input(file)?;
        crate::commands::policy::check_bytes(file, &text)?;
        let key = crate::store_ops::sealing_key(&store)?;
        // Installed with its hash recorded in the system manifest, sealed again.
        clawfs_integrity::system::install(
            store.root_fd(),
            "policy.toml",
            &text,
            0o444,
            &clawfs_store::clock::now_rfc3339(),
        )
        .with_context(|| format!("installing {}", target.display()))?;
        crate::store_ops::seal_after(&store, key)?;
    } else {
        crate::commands::policy::check(&target)?;
    }
    match apply_policy(&store)? {
        Applied::NoDaemon => println!(
            "{}: the policy takes effect at the next mount (no daemon serves this store)",
            target.display()
        ),
        Applied::ByDaemon(pid) => {
            println!("policy reloaded by pid {pid} ({})", target.display())
        }
    }
    Ok(())
}

/// Where a policy change stands after [`apply_policy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The daemon serving the store (this pid) has it in force.
    ByDaemon(u32),
    /// No daemon serves the store: the next mount reads it.
    NoDaemon,
}

/// Makes the daemon serving `store` re-read its policy file (SIGHUP) and waits, up to 10 s,
/// for it to report the outcome; an error if it refused the file (keeping the old policy).
pub fn apply_policy(store: &Store) -> Result<Applied, Failure> {
    let Some(daemon) = store.serving_daemon() else {
        return Ok(Applied::NoDaemon);
    };
    let status = || store.read_host_file(POLICY_STATUS, 1 << 20);
    let before = status();
    // SAFETY: sending SIGHUP to the daemon recorded for this store.
    if unsafe { libc::kill(daemon.pid as i32, libc::SIGHUP) } != 0 {
        return Err(Failure::Other(anyhow::anyhow!(
            "signalling the daemon (pid {}): {}",
            daemon.pid,
            io::Error::last_os_error()
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = status();
        if now.is_some() && now != before {
            let v: serde_json::Value = serde_json::from_slice(&now.unwrap_or_default())
                .context("reading the daemon's policy status")?;
            if v["ok"] == true {
                return Ok(Applied::ByDaemon(daemon.pid));
            }
            return Err(Failure::Other(anyhow::anyhow!(
                "the daemon refused the policy and kept the old one: {}",
                v["errors"]
            )));
        }
        if Instant::now() > deadline {
            return Err(Failure::Other(anyhow::anyhow!(
                "the daemon (pid {}) did not report a reload within 10 s",
                daemon.pid
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
