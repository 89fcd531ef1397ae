//! The agent tool set end to end through a real mount (docs/tools.md): every tool's success and
//! failure path in both interfaces (`tools/call/<tool>` and `tools/requests` → `responses`),
//! concurrent `apply_patch` on one base, a patch that does not apply, path escapes of every kind,
//! and trash → restore.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::common::{at_once, tool_call, tool_request, Mounted};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The two ways of calling a tool.
#[derive(Clone, Copy, Debug)]
enum Iface {
    /// `tools/call/<tool>`, one descriptor.
    Call,
    /// `tools/requests/<id>.json` → `tools/responses/<id>.json`.
    Files,
}

fn call(m: &Mounted, iface: Iface, tool: &str, request: Value) -> Value {
    match iface {
        Iface::Call => tool_call(m, tool, &request),
        Iface::Files => tool_request(m, tool, &request),
    }
}

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

const PLAN: &str = "# Plan\n\nintro\n## Tasks\n- TODO: write tests\n- TODO: docs\n## Notes\nend\n";

/// A workspace with a note, two notes of the same name, a binary file and a long file.
fn fixture(m: &Mounted) {
    let ws = m.ws();
    fs::create_dir_all(ws.join("Projects")).unwrap();
    fs::create_dir_all(ws.join("a")).unwrap();
    fs::create_dir_all(ws.join("b")).unwrap();
    fs::write(ws.join("Projects/Plan.md"), PLAN).unwrap();
    fs::write(ws.join("a/dup.md"), "# Dup A\n").unwrap();
    fs::write(ws.join("b/dup.md"), "# Dup B\n").unwrap();
    fs::write(ws.join("bin.dat"), b"\x00\x01\x02binary\x00\xff").unwrap();
    let big: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    fs::write(ws.join("big.txt"), big).unwrap();
}

/// Records which tools were seen succeeding and failing.
#[derive(Default)]
struct Seen {
    ok: BTreeSet<String>,
    failed: BTreeSet<String>,
}

impl Seen {
    /// A call that must succeed.
    fn ok(&mut self, m: &Mounted, iface: Iface, tool: &str, request: Value) -> Value {
        let r = call(m, iface, tool, request.clone());
        assert_eq!(r["ok"], true, "{iface:?} {tool} {request}: {r}");
        self.ok.insert(tool.to_string());
        r
    }

    /// A call that must fail with `code`, with a message.
    fn fails(
        &mut self,
        m: &Mounted,
        iface: Iface,
        tool: &str,
        request: Value,
        code: &str,
    ) -> Value {
        let r = call(m, iface, tool, request.clone());
        assert_eq!(r["ok"], false, "{iface:?} {tool} {request}: {r}");
        assert_eq!(r["error"], code, "{iface:?} {tool} {request}: {r}");
        assert!(
            r["message"].as_str().is_some_and(|s| !s.is_empty()),
            "{iface:?} {tool}: no message: {r}"
        );
        self.failed.insert(tool.to_string());
        r
    }
}

fn every_tool(iface: Iface) {
    let m = Mounted::new();
    fixture(&m);
    let ws = m.ws();
    let mut s = Seen::default();

    // resolve
    let r = s.ok(&m, iface, "resolve", json!({"title": "plan"}));
    assert_eq!(r["resolved_path"], "Projects/Plan.md");
    assert_eq!(r["matched_by"], "title");
    let r = s.ok(&m, iface, "resolve", json!({"path": "projects/PLAN.md"}));
    assert_eq!(r["resolved_path"], "Projects/Plan.md");
    let r = s.fails(
        &m,
        iface,
        "resolve",
        json!({"title": "dup"}),
        "multiple_matches",
    );
    assert_eq!(r["candidates"], json!(["a/dup.md", "b/dup.md"]));
    s.fails(
        &m,
        iface,
        "resolve",
        json!({"title": "nothing"}),
        "not_found",
    );

    // info
    let r = s.ok(&m, iface, "info", json!({"path": "Projects/Plan.md"}));
    assert_eq!(r["lines"], 8);
    assert_eq!(r["bytes"], PLAN.len());
    assert_eq!(r["sha256"], sha256(PLAN.as_bytes()));
    assert!(r["mtime"].as_i64().unwrap() > 0);
    s.fails(
        &m,
        iface,
        "info",
        json!({"path": "missing.md"}),
        "not_found",
    );

    // outline
    let r = s.ok(&m, iface, "outline", json!({"path": "Projects/Plan.md"}));
    assert_eq!(
        r["headings"],
        json!([{"level": 1, "line": 1, "text": "Plan"}, {"level": 2, "line": 4, "text": "Tasks"},
               {"level": 2, "line": 7, "text": "Notes"}])
    );
    s.fails(&m, iface, "outline", json!({"path": "bin.dat"}), "not_text");

    // search
    let r = s.ok(
        &m,
        iface,
        "search",
        json!({"path": "Projects/Plan.md", "pattern": "TODO", "context": 1, "max_hits": 1}),
    );
    assert_eq!(r["total_hits"], 2);
    assert_eq!(r["truncated"], true);
    assert_eq!(r["matches"][0]["line"], 5);
    assert_eq!(r["matches"][0]["context_before"], json!(["## Tasks"]));
    s.fails(
        &m,
        iface,
        "search",
        json!({"path": "Projects/Plan.md", "pattern": "(", "regex": true}),
        "invalid_args",
    );

    // read_range, head, tail
    let r = s.ok(
        &m,
        iface,
        "read_range",
        json!({"path": "Projects/Plan.md", "start": 4, "end": 5}),
    );
    assert_eq!(r["content"], "## Tasks\n- TODO: write tests\n");
    assert_eq!(r["next_start"], 6);
    s.fails(
        &m,
        iface,
        "read_range",
        json!({"path": "Projects/Plan.md", "start": 0, "end": 3}),
        "invalid_args",
    );
    let r = s.ok(
        &m,
        iface,
        "head",
        json!({"path": "Projects/Plan.md", "lines": 1}),
    );
    assert_eq!(r["content"], "# Plan\n");
    s.fails(&m, iface, "head", json!({"path": "Projects"}), "not_a_file");
    let r = s.ok(
        &m,
        iface,
        "tail",
        json!({"path": "Projects/Plan.md", "lines": 2}),
    );
    assert_eq!(r["content"], "## Notes\nend\n");
    s.fails(
        &m,
        iface,
        "tail",
        json!({"path": "Projects/Plan.md", "lines": "x"}),
        "invalid_args",
    );

    // apply_patch
    let base = sha256(PLAN.as_bytes());
    let patch = "--- a/Projects/Plan.md\n+++ b/Projects/Plan.md\n@@ -5,2 +5,2 @@\n-- TODO: write tests\n+- DONE: write tests\n - TODO: docs\n";
    let r = s.ok(
        &m,
        iface,
        "apply_patch",
        json!({"path": "Projects/Plan.md", "base_sha256": base, "patch": patch}),
    );
    let patched = PLAN.replace("- TODO: write tests", "- DONE: write tests");
    assert_eq!(
        fs::read_to_string(ws.join("Projects/Plan.md")).unwrap(),
        patched
    );
    assert_eq!(r["sha256"], sha256(patched.as_bytes()));
    let backup = r["backup"].as_str().unwrap();
    assert_eq!(
        fs::read_to_string(m.backing("workspaces/default").join(backup)).unwrap(),
        PLAN,
        "the backup holds the old text"
    );
    // The same patch again, with its now stale base: already applied, nothing written.
    s.fails(
        &m,
        iface,
        "apply_patch",
        json!({"path": "Projects/Plan.md", "base_sha256": base, "patch": patch}),
        "already_applied",
    );
    // Another patch against the stale base: the file changed since it was read.
    let other = "@@ -1 +1 @@\n-# Plan\n+# The Plan\n";
    let r = s.fails(
        &m,
        iface,
        "apply_patch",
        json!({"path": "Projects/Plan.md", "base_sha256": base, "patch": other}),
        "hash_mismatch",
    );
    assert_eq!(r["expected"], base);
    assert_eq!(r["actual"], sha256(patched.as_bytes()));
    assert_eq!(
        fs::read_to_string(ws.join("Projects/Plan.md")).unwrap(),
        patched
    );

    // list_backups, restore_backup: the patch's backup, put back (and the restore undone).
    let r = s.ok(
        &m,
        iface,
        "list_backups",
        json!({"path": "Projects/Plan.md"}),
    );
    let name = r["backups"][0]["backup"].as_str().unwrap().to_string();
    s.fails(
        &m,
        iface,
        "list_backups",
        json!({"path": "Projects"}),
        "not_a_file",
    );
    let r = s.ok(
        &m,
        iface,
        "restore_backup",
        json!({"path": "Projects/Plan.md", "backup": name, "base_sha256": sha256(patched.as_bytes())}),
    );
    assert_eq!(
        fs::read_to_string(ws.join("Projects/Plan.md")).unwrap(),
        PLAN
    );
    assert_eq!(r["sha256"], base);
    s.fails(
        &m,
        iface,
        "restore_backup",
        json!({"path": "Projects/Plan.md", "backup": "../Plan.md"}),
        "not_found",
    );
    let undo = s.ok(
        &m,
        iface,
        "list_backups",
        json!({"path": "Projects/Plan.md"}),
    )["backups"][0]["backup"]
        .as_str()
        .unwrap()
        .to_string();
    s.ok(
        &m,
        iface,
        "restore_backup",
        json!({"path": "Projects/Plan.md", "backup": undo}),
    );
    assert_eq!(
        fs::read_to_string(ws.join("Projects/Plan.md")).unwrap(),
        patched
    );

    // edit_exact
    let base = sha256(patched.as_bytes());
    let r = s.ok(
        &m,
        iface,
        "edit_exact",
        json!({"path": "Projects/Plan.md", "base_sha256": base, "old": "intro", "new": "Intro"}),
    );
    assert_eq!(r["replacements"], 1);
    let edited = patched.replace("intro", "Intro");
    assert_eq!(
        fs::read_to_string(ws.join("Projects/Plan.md")).unwrap(),
        edited
    );
    s.fails(
        &m,
        iface,
        "edit_exact",
        json!({"path": "Projects/Plan.md", "old": "- ", "new": "* "}),
        "multiple_matches",
    );
    s.fails(
        &m,
        iface,
        "edit_exact",
        json!({"path": "Projects/Plan.md", "old": "absent", "new": "x"}),
        "not_found",
    );
    assert_eq!(
        fs::read_to_string(ws.join("Projects/Plan.md")).unwrap(),
        edited
    );

    // read_file
    let r = s.ok(
        &m,
        iface,
        "read_file",
        json!({"path": "big.txt", "max_chars": 1000, "line_numbers": true}),
    );
    assert_eq!(r["truncated"], true);
    assert!(r["content"].as_str().unwrap().len() <= 1000);
    assert!(r["content"]
        .as_str()
        .unwrap()
        .starts_with("     1\tline 1\n"));
    assert!(r["note"].as_str().unwrap().contains("start"), "{r}");
    s.fails(
        &m,
        iface,
        "read_file",
        json!({"path": "bin.dat"}),
        "not_text",
    );

    // read_multiple_files
    let r = s.ok(
        &m,
        iface,
        "read_multiple_files",
        json!({"paths": ["a/dup.md", "nope.md"], "line_numbers": false}),
    );
    assert_eq!(r["files"][0]["content"], "# Dup A\n");
    assert_eq!(r["files"][1]["error"], "not_found");
    s.fails(
        &m,
        iface,
        "read_multiple_files",
        json!({"paths": vec!["a/dup.md"; 21]}),
        "too_large",
    );

    // write_file
    let r = s.ok(
        &m,
        iface,
        "write_file",
        json!({"path": "new/deep/n.md", "content": "hello\n"}),
    );
    assert_eq!(r["bytes"], 6);
    assert_eq!(r["created"], true);
    assert_eq!(
        fs::read_to_string(ws.join("new/deep/n.md")).unwrap(),
        "hello\n"
    );
    s.fails(
        &m,
        iface,
        "write_file",
        json!({"path": "new/deep/n.md", "content": "x", "overwrite": false}),
        "exists",
    );

    // edit_file: a dry run changes nothing, then the real edit
    let req = json!({"path": "new/deep/n.md", "insert": {"line": 0, "text": "top"},
                     "edits": [{"old": "hello", "new": "world"}]});
    let mut dry = req.clone();
    dry["dry_run"] = json!(true);
    let r = s.ok(&m, iface, "edit_file", dry);
    assert!(r["diff"].as_str().unwrap().contains("+top"), "{r}");
    assert_eq!(
        fs::read_to_string(ws.join("new/deep/n.md")).unwrap(),
        "hello\n"
    );
    s.ok(&m, iface, "edit_file", req);
    assert_eq!(
        fs::read_to_string(ws.join("new/deep/n.md")).unwrap(),
        "top\nworld\n"
    );
    s.fails(
        &m,
        iface,
        "edit_file",
        json!({"path": "new/deep/n.md", "edits": [{"old": "absent", "new": "x"}]}),
        "not_found",
    );

    // move
    s.ok(
        &m,
        iface,
        "move",
        json!({"from": "new/deep/n.md", "to": "moved/here/n.md"}),
    );
    at_once("the moved file leaves its old path", || {
        !ws.join("new/deep/n.md").exists()
    });
    assert_eq!(
        fs::read_to_string(ws.join("moved/here/n.md")).unwrap(),
        "top\nworld\n"
    );
    s.fails(
        &m,
        iface,
        "move",
        json!({"from": "a/dup.md", "to": "b/dup.md"}),
        "exists",
    );
    assert_eq!(
        fs::read_to_string(ws.join("b/dup.md")).unwrap(),
        "# Dup B\n"
    );

    // delete, list_trash, restore
    let r = s.ok(&m, iface, "delete", json!({"path": "moved/here/n.md"}));
    let id = r["trash_id"].as_str().unwrap().to_string();
    at_once("the deleted file is gone", || {
        !ws.join("moved/here/n.md").exists()
    });
    s.fails(
        &m,
        iface,
        "delete",
        json!({"path": "moved/here/n.md"}),
        "not_found",
    );
    let r = s.ok(&m, iface, "list_trash", json!({}));
    assert!(
        r["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["trash_id"] == id.as_str()),
        "{r}"
    );
    s.fails(
        &m,
        iface,
        "list_trash",
        json!({"max_results": "x"}),
        "invalid_args",
    );
    let r = s.ok(&m, iface, "restore", json!({"trash_id": id}));
    assert_eq!(r["path"], "moved/here/n.md");
    at_once("the restored file is back", || {
        ws.join("moved/here/n.md").exists()
    });
    assert_eq!(
        fs::read_to_string(ws.join("moved/here/n.md")).unwrap(),
        "top\nworld\n"
    );
    s.fails(&m, iface, "restore", json!({"trash_id": id}), "not_found");

    // empty_trash: for good
    s.ok(
        &m,
        iface,
        "write_file",
        json!({"path": "gone.md", "content": "x"}),
    );
    let r = s.ok(&m, iface, "delete", json!({"path": "gone.md"}));
    let id = r["trash_id"].as_str().unwrap().to_string();
    let r = s.ok(&m, iface, "empty_trash", json!({"trash_id": id}));
    assert_eq!(r["removed"], json!([id]), "{r}");
    s.fails(&m, iface, "restore", json!({"trash_id": id}), "not_found");
    s.fails(
        &m,
        iface,
        "empty_trash",
        json!({"trash_id": id}),
        "not_found",
    );
    s.fails(
        &m,
        iface,
        "empty_trash",
        json!({"trash_id": "../x"}),
        "invalid_args",
    );

    // create_folder
    let r = s.ok(&m, iface, "create_folder", json!({"path": "f/g/h"}));
    assert_eq!(r["created"], true);
    assert!(ws.join("f/g/h").is_dir());
    let r = s.ok(&m, iface, "create_folder", json!({"path": "f/g/h"}));
    assert_eq!(r["created"], false);
    s.fails(
        &m,
        iface,
        "create_folder",
        json!({"path": "Projects/Plan.md"}),
        "exists",
    );

    // get_file_info
    let r = s.ok(&m, iface, "get_file_info", json!({"path": "Projects"}));
    assert_eq!(r["type"], "folder");
    let r = s.ok(&m, iface, "get_file_info", json!({"path": "a/dup.md"}));
    assert_eq!(r["type"], "file");
    assert_eq!(r["size"], 8);
    s.fails(
        &m,
        iface,
        "get_file_info",
        json!({"path": "zzz"}),
        "not_found",
    );

    // search_files
    let r = s.ok(
        &m,
        iface,
        "search_files",
        json!({"pattern": "^# Dup", "regex": true, "include": "*.md"}),
    );
    let paths: Vec<&str> = r["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["a/dup.md", "b/dup.md"], "{r}");
    let r = s.ok(
        &m,
        iface,
        "search_files",
        json!({"pattern": "Dup", "exclude": "b/**"}),
    );
    assert_eq!(r["matches"].as_array().unwrap().len(), 1, "{r}");
    s.fails(
        &m,
        iface,
        "search_files",
        json!({"pattern": "(", "regex": true}),
        "invalid_args",
    );

    // find_files, read_media_file
    let r = s.ok(
        &m,
        iface,
        "find_files",
        json!({"pattern": "DUP", "excludePatterns": ["b"]}),
    );
    let found: Vec<&str> = r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(found, ["a/dup.md"], "{r}");
    fs::write(ws.join("dot.gif"), b"GIF89a\x01\x00\x01\x00").unwrap();
    let r = s.ok(&m, iface, "read_media_file", json!({"path": "dot.gif"}));
    assert_eq!(
        (r["mime_type"].as_str(), r["kind"].as_str()),
        (Some("image/gif"), Some("image"))
    );
    s.fails(
        &m,
        iface,
        "read_media_file",
        json!({"path": ".git/x.png"}),
        "protected",
    );
    s.fails(
        &m,
        iface,
        "find_files",
        json!({"pattern": "*[z"}),
        "invalid_args",
    );

    // list_files
    let r = s.ok(&m, iface, "list_files", json!({"glob": "*.MD"}));
    let listed: BTreeSet<&str> = r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for p in [
        "Projects/Plan.md",
        "a/dup.md",
        "b/dup.md",
        "moved/here/n.md",
    ] {
        assert!(listed.contains(p), "{p} not in {r}");
    }
    s.fails(
        &m,
        iface,
        "list_files",
        json!({"path": "a/dup.md"}),
        "not_a_directory",
    );

    // directory_tree
    let r = s.ok(
        &m,
        iface,
        "directory_tree",
        json!({"path": "f", "depth": 1}),
    );
    assert_eq!(r["tree"]["children"][0]["name"], "g", "{r}");
    assert!(
        r["tree"]["children"][0].get("children").is_none()
            || r["tree"]["children"][0]["children"]
                .as_array()
                .unwrap()
                .is_empty(),
        "depth 1 stops below g: {r}"
    );
    s.fails(
        &m,
        iface,
        "directory_tree",
        json!({"path": "bin.dat"}),
        "not_a_directory",
    );

    // semantic_search (the index follows in the background: the call succeeds either way)
    let r = s.ok(
        &m,
        iface,
        "semantic_search",
        json!({"query": "notes", "mode": "text"}),
    );
    assert!(r["hits"].is_array(), "{r}");
    s.fails(
        &m,
        iface,
        "semantic_search",
        json!({"query": "x", "mode": "fuzzy"}),
        "invalid_args",
    );

    // list_allowed
    let r = s.ok(&m, iface, "list_allowed", json!({}));
    assert!(r["protected"].to_string().contains(".git"), "{r}");
    s.fails(
        &m,
        iface,
        "list_allowed",
        json!({"bogus": 1}),
        "invalid_args",
    );

    // Every tool was seen both ways.
    let all: BTreeSet<String> = clawfs_agent_tools::TOOL_NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(s.ok, all, "tools never seen succeeding");
    assert_eq!(s.failed, all, "tools never seen failing");

    // Protocol errors are answers too.
    match iface {
        Iface::Call => assert_eq!(
            fs::File::open(m.path("tools/call/no_such_tool"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOENT)
        ),
        Iface::Files => {
            let r = call(&m, iface, "no_such_tool", json!({}));
            assert_eq!(r["error"], "unknown_tool", "{r}");
        }
    }
    let r = call(
        &m,
        iface,
        "info",
        json!({"path": "a/dup.md", "workspace": "nope"}),
    );
    assert_eq!(r["error"], "not_found", "{r}");
}

#[test]
fn every_tool_through_call_files() {
    every_tool(Iface::Call);
}

#[test]
fn every_tool_through_request_and_response_files() {
    every_tool(Iface::Files);
}

#[test]
fn the_two_interfaces_give_the_same_answers() {
    let m = Mounted::new();
    fixture(&m);
    for (tool, req) in [
        ("info", json!({"path": "Projects/Plan.md"})),
        ("outline", json!({"path": "Projects/Plan.md"})),
        (
            "search",
            json!({"path": "Projects/Plan.md", "pattern": "TODO"}),
        ),
        ("list_allowed", json!({})),
        ("resolve", json!({"title": "dup"})),
        ("info", json!({"path": "../x"})),
    ] {
        assert_eq!(
            tool_call(&m, tool, &req),
            tool_request(&m, tool, &req),
            "{tool} {req}"
        );
    }
}

/// Writes both requests, then makes both calls run at once (the call runs on the first read).
#[test]
fn concurrent_apply_patch_on_one_base_one_wins() {
    use std::io::{Read, Write};
    let m = Mounted::new();
    let ws = m.ws();
    let original: String = (1..=200).map(|i| format!("line {i}\n")).collect();
    let path = ws.join("race.md");
    let backups = m.backing("workspaces/default/.clawfs/backups");
    for round in 0..10 {
        fs::write(&path, &original).unwrap();
        let base = sha256(original.as_bytes());
        // Two edits of the same lines, three hunks each, so a partial write would show.
        let patch_for = |who: &str| {
            format!(
                "@@ -10,1 +10,1 @@\n-line 10\n+{who} 10\n@@ -100,1 +100,1 @@\n-line 100\n+{who} 100\n@@ -190,1 +190,1 @@\n-line 190\n+{who} 190\n"
            )
        };
        let result_for = |who: &str| {
            original
                .replace("line 10\n", &format!("{who} 10\n"))
                .replace("line 100\n", &format!("{who} 100\n"))
                .replace("line 190\n", &format!("{who} 190\n"))
        };
        let mut files: Vec<fs::File> = ["alice", "bob"]
            .iter()
            .map(|who| {
                let mut f = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(m.path("tools/call/apply_patch"))
                    .unwrap();
                let req = json!({"path": "race.md", "base_sha256": base, "patch": patch_for(who)});
                f.write_all(req.to_string().as_bytes()).unwrap();
                f
            })
            .collect();
        // A reader that watches the file while the patches run: it never sees a mixture.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let stop = stop.clone();
            let path = path.clone();
            let allowed = [original.clone(), result_for("alice"), result_for("bob")];
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let now = fs::read_to_string(&path).unwrap();
                    assert!(allowed.contains(&now), "a partial file was seen: {now}");
                    reads += 1;
                }
                reads
            })
        };
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let answers: Vec<Value> = files
            .drain(..)
            .map(|mut f| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut out = String::new();
                    f.read_to_string(&mut out).unwrap();
                    serde_json::from_str::<Value>(&out).unwrap()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        watcher.join().unwrap();
        let winners: Vec<usize> = (0..2).filter(|&i| answers[i]["ok"] == true).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one wins: {answers:?}"
        );
        let winner = winners[0];
        let loser = 1 - winner;
        assert_eq!(answers[loser]["error"], "hash_mismatch", "{answers:?}");
        assert_eq!(answers[loser]["expected"], base.as_str());
        let who = ["alice", "bob"][winner];
        let now = fs::read_to_string(&path).unwrap();
        assert_eq!(
            now,
            result_for(who),
            "round {round}: the winner's patch, whole"
        );
        assert_eq!(answers[loser]["actual"], sha256(now.as_bytes()));
        let backup = answers[winner]["backup"].as_str().unwrap();
        assert_eq!(
            fs::read_to_string(m.backing("workspaces/default").join(backup)).unwrap(),
            original,
            "a backup of the base exists"
        );
    }
    assert!(fs::read_dir(&backups).unwrap().count() >= 1);
}

#[test]
fn a_patch_that_does_not_match_changes_nothing() {
    let m = Mounted::new();
    fixture(&m);
    let path = m.ws().join("Projects/Plan.md");
    let before = fs::read(&path).unwrap();
    let base = sha256(&before);
    let backups = m.backing("workspaces/default/.clawfs/backups");
    let backups_before = fs::read_dir(&backups).map(|d| d.count()).unwrap_or(0);
    for patch in [
        // Context that is not in the file.
        "@@ -4,2 +4,2 @@\n ## Chores\n-- TODO: write tests\n+- DONE\n",
        // First hunk fine, second does not match: none is applied.
        "@@ -1,1 +1,1 @@\n-# Plan\n+# The Plan\n@@ -8,1 +8,1 @@\n-the end\n+THE END\n",
        // Not a diff at all.
        "this is not a diff\n",
    ] {
        for iface in [Iface::Call, Iface::Files] {
            let r = call(
                &m,
                iface,
                "apply_patch",
                json!({"path": "Projects/Plan.md", "base_sha256": base, "patch": patch}),
            );
            assert_eq!(r["error"], "patch_failed", "{iface:?} {patch:?}: {r}");
            assert!(!r["details"].is_null(), "{r}");
            assert_eq!(fs::read(&path).unwrap(), before, "the file is unchanged");
        }
    }
    let backups_after = fs::read_dir(&backups).map(|d| d.count()).unwrap_or(0);
    assert_eq!(
        backups_before, backups_after,
        "no backup for a refused patch"
    );
}

/// Every way out of the workspace, through every kind of tool.
#[test]
fn path_escapes_are_refused() {
    let m = Mounted::new();
    fixture(&m);
    let ws = m.ws();
    // Something to reach for: another workspace, the namespace, the host.
    fs::create_dir(m.path("workspaces/other")).unwrap();
    fs::write(m.path("workspaces/other/secret.md"), "other secret\n").unwrap();
    let host = m.dir.path().join("host-secret.md");
    fs::write(&host, "host secret\n").unwrap();
    // Symlinks created through the mount.
    let links = [
        ("to-host", host.to_str().unwrap().to_string()),
        ("to-etc", "/etc".to_string()),
        ("to-other", "../other".to_string()),
        ("to-ns", "../..".to_string()),
        (
            "to-other-abs",
            m.path("workspaces/other").to_str().unwrap().to_string(),
        ),
    ];
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, ws.join(name)).unwrap();
    }
    fs::create_dir(ws.join("deep")).unwrap();
    std::os::unix::fs::symlink("../../other/secret.md", ws.join("deep/up.md")).unwrap();

    let mnt = m.mnt.to_str().unwrap();
    let escapes: Vec<String> = vec![
        "../other/secret.md".into(),
        "a/../../other/secret.md".into(),
        "Projects/../../../../../etc/passwd".into(),
        "/../other/secret.md".into(),
        "/workspaces/default/../other/secret.md".into(),
        format!("{mnt}/workspaces/default/../other/secret.md"),
        format!("{mnt}/workspaces/default/../../workspaces/other/secret.md"),
        "to-host".into(),
        "to-etc/passwd".into(),
        "to-other/secret.md".into(),
        "to-ns/workspaces/other/secret.md".into(),
        "to-other-abs/secret.md".into(),
        "deep/up.md".into(),
    ];
    // Read tools fall back to a case-insensitive match: it must not lead out either.
    for iface in [Iface::Call, Iface::Files] {
        let r = call(
            &m,
            iface,
            "read_file",
            json!({"path": "TO-OTHER/secret.md"}),
        );
        assert_eq!(r["error"], "denied", "{r}");
    }
    let secret = |r: &Value| {
        let s = r.to_string();
        s.contains("other secret") || s.contains("host secret") || s.contains("root:x:0")
    };
    let check = |m: &Mounted, iface: Iface, tool: &str, req: Value| {
        let r = call(m, iface, tool, req.clone());
        assert_eq!(r["ok"], false, "{iface:?} {tool} {req}: {r}");
        let code = r["error"].as_str().unwrap();
        // Absolute paths mean the workspace root, so some escapes are merely missing there.
        assert!(
            ["denied", "not_found", "not_a_directory", "not_a_file"].contains(&code),
            "{iface:?} {tool} {req}: {r}"
        );
        assert!(!secret(&r), "{iface:?} {tool} {req} leaked: {r}");
    };
    for iface in [Iface::Call, Iface::Files] {
        for p in &escapes {
            for (tool, req) in [
                ("info", json!({"path": p})),
                ("read_file", json!({"path": p})),
                ("read_range", json!({"path": p, "start": 1, "end": 5})),
                ("search", json!({"path": p, "pattern": "secret"})),
                ("search_files", json!({"path": p, "pattern": "secret"})),
                ("list_files", json!({"path": p})),
                ("get_file_info", json!({"path": p})),
                ("write_file", json!({"path": p, "content": "pwned"})),
                (
                    "edit_exact",
                    json!({"path": p, "old": "secret", "new": "pwned"}),
                ),
                ("move", json!({"from": "a/dup.md", "to": p})),
                ("create_folder", json!({"path": format!("{p}/x")})),
            ] {
                check(&m, iface, tool, req);
            }
            // Deleting or moving a link itself is fine; going through one or through `..` is not.
            if !links.iter().any(|(name, _)| name == p) && p != "deep/up.md" {
                for (tool, req) in [
                    ("delete", json!({"path": p})),
                    ("move", json!({"from": p, "to": "stolen.md"})),
                ] {
                    check(&m, iface, tool, req);
                }
            }
        }
        // Links out and `..` are `denied`, not merely missing.
        for p in [
            "../other/secret.md",
            "to-host",
            "to-other/secret.md",
            "deep/up.md",
        ] {
            let r = call(&m, iface, "read_file", json!({"path": p}));
            assert_eq!(r["error"], "denied", "{iface:?} {p}: {r}");
        }
        // Listings and searches of the workspace never follow the links out.
        let r = call(&m, iface, "search_files", json!({"pattern": "secret"}));
        assert_eq!(r["ok"], true, "{r}");
        assert!(!secret(&r), "{r}");
        let r = call(&m, iface, "directory_tree", json!({"depth": 10}));
        assert!(!r.to_string().contains("secret.md"), "{r}");
        let r = call(&m, iface, "read_multiple_files", json!({"paths": escapes}));
        assert!(!secret(&r), "{r}");
        // Protected names, in any case and at any depth, for readers and writers.
        for p in [
            ".git/config",
            ".GIT/config",
            "Projects/.Obsidian/app.json",
            ".smarthole/x",
            ".SmartHole/x",
            ".clawfs/backups",
            ".CLAWFS-anything/x",
            "a/.clawfsfoo/x",
        ] {
            for (tool, req) in [
                ("info", json!({"path": p})),
                ("write_file", json!({"path": p, "content": "x"})),
                ("create_folder", json!({"path": p})),
                ("move", json!({"from": "a/dup.md", "to": p})),
                ("list_files", json!({"path": p})),
            ] {
                let r = call(&m, iface, tool, req.clone());
                assert_eq!(r["error"], "protected", "{iface:?} {tool} {req}: {r}");
            }
        }
    }
    // Nothing outside was touched.
    assert_eq!(
        fs::read_to_string(m.path("workspaces/other/secret.md")).unwrap(),
        "other secret\n"
    );
    assert_eq!(fs::read_to_string(&host).unwrap(), "host secret\n");
    assert_eq!(
        fs::read_to_string(ws.join("a/dup.md")).unwrap(),
        "# Dup A\n"
    );
    assert!(!ws.join("stolen.md").exists());
    for name in [
        ".git",
        ".GIT",
        ".smarthole",
        ".SmartHole",
        ".CLAWFS-anything",
    ] {
        assert!(
            !Path::new(&ws.join(name)).exists(),
            "{name} was created in the workspace"
        );
    }
}

#[test]
fn trash_and_restore_round_trip() {
    let m = Mounted::new();
    fixture(&m);
    let ws = m.ws();
    let before = crate::common::tree(&ws.join("Projects"));
    let plan = fs::read(ws.join("Projects/Plan.md")).unwrap();
    for iface in [Iface::Call, Iface::Files] {
        // A folder and a file go to the trash and come back whole.
        let folder = call(&m, iface, "delete", json!({"path": "Projects"}));
        assert_eq!(folder["ok"], true, "{folder}");
        assert_eq!(folder["type"], "folder");
        let file = call(&m, iface, "delete", json!({"path": "a/dup.md"}));
        assert_eq!(file["ok"], true, "{file}");
        at_once("the deleted items are gone", || {
            !ws.join("Projects").exists() && !ws.join("a/dup.md").exists()
        });
        let trash = call(&m, iface, "list_trash", json!({}));
        let ids: Vec<&str> = trash["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["trash_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [
                file["trash_id"].as_str().unwrap(),
                folder["trash_id"].as_str().unwrap()
            ],
            "newest first: {trash}"
        );
        // Something new in the way: restore refuses to overwrite it, or puts it elsewhere.
        fs::write(ws.join("a/dup.md"), "squatter\n").unwrap();
        let r = call(&m, iface, "restore", json!({"trash_id": file["trash_id"]}));
        assert_eq!(r["error"], "exists", "{r}");
        let r = call(
            &m,
            iface,
            "restore",
            json!({"trash_id": file["trash_id"], "to": "a/dup-restored.md"}),
        );
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(
            fs::read_to_string(ws.join("a/dup-restored.md")).unwrap(),
            "# Dup A\n"
        );
        let r = call(
            &m,
            iface,
            "restore",
            json!({"trash_id": folder["trash_id"]}),
        );
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["path"], "Projects");
        at_once("the restored folder is back", || {
            ws.join("Projects/Plan.md").exists()
        });
        assert_eq!(crate::common::tree(&ws.join("Projects")), before);
        assert_eq!(fs::read(ws.join("Projects/Plan.md")).unwrap(), plan);
        let r = call(&m, iface, "list_trash", json!({}));
        assert_eq!(r["total"], 0, "{r}");
        // Back to the fixture for the other interface.
        at_once("the restored file is visible", || {
            ws.join("a/dup-restored.md").exists()
        });
        fs::remove_file(ws.join("a/dup-restored.md")).unwrap();
        fs::write(ws.join("a/dup.md"), "# Dup A\n").unwrap();
    }
}

/// Runs one tool call as `uid` with primary group `uid` and the supplementary `groups`.
fn tool_as(m: &Mounted, uid: u32, groups: &str, tool: &str, req: &serde_json::Value) -> Value {
    let out = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            &format!("--groups={groups}"),
            "sh",
            "-c",
            &crate::common::tool_call_script(m, tool, req),
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn two_users_share_a_folder_and_edits_keep_what_the_file_is() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (alice, bob, carol, team) = (61101, 61102, 61103, 61200);
    let m = Mounted::new();
    m.open_workspace_to_all();
    let ws = m.ws();
    // A folder of the team's, setgid, and a note alice owns and the team may write.
    let dir = ws.join("Projects");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(alice), Some(team)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o2775)).unwrap();
    let note = dir.join("plan.md");
    fs::write(&note, "# Plan\n\nstep one\n").unwrap();
    std::os::unix::fs::chown(&note, Some(alice), Some(team)).unwrap();
    fs::set_permissions(&note, fs::Permissions::from_mode(0o660)).unwrap();
    xattr::set(&note, "user.xdg.tags", b"work").unwrap();
    let info = |who: u32| {
        let r = tool_as(
            &m,
            who,
            "61200",
            "get_file_info",
            &json!({"path": "Projects/plan.md"}),
        );
        assert_eq!(r["ok"], true, "{r}");
        r
    };
    let born = info(alice)["created"].clone();
    assert!(born.is_string(), "the filesystem records creation times");

    let edit = |who: u32, old: &str, new: &str| {
        let r = tool_as(
            &m,
            who,
            "61200",
            "edit_exact",
            &json!({"path": "Projects/plan.md", "old": old, "new": new}),
        );
        assert_eq!(r["ok"], true, "{who}: {r}");
    };
    // alice edits (a replacement: she owns the file and the folder gives the team's group),
    // then bob, then alice again: each edit works, and the file stays what it was.
    edit(alice, "step one", "step one by alice");
    edit(bob, "by alice", "by alice and bob");
    edit(alice, "and bob", "and bob, checked");
    assert_eq!(
        fs::read_to_string(&note).unwrap(),
        "# Plan\n\nstep one by alice and bob, checked\n"
    );
    let md = fs::metadata(&note).unwrap();
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o7777),
        (alice, team, 0o660)
    );
    assert_eq!(
        xattr::get(&note, "user.xdg.tags").unwrap().unwrap(),
        b"work"
    );
    let now = info(bob);
    assert_eq!(now["created"], born, "the creation time survives edits");
    assert_eq!(now["permissions"], "0660");
    assert_eq!(
        (now["uid"].as_u64(), now["gid"].as_u64()),
        (Some(61101), Some(61200))
    );

    // Three backups, each its editor's (who is charged for it), readable by the team.
    let backups = m.backing("workspaces/default/.clawfs/backups");
    let bmd = fs::metadata(&backups).unwrap();
    assert_eq!((bmd.uid(), bmd.mode() & 0o7777), (0, 0o711));
    // The folder is the editor's whose backup made it (the first edit's: charged to it).
    let folder = fs::metadata(backups.join("Projects")).unwrap();
    assert_eq!(
        (folder.uid(), folder.gid(), folder.mode() & 0o777),
        (alice, team, 0o775)
    );
    let kept: Vec<fs::Metadata> = fs::read_dir(backups.join("Projects"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .collect();
    assert_eq!(kept.len(), 3);
    let mut owners: Vec<u32> = kept.iter().map(|b| b.uid()).collect();
    owners.sort_unstable();
    assert_eq!(owners, [alice, alice, bob]);
    for b in &kept {
        assert_eq!((b.gid(), b.mode() & 0o7777), (team, 0o660));
    }
    // carol, outside the team, can neither edit the note nor read it.
    let r = tool_as(
        &m,
        carol,
        "61300",
        "edit_exact",
        &json!({"path": "Projects/plan.md", "old": "checked", "new": "carol was here"}),
    );
    assert_eq!(r["ok"], false, "{r}");
    assert!(fs::read_to_string(&note).unwrap().contains("checked"));
}
