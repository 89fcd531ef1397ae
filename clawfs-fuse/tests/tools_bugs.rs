//! Known bugs of the agent tools as served by the mount, each a test that fails today. They are
//! `#[ignore]`d so the suite stays green; run them with
//! `cargo test -p clawfs-fuse --test tools_bugs -- --ignored`, and drop the `ignore` with the fix.
//!
//! Cause of the first three: a tool call changes the backing store directly (rename of a temp
//! file over the target, rename into the trash, create), behind the kernel's back, and the daemon
//! does not invalidate the kernel's entry/attribute caches of the names it touched, so the mount
//! shows the old tree (and the old inode) until the entry timeout expires (~1 s).
//! Cause of the last: a two-file request runs at RELEASE, which the kernel sends asynchronously
//! after close(2) has returned, so `responses/<id>.json` may not exist yet when the writer reads it.

mod common;

use std::fs;
use std::io::Write;

use common::{tool_call, Mounted};
use serde_json::json;

#[test]
#[ignore = "bug: tool changes do not invalidate the kernel's entry cache"]
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
#[ignore = "bug: tool changes do not invalidate the kernel's negative entries"]
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
#[ignore = "bug: a write after a tool edit goes to the replaced file"]
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
#[ignore = "bug: the request runs at RELEASE, after close(2) has returned"]
fn the_response_exists_as_soon_as_the_request_is_closed() {
    let m = Mounted::new();
    let mut missing = 0;
    for i in 0..300 {
        fs::write(
            m.path(&format!("tools/requests/r{i}.json")),
            br#"{"tool": "list_allowed"}"#,
        )
        .unwrap();
        if fs::read(m.path(&format!("tools/responses/r{i}.json"))).is_err() {
            missing += 1;
        }
    }
    assert_eq!(
        missing, 0,
        "{missing} of 300 responses were missing right after close"
    );
}
