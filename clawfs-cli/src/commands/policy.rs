//! `clawfs policy check FILE`: validates a policy file and prints every mistake as
//! `FILE:LINE:COL: message`, the way compilers do, so editors can jump to each one.

use std::io::{self, Write};
use std::path::Path;

use anyhow::anyhow;
use clawfs_policy::Policy;

use crate::error::Failure;

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
    check_bytes_to(path, &crate::integrity_cmd::read_input(path)?, out, err)
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
