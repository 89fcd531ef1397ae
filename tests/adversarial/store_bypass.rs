//! Agents and users go around the mount, straight to the store's files, where neither the
//! policy nor the audit trail sees them.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::{clawfs, Mounted};
use crate::support::{snapshot, text, TempUser};

#[test]
fn the_store_is_reachable_only_through_the_mount() {
    let m = Mounted::new();
    fs::write(m.ws().join("secret.txt"), "workspace secret\n").unwrap();
    let mode = fs::metadata(&m.store).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "store root mode");
    // The mount itself stays open to look into, through its "other" bits (no group bits: the
    // kernel then never asks for the root's ACL).
    let mode = fs::metadata(&m.mnt).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o705, "mount root mode");

    let before = snapshot(&m.store.join("agents"));
    let s = m.store.display();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cat {s}/workspaces/default/secret.txt 2>&1; ls {s} 2>&1; \
             echo pwned > {s}/agents/kernel-engine/x 2>&1; \
             cat {s}/agents/kernel-engine/identity.json 2>&1; true"
        ),
    );
    let out = text(&out);
    assert!(!out.contains("workspace secret"), "{out}");
    assert!(out.matches("Permission denied").count() >= 4, "{out}");
    // The agent's own audit view (logs/agent-DATE.log) grows with what it tried: the daemon's
    // record of the attempts. Nothing else changed.
    let same = |snap: Vec<String>| -> Vec<String> {
        snap.into_iter()
            .filter(|l| !l.contains("/logs/agent-") && !l.starts_with("fs-engine/logs "))
            .collect()
    };
    assert_eq!(same(before), same(snapshot(&m.store.join("agents"))));

    let user = TempUser::new("sb");
    let out = text(&user.sh(&format!("cat {s}/workspaces/default/secret.txt 2>&1; true")));
    assert!(out.contains("Permission denied"), "{out}");
}

#[test]
fn init_and_mount_close_an_open_store_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = clawfs(["init", "--store", store.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    fs::set_permissions(&store, fs::Permissions::from_mode(0o755)).unwrap();
    let out = clawfs(["init", "--store", store.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("0755 -> 0700"), "{}", text(&out));
    assert_eq!(
        fs::metadata(&store).unwrap().permissions().mode() & 0o7777,
        0o700
    );

    // A mount of a store opened by hand closes it too.
    let m = Mounted::new();
    assert_eq!(m.umount().status.code(), Some(0));
    fs::set_permissions(&m.store, fs::Permissions::from_mode(0o775)).unwrap();
    m.mount(&[]);
    assert_eq!(
        fs::metadata(&m.store).unwrap().permissions().mode() & 0o7777,
        0o700
    );
}
