//! `clawfs estop`: a running agent is killed, and while the stop is in force no agent writes or
//! calls a tool (reads go on, admins keep working); the stop survives a remount and `--clear`
//! lifts it.

use std::ffi::OsStr;
use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{clawfs, clawfs_bin, Mounted};
use crate::support::{audit_until, denials, text};
use serde_json::Value;

const AGENT: &str = "fs-engine";

/// One estop test at a time: an estop also stops orphans (agents whose runner is gone) of any
/// store, so one test's stop would take the orphans another test is about to stop.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn estop(m: &Mounted, args: &[&str]) -> String {
    let mut all = vec![
        OsStr::new("estop"),
        OsStr::new("--store"),
        m.store.as_os_str(),
    ];
    all.extend(args.iter().map(OsStr::new));
    let out = clawfs(all);
    assert!(
        out.status.success(),
        "clawfs estop {args:?}: {}",
        text(&out)
    );
    text(&out)
}

/// `sh -c SCRIPT` as fs-engine's uid (61006 in the default policy) with the agents' group, not
/// started by `clawfs run`: the daemon knows it as the agent by its uid.
fn as_agent_uid(script: &str) -> std::process::Output {
    let group = Command::new("getent")
        .args(["group", "clawos-agents"])
        .output()
        .unwrap();
    let gid = String::from_utf8_lossy(&group.stdout)
        .split(':')
        .nth(2)
        .unwrap_or("0")
        .to_string();
    Command::new("setpriv")
        .args([
            "--reuid=61006",
            "--regid=61006",
            &format!("--groups={gid}"),
            "sh",
            "-c",
            script,
        ])
        .current_dir("/")
        .output()
        .unwrap()
}

/// The pids left in the agent's run groups of this test's store (cgroup v2, found in mountinfo;
/// other tests run the same agent at the same time, on their own stores).
fn agent_pids(agent: &str, store: &std::path::Path) -> Vec<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = info
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split(' ').nth(4))
        .expect("a cgroup2 mount")
        .to_string();
    let agent_dir = std::path::Path::new(&mount).join(format!("clawfs/agent-{agent}"));
    let store = fs::canonicalize(store).unwrap_or_else(|_| store.to_path_buf());
    let mut pids = Vec::new();
    for run in fs::read_dir(agent_dir).into_iter().flatten().flatten() {
        let name = run.file_name().to_string_lossy().into_owned();
        let ours = name
            .strip_prefix("run-")
            .and_then(|pid| pid.parse().ok())
            .and_then(clawfs_sandbox::runs::store_of_run)
            .is_some_and(|s| s == store);
        if ours {
            let procs = fs::read_to_string(run.path().join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().map(str::to_string));
        }
    }
    pids
}

#[test]
fn estop_kills_agents_refuses_their_writes_and_tools_and_survives_a_remount() {
    let _serial = one_at_a_time();
    let m = Mounted::new();
    let mnt = m.mnt.display().to_string();
    fs::write(m.path(&format!("agents/{AGENT}/before.txt")), "hello\n").unwrap();

    // A long-running agent.
    let mut child = Command::new(clawfs_bin())
        .args(["run", "--store", m.store.to_str().unwrap(), "--mount", &mnt])
        .args([
            "--agent",
            AGENT,
            "--",
            "sh",
            "-c",
            "while :; do sleep 0.1 & wait; done",
        ])
        .current_dir("/")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    agents_started(&m, 1);

    let out = estop(&m, &[]);
    assert!(out.contains(&format!("killed agent {AGENT}")), "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the run did not exit: {out}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        agent_pids(AGENT, &m.store).is_empty(),
        "{:?}",
        agent_pids(AGENT, &m.store)
    );
    assert!(estop(&m, &["--status"]).contains("IN FORCE"));

    let check_stopped = |m: &Mounted| {
        // No agent starts while the stop is in force.
        let out = m.run_agent(AGENT, "true");
        assert!(!out.status.success(), "{}", text(&out));
        assert!(text(&out).contains("emergency stop"), "{}", text(&out));
        // The daemon refuses, on its own, what an agent still running would do: here a process
        // of the agent's uid (the policy's rule 2), which no `clawfs run` started.
        let out = as_agent_uid(
            &format!(
                "cat {mnt}/agents/{AGENT}/before.txt
                 echo x > {mnt}/agents/{AGENT}/new.txt 2>&1 || true
                 mkdir {mnt}/agents/{AGENT}/d 2>&1 || true
                 rm {mnt}/agents/{AGENT}/before.txt 2>&1 || true
                 exec 3<>{mnt}/tools/call/read_file; printf '%s' '{{\"path\":\"x\"}}' >&3; cat <&3; echo; exec 3>&-"
            ),
        );
        let t = text(&out);
        assert!(t.contains("hello"), "reads keep working: {t}");
        assert!(t.matches("Operation not permitted").count() >= 3, "{t}");
        assert!(t.contains("\"error\":\"denied\""), "{t}");
        assert!(t.contains("emergency stop"), "{t}");
        assert!(!m.backing(&format!("agents/{AGENT}/new.txt")).exists());
        assert!(m.backing(&format!("agents/{AGENT}/before.txt")).exists());
        // The admin keeps working.
        fs::write(m.path("workspaces/default/admin.txt"), "admin\n").unwrap();
    };
    check_stopped(&m);

    let all = audit_until(&m, |r| {
        r.iter().any(|r| r["operation"] == "estop:on")
            && r.iter()
                .any(|r| r["rule"] == "ESTOP" && r["operation"] == "tool:read_file")
    });
    assert!(all.iter().any(|r| r["operation"] == "estop:on"));
    let refused: Vec<_> = all.iter().filter(|r| r["rule"] == "ESTOP").collect();
    assert!(refused
        .iter()
        .any(|r| r["agent"] == AGENT && r["errno"] == libc::EPERM));
    assert!(refused.iter().any(|r| r["operation"] == "tool:read_file"));
    let d = denials(&m, AGENT);
    assert!(
        d.iter()
            .any(|l| l["rule"] == "ESTOP" && l["operation"] == "tool:read_file"),
        "{d:?}"
    );
    assert!(
        d.iter().filter(|l| l["rule"] == "ESTOP").count() >= 3,
        "{d:?}"
    );

    // The stop survives a restart of the daemon.
    assert!(m.umount().status.success());
    for holder in mount_holders(&m.mnt) {
        eprintln!("still holding {}: {holder}", m.mnt.display());
    }
    m.mount(&[]);
    check_stopped(&m);

    let out = estop(&m, &["--clear"]);
    assert!(out.contains("cleared"), "{out}");
    assert!(estop(&m, &["--status"]).contains("no emergency stop"));
    let out = m.run_agent(AGENT, &format!("echo x > {mnt}/agents/{AGENT}/new.txt"));
    assert!(out.status.success(), "{}", text(&out));
    assert!(m.backing(&format!("agents/{AGENT}/new.txt")).exists());
    let all = audit_until(&m, |r| r.iter().any(|r| r["operation"] == "estop:off"));
    assert!(all.iter().any(|r| r["operation"] == "estop:off"));
}

/// An agent whose `clawfs run` was killed keeps running in its run group, out of anyone's
/// control: estop stops it too, and no agent starts while the stop is in force.
#[test]
fn estop_kills_the_agents_of_a_killed_runner() {
    let _serial = one_at_a_time();
    let m = Mounted::new();
    let mut runner = m
        .run_command(AGENT)
        .args(["--", "sh", "-c", "sleep 600 & sleep 600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids = agents_started(&m, 2);
    runner.kill().unwrap();
    runner.wait().unwrap();
    assert!(pids.iter().all(alive), "the agents outlive their runner");

    let out = estop(&m, &[]);
    assert!(out.contains(&format!("killed agent {AGENT}")), "{out}");
    all_exit(&pids);
    estop(&m, &["--clear"]);
}

/// An agent whose own arguments name another store (`clawfs run … CMD … --store OTHER`, no
/// `--`), or that takes its dead runner's place: estop of the run's store still stops it.
#[test]
fn estop_reads_a_run_as_the_run_read_itself() {
    let _serial = one_at_a_time();
    let m = Mounted::new();
    let other = m.dir.path().join("other-store");
    let mut runner = m
        .run_command(AGENT)
        .args(["sh", "-c", "sleep 600", "--store"])
        .arg(&other)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids = agents_started(&m, 1);
    let out = estop(&m, &[]);
    assert!(out.contains(&format!("killed agent {AGENT}")), "{out}");
    all_exit(&pids);
    let _ = runner.wait();
    estop(&m, &["--clear"]);
}

/// The agent's processes in this store's run groups, once there are at least `n` (10 s at most).
fn agents_started(m: &Mounted, n: usize) -> Vec<String> {
    agents_started_within(m, n, Duration::from_secs(10))
}

/// [`agents_started`], waiting `within` at most.
fn agents_started_within(m: &Mounted, n: usize, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let pids = agent_pids(AGENT, &m.store);
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < deadline, "the run did not start: {pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alive(pid: &String) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits for every one of `pids` to be gone (5 s at most).
fn all_exit(pids: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(alive) {
        assert!(Instant::now() < deadline, "still alive: {pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes whose mount namespace still has `mnt` mounted, with their command lines.
fn mount_holders(mnt: &std::path::Path) -> Vec<String> {
    let wanted = format!(" {} ", mnt.display());
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().into_owned();
            pid.parse::<u32>().ok()?;
            let info = fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
            info.contains(&wanted).then(|| {
                let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                format!("{pid} {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
            })
        })
        .collect()
}

/// Runs started again and again while the stop is recorded: each either never starts its
/// command or is killed with the rest. A run that had looked for the stop just before it was
/// recorded has its child in its group by then (the child looks again from there), so the stop
/// finds it.
#[test]
fn a_run_starting_as_the_stop_lands_does_not_survive_it() {
    let _serial = one_at_a_time();
    let m = Mounted::new();
    let stop = std::sync::atomic::AtomicBool::new(false);
    // Bounded, however slowly runs start on a loaded machine.
    let until = Instant::now() + Duration::from_secs(60);
    let (stopped, runs) = std::thread::scope(|scope| {
        let spawners: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    // A steady stream of starting runs, at most 8 of this thread's alive at once
                    // (the agent's pids limit is shared with every other test).
                    let mut runs: Vec<std::process::Child> = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until
                    {
                        runs.retain_mut(|c| c.try_wait().is_ok_and(|done| done.is_none()));
                        if runs.len() < 8 {
                            if let Ok(c) = m
                                .run_command(AGENT)
                                .args(["--", "sleep", "600"])
                                .stdout(Stdio::null())
                                .stderr(Stdio::null())
                                .spawn()
                            {
                                runs.push(c);
                            }
                        }
                        std::thread::sleep(Duration::from_millis(30));
                    }
                    runs
                })
            })
            .collect();
        agents_started_within(&m, 2, Duration::from_secs(40));
        std::thread::sleep(Duration::from_millis(300));
        let out = clawfs([
            OsStr::new("estop"),
            OsStr::new("--store"),
            m.store.as_os_str(),
        ]);
        // Runs keep being started after the stop; none may start its command.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let runs: Vec<std::process::Child> = spawners
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .collect();
        (out, runs)
    });
    // What the stop killed is gone; anything left started after it, or survived it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !agent_pids(AGENT, &m.store).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = agent_pids(AGENT, &m.store);
    // Ended here whatever happened (before the asserts, so that a failure leaks nothing).
    for mut c in runs {
        let _ = c.kill();
        let _ = c.wait();
    }
    estop(&m, &["--clear"]);
    assert!(stopped.status.success(), "{}", text(&stopped));
    assert_eq!(left, Vec::<String>::new());
}

/// An agent killed by the stop with its identity file open for writing: the close that its
/// death makes commits nothing.
#[test]
fn a_stopped_agents_open_identity_write_is_not_committed() {
    let _serial = one_at_a_time();
    let m = Mounted::new();
    let file = m.path(&format!("agents/{AGENT}/identity.json"));
    // The agent's first run gives it its identity file.
    assert!(m.run_agent(AGENT, "true").status.success());
    let before = fs::read(m.backing(&format!("agents/{AGENT}/identity.json"))).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&before).unwrap();
    doc["name"] = serde_json::Value::String("written while stopped".into());
    let mut runner = m
        .run_command(AGENT)
        // One descriptor, written and held: no close (no flush) until the process dies.
        .args(["--", "/usr/bin/python3", "-c"])
        .arg("import os, sys, time\nf = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)\nos.write(f, sys.argv[2].encode())\ntime.sleep(600)")
        .arg(&file)
        .arg(doc.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    agents_started(&m, 1);
    // The write is in.
    std::thread::sleep(Duration::from_millis(500));
    estop(&m, &[]);
    let _ = runner.wait();
    assert_eq!(
        fs::read(m.backing(&format!("agents/{AGENT}/identity.json"))).unwrap(),
        before
    );
    let d = denials(&m, AGENT);
    assert!(
        d.iter().any(|l| l["rule"] == "ESTOP"
            && l["path"] == format!("/agents/{AGENT}/identity.json").as_str()),
        "{d:?}"
    );
    estop(&m, &["--clear"]);
}

/// A flag the daemon cannot read stops agents (failing closed), and the trail says why: the
/// stop and its end are the daemon's, not an admin's.
#[test]
fn an_unreadable_flag_stops_agents_and_the_trail_says_it_was_unreadable() {
    let _serial = one_at_a_time();
    let m = Mounted::new();
    // A folder where the flag's file should be: every read of it fails (EISDIR).
    let flag = m.store.join(".clawfs/estop");
    fs::create_dir(&flag).unwrap();
    let pid = m.daemon_pid();
    // SAFETY: a signal to the daemon we started; SIGHUP makes it read the flag at once.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let on = |r: &Value| r["operation"] == "estop:on";
    let records = audit_until(&m, |rs| rs.iter().any(on));
    let rec = records.iter().find(|r| on(r)).expect("an estop:on record");
    let reason = rec["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("unreadable"), "{rec}");
    assert!(!reason.contains("admin"), "{rec}");
    // Failing closed: the agent's write is refused and nothing is written.
    let target = m.path(&format!("agents/{AGENT}/while-unreadable.txt"));
    let out = m.run_agent(AGENT, &format!("echo x > {}", target.display()));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(!target.exists());

    fs::remove_dir(&flag).unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let off = |r: &Value| r["operation"] == "estop:off";
    let records = audit_until(&m, |rs| rs.iter().any(off));
    let rec = records
        .iter()
        .find(|r| off(r))
        .expect("an estop:off record");
    let reason = rec["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("readable again"), "{rec}");
    assert!(!reason.contains("admin"), "{rec}");
    // And the agent works again.
    let out = m.run_agent(AGENT, &format!("echo x > {}", target.display()));
    assert!(out.status.success(), "{}", text(&out));
}
