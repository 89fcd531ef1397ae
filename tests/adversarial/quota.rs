//! An agent with a byte quota writes past it through new files, appends and descriptors it
//! keeps open: the write that crosses the quota fails with EDQUOT, whichever way.

use std::fs;

use crate::common::Mounted;
use crate::support::{agent_policy, audit_until, denials, text};

#[test]
fn every_byte_counts_against_the_quota() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let dir = format!("{}/agents/fs-engine", m.mnt.display());
    // New files, one after another; then one descriptor held open, written in a loop.
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {dir} || exit 9
             for i in 1 2 3 4 5 6; do
               head -c 300000 /dev/zero > new$i 2>&1 || echo new$i-refused
             done
             exec 4>held
             i=0; while [ $i -lt 40 ]; do head -c 100000 /dev/zero >&4 || {{ echo held-refused; break; }}; i=$((i+1)); done
             exec 4>&-
             python3 -c 'import os
f=os.open(\"py\", os.O_WRONLY|os.O_CREAT, 0o644)
try:
    [os.write(f, bytes(65536)) for _ in range(64)]
    print(\"py-wrote-all\")
except OSError as e:
    print(\"py-refused\", e.errno)' 2>&1
             true"
        ),
    );
    let out = text(&out);
    assert!(out.contains("new4-refused"), "{out}");
    assert!(out.contains("held-refused"), "{out}");
    assert!(
        out.contains(&format!("py-refused {}", libc::EDQUOT)),
        "{out}"
    );
    let total: u64 = fs::read_dir(m.backing("agents/fs-engine"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.metadata().unwrap().len())
        .filter(|&n| n > 4096 || n == 0)
        .sum();
    assert!(
        total <= 1 << 20,
        "the agent stored {total} bytes with a 1 MiB quota: {out}"
    );
    let all = audit_until(&m, |a| a.iter().any(|r| r["rule"] == "QUOTA"));
    assert!(all
        .iter()
        .any(|r| r["rule"] == "QUOTA" && r["errno"] == libc::EDQUOT));
    assert!(denials(&m, "fs-engine")
        .iter()
        .any(|d| d["rule"] == "QUOTA"));
}

#[test]
fn extending_preallocating_tools_and_identity_rewrites_are_charged_too() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let dir = format!("{}/agents/fs-engine", m.mnt.display());
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {dir} || exit 9
             truncate -s 50M sparse 2>&1 || echo truncate-refused
             fallocate -n -l 30M kept 2>&1 || echo fallocate-refused
             true"
        ),
    );
    let out = text(&out);
    assert!(out.contains("truncate-refused"), "{out}");
    assert!(out.contains("fallocate-refused"), "{out}");
    // Tool writes into a workspace count against the same quota.
    let big = "a".repeat(700_000);
    let req = |p: &str| format!("{{\"path\":\"{p}\",\"content\":\"{big}\"}}");
    fs::write(m.dir.path().join("r1.json"), req("t1.md")).unwrap();
    fs::write(m.dir.path().join("r2.json"), req("t2.md")).unwrap();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "for r in r1 r2; do exec 3<>{mnt}/tools/call/write_file; cat {d}/$r.json >&3; cat <&3; echo; exec 3>&-; done",
            mnt = m.mnt.display(),
            d = m.dir.path().display()
        ),
    );
    let out = text(&out);
    assert!(out.contains("\"ok\":true"), "{out}");
    assert!(out.contains("quota"), "{out}");
    assert!(!m.ws().join("t2.md").exists(), "{out}");
    // Identity rewrites keep a bounded number of backups.
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {dir}; i=0; while [ $i -lt 30 ]; do cp identity.json /tmp/i.json; cat /tmp/i.json > identity.json; i=$((i+1)); done; echo done"
        ),
    );
    assert!(text(&out).contains("done"), "{}", text(&out));
    let kept = fs::read_dir(m.backing("agents/fs-engine/backups"))
        .unwrap()
        .count();
    assert!(kept <= 16, "{kept} identity backups kept");
}

#[test]
fn tool_backups_are_charged_and_a_refused_edit_writes_none() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"300KiB\" }");
    // A 100 KB file the agent may edit; each edit keeps a backup of the old content.
    let mut body = String::from("TOKENA\n");
    body.push_str(&"line of text abc\n".repeat(6000));
    fs::write(m.ws().join("big.md"), &body).unwrap();
    let mnt = m.mnt.display();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "for i in 1 2 3 4 5 6; do
               exec 3<>{mnt}/tools/call/edit_exact; printf '%s' '{{\"path\":\"big.md\",\"old\":\"TOKENA\",\"new\":\"TOKENB\"}}' >&3; cat <&3; echo; exec 3>&-
               exec 3<>{mnt}/tools/call/edit_exact; printf '%s' '{{\"path\":\"big.md\",\"old\":\"TOKENB\",\"new\":\"TOKENA\"}}' >&3; cat <&3; echo; exec 3>&-
             done"
        ),
    );
    let out = text(&out);
    assert!(out.contains("quota"), "{out}");
    let kept: u64 = walk_sizes(&m.backing("workspaces/default/.clawfs/backups"));
    assert!(
        kept <= 300 << 10,
        "{kept} bytes of backups with a 300 KiB quota: {out}"
    );
}

fn walk_sizes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let md = fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                walk_sizes(&e.path())
            } else {
                md.len()
            }
        })
        .sum()
}
