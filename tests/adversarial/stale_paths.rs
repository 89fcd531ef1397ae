//! Every decision is about a node's namespace path, which the daemon caches per node, from the
//! moment the mount makes it. The attack: an agent makes a folder and files (their paths cached
//! as it made them); an admin then moves the folder under a protected name. The agent must be
//! refused there as if the daemon had never seen the old path.

use crate::common::{audit_until, Mounted};
use crate::support::{records, snapshot};

const AGENT: &str = "fs-engine";

#[test]
fn a_folder_moved_under_a_protected_name_is_decided_by_its_new_path() {
    let m = Mounted::new();
    let ws = m.ws();
    let made = m.run_agent_as(
        AGENT,
        &[],
        &format!(
            "mkdir {ws}/notes && echo one > {ws}/notes/a.md && echo two > {ws}/notes/b.md \
             && touch {ws}/notes/a.md",
            ws = ws.display()
        ),
    );
    assert!(made.status.success(), "{}", crate::common::text(&made));
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
    let script: String = std::iter::once(format!("cd {}", ws.display()))
        .chain(
            attempts
                .iter()
                .map(|(what, cmd)| format!("{cmd} 2>/dev/null; echo \"{what} $?\"")),
        )
        .collect::<Vec<_>>()
        .join("\n");
    let out = m.run_agent_as(AGENT, &[], &script);
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
    let made = m.run_agent_as(
        AGENT,
        &[],
        &format!(
            "cd {} && mkdir h vault vault/k && echo one > h/a && cat h/a >/dev/null \
             && ln h/a vault/k/plugin.js && rm h/a && cat vault/k/plugin.js >/dev/null",
            ws.display()
        ),
    );
    assert!(made.status.success(), "{}", crate::common::text(&made));
    std::fs::rename(ws.join("vault/k"), ws.join("vault/.obsidian")).unwrap();
    let before = snapshot(&m.backing("workspaces/default"));
    let out = m.run_agent_as(
        AGENT,
        &[],
        &format!(
            "cd {} && (echo INJECTED >> vault/.obsidian/plugin.js; echo \"append $?\") \
             && (cat vault/.obsidian/plugin.js >/dev/null; echo \"read $?\")",
            ws.display()
        ),
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
