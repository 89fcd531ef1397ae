//! The namespace a fresh mount shows: six roots, their modes, and the content `clawfs init` lays
//! out, read through the mount with std::fs and shell tools.

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::common::{sh, Mounted};
use sha2::{Digest, Sha256};

#[test]
fn ls_shows_the_six_roots_with_their_modes() {
    let m = Mounted::new();
    let out = sh(&format!("ls {}", m.mnt.display()));
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["agents", "specs", "system", "tools", "vault", "workspaces"]
    );
    let mode = |p: &str| std::fs::metadata(m.path(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("system"), 0o555);
    assert_eq!(mode("agents"), 0o750);
    assert_eq!(mode("tools"), 0o755);
    assert_eq!(mode("workspaces"), 0o750);
    assert_eq!(mode("vault"), 0o711);
    assert_eq!(mode("specs"), 0o555);
    assert_eq!(mode("specs/signatures.json"), 0o444);
    // The private area is not part of the namespace.
    assert!(std::fs::metadata(m.path(".clawfs")).is_err());
    assert_eq!(std::fs::metadata(&m.mnt).unwrap().ino(), 1);
}

#[test]
fn init_lays_out_real_content() {
    let m = Mounted::new();
    for agent in clawfs_store::names::DEFAULT_AGENTS {
        let dir = m.path(&format!("agents/{agent}"));
        for sub in ["logs", "cache"] {
            assert!(dir.join(sub).is_dir(), "{agent}/{sub}");
        }
        let id: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("identity.json")).unwrap()).unwrap();
        assert_eq!(id["agent_id"], agent);
        assert!(clawfs_core::identity::verify(&id), "{agent} checksum");
        assert!(dir.join("state.json").is_file());
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path("workspaces/default/metadata.json")).unwrap())
            .unwrap();
    assert_eq!(meta["workspace_id"], "default");
    assert_eq!(meta["vector_dimension"], 1536);
    assert!(m.path("workspaces/default/snapshots").is_dir());

    let sigs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path("specs/signatures.json")).unwrap()).unwrap();
    let sig = &sigs["signatures"][0];
    let spec = std::fs::read(m.path(&format!("specs/{}", sig["path"].as_str().unwrap()))).unwrap();
    assert_eq!(sig["sha256"], hex::encode(Sha256::digest(&spec)));

    let wl: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path("system/seccomp/whitelist.json")).unwrap())
            .unwrap();
    assert!(wl["syscalls"].as_array().unwrap().len() > 50);
    let quotas: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path("system/cgroup/quotas.json")).unwrap())
            .unwrap();
    assert!(quotas["defaults"]["memory.max"].is_string());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path("system/manifest.json")).unwrap()).unwrap();
    for (rel, sum) in manifest["files"].as_object().unwrap() {
        let data = std::fs::read(m.path(&format!("system/{rel}"))).unwrap();
        assert_eq!(
            sum,
            &format!("sha256:{}", hex::encode(Sha256::digest(&data)))
        );
    }
    assert!(m.path("system/apparmor/clawos-fs").is_file());
    let reg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path("tools/registry.json")).unwrap()).unwrap();
    let listed = reg["tools"].as_array().unwrap();
    assert_eq!(listed.len(), clawfs_agent_tools::TOOL_NAMES.len());
    for tool in clawfs_agent_tools::TOOL_NAMES {
        let def: serde_json::Value = serde_json::from_slice(
            &std::fs::read(m.path(&format!("tools/definitions/tool-{tool}.json"))).unwrap(),
        )
        .unwrap();
        assert!(
            def.to_string().contains("\"properties\""),
            "{tool} has a schema"
        );
    }
    assert!(m.path("vault/secrets").is_dir() && m.path("vault/archive").is_dir());
}

#[test]
fn echo_cat_and_user_xattrs_with_shell_tools() {
    let m = Mounted::new();
    let f = m.ws().join("notes.md");
    let f = f.display();
    sh(&format!("echo hi > {f}"));
    assert_eq!(sh(&format!("cat {f}")), "hi\n");
    sh(&format!("setfattr -n user.topic -v rust {f}"));
    let dump = sh(&format!("getfattr -d --absolute-names {f}"));
    assert!(dump.contains("user.topic=\"rust\""), "{dump}");
    // Stored as a real xattr on the backing file.
    let backing = m.backing("workspaces/default/notes.md");
    assert_eq!(
        xattr::get(&backing, "user.topic").unwrap().unwrap(),
        b"rust"
    );
    sh(&format!("setfattr -x user.topic {f}"));
    assert!(xattr::get(&backing, "user.topic").unwrap().is_none());
}

#[test]
fn mkdir_in_workspaces_creates_a_workspace() {
    let m = Mounted::new();
    std::fs::create_dir(m.path("workspaces/project-alpha")).unwrap();
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(m.path("workspaces/project-alpha/metadata.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["workspace_id"], "project-alpha");
    assert_eq!(meta["owner"], "root");
    assert!(m.path("workspaces/project-alpha/snapshots").is_dir());
}

#[test]
fn vector_dimension_xattr_is_validated_and_recorded() {
    let m = Mounted::new();
    let ws = m.ws();
    xattr::set(&ws, "user.clawfs.vector_dimension", b"768").unwrap();
    assert_eq!(
        xattr::get(&ws, "user.clawfs.vector_dimension")
            .unwrap()
            .unwrap(),
        b"768"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["vector_dimension"], 768);
    for bad in [&b"64"[..], b"5000", b"many"] {
        let e = xattr::set(&ws, "user.clawfs.vector_dimension", bad).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
    let e = xattr::set(
        ws.join("metadata.json"),
        "user.clawfs.vector_dimension",
        b"512",
    )
    .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    let e = xattr::set(&ws, "user.clawfs.unknown", b"1").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    // The refused values changed nothing.
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(meta["vector_dimension"], 768);
    assert!(
        m.log().contains("outside 128..=4096"),
        "the reason is logged"
    );
}

#[test]
fn status_reports_the_mount() {
    let m = Mounted::new();
    let out = crate::common::clawfs(["status".as_ref(), m.mnt.as_os_str(), "--json".as_ref()]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["store"],
        m.store.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(v["counts"]["agents"], 8);
    assert_eq!(v["counts"]["workspaces"], 1);
    assert_eq!(v["daemon"]["version"], clawfs_core::VERSION);
    let human = crate::common::clawfs(["status".as_ref(), m.mnt.as_os_str()]);
    assert!(String::from_utf8_lossy(&human.stdout).contains("agents: 8"));
}

/// Every `--json` output is JSON Lines: one object per line, one line for a report.
#[test]
fn every_json_output_is_one_object_per_line() {
    let m = Mounted::new();
    std::fs::write(m.mnt.join("workspaces/default/a.txt"), "a").unwrap();
    let store = m.store.as_os_str();
    let runs: [(&[&OsStr], Option<usize>); 5] = [
        (
            &["status".as_ref(), m.mnt.as_os_str(), "--json".as_ref()],
            Some(1),
        ),
        (
            &["sandbox".as_ref(), "check".as_ref(), "--json".as_ref()],
            Some(5),
        ),
        (
            &[
                "audit".as_ref(),
                "--store".as_ref(),
                store,
                "verify".as_ref(),
                "--json".as_ref(),
            ],
            Some(1),
        ),
        (
            &[
                "audit".as_ref(),
                "--store".as_ref(),
                store,
                "tail".as_ref(),
                "-n".as_ref(),
                "3".as_ref(),
                "--json".as_ref(),
            ],
            None,
        ),
        (
            &[
                "vault".as_ref(),
                "--store".as_ref(),
                store,
                "status".as_ref(),
                "--json".as_ref(),
            ],
            Some(1),
        ),
    ];
    for (args, lines) in runs {
        let out = crate::common::clawfs(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let objects: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
            .collect();
        assert!(
            objects.iter().all(serde_json::Value::is_object),
            "{args:?}: {text}"
        );
        assert!(!objects.is_empty(), "{args:?}: no output");
        if let Some(n) = lines {
            assert_eq!(objects.len(), n, "{args:?}: {text}");
        }
    }
}
