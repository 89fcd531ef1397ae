//! An ordinary local user goes for the vault's plaintext through the mount.

use std::fs;
use std::process::Command;

use crate::common::{vault, Mounted};
use crate::support::{audit_until, records, text, TempUser};

fn vault_ok(m: &Mounted, args: &[&str], stdin: &str) {
    let out = vault(m, args, Some(stdin));
    assert!(
        out.status.success(),
        "clawfs vault {args:?}: {}",
        text(&out)
    );
}

#[test]
fn an_ordinary_user_never_reads_a_secret() {
    let m = Mounted::new();
    vault_ok(&m, &["init", "--sealer", "passphrase"], "");
    vault_ok(&m, &["put", "openai-api-key"], "sk-live-123\n");
    let secret = m.path("vault/secrets/openai-api-key");
    // The admin reads it.
    assert_eq!(fs::read_to_string(&secret).unwrap(), "sk-live-123");

    // A plain user: refused by mode already (the file is root's and the agents' group's).
    let user = TempUser::new("vl");
    let out = text(&user.sh(&format!(
        "cat {} 2>&1; ls {} 2>&1; true",
        secret.display(),
        m.path("vault/secrets").display()
    )));
    assert!(!out.contains("sk-live-123"), "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    assert!(
        !out.contains("openai-api-key\n"),
        "the listing shows the name: {out}"
    );

    // A user who is in the agents' group but is no agent: refused by the daemon, on record.
    let agents_gid = String::from_utf8(
        Command::new("getent")
            .args(["group", "clawos-agents"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .split(':')
    .nth(2)
    .map(|g| g.trim().to_string())
    .expect("the clawos-agents group exists");
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={}", user.uid),
            &format!("--regid={}", user.uid),
            &format!("--groups={agents_gid}"),
            "cat",
        ])
        .arg(&secret)
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(!shown.contains("sk-live-123"), "{shown}");
    assert!(shown.contains("Permission denied"), "{shown}");
    let who = format!("user:{}", user.uid);
    let all = audit_until(&m, |all| {
        all.iter()
            .any(|r| r["agent"] == who.as_str() && r["result"] == "denied")
    });
    let mine: Vec<_> = all.iter().filter(|r| r["agent"] == who.as_str()).collect();
    assert!(
        mine.iter()
            .any(|r| r["result"] == "denied" && r["rule"] == "VAULT-GRANT"),
        "{mine:?}"
    );
    assert!(records(&all, "vault:get", "openai-api-key")
        .iter()
        .all(|r| r["agent"] != who.as_str()));
}
