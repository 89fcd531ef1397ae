//! The tools tell an agent the truth about what it may write: `list_allowed` says that file
//! modes apply besides the policy's globs, and a write refused by a file's mode names its owner,
//! group and mode and what would let the agent write it — advice that, followed, works.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{clawfs_bin, text, Mounted};

/// Calls `tool` with `args` through `tools/call/<tool>` as agent fs-engine, sandboxed.
fn agent_call(m: &Mounted, tool: &str, args: &Value) -> Value {
    // The sandbox passes no variables of ours: the request is in the script, single-quoted.
    let request = args.to_string();
    assert!(!request.contains('\''), "{request}");
    let script = format!(
        "exec 3<>{}/tools/call/{tool} && printf '%s' '{request}' >&3 && cat <&3",
        m.mnt.display()
    );
    let out = Command::new(clawfs_bin())
        .arg("run")
        .arg("--store")
        .arg(&m.store)
        .args(["--agent", "fs-engine", "--", "sh", "-c", &script])
        .current_dir("/")
        .output()
        .expect("run clawfs run");
    assert!(out.status.success(), "{}\n{}", text(&out), m.log());
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn list_allowed_says_file_modes_apply() {
    let m = Mounted::new();
    let v = agent_call(&m, "list_allowed", &json!({}));
    assert_eq!(v["ok"], true, "{v}");
    let perms = &v["file_permissions"];
    assert_eq!(perms["apply"], true, "{v}");
    assert_eq!(perms["uid"], 61006, "fs-engine's uid: {v}");
    let groups = perms["groups"].to_string();
    assert!(groups.contains("clawos-agents"), "{groups}");
    let note = perms["note"].as_str().unwrap();
    assert!(note.contains("owner, group and mode apply"), "{note}");
}

#[test]
fn a_write_refused_by_a_files_mode_says_whose_it_is_and_how_to_allow_it() {
    let m = Mounted::new();
    let file = m.ws().join("root.md");
    std::fs::write(&file, "hello\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let edit = json!({"path": "root.md", "edits": [{"oldText": "hello", "newText": "bye"}]});
    let v = agent_call(&m, "edit_file", &edit);
    assert_eq!(v["error"], "denied", "{v}");
    let msg = v["message"].as_str().unwrap();
    for said in [
        "owner root (0)",
        "group root (0)",
        "mode 0644 (rw-r--r--)",
        "not by your policy",
        &file.display().to_string(),
        "chmod g+w",
    ] {
        assert!(msg.contains(said), "{said:?} not in: {msg}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello\n");
    // The agent's denials file has the same reason.
    let denials = std::fs::read_to_string(m.path("agents/fs-engine/denials")).unwrap();
    assert!(denials.contains("mode 0644"), "{denials}");

    // Doing what it says lets the agent write: the group it names, with group write.
    let group = msg
        .split("chgrp ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap_or_else(|| panic!("no chgrp in: {msg}"));
    let gid = std::fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == group).then(|| f[2].parse::<u32>().unwrap())
        })
        .unwrap_or_else(|| panic!("{group} is not a group"));
    std::os::unix::fs::chown(&file, None, Some(gid)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
    let v = agent_call(&m, "edit_file", &edit);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "bye\n");
}
