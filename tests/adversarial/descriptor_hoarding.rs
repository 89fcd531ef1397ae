//! An agent opens folders and files through the mount and keeps them open, to take the
//! daemon's descriptors (each open holds one of the store's): past its limit it gets EMFILE,
//! audited, and nothing is created; meanwhile root and another agent keep opening, and the
//! emergency stop flag stays readable. Closing gives the descriptors back.

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::Mounted;
use crate::support::{audit_until, denials, text};

const LIMIT: usize = 64;

/// The attacker: holds every folder it can open (then a file, then a new file), says so in
/// `holding`, waits for `release`, closes everything and opens once more.
const HOARD: &str = r#"
import os, sys, time
d = sys.argv[1]
os.chdir(d)
for i in range(200):
    os.makedirs(f"dir{i}", exist_ok=True)
held, errno = [], None
for i in range(200):
    try:
        held.append(os.open(f"dir{i}", os.O_RDONLY | os.O_DIRECTORY))
    except OSError as e:
        errno = e.errno
        break
def attempt(what, f):
    try:
        held.append(f())
        print(what, "opened")
    except OSError as e:
        print(what, "refused", e.errno)
attempt("file", lambda: os.open("dir0/../identity.json", os.O_RDONLY))
attempt("create", lambda: os.open("created-past-the-limit", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
attempt("tool", lambda: os.open(sys.argv[2] + "/tools/call/list_allowed", os.O_RDWR))
print("held", len(held), "errno", errno, flush=True)
os.mkdir("holding")
deadline = time.time() + 120
while not os.path.exists("release") and time.time() < deadline:
    time.sleep(0.05)
for fd in held:
    os.close(fd)
attempt("after", lambda: os.open("dir1", os.O_RDONLY | os.O_DIRECTORY))
"#;

#[test]
fn an_agent_hoarding_descriptors_is_held_to_its_limit_and_starves_no_one() {
    let m = Mounted::with_args(&["--max-open-per-caller", &LIMIT.to_string()]);
    let own = m.mnt.join("agents/fs-engine");
    // A real sandboxed run: what an agent can do, it does here.
    let mut hoarder = m
        .run_command("fs-engine")
        .args(["--", "python3", "-c", HOARD])
        .arg(&own)
        .arg(&m.mnt)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let holding = m.backing("agents/fs-engine/holding");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !holding.exists() {
        if hoarder.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = hoarder.kill();
            let out = hoarder.wait_with_output().unwrap();
            panic!("the agent never held its limit: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // While it holds its limit, root and another agent are served as ever.
    let many: Vec<fs::File> = (0..2 * LIMIT)
        .map(|i| fs::File::open(own.join(format!("dir{}", i % 200))).unwrap())
        .collect();
    drop(many);
    let other = m.run_agent_as(
        "observability",
        &[],
        &format!(
            "ls {own} >/dev/null && cat {own}/identity.json >/dev/null && echo served",
            own = own.display()
        ),
    );
    assert!(text(&other).contains("served"), "{}", text(&other));

    fs::create_dir(own.join("release")).unwrap();
    let out = hoarder.wait_with_output().unwrap();
    let out = text(&out);
    assert!(
        out.contains(&format!("held {LIMIT} errno {}", libc::EMFILE)),
        "the agent held more than its limit, or was refused otherwise: {out}"
    );
    // A file, a new file, and a generated file (each holds daemon memory) alike.
    for what in ["file", "create", "tool"] {
        assert!(
            out.contains(&format!("{what} refused {}", libc::EMFILE)),
            "{out}"
        );
    }
    assert!(
        out.contains("after opened"),
        "closing gave nothing back: {out}"
    );
    // A refused create leaves no file behind.
    assert!(
        !m.backing("agents/fs-engine/created-past-the-limit")
            .exists(),
        "{out}"
    );

    let refused = |r: &serde_json::Value| r["rule"] == "OPEN-FILES" && r["errno"] == libc::EMFILE;
    let all = audit_until(&m, |a| {
        ["opendir", "open", "create"]
            .iter()
            .all(|op| a.iter().any(|r| refused(r) && r["operation"] == *op))
    });
    for op in ["opendir", "open", "create"] {
        assert!(
            all.iter()
                .any(|r| refused(r) && r["operation"] == op && r["agent"] == "fs-engine"),
            "no audited {op} refusal"
        );
    }
    assert!(denials(&m, "fs-engine")
        .iter()
        .any(|d| d["rule"] == "OPEN-FILES"));
}
