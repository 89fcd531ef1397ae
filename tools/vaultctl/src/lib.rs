//! vaultctl (tools layer, a client of the mount; docs/vaultctl.md): note commands — `resolve`,
//! `info`, `outline`, `search`, `read-range`, `head`, `tail`, `apply-patch`, `edit-exact` — each
//! one call of a ClawFS agent tool through `<mount>/tools/call/<tool>`, and the checks of
//! `vaultctl-ssh`, its SSH forced-command wrapper.
//!
//! vaultctl has no private channel to the daemon: it opens the tool file, writes the JSON request
//! and reads the JSON response on the same descriptor, exactly as a shell or an agent would, so it
//! has the caller's access and nothing more, and every call is audited by the daemon like any
//! other file operation.
//!
//! Output: the tool's JSON response on stdout, verbatim. Exit codes: [`Exit`].

pub mod cli;
pub mod mount;
pub mod ssh;

use std::io::Read;

pub use cli::run;

/// How vaultctl exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the tool answered `"ok": true`.
    Ok = 0,
    /// 1: the request was refused for a reason the caller can act on: bad arguments, not found,
    /// several matches, hash mismatch, patch does not apply, denied, protected, too large, …
    User = 1,
    /// 2: the system failed: no mount, an I/O error, a response that is not JSON, an error code
    /// this vaultctl does not know.
    System = 2,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// Whether a tool error code is the caller's to fix (exit 1): every code the tools define
/// except `io_error`. Anything else that is not `"ok": true` is a system error (exit 2).
pub fn is_user_error(code: &str) -> bool {
    code != "io_error" && clawfs_agent_tools::ERROR_CODES.contains(&code)
}

/// The exit status a response calls for.
pub fn exit_for(response: &serde_json::Value) -> Exit {
    if response.get("ok") == Some(&serde_json::Value::Bool(true)) {
        return Exit::Ok;
    }
    match response.get("error").and_then(|e| e.as_str()) {
        Some(code) if is_user_error(code) => Exit::User,
        _ => Exit::System,
    }
}

/// What a run produced: the bytes for stdout and the exit status.
#[derive(Debug)]
pub struct Outcome {
    /// JSON (or help text), ending with a newline.
    pub stdout: Vec<u8>,
    /// The exit status.
    pub exit: Exit,
}

impl Outcome {
    /// An error of vaultctl itself, as JSON in the tools' error shape.
    pub fn error(exit: Exit, code: &str, message: impl Into<String>) -> Self {
        let mut stdout = serde_json::to_vec(&serde_json::json!({
            "ok": false,
            "error": code,
            "message": message.into(),
        }))
        .expect("JSON serialises");
        stdout.push(b'\n');
        Outcome { stdout, exit }
    }
}

/// Reads all of stdin (for `apply-patch`), at most `limit` bytes plus one so that an oversized
/// input is noticed.
pub fn read_limited(input: &mut dyn Read, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    input.take(limit as u64 + 1).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exit_codes_follow_the_error_code() {
        assert_eq!(exit_for(&json!({"ok": true})), Exit::Ok);
        assert_eq!(
            exit_for(&json!({"ok": false, "error": "hash_mismatch"})),
            Exit::User
        );
        assert_eq!(
            exit_for(&json!({"ok": false, "error": "patch_failed"})),
            Exit::User
        );
        assert_eq!(
            exit_for(&json!({"ok": false, "error": "io_error"})),
            Exit::System
        );
        assert_eq!(
            exit_for(&json!({"ok": false, "error": "something_new"})),
            Exit::System
        );
        assert_eq!(exit_for(&json!({"weird": 1})), Exit::System);
    }
}
