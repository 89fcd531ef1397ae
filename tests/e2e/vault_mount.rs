//! The vault through the mount: `cat /clawfs/vault/secrets/NAME` gives the plaintext to the
//! admin and to agents granted NAME, EACCES to everyone else, ENOKEY when the vault is locked;
//! an admin's write is stored encrypted; every access is in the audit trail.

use std::ffi::OsStr;
use std::fs;

use crate::common::{clawfs, errno, ok, vault, Mounted};

fn run_agent(m: &Mounted, agent: &str, script: &str) -> String {
    let out = m.run_agent(agent, script);
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn secrets_are_served_to_the_admin_and_granted_agents_only() {
    // The kernel refuses some of what follows itself (the ACLs): on record with --trace-syscalls.
    let m = Mounted::with_args(&["--trace-syscalls"]);
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    ok(vault(&m, &["put", "openai-api-key"], Some("sk-live-123\n")));
    ok(vault(&m, &["put", "github-pat"], Some("ghp-456\n")));
    // The admin writes a secret through the mount: stored encrypted at close.
    fs::write(m.path("vault/secrets/near-ai-token"), "near-789\n").unwrap();
    let stored = fs::read_to_string(m.backing("vault/secrets/near-ai-token.enc")).unwrap();
    assert!(
        !stored.contains("near-789") && stored.contains("AES-256-GCM"),
        "{stored}"
    );
    assert_eq!(ok(vault(&m, &["get", "near-ai-token"], None)), "near-789");
    // The admin reads them all.
    assert_eq!(
        fs::read_to_string(m.path("vault/secrets/openai-api-key")).unwrap(),
        "sk-live-123"
    );
    let mut names: Vec<String> = fs::read_dir(m.path("vault/secrets"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["github-pat", "near-ai-token", "openai-api-key"]);

    // Grant one secret to fs-engine: the running daemon applies it at once, and says so.
    let said = ok(vault(&m, &["grant", "fs-engine", "openai-api-key"], None));
    assert!(said.contains("in force now"), "{said}");
    let mnt = m.mnt.display().to_string();
    let out = run_agent(
        &m,
        "fs-engine",
        &format!(
            "cat {mnt}/vault/secrets/openai-api-key; echo; ls {mnt}/vault/secrets; \
             grep -o openai-api-key {mnt}/agents/self; \
             cat {mnt}/vault/secrets/github-pat; echo x > {mnt}/vault/secrets/openai-api-key; \
             cat {mnt}/vault/master-key.enc; true"
        ),
    );
    // It reads its secret by name; the listing is the admin's (a watch on the folder would
    // name every secret read), and agents/self names the secrets it is granted.
    assert!(out.starts_with("sk-live-123\n"), "{out}");
    assert!(out.contains("vault/secrets': Permission denied"), "{out}");
    assert!(out.contains("\nopenai-api-key\n"), "{out}");
    assert!(out.contains("github-pat: Permission denied"), "{out}");
    assert!(!out.contains("ghp-456"), "{out}");
    assert!(out.matches("Permission denied").count() >= 3, "{out}");
    // The grant-less agent sees nothing.
    let out = run_agent(
        &m,
        "kernel-engine",
        &format!("ls {mnt}/vault/secrets; cat {mnt}/vault/secrets/openai-api-key; true"),
    );
    assert!(
        out.contains("Permission denied") && !out.contains("sk-live"),
        "{out}"
    );
    // The value was not changed by the refused write.
    assert_eq!(
        ok(vault(&m, &["get", "openai-api-key"], None)),
        "sk-live-123"
    );

    // Locked: reads fail with ENOKEY, and say so in the audit trail.
    ok(vault(&m, &["lock"], None));
    assert_eq!(
        errno(fs::read(m.path("vault/secrets/openai-api-key"))),
        libc::ENOKEY
    );
    ok(vault(&m, &["unlock"], None));
    assert_eq!(
        fs::read_to_string(m.path("vault/secrets/openai-api-key")).unwrap(),
        "sk-live-123"
    );

    std::thread::sleep(std::time::Duration::from_millis(1500));
    let audit = ok(clawfs([
        OsStr::new("audit"),
        OsStr::new("--store"),
        m.store.as_os_str(),
        OsStr::new("search"),
        OsStr::new("--path"),
        OsStr::new("/vault/secrets"),
        OsStr::new("--json"),
    ]));
    assert!(audit.contains("\"vault:get\""), "{audit}");
    assert!(audit.contains("\"agent\":\"fs-engine\""), "{audit}");
    assert!(audit.contains("VAULT-GRANT"), "{audit}");
    assert!(
        audit.contains(&format!("\"errno\":{}", libc::ENOKEY)),
        "{audit}"
    );
    // Plaintext never reached a log.
    assert!(!m.log().contains("sk-live-123"));
    assert!(!audit.contains("sk-live-123"));
    // While the vault is unlocked, the daemon signs the trail with a key derived from it.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    fs::write(m.ws().join("signed.txt"), "x").unwrap();
    // Leave no key in the kernel keyring.
    ok(vault(&m, &["lock"], None));
    assert!(m.umount().status.success(), "unmounting flushes the trail");
    let trail: String = fs::read_dir(m.store.join(".clawfs/audit"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .map(|p| fs::read_to_string(p).unwrap())
        .collect();
    assert!(trail.contains("audit:hmac-on"), "{trail}");
    assert!(
        trail
            .lines()
            .any(|l| l.contains("signed.txt") && l.contains("\"hmac\":")),
        "{trail}"
    );
}

/// A secret whose value is refused in part (past the 4 MiB a write to the mount may hold) is
/// not stored cut short: the write fails with EFBIG, the `close()` too, the secret keeps its
/// old value, and the trail has the refused store.
#[test]
fn a_secret_refused_in_part_is_not_stored() {
    use std::io::Write;
    let m = Mounted::new();
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    ok(vault(&m, &["put", "big-token"], Some("old-value\n")));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.path("vault/secrets/big-token"))
        .unwrap();
    let refused = file.write_all(&vec![b'k'; 5 << 20]).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EFBIG));
    // SAFETY: the descriptor is ours and closed once (into_raw_fd gives up the File's).
    let closed = unsafe { libc::close(std::os::fd::IntoRawFd::into_raw_fd(file)) };
    assert_eq!(closed, -1);
    let failed = std::io::Error::last_os_error();
    assert_eq!(failed.raw_os_error(), Some(libc::EFBIG));
    assert_eq!(ok(vault(&m, &["get", "big-token"], None)), "old-value");
    let refused = |r: &serde_json::Value| {
        r["operation"] == "vault:put"
            && r["errno"] == libc::EFBIG
            && r["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("not stored")
    };
    let trail = crate::common::audit_until(&m, |a| a.iter().any(refused));
    assert!(trail.iter().any(refused), "{trail:?}");
}
