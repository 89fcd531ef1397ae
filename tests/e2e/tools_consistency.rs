//! What a tool call changes is what the mount shows, at once: a tool writes the backing store
//! directly, so the daemon drops the kernel's cached names and attributes of what it touched
//! before answering; a two-file request runs when the request file is closed (FLUSH, which
//! close(2) waits for); and what tools create gets the caller's usual modes.

use std::fs;
use std::io::Write;

use crate::common::{tool_call, Mounted};
use serde_json::json;

#[test]
fn a_file_moved_by_a_tool_leaves_its_old_name_at_once() {
    let m = Mounted::new();
    fs::write(m.ws().join("a.md"), "a\n").unwrap();
    assert!(m.ws().join("a.md").exists()); // cached by the kernel now
    let r = tool_call(&m, "move", &json!({"from": "a.md", "to": "b.md"}));
    assert_eq!(r["ok"], true, "{r}");
    assert!(
        !m.ws().join("a.md").exists(),
        "a.md still visible through the mount after the move"
    );
}

#[test]
fn a_file_created_by_a_tool_is_visible_at_once() {
    let m = Mounted::new();
    assert!(!m.ws().join("new.md").exists()); // a negative entry now
    let r = tool_call(&m, "write_file", &json!({"path": "new.md", "content": "x"}));
    assert_eq!(r["ok"], true, "{r}");
    assert!(
        m.ws().join("new.md").exists(),
        "new.md invisible through the mount after write_file created it"
    );
}

/// Data loss: an editor (or `tail -f`) keeps the file open; a tool edits it; an append through
/// the mount right after goes to the replaced inode's backing file and is lost.
#[test]
fn a_write_through_the_mount_after_a_tool_edit_is_kept() {
    let m = Mounted::new();
    let path = m.ws().join("e.md");
    fs::write(&path, "one\n").unwrap();
    let held = fs::File::open(&path).unwrap();
    let r = tool_call(
        &m,
        "edit_exact",
        &json!({"path": "e.md", "old": "one", "new": "two"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"appended\n")
        .unwrap();
    drop(held);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "two\nappended\n",
        "the append was lost"
    );
}

#[test]
fn the_response_exists_as_soon_as_the_request_is_closed() {
    let m = Mounted::new();
    // Four writers at once, 500 requests each: the window is narrow on an idle machine.
    let missing: usize = std::thread::scope(|s| {
        (0..4)
            .map(|t| {
                let m = &m;
                s.spawn(move || {
                    (0..500)
                        .filter(|i| {
                            fs::write(
                                m.path(&format!("tools/requests/r{t}-{i}.json")),
                                br#"{"tool": "list_allowed"}"#,
                            )
                            .unwrap();
                            fs::read(m.path(&format!("tools/responses/r{t}-{i}.json"))).is_err()
                        })
                        .count()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum()
    });
    assert_eq!(
        missing, 0,
        "{missing} of 2000 responses were missing right after close"
    );
}

/// Files and folders a tool creates are 0666/0777 (the daemon runs with umask 0 and the tools
/// create with 0o666/0o777), where `touch`/`mkdir` through the mount give 0644/0755 under the
/// caller's umask 022: any local user may then rewrite what an agent wrote.
#[test]
fn what_a_tool_creates_is_not_world_writable() {
    use std::os::unix::fs::PermissionsExt;
    let m = Mounted::new();
    for (tool, req) in [
        ("write_file", json!({"path": "w/new.md", "content": "x"})),
        ("create_folder", json!({"path": "f"})),
    ] {
        let r = tool_call(&m, tool, &req);
        assert_eq!(r["ok"], true, "{r}");
    }
    for p in ["w", "w/new.md", "f"] {
        let mode = fs::metadata(m.ws().join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o002, 0, "{p} is world-writable: {mode:o}");
    }
}

/// The backup of a 0600 file is 0666 in the store: readable and writable by anyone who can
/// reach the store's workspace folder.
#[test]
fn a_backup_keeps_the_files_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let m = Mounted::new();
    let path = m.ws().join("s.md");
    fs::write(&path, "secret\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    let r = tool_call(
        &m,
        "edit_exact",
        &json!({"path": "s.md", "old": "secret", "new": "public"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    let backup = m
        .backing("workspaces/default")
        .join(r["backup"].as_str().unwrap());
    let mode = fs::metadata(&backup).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the backup of a 0600 file is {mode:o}");
}
