//! A tool call runs at the first read of its descriptor: an agent hands that descriptor to
//! another process and lets the opener exit, hoping the call runs as whoever holds the
//! opener's pid (or as nobody in particular) by then.

use std::fs;

use crate::common::Mounted;
use crate::support::{agent_policy, audit_until, run_as_user, text};

#[test]
fn a_call_runs_as_its_opener_whoever_reads_it() {
    let m = Mounted::new();
    // Readable by mode to anyone: only the policy keeps fs-engine out.
    m.open_workspace_to_all();
    // fs-engine runs under a uid the policy does not map, and may not read the workspace.
    agent_policy(&m, "fs-engine", "workspaces = { default = \"none\" }");
    fs::write(m.ws().join("plan.md"), "confidential project data\n").unwrap();
    let script = format!(
        r#"import os, sys, time
fd = os.open("{mnt}/tools/call/read_file", os.O_RDWR)
os.write(fd, b'{{"path":"plan.md"}}')
if os.fork() == 0:
    time.sleep(1.0)   # the opener is gone by now
    sys.stdout.write(os.read(fd, 65536).decode())
    sys.stdout.flush()
    os._exit(0)
os._exit(0)
"#,
        mnt = m.mnt.display()
    );
    let out = run_as_user(&m, "fs-engine", "70001", &["python3", "-c", &script]);

    let out = text(&out);
    assert!(!out.contains("confidential"), "{out}");
    assert!(out.contains("\"denied\""), "{out}");
    let all = audit_until(&m, |a| a.iter().any(|r| r["operation"] == "tool:read_file"));
    let calls: Vec<_> = all
        .iter()
        .filter(|r| r["operation"] == "tool:read_file")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["agent"], "fs-engine", "{calls:?}");
    assert_eq!(calls[0]["result"], "denied", "{calls:?}");
}
