//! `clawfs estop`: a running agent is killed, and while the stop is in force no agent writes or
//! calls a tool (reads go on, admins keep working); the stop survives a remount and `--clear`
//! lifts it.

use std::ffi::OsStr;
use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{clawfs, clawfs_bin, Mounted};
use crate::support::{audit_until, denials, text};

const AGENT: &str = "fs-engine";

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
    let mut pids = Vec::new();
    for run in fs::read_dir(agent_dir).into_iter().flatten().flatten() {
        let name = run.file_name().to_string_lossy().into_owned();
        let ours = name
            .strip_prefix("run-")
            .and_then(|pid| fs::read(format!("/proc/{pid}/cmdline")).ok())
            .is_some_and(|c| String::from_utf8_lossy(&c).contains(&*store.to_string_lossy()));
        if ours {
            let procs = fs::read_to_string(run.path().join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().map(str::to_string));
        }
    }
    pids
}

#[test]
fn estop_kills_agents_refuses_their_writes_and_tools_and_survives_a_remount() {
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent_pids(AGENT, &m.store).is_empty() {
        assert!(Instant::now() < deadline, "the agent never started");
        std::thread::sleep(Duration::from_millis(50));
    }

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
        let out = m.run_agent(
            AGENT,
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
