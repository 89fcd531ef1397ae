//! The agent tools reach nothing the caller could not reach by path, and break none of the
//! rules the mount enforces.

use std::fs;

use crate::common::{tool_call, Mounted};
use crate::support::{text, TempUser};

#[test]
fn a_user_cannot_read_through_tools_a_workspace_it_cannot_enter() {
    let m = Mounted::new();
    // workspaces/ is 0750 root:clawos-users; the user is in no such group.
    fs::create_dir(m.path("workspaces/pub")).unwrap();
    fs::write(m.path("workspaces/pub/plan.md"), "confidential\n").unwrap();
    let user = TempUser::new("tr");
    let cat = text(&user.sh(&format!(
        "cat {} 2>&1; true",
        m.path("workspaces/pub/plan.md").display()
    )));
    assert!(cat.contains("Permission denied"), "{cat}");
    let call = text(&user.sh(&format!(
        "exec 3<>{}/tools/call/read_file 2>&1 || exit 0; printf '%s' '{{\"workspace\":\"pub\",\"path\":\"plan.md\"}}' >&3; cat <&3",
        m.mnt.display()
    )));
    assert!(!call.contains("confidential"), "{call}");
}

#[test]
fn tools_cannot_remove_or_replace_what_the_workspace_manages() {
    let m = Mounted::new();
    let meta = fs::read(m.ws().join("metadata.json")).unwrap();
    for (tool, req) in [
        ("delete", serde_json::json!({"path": "metadata.json"})),
        (
            "move",
            serde_json::json!({"from": "metadata.json", "to": "m.json"}),
        ),
        (
            "move",
            serde_json::json!({"from": "snapshots", "to": "snap2"}),
        ),
        (
            "write_file",
            serde_json::json!({"path": "snapshots/x.db", "content": "x"}),
        ),
    ] {
        let v = tool_call(&m, tool, &req);
        assert_eq!(v["ok"], false, "{tool} {req}: {v}");
    }
    assert_eq!(fs::read(m.ws().join("metadata.json")).unwrap(), meta);
    assert!(m.ws().join("snapshots").is_dir());
    assert!(!m.ws().join("snapshots/x.db").exists());
}
