//! What an agent does outside the mount reaches the audit trail through the daemon's eBPF
//! monitor: the programs it executes, the files it opens elsewhere, the connections it makes.
//! Processes outside agent groups are not recorded.

use std::fs;
use std::net::TcpListener;
use std::process::Command;

use serde_json::Value;

use crate::common::Mounted;
use crate::support::{audit_until, denials, records, snapshot, text};

const AGENT: &str = "fs-engine";

/// Whether this host can run the eBPF monitor; says the test is skipped when not.
fn monitor_or_skip() -> bool {
    let a = clawfs_ebpf::availability();
    if !a.monitor.is_available() {
        crate::common::skip("this test", &format!("eBPF monitor {}", a.monitor));
    }
    a.monitor.is_available()
}

fn of_agent(found: Vec<&Value>) -> Vec<&Value> {
    found.into_iter().filter(|r| r["agent"] == AGENT).collect()
}

#[test]
fn agent_exec_open_and_connect_are_audited_and_outsiders_are_not() {
    if !monitor_or_skip() {
        return;
    }
    let m = Mounted::with_args(&["--trace-syscalls"]);
    let agent_port = TcpListener::bind("127.0.0.1:0").unwrap();
    let outside_port = TcpListener::bind("127.0.0.1:0").unwrap();
    let (pa, po) = (
        agent_port.local_addr().unwrap().port(),
        outside_port.local_addr().unwrap().port(),
    );
    let connect = |port: u16| {
        format!("import socket; socket.create_connection((\"127.0.0.1\", {port})).close()")
    };
    // Outside any agent group: the test process's own children.
    let marker = format!("/tmp/clawfs-agent-events-outside-{}", std::process::id());
    let outside = Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!("{}; open({marker:?}, 'w').close()", connect(po)),
        ])
        .output()
        .unwrap();
    assert!(outside.status.success(), "{}", text(&outside));
    let _ = std::fs::remove_file(&marker);

    let script = format!(
        "sleep 0.3; cat /etc/shadow 2>/dev/null; cat /etc/hostname && /usr/bin/python3 -c '{}' && sleep 0.3",
        connect(pa)
    );
    // The pauses keep the run alive a moment around its commands: events are placed (which
    // store's run?) from the live `clawfs run` process.
    let out = m.run_agent(AGENT, &script);
    assert!(out.status.success(), "{}", text(&out));

    let want_connect = format!("tcp://127.0.0.1:{pa}");
    let all = audit_until(&m, |all| {
        !of_agent(records(all, "exec", "/cat")).is_empty()
            && !of_agent(records(all, "connect", &want_connect)).is_empty()
            && !of_agent(records(all, "open", "/etc/hostname")).is_empty()
            && !of_agent(records(all, "open", "/etc/shadow")).is_empty()
    });
    let exec = of_agent(records(&all, "exec", "/cat"));
    assert!(!exec.is_empty(), "no exec record of cat: {all:#?}");
    assert!(
        exec.iter()
            .all(|r| r["path"].as_str().unwrap().starts_with('/')),
        "{exec:?}"
    );
    assert!(
        !of_agent(records(&all, "connect", &want_connect)).is_empty(),
        "no connect record to {want_connect}: {all:#?}"
    );
    assert!(
        of_agent(records(&all, "open", "/etc/hostname"))
            .iter()
            .any(|r| r["result"] == "ok"),
        "no open record of /etc/hostname: {all:#?}"
    );
    // A refused open is on record as what it was: failed, with its errno.
    let shadow = of_agent(records(&all, "open", "/etc/shadow"));
    assert!(
        !shadow.is_empty()
            && shadow
                .iter()
                .all(|r| r["result"] == "error" && r["errno"] == 13),
        "{shadow:#?}"
    );
    // Opens through the mount are the daemon's own records, not the monitor's.
    let mnt = m.mnt.to_str().unwrap();
    assert!(
        all.iter().all(|r| !(r["operation"] == "open"
            && r["path"].as_str().is_some_and(|p| p.starts_with(mnt)))),
        "an open through the mount was recorded by the monitor"
    );
    // Nothing of the process outside the agent groups.
    let outsider = format!("tcp://127.0.0.1:{po}");
    let leaked: Vec<&Value> = all
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p == outsider || p == marker)
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "recorded outside the agent groups: {leaked:?}"
    );
}

/// The raw tracepoint links the process `pid` holds, from its `fdinfo`.
fn tracepoints_held(pid: i32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf_link")
                && std::fs::read_to_string(format!(
                    "/proc/{pid}/fdinfo/{}",
                    e.file_name().display()
                ))
                .is_ok_and(|info| info.lines().any(|l| l == "link_type:\traw_tracepoint"))
        })
        .count()
}

/// The monitor's hooks run for what every process of the host does, so an idle daemon holds none:
/// they are attached when a run of its store announces itself, before its program starts (its
/// very first exec is on record), and detached after the last such run.
#[test]
fn the_monitor_is_attached_only_while_agents_run() {
    if !monitor_or_skip() {
        return;
    }
    for (args, hooks) in [(&[][..], 1), (&["--trace-syscalls"][..], 3)] {
        let m = Mounted::with_args(args);
        attached_only_while_a_run_lives(&m, hooks);
    }
}

/// `hooks`: the tracepoints a run of `m`'s store attaches (exec only, or every system call's
/// entry and exit too).
fn attached_only_while_a_run_lives(m: &Mounted, hooks: usize) {
    let pid = m.daemon_pid();
    assert_eq!(tracepoints_held(pid), 0, "an idle daemon attaches nothing");
    // (Other tests' runs are of other stores: no concern of this daemon.)
    let mut run = m
        .run_command(AGENT)
        .args(["--no-sandbox", "--", "sh", "-c", "sleep 1.5"])
        .current_dir("/")
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while tracepoints_held(pid) != hooks && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(tracepoints_held(pid), hooks, "attached while the run lives");
    assert!(run.wait().unwrap().success());
    let all = audit_until(m, |all| !of_agent(records(all, "exec", "/sh")).is_empty());
    assert!(
        !of_agent(records(&all, "exec", "/sh")).is_empty(),
        "the run's first exec (sh) is on record: {all:#?}"
    );
    // Detached again once no run of the store is alive and the announcement has aged (10 s), at
    // the next 2 s refresh.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while tracepoints_held(pid) != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert_eq!(tracepoints_held(pid), 0, "detached after the run");
}

/// A run is announced to the daemon that serves its store, found from the store (no
/// `--mount`); a `--mount` that does not serve the store is refused before anything runs, so it
/// cannot leave the store's monitor detached for the run's first moments.
#[test]
fn a_run_is_announced_to_its_stores_daemon_and_a_wrong_mount_is_refused() {
    if !monitor_or_skip() {
        return;
    }
    let m = Mounted::new();
    let wrong = Command::new(crate::common::clawfs_bin())
        .env_remove("LD_LIBRARY_PATH")
        .arg("run")
        .arg("--store")
        .arg(&m.store)
        .args(["--mount", "/nonexistent-clawfs-mount"])
        .args(["--agent", AGENT, "--no-sandbox", "--", "true"])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(3), "{}", text(&wrong));
    let out = Command::new(crate::common::clawfs_bin())
        .env_remove("LD_LIBRARY_PATH")
        .arg("run")
        .arg("--store")
        .arg(&m.store)
        .args([
            "--agent",
            AGENT,
            "--no-sandbox",
            "--",
            "sh",
            "-c",
            "sleep 0.5",
        ])
        .current_dir("/")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let all = audit_until(&m, |all| !of_agent(records(all, "exec", "/sh")).is_empty());
    assert!(
        !of_agent(records(&all, "exec", "/sh")).is_empty(),
        "the run's first exec (sh) is on record: {all:#?}"
    );
}

/// Agent groups are host-wide: an agent of another store announcing itself at this mount does not
/// attach this daemon's tracepoints (it would keep every system call of the host slowed while no
/// run of this store is alive).
#[test]
fn another_stores_agent_cannot_keep_the_monitor_attached() {
    if !monitor_or_skip() {
        return;
    }
    let ours = Mounted::new();
    let other = Mounted::new();
    let pid = ours.daemon_pid();
    let self_file = ours.mnt.join("agents/self");
    let script = format!(
        "for i in 1 2 3 4 5 6; do cat {} >/dev/null || exit 1; sleep 0.5; done",
        self_file.display()
    );
    let mut run = Command::new(crate::common::clawfs_bin())
        .env_remove("LD_LIBRARY_PATH")
        .arg("run")
        .arg("--store")
        .arg(&other.store)
        .arg("--mount")
        .arg(&other.mnt)
        .args(["--agent", AGENT, "--no-sandbox", "--", "sh", "-c", &script])
        .current_dir("/")
        .spawn()
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(300));
        held.push(tracepoints_held(pid));
    }
    assert!(
        run.wait().unwrap().success(),
        "the other store's agent read agents/self"
    );
    assert!(
        held.iter().all(|&n| n == 0),
        "attached for another store's agent: {held:?}"
    );
}

/// A run whose agent cannot reach the mount to announce itself would go unrecorded until the
/// daemon's next look: it does not start, and says why.
#[test]
fn a_run_that_cannot_announce_itself_does_not_start() {
    use std::os::unix::fs::PermissionsExt;
    let m = Mounted::new();
    let parent = m.mnt.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Somewhere the agent could write, had it started.
    let marker =
        std::path::PathBuf::from(format!("/tmp/clawfs-unannounced-{}", std::process::id()));
    let out = m.run_agent(AGENT, &format!("echo started > {}", marker.display()));
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("announces itself") && text(&out).contains("agents/self"),
        "{}",
        text(&out)
    );
    let ran = marker.exists();
    let _ = std::fs::remove_file(&marker);
    assert!(!ran, "nothing of the agent ran");
}

#[test]
fn kernel_refusals_on_the_mount_are_denials_of_the_agent() {
    if !monitor_or_skip() {
        return;
    }
    let m = Mounted::with_args(&["--trace-syscalls"]);
    // A folder of the workspace the agent may write by its grant, but not by the folder's mode:
    // the kernel refuses what the policy allows. (Another agent's folder is refused by the
    // kernel too, from its ACL: that refusal carries the policy's rule, see `kernel_checks`.)
    fs::create_dir(m.ws().join("locked")).unwrap();
    let before = snapshot(&m.backing("workspaces/default/locked"));
    let mnt = m.mnt.display();
    let from_root = m.mnt.strip_prefix("/").unwrap().display().to_string();
    let dirfd = format!(
        "import os, time\ntry:\n os.open('{from_root}/workspaces/default/locked/dirfd', os.O_CREAT | os.O_WRONLY, dir_fd=os.open('/', os.O_RDONLY))\nexcept PermissionError:\n print('Permission denied')\ntime.sleep(0.3)"
    );
    // No subshells: the refusing process stays alive a moment (the daemon reads its working
    // directory in /proc), as an agent would.
    let out = m.run_agent(
        AGENT,
        &format!(
            "cd {mnt} && {{ echo x > workspaces/default/locked/rel; }} 2>&1
             {{ echo x > {mnt}/workspaces/default/locked/abs; }} 2>&1
             cd {mnt}/workspaces/default && {{ echo x > ./locked/../locked/dots; }} 2>&1
             cd / && {{ echo x > {from_root}/workspaces/default/locked/fromroot; }} 2>&1
             ln -s {mnt}/workspaces/default/locked {mnt}/agents/{AGENT}/lnk
             {{ echo x > {mnt}/agents/{AGENT}/lnk/vialink; }} 2>&1
             /usr/bin/python3 -c \"{dirfd}\"
             exec 3<{mnt}/workspaces && {{ echo x > /proc/self/fd/3/default/locked/procfd; }} 2>&1
             mv {mnt}/agents/{AGENT}/identity.json {mnt}/agents/{AGENT}/moved 2>&1
             sleep 0.3; true"
        ),
    );
    let shown = text(&out);
    assert_eq!(shown.matches("Permission denied").count(), 7, "{shown}");
    assert!(shown.contains("Operation not permitted"), "{shown}");
    assert_eq!(snapshot(&m.backing("workspaces/default/locked")), before);

    let paths = [
        "rel", "abs", "dots", "fromroot", "vialink", "dirfd", "procfd",
    ]
    .map(|n| format!("/workspaces/default/locked/{n}"));
    let kernel =
        |r: &Value, path: &str| r["rule"] == "KERNEL" && r["path"] == path && r["agent"] == AGENT;
    let all = audit_until(&m, |all| {
        paths.iter().all(|p| all.iter().any(|r| kernel(r, p)))
    });
    for p in &paths {
        let found: Vec<_> = all.iter().filter(|r| kernel(r, p)).collect();
        let near: Vec<_> = all
            .iter()
            .filter(|r| r["path"].as_str().is_some_and(|x| x.contains("locked")))
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{p}: {found:#?} (records near it: {near:#?})"
        );
        let r = found[0];
        assert_eq!(
            (
                r["result"].as_str(),
                r["errno"].as_i64(),
                r["operation"].as_str()
            ),
            (Some("denied"), Some(13), Some("openat")),
            "{r}"
        );
    }
    let file = denials(&m, AGENT);
    for p in &paths {
        assert!(
            file.iter()
                .any(|d| d["rule"] == "KERNEL" && d["path"] == p.as_str()),
            "{p} not in the denials file: {file:#?}"
        );
    }
    // The daemon refused the rename itself (identity.json is the agent's to keep): one record.
    let identity = format!("/agents/{AGENT}/identity.json");
    let rename: Vec<_> = all
        .iter()
        .filter(|r| r["path"] == identity.as_str() && r["result"] == "denied")
        .collect();
    assert_eq!(rename.len(), 1, "{rename:#?}");
    assert_ne!(rename[0]["rule"], "KERNEL", "{rename:#?}");
}

/// What a run was refused is on record when `clawfs run` returns, even when its processes
/// exited at once: the daemon reads the kernel's reports a little later than they happen, and
/// the run waits for it before it ends (and while the daemon can still tell whose run it was).
#[test]
fn a_runs_refusals_are_on_record_when_it_returns() {
    if !monitor_or_skip() {
        return;
    }
    let m = Mounted::with_args(&["--trace-syscalls"]);
    fs::create_dir(m.ws().join("locked")).unwrap();
    let mnt = m.mnt.display();
    for round in 0..4 {
        // Refused by the kernel alone: from another agent's ACL (the policy's rule), and from a
        // folder's mode (KERNEL). The shell exits as soon as it is refused.
        let out = m.run_agent_as(
            AGENT,
            &[],
            &format!(
                "echo x > {mnt}/agents/kernel-engine/planted-{round}; \
                 echo x > {mnt}/workspaces/default/locked/f-{round}; true"
            ),
        );
        assert!(out.status.success(), "{}", text(&out));
        // Read once, at once: no waiting here.
        let file = denials(&m, AGENT);
        let all = audit_until(&m, |_| true);
        for name in [
            format!("/agents/kernel-engine/planted-{round}"),
            format!("/workspaces/default/locked/f-{round}"),
        ] {
            assert!(
                file.iter().any(|d| d["path"] == name.as_str()),
                "round {round}: {name} not in the denials file when the run returned: {file:#?}"
            );
            assert!(
                all.iter().any(|r| r["path"] == name.as_str()
                    && r["agent"] == AGENT
                    && r["result"] == "denied"),
                "round {round}: {name} not on the audit trail when the run returned"
            );
        }
    }
}

/// A flood of refusals hides no other: past the limit of its kind, what is dropped is counted
/// and named in an `audit:events-dropped` record; a refusal of another kind, or of another path
/// in the flood, is still on record by name.
#[test]
fn a_flood_of_refusals_hides_no_other() {
    if !monitor_or_skip() {
        return;
    }
    let m = Mounted::with_args(&["--trace-syscalls"]);
    let cache = m.mnt.join("agents/build-engine/cache");
    let flood = format!(
        "import os, time\nfor i in range(3000):\n    try: os.open('{c}/noise', os.O_CREAT | os.O_WRONLY)\n    except OSError: pass\nfor p in ('{c}/hidden', '{c}/../state.json'):\n    try: os.open(p, os.O_CREAT | os.O_WRONLY)\n    except OSError: pass\ntime.sleep(0.5)",
        c = cache.display()
    );
    let out = m.run_agent(AGENT, &format!("/usr/bin/python3 -c \"{flood}\""));
    assert!(out.status.success(), "{}", text(&out));
    let named = |all: &[Value], what: &str| {
        all.iter().any(|r| {
            r["agent"] == AGENT
                && (r["path"].as_str().is_some_and(|p| p.ends_with(what))
                    || (r["operation"] == "audit:events-dropped"
                        && r["reason"].as_str().is_some_and(|x| x.contains(what))))
        })
    };
    let all = audit_until(&m, |all| {
        named(all, "cache/hidden") && named(all, "build-engine/state.json")
    });
    assert!(named(&all, "cache/hidden"), "the hidden refusal is nowhere");
    assert!(
        named(&all, "build-engine/state.json"),
        "the other path is nowhere"
    );
    // Refused by the kernel from the folder's ACL: recorded as the create the policy refuses.
    let noise = records(&all, "create", "cache/noise").len();
    assert!(noise > 0 && noise < 3000, "{noise} noise records");
    assert!(
        all.iter().any(|r| r["operation"] == "audit:events-dropped"),
        "the dropped ones are not counted"
    );
}
