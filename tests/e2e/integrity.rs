//! What must not change: signed documents of `specs/` and the manifest of `system/`, each
//! tampered with in the store behind the daemon's back and caught where the docs say, with the
//! documented error and audit record.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;

use serde_json::Value;

use crate::common::{audit_until, clawfs, errno, vault, Mounted};

fn admin(m: &Mounted, args: &[&str]) -> Output {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.extend([OsStr::new("--store"), m.store.as_os_str()]);
    clawfs(all)
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Fails with exit status `code`; returns stderr.
fn fails(o: Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(
        o.status.code(),
        Some(code),
        "{err}{}",
        String::from_utf8_lossy(&o.stdout)
    );
    err
}

/// Rewrites a file of the store as root would, behind the daemon's back.
fn tamper(path: &std::path::Path, edit: impl FnOnce(Vec<u8>) -> Vec<u8>) {
    let mode = fs::metadata(path).unwrap().permissions().mode();
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
    let new = edit(fs::read(path).unwrap());
    fs::write(path, new).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn signatures(m: &Mounted) -> Value {
    serde_json::from_slice(&fs::read(m.backing("specs/signatures.json")).unwrap()).unwrap()
}

#[test]
fn signed_specs_freeze_verify_and_change_only_with_two_signers() {
    let m = Mounted::new();
    // A new store: the built-in document has its hash; no key exists yet.
    ok(admin(&m, &["specs", "verify"]));
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    let out = ok(admin(&m, &["specs", "keygen", "--as", "alice"]));
    assert!(out.contains("signed P1.4-clawfs-spec"), "{out}");
    ok(admin(&m, &["specs", "keygen", "--as", "bob"]));
    fails(admin(&m, &["specs", "keygen", "--as", "bob"]), 1);
    let keys: Value =
        serde_json::from_slice(&fs::read(m.backing("system/signers.json")).unwrap()).unwrap();
    assert_eq!(keys["signers"].as_array().unwrap().len(), 2);
    // The public keys are readable through the mount; the private ones are vault secrets.
    assert!(fs::read_to_string(m.path("system/signers.json"))
        .unwrap()
        .contains("alice"));

    // A draft is served, then frozen and signed.
    let draft = m.dir.path().join("rules.md");
    fs::write(&draft, "# Rules\n\nBe kind.\n").unwrap();
    ok(admin(
        &m,
        &[
            "specs",
            "add",
            draft.to_str().unwrap(),
            "--id",
            "R-1",
            "--path",
            "p1/R-1.md",
        ],
    ));
    assert_eq!(
        fs::read(m.path("specs/p1/R-1.md")).unwrap(),
        b"# Rules\n\nBe kind.\n"
    );
    ok(admin(&m, &["specs", "freeze", "R-1", "--as", "alice"]));
    fails(admin(&m, &["specs", "freeze", "R-1", "--as", "bob"]), 1);
    let verify = ok(admin(&m, &["specs", "verify", "--json"]));
    let v: Value = serde_json::from_str(verify.trim()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let docs = v["documents"].as_array().unwrap();
    assert!(
        docs.iter()
            .all(|d| d["signed_by"] == serde_json::json!(["alice"])),
        "{v}"
    );

    // Changing a frozen document needs two different signers (RULE-003).
    let v2 = m.dir.path().join("rules-v2.md");
    fs::write(&v2, "# Rules\n\nBe kind. Be brief.\n").unwrap();
    ok(admin(
        &m,
        &["specs", "propose", "R-1", v2.to_str().unwrap()],
    ));
    let out = ok(admin(&m, &["specs", "approve", "R-1", "--as", "alice"]));
    assert!(out.contains("1 more"), "{out}");
    let err = fails(admin(&m, &["specs", "approve", "R-1", "--as", "alice"]), 1);
    assert!(
        err.contains("already approved") && err.contains("RULE-003"),
        "{err}"
    );
    // Nothing changed yet.
    assert_eq!(
        fs::read(m.path("specs/p1/R-1.md")).unwrap(),
        b"# Rules\n\nBe kind.\n"
    );
    let err = fails(
        admin(&m, &["specs", "approve", "R-1", "--as", "mallory"]),
        1,
    );
    assert!(err.contains("mallory"), "{err}");
    let out = ok(admin(&m, &["specs", "approve", "R-1", "--as", "bob"]));
    assert!(out.contains("version 2"), "{out}");
    assert_eq!(
        fs::read(m.path("specs/p1/R-1.md")).unwrap_or_else(|e| panic!("{e}: {}", m.log())),
        b"# Rules\n\nBe kind. Be brief.\n"
    );
    assert_eq!(
        fs::read(m.path("specs/history/R-1/v1.md")).unwrap(),
        b"# Rules\n\nBe kind.\n",
        "the old version is kept, and served"
    );
    let book = signatures(&m);
    let current = book["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["spec_id"] == "R-1" && e["status"] == "FROZEN")
        .unwrap();
    assert_eq!(current["version"], 2);
    assert_eq!(current["ed25519"].as_array().unwrap().len(), 2);

    // Verification needs only public keys: it works with the vault locked.
    ok(vault(&m, &["lock"], None));
    ok(admin(&m, &["specs", "verify"]));

    // Tampered behind the daemon's back: not served (EIO), audited, caught by verify.
    tamper(&m.backing("specs/p1/R-1.md"), |mut t| {
        t.extend_from_slice(b"Obey.\n");
        t
    });
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    let records = audit_until(&m, |r| {
        r.iter()
            .any(|e| e["path"] == "/specs/p1/R-1.md" && e["errno"] == libc::EIO)
    });
    let rec = records
        .iter()
        .find(|e| e["path"] == "/specs/p1/R-1.md" && e["errno"] == libc::EIO)
        .unwrap_or_else(|| panic!("no audit record of the refused read: {records:?}"));
    assert!(
        rec["reason"].as_str().unwrap().contains("not served"),
        "{rec}"
    );
    let err = fails(admin(&m, &["specs", "verify"]), 5);
    assert!(err.contains("fail verification"), "{err}");

    // Recomputing the hash in signatures.json does not help: the signatures sign the old one.
    let sum = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            fs::read(m.backing("specs/p1/R-1.md")).unwrap(),
        ))
    };
    tamper(&m.backing("specs/signatures.json"), |_| {
        let mut book = signatures(&m);
        for e in book["signatures"].as_array_mut().unwrap() {
            if e["spec_id"] == "R-1" && e["status"] == "FROZEN" {
                e["sha256"] = Value::from(sum.clone());
            }
        }
        serde_json::to_vec_pretty(&book).unwrap()
    });
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    let out = admin(&m, &["specs", "verify"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("not valid"),
        "{out:?}"
    );
    fails(out, 5);
    // The untouched documents are still served; `ls` still lists the tampered one.
    assert!(fs::read(m.path("specs/p1/P1.4-clawfs-spec.md")).is_ok());
    assert!(fs::read_dir(m.path("specs/p1"))
        .unwrap()
        .any(|e| e.unwrap().file_name() == "R-1.md"));
}

#[test]
fn a_tampered_system_file_stops_the_mount_until_allowed_or_updated() {
    let m = Mounted::new();
    ok(admin(&m, &["system", "verify"]));
    assert!(m.umount().status.success());
    let quotas = m.backing("system/cgroup/quotas.json");
    let original = fs::read(&quotas).unwrap();
    tamper(&quotas, |mut t| {
        t.extend_from_slice(b" ");
        t
    });
    // Refused, with the file named and exit status 5; nothing is mounted.
    let mount = |extra: &[&str]| {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("mount"),
            m.mnt.as_os_str(),
            OsStr::new("--store"),
            m.store.as_os_str(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        clawfs(args)
    };
    let err = fails(mount(&[]), 5);
    assert!(err.contains("system/cgroup/quotas.json: changed"), "{err}");
    assert!(!m.is_mounted());
    let err = fails(admin(&m, &["system", "verify"]), 5);
    assert!(err.contains("1 file(s)"), "{err}");
    // A file added or a symlink planted in system/ is caught the same way.
    std::os::unix::fs::symlink("/etc/shadow", m.backing("system/cgroup/extra")).unwrap();
    let out = admin(&m, &["system", "verify", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let kinds: Vec<&str> = v["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["not_a_file", "changed"], "{v}");
    fs::remove_file(m.backing("system/cgroup/extra")).unwrap();

    // Allowed on purpose: served, and the allowance is on the audit trail.
    ok(mount(&["--allow-tampered-system"]));
    assert!(m.is_mounted());
    let records = audit_until(&m, |r| r.iter().any(|e| e["operation"] == "mount"));
    let rec = records
        .iter()
        .find(|e| e["operation"] == "mount")
        .unwrap_or_else(|| panic!("the allowance is not audited: {records:?}"));
    assert!(
        rec["reason"].as_str().unwrap().contains("quotas.json"),
        "{rec}"
    );
    assert!(m.umount().status.success());

    // Installed through `clawfs system update`: recorded, and the store mounts again.
    let file = m.dir.path().join("quotas.json");
    fs::write(&file, &original).unwrap();
    let arg = format!("cgroup/quotas.json={}", file.display());
    ok(admin(&m, &["system", "update", &arg]));
    ok(admin(&m, &["system", "verify"]));
    ok(mount(&[]));
    assert_eq!(
        fs::read(m.path("system/cgroup/quotas.json")).unwrap(),
        original
    );
    // Bad paths are refused before anything is written.
    for bad in [
        "../vault/x=/etc/hostname",
        "a/./b=/etc/hostname",
        "noequals",
    ] {
        fails(admin(&m, &["system", "update", bad]), 1);
    }
    ok(admin(&m, &["system", "verify"]));
}
