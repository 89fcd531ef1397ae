//! What must not change: signed documents of `specs/` and the manifest of `system/`, each
//! tampered with in the store behind the daemon's back and caught where the docs say, with the
//! documented error and audit record.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;

use serde_json::Value;

use crate::common::{audit_until, clawfs, cli, errno, ok, vault, Mounted};

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

fn sha_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

fn make_fifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
}

fn signatures(m: &Mounted) -> Value {
    serde_json::from_slice(&fs::read(m.backing("specs/signatures.json")).unwrap()).unwrap()
}

#[test]
fn signed_specs_freeze_verify_and_change_only_with_two_signers() {
    let m = Mounted::new();
    // A new store: the built-in document has its hash; no key exists yet.
    ok(cli(&m, &["specs", "verify"]));
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    let out = ok(cli(&m, &["specs", "keygen", "--as", "alice"]));
    assert!(out.contains("signed P1.4-clawfs-spec"), "{out}");
    ok(cli(&m, &["specs", "keygen", "--as", "bob"]));
    fails(cli(&m, &["specs", "keygen", "--as", "bob"]), 1);
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
    ok(cli(
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
    // Once the store has signers, a draft is not served until it is frozen.
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    ok(cli(&m, &["specs", "freeze", "R-1", "--as", "alice"]));
    assert_eq!(
        fs::read(m.path("specs/p1/R-1.md")).unwrap(),
        b"# Rules\n\nBe kind.\n"
    );
    // Paths that are not plain relative names are refused (a trailing '/' once replaced a
    // frozen document).
    for bad in [
        "p1/P1.4-clawfs-spec.md/",
        "p1//x.md",
        "dir/",
        "../x.md",
        "history/x.md",
        ".x",
    ] {
        let d = draft.to_str().unwrap();
        fails(
            cli(&m, &["specs", "add", d, "--id", "X-1", "--path", bad]),
            1,
        );
    }
    assert!(fs::read(m.path("specs/p1/P1.4-clawfs-spec.md"))
        .unwrap()
        .starts_with(b"# P1.4"));
    fails(cli(&m, &["specs", "freeze", "R-1", "--as", "bob"]), 1);
    let verify = ok(cli(&m, &["specs", "verify", "--json"]));
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
    ok(cli(&m, &["specs", "propose", "R-1", v2.to_str().unwrap()]));
    let out = ok(cli(&m, &["specs", "approve", "R-1", "--as", "alice"]));
    assert!(out.contains("1 more"), "{out}");
    let err = fails(cli(&m, &["specs", "approve", "R-1", "--as", "alice"]), 1);
    assert!(
        err.contains("already approved") && err.contains("RULE-003"),
        "{err}"
    );
    // Nothing changed yet.
    assert_eq!(
        fs::read(m.path("specs/p1/R-1.md")).unwrap(),
        b"# Rules\n\nBe kind.\n"
    );
    let err = fails(cli(&m, &["specs", "approve", "R-1", "--as", "mallory"]), 1);
    assert!(err.contains("mallory"), "{err}");
    // An approval renamed in the proposal file (alice's signature as bob's) is caught.
    let proposal = m.backing(".clawfs/spec-proposals/R-1.json");
    let honest = fs::read(&proposal).unwrap();
    tamper(&proposal, |b| {
        String::from_utf8(b)
            .unwrap()
            .replace("\"alice\"", "\"bob\"")
            .into_bytes()
    });
    let err = fails(cli(&m, &["specs", "approve", "R-1", "--as", "alice"]), 5);
    assert!(err.contains("does not verify"), "{err}");
    tamper(&proposal, |_| honest.clone());
    let out = ok(cli(&m, &["specs", "approve", "R-1", "--as", "bob"]));
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
    ok(cli(&m, &["specs", "verify"]));

    // An open descriptor keeps the bytes that were checked, whatever the store does later.
    let mut open = fs::File::open(m.path("specs/p1/R-1.md")).unwrap();
    let book_before = fs::read(m.backing("specs/signatures.json")).unwrap();
    let keep = fs::read(m.backing("specs/p1/R-1.md")).unwrap();

    // Rolled back: the current entry made a copy of the superseded one (same id and version).
    tamper(&m.backing("specs/signatures.json"), |_| {
        let mut book = signatures(&m);
        let all = book["signatures"].as_array_mut().unwrap();
        let old = all
            .iter()
            .find(|e| e["spec_id"] == "R-1" && e["version"] == 1)
            .unwrap()
            .clone();
        for e in all.iter_mut() {
            if e["spec_id"] == "R-1" && e["version"] == 2 {
                *e = old.clone();
                e["status"] = Value::from("FROZEN");
                e.as_object_mut().unwrap().remove("kept_at");
            }
        }
        serde_json::to_vec_pretty(&book).unwrap()
    });
    tamper(&m.backing("specs/p1/R-1.md"), |_| {
        b"# Rules\n\nBe kind.\n".to_vec()
    });
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    // Demoted to a draft, unsigned: not served either.
    tamper(&m.backing("specs/signatures.json"), |_| {
        let mut book: Value = serde_json::from_slice(&book_before).unwrap();
        for e in book["signatures"].as_array_mut().unwrap() {
            if e["spec_id"] == "R-1" && e["version"] == 2 {
                e["status"] = Value::from("DRAFT");
                e["sha256"] = Value::from(sha_hex(b"# Rules\n\nBe kind.\n"));
                e.as_object_mut().unwrap().remove("ed25519");
            }
        }
        serde_json::to_vec_pretty(&book).unwrap()
    });
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    // Moved: another document's signed entry and bytes at this path (the path is signed).
    tamper(&m.backing("specs/signatures.json"), |_| {
        let mut book: Value = serde_json::from_slice(&book_before).unwrap();
        for e in book["signatures"].as_array_mut().unwrap() {
            if e["spec_id"] == "R-1" && e["version"] == 2 {
                e["path"] = Value::from("p1/other.md");
            }
            if e["spec_id"] == "P1.4-clawfs-spec" {
                e["path"] = Value::from("p1/R-1.md");
            }
        }
        serde_json::to_vec_pretty(&book).unwrap()
    });
    let p14 = fs::read(m.backing("specs/p1/P1.4-clawfs-spec.md")).unwrap();
    tamper(&m.backing("specs/p1/R-1.md"), |_| p14.clone());
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    let mut first = String::new();
    std::io::Read::read_to_string(&mut open, &mut first).unwrap();
    assert_eq!(
        first, "# Rules\n\nBe kind. Be brief.\n",
        "the open descriptor changed"
    );
    tamper(&m.backing("specs/signatures.json"), |_| book_before.clone());
    tamper(&m.backing("specs/p1/R-1.md"), |_| keep.clone());
    assert!(fs::read(m.path("specs/p1/R-1.md")).is_ok());

    // A key added to system/signers.json behind ClawFS's back is not trusted: nothing is
    // served while the file differs from the system manifest.
    let keys_before = fs::read(m.backing("system/signers.json")).unwrap();
    tamper(&m.backing("system/signers.json"), |b| {
        let mut v: Value = serde_json::from_slice(&b).unwrap();
        let mut extra = v["signers"][0].clone();
        extra["name"] = Value::from("mallory");
        v["signers"].as_array_mut().unwrap().push(extra);
        serde_json::to_vec_pretty(&v).unwrap()
    });
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    fails(cli(&m, &["specs", "verify"]), 5);
    fails(cli(&m, &["system", "verify"]), 5);
    let keys = m.dir.path().join("signers.json");
    fs::write(&keys, &keys_before).unwrap();
    // Changing what the system trusts is sealed with the vault's key: unlocked for it.
    ok(vault(&m, &["unlock"], None));
    ok(cli(
        &m,
        &[
            "system",
            "update",
            &format!("signers.json={}", keys.display()),
        ],
    ));
    assert!(fs::read(m.path("specs/p1/R-1.md")).is_ok());

    // A FIFO or a symlink planted in specs/ is not served (it would bypass the checks).
    make_fifo(&m.backing("specs/p1/fifo.md"));
    std::os::unix::fs::symlink("/etc/hostname", m.backing("specs/p1/link.md")).unwrap();
    assert_eq!(errno(fs::metadata(m.path("specs/p1/fifo.md"))), libc::EIO);
    assert_eq!(errno(fs::read(m.path("specs/p1/link.md"))), libc::EIO);
    fs::remove_file(m.backing("specs/p1/fifo.md")).unwrap();
    fs::remove_file(m.backing("specs/p1/link.md")).unwrap();

    // Tampered behind the daemon's back: not served (EIO), audited, caught by verify.
    tamper(&m.backing("specs/p1/R-1.md"), |mut t| {
        t.extend_from_slice(b"Obey.\n");
        t
    });
    assert_eq!(errno(fs::read(m.path("specs/p1/R-1.md"))), libc::EIO);
    // An agent reading it gets the same refusal, not the tampered text.
    let out = m.run_agent(
        "fs-engine",
        &format!("cat {}", m.path("specs/p1/R-1.md").display()),
    );
    assert!(!out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("Obey"),
        "{out:?}"
    );
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
    let err = fails(cli(&m, &["specs", "verify"]), 5);
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
    let out = cli(&m, &["specs", "verify"]);
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
    ok(cli(&m, &["system", "verify"]));
    assert!(m.umount().status.success());
    let quotas = m.backing("system/cgroup/quotas.json");
    let original = fs::read(&quotas).unwrap();
    tamper(&quotas, |mut t| {
        t.extend_from_slice(b" ");
        t
    });
    // Refused, with the file named and exit status 5; nothing is mounted.
    let mount = |extra: &[&str]| m.try_mount(extra);
    let err = fails(mount(&[]), 5);
    assert!(err.contains("system/cgroup/quotas.json: changed"), "{err}");
    assert!(!m.is_mounted());
    let err = fails(cli(&m, &["system", "verify"]), 5);
    assert!(err.contains("1 file(s)"), "{err}");
    // A file added or a symlink planted in system/ is caught the same way.
    std::os::unix::fs::symlink("/etc/shadow", m.backing("system/cgroup/extra")).unwrap();
    let out = cli(&m, &["system", "verify", "--json"]);
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

    // A missing manifest is not rebuilt from what is there: the mount is refused.
    let manifest = m.backing("vault/system-manifest.json");
    let saved = fs::read(&manifest).unwrap();
    fs::remove_file(&manifest).unwrap();
    let err = fails(mount(&[]), 5);
    assert!(err.contains("system-manifest.json is missing"), "{err}");
    fails(cli(&m, &["system", "verify"]), 5);
    fs::write(&manifest, &saved).unwrap();

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
    ok(cli(&m, &["system", "update", &arg]));
    ok(cli(&m, &["system", "verify"]));
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
        fails(cli(&m, &["system", "update", bad]), 1);
    }
    // So is content that is not what the file must be.
    let junk = m.dir.path().join("junk");
    fs::write(&junk, "not json").unwrap();
    let arg = format!("signers.json={}", junk.display());
    fails(cli(&m, &["system", "update", &arg]), 1);
    assert!(!m.backing("system/signers.json").exists());
    ok(cli(&m, &["system", "verify"]));

    // A policy to check or install is a regular file read once: a FIFO or /dev/zero is
    // refused at once, not waited on or read without end.
    let fifo = m.dir.path().join("policy.fifo");
    make_fifo(&fifo);
    for input in [fifo.to_str().unwrap(), "/dev/zero"] {
        for out in [
            clawfs(["policy", "check", input]),
            cli(&m, &["policy", "reload", input]),
        ] {
            let err = fails(out, 1);
            assert!(err.contains("not a regular file"), "{input}: {err}");
        }
        let arg = format!("policy.toml={input}");
        let err = fails(cli(&m, &["system", "update", &arg]), 1);
        assert!(err.contains("not a regular file"), "{err}");
    }
    // A policy edited in the store by hand is not applied: the running daemon refuses it.
    tamper(&m.backing("system/policy.toml"), |mut p| {
        p.extend_from_slice(b"\n# edited behind ClawFS's back\n");
        p
    });
    let err = String::from_utf8_lossy(&cli(&m, &["policy", "reload"]).stderr).into_owned();
    assert!(
        err.contains("not as") && err.contains("policy.toml"),
        "{err}"
    );
    // Nor does `clawfs run` start an agent under it: the command never runs.
    let marker = m.dir.path().join("ran");
    let out = m.run_agent("fs-engine", &format!("touch {}", marker.display()));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success() && err.contains("policy.toml"),
        "{err}"
    );
    assert!(!marker.exists());
    fails(cli(&m, &["system", "verify"]), 5);
}

/// A valid definition of `tool` at `version` with one capability.
fn tool_definition(tool: &str, version: &str, capability: &str) -> Value {
    serde_json::json!({
        "tool_id": tool,
        "version": version,
        "wasm_path": format!("/clawfs/tools/binaries/{tool}-v{version}.wasm"),
        "wit_interface": "clawos-channel-v1",
        "capabilities": [capability],
        "memory_limit_mb": 64,
        "cpu_quota_percent": 10,
        "timeout_seconds": 30,
        "author": "test",
        "license": "MIT"
    })
}

#[test]
fn published_tools_are_signed_immutable_and_checked_on_read() {
    let m = Mounted::new();
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    ok(cli(&m, &["specs", "keygen", "--as", "alice"]));
    let dir = m.dir.path();
    let def =
        |version: &str| tool_definition("echo", version, "filesystem:read:/clawfs/workspaces");
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    };
    let wasm = b"\0asm\x01\0\0\0".to_vec();
    let d1 = write(
        "tool-echo.json",
        &serde_json::to_vec(&def("1.0.0")).unwrap(),
    );
    let b1 = write("echo-v1.0.0.wasm", &wasm);
    // `clawfs tools add FILES... --as SIGNER`.
    let add = |files: &[&str], signer: &str| {
        let mut args = vec!["tools", "add"];
        args.extend(files);
        args.extend(["--as", signer]);
        cli(&m, &args)
    };

    // Refused before anything is written: names, schema, not WebAssembly, unknown signer.
    let misnamed = write(
        "tool-other.json",
        &serde_json::to_vec(&def("1.0.0")).unwrap(),
    );
    let err = fails(add(&[&misnamed, &b1], "alice"), 1);
    assert!(err.contains("tool-echo.json"), "{err}");
    let sub = dir.join("v2");
    fs::create_dir(&sub).unwrap();
    let bad_version = sub.join("tool-echo.json");
    fs::write(&bad_version, serde_json::to_vec(&def("1.0")).unwrap()).unwrap();
    let err = fails(add(&[bad_version.to_str().unwrap()], "alice"), 1);
    assert!(err.contains("X.Y.Z"), "{err}");
    let not_wasm = write("echo-v1.0.0.wasm.txt", b"#!/bin/sh\n");
    let b1_other = sub.join("echo-v1.0.0.wasm");
    let b1_other = b1_other.to_str().unwrap();
    fs::rename(&not_wasm, b1_other).unwrap();
    let err = fails(add(&[&d1, b1_other], "alice"), 1);
    assert!(err.contains("WebAssembly"), "{err}");
    fails(add(&[&d1, &b1], "mallory"), 1);
    assert!(!m.backing("tools/binaries/echo-v1.0.0.wasm").exists());

    // Published: served through the mount, listed in the registry beside the built-in tools.
    ok(add(&[&d1, &b1], "alice"));
    assert_eq!(
        fs::read(m.path("tools/binaries/echo-v1.0.0.wasm")).unwrap(),
        wasm
    );
    assert!(fs::read(m.path("tools/definitions/tool-echo.json")).is_ok());
    let reg: Value =
        serde_json::from_slice(&fs::read(m.path("tools/registry.json")).unwrap()).unwrap();
    assert_eq!(reg["packages"][0]["tool_id"], "echo");
    assert!(reg["packages"][0]["wasm_hash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(reg["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "read_file"));
    // The same version again: nothing changes; a different binary under it: refused.
    let out = ok(add(&[&d1, &b1], "alice"));
    assert!(out.contains("already published"), "{out}");
    let mut other = wasm.clone();
    other.push(0);
    fs::write(b1_other, &other).unwrap();
    let err = fails(add(&[&d1, b1_other], "alice"), 1);
    assert!(err.contains("cannot change"), "{err}");
    assert_eq!(
        fs::read(m.backing("tools/binaries/echo-v1.0.0.wasm")).unwrap(),
        wasm
    );

    // A remount keeps the published tool.
    assert!(m.umount().status.success());
    m.mount(&[]);
    assert_eq!(
        fs::read(m.path("tools/binaries/echo-v1.0.0.wasm")).unwrap(),
        wasm
    );

    // A symlink planted at a signed path, or a file beside the signed ones, is not served.
    let evil = m.backing("workspaces/default/evil.wasm");
    fs::write(&evil, b"\0asmEVIL").unwrap();
    let bin = m.backing("tools/binaries/echo-v1.0.0.wasm");
    fs::rename(&bin, dir.join("saved.wasm")).unwrap();
    std::os::unix::fs::symlink(&evil, &bin).unwrap();
    assert_eq!(
        errno(fs::read(m.path("tools/binaries/echo-v1.0.0.wasm"))),
        libc::EIO
    );
    fs::remove_file(&bin).unwrap();
    fs::rename(dir.join("saved.wasm"), &bin).unwrap();
    fs::write(m.backing("tools/registry.json.bak"), b"{}").unwrap();
    assert_eq!(
        errno(fs::read(m.path("tools/registry.json.bak"))),
        libc::EIO
    );
    fs::remove_file(m.backing("tools/registry.json.bak")).unwrap();
    // Every field of a package is signed: widened capabilities, or an entry listed twice,
    // make the registry and the tool's files unservable until put back.
    let signed = fs::read(m.backing("tools/registry.json")).unwrap();
    let edits: [fn(&mut Value); 3] = [
        |reg: &mut Value| {
            reg["packages"][0]["capabilities"] = serde_json::json!(["network:outbound:*"])
        },
        |reg: &mut Value| reg["packages"][0]["timeout_seconds"] = Value::from(86400),
        |reg: &mut Value| {
            let p = reg["packages"][0].clone();
            reg["packages"].as_array_mut().unwrap().push(p);
        },
    ];
    for edit in edits {
        tamper(&m.backing("tools/registry.json"), |bytes| {
            let mut reg: Value = serde_json::from_slice(&bytes).unwrap();
            edit(&mut reg);
            serde_json::to_vec_pretty(&reg).unwrap()
        });
        assert_eq!(errno(fs::read(m.path("tools/registry.json"))), libc::EIO);
        assert_eq!(
            errno(fs::read(m.path("tools/binaries/echo-v1.0.0.wasm"))),
            libc::EIO
        );
        fs::write(m.backing("tools/registry.json"), &signed).unwrap();
    }
    assert_eq!(fs::read(m.path("tools/registry.json")).unwrap(), signed);
    // Inputs that are not regular files are refused at once, not read forever.
    let fifo = dir.join("fifo.wasm");
    make_fifo(&fifo);
    let zero = dir.join("zero.wasm");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for input in [&fifo, &zero] {
        let err = fails(add(&[&d1, input.to_str().unwrap()], "alice"), 1);
        assert!(err.contains("not a regular file"), "{err}");
    }

    // Tampered behind the daemon's back: the binary, then the registry made to match it.
    tamper(&m.backing("tools/binaries/echo-v1.0.0.wasm"), |mut b| {
        b.push(1);
        b
    });
    assert_eq!(
        errno(fs::read(m.path("tools/binaries/echo-v1.0.0.wasm"))),
        libc::EIO
    );
    let records = audit_until(&m, |r| {
        r.iter()
            .any(|e| e["path"] == "/tools/binaries/echo-v1.0.0.wasm" && e["errno"] == libc::EIO)
    });
    assert!(
        records
            .iter()
            .any(|e| e["path"] == "/tools/binaries/echo-v1.0.0.wasm" && e["errno"] == libc::EIO),
        "no audit record: {records:?}"
    );
    let sum = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            fs::read(m.backing("tools/binaries/echo-v1.0.0.wasm")).unwrap(),
        ))
    };
    tamper(&m.backing("tools/registry.json"), |bytes| {
        let mut reg: Value = serde_json::from_slice(&bytes).unwrap();
        reg["packages"][0]["wasm_hash"] = Value::from(format!("sha256:{sum}"));
        serde_json::to_vec_pretty(&reg).unwrap()
    });
    assert_eq!(
        errno(fs::read(m.path("tools/binaries/echo-v1.0.0.wasm"))),
        libc::EIO
    );
    assert_eq!(errno(fs::read(m.path("tools/registry.json"))), libc::EIO);
    // `clawfs tools list` shows the forged entry for what it is, and fails.
    let out = cli(&m, &["tools", "list"]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    let err = fails(out, 5);
    assert!(
        listed.contains("echo\t1.0.0") && listed.contains("NOT VERIFIED"),
        "{listed}"
    );
    assert!(
        err.contains("1 entries fail their signature check"),
        "{err}"
    );
    let out = cli(&m, &["tools", "list", "--json"]);
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["verified"], false, "{line}");
    // A registry that is not JSON at all: the store is still mounted (tools/ serves none of
    // it, audited), and `tools list` says what is wrong.
    fs::write(m.backing("tools/registry.json"), b"{ not json").unwrap();
    ok(m.umount());
    m.mount(&[]);
    assert_eq!(errno(fs::read(m.path("tools/registry.json"))), libc::EIO);
    assert!(m.path("workspaces/default").is_dir());
    assert!(m.log().contains("tool registry is damaged"), "{}", m.log());
    let err = fails(cli(&m, &["tools", "list"]), 5);
    assert!(err.contains("tools/registry.json is not valid"), "{err}");
    audit_until(&m, |r| {
        r.iter()
            .any(|e| e["path"] == "/tools/registry.json" && e["errno"] == libc::EIO)
    });
    // A built-in definition edited in the store is not served either.
    tamper(
        &m.backing("tools/definitions/tool-read_file.json"),
        |mut b| {
            b.insert(1, b' ');
            b
        },
    );
    assert_eq!(
        errno(fs::read(m.path("tools/definitions/tool-read_file.json"))),
        libc::EIO
    );
}

/// A store-level attacker swaps another tool's signed definition in and out at a tool's path
/// while an agent reads it: the reader gets the tool's own definition or an error, never the
/// other's bytes under this name.
#[test]
fn a_definition_swapped_in_while_opened_is_not_served_under_its_name() {
    let m = Mounted::new();
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    ok(cli(&m, &["specs", "keygen", "--as", "alice"]));
    let dir = m.dir.path();
    for tool in ["foo", "ext"] {
        let def = tool_definition(tool, "1.0.0", &format!("marker:{tool}"));
        let d = dir.join(format!("tool-{tool}.json"));
        fs::write(&d, serde_json::to_vec(&def).unwrap()).unwrap();
        let b = dir.join(format!("{tool}-v1.0.0.wasm"));
        fs::write(&b, b"\0asm\x01\0\0\0").unwrap();
        ok(cli(
            &m,
            &[
                "tools",
                "add",
                d.to_str().unwrap(),
                b.to_str().unwrap(),
                "--as",
                "alice",
            ],
        ));
    }
    let foo = m.backing("tools/definitions/tool-foo.json");
    let ext = m.backing("tools/definitions/tool-ext.json");
    let aside = m.backing("tools/definitions/aside");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (served, wrong) = std::thread::scope(|s| {
        s.spawn(|| {
            // foo aside, ext at foo's name, then back: over and over.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                fs::rename(&foo, &aside).unwrap();
                fs::rename(&ext, &foo).unwrap();
                fs::rename(&foo, &ext).unwrap();
                fs::rename(&aside, &foo).unwrap();
            }
        });
        let (mut served, mut wrong) = (0, 0);
        for _ in 0..3000 {
            if let Ok(bytes) = fs::read(m.path("tools/definitions/tool-foo.json")) {
                served += 1;
                wrong += usize::from(String::from_utf8_lossy(&bytes).contains("marker:ext"));
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (served, wrong)
    });
    assert_eq!(
        wrong, 0,
        "ext's definition served as tool-foo.json ({served} reads served)"
    );
    // Put back, the tool's own definition is served again.
    let bytes = fs::read(m.path("tools/definitions/tool-foo.json")).unwrap();
    assert!(String::from_utf8_lossy(&bytes).contains("marker:foo"));
}
