//! An agent floods the mount with slow tool calls (regular-expression searches over an 8 MiB
//! file under many hard links, several at once), to hold up everyone else: root's `stat` and
//! listing, and another agent's tool call, are answered while its calls still run; its calls
//! take turns, one at a time. And when it is killed, its calls still waiting are dropped, not
//! run, and the trail says so. What it may hold of the daemon is bounded: calls waiting in
//! line, and the bytes of requests and answers kept in open call files.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{pin_to_cpu, Mounted};
use crate::support::{audit_until, python_as_agent, text};
use serde_json::Value;

/// A JSON string's text ("" for anything else).
fn text_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

const CALLS: usize = 4;
const LINKS: usize = 2_000;

/// `workspaces/default/big`: an 8 MiB text file and [`LINKS`] hard links to it, written to the
/// store directly. A search reads each link whole: 16 GiB, far longer than any test waits, so
/// no check here depends on how fast a call runs; the calls end when their callers are killed.
fn big_workspace(m: &Mounted) {
    let big = m.backing("workspaces/default/big");
    fs::create_dir_all(&big).unwrap();
    let line = "fizz buzz jazz lorem ipsum dolor sit amet ".repeat(12) + "\n";
    let mut text = line.repeat((8 << 20) / line.len());
    text.truncate((8 << 20) - 1);
    fs::write(big.join("base.txt"), text).unwrap();
    for i in 0..LINKS {
        fs::hard_link(big.join("base.txt"), big.join(format!("l{i}.txt"))).unwrap();
    }
}

/// fs-engine starts [`CALLS`] slow searches at once, each in its own process (whose pid goes
/// to `agents/fs-engine/pids`), which writes the answer to `out<i>` in its folder.
fn flood(m: &Mounted) -> Child {
    calls(m, 1, CALLS)
}

/// [`flood`]'s calls numbered `first..=last`.
fn calls(m: &Mounted, first: usize, last: usize) -> Child {
    calls_as(m, "fs-engine", first, last)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The command by which `agent` starts its calls numbered `first..=last`, slow searches each
/// in its own process (pids in `agents/<agent>/pids`), each writing its answer to `out<i>` in
/// its folder.
fn calls_as(m: &Mounted, agent: &str, first: usize, last: usize) -> Command {
    let mnt = m.mnt.display();
    let script = format!(
        r#"cd {mnt}/agents/{agent} || exit 9
           printf '%s' '{{"path":"big","pattern":"(?i)\\w+zz\\w+q","regex":true}}' > req.json
           for i in $(seq {first} {last}); do
             sh -c 'exec 3<>{mnt}/tools/call/search_files && cat req.json >&3 && exec cat <&3 >out'$i &
             echo $! >> pids
           done
           wait"#
    );
    let mut cmd = m.run_command(agent);
    cmd.args(["--", "sh", "-c", &script]);
    cmd
}

/// The rest of the line of `out` that starts with `prefix`.
fn line_after<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("{out}"))
}

/// How many of the flood's calls have been answered.
fn answered(m: &Mounted) -> usize {
    (1..=CALLS)
        .filter(|i| {
            fs::metadata(m.backing(&format!("agents/fs-engine/out{i}")))
                .is_ok_and(|md| md.len() > 0)
        })
        .count()
}

#[test]
fn slow_tool_calls_of_one_agent_hold_up_no_one_else() {
    let m = Mounted::new();
    big_workspace(&m);
    let before = m.tool_thread_ticks();
    let flood = flood(&m);
    m.wait_for_busy_tool_threads(before);

    // Root is answered while fs-engine's first call still runs: before any call of the flood
    // is (each would search for minutes; four at once used to hold every FUSE worker).
    fs::metadata(m.mnt.join("workspaces/default/big/l7.txt")).unwrap();
    assert!(fs::read_dir(m.mnt.join("agents")).unwrap().count() > 0);
    assert_eq!(
        answered(&m),
        0,
        "root's stat waited for the flood's calls to be answered"
    );
    // Another agent's call is served beside the flood, not after it.
    let other = m.run_agent_as(
        "observability",
        &[],
        &format!(
            r#"exec 3<>{}/tools/call/list_files && printf '{{"path":"big"}}' >&3 && cat <&3"#,
            m.mnt.display()
        ),
    );
    assert!(text(&other).contains("\"ok\":true"), "{}", text(&other));
    assert!(
        answered(&m) < CALLS,
        "another agent's call waited for all of the flood's calls"
    );

    // Its calls take turns: none was refused.
    stop(&m, flood);
    let trail = audit_until(&m, |a| {
        a.iter().any(|r| r["operation"] == "tool:search_files")
    });
    assert!(
        !trail
            .iter()
            .any(|r| r["operation"] == "tool" && r["errno"] == libc::EAGAIN),
        "a call was refused"
    );
}

/// The pids in `agents/fs-engine/pids`, in the order the calls started.
fn caller_pids(m: &Mounted) -> Vec<i32> {
    fs::read_to_string(m.backing("agents/fs-engine/pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether the thread `pid` waits for the daemon's answer to a request.
fn waits_in_fuse(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/wchan"))
        .is_ok_and(|w| w.contains("request_wait_answer") || w.contains("fuse"))
}

/// Whether `pid` has ended (gone, or a zombie not yet reaped).
fn ended(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// An agent's callers killed while their calls wait behind its own running call go at once:
/// their requests are answered (dropped, audited EINTR "killed") while that call still runs,
/// rather than holding them, unkillable, until their turn came minutes later.
#[test]
fn callers_killed_while_their_calls_wait_go_at_once() {
    let m = Mounted::new();
    big_workspace(&m);
    let before = m.tool_thread_ticks();
    let first = calls(&m, 1, 1);
    m.wait_for_busy_tool_threads(before);
    let rest = calls(&m, 2, CALLS);
    let deadline = Instant::now() + Duration::from_secs(60);
    let waiting = loop {
        let pids = caller_pids(&m);
        if pids.len() == CALLS && pids[1..].iter().all(|&p| waits_in_fuse(p)) {
            break pids[1..].to_vec();
        }
        assert!(
            Instant::now() < deadline,
            "the waiting calls were never all sent"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    for &p in &waiting {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !waiting.iter().all(|&p| ended(p)) {
        assert!(
            Instant::now() < deadline,
            "killed callers still wait for their turn: {:?}",
            waiting.iter().filter(|&&p| !ended(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        answered(&m),
        0,
        "the running call ended: {:?}",
        fs::read_to_string(m.backing("agents/fs-engine/out1")).unwrap_or_default()
    );
    let trail = audit_until(&m, |a| {
        a.iter()
            .filter(|r| r["operation"] == "tool" && r["errno"] == libc::EINTR)
            .count()
            >= waiting.len()
    });
    assert!(trail
        .iter()
        .filter(|r| r["operation"] == "tool" && r["errno"] == libc::EINTR)
        .all(|r| r["agent"] == "fs-engine"
            && r["reason"].as_str().is_some_and(|s| s.contains("killed"))));
    assert!(!trail
        .iter()
        .any(|r| r["operation"] == "tool:search_files" && r["result"] == "ok"));
    stop(&m, first);
    stop(&m, rest);
}

/// Kills the flood's callers (their waiting calls are dropped) and its runner.
fn stop(m: &Mounted, mut flood: Child) {
    let pids = fs::read_to_string(m.backing("agents/fs-engine/pids")).unwrap_or_default();
    for p in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    let _ = flood.kill();
    let _ = flood.wait();
}

/// The flood's callers are killed once a call runs: the calls still waiting are dropped, and
/// the running one stops early (answered `interrupted`, audited EINTR) instead of searching on
/// for no one: each would otherwise end `ok` after seconds.
#[test]
fn calls_still_waiting_when_their_agent_is_killed_are_dropped_and_audited() {
    let m = Mounted::new();
    big_workspace(&m);
    let before = m.tool_thread_ticks();
    let mut flood = flood(&m);
    m.wait_for_busy_tool_threads(before);
    // Every caller has sent its request (pids written) and a call runs; then all are killed.
    let pids_file = m.backing("agents/fs-engine/pids");
    let deadline = Instant::now() + Duration::from_secs(60);
    let pids = loop {
        let pids: Vec<i32> = fs::read_to_string(&pids_file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let waiting = pids
            .iter()
            .filter(|p| {
                fs::read_to_string(format!("/proc/{p}/wchan"))
                    .is_ok_and(|w| w.contains("request_wait_answer") || w.contains("fuse"))
            })
            .count();
        if pids.len() == CALLS && waiting >= CALLS - 1 {
            break pids;
        }
        assert!(Instant::now() < deadline, "the calls were never all sent");
        std::thread::sleep(Duration::from_millis(20));
    };
    for p in &pids {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    let _ = flood.kill();
    let _ = flood.wait();

    let dropped = |a: &[serde_json::Value]| {
        a.iter()
            .filter(|r| r["operation"] == "tool" && r["errno"] == libc::EINTR)
            .count()
    };
    let trail = audit_until(&m, |a| dropped(a) >= CALLS - 2);
    let ran = trail
        .iter()
        .filter(|r| r["operation"] == "tool:search_files")
        .count();
    assert!(
        dropped(&trail) >= CALLS - 2 && ran <= 2,
        "{ran} calls of the killed agent ran, {} were dropped",
        dropped(&trail)
    );
    assert!(trail
        .iter()
        .any(|r| r["operation"] == "tool"
            && r["reason"].as_str().is_some_and(|s| s.contains("killed"))));
    // The call that ran was stopped: its record comes once it stops.
    let trail = audit_until(&m, |a| {
        a.iter().any(|r| r["operation"] == "tool:search_files")
    });
    let ran: Vec<_> = trail
        .iter()
        .filter(|r| r["operation"] == "tool:search_files")
        .collect();
    assert!(
        ran.iter().all(|r| r["errno"] == libc::EINTR
            && r["reason"]
                .as_str()
                .is_some_and(|s| s.starts_with("interrupted"))),
        "{ran:#?}"
    );
}

/// Each agent keeps open call files holding large answers (`read_media_file` of an 8 MiB
/// file: about 11 MB each, in the daemon's memory): past 64 MiB held, the next answer is
/// withheld with an error the agent can read, audited; closing them gives the room back. Kept
/// responses of the two-file interface are held to 64 MiB per caller too.
#[test]
fn large_answers_held_in_open_call_files_are_bounded() {
    let m = Mounted::new();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.resize((8 << 20) - 1, 0);
    fs::write(m.ws().join("big.png"), &png).unwrap();
    let call = format!("{}/tools/call/read_media_file", m.mnt.display());
    let script = format!(
        r#"
import os
held, said = [], []
def call():
    fd = os.open("{call}", os.O_RDWR)
    os.write(fd, b'{{"path":"big.png"}}')
    out = b""
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        out += chunk
    held.append(fd)
    return b'"ok":true' in out, out
for i in range(8):
    ok, out = call()
    said.append("ok" if ok else ("withheld" if b"withheld" in out else out[:200].decode()))
print("held:", " ".join(said))
for fd in held:
    os.close(fd)
held.clear()
print("after closing:", "ok" if call()[0] else "refused")
"#
    );
    let out = python_as_agent(&m, &script);
    let said = line_after(&out, "held: ");
    let answers: Vec<&str> = said.split(' ').collect();
    let ok = answers.iter().filter(|a| **a == "ok").count();
    assert!(
        (4..=6).contains(&ok),
        "{ok} large answers held at once: {out}"
    );
    assert!(
        answers[ok..].iter().all(|a| *a == "withheld"),
        "answers past the limit: {out}"
    );
    assert!(out.contains("after closing: ok"), "{out}");
    let trail = audit_until(&m, |a| {
        a.iter()
            .any(|r| r["operation"] == "tool:read_media_file" && r["errno"] == libc::ENOMEM)
    });
    assert!(trail
        .iter()
        .any(|r| r["reason"].as_str().is_some_and(|s| s.contains("withheld"))));
}

/// An agent keeps call files open, each holding a request just under the 4 MiB a call may
/// take and never finished: past 64 MiB held, its next write fails with EFBIG (the daemon's
/// memory is not the agent's to fill), while root still writes a request; closing them gives
/// the room back.
#[test]
fn requests_held_in_open_call_files_are_bounded() {
    let m = Mounted::new();
    let call = format!("{}/tools/call/list_allowed", m.mnt.display());
    let script = format!(
        r#"
import errno, os, time
body = b" " * ((4 << 20) - 1)
def hold():
    fd = os.open("{call}", os.O_RDWR)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        return fd, "held"
    except OSError as e:
        return fd, errno.errorcode[e.errno]
held, said = [], []
for i in range(20):
    fd, what = hold()
    held.append(fd)
    said.append(what)
print("held:", " ".join(said), flush=True)
input()
for fd in held:
    os.close(fd)
# The kernel releases closed files after close returns: wait for the room to come back.
for attempt in range(200):
    fd, what = hold()
    os.close(fd)
    if what == "held":
        break
    time.sleep(0.05)
print("after closing:", what)
"#
    );
    let mut agent = m
        .run_command("fs-engine")
        .args(["--", "python3", "-c", &script])
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    let said = lines.next().unwrap().unwrap();
    // Root's request is not the agent's to refuse.
    let mut root = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&call)
        .unwrap();
    root.write_all(&vec![b' '; (4 << 20) - 1]).unwrap();
    drop(root);
    agent.stdin.take().unwrap().write_all(b"\n").unwrap();
    let after = lines.next().unwrap().unwrap();
    assert!(agent.wait().unwrap().success());
    let said: Vec<&str> = said.strip_prefix("held: ").unwrap().split(' ').collect();
    let held = said.iter().filter(|s| **s == "held").count();
    assert_eq!(held, 16, "{said:?}");
    assert!(said[held..].iter().all(|s| *s == "EFBIG"), "{said:?}");
    assert_eq!(after, "after closing: held");
}

/// Once an agent's open call files hold all the request bytes it may hold, a request refused
/// part of its body is never run on what was kept: not through a call file (its read answers
/// `too_large`), not through a request file (its response says `too_large` as soon as
/// `close()` returns). Nothing is written, and the trail has the refusal with EFBIG.
#[test]
fn a_request_refused_part_of_its_body_is_answered_not_run() {
    let m = Mounted::new();
    let mnt = m.mnt.display();
    let script = format!(
        r#"
import errno, json, os
body = b" " * ((4 << 20) - 1)
held = []
for i in range(16):
    fd = os.open("{mnt}/tools/call/list_allowed", os.O_RDWR)
    os.write(fd, body)
    held.append(fd)
def attempt(fd, request):
    try:
        os.write(fd, request)
        return "written"
    except OSError as e:
        return errno.errorcode[e.errno]
fd = os.open("{mnt}/tools/call/write_file", os.O_RDWR)
said = attempt(fd, json.dumps({{"path": "by-call.md", "content": "x"}}).encode())
answer = b""
while chunk := os.read(fd, 65536):
    answer += chunk
print("call write:", said)
print("call answer:", json.loads(answer)["error"])
fd = os.open("{mnt}/tools/requests/r1.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
said = attempt(fd, json.dumps({{"tool": "write_file", "path": "by-request.md", "content": "x"}}).encode())
os.close(fd)
print("request write:", said)
with open("{mnt}/tools/responses/r1.json") as f:
    print("request answer:", json.load(f)["error"])
"#
    );
    let out = python_as_agent(&m, &script);
    assert_eq!(line_after(&out, "call write: "), "EFBIG", "{out}");
    assert_eq!(line_after(&out, "call answer: "), "too_large", "{out}");
    assert_eq!(line_after(&out, "request write: "), "EFBIG", "{out}");
    assert_eq!(line_after(&out, "request answer: "), "too_large", "{out}");
    for name in ["by-call.md", "by-request.md"] {
        assert!(!m.backing(&format!("workspaces/default/{name}")).exists());
    }
    // The request file's body was refused whole: the trail cannot name its tool.
    let refused = |r: &Value| {
        r["errno"] == libc::EFBIG
            && r["agent"] == "fs-engine"
            && text_of(&r["reason"]).starts_with("too_large: your open tool-call files hold")
    };
    let trail = audit_until(&m, |a| a.iter().filter(|r| refused(r)).count() >= 2);
    let mut ops: Vec<&str> = trail
        .iter()
        .filter(|r| refused(r))
        .map(|r| r["operation"].as_str().unwrap())
        .collect();
    ops.sort();
    assert_eq!(ops, ["tool:?", "tool:write_file"], "{trail:?}");
    assert!(!trail
        .iter()
        .any(|r| r["operation"] == "tool:write_file" && r["result"] == "ok"));
}

/// One agent lines up more slow calls than it may have waiting: one runs, 64 wait, and the
/// rest are refused at once with EAGAIN, audited (rule TOOL-CALLS) and in its denials, rather
/// than held in the daemon without bound. When it exits, what still waits is dropped.
#[test]
fn an_agent_may_not_line_up_calls_without_bound() {
    const THREADS: usize = 70;
    let m = Mounted::new();
    big_workspace(&m);
    let call = format!("{}/tools/call/search_files", m.mnt.display());
    let script = format!(
        r#"
import errno, os, threading, time
request = rb'{{"path":"big","pattern":"(?i)\\w+zz\\w+q","regex":true}}'
said, lock = [], threading.Lock()
def one():
    fd = os.open("{call}", os.O_RDWR)
    os.write(fd, request)
    try:
        os.read(fd, 1 << 16)
        what = "answered"
    except OSError as e:
        what = errno.errorcode[e.errno]
    with lock:
        said.append(what)
for i in range({THREADS}):
    threading.Thread(target=one, daemon=True).start()
deadline = time.time() + 120
while time.time() < deadline:
    with lock:
        if said.count("EAGAIN") >= {THREADS} - 65:
            break
    time.sleep(0.05)
time.sleep(0.5)
with lock:
    print("said:", " ".join(said), flush=True)
os._exit(0)
"#
    );
    let out = python_as_agent(&m, &script);
    let said: Vec<&str> = line_after(&out, "said:").split_whitespace().collect();
    // 65 in line: one running and 64 waiting (66 if the first had not started yet).
    let refused = said.iter().filter(|s| **s == "EAGAIN").count();
    assert!(
        (THREADS - 66..=THREADS - 65).contains(&refused) && refused == said.len(),
        "{said:?}"
    );
    let trail = audit_until(&m, |a| {
        a.iter()
            .filter(|r| r["operation"] == "tool" && r["errno"] == libc::EAGAIN)
            .count()
            >= refused
    });
    let records: Vec<_> = trail
        .iter()
        .filter(|r| r["operation"] == "tool" && r["errno"] == libc::EAGAIN)
        .collect();
    assert_eq!(records.len(), refused);
    assert!(records.iter().all(|r| r["rule"] == "TOOL-CALLS"
        && r["agent"] == "fs-engine"
        && r["path"] == "/tools/call/search_files"));
    let denials = fs::read_to_string(m.mnt.join("agents/fs-engine/denials")).unwrap_or_default();
    assert!(denials.contains("TOOL-CALLS"), "{denials}");
}

/// `agent` starts `n` slow searches at once from CPU 0 ([`calls_as`]).
fn calls_from_cpu0(m: &Mounted, agent: &str, n: usize) -> Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = calls_as(m, agent, 1, n);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: only sched_setaffinity between fork and exec.
    unsafe {
        cmd.pre_exec(|| pin_to_cpu(0));
    }
    cmd.spawn().unwrap()
}

/// Four agents each line up all the calls they may (one running, 64 waiting) from CPU 0. Over
/// FUSE over io_uring a request waiting for its answer holds an entry of its CPU's queue, and
/// these are more than CPU 0's first servers have: root's `stat` and listing from CPU 0 are
/// still answered while every one of those calls waits or runs.
#[test]
fn agents_lining_up_calls_from_one_cpu_hold_up_no_one_on_it() {
    let m = Mounted::new();
    big_workspace(&m);
    let agents = [
        "fs-engine",
        "kernel-engine",
        "build-engine",
        "observability",
    ];
    m.open_workspace_to_all();
    let mut floods: Vec<Child> = agents.iter().map(|a| calls_from_cpu0(&m, a, 65)).collect();
    let pids = |a: &str| -> Vec<i32> {
        fs::read_to_string(m.backing(&format!("agents/{a}/pids")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let waiting = agents
            .iter()
            .flat_map(|a| pids(a))
            .filter(|&p| task_waits_in_fuse(p))
            .count();
        // Every caller started, and most wait in the daemon (or, their CPU's entries all
        // taken, in the kernel for one).
        let started: usize = agents.iter().map(|a| pids(a).len()).sum();
        if started == agents.len() * 65 && waiting >= 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {waiting} of the agents' calls wait in the daemon"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Root, on CPU 0 too.
    let root = std::thread::spawn({
        let ws = m.ws();
        move || {
            pin_to_cpu(0).unwrap();
            let missing = fs::metadata(ws.join("root-was-here")).is_err();
            let listed = fs::read_dir(&ws).unwrap().count();
            (missing, listed)
        }
    });
    let started = Instant::now();
    while !root.is_finished() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let done = root.is_finished();
    let answered: usize = agents
        .iter()
        .map(|a| {
            (1..=65)
                .filter(|i| {
                    fs::metadata(m.backing(&format!("agents/{a}/out{i}")))
                        .is_ok_and(|md| md.len() > 0)
                })
                .count()
        })
        .sum();
    for a in agents {
        for p in pids(a) {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
    }
    for f in &mut floods {
        let _ = f.kill();
        let _ = f.wait();
    }
    assert!(
        done,
        "root's stat from CPU 0 waited behind the agents' calls"
    );
    assert!(root.join().unwrap().0);
    assert!(
        answered <= agents.len(),
        "{answered} calls were answered before root was: root waited for them"
    );
}

/// Whether any thread of `pid` waits for the daemon's answer.
fn task_waits_in_fuse(pid: i32) -> bool {
    fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| {
        tasks.flatten().any(|t| {
            fs::read_to_string(t.path().join("wchan"))
                .is_ok_and(|w| w.contains("request_wait_answer") || w.contains("fuse"))
        })
    })
}
