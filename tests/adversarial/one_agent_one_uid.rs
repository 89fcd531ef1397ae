//! An agent runs a second agent under its own uid, to ptrace it and read what it may read.

use crate::common::Mounted;
use crate::support::{run_as_user, text};

fn run_as(m: &Mounted, agent: &str, user: &str) -> std::process::Output {
    run_as_user(m, agent, user, &["true"])
}

#[test]
fn run_refuses_another_agents_uid_and_root() {
    let m = Mounted::new();
    // fs-engine is uid 61006 in the default policy.
    let out = run_as(&m, "kernel-engine", "61006");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("fs-engine"), "{}", text(&out));
    let out = run_as(&m, "kernel-engine", "0");
    assert!(!out.status.success(), "{}", text(&out));
    let out = run_as(&m, "kernel-engine", "root");
    assert!(!out.status.success(), "{}", text(&out));
    // Another agent's group, with a fresh uid.
    let out = run_as(&m, "kernel-engine", "62998:61006");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("fs-engine"), "{}", text(&out));
    // Its own uid, and a fresh one nobody uses, are fine.
    let out = run_as(&m, "kernel-engine", "61001");
    assert!(out.status.success(), "{}", text(&out));
    let out = run_as(&m, "kernel-engine", "62999");
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn run_refuses_a_uid_another_agent_is_running_as() {
    let m = Mounted::new();
    let store = m.store.to_str().unwrap().to_string();
    let mnt = m.mnt.to_str().unwrap().to_string();
    let mut first = std::process::Command::new(crate::common::clawfs_bin())
        .args([
            "run",
            "--store",
            &store,
            "--mount",
            &mnt,
            "--agent",
            "fs-engine",
            "--user",
            "62444",
            "--",
            "sleep",
            "20",
        ])
        .spawn()
        .unwrap();
    // Once the first agent runs as 62444 (however slowly it started).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !running_as(62444) {
        assert!(
            std::time::Instant::now() < deadline,
            "the first run did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = run_as(&m, "kernel-engine", "62444");
    let _ = first.kill();
    let _ = first.wait();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("fs-engine"), "{}", text(&out));
}

/// Whether a process runs as `uid` (its real uid).
fn running_as(uid: u32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next())
                .is_some_and(|u| u == uid.to_string())
        })
    })
}
