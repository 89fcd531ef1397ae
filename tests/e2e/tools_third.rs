//! What agent frameworks stumbled on, fixed: each through both file interfaces (`tools/call/`
//! and the requests/responses pair) and over MCP with a real client (the `mcp` package).

use std::fs;

use serde_json::{json, Value};

use crate::common::{cli, ok, tool_call, tool_request, Mounted};
use crate::mcp::{mcp_session, mcp_session_stateless};

fn fixture(m: &Mounted) {
    let ws = m.ws();
    fs::create_dir_all(ws.join("notes/deep")).unwrap();
    fs::write(ws.join("notes/deep/Atlas.md"), "# Atlas\nmaps\n").unwrap();
    fs::write(ws.join("notes/todo.md"), "alpha\nbeta\n").unwrap();
    let paragraphs: String = (1..=3000)
        .map(|i| format!("Paragraph {i}: some words about the plan.\n"))
        .collect();
    fs::write(ws.join("notes/long.md"), paragraphs).unwrap();
    // café in Latin-1.
    fs::write(ws.join("latin1.txt"), b"caf\xe9\n").unwrap();
}

fn each_interface(check: impl Fn(&dyn Fn(&str, Value) -> Value)) {
    let m = Mounted::new();
    each_interface_of(&m, check);
}

fn each_interface_of(m: &Mounted, check: impl Fn(&dyn Fn(&str, Value) -> Value)) {
    fixture(m);
    check(&|tool, request| tool_call(m, tool, &request));
    fs::write(m.ws().join("notes/todo.md"), "alpha\nbeta\n").unwrap();
    check(&|tool, request| tool_request(m, tool, &request));
}

/// Sets `[defaults] backups` of the store's policy to `table` and reloads it.
fn backups_policy(m: &Mounted, table: &str) {
    let policy = fs::read_to_string(m.backing("system/policy.toml")).unwrap();
    let start = policy.find("backups = {").unwrap();
    let end = start + policy[start..].find('\n').unwrap();
    let new = format!("{}backups = {table}{}", &policy[..start], &policy[end..]);
    let file = m.dir.path().join("policy.toml");
    fs::write(&file, new).unwrap();
    ok(cli(m, &["policy", "reload", file.to_str().unwrap()]));
}

#[test]
fn a_glob_sent_to_search_files_finds_the_names_it_means() {
    each_interface(|call| {
        for (request, path) in [
            (json!({"pattern": "*.md"}), "notes/todo.md"),
            (
                json!({"path": "/", "pattern": "**/Atlas*"}),
                "notes/deep/Atlas.md",
            ),
        ] {
            let r = call("search_files", request.clone());
            assert_eq!(r["ok"], true, "{r}");
            assert_eq!(r["matches"], json!([]), "{r}");
            let names: Vec<&str> = r["names"]
                .as_array()
                .unwrap_or_else(|| panic!("{request}: {r}"))
                .iter()
                .map(|e| e["path"].as_str().unwrap())
                .collect();
            assert!(names.contains(&path), "{request}: {names:?}");
            assert!(r["notes"].to_string().contains("find_files"), "{r}");
        }
        // A glob that does occur as text is found as text, with no names.
        let r = call("search_files", json!({"pattern": "Paragraph 1?:"}));
        assert!(r.get("names").is_none(), "{r}");
    });
}

#[test]
fn every_answer_keeps_to_its_character_budget_and_says_how_to_get_the_rest() {
    each_interface(|call| {
        let r = call(
            "search_files",
            json!({"pattern": "Paragraph", "max_results": 500, "context": 10}),
        );
        assert_eq!(r["ok"], true);
        let size = r.to_string().chars().count();
        assert!(size <= 20_000, "{size} characters");
        assert_eq!(r["truncated"], true);
        let notes = r["notes"].to_string();
        assert!(notes.contains("of the 500 matches are shown"), "{notes}");
        assert!(notes.contains("narrow the call"), "{notes}");
        let r = call("find_files", json!({"pattern": "*", "max_results": 2000}));
        assert!(r.to_string().chars().count() <= 20_000);
    });
}

#[test]
fn reading_tools_give_the_hash_an_edit_needs_and_one_shape() {
    each_interface(|call| {
        let info = call("info", json!({"path": "notes/todo.md"}));
        let sha = info["sha256"].as_str().unwrap().to_string();
        assert_eq!(info["size"], info["bytes"]);
        let read = call("read_file", json!({"path": "notes/todo.md"}));
        assert_eq!(read["sha256"], sha.as_str(), "{read}");
        // No line numbers unless asked, in every reading tool.
        assert_eq!(read["content"], "alpha\nbeta\n");
        let range = call("read_range", json!({"path": "notes/todo.md", "start": 2}));
        assert_eq!(
            (&range["content"], &range["sha256"]),
            (&json!("beta\n"), &json!(sha))
        );
        let tail = call("tail", json!({"path": "notes/todo.md", "lines": 1}));
        assert_eq!(tail["content"], "beta\n");
        let meta = call("get_file_info", json!({"path": "notes/todo.md"}));
        assert_eq!(meta["sha256"], sha.as_str());
        // The hash read is the one an edit takes.
        let r = call(
            "apply_patch",
            json!({"path": "notes/todo.md", "base_sha256": sha,
                   "patch": "--- a\n+++ b\n@@ -1,2 +1,2 @@\n-alpha\n+ALPHA\n beta\n"}),
        );
        assert_eq!(r["ok"], true, "{r}");
    });
}

#[test]
fn refusals_point_where_to_go() {
    each_interface(|call| {
        // Not UTF-8: the tool for bytes is named.
        let r = call("read_file", json!({"path": "latin1.txt"}));
        assert_eq!(r["error"], "not_text");
        assert!(
            r["message"].as_str().unwrap().contains("read_media_file"),
            "{r}"
        );
        // The loser of two same edits hears that the file changed, not of a near line.
        let edit = json!({"path": "notes/todo.md", "old": "beta", "new": "BETA"});
        assert_eq!(call("edit_exact", edit.clone())["ok"], true);
        let r = call("edit_exact", edit);
        assert_eq!(r["error"], "not_found");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("changed since you read it"),
            "{r}"
        );
        // An unknown workspace: the answer names those there are.
        let r = call("info", json!({"path": "x", "workspace": "nope"}));
        assert_eq!(r["error"], "not_found");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("the workspaces you may read are: default"),
            "{r}"
        );
    });
}

#[test]
fn backups_are_kept_as_the_policy_says_listed_and_restored() {
    let m = Mounted::new();
    backups_policy(&m, "{ keep = 2, max_age_days = 7 }");
    each_interface_of(&m, |call| {
        let edit = |old: &str, new: &str| {
            let r = call(
                "edit_exact",
                json!({"path": "notes/todo.md", "old": old, "new": new}),
            );
            assert_eq!(r["ok"], true, "{r}");
        };
        edit("alpha", "one");
        edit("one", "two");
        edit("two", "three");
        let r = call("list_backups", json!({"path": "notes/todo.md"}));
        assert_eq!(
            (&r["kept"], &r["max_age_days"]),
            (&json!(2), &json!(7)),
            "{r}"
        );
        let backups = r["backups"].as_array().unwrap();
        assert_eq!(backups.len(), 2, "{r}");
        // The older of the two held "one": put it back, checked against the hash read.
        let oldest = backups[1]["backup"].as_str().unwrap();
        let sha = call("read_file", json!({"path": "notes/todo.md"}))["sha256"].clone();
        let r = call(
            "restore_backup",
            json!({"path": "notes/todo.md", "backup": oldest, "base_sha256": sha}),
        );
        assert_eq!(r["ok"], true, "{r}");
        let read = call("read_file", json!({"path": "notes/todo.md"}));
        assert_eq!(read["content"], "one\nbeta\n");
        assert_eq!(read["sha256"], r["sha256"]);
        // A name not listed is no backup.
        let r = call(
            "restore_backup",
            json!({"path": "notes/todo.md", "backup": "../../todo.md"}),
        );
        assert_eq!(r["error"], "not_found", "{r}");
        // Removed with rm, the file keeps its history, and a restore makes it again.
        fs::remove_file(m.ws().join("notes/todo.md")).unwrap();
        let r = call("list_backups", json!({"path": "notes/todo.md"}));
        let newest = r["backups"][0]["backup"].as_str().unwrap().to_string();
        let r = call(
            "restore_backup",
            json!({"path": "notes/todo.md", "backup": newest}),
        );
        assert_eq!(r["ok"], true, "{r}");
        assert!(r.get("backup").is_none(), "{r}");
        let read = call("read_file", json!({"path": "notes/todo.md"}));
        assert_eq!(read["content"], "three\nbeta\n");
    });
}

/// The tools an MCP client is shown: `(names, definitions)`.
fn listed(out: &Value) -> (Vec<String>, Vec<Value>) {
    let defs = out["tool_defs"].as_array().unwrap().clone();
    let names = defs
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    (names, defs)
}

#[test]
fn an_mcp_client_sees_lean_described_tools_and_gets_the_same_answers() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    fixture(&m);
    let calls = json!([
        ["search_files", {"pattern": "*.md"}],
        ["read_file", {"path": "notes/todo.md"}],
        ["search_files", {"pattern": "Paragraph", "max_results": 500, "context": 10}],
        ["read_file", {"path": "latin1.txt"}],
        ["info", {"path": "notes/todo.md"}],
        ["list_allowed", {}],
        // The agent's own file: edited, then its backup listed.
        ["write_file", {"path": "mine.md", "content": "alpha\n"}],
        ["edit_exact", {"path": "mine.md", "old": "alpha", "new": "ALPHA"}],
        ["list_backups", {"path": "mine.md"}],
    ]);
    // The client checks every structured answer against the tool's outputSchema.
    let out = mcp_session(&m, "fs-engine", &[], calls);
    let (names, defs) = listed(&out);
    let mut lean: Vec<&str> = clawfs_agent_tools::LEAN_TOOLS.to_vec();
    lean.sort_unstable();
    let mut shown: Vec<&str> = names.iter().map(String::as_str).collect();
    shown.sort_unstable();
    assert_eq!(shown, lean);
    for d in &defs {
        let name = d["name"].as_str().unwrap();
        let a = &d["annotations"];
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(a[hint].is_boolean(), "{name}: {hint} in {a}");
        }
        assert!(
            d["inputSchema"]["properties"]["workspace"].is_object(),
            "{name}: {d}"
        );
        if name != "read_media_file" {
            assert_eq!(d["outputSchema"]["type"], "object", "{name}");
        }
        let text = d.to_string();
        assert!(!text.contains("\"format\":\"uint"), "{name}: {text}");
        assert!(!d["description"].as_str().unwrap().contains('\n'), "{name}");
    }
    let hint = |name: &str, h: &str| {
        defs.iter().find(|d| d["name"] == name).unwrap()["annotations"][h].clone()
    };
    assert_eq!(hint("read_file", "readOnlyHint"), true);
    assert_eq!(hint("delete", "destructiveHint"), true);
    assert_eq!(hint("create_folder", "idempotentHint"), true);

    let r = out["results"].as_array().unwrap();
    let ok = |i: usize| -> &Value {
        assert_eq!(r[i]["is_error"], false, "call {i}: {}", r[i]);
        &r[i]["structured"]
    };
    assert!(ok(0)["names"].to_string().contains("notes/todo.md"));
    assert_eq!(ok(1)["sha256"], ok(4)["sha256"]);
    assert!(ok(2).to_string().chars().count() <= 20_000);
    assert_eq!(r[3]["is_error"], true);
    assert!(r[3]["structured"]["message"]
        .as_str()
        .unwrap()
        .contains("read_media_file"));
    ok(5);
    ok(6);
    ok(7);
    let backups = ok(8)["backups"].as_array().unwrap();
    assert_eq!(backups.len(), 1);

    // The full set is the schema weight the lean one spares.
    let full = mcp_session(&m, "fs-engine", &["--tools", "full"], json!([]));
    let (full_names, full_defs) = listed(&full);
    assert!(full_names.len() > names.len() + 10, "{full_names:?}");
    let weight = |d: &[Value]| Value::Array(d.to_vec()).to_string().len();
    assert!(weight(&defs) * 3 < weight(&full_defs) * 2);
}

#[test]
fn clients_of_the_stateless_revision_and_of_the_handshake_are_both_served() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    fixture(&m);
    let calls = json!([["read_file", {"path": "notes/todo.md"}]]);
    let modern = mcp_session_stateless(&m, "fs-engine", calls.clone());
    assert_eq!(modern["protocol"], "2026-07-28", "{modern}");
    let legacy = mcp_session(&m, "fs-engine", &[], calls);
    assert_eq!(legacy["protocol"], "2025-11-25", "{legacy}");
    for out in [&modern, &legacy] {
        assert_eq!(out["tools"], legacy["tools"]);
        let r = &out["results"][0];
        assert_eq!(r["is_error"], false, "{r}");
        assert_eq!(r["structured"]["content"], "alpha\nbeta\n");
    }
}

#[test]
fn the_registry_through_the_mount_carries_what_mcp_shows() {
    let m = Mounted::new();
    let registry: Value =
        serde_json::from_slice(&fs::read(m.path("tools/registry.json")).unwrap()).unwrap();
    let lean: Vec<&str> = registry["lean_tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(lean, clawfs_agent_tools::LEAN_TOOLS);
    let tools = registry["tools"].as_array().unwrap();
    assert_eq!(tools.len(), clawfs_agent_tools::TOOL_NAMES.len());
    for t in tools {
        let name = t["name"].as_str().unwrap();
        // The same definition as its own file.
        let own: Value = serde_json::from_slice(
            &fs::read(m.path(&format!("tools/definitions/tool-{name}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(&own, t, "{name}");
        assert!(t["annotations"]["readOnlyHint"].is_boolean(), "{name}");
        assert!(
            t["input_schema"]["properties"]["workspace"].is_object(),
            "{name}"
        );
        assert!(!t.to_string().contains("\"format\":\"uint"), "{name}");
    }
}
