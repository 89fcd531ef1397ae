//! Someone with the store's disk rewrites a system file and the manifest to match (a policy
//! that gives agents more, a signer of their own). The manifest is sealed with the vault's key,
//! so the forgery refuses the mount while the vault is unlocked, and stops the agents the moment
//! it is unlocked if the store was mounted while it was locked.

use std::ffi::OsStr;
use std::fs;
use std::time::{Duration, Instant};

use crate::common::{clawfs, ok, vault, Mounted};
use crate::support::{audit_until, text};

/// Rewrites `system/policy.toml` in the store and its entry in the manifest, as the attacker
/// would with the disk in hand; `keep_seal`: leave the (now stale) seal in place, else drop it.
fn forge_policy(m: &Mounted, keep_seal: bool) {
    use sha2::Digest;
    let policy = m.backing("system/policy.toml");
    let mut text = fs::read_to_string(&policy).unwrap();
    text.push_str("\n# forged behind the vault's back\n");
    fs::write(&policy, &text).unwrap();
    let manifest = m.backing("vault/system-manifest.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&fs::read(&manifest).unwrap()).unwrap();
    assert!(doc["seal"].is_string(), "not sealed to begin with: {doc}");
    doc["files"]["policy.toml"] = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    )
    .into();
    if !keep_seal {
        doc.as_object_mut().unwrap().remove("seal");
    }
    fs::write(&manifest, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
}

fn system_verify(m: &Mounted) -> std::process::Output {
    clawfs([
        OsStr::new("system"),
        OsStr::new("--store"),
        m.store.as_os_str(),
        OsStr::new("verify"),
    ])
}

#[test]
fn a_manifest_rewritten_without_the_vaults_key_refuses_the_mount() {
    let m = Mounted::new();
    let init = ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    assert!(init.contains("sealed"), "{init}");
    assert!(system_verify(&m).status.success());
    for keep_seal in [true, false] {
        assert!(m.umount().status.success());
        let before = fs::read(m.backing("vault/system-manifest.json")).unwrap();
        let policy = fs::read(m.backing("system/policy.toml")).unwrap();
        forge_policy(&m, keep_seal);
        // The hashes match: only the seal tells.
        let out = m.try_mount(&[]);
        assert_eq!(out.status.code(), Some(5), "{}", text(&out));
        let shown = text(&out);
        assert!(
            shown.contains(if keep_seal {
                "seal does not hold"
            } else {
                "not sealed"
            }),
            "{shown}"
        );
        let out = system_verify(&m);
        assert_eq!(out.status.code(), Some(5), "{}", text(&out));
        // Put back as it was: mounts again.
        fs::write(m.backing("system/policy.toml"), &policy).unwrap();
        fs::write(m.backing("vault/system-manifest.json"), &before).unwrap();
        m.mount(&[]);
    }
}

#[test]
fn a_forgery_found_when_the_vault_is_unlocked_stops_the_agents() {
    let m = Mounted::new();
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    ok(vault(&m, &["lock"], None));
    assert!(m.umount().status.success());
    forge_policy(&m, true);
    // Locked: the seal cannot be checked at the mount, which says so.
    let out = m.try_mount(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("vault is locked"), "{}", text(&out));
    ok(vault(&m, &["unlock"], None));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = clawfs([
            OsStr::new("estop"),
            OsStr::new("--store"),
            m.store.as_os_str(),
            OsStr::new("--status"),
        ]);
        if text(&status).contains("IN FORCE") {
            break;
        }
        assert!(Instant::now() < deadline, "no stop: {}", text(&status));
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = m.run_agent("fs-engine", "true");
    assert!(!out.status.success(), "{}", text(&out));
    let all = audit_until(&m, |r| r.iter().any(|r| r["operation"] == "system:seal"));
    let rec = all
        .iter()
        .find(|r| r["operation"] == "system:seal")
        .expect("the broken seal is on record");
    assert!(
        rec["reason"]
            .as_str()
            .unwrap()
            .contains("seal does not hold"),
        "{rec}"
    );
}

/// Changing what the seal covers needs the vault's key: with the vault locked, `clawfs policy
/// reload FILE` and `clawfs system update` refuse and change nothing.
#[test]
fn changes_to_system_wait_for_the_vault() {
    let m = Mounted::new();
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    ok(vault(&m, &["lock"], None));
    let policy = fs::read(m.backing("system/policy.toml")).unwrap();
    let manifest = fs::read(m.backing("vault/system-manifest.json")).unwrap();
    let file = m.dir.path().join("policy.toml");
    fs::write(&file, &policy).unwrap();
    let reload = || {
        clawfs([
            OsStr::new("policy"),
            OsStr::new("reload"),
            OsStr::new("--store"),
            m.store.as_os_str(),
            file.as_os_str(),
        ])
    };
    let out = reload();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("vault is locked"), "{}", text(&out));
    assert_eq!(
        fs::read(m.backing("vault/system-manifest.json")).unwrap(),
        manifest
    );
    ok(vault(&m, &["unlock"], None));
    let out = reload();
    assert!(out.status.success(), "{}", text(&out));
    assert!(system_verify(&m).status.success());
}
