//! `clawfs mcp`: the agent tools as an MCP server, driven by a real MCP client (the `mcp` PyPI
//! package, installed by `scripts/test-venv.sh`). The server runs as the agent, sandboxed, and
//! every call goes through the mount, so the daemon's policy and audit apply to it.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::common::{audit_until, clawfs_bin, output_with_input, Mounted};

/// The Python of the test venv that holds the `mcp` package.
fn python() -> PathBuf {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python3");
    assert!(
        py.exists(),
        "{} is missing: run `bash scripts/test-venv.sh` (scripts/test.sh does)",
        py.display()
    );
    py
}

/// Runs the MCP client against `clawfs mcp --agent AGENT EXTRA…` on this mount with `calls`
/// (a list of `[tool, arguments]`); returns what it printed.
pub(crate) fn mcp_session(m: &Mounted, agent: &str, extra: &[&str], calls: Value) -> Value {
    mcp_session_at(m, Some(&m.mnt), agent, extra, calls, "legacy")
}

/// [`mcp_session`] by a client that speaks the stateless revision (2026-07-28) when the
/// server does.
pub(crate) fn mcp_session_stateless(m: &Mounted, agent: &str, calls: Value) -> Value {
    mcp_session_at(m, Some(&m.mnt), agent, &[], calls, "auto")
}

/// [`mcp_session`] with `--mount MOUNT` only when `mount` is given.
fn mcp_session_at(
    m: &Mounted,
    mount: Option<&std::path::Path>,
    agent: &str,
    extra: &[&str],
    calls: Value,
    mode: &str,
) -> Value {
    let client =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/e2e/clients/mcp_client.py");
    let mut cmd = Command::new(python());
    cmd.env("MCP_MODE", mode)
        .arg(client)
        .arg(clawfs_bin())
        .args(["mcp", "--store"])
        .arg(&m.store);
    if let Some(mount) = mount {
        cmd.arg("--mount").arg(mount);
    }
    cmd.args(["--agent", agent]).args(extra).current_dir("/");
    let out = output_with_input(&mut cmd, calls.to_string().as_bytes());
    assert!(
        out.status.success(),
        "MCP client failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        m.log()
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn an_mcp_client_uses_the_tools_as_the_agent_through_the_mount() {
    use std::os::unix::fs::PermissionsExt;
    let m = Mounted::new();
    m.open_workspace_to_all();
    let plan = m.ws().join("plan.md");
    std::fs::write(&plan, "# Plan\n\n- one\n- two\n").unwrap();
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::create_dir(m.ws().join("pics")).unwrap();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
    std::fs::write(m.ws().join("pics/dot.png"), png).unwrap();
    let calls = json!([
        ["read_file", {"path": "plan.md", "line_numbers": false}],
        // MCP filesystem names and argument names work unchanged.
        ["read_text_file", {"path": "plan.md", "tail": 1}],
        ["edit_file", {"path": "plan.md", "edits": [{"oldText": "- two", "newText": "- 2"}]}],
        ["create_directory", {"path": "made/by/mcp"}],
        ["write_file", {"path": "made/by/mcp/note.md", "content": "hello\n"}],
        ["move_file", {"source": "made/by/mcp/note.md", "destination": "made/note.md"}],
        ["list_directory_with_sizes", {"path": "made", "sortBy": "size"}],
        ["find_files", {"pattern": "*.md", "excludePatterns": ["pics"]}],
        ["read_media_file", {"path": "pics/dot.png"}],
        // A refusal is a tool error the model can read, not a protocol error.
        ["read_file", {"path": "../../vault/x"}],
        ["no_such_tool", {}],
        ["info", {"path": "plan.md", "workspace": "elsewhere"}],
        ["write_file", {"path": "big.md", "content": "x".repeat(5 << 20)}],
    ]);
    let out = mcp_session(&m, "fs-engine", &["--tools", "full"], calls);
    assert_eq!(out["server"], "clawfs");
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    // The full set: every tool, and the filesystem-server names they answer to.
    for t in clawfs_agent_tools::TOOL_NAMES.iter().chain(&[
        "read_text_file",
        "move_file",
        "list_directory",
    ]) {
        assert!(tools.contains(t), "{t} not listed: {tools:?}");
    }
    let r = out["results"].as_array().unwrap();
    let ok = |i: usize| -> &Value {
        assert_eq!(r[i]["is_error"], false, "call {i}: {}", r[i]);
        &r[i]["structured"]
    };
    assert_eq!(ok(0)["content"], "# Plan\n\n- one\n- two\n");
    assert!(ok(1)["content"].as_str().unwrap().contains("- two"));
    assert_eq!(ok(2)["changed"], true);
    assert_eq!(ok(3)["created"], true);
    ok(4);
    ok(5);
    let listed = &ok(6)["entries"];
    assert_eq!(listed[0]["path"], "made/note.md", "largest first: {listed}");
    assert_eq!(listed[1]["path"], "made/by");
    assert_eq!(listed[1]["size"], 0, "nothing is left below it");
    let found: Vec<&str> = ok(7)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(found, ["made/note.md", "plan.md"]);
    assert_eq!(r[8]["is_error"], false, "{}", r[8]);
    assert_eq!(r[8]["content"][0]["type"], "image");
    assert_eq!(r[8]["content"][0]["mime_type"], "image/png");
    assert_eq!(r[9]["is_error"], true);
    assert_eq!(r[9]["structured"]["error"], "denied", "{}", r[9]);
    assert!(r[10]["protocol_error"]
        .as_str()
        .unwrap()
        .contains("unknown tool"));
    // Another workspace is the daemon's to decide, and on the trail like any call.
    assert_eq!(r[11]["is_error"], true, "{}", r[11]);
    assert_eq!(r[11]["structured"]["error"], "not_found", "{}", r[11]);
    // A request over the limit is answered too_large by the daemon, not lost on the way.
    assert_eq!(r[12]["structured"]["error"], "too_large", "{}", r[12]);

    // What the client did is on disk, made by the agent's uid, and in the audit trail as the
    // agent's tool calls.
    assert_eq!(
        std::fs::read_to_string(m.ws().join("plan.md")).unwrap(),
        "# Plan\n\n- one\n- 2\n"
    );
    let made = m.backing("workspaces/default/made/note.md");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "hello\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&made).unwrap().uid(),
        61006,
        "the agent's uid"
    );
    let refused = |r: &Value| {
        r["operation"] == "tool:read_file" && r["agent"] == "fs-engine" && r["result"] == "denied"
    };
    let records = audit_until(&m, |rs| rs.iter().any(refused));
    assert!(records.iter().any(refused), "{records:?}");
    assert!(records.iter().any(|r| r["operation"] == "tool:move"
        && r["agent"] == "fs-engine"
        && r["result"] == "ok"));
}

#[test]
fn the_mcp_server_finds_the_mount_its_store_is_served_at() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    let calls = json!([
        ["write_file", {"path": "found.md", "content": "through the mount\n"}],
        ["list_allowed", {}],
    ]);
    let out = mcp_session_at(&m, None, "fs-engine", &[], calls, "legacy");
    let r = out["results"].as_array().unwrap();
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    assert_eq!(r[1]["is_error"], false, "{}", r[1]);
    assert_eq!(r[1]["structured"]["file_permissions"]["apply"], true);
    assert_eq!(
        std::fs::read_to_string(m.ws().join("found.md")).unwrap(),
        "through the mount\n"
    );
}

#[test]
fn the_mcp_server_is_refused_for_an_unknown_agent_or_workspace() {
    let m = Mounted::new();
    for (args, said) in [
        (vec!["--agent", "nobody-here"], "unknown agent"),
        (
            vec!["--agent", "fs-engine", "--workspace", "nope"],
            "unknown workspace",
        ),
    ] {
        let out = Command::new(clawfs_bin())
            .args(["mcp", "--store"])
            .arg(&m.store)
            .arg("--mount")
            .arg(&m.mnt)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "nothing on the protocol channel");
    }
}
