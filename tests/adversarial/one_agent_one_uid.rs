//! An agent runs a second agent under its own uid, to ptrace it and read what it may read.

use crate::common::Mounted;
use crate::support::{audit_until, run_as_user, text};

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

/// A uid that owns files counted for one agent is not handed to another: the files, and their
/// weight on the quota, would change agent. `clawfs run` refuses it from the saved counts,
/// and the daemon refuses the announcement from its live ones (audited, rule ONE-UID) when the
/// saved counts say nothing. Once the files are gone and recounted, the uid is free.
#[test]
fn run_refuses_a_uid_whose_files_are_another_agents() {
    let m = Mounted::new();
    let ws = m.ws().display().to_string();
    let out = run_as_user(
        &m,
        "kernel-engine",
        "62555",
        &["sh", "-c", &format!("echo mine > {ws}/k-file")],
    );
    assert!(out.status.success(), "{}", text(&out));
    // At once, whether or not the daemon has saved its counts yet.
    let out = run_as(&m, "fs-engine", "62555");
    assert!(!out.status.success(), "{}", text(&out));
    // Saved (every 2 s): the run names the agent.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let out = run_as(&m, "fs-engine", "62555");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("kernel-engine"), "{}", text(&out));
    // With no saved counts to read, the daemon refuses the announcement itself.
    let usage = m.backing(".clawfs/quota-usage.json");
    std::fs::write(&usage, "{}").unwrap();
    let out = run_as(&m, "fs-engine", "62555");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("ONE-UID"), "{}", text(&out));
    let all = audit_until(&m, |a| a.iter().any(|r| r["rule"] == "ONE-UID"));
    let rec = all.iter().find(|r| r["rule"] == "ONE-UID").unwrap();
    assert_eq!(rec["agent"], "fs-engine", "{rec}");
    assert_eq!(rec["errno"], libc::EPERM, "{rec}");
    assert!(
        rec["reason"].as_str().unwrap().contains("kernel-engine"),
        "{rec}"
    );
    assert_eq!(
        std::fs::read_to_string(m.ws().join("k-file")).unwrap(),
        "mine\n"
    );
    std::fs::remove_file(m.ws().join("k-file")).unwrap();
    let out = crate::common::cli(&m, &["quota", "rescan"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run_as(&m, "fs-engine", "62555");
    assert!(out.status.success(), "{}", text(&out));
}
