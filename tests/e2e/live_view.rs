//! Watching agents live, against a mount with sandboxed agents working: `clawfs audit tail
//! --follow` streaming the trail with filters, and `clawfs top` driven in a real terminal
//! (tmux: keys sent, the screen read back) and with `--once --json`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{clawfs_bin, Mounted};

/// A child killed (and reaped) when dropped, also when the test fails.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `clawfs audit tail --follow --json ARGS…` on the mount's store, its lines as they come.
fn follow(m: &Mounted, args: &[&str]) -> (Killed, Receiver<String>) {
    let mut child = Command::new(clawfs_bin())
        .args(["audit", "tail", "--follow", "--json", "--store"])
        .arg(&m.store)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (Killed(child), rx)
}

/// Receives into `got` until `done` holds of what came, for at most a minute.
fn receive(rx: &Receiver<String>, got: &mut Vec<Value>, done: impl Fn(&[Value]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(got) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "gave up waiting; received: {got:#?}");
        if let Ok(line) = rx.recv_timeout(left) {
            got.push(serde_json::from_str(&line).expect("a JSON record per line"));
        }
    }
}

/// A sandboxed agent writes the workspace's metadata.json (which only the daemon writes: a
/// refusal on the record) after making and reading a file named `tag`.
fn refused_work(m: &Mounted, agent: &str, tag: &str) -> Output {
    m.run_command(agent)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "cd {ws} && echo x > {tag} && cat {tag} >/dev/null && echo '{{}}' > metadata.json; true",
            ws = m.ws().display()
        ))
        .current_dir("/")
        .output()
        .unwrap()
}

fn is_refusal_of(r: &Value, agent: &str) -> bool {
    r["agent"] == agent
        && r["result"] == "denied"
        && r["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/metadata.json"))
}

#[test]
fn audit_tail_follow_streams_what_matches_as_it_is_written() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    assert!(refused_work(&m, "fs-engine", "before").status.success());
    // The last refusal of fs-engine first (so the follow is running), then only new ones.
    let (_a, only_refusals) = follow(&m, &["-n", "1", "--agent", "fs-engine", "--denied"]);
    let (_b, everything) = follow(&m, &["-n", "1"]);
    let (mut refusals, mut all) = (Vec::new(), Vec::new());
    receive(&only_refusals, &mut refusals, |g| !g.is_empty());
    receive(&everything, &mut all, |g| !g.is_empty());
    assert!(
        refusals[0]["agent"] == "fs-engine" && refusals[0]["result"] == "denied",
        "{refusals:#?}"
    );
    let first = refusals[0]["seq"].as_u64().unwrap();

    for agent in ["kernel-engine", "fs-engine"] {
        let out = refused_work(&m, agent, &format!("after-{agent}"));
        assert!(out.status.success(), "{out:?}");
    }
    receive(&only_refusals, &mut refusals, |g| {
        g.iter().skip(1).any(|r| is_refusal_of(r, "fs-engine"))
    });
    receive(&everything, &mut all, |g| {
        g.iter().any(|r| is_refusal_of(r, "kernel-engine"))
            && g.iter().any(|r| is_refusal_of(r, "fs-engine"))
    });
    // Only what matches, each once, newest last.
    assert!(
        refusals
            .iter()
            .all(|r| r["agent"] == "fs-engine" && r["result"] == "denied"),
        "{refusals:#?}"
    );
    assert!(refusals[1]["seq"].as_u64().unwrap() > first);
    let seqs: Vec<u64> = all.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] + 1 == w[1]),
        "records missed, doubled or out of order: {seqs:?}"
    );
    assert!(
        all.iter().any(|r| r["agent"] == "kernel-engine"
            && r["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/after-kernel-engine"))),
        "{all:#?}"
    );
}

/// `clawfs top --once --json` on the store: the agents as a script reads them.
fn top_json(m: &Mounted) -> Value {
    let out = Command::new(clawfs_bin())
        .args(["top", "--once", "--json", "--interval", "0.5", "--store"])
        .arg(&m.store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn agent<'a>(sample: &'a Value, name: &str) -> &'a Value {
    sample["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == name)
        .unwrap_or_else(|| panic!("{name} not shown: {sample:#}"))
}

/// A tmux server of its own (its socket in the test's folder), killed when dropped.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn new(m: &Mounted, command: &str) -> Tmux {
        let t = Tmux {
            socket: m.dir.path().join("tmux.sock"),
        };
        t.run(&["new-session", "-d", "-x", "220", "-y", "40", command]);
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux (the test suite's packages) runs");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen, once `done` holds of it (at most a minute).
    fn screen_until(&self, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.run(&["capture-pane", "-p"]);
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "gave up waiting; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

#[test]
fn top_shows_agents_at_work_live_and_once_for_scripts() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    // A run that stays while it is watched, and a refusal before the view starts.
    let _run = Killed(
        m.run_command("kernel-engine")
            .args(["--", "sh", "-c", "exec sleep 300"])
            .current_dir("/")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(refused_work(&m, "fs-engine", "first").status.success());

    let deadline = Instant::now() + Duration::from_secs(60);
    let sample = loop {
        let s = top_json(&m);
        if agent(&s, "kernel-engine")["processes"].as_u64() >= Some(1) {
            break s;
        }
        assert!(Instant::now() < deadline, "the run never showed: {s:#}");
    };
    let k = agent(&sample, "kernel-engine");
    assert!(
        k["runs"][0]["command"]
            .as_str()
            .is_some_and(|c| c.contains("sleep 300")),
        "{k:#}"
    );
    let f = agent(&sample, "fs-engine");
    assert!(f["last_refusal"]["operation"].is_string(), "{f:#}");
    assert!(
        f["last_refusal"]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/metadata.json")),
        "{f:#}"
    );
    assert!(f["quota"]["bytes"].is_u64(), "{f:#}");

    // The view in a real terminal, while fs-engine works.
    let command = format!(
        "{} top --store {} --interval 0.5",
        clawfs_bin(),
        m.store.display()
    );
    let tmux = Tmux::new(&m, &command);
    tmux.screen_until(|s| s.contains("kernel-engine") && s.contains("sleep 300"));
    assert!(refused_work(&m, "fs-engine", "second").status.success());
    let screen = tmux.screen_until(|s| {
        s.lines()
            .any(|l| l.contains("fs-engine") && l.contains("metadata.json"))
    });
    assert!(screen.contains("sort: ops"), "{screen}");
    // Keys: sort by the next column, then show only fs-engine.
    tmux.run(&["send-keys", "s"]);
    tmux.screen_until(|s| s.contains("sort: bytes"));
    tmux.run(&["send-keys", "/", "fs-e", "Enter"]);
    let filtered =
        tmux.screen_until(|s| s.contains("filter: fs-e") && !s.contains("kernel-engine"));
    assert!(filtered.contains("fs-engine"), "{filtered}");
    tmux.run(&["send-keys", "q"]);
    // Quitting ends the session (and with it the server).
    let deadline = Instant::now() + Duration::from_secs(30);
    while Command::new("tmux")
        .arg("-S")
        .arg(&tmux.socket)
        .arg("has-session")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(Instant::now() < deadline, "q did not quit");
        std::thread::sleep(Duration::from_millis(100));
    }
}
