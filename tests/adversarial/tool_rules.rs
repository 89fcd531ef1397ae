//! The agent tools reach nothing the caller could not reach by path, and break none of the
//! rules the mount enforces.

use std::fs;

use crate::common::{tool_call, tool_call_script, Mounted};
use crate::support::{denials, text, TempUser};

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

/// A workspace's metadata.json (its vector dimension, index parameters, owner) is read by the
/// indexer and by snapshots: an agent with a read-write grant reads it but changes it only
/// through the validated xattr, neither by writing, appending, truncating nor through a tool.
#[test]
fn an_agent_cannot_rewrite_a_workspaces_metadata() {
    let m = Mounted::new();
    let meta = m.ws().join("metadata.json");
    let before = fs::read(&meta).unwrap();
    let f = meta.display();
    let write = tool_call_script(
        &m,
        "write_file",
        &serde_json::json!({"path": "metadata.json", "content": "{}", "overwrite": true}),
    );
    let edit = tool_call_script(
        &m,
        "edit_file",
        &serde_json::json!({"path": "metadata.json", "edits": [{"old": "1536", "new": "7"}]}),
    );
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "grep -c vector_dimension {f}; \
             echo '{{\"vector_dimension\": 999999}}' > {f} 2>&1; \
             echo more >> {f}; truncate -s 0 {f}; \
             /usr/bin/python3 -c \"open('{f}', 'r+').write('x')\" 2>&1 | tail -1; \
             echo; {write}; echo; {edit}; echo; true"
        ),
    );
    let shown = text(&out);
    assert!(
        shown.starts_with("1\n"),
        "the agent could not read it: {shown}"
    );
    assert_eq!(shown.matches("Read-only file system").count(), 4, "{shown}");
    assert_eq!(shown.matches("\"ok\":false").count(), 2, "{shown}");
    assert_eq!(fs::read(&meta).unwrap(), before, "{shown}");
    let d = denials(&m, "fs-engine");
    assert!(
        d.iter()
            .any(|r| r["rule"] == "WORKSPACE-ROOT"
                && r["path"] == "/workspaces/default/metadata.json"),
        "{d:?}"
    );
    // The settings still change the validated way.
    let set = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "setfattr -n user.clawfs.vector_dimension -v 256 {} 2>&1; grep -o '\"vector_dimension\": [0-9]*' {f}",
            m.ws().display()
        ),
    );
    assert!(text(&set).contains("256"), "{}", text(&set));
}

#[test]
fn a_tool_edit_keeps_the_owner_and_needs_write_permission_on_the_file() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = Mounted::new();
    m.open_workspace_to_all();
    let user = TempUser::new("ow");
    // A user's file, shared with the agents' group; and a root file the agent may only read,
    // in a folder it may write.
    let shared = m.ws().join("alice.md");
    let out = user.sh(&format!("echo v1 > {}", shared.display()));
    assert!(out.status.success(), "{}", text(&out));
    std::os::unix::fs::chown(&shared, None, Some(agents_gid())).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o664)).unwrap();
    fs::create_dir(m.ws().join("open")).unwrap();
    fs::set_permissions(m.ws().join("open"), fs::Permissions::from_mode(0o777)).unwrap();
    let ro = m.ws().join("open/ro.md");
    fs::write(&ro, "root v1\n").unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o644)).unwrap();
    let mnt = m.mnt.display();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "exec 3<>{mnt}/tools/call/edit_exact; printf '%s' '{{\"path\":\"alice.md\",\"old\":\"v1\",\"new\":\"v2\"}}' >&3; cat <&3; echo; exec 3>&-
             exec 3<>{mnt}/tools/call/edit_exact; printf '%s' '{{\"path\":\"open/ro.md\",\"old\":\"v1\",\"new\":\"v2\"}}' >&3; cat <&3; echo; exec 3>&-"
        ),
    );
    let out = text(&out);
    let md = fs::metadata(&shared).unwrap();
    assert_eq!(fs::read_to_string(&shared).unwrap(), "v2\n", "{out}");
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o7777),
        (user.uid, agents_gid(), 0o664),
        "{out}"
    );
    assert_eq!(fs::read_to_string(&ro).unwrap(), "root v1\n", "{out}");
    assert_eq!(fs::metadata(&ro).unwrap().uid(), 0);
}

fn agents_gid() -> u32 {
    let out = std::process::Command::new("getent")
        .args(["group", "clawos-agents"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Backups of a shared file belong to the editor whose edit made them: another agent neither
/// sees them nor restores them, by name or by path, and nothing changes when it tries.
#[test]
fn an_agent_cannot_list_or_restore_another_agents_backups() {
    use std::os::unix::fs::PermissionsExt;
    let m = Mounted::new();
    m.open_workspace_to_all();
    let shared = m.ws().join("shared.md");
    fs::write(&shared, "v1 plans\n").unwrap();
    std::os::unix::fs::chown(&shared, None, Some(agents_gid())).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o664)).unwrap();
    let call = |agent: &str, tool: &str, request: serde_json::Value| -> serde_json::Value {
        let out = m.run_agent(agent, &tool_call_script(&m, tool, &request));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
    };
    let r = call(
        "fs-engine",
        "edit_exact",
        serde_json::json!({"path": "shared.md", "old": "v1", "new": "v2"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    let theirs = call(
        "fs-engine",
        "list_backups",
        serde_json::json!({"path": "shared.md"}),
    );
    let name = theirs["backups"][0]["backup"].as_str().unwrap().to_string();
    let held = m.backing(&format!("workspaces/default/.clawfs/backups/{name}"));
    assert_eq!(fs::read_to_string(&held).unwrap(), "v1 plans\n");

    // The other agent may write the file, but the backup is not its own.
    let r = call(
        "build-engine",
        "list_backups",
        serde_json::json!({"path": "shared.md"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["backups"], serde_json::json!([]), "{r}");
    for backup in [
        name.clone(),
        format!("../{name}"),
        format!("../../.clawfs/backups/{name}"),
        "shared.md".to_string(),
    ] {
        let r = call(
            "build-engine",
            "restore_backup",
            serde_json::json!({"path": "shared.md", "backup": backup}),
        );
        assert_eq!(r["error"], "not_found", "{backup}: {r}");
    }
    assert_eq!(fs::read_to_string(&shared).unwrap(), "v2 plans\n");
    assert_eq!(fs::read_to_string(&held).unwrap(), "v1 plans\n");
    // Its owner puts it back.
    let r = call(
        "fs-engine",
        "restore_backup",
        serde_json::json!({"path": "shared.md", "backup": name}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(fs::read_to_string(&shared).unwrap(), "v1 plans\n");
}

/// A tool call, which the kernel checks nothing of, acts with the groups its opener has at the
/// open, never with what the daemon read for the same thread id, uid and gid a moment before:
/// a process given a reused pid (of an earlier process of its uid and gid in more groups)
/// would otherwise read what only that group may.
#[test]
fn a_tool_call_acts_with_the_groups_its_opener_has_now() {
    const UID: u32 = 47_111;
    const GROUP: u32 = 47_113;
    let m = Mounted::new();
    m.open_workspace_to_all();
    let secret = m.ws().join("group-secret.txt");
    fs::write(&secret, "TOPSECRET\n").unwrap();
    std::os::unix::fs::chown(&secret, Some(0), Some(GROUP)).unwrap();
    fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let request = serde_json::json!({"path": "group-secret.txt"});
    let set_groups = |groups: &[libc::gid_t]| {
        // SAFETY: the raw system call changes this thread's groups alone; the slice is valid.
        let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
        assert_eq!(rc, 0, "setgroups: {}", std::io::Error::last_os_error());
    };
    // One thread, one thread id, acting as uid and gid UID: first in the group, then not, as
    // the earlier process and the one given its pid would be.
    let (with_group, without) = std::thread::scope(|s| {
        s.spawn(|| {
            set_groups(&[GROUP]);
            // SAFETY: this thread's filesystem ids alone.
            unsafe {
                libc::setfsgid(UID);
                libc::setfsuid(UID);
            }
            let with_group = tool_call(&m, "read_file", &request);
            set_groups(&[]);
            let refused = fs::read(&secret).unwrap_err();
            assert_eq!(refused.raw_os_error(), Some(libc::EACCES));
            (with_group, tool_call(&m, "read_file", &request))
        })
        .join()
        .unwrap()
    });
    // The harness reaches the file with the group ...
    assert!(with_group.to_string().contains("TOPSECRET"), "{with_group}");
    // ... and the same thread id, uid and gid without it does not.
    assert_ne!(without["ok"], true, "{without}");
    assert!(!without.to_string().contains("TOPSECRET"), "{without}");
    assert_eq!(fs::read(&secret).unwrap(), b"TOPSECRET\n");
}
