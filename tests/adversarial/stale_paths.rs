//! Every decision is about a node's namespace path, which the daemon caches per node, from the
//! moment the mount makes it. The attack: an agent makes a folder and files (their paths cached
//! as it made them); an admin then moves the folder under a protected name. The agent must be
//! refused there as if the daemon had never seen the old path.

use crate::common::{audit_until, Mounted};
use crate::support::{records, snapshot};

const AGENT: &str = "fs-engine";

/// Runs `script` as the sandboxed agent in the default workspace; its output.
fn in_workspace(m: &Mounted, script: &str) -> std::process::Output {
    m.run_agent_as(AGENT, &[], &format!("cd {} && {script}", m.ws().display()))
}

/// Runs `script` as the agent in the default workspace, which must succeed: what it made.
fn made_by_agent(m: &Mounted, script: &str) {
    let made = in_workspace(m, script);
    assert!(made.status.success(), "{}", crate::common::text(&made));
}

#[test]
fn a_folder_moved_under_a_protected_name_is_decided_by_its_new_path() {
    let m = Mounted::new();
    let ws = m.ws();
    made_by_agent(
        &m,
        "mkdir notes && echo one > notes/a.md && echo two > notes/b.md && touch notes/a.md",
    );
    // The admin's move: admins are not held to the protected names.
    std::fs::rename(ws.join("notes"), ws.join(".obsidian")).unwrap();
    let before = snapshot(&m.backing("workspaces/default"));

    // Each attempt on its own line, with its exit status; every one touches a node whose path
    // the daemon cached when the agent made it, before the move.
    let attempts = [
        ("read", "cat .obsidian/a.md"),
        ("append", "echo x >> .obsidian/a.md"),
        ("times", "touch .obsidian/a.md"),
        ("mode", "chmod 600 .obsidian/a.md"),
        ("unlink", "rm -f .obsidian/b.md"),
        ("create", "echo new > .obsidian/c.md"),
        ("mkdir", "mkdir .obsidian/sub"),
        ("rename", "mv .obsidian/a.md moved.md"),
    ];
    let script: String = attempts
        .iter()
        .map(|(what, cmd)| format!("{cmd} 2>/dev/null; echo \"{what} $?\""))
        .collect::<Vec<_>>()
        .join("\n");
    let out = in_workspace(&m, &format!("true\n{script}"));
    let said = String::from_utf8_lossy(&out.stdout);
    for (what, _) in attempts {
        let line = said
            .lines()
            .find(|l| l.starts_with(&format!("{what} ")))
            .unwrap_or_else(|| panic!("no status for {what}: {said}"));
        assert_ne!(line, format!("{what} 0"), "{what} was allowed: {said}");
    }

    // Nothing changed in the store, and each refusal is on the trail with the new path.
    assert_eq!(snapshot(&m.backing("workspaces/default")), before);
    let all = audit_until(&m, |all| {
        ["open", "setattr", "unlink", "create", "mkdir", "rename"]
            .iter()
            .all(|op| {
                all.iter().any(|r| {
                    r["operation"] == *op
                        && r["result"] == "denied"
                        && r["path"]
                            .as_str()
                            .is_some_and(|p| p.contains("/default/.obsidian"))
                })
            })
    });
    for op in ["open", "setattr", "unlink", "create", "mkdir", "rename"] {
        let denied: Vec<_> = records(&all, op, "")
            .into_iter()
            .filter(|r| r["result"] == "denied")
            .collect();
        assert!(
            denied.iter().any(|r| r["path"]
                .as_str()
                .is_some_and(|p| p.contains("/default/.obsidian"))),
            "no {op} refusal at the new path: {denied:?}"
        );
        assert!(
            !denied.iter().any(|r| r["path"]
                .as_str()
                .is_some_and(|p| p.contains("/default/notes"))),
            "a decision about the old path: {denied:?}"
        );
    }
}

/// A file with two names is decided where it is reached now, never under a name that is gone:
/// the agent links its file into a folder, removes the first name, and an admin then moves
/// the folder under a protected name. The file's one name is protected: reading and appending
/// are refused, and nothing is recorded under the dead name.
#[test]
fn a_file_whose_first_name_is_gone_is_decided_by_the_name_it_keeps() {
    let m = Mounted::new();
    let ws = m.ws();
    made_by_agent(
        &m,
        "mkdir h vault vault/k && echo one > h/a && cat h/a >/dev/null \
         && ln h/a vault/k/plugin.js && rm h/a && cat vault/k/plugin.js >/dev/null",
    );
    std::fs::rename(ws.join("vault/k"), ws.join("vault/.obsidian")).unwrap();
    let before = snapshot(&m.backing("workspaces/default"));
    let out = in_workspace(
        &m,
        "(echo INJECTED >> vault/.obsidian/plugin.js; echo \"append $?\") \
         && (cat vault/.obsidian/plugin.js >/dev/null; echo \"read $?\")",
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("append ") && said.contains("read ") && !said.contains(" 0"),
        "the protected file was reached: {said}"
    );
    assert_eq!(snapshot(&m.backing("workspaces/default")), before);
    let all = audit_until(&m, |all| {
        all.iter().any(|r| {
            r["operation"] == "open"
                && r["result"] == "denied"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/vault/.obsidian/plugin.js"))
        })
    });
    let dead: Vec<_> = all
        .iter()
        .filter(|r| r["path"].as_str().is_some_and(|p| p.contains("(deleted)")))
        .collect();
    assert!(dead.is_empty(), "records under a dead name: {dead:?}");
}
