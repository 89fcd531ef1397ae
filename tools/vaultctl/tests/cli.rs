//! The vaultctl binaries without a mount: usage errors, a missing mount, and the SSH wrapper's
//! refusals. (With a mount: tests/e2e/vaultctl.rs.)

use std::process::Command;

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn vaultctl_without_a_mount_is_a_system_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_vaultctl"))
        .args(["--mount", "/nonexistent/clawfs", "info", "a.md"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json(&out)["error"], "mount_unavailable");
    let out = Command::new(env!("CARGO_BIN_EXE_vaultctl"))
        .args(["read-range", "a.md", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"], "invalid_args");
}

#[test]
fn vaultctl_ssh_refuses_or_passes_on() {
    let ssh = |cmd: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vaultctl-ssh"));
        c.args(["--mount", "/nonexistent/clawfs", "--workspace", "notes"])
            .env_remove("SSH_ORIGINAL_COMMAND");
        if let Some(cmd) = cmd {
            c.env("SSH_ORIGINAL_COMMAND", cmd);
        }
        c.output().unwrap()
    };
    for bad in [None, Some("rm -rf /"), Some("vaultctl info a; id")] {
        let out = ssh(bad);
        assert_eq!(out.status.code(), Some(1), "{bad:?}");
        assert_eq!(json(&out)["error"], "denied");
        assert!(String::from_utf8_lossy(&out.stderr).contains("refused"));
    }
    // Accepted: vaultctl ran and found no mount.
    let out = ssh(Some("vaultctl info 'a b.md'"));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json(&out)["error"], "mount_unavailable");
}
