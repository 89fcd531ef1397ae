//! Tool-level tests of clawfs-agent-tools on a temporary workspace: every tool's success and failure
//! paths, path escapes, malformed requests, and concurrent patches. No mount involved.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;

use clawfs_agent_tools::{
    call, call_request, Access, AccessCheck, Allowed, Limits, ToolError, ToolRoot,
};
use serde_json::{json, Value};
use tempfile::TempDir;

struct Ws {
    _outer: TempDir,
    dir: std::path::PathBuf,
    root: ToolRoot,
}

/// A workspace inside an outer temp dir, so "outside the workspace" exists and holds a secret.
fn ws() -> Ws {
    let outer = TempDir::new().unwrap();
    let dir = outer.path().join("ws");
    fs::create_dir(&dir).unwrap();
    fs::write(outer.path().join("secret.txt"), "TOP SECRET\n").unwrap();
    let root = ToolRoot::new(&dir).unwrap();
    let dir = root.root().to_path_buf();
    Ws {
        _outer: outer,
        dir,
        root,
    }
}

impl Ws {
    fn put(&self, rel: &str, content: &str) {
        let p = self.dir.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    fn get(&self, rel: &str) -> String {
        fs::read_to_string(self.dir.join(rel)).unwrap()
    }
    fn call(&self, tool: &str, req: Value) -> Value {
        let out = call(&self.root, tool, req.to_string().as_bytes());
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("bad response JSON {e}: {out:?}"))
    }
    fn ok(&self, tool: &str, req: Value) -> Value {
        let r = self.call(tool, req.clone());
        assert_eq!(r["ok"], true, "{tool} {req} -> {r}");
        r
    }
    fn err(&self, tool: &str, req: Value, code: &str) -> Value {
        let r = self.call(tool, req.clone());
        assert_eq!(r["ok"], false, "{tool} {req} -> {r}");
        assert_eq!(r["error"], code, "{tool} {req} -> {r}");
        assert!(r["message"].as_str().is_some_and(|m| m.len() > 10), "{r}");
        r
    }
    fn sha(&self, rel: &str) -> String {
        self.ok("info", json!({"path": rel}))["sha256"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

// ---------- resolve / info / outline / search / ranges ----------

#[test]
fn resolve_by_path_and_title() {
    let w = ws();
    w.put("Projects/Project Plan.md", "x\n");
    w.put("Other/notes.md", "y\n");
    w.put("A/dup.md", "");
    w.put("B/dup.md", "");
    let r = w.ok("resolve", json!({"path": "Projects/Project Plan.md"}));
    assert_eq!(r["resolved_path"], "Projects/Project Plan.md");
    assert_eq!(r["matched_by"], "exact");
    assert_eq!(r["type"], "file");
    let r = w.ok("resolve", json!({"path": "/projects/project plan.MD"}));
    assert_eq!(r["resolved_path"], "Projects/Project Plan.md");
    assert_eq!(r["matched_by"], "case_insensitive");
    let r = w.ok("resolve", json!({"title": "Project Plan"}));
    assert_eq!(r["resolved_path"], "Projects/Project Plan.md");
    let r = w.ok("resolve", json!({"title": "NOTES"}));
    assert_eq!(r["resolved_path"], "Other/notes.md");
    let r = w.err("resolve", json!({"title": "dup"}), "multiple_matches");
    assert_eq!(r["candidates"], json!(["A/dup.md", "B/dup.md"]));
    w.err("resolve", json!({"title": "nothing"}), "not_found");
    w.err("resolve", json!({"path": "nope.md"}), "not_found");
    w.err("resolve", json!({}), "invalid_args");
    w.err(
        "resolve",
        json!({"path": "a", "title": "b"}),
        "invalid_args",
    );
}

#[test]
fn info_reports_lines_bytes_hash_mtime() {
    let w = ws();
    w.put("a.md", "one\ntwo\nthree");
    let r = w.ok("info", json!({"path": "a.md"}));
    assert_eq!(r["lines"], 3);
    assert_eq!(r["bytes"], 13);
    assert_eq!(
        r["sha256"],
        "058053d87c818d699cde0f00d670bca0e1c6ad857caa9758ea6a556d7c64fcee"
    );
    assert!(r["mtime"].as_i64().unwrap() > 1_600_000_000);
    w.put("b.md", "");
    assert_eq!(w.ok("info", json!({"path": "b.md"}))["lines"], 0);
    w.put("c.md", "x\n");
    assert_eq!(w.ok("info", json!({"path": "C.MD"}))["lines"], 1);
    w.err("info", json!({"path": "missing.md"}), "not_found");
    fs::create_dir(w.dir.join("folder")).unwrap();
    w.err("info", json!({"path": "folder"}), "not_a_file");
    w.err("info", json!({}), "invalid_args");
    w.err("info", json!({"path": 5}), "invalid_args");
}

#[test]
fn outline_lists_headings_outside_code_and_front_matter() {
    let w = ws();
    w.put(
        "n.md",
        "---\n# yaml comment\n---\n# Title\ntext\n## Section ##\n```\n# not a heading\n```\n### Sub\n#nope\n",
    );
    let r = w.ok("outline", json!({"path": "n.md"}));
    assert_eq!(
        r["headings"],
        json!([
            {"line": 4, "level": 1, "text": "Title"},
            {"line": 6, "level": 2, "text": "Section"},
            {"line": 10, "level": 3, "text": "Sub"},
        ])
    );
    assert_eq!(r["truncated"], false);
    let r = w.ok("outline", json!({"path": "n.md", "max_headings": 1}));
    assert_eq!(r["headings"].as_array().unwrap().len(), 1);
    assert_eq!(r["total"], 3);
    assert_eq!(r["truncated"], true);
    w.err("outline", json!({"path": "x.md"}), "not_found");
    w.err(
        "outline",
        json!({"path": "n.md", "max_headings": -1}),
        "invalid_args",
    );
}

#[test]
fn search_in_one_file() {
    let w = ws();
    w.put(
        "s.md",
        "alpha\n- TODO one\nbeta\n- todo two\ngamma\n- TODO (three)\n",
    );
    let r = w.ok("search", json!({"path": "s.md", "pattern": "TODO"}));
    assert_eq!(r["total_hits"], 2);
    assert_eq!(r["matches"][0]["line"], 2);
    assert_eq!(r["matches"][0]["text"], "- TODO one");
    let r = w.ok(
        "search",
        json!({"path": "s.md", "pattern": "todo", "case_insensitive": true, "context": 1, "max_hits": 2}),
    );
    assert_eq!(r["total_hits"], 3);
    assert_eq!(r["truncated"], true);
    assert_eq!(r["matches"][0]["context_before"], json!(["alpha"]));
    assert_eq!(r["matches"][0]["context_after"], json!(["beta"]));
    // Literal by default: parentheses are not a group.
    let r = w.ok("search", json!({"path": "s.md", "pattern": "(three)"}));
    assert_eq!(r["total_hits"], 1);
    let r = w.ok(
        "search",
        json!({"path": "s.md", "pattern": "^- T.DO", "regex": true}),
    );
    assert_eq!(r["total_hits"], 2);
    w.err(
        "search",
        json!({"path": "s.md", "pattern": "(", "regex": true}),
        "invalid_args",
    );
    w.err(
        "search",
        json!({"path": "s.md", "pattern": ""}),
        "invalid_args",
    );
    w.err(
        "search",
        json!({"path": "nope", "pattern": "x"}),
        "not_found",
    );
}

#[test]
fn read_range_head_tail() {
    let w = ws();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    w.put("r.txt", &text);
    let r = w.ok("read_range", json!({"path": "r.txt", "start": 3, "end": 4}));
    assert_eq!(r["content"], "line 3\nline 4\n");
    assert_eq!(r["start"], 3);
    assert_eq!(r["end"], 4);
    assert_eq!(r["total_lines"], 10);
    assert_eq!(r["next_start"], 5);
    let r = w.ok(
        "read_range",
        json!({"path": "r.txt", "start": 9, "end": 100}),
    );
    assert_eq!(r["content"], "line 9\nline 10\n");
    assert!(r.get("next_start").is_none());
    let r = w.ok(
        "read_range",
        json!({"path": "r.txt", "start": 2, "end": 2, "line_numbers": true}),
    );
    assert_eq!(r["content"], "     2\tline 2\n");
    w.err(
        "read_range",
        json!({"path": "r.txt", "start": 0, "end": 2}),
        "invalid_args",
    );
    w.err(
        "read_range",
        json!({"path": "r.txt", "start": 11}),
        "invalid_args",
    );
    w.err(
        "read_range",
        json!({"path": "r.txt", "start": 5, "end": 4}),
        "invalid_args",
    );
    w.err(
        "read_range",
        json!({"path": "r.txt", "start": "1"}),
        "invalid_args",
    );
    let r = w.ok("head", json!({"path": "r.txt", "lines": 2}));
    assert_eq!(r["content"], "line 1\nline 2\n");
    let r = w.ok("tail", json!({"path": "r.txt", "lines": 2}));
    assert_eq!(r["content"], "line 9\nline 10\n");
    assert_eq!(r["start"], 9);
    let r = w.ok("tail", json!({"path": "r.txt", "lines": 50}));
    assert_eq!(r["start"], 1);
    w.put("empty.txt", "");
    assert_eq!(w.ok("head", json!({"path": "empty.txt"}))["content"], "");
    w.err("tail", json!({"path": "missing"}), "not_found");
}

#[test]
fn binary_and_non_utf8_files_are_not_text() {
    let w = ws();
    fs::write(w.dir.join("img.png"), b"\x89PNG\0\0\0").unwrap();
    fs::write(w.dir.join("latin1.txt"), b"caf\xe9\n").unwrap();
    w.err("read_file", json!({"path": "img.png"}), "not_text");
    w.err(
        "read_range",
        json!({"path": "latin1.txt", "start": 1}),
        "not_text",
    );
    // info works on anything.
    w.ok("info", json!({"path": "img.png"}));
}

// ---------- apply_patch / edit_exact ----------

const BASE: &str = "# Plan\n\nintro\n\n## Tasks\n- a\n- b\n- c\n\n## Notes\nend\n";

#[test]
fn apply_patch_multi_hunk_with_backup() {
    let w = ws();
    w.put("Projects/Plan.md", BASE);
    let sha = w.sha("Projects/Plan.md");
    let patch = "--- a/Projects/Plan.md\n+++ b/Projects/Plan.md\n@@ -1,3 +1,3 @@\n # Plan\n \n-intro\n+Intro, revised.\n@@ -6,3 +6,4 @@\n - a\n-- b\n+- B\n+- b2\n - c\n";
    let r = w.ok(
        "apply_patch",
        json!({"path": "Projects/Plan.md", "base_sha256": sha, "patch": patch}),
    );
    let new = w.get("Projects/Plan.md");
    assert_eq!(
        new,
        "# Plan\n\nIntro, revised.\n\n## Tasks\n- a\n- B\n- b2\n- c\n\n## Notes\nend\n"
    );
    assert_eq!(r["sha256"], w.sha("Projects/Plan.md"));
    assert_eq!(r["hunks"].as_array().unwrap().len(), 2);
    let backup = r["backup"].as_str().unwrap();
    assert!(
        backup.starts_with(".clawfs/backups/Projects/Plan.md.bak."),
        "{backup}"
    );
    assert_eq!(fs::read_to_string(w.dir.join(backup)).unwrap(), BASE);
    // The backup is under a protected name: tools cannot read or list it.
    w.err("read_file", json!({"path": backup}), "protected");
    // The new hash chains into the next patch.
    let patch2 = "@@ -11 +11 @@\n-end\n+the end\n";
    w.ok(
        "apply_patch",
        json!({"path": "Projects/Plan.md", "base_sha256": r["sha256"], "patch": patch2}),
    );
    assert!(w.get("Projects/Plan.md").ends_with("the end\n"));
}

#[test]
fn apply_patch_hash_mismatch_reports_expected_and_actual() {
    let w = ws();
    w.put("p.md", BASE);
    let actual = w.sha("p.md");
    let stale = "0".repeat(64);
    let r = w.err(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": stale, "patch": "@@ -3 +3 @@\n-intro\n+x\n"}),
        "hash_mismatch",
    );
    assert_eq!(r["expected"], stale);
    assert_eq!(r["actual"], actual);
    assert_eq!(w.get("p.md"), BASE);
    w.err(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": "abc", "patch": "@@ -3 +3 @@\n-intro\n+x\n"}),
        "invalid_args",
    );
}

#[test]
fn apply_patch_context_mismatch_leaves_file_unchanged() {
    let w = ws();
    w.put("p.md", BASE);
    let sha = w.sha("p.md");
    // First hunk fine, second has wrong context: nothing may be applied.
    let patch = "@@ -3 +3 @@\n-intro\n+INTRO\n@@ -6,2 +6,2 @@\n - a\n-- zzz\n+- y\n";
    let r = w.err(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": sha, "patch": patch}),
        "patch_failed",
    );
    assert!(r["message"].as_str().unwrap().contains("hunk #2"), "{r}");
    assert_eq!(r["details"].as_array().unwrap().len(), 1);
    assert_eq!(w.get("p.md"), BASE);
    assert!(!w.dir.join(".clawfs/backups").exists());
    // Not a diff at all.
    w.err(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": sha, "patch": "please change intro"}),
        "patch_failed",
    );
    // dry_run validates without writing.
    let r = w.ok(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": sha, "patch": "@@ -3 +3 @@\n-intro\n+INTRO\n", "dry_run": true}),
    );
    assert_eq!(r["dry_run"], true);
    assert!(r.get("backup").is_none());
    assert_eq!(w.get("p.md"), BASE);
    w.err(
        "apply_patch",
        json!({"path": "nope.md", "base_sha256": sha, "patch": "@@ -1 +1 @@\n-a\n+b\n"}),
        "not_found",
    );
}

#[test]
fn concurrent_patches_on_same_base_exactly_one_wins() {
    for _ in 0..20 {
        let w = Arc::new(ws());
        w.put("c.md", BASE);
        let sha = w.sha("c.md");
        let threads: Vec<_> = ["ONE", "TWO", "THREE", "FOUR"]
            .into_iter()
            .map(|word| {
                let w = Arc::clone(&w);
                let sha = sha.clone();
                std::thread::spawn(move || {
                    let patch = format!("@@ -3 +3 @@\n-intro\n+{word}\n");
                    let req = json!({"path": "c.md", "base_sha256": sha, "patch": patch});
                    // Half the callers build their own root, as a daemon may per call.
                    if word.len() % 2 == 0 {
                        let own = ToolRoot::new(&w.dir).unwrap();
                        serde_json::from_slice::<Value>(&call(
                            &own,
                            "apply_patch",
                            req.to_string().as_bytes(),
                        ))
                        .unwrap()
                    } else {
                        w.call("apply_patch", req)
                    }
                })
            })
            .collect();
        let results: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let wins = results.iter().filter(|r| r["ok"] == true).count();
        assert_eq!(wins, 1, "{results:?}");
        for r in results.iter().filter(|r| r["ok"] == false) {
            assert_eq!(r["error"], "hash_mismatch", "{r}");
        }
        let text = w.get("c.md");
        let winners = ["ONE", "TWO", "THREE", "FOUR"]
            .iter()
            .filter(|x| text.contains(&format!("\n{x}\n")))
            .count();
        assert_eq!(winners, 1, "{text}");
        assert!(!text.contains("intro"));
        let backups = fs::read_dir(w.dir.join(".clawfs/backups")).unwrap().count();
        assert_eq!(backups, 1);
    }
}

#[test]
fn edit_exact_counts_occurrences() {
    let w = ws();
    w.put("e.md", "foo bar\nfoo baz\nqux\n");
    let r = w.err(
        "edit_exact",
        json!({"path": "e.md", "old": "foo", "new": "FOO"}),
        "multiple_matches",
    );
    assert_eq!(r["candidates"][0]["line"], 1);
    assert_eq!(r["candidates"][1]["line"], 2);
    w.err(
        "edit_exact",
        json!({"path": "e.md", "old": "nothing", "new": "x"}),
        "not_found",
    );
    w.err(
        "edit_exact",
        json!({"path": "e.md", "old": "", "new": "x"}),
        "invalid_args",
    );
    let r = w.ok(
        "edit_exact",
        json!({"path": "e.md", "old": "foo", "new": "FOO", "count": 2}),
    );
    assert_eq!(r["replacements"], 2);
    assert_eq!(w.get("e.md"), "FOO bar\nFOO baz\nqux\n");
    assert!(w.dir.join(r["backup"].as_str().unwrap()).exists());
    w.err(
        "edit_exact",
        json!({"path": "e.md", "old": "qux", "new": "x", "base_sha256": "f".repeat(64)}),
        "hash_mismatch",
    );
    let sha = w.sha("e.md");
    w.ok(
        "edit_exact",
        json!({"path": "e.md", "old": "qux", "new": "QUX", "base_sha256": sha}),
    );
    assert_eq!(w.get("e.md"), "FOO bar\nFOO baz\nQUX\n");
}

// ---------- read_file / read_multiple_files ----------

#[test]
fn read_file_numbers_and_smart_truncation() {
    let w = ws();
    let text: String = (1..=1000).map(|i| format!("row number {i}\n")).collect();
    w.put("big.md", &text);
    let r = w.ok(
        "read_file",
        json!({"path": "big.md", "max_chars": 200, "line_numbers": true}),
    );
    assert_eq!(r["truncated"], true);
    let end = r["end"].as_u64().unwrap();
    assert!(end > 3 && end < 20);
    let note = r["note"].as_str().unwrap();
    assert!(note.contains(&format!("\"start\": {}", end + 1)), "{note}");
    let content = r["content"].as_str().unwrap();
    assert!(content.starts_with("     1\trow number 1\n"));
    assert!(content.chars().count() <= 200);
    let r = w.ok(
        "read_file",
        json!({"path": "big.md", "start": 999, "line_numbers": false}),
    );
    assert_eq!(r["content"], "row number 999\nrow number 1000\n");
    assert_eq!(r["truncated"], false);
    assert!(r.get("note").is_none());
    // Numbered, the whole file passes the default budget.
    let r = w.ok("read_file", json!({"path": "big.md", "line_numbers": true}));
    assert_eq!(r["truncated"], true);
    w.err(
        "read_file",
        json!({"path": "big.md", "start": 1001}),
        "invalid_args",
    );
    w.err("read_file", json!({"path": "nope.md"}), "not_found");
    w.put("empty.md", "");
    assert_eq!(
        w.ok("read_file", json!({"path": "empty.md"}))["content"],
        ""
    );
}

#[test]
fn read_multiple_files_reports_each() {
    let w = ws();
    w.put("a.md", "A\n");
    w.put("b.md", "B\n");
    let r = w.ok(
        "read_multiple_files",
        json!({"paths": ["a.md", "missing.md", "B.md", ".git/config"], "line_numbers": false}),
    );
    let f = r["files"].as_array().unwrap();
    assert_eq!(f[0]["content"], "A\n");
    assert_eq!(f[1]["ok"], false);
    assert_eq!(f[1]["error"], "not_found");
    assert_eq!(f[2]["path"], "b.md");
    assert_eq!(f[3]["error"], "protected");
    w.err("read_multiple_files", json!({"paths": []}), "invalid_args");
    let many: Vec<String> = (0..21).map(|i| format!("{i}.md")).collect();
    w.err("read_multiple_files", json!({"paths": many}), "too_large");
}

// ---------- write_file / edit_file ----------

#[test]
fn write_file_creates_overwrites_and_refuses() {
    let w = ws();
    let r = w.ok(
        "write_file",
        json!({"path": "new/deep/file.md", "content": "hello\n"}),
    );
    assert_eq!(r["path"], "new/deep/file.md");
    assert_eq!(r["bytes"], 6);
    assert_eq!(r["created"], true);
    assert_eq!(w.get("new/deep/file.md"), "hello\n");
    let r = w.ok(
        "write_file",
        json!({"path": "new/deep/file.md", "content": "bye\n"}),
    );
    assert_eq!(r["created"], false);
    assert_eq!(
        fs::read_to_string(w.dir.join(r["backup"].as_str().unwrap())).unwrap(),
        "hello\n"
    );
    w.err(
        "write_file",
        json!({"path": "new/deep/file.md", "content": "x", "overwrite": false}),
        "exists",
    );
    w.err(
        "write_file",
        json!({"path": "other/f.md", "content": "x", "create_parents": false}),
        "not_found",
    );
    w.err(
        "write_file",
        json!({"path": "new", "content": "x"}),
        "not_a_file",
    );
    w.err(
        "write_file",
        json!({"path": "new/deep/file.md/x", "content": "x"}),
        "not_a_directory",
    );
    w.err(
        "write_file",
        json!({"path": "/", "content": "x"}),
        "invalid_args",
    );
    w.err("write_file", json!({"path": "a.md"}), "invalid_args");
    // No temp files are left behind.
    let left: Vec<_> = fs::read_dir(w.dir.join("new/deep")).unwrap().collect();
    assert_eq!(left.len(), 1);
}

#[test]
fn edit_file_replace_insert_diff_dry_run() {
    let w = ws();
    w.put("f.md", "one\ntwo\nthree\n");
    let r = w.ok(
        "edit_file",
        json!({"path": "f.md", "edits": [{"old": "two", "new": "TWO"}], "dry_run": true}),
    );
    assert!(r["diff"].as_str().unwrap().contains("-two\n+TWO\n"), "{r}");
    assert_eq!(r["dry_run"], true);
    assert_eq!(w.get("f.md"), "one\ntwo\nthree\n");
    let r = w.ok(
        "edit_file",
        json!({"path": "f.md", "edits": [{"old": "two", "new": "TWO"}, {"old": "three", "new": "3"}], "insert": {"line": 1, "text": "one and a half"}}),
    );
    assert_eq!(w.get("f.md"), "one\none and a half\nTWO\n3\n");
    assert!(r["diff"]
        .as_str()
        .unwrap()
        .starts_with("--- a/f.md\n+++ b/f.md\n"));
    assert_eq!(r["changed"], true);
    assert!(r["backup"].is_string());
    w.put("g.md", "x x\n");
    w.err(
        "edit_file",
        json!({"path": "g.md", "edits": [{"old": "x", "new": "y"}]}),
        "multiple_matches",
    );
    w.ok(
        "edit_file",
        json!({"path": "g.md", "edits": [{"old": "x", "new": "y", "replace_all": true}]}),
    );
    assert_eq!(w.get("g.md"), "y y\n");
    // All or nothing: the second edit fails, the first is not written.
    w.err(
        "edit_file",
        json!({"path": "g.md", "edits": [{"old": "y y", "new": "z"}, {"old": "nope", "new": "q"}]}),
        "not_found",
    );
    assert_eq!(w.get("g.md"), "y y\n");
    w.err(
        "edit_file",
        json!({"path": "g.md", "insert": {"line": 9, "text": "x"}}),
        "invalid_args",
    );
    w.err("edit_file", json!({"path": "g.md"}), "invalid_args");
    w.err(
        "edit_file",
        json!({"path": "g.md", "edits": [{"old": "y", "new": "z", "extra": 1}]}),
        "invalid_args",
    );
}

// ---------- move / delete / trash / folders / info ----------

#[test]
fn move_files_and_folders() {
    let w = ws();
    w.put("a.md", "A");
    w.put("dir/x.md", "X");
    let r = w.ok("move", json!({"from": "a.md", "to": "archive/2024/a.md"}));
    assert_eq!(r["to"], "archive/2024/a.md");
    assert_eq!(r["type"], "file");
    assert_eq!(w.get("archive/2024/a.md"), "A");
    w.ok("move", json!({"from": "DIR", "to": "renamed"}));
    assert_eq!(w.get("renamed/x.md"), "X");
    w.put("b.md", "B");
    let r = w.err("move", json!({"from": "b.md", "to": "renamed"}), "exists");
    assert!(r["message"].as_str().unwrap().contains("renamed/b.md"));
    w.err(
        "move",
        json!({"from": "renamed", "to": "renamed/sub"}),
        "invalid_args",
    );
    w.err(
        "move",
        json!({"from": "nope.md", "to": "x.md"}),
        "not_found",
    );
    w.err(
        "move",
        json!({"from": "b.md", "to": "b.md"}),
        "invalid_args",
    );
    w.err(
        "move",
        json!({"from": "b.md", "to": ".obsidian/b.md"}),
        "protected",
    );
    w.err("move", json!({"from": "b.md", "to": "../b.md"}), "denied");
    assert_eq!(w.get("b.md"), "B");
}

#[test]
fn delete_restore_round_trip() {
    let w = ws();
    w.put("notes/a.md", "A\n");
    w.put("folder/inner.md", "I\n");
    let r = w.ok("delete", json!({"path": "notes/A.md"}));
    let id = r["trash_id"].as_str().unwrap().to_string();
    assert_eq!(r["path"], "notes/a.md");
    assert!(!w.dir.join("notes/a.md").exists());
    let d2 = w.ok("delete", json!({"path": "folder"}));
    assert_eq!(d2["type"], "folder");
    let t = w.ok("list_trash", json!({}));
    assert_eq!(t["total"], 2);
    let paths: Vec<&str> = t["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"notes/a.md") && paths.contains(&"folder"));
    // Trash is invisible to listings.
    let l = w.ok("list_files", json!({"glob": "*.md"}));
    assert_eq!(l["total"], 0, "{l}");
    let r = w.ok("restore", json!({"trash_id": id}));
    assert_eq!(r["path"], "notes/a.md");
    assert_eq!(w.get("notes/a.md"), "A\n");
    w.err("restore", json!({"trash_id": id}), "not_found");
    // Restore when the original path is taken.
    w.put("folder", "now a file");
    let id2 = d2["trash_id"].as_str().unwrap();
    w.err("restore", json!({"trash_id": id2}), "exists");
    w.ok("restore", json!({"trash_id": id2, "to": "folder-restored"}));
    assert_eq!(w.get("folder-restored/inner.md"), "I\n");
    assert_eq!(w.ok("list_trash", json!({}))["total"], 0);
    w.err("restore", json!({"trash_id": "../../etc"}), "invalid_args");
    w.err("restore", json!({"trash_id": ""}), "invalid_args");
    w.err("delete", json!({"path": "gone.md"}), "not_found");
    w.err("delete", json!({"path": "/"}), "invalid_args");
    w.err("delete", json!({"path": ".git"}), "protected");
}

#[test]
fn create_folder_and_get_file_info() {
    let w = ws();
    let r = w.ok("create_folder", json!({"path": "a/b/c"}));
    assert_eq!(r["created"], true);
    assert!(w.dir.join("a/b/c").is_dir());
    let r = w.ok("create_folder", json!({"path": "a/b"}));
    assert_eq!(r["created"], false);
    w.put("a/f.md", "12345");
    w.err("create_folder", json!({"path": "a/f.md"}), "exists");
    w.err(
        "create_folder",
        json!({"path": ".smarthole/x"}),
        "protected",
    );
    let r = w.ok("get_file_info", json!({"path": "A/F.md"}));
    assert_eq!(r["type"], "file");
    assert_eq!(r["size"], 5);
    assert!(r["modified"].as_str().unwrap().ends_with('Z'));
    let r = w.ok("get_file_info", json!({"path": "a"}));
    assert_eq!(r["type"], "folder");
    assert_eq!(r["size"], 5);
    assert_eq!(r["children"], 2);
    w.err("get_file_info", json!({"path": "zzz"}), "not_found");
}

// ---------- search_files / list_files / directory_tree / list_allowed ----------

#[test]
fn search_files_with_filters_and_limits() {
    let w = ws();
    w.put("notes/a.md", "hello world\nsecond\n");
    w.put("notes/b.txt", "hello there\n");
    w.put("Projects/c.MD", "say Hello\n");
    w.put(".git/config", "hello from git\n");
    w.put(".obsidian/app.json", "hello\n");
    fs::write(w.dir.join("bin.dat"), b"hello\0binary").unwrap();
    let r = w.ok("search_files", json!({"pattern": "hello"}));
    let paths: Vec<&str> = r["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths.len(), 2, "{r}");
    assert!(paths.contains(&"notes/a.md") && paths.contains(&"notes/b.txt"));
    assert_eq!(r["files_skipped"], 1);
    let r = w.ok(
        "search_files",
        json!({"pattern": "hello", "case_insensitive": true, "include": "*.md", "context": 1}),
    );
    assert_eq!(r["matches"].as_array().unwrap().len(), 2, "{r}");
    let a = r["matches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path"] == "notes/a.md")
        .unwrap();
    assert_eq!(a["context_after"], json!(["second"]));
    let r = w.ok(
        "search_files",
        json!({"pattern": "hello", "case_insensitive": true, "exclude": ["projects"]}),
    );
    assert_eq!(r["matches"].as_array().unwrap().len(), 2);
    let r = w.ok(
        "search_files",
        json!({"pattern": "h.llo", "regex": true, "path": "NOTES", "max_results": 1}),
    );
    assert_eq!(r["matches"].as_array().unwrap().len(), 1);
    assert_eq!(r["truncated"], true);
    assert!(
        r["notes"][0].as_str().unwrap().contains("max_results"),
        "{r}"
    );
    // Literal by default, like search: "h.llo" is not a pattern and "[" is no error.
    let r = w.ok("search_files", json!({"pattern": "h.llo"}));
    assert_eq!(r["matches"], json!([]), "{r}");
    w.ok("search_files", json!({"pattern": "["}));
    w.err(
        "search_files",
        json!({"pattern": "[", "regex": true}),
        "invalid_args",
    );
    // A context above the cap is said, not silently cut.
    let r = w.ok("search_files", json!({"pattern": "second", "context": 50}));
    assert!(
        r["notes"][0].as_str().unwrap().contains("at most 10"),
        "{r}"
    );
    // MCP's excludePatterns is exclude.
    let r = w.ok(
        "search_files",
        json!({"pattern": "hello", "case_insensitive": true, "excludePatterns": ["notes"]}),
    );
    assert_eq!(r["matches"].as_array().unwrap().len(), 1, "{r}");
    w.err(
        "search_files",
        json!({"pattern": "x", "include": "[z"}),
        "invalid_args",
    );
    w.err(
        "search_files",
        json!({"pattern": "x", "path": "notes/a.md"}),
        "not_a_directory",
    );
    w.err(
        "search_files",
        json!({"pattern": "x", "path": ".git"}),
        "protected",
    );
}

#[test]
fn list_files_newest_first_with_types() {
    let w = ws();
    w.put("old.md", "o");
    w.put("Projects/new.md", "nn");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(w.dir.join("old.md"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    fs::File::open(w.dir.join("Projects"))
        .unwrap()
        .set_modified(old - std::time::Duration::from_secs(10))
        .unwrap();
    let r = w.ok("list_files", json!({}));
    let e = r["entries"].as_array().unwrap();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0]["path"], "old.md");
    assert_eq!(e[0]["type"], "file");
    assert_eq!(e[0]["size"], 1);
    assert_eq!(e[1]["type"], "folder");
    let r = w.ok("list_files", json!({"glob": "*.MD"}));
    let e = r["entries"].as_array().unwrap();
    assert_eq!(e[0]["path"], "Projects/new.md");
    assert_eq!(e[1]["path"], "old.md");
    let r = w.ok("list_files", json!({"path": "projects"}));
    assert_eq!(r["path"], "Projects");
    assert_eq!(r["total"], 1);
    let r = w.ok("list_files", json!({"glob": "projects/*.md"}));
    assert_eq!(r["total"], 1);
    fs::create_dir(w.dir.join("empty")).unwrap();
    let r = w.ok("list_files", json!({"path": "empty"}));
    assert_eq!(r["entries"], json!([]));
    w.err("list_files", json!({"path": "old.md"}), "not_a_directory");
    w.err("list_files", json!({"path": "nope"}), "not_found");
}

#[test]
fn directory_tree_nests_to_depth() {
    let w = ws();
    w.put("a/b/c/d.md", "d");
    w.put("a/x.md", "x");
    w.put("top.md", "t");
    let r = w.ok("directory_tree", json!({"depth": 2}));
    let tree = &r["tree"];
    assert_eq!(tree["name"], "/");
    let a = &tree["children"][0];
    assert_eq!(a["name"], "a");
    assert_eq!(a["children"][0]["name"], "b");
    assert!(a["children"][0].get("children").is_none());
    assert_eq!(a["children"][1]["name"], "x.md");
    assert_eq!(a["children"][1]["size"], 1);
    assert_eq!(tree["children"][1]["name"], "top.md");
    let r = w.ok(
        "directory_tree",
        json!({"path": "a", "include_files": false, "depth": 10}),
    );
    assert_eq!(r["tree"]["children"][0]["children"][0]["name"], "c");
    assert_eq!(r["entries"], 2);
    w.err(
        "directory_tree",
        json!({"path": "top.md"}),
        "not_a_directory",
    );
}

#[test]
fn list_allowed_describes_policy() {
    let w = ws();
    let r = w.ok("list_allowed", json!({}));
    assert_eq!(r["read"], json!(["**"]));
    assert!(r["protected"].as_array().unwrap().contains(&json!(".git/")));
    assert!(r["tools"]
        .as_array()
        .unwrap()
        .contains(&json!("apply_patch")));
    w.err("list_allowed", json!({"x": 1}), "invalid_args");
}

// ---------- path escapes and protection ----------

#[test]
fn escapes_are_refused() {
    let w = ws();
    let outer = w.dir.parent().unwrap().to_path_buf();
    w.put("in.md", "inside\n");
    w.err("read_file", json!({"path": "../secret.txt"}), "denied");
    w.err("read_file", json!({"path": "a/../../secret.txt"}), "denied");
    w.err(
        "write_file",
        json!({"path": "../evil.md", "content": "x"}),
        "denied",
    );
    // Absolute paths are taken relative to the workspace root.
    w.err("read_file", json!({"path": "/etc/passwd"}), "not_found");
    w.err(
        "read_file",
        json!({"path": outer.join("secret.txt").to_str().unwrap()}),
        "not_found",
    );
    // The root's own absolute path is an alias of the root.
    let abs = w.dir.join("in.md");
    assert_eq!(
        w.ok("read_file", json!({"path": abs.to_str().unwrap()}))["path"],
        "in.md"
    );
    w.err("read_file", json!({"path": "in.md\u{0}x"}), "invalid_args");
    // Symlinks out of the root: file, folder, relative and absolute.
    symlink(outer.join("secret.txt"), w.dir.join("abs-link")).unwrap();
    symlink("../secret.txt", w.dir.join("rel-link")).unwrap();
    symlink(&outer, w.dir.join("outdir")).unwrap();
    symlink("..", w.dir.join("up")).unwrap();
    for p in [
        "abs-link",
        "rel-link",
        "outdir/secret.txt",
        "up/secret.txt",
        "UP/secret.txt",
    ] {
        w.err("read_file", json!({"path": p}), "denied");
        w.err("info", json!({"path": p}), "denied");
    }
    w.err(
        "write_file",
        json!({"path": "outdir/new.md", "content": "x"}),
        "denied",
    );
    w.err(
        "write_file",
        json!({"path": "abs-link", "content": "x"}),
        "denied",
    );
    w.err("create_folder", json!({"path": "outdir/x"}), "denied");
    w.err("move", json!({"from": "in.md", "to": "up/in.md"}), "denied");
    assert!(!outer.join("new.md").exists() && !outer.join("in.md").exists());
    assert_eq!(
        fs::read_to_string(outer.join("secret.txt")).unwrap(),
        "TOP SECRET\n"
    );
    // Listings show links but never follow them.
    let r = w.ok("search_files", json!({"pattern": "SECRET"}));
    assert_eq!(r["matches"], json!([]));
    // Deleting a link trashes the link, not its target.
    w.ok("delete", json!({"path": "abs-link"}));
    assert!(outer.join("secret.txt").exists());
    // Symlinks that stay inside are fine.
    symlink("in.md", w.dir.join("alias.md")).unwrap();
    symlink(w.dir.join("in.md"), w.dir.join("abs-alias.md")).unwrap();
    assert_eq!(
        w.ok("read_file", json!({"path": "alias.md"}))["path"],
        "in.md"
    );
    assert_eq!(
        w.ok("read_file", json!({"path": "abs-alias.md"}))["path"],
        "in.md"
    );
    // A loop is an error, not a hang.
    symlink("loop2", w.dir.join("loop1")).unwrap();
    symlink("loop1", w.dir.join("loop2")).unwrap();
    w.err("read_file", json!({"path": "loop1"}), "invalid_args");
}

#[test]
fn protected_names_in_any_case_and_through_links() {
    let w = ws();
    w.put(".git/config", "[core]\n");
    w.put(".obsidian/app.json", "{}");
    w.put("sub/.smarthole/inbox.md", "x");
    for p in [
        ".git/config",
        ".GIT/config",
        ".Git/CONFIG",
        "/.obsidian/app.json",
        "./.OBSIDIAN/app.json",
        "sub/.SmartHole/inbox.md",
        ".clawfs/trash",
        ".ClawFS-anything",
        "x/../.git/config",
    ] {
        w.err("read_file", json!({"path": p}), "protected");
        w.err(
            "write_file",
            json!({"path": p, "content": "x"}),
            "protected",
        );
    }
    symlink(".git", w.dir.join("innocent")).unwrap();
    w.err("read_file", json!({"path": "innocent/config"}), "protected");
    symlink(".git/config", w.dir.join("cfg")).unwrap();
    w.err("read_file", json!({"path": "cfg"}), "protected");
    w.err(
        "edit_exact",
        json!({"path": "cfg", "old": "core", "new": "x"}),
        "protected",
    );
    assert_eq!(w.get(".git/config"), "[core]\n");
    let r = w.ok("list_files", json!({"recursive": true}));
    let names = r.to_string();
    assert!(
        !names.contains(".git/") && !names.contains(".obsidian") && !names.contains("smarthole"),
        "{names}"
    );
    w.err("list_files", json!({"path": ".GIT"}), "protected");
    w.err("resolve", json!({"title": "config"}), "not_found");
}

// ---------- policy ----------

struct NoPrivate;
impl AccessCheck for NoPrivate {
    fn check(&self, rel: &str, access: Access) -> Result<(), ToolError> {
        if rel == "private" || rel.starts_with("private/") {
            return Err(ToolError::Denied(format!("'{rel}' is not yours.")));
        }
        if access == Access::Write && rel.starts_with("ro/") {
            return Err(ToolError::Denied(format!("'{rel}' is read-only for you.")));
        }
        Ok(())
    }
    fn describe(&self) -> Allowed {
        Allowed {
            read: vec!["**".into()],
            write: vec!["**".into()],
            protected: vec![],
        }
    }
}

#[test]
fn caller_policy_is_applied_everywhere() {
    let w = ws();
    w.put("private/p.md", "hidden word\n");
    w.put("ro/r.md", "visible word\n");
    let root = ToolRoot::new(&w.dir)
        .unwrap()
        .with_access(Arc::new(NoPrivate));
    let c = |tool: &str, v: Value| -> Value {
        serde_json::from_slice(&call(&root, tool, v.to_string().as_bytes())).unwrap()
    };
    assert_eq!(
        c("read_file", json!({"path": "private/p.md"}))["error"],
        "denied"
    );
    assert_eq!(
        c("read_file", json!({"path": "PRIVATE/p.md"}))["error"],
        "denied"
    );
    assert_eq!(c("read_file", json!({"path": "ro/r.md"}))["ok"], true);
    assert_eq!(
        c("write_file", json!({"path": "ro/r.md", "content": "x"}))["error"],
        "denied"
    );
    assert_eq!(c("delete", json!({"path": "ro/r.md"}))["error"], "denied");
    assert_eq!(
        c("move", json!({"from": "ro/r.md", "to": "x.md"}))["error"],
        "denied"
    );
    let r = c("search_files", json!({"pattern": "word"}));
    assert_eq!(r["matches"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(c("resolve", json!({"title": "p"}))["error"], "not_found");
    assert_eq!(c("list_files", json!({}))["total"], 1);
    assert_eq!(
        c("list_allowed", json!({}))["protected"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

// ---------- request handling ----------

#[test]
fn malformed_requests_are_errors() {
    let w = ws();
    w.put("a.md", "x\n");
    let code = |tool: &str, bytes: &[u8]| -> String {
        let v: Value = serde_json::from_slice(&call(&w.root, tool, bytes)).unwrap();
        assert_eq!(v["ok"], false);
        v["error"].as_str().unwrap().to_string()
    };
    assert_eq!(code("info", b"\xff\xfe{}"), "invalid_json");
    assert_eq!(code("info", b"{\"path\": \"a.md\""), "invalid_json");
    assert_eq!(code("info", b"[1,2]"), "invalid_json");
    assert_eq!(code("info", b"\"a.md\""), "invalid_json");
    assert_eq!(code("info", b""), "invalid_args");
    assert_eq!(code("nope", b"{}"), "unknown_tool");
    assert_eq!(code("info", b"{\"paht\": \"a.md\"}"), "invalid_args");
    assert_eq!(
        code("info", b"{\"path\": \"a.md\", \"tool\": \"head\"}"),
        "invalid_args"
    );
    let huge = format!(
        "{{\"path\": \"a.md\", \"content\": \"{}\"}}",
        "x".repeat(5 << 20)
    );
    assert_eq!(code("write_file", huge.as_bytes()), "too_large");
    let deep = "[".repeat(100_000);
    assert_eq!(code("info", deep.as_bytes()), "invalid_json");
    // Responses put "ok" first and end with a newline.
    let out = call(&w.root, "info", b"{\"path\": \"a.md\"}");
    assert!(out.starts_with(b"{\"ok\":true,"));
    assert!(out.ends_with(b"}\n"));
}

#[test]
fn two_file_interface_names_the_tool_in_the_request() {
    let w = ws();
    w.put("a.md", "x\n");
    let v: Value = serde_json::from_slice(&call_request(
        &w.root,
        br#"{"tool": "info", "path": "a.md"}"#,
    ))
    .unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["lines"], 1);
    let v: Value = serde_json::from_slice(&call_request(&w.root, br#"{"path": "a.md"}"#)).unwrap();
    assert_eq!(v["error"], "invalid_args");
    let v: Value = serde_json::from_slice(&call_request(&w.root, br#"{"tool": 3}"#)).unwrap();
    assert_eq!(v["error"], "invalid_args");
    let v: Value = serde_json::from_slice(&call_request(&w.root, br#"{"tool": "zap"}"#)).unwrap();
    assert_eq!(v["error"], "unknown_tool");
}

#[test]
fn garbage_never_panics_and_always_answers_json() {
    let w = ws();
    w.put("a.md", "x\ny\n");
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let samples: Vec<Value> = vec![
        json!({"path": "a.md", "start": u64::MAX, "end": u64::MAX}),
        json!({"path": "a.md", "lines": 0}),
        json!({"path": "a.md", "max_chars": 0}),
        json!({"path": "a.md", "start": 1, "end": 0}),
        json!({"path": "", "pattern": ".*", "max_results": 0, "context": 1000}),
        json!({"path": "a.md", "base_sha256": "", "patch": "@@ -0,0 +0,0 @@\n"}),
        json!({"path": "a.md", "insert": {"line": u64::MAX, "text": ""}}),
        json!({"paths": ["", "/", "..", "\u{0}"]}),
        json!({"path": "\u{202e}\u{0}"}),
        json!({"path": "a.md", "depth": u64::MAX}),
        json!({"path": "a.md", "pattern": "a{1000}{1000}{1000}", "regex": true}),
        json!({"path": null}),
        json!({"title": "a", "path": null}),
        json!({"trash_id": "-"}),
        json!({"from": "a.md", "to": "/"}),
    ];
    for tool in clawfs_agent_tools::TOOL_NAMES {
        for s in &samples {
            let out = call(&w.root, tool, s.to_string().as_bytes());
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert!(v["ok"].is_boolean(), "{tool} {s} -> {v}");
        }
        for _ in 0..50 {
            let len = (next() % 64) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let out = call(&w.root, tool, &bytes);
            let v: Value = serde_json::from_slice(&out).unwrap();
            // Only an empty (or blank) body can succeed, for tools without required arguments.
            assert!(
                v["ok"] == false || bytes.trim_ascii().is_empty(),
                "{tool} {bytes:?} -> {v}"
            );
        }
    }
    assert!(Path::new(&w.dir).is_dir());
}

// ---------- registry ----------

#[test]
fn registry_describes_every_tool() {
    let reg = clawfs_agent_tools::registry(Path::new("/mnt/claw fs"));
    assert!(
        reg["protocol"]["call"]
            .as_str()
            .unwrap()
            .contains("/mnt/claw fs/tools/call/<tool>"),
        "{reg}"
    );
    let tools = reg["tools"].as_array().unwrap();
    assert_eq!(tools.len(), clawfs_agent_tools::TOOL_NAMES.len());
    for t in clawfs_agent_tools::TOOL_NAMES {
        let d = clawfs_agent_tools::definition(t).unwrap();
        assert_eq!(d["name"], *t);
        assert!(d["description"].as_str().unwrap().len() > 20);
        assert_eq!(d["input_schema"]["type"], "object", "{t}: {d}");
        assert_eq!(d["output_schema"]["type"], "object", "{t}");
        assert_eq!(d["output_schema"]["required"][0], "ok", "{t}");
    }
    let info = clawfs_agent_tools::definition("info").unwrap();
    assert_eq!(info["input_schema"]["required"], json!(["path"]));
    assert_eq!(info["input_schema"]["additionalProperties"], false);
    assert!(info["output_schema"]["properties"]["sha256"].is_object());
    let ap = clawfs_agent_tools::definition("apply_patch").unwrap();
    assert_eq!(
        ap["input_schema"]["required"],
        json!(["path", "base_sha256", "patch"])
    );
    assert!(clawfs_agent_tools::definition("nope").is_none());
    assert!(reg["error_codes"]
        .as_array()
        .unwrap()
        .contains(&json!("hash_mismatch")));
}

#[test]
fn edits_match_across_line_endings_and_keep_the_files_own() {
    let w = ws();
    w.put(
        "win.md",
        "# Title\r\n\r\nfirst line\r\nsecond line\r\nthird\r\n",
    );
    // The agent read LF (read_file shows lines) and edits across two lines.
    let r = w.ok(
        "edit_file",
        json!({"path": "win.md", "edits": [{"old": "first line\nsecond line\n", "new": "one\ntwo\nthree\n"}]}),
    );
    assert!(
        r["notes"][0].as_str().unwrap().contains("line endings"),
        "{r}"
    );
    assert_eq!(
        w.get("win.md"),
        "# Title\r\n\r\none\r\ntwo\r\nthree\r\nthird\r\n"
    );
    w.ok(
        "edit_exact",
        json!({"path": "win.md", "old": "two\nthree", "new": "2\n3"}),
    );
    assert_eq!(w.get("win.md"), "# Title\r\n\r\none\r\n2\r\n3\r\nthird\r\n");
    // A CRLF edit of an LF file is written in LF.
    w.put("unix.md", "a\nb\nc\n");
    w.ok(
        "edit_exact",
        json!({"path": "unix.md", "old": "a\r\nb", "new": "x\r\ny"}),
    );
    assert_eq!(w.get("unix.md"), "x\ny\nc\n");
}

#[test]
fn pasted_line_numbers_are_recognised_and_misses_show_the_nearest_line() {
    let w = ws();
    w.put("n.md", "alpha\nbeta gamma\ndelta\n");
    let numbered = w.ok("read_file", json!({"path": "n.md", "line_numbers": true}))["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(numbered.contains("     2\tbeta gamma"), "{numbered}");
    let pasted: String = numbered
        .lines()
        .skip(1)
        .take(2)
        .map(|l| format!("{l}\n"))
        .collect();
    let r = w.ok(
        "edit_file",
        json!({"path": "n.md", "edits": [{"old": pasted, "new": "BETA\nDELTA\n"}]}),
    );
    assert!(
        r["notes"][0].as_str().unwrap().contains("line numbers"),
        "{r}"
    );
    assert_eq!(w.get("n.md"), "alpha\nBETA\nDELTA\n");
    let r = w.err(
        "edit_exact",
        json!({"path": "n.md", "old": "alpah", "new": "x"}),
        "not_found",
    );
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("closest line is 1: \"alpha\""),
        "{r}"
    );
    assert_eq!(w.get("n.md"), "alpha\nBETA\nDELTA\n");
}

#[test]
fn writes_reuse_folders_that_differ_only_in_case() {
    let w = ws();
    w.put("New Folder/sub/a.md", "a\n");
    w.put("Areas/Travel/plan.md", "p\n");
    let r = w.ok(
        "write_file",
        json!({"path": "new folder/sub/x.md", "content": "x\n"}),
    );
    assert_eq!(r["path"], "New Folder/sub/x.md", "{r}");
    assert!(r["note"].as_str().unwrap().contains("another case"), "{r}");
    assert_eq!(w.get("New Folder/sub/x.md"), "x\n");
    assert!(!w.dir.join("new folder").exists());
    let r = w.ok("create_folder", json!({"path": "areas/travel"}));
    assert_eq!(
        (r["path"].as_str(), r["created"].as_bool()),
        (Some("Areas/Travel"), Some(false)),
        "{r}"
    );
    let r = w.ok("create_folder", json!({"path": "areas/travel/2027"}));
    assert_eq!(
        (r["path"].as_str(), r["created"].as_bool()),
        (Some("Areas/Travel/2027"), Some(true)),
        "{r}"
    );
    // Reads afterwards are not ambiguous; a case-only rename of a file still works.
    w.ok("read_file", json!({"path": "new folder/sub/x.md"}));
    let r = w.ok(
        "move",
        json!({"from": "Areas/Travel/plan.md", "to": "Areas/Travel/Plan.md"}),
    );
    assert_eq!(r["to"], "Areas/Travel/Plan.md", "{r}");
}

#[test]
fn a_title_matching_several_files_in_any_case_is_ambiguous() {
    let w = ws();
    w.put("Archive/2023/weekly sync.md", "old\n");
    w.put("Meetings/Weekly Sync.md", "new\n");
    let r = w.err(
        "resolve",
        json!({"title": "weekly sync"}),
        "multiple_matches",
    );
    let c: Vec<&str> = r["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        c,
        ["Archive/2023/weekly sync.md", "Meetings/Weekly Sync.md"],
        "{r}"
    );
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("matches its case exactly"),
        "{r}"
    );
}

#[test]
fn reading_tools_work_on_a_50_mb_file() {
    let w = ws();
    let mut text = String::from("# Log\n\n");
    let mut n = 2;
    while text.len() < 50 << 20 {
        n += 1;
        if n % 100_000 == 0 {
            text.push_str(&format!("## Part {n}\n"));
        } else {
            text.push_str(&format!("line {n} of the big log, nothing to see here\n"));
        }
    }
    text.push_str("the needle at the end\n");
    let total = n + 1;
    w.put("big.log", &text);
    let r = w.ok(
        "read_range",
        json!({"path": "big.log", "start": total - 99, "end": total}),
    );
    assert_eq!(
        (r["start"].as_u64(), r["end"].as_u64()),
        (Some(total as u64 - 99), Some(total as u64))
    );
    assert!(r["content"]
        .as_str()
        .unwrap()
        .ends_with("the needle at the end\n"));
    let r = w.ok("tail", json!({"path": "big.log", "lines": 1}));
    assert_eq!(r["content"], "the needle at the end\n");
    let r = w.ok("head", json!({"path": "big.log", "lines": 1}));
    assert_eq!(r["content"], "# Log\n");
    let r = w.ok("search", json!({"path": "big.log", "pattern": "needle"}));
    assert_eq!(r["matches"][0]["line"], total);
    let r = w.ok("outline", json!({"path": "big.log"}));
    assert_eq!(r["headings"][0]["text"], "Log");
    assert!(r["total"].as_u64().unwrap() > 5, "{}", r["total"]);
    assert_eq!(r["total_lines"], total);
    // A whole-file read is cut with a note, not refused.
    let r = w.ok("read_file", json!({"path": "big.log"}));
    assert_eq!(r["truncated"], true);
    assert!(r["note"].as_str().unwrap().contains("To read on"), "{r}");
    assert!(r["content"].as_str().unwrap().len() <= 20_000 + 200);
}

#[test]
fn text_answers_keep_to_max_chars_and_say_how_to_get_the_rest() {
    let w = ws();
    let text: String = (1..=2000)
        .map(|i| format!("{i:04} {}\n", "word ".repeat(10)))
        .collect();
    w.put("long.md", &text);
    let r = w.ok(
        "read_range",
        json!({"path": "long.md", "start": 1, "end": 2000}),
    );
    let got = r["content"].as_str().unwrap().chars().count();
    assert!(got <= 20_000, "{got}");
    assert!(r["note"].as_str().unwrap().contains("\"start\""), "{r}");
    let next = r["next_start"].as_u64().unwrap();
    let r = w.ok(
        "read_range",
        json!({"path": "long.md", "start": next, "max_chars": 500}),
    );
    assert!(r["content"].as_str().unwrap().chars().count() <= 500);
    let r = w.ok(
        "search",
        json!({"path": "long.md", "pattern": "word", "context": 30, "max_hits": 500}),
    );
    let notes = r["notes"].to_string();
    assert!(notes.contains("context is at most"), "{notes}");
    assert!(notes.contains("left out"), "{notes}");
    assert!(
        r.to_string().chars().count() < 40_000,
        "{}",
        r.to_string().len()
    );
}

#[test]
fn edits_keep_hard_links_and_long_names_are_backed_up() {
    let w = ws();
    w.put("k.md", "l1 l2 l3\n");
    fs::hard_link(w.dir.join("k.md"), w.dir.join("k-link.md")).unwrap();
    w.ok(
        "edit_exact",
        json!({"path": "k.md", "old": "l2", "new": "two"}),
    );
    w.ok(
        "write_file",
        json!({"path": "k.md", "content": "l1 two l3 l4\n"}),
    );
    assert_eq!(
        w.get("k-link.md"),
        "l1 two l3 l4\n",
        "both names show the edit"
    );
    let long = format!("{}.md", "n".repeat(250));
    w.put(&long, "old\n");
    let r = w.ok(
        "edit_exact",
        json!({"path": long, "old": "old", "new": "new"}),
    );
    assert!(r["backup"].as_str().unwrap().contains(".lbak."), "{r}");
    assert_eq!(w.get(&long), "new\n");
}

// ---------- re-sent patches, miscounted headers, MCP argument names ----------

#[test]
fn a_resent_patch_is_already_applied_not_failed() {
    let w = ws();
    w.put("p.md", BASE);
    let sha = w.sha("p.md");
    let patch = "@@ -5,3 +5,3 @@\n ## Tasks\n-- a\n+- A\n - b\n";
    let args = json!({"path": "p.md", "base_sha256": sha, "patch": patch});
    w.ok("apply_patch", args.clone());
    let after = w.get("p.md");
    // Sent again with the old hash: recognised, not hash_mismatch, and nothing written.
    let r = w.err("apply_patch", args, "already_applied");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("nothing was written"),
        "{r}"
    );
    assert_eq!(w.get("p.md"), after);
    // Sent again with the current hash: the same answer.
    let r = w.err(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": w.sha("p.md"), "patch": patch}),
        "already_applied",
    );
    assert_eq!(r["error"], "already_applied");
    // A stale hash with a patch that is not applied stays a hash_mismatch.
    w.err(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": sha, "patch": "@@ -3 +3 @@\n-intro\n+x\n"}),
        "hash_mismatch",
    );
    // A patch of context alone proves nothing: it applies (a no-op), it is not "already applied".
    w.ok(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": w.sha("p.md"), "patch": "@@ -1,1 +1,1 @@\n # Plan\n"}),
    );
}

#[test]
fn an_over_counted_hunk_header_is_named_and_tolerated() {
    let w = ws();
    w.put("p.md", "one\ntwo\nthree\n");
    let sha = w.sha("p.md");
    // The header counts 4 old lines, the body 2, and the patch ends with blank lines: those are
    // not context, and the hunk applies at the end of the file.
    let patch = "@@ -2,4 +2,4 @@\n two\n-three\n+THREE\n\n\n";
    w.ok(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": sha, "patch": patch}),
    );
    assert_eq!(w.get("p.md"), "one\ntwo\nTHREE\n");
    // A failing hunk with a miscounted header says so.
    let r = w.err(
        "apply_patch",
        json!({"path": "p.md", "base_sha256": w.sha("p.md"), "patch": "@@ -1,5 +1,1 @@\n-zero\n+0\n"}),
        "patch_failed",
    );
    let m = r["message"].as_str().unwrap();
    assert!(m.contains("over-counted") && m.contains("states 5"), "{m}");
}

#[test]
fn mcp_argument_names_are_accepted() {
    let w = ws();
    let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    w.put("n.md", &text);
    let r = w.ok(
        "read_file",
        json!({"path": "n.md", "start_line": 3, "end_line": 4, "line_numbers": false}),
    );
    assert_eq!(r["content"], "line 3\nline 4\n");
    let r = w.ok(
        "read_file",
        json!({"path": "n.md", "head": 2, "line_numbers": false}),
    );
    assert_eq!(r["content"], "line 1\nline 2\n");
    let r = w.ok(
        "read_file",
        json!({"path": "n.md", "tail": 2, "line_numbers": false}),
    );
    assert_eq!(r["content"], "line 29\nline 30\n");
    assert_eq!(
        (r["start"].clone(), r["end"].clone()),
        (json!(29), json!(30))
    );
    w.err(
        "read_file",
        json!({"path": "n.md", "head": 2, "tail": 2}),
        "invalid_args",
    );
    w.err(
        "read_file",
        json!({"path": "n.md", "head": 2, "start": 1}),
        "invalid_args",
    );
    w.err(
        "read_file",
        json!({"path": "n.md", "tail": 0}),
        "invalid_args",
    );
    let r = w.ok("read_range", json!({"path": "n.md", "start_line": 30}));
    assert_eq!(r["content"], "line 30\n");
    let r = w.ok(
        "edit_file",
        json!({"path": "n.md", "edits": [{"oldText": "line 7\n", "newText": "line seven\n"}], "dryRun": true}),
    );
    assert_eq!(r["dry_run"], true);
    assert_eq!(w.get("n.md"), text);
    w.ok(
        "move",
        json!({"source": "n.md", "destination": "moved/n.md"}),
    );
    assert!(w.dir.join("moved/n.md").is_file());
    // Unknown names are still refused, so typos surface.
    w.err(
        "read_file",
        json!({"path": "moved/n.md", "startline": 3}),
        "invalid_args",
    );
}

// ---------- find_files, sorted listings with folder sizes, trees with exclusions ----------

#[test]
fn find_files_by_glob_or_part_of_a_name_with_exclusions() {
    let w = ws();
    w.put("Notes/Weekly Sync.md", "a");
    w.put("Archive/2023/weekly sync.md", "b");
    w.put("Archive/2023/other.txt", "c");
    w.put(".obsidian/weekly.md", "hidden");
    let names = |r: &Value| -> Vec<String> {
        r["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_string())
            .collect()
    };
    let r = w.ok("find_files", json!({"pattern": "WEEKLY"}));
    assert_eq!(
        names(&r),
        ["Archive/2023/weekly sync.md", "Notes/Weekly Sync.md"]
    );
    let r = w.ok(
        "find_files",
        json!({"pattern": "*.md", "excludePatterns": ["archive"]}),
    );
    assert_eq!(names(&r), ["Notes/Weekly Sync.md"]);
    let r = w.ok("find_files", json!({"pattern": "2023"}));
    assert_eq!(names(&r), ["Archive/2023"]);
    assert_eq!(r["entries"][0]["type"], "folder");
    let r = w.ok("find_files", json!({"pattern": "*", "max_results": 2}));
    assert_eq!(r["truncated"], true);
    // Without * or ?, brackets are part of the name.
    w.put("a[1].md", "x");
    let r = w.ok("find_files", json!({"pattern": "a[1"}));
    assert_eq!(names(&r), ["a[1].md"]);
    w.err("find_files", json!({"pattern": "  "}), "invalid_args");
    w.err("find_files", json!({"pattern": "*[z"}), "invalid_args");
}

#[test]
fn listings_sort_by_name_or_size_and_total_folders() {
    let w = ws();
    w.put("small.md", "1");
    w.put("big.md", &"x".repeat(500));
    w.put("Folder/a.md", &"y".repeat(300));
    w.put("Folder/deep/b.md", &"z".repeat(400));
    let r = w.ok("list_files", json!({"sortBy": "size"}));
    let e = r["entries"].as_array().unwrap();
    let order: Vec<&str> = e.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(order, ["Folder", "big.md", "small.md"]);
    assert_eq!(
        e[0]["size"], 700,
        "a folder's size is the total below it: {r}"
    );
    let r = w.ok("list_files", json!({"sort_by": "name", "recursive": true}));
    let order: Vec<&str> = r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        [
            "Folder",
            "Folder/a.md",
            "Folder/deep",
            "Folder/deep/b.md",
            "big.md",
            "small.md"
        ]
    );
    assert_eq!(r["entries"][2]["size"], 400);
    w.err("list_files", json!({"sort_by": "colour"}), "invalid_args");
}

#[test]
fn directory_tree_leaves_out_excluded_folders() {
    let w = ws();
    w.put("src/main.rs", "fn main() {}");
    w.put("node_modules/x/index.js", "x");
    w.put("README.md", "r");
    let r = w.ok(
        "directory_tree",
        json!({"excludePatterns": ["node_modules", "*.md"]}),
    );
    let kids: Vec<&str> = r["tree"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(kids, ["src"]);
    assert_eq!(r["entries"], 2);
}

// ---------- read_media_file ----------

#[test]
fn read_media_file_returns_base64_with_the_type_its_bytes_show() {
    use base64::Engine as _;
    let w = ws();
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0".to_vec();
    fs::write(w.dir.join("pic.jpg"), &png).unwrap();
    let r = w.ok("read_media_file", json!({"path": "PIC.JPG"}));
    assert_eq!(r["mime_type"], "image/png", "content decides: {r}");
    assert_eq!(r["kind"], "image");
    assert_eq!(r["size"], png.len());
    let data = base64::engine::general_purpose::STANDARD
        .decode(r["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(data, png);
    w.put("song.wav", "RIFF\0\0\0\0WAVEfmt ");
    assert_eq!(
        w.ok("read_media_file", json!({"path": "song.wav"}))["kind"],
        "audio"
    );
    let f = fs::File::create(w.dir.join("huge.bin")).unwrap();
    f.set_len(9 << 20).unwrap();
    w.err("read_media_file", json!({"path": "huge.bin"}), "too_large");
    w.err(
        "read_media_file",
        json!({"path": ".git/x.png"}),
        "protected",
    );
    w.err(
        "read_media_file",
        json!({"path": "../secret.txt"}),
        "denied",
    );
}

#[test]
fn a_very_deep_tree_is_walked_to_a_bounded_depth_and_says_so() {
    let w = ws();
    // 300 levels: each folder is opened from its parent, and the walk stops at 64 levels.
    let mut p = w.dir.join("deep");
    for i in 0..300 {
        p = p.join(format!("d{i}"));
    }
    fs::create_dir_all(&p).unwrap();
    fs::write(p.join("leaf.md"), "bottom\n").unwrap();
    fs::write(w.dir.join("deep/top-leaf.md"), "top\n").unwrap();
    let r = w.ok("find_files", json!({"pattern": "leaf", "path": "deep"}));
    assert_eq!(r["entries"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["entries"][0]["path"], "deep/top-leaf.md");
    assert_eq!(r["truncated"], true, "the levels left out are said: {r}");
    let r = w.ok("search_files", json!({"pattern": "bottom", "path": "deep"}));
    assert_eq!(r["truncated"], true, "{r}");
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("64 levels") && !notes.contains("max_results"),
        "{r}"
    );
    let r = w.ok(
        "list_files",
        json!({"path": "deep", "recursive": true, "max_results": 2000}),
    );
    assert_eq!(r["truncated"], true, "{r}");
    // A shallow listing of the same folder is complete.
    let r = w.ok("list_files", json!({"path": "deep"}));
    assert_eq!(r["truncated"], false, "{r}");
    assert_eq!(r["sizes_incomplete"], true, "{r}");
}

/// The meter is asked right before every change a call makes, not only before writes that add
/// bytes (the daemon refuses there the changes of a call an emergency stop overtook): refused,
/// nothing changes.
#[test]
fn a_refusing_meter_stops_every_kind_of_change() {
    let mut w = ws();
    w.put("a.md", "alpha\n");
    w.put("keep/b.md", "beta\n");
    let trashed = w.ok("delete", json!({"path": "keep/b.md"}))["trash_id"]
        .as_str()
        .unwrap()
        .to_string();
    let before = tree(&w.dir);
    w.root = ToolRoot::new(&w.dir)
        .unwrap()
        .with_meter(Arc::new(|_| Err("stopped: no change now".into())));
    for (tool, req) in [
        ("write_file", json!({"path": "new.md", "content": "x"})),
        (
            "edit_file",
            json!({"path": "a.md", "edits": [{"old": "alpha", "new": "omega"}]}),
        ),
        ("move", json!({"from": "a.md", "to": "c.md"})),
        ("delete", json!({"path": "a.md"})),
        ("restore", json!({"trash_id": trashed})),
        ("create_folder", json!({"path": "d/e"})),
    ] {
        let r = w.err(tool, req, "denied");
        assert!(
            r["message"].as_str().unwrap().contains("stopped"),
            "{tool}: {r}"
        );
    }
    assert_eq!(tree(&w.dir), before);
}

/// Every path beneath `dir` with its content (files) or `/` (folders), sorted.
fn tree(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
                out.push((rel, "/".into()));
            } else {
                out.push((rel, fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

// ---------- the ledger, bounded backups, emptying the trash ----------

/// Counts what a call tells its ledger: +1 per inode made, -1 per removal done.
#[derive(Default, Clone)]
struct Tally(Arc<std::sync::atomic::AtomicI64>);

impl Tally {
    fn get(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl clawfs_agent_tools::Ledger for Tally {
    fn making(
        &self,
        _dir: std::os::fd::BorrowedFd<'_>,
    ) -> Box<dyn FnOnce(&std::ffi::OsStr) + Send> {
        let n = Arc::clone(&self.0);
        Box::new(move |_| {
            n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
    }
    fn removing(
        &self,
        _dir: std::os::fd::BorrowedFd<'_>,
        _name: &std::ffi::OsStr,
    ) -> Box<dyn FnOnce() + Send> {
        let n = Arc::clone(&self.0);
        Box::new(move || {
            n.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        })
    }
    fn rewriting(
        &self,
        _file: std::os::fd::BorrowedFd<'_>,
    ) -> Box<dyn FnOnce(std::os::fd::BorrowedFd<'_>) + Send> {
        Box::new(|_| {})
    }
    fn renaming(&self, _dir: std::os::fd::BorrowedFd<'_>) -> Box<dyn FnOnce() + Send> {
        Box::new(|| {})
    }
}

/// Every inode under `dir` (the workspace with its trash and backups), the root not counted.
fn inodes(dir: &Path) -> i64 {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            n += 1;
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    n
}

/// Every inode a call makes or removes is told to the ledger (the daemon counts quotas from
/// it): after writes, edits, folders, moves, deletes, restores and emptying the trash, what the
/// ledger was told adds up to the inodes the workspace gained. Edits keep at most ten backups
/// of a file; emptying the trash removes its entries and the backups of what they held (but
/// not of a path that has a file again), so everything comes back.
#[test]
fn the_ledger_hears_of_every_inode_and_the_trash_empties_for_good() {
    let mut w = ws();
    let tally = Tally::default();
    w.root = ToolRoot::new(&w.dir)
        .unwrap()
        .with_ledger(Arc::new(tally.clone()));
    let start = inodes(&w.dir);
    w.ok(
        "write_file",
        json!({"path": "notes/a.md", "content": "T0\n"}),
    );
    for i in 1..=14 {
        w.ok(
            "edit_exact",
            json!({"path": "notes/a.md", "old": format!("T{}", i - 1), "new": format!("T{i}")}),
        );
    }
    let backups = w.dir.join(".clawfs/backups/notes");
    assert_eq!(
        fs::read_dir(&backups).unwrap().count(),
        10,
        "ten backups kept"
    );
    w.ok(
        "write_file",
        json!({"path": "deep/x/y/b.md", "content": "b\n"}),
    );
    w.ok(
        "edit_exact",
        json!({"path": "deep/x/y/b.md", "old": "b", "new": "c"}),
    );
    w.ok("create_folder", json!({"path": "empty/one"}));
    w.ok("move", json!({"from": "empty", "to": "moved/empty"}));
    w.ok("write_file", json!({"path": "keep.md", "content": "k\n"}));
    w.ok(
        "edit_exact",
        json!({"path": "keep.md", "old": "k", "new": "K"}),
    );
    let deep = w.ok("delete", json!({"path": "deep"}))["trash_id"].clone();
    let a = w.ok("delete", json!({"path": "notes/a.md"}))["trash_id"].clone();
    let kept = w.ok("delete", json!({"path": "keep.md"}))["trash_id"].clone();
    w.ok("restore", json!({"trash_id": kept}));
    w.ok("delete", json!({"path": "keep.md"}));
    w.ok(
        "write_file",
        json!({"path": "keep.md", "content": "again\n"}),
    );
    assert_eq!(tally.get(), inodes(&w.dir) - start);
    // One entry, then the rest.
    let r = w.ok("empty_trash", json!({"trash_id": a}));
    assert_eq!(r["removed"], json!([a]), "{r}");
    // a.md and its 4 bytes.
    assert_eq!(r["entries"], 1, "{r}");
    assert_eq!(r["bytes"], 4, "{r}");
    assert!(!backups.join("a.md.bak").exists());
    assert!(
        !backups.exists(),
        "a.md's backups go with it, and their emptied folder"
    );
    let r = w.ok("empty_trash", json!({}));
    assert_eq!(r["removed"].as_array().unwrap().len(), 2, "{r}");
    assert!(r["removed"].as_array().unwrap().contains(&deep), "{r}");
    assert_eq!(w.ok("list_trash", json!({}))["total"], 0);
    assert!(
        !w.dir.join(".clawfs/backups/deep").exists(),
        "deep's backups go"
    );
    // keep.md is there again: its backups stay.
    assert_eq!(
        fs::read_dir(w.dir.join(".clawfs/backups"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("keep.md.bak."))
            .count(),
        1
    );
    assert_eq!(tally.get(), inodes(&w.dir) - start);
    w.err("empty_trash", json!({"trash_id": a}), "not_found");
    w.err("empty_trash", json!({"trash_id": "../x"}), "invalid_args");
}

// ---------- backups listed and restored ----------

#[test]
fn backups_are_listed_restored_and_kept_as_the_limits_say() {
    let mut w = ws();
    w.root = ToolRoot::new(&w.dir).unwrap().with_limits(Limits {
        backups_kept: 3,
        ..Limits::default()
    });
    w.put("p.md", "v0\n");
    for i in 1..=5 {
        w.ok(
            "edit_exact",
            json!({"path": "p.md", "old": format!("v{}", i - 1), "new": format!("v{i}")}),
        );
    }
    let listed = |w: &Ws| -> Vec<String> {
        let r = w.ok("list_backups", json!({"path": "p.md"}));
        r["backups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                assert!(b["created"].as_str().unwrap().ends_with('Z'), "{b}");
                b["backup"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let held = |w: &Ws, b: &str| w.get(&format!(".clawfs/backups/{b}"));
    let names = listed(&w);
    // Three kept, newest first: what the last three edits replaced.
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(
        names.iter().map(|b| held(&w, b)).collect::<Vec<_>>(),
        ["v4\n", "v3\n", "v2\n"]
    );

    // A restore is a hash-checked edit, and keeps what it replaces.
    let oldest = names[2].clone();
    let stale = "0".repeat(64);
    w.err(
        "restore_backup",
        json!({"path": "p.md", "backup": oldest, "base_sha256": stale}),
        "hash_mismatch",
    );
    let r = w.ok(
        "restore_backup",
        json!({"path": "p.md", "backup": oldest, "base_sha256": w.sha("p.md")}),
    );
    assert_eq!(w.get("p.md"), "v2\n");
    assert_eq!(r["sha256"], w.sha("p.md"));
    assert_eq!(r["restored"], oldest.as_str());
    let names = listed(&w);
    assert_eq!(names.len(), 3);
    assert_eq!(held(&w, &names[0]), "v5\n");

    // Nothing but a listed backup is restored: nothing changes.
    for bad in [
        "../p.md",
        "p.md",
        ".",
        "p.md.bak.20260101-000000",
        &names[0].replace(".bak.", "/"),
    ] {
        w.err(
            "restore_backup",
            json!({"path": "p.md", "backup": bad}),
            "not_found",
        );
        assert_eq!(w.get("p.md"), "v2\n");
    }

    // A backup past the age limit goes with the file's next backup (ten kept now: by age).
    w.root = ToolRoot::new(&w.dir).unwrap();
    w.put(".clawfs/backups/p.md.bak.20000101-000000", "ancient\n");
    assert!(listed(&w).iter().any(|b| b.contains("20000101")));
    w.ok(
        "edit_exact",
        json!({"path": "p.md", "old": "v2", "new": "v6"}),
    );
    let names = listed(&w);
    assert!(!names.iter().any(|b| b.contains("20000101")), "{names:?}");
    assert_eq!(names.len(), 4);
}

// ---------- what a hostile caller sends ----------

#[test]
fn hostile_sizes_get_short_answers_and_bounded_work() {
    let w = ws();
    let text: String = (1..=1000)
        .map(|i| format!("{}{i}\n", "w".repeat(100)))
        .collect();
    w.put("long.md", &text);
    // A glob too long to compile is refused, not a panic.
    let r = w.err(
        "find_files",
        json!({"pattern": format!("*{}", "x".repeat(200_000))}),
        "invalid_args",
    );
    assert!(r.to_string().len() < 5_000, "{}", r.to_string().len());
    // An old text that occurs nowhere: the near-line hint is bounded work.
    let r = w.err(
        "edit_exact",
        json!({"path": "long.md", "old": "q".repeat(100_000), "new": "z"}),
        "not_found",
    );
    assert!(r.to_string().len() < 5_000, "{}", r.to_string().len());
    // A patch of too many hunks is refused whole; failures are reported in part.
    let many: String = (0..1001)
        .map(|i| format!("@@ -{i},1 +{i},1 @@\n-nothing {i}\n+else\n"))
        .collect();
    let r = w.err(
        "apply_patch",
        json!({"path": "long.md", "base_sha256": w.sha("long.md"), "patch": many}),
        "patch_failed",
    );
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("more than 1000 hunks"),
        "{r}"
    );
    let some: String = (0..900)
        .map(|i| format!("@@ -{i},1 +{i},1 @@\n-nothing {i}\n+else\n"))
        .collect();
    let r = w.err(
        "apply_patch",
        json!({"path": "long.md", "base_sha256": w.sha("long.md"), "patch": some}),
        "patch_failed",
    );
    assert!(r["details"].as_array().unwrap().len() <= 21, "{r}");
    // An error that quotes a huge input quotes a little of it.
    let r = w.err(
        "resolve",
        json!({"title": "t".repeat(1 << 20)}),
        "not_found",
    );
    assert!(r.to_string().len() < 10_000, "{}", r.to_string().len());
    assert_eq!(w.get("long.md"), text);
}

#[test]
fn backups_are_regular_files_of_their_own_name_and_leave_no_folders() {
    let w = ws();
    // Folders named like backups (the mirror of someone's folders) are no backups: not
    // listed, never counted, never pruned in their place.
    w.put("n.md", "v0\n");
    for k in 1..=12 {
        fs::create_dir_all(
            w.dir
                .join(format!(".clawfs/backups/n.md.bak.29991231-235959-{k}")),
        )
        .unwrap();
    }
    for i in 1..=3 {
        w.ok(
            "edit_exact",
            json!({"path": "n.md", "old": format!("v{}", i - 1), "new": format!("v{i}")}),
        );
    }
    let r = w.ok("list_backups", json!({"path": "n.md"}));
    assert_eq!(r["backups"].as_array().unwrap().len(), 3, "{r}");

    // A name cut for its length and a file named like the cut name keep apart.
    use sha2::Digest;
    let long = format!("{}.md", "L".repeat(240));
    let hash = hex::encode(sha2::Sha256::digest(long.as_bytes()));
    let short = format!("{}~{}", &long[..220], &hash[..8]);
    w.put(&long, "long v1\n");
    w.put(&short, "short v1\n");
    w.ok(
        "edit_exact",
        json!({"path": long, "old": "v1", "new": "v2"}),
    );
    let r = w.ok("list_backups", json!({"path": short}));
    assert_eq!(r["backups"], json!([]), "{r}");

    // A deep file's history given back takes its folders with it.
    w.put("deep/a/b/f.md", "x1\n");
    w.ok(
        "edit_exact",
        json!({"path": "deep/a/b/f.md", "old": "x1", "new": "x2"}),
    );
    assert!(w.dir.join(".clawfs/backups/deep/a/b").exists());
    let id = w.ok("delete", json!({"path": "deep/a/b/f.md"}))["trash_id"]
        .as_str()
        .unwrap()
        .to_string();
    w.ok("empty_trash", json!({"trash_id": id}));
    assert!(!w.dir.join(".clawfs/backups/deep").exists());
}

/// A path longer than the kernel takes is refused before any work on it: however many
/// components an agent sends, a call's time stays linear in a bounded path.
#[test]
fn a_path_past_path_max_is_refused_at_once() {
    let w = ws();
    let deep = format!("zz/{}f", "a/".repeat(100_000));
    for tool in ["info", "list_backups", "read_file"] {
        let r = w.err(tool, json!({"path": deep}), "invalid_args");
        assert!(r["message"].as_str().unwrap().contains("4096"), "{r}");
    }
    let r = w.err(
        "restore_backup",
        json!({"path": deep, "backup": "f.bak.20200101-000000"}),
        "invalid_args",
    );
    assert!(r["message"].as_str().unwrap().contains("4096"), "{r}");
}

/// A new file never replaces one made meanwhile under its name: write_file making a file and
/// restore_backup making a removed one again take a free name only.
#[test]
fn a_new_file_takes_a_free_name_only() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("taken"), "theirs").unwrap();
    let d = fs::File::open(dir.path()).unwrap();
    let e = clawfs_agent_tools::beneath::write_new(
        &d,
        "taken",
        b"mine",
        clawfs_agent_tools::beneath::FileMode::mode(0o644),
    )
    .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(
        fs::read_to_string(dir.path().join("taken")).unwrap(),
        "theirs"
    );
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary left"
    );
    clawfs_agent_tools::beneath::write_new(
        &d,
        "free",
        b"mine",
        clawfs_agent_tools::beneath::FileMode::mode(0o644),
    )
    .unwrap();
    assert_eq!(fs::read_to_string(dir.path().join("free")).unwrap(), "mine");
}
