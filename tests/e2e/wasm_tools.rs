//! Published WebAssembly tools run with `clawfs tools run`: as root and as an agent, each with
//! the folders its capabilities name, reached through the mount with the caller's rights.

use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::*;

#[path = "../../tools/wasm/tests/support/mod.rs"]
mod wasm_support;

/// `tools/wasm/testdata`.
fn testdata() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/wasm/testdata")
}

/// A tool of `tools/wasm/testdata`, compiled from its WAT.
fn wat_tool(name: &str) -> Vec<u8> {
    let path = testdata().join(format!("{name}.wat"));
    wat::parse_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `wat_tool(name)` as a `wasi:cli/command` component (through the preview 1 adapter): its
/// file reads and writes go through WASI streams.
fn wat_component(name: &str) -> Vec<u8> {
    wit_component::ComponentEncoder::default()
        .module(&wat_tool(name))
        .unwrap()
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
        )
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

/// Publishes `wasm` as tool `id` 1.0.0 with `capabilities`, signed by alice.
fn publish(m: &Mounted, id: &str, wasm: &[u8], capabilities: &[&str], timeout: u64) {
    let dir = m.dir.path().join(format!("pub-{id}"));
    fs::create_dir_all(&dir).unwrap();
    let def = serde_json::json!({
        "tool_id": id,
        "version": "1.0.0",
        "wasm_path": format!("/clawfs/tools/binaries/{id}-v1.0.0.wasm"),
        "wit_interface": "wasi:cli/command",
        "description": format!("Test tool {id}."),
        "capabilities": capabilities,
        "memory_limit_mb": 16,
        "cpu_quota_percent": 100,
        "timeout_seconds": timeout,
    });
    let d = dir.join(format!("tool-{id}.json"));
    let b = dir.join(format!("{id}-v1.0.0.wasm"));
    fs::write(&d, serde_json::to_vec(&def).unwrap()).unwrap();
    fs::write(&b, wasm).unwrap();
    ok(cli(
        m,
        &[
            "tools",
            "add",
            d.to_str().unwrap(),
            b.to_str().unwrap(),
            "--as",
            "alice",
        ],
    ));
}

fn signer(m: &Mounted) {
    ok(vault(m, &["init", "--sealer", "passphrase"], None));
    ok(cli(m, &["specs", "keygen", "--as", "alice"]));
}

/// `clawfs tools run ID --mount M` as root, `request` on stdin.
fn run_as_root(m: &Mounted, id: &str, request: &str) -> Output {
    let mut c = std::process::Command::new(clawfs_bin());
    c.args(["tools", "run", id, "--mount"]).arg(&m.mnt);
    output_with_input(&mut c, request.as_bytes())
}

/// The same, as the agent `agent` (its uid and cgroup, no kernel sandbox), `request` in a
/// file it may read.
fn run_as_agent(m: &Mounted, agent: &str, id: &str, request: &str) -> Output {
    let req = m.dir.path().join(format!("req-{id}-{}", request.len()));
    fs::write(&req, request).unwrap();
    m.run_agent(
        agent,
        &format!(
            "exec {} tools run {id} --mount {} --input {}",
            clawfs_bin(),
            m.mnt.display(),
            req.display()
        ),
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_published_tool_reads_what_its_caller_may_read_and_nothing_else() {
    let m = Mounted::new();
    signer(&m);
    fs::set_permissions(
        m.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    fs::write(m.ws().join("notes.txt"), "granted words").unwrap();
    fs::create_dir(m.path("workspaces/private")).unwrap();
    fs::write(m.path("workspaces/private/secret.txt"), "private words").unwrap();
    publish(
        &m,
        "reader",
        &wat_tool("read_file"),
        &["filesystem:read:/clawfs/workspaces/default"],
        10,
    );
    publish(
        &m,
        "snoop",
        &wat_tool("read_file"),
        &["filesystem:read:/clawfs/workspaces/private"],
        10,
    );

    // Root and the agent read the granted workspace through the tool.
    let out = run_as_root(&m, "reader", "notes.txt");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "granted words");
    let out = run_as_agent(&m, "fs-engine", "reader", "notes.txt");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "granted words");

    // Outside its folder: the tool's own open fails (a WASI errno as its exit status).
    for escape in [
        "../private/secret.txt",
        "/etc/passwd",
        "../../../etc/passwd",
    ] {
        let out = run_as_agent(&m, "fs-engine", "reader", escape);
        assert!(!out.status.success(), "{escape}: {}", stdout(&out));
        assert!(!stdout(&out).contains("words"), "{escape}");
    }

    // A workspace the agent may not read: the mount refuses it the folder, and the tool is not
    // run.
    let out = run_as_agent(&m, "fs-engine", "snoop", "secret.txt");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(!stdout(&out).contains("private words"));
    assert!(
        stderr(&out).contains("/workspaces/private"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    // Root may.
    let out = run_as_root(&m, "snoop", "secret.txt");
    assert_eq!(stdout(&out), "private words", "{}", stderr(&out));
}

#[test]
fn a_stopped_a_swapped_and_an_unknown_tool_each_fail_clearly() {
    let m = Mounted::new();
    signer(&m);
    publish(&m, "spin", &wat_tool("spin"), &[], 1);
    publish(&m, "flood", &wat_tool("flood"), &[], 10);
    publish(&m, "grow", &wat_tool("grow"), &[], 10);

    let out = run_as_root(&m, "spin", "");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("limit of 1 s"), "{}", stderr(&out));
    let out = run_as_root(&m, "flood", "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("output passed its limit"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty(), "a cut answer is no answer");
    let out = run_as_root(&m, "grow", "");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("16 MiB"), "{}", stderr(&out));

    let out = run_as_root(&m, "nope", "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no published tool nope"),
        "{}",
        stderr(&out)
    );

    // A binary swapped in the store after signing is not served, so it is never run.
    let backing = m.backing("tools/binaries/spin-v1.0.0.wasm");
    let mut perms = fs::metadata(&backing).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    fs::set_permissions(&backing, perms).unwrap();
    fs::write(&backing, wat_tool("echo")).unwrap();
    let out = run_as_root(&m, "spin", "");
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let reg: Value =
        serde_json::from_slice(&fs::read(m.backing("tools/registry.json")).unwrap()).unwrap();
    assert!(reg["packages"].as_array().unwrap().len() == 3);
}

/// `tools/call/ID` through the mount as `agent` (its uid and cgroup, no kernel sandbox): the
/// request written on the descriptor, the JSON response read from it.
/// A shell line sending `request` to `tools/call/ID` and printing the answer (umask 022).
fn call_script(m: &Mounted, id: &str, request: &str) -> String {
    format!(
        "umask 022 && exec 3<>{}/tools/call/{id} && printf '%s' '{request}' >&3 && cat <&3",
        m.mnt.display()
    )
}

/// The JSON answer a call script printed.
fn answer(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn call_as_agent(m: &Mounted, agent: &str, id: &str, request: &str) -> Value {
    answer(&m.run_agent(agent, &call_script(m, id, request)))
}

#[test]
fn the_daemon_runs_a_published_tool_as_its_caller_through_the_mount() {
    let m = Mounted::new();
    signer(&m);
    fs::write(m.ws().join("notes.json"), r#"{"text":"granted words"}"#).unwrap();
    fs::create_dir(m.path("workspaces/private")).unwrap();
    fs::write(
        m.path("workspaces/private/secret.json"),
        r#"{"text":"private"}"#,
    )
    .unwrap();
    // A repository root owns, whose hooks no agent may write.
    let repo = m.ws().join("repo");
    fs::create_dir(&repo).unwrap();
    assert!(std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .status()
        .unwrap()
        .success());
    // Writable to all by its mode: only the guard stands in the way.
    fs::set_permissions(
        repo.join(".git/hooks"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let default = "/clawfs/workspaces/default";
    publish(
        &m,
        "reader",
        &wat_tool("read_file"),
        &[&format!("filesystem:read:{default}")],
        10,
    );
    publish(
        &m,
        "writer",
        &wat_tool("write_file"),
        &[&format!("filesystem:write:{default}")],
        10,
    );
    publish(
        &m,
        "component-writer",
        &wat_component("write_file"),
        &[&format!("filesystem:write:{default}")],
        10,
    );
    publish(
        &m,
        "snoop",
        &wat_tool("read_file"),
        &["filesystem:read:/clawfs/workspaces/private"],
        10,
    );
    publish(&m, "spin", &wat_tool("spin"), &[], 1);

    // Listed beside the built-in tools.
    let listed: Vec<String> = fs::read_dir(m.path("tools/call"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for t in ["reader", "writer", "snoop", "spin", "read_file"] {
        assert!(listed.iter().any(|l| l == t), "{t} in {listed:?}");
    }

    let r = call_as_agent(&m, "fs-engine", "reader", "notes.json");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["text"], "granted words", "{r}");

    // What the agent may not read, the tool is not given: not run, refused on the trail.
    let r = call_as_agent(&m, "fs-engine", "snoop", "secret.json");
    assert_eq!(
        (r["ok"].clone(), r["error"].clone()),
        (false.into(), "denied".into()),
        "{r}"
    );
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("/workspaces/private"),
        "{r}"
    );

    // A file the tool makes is the agent's: its owner, and its record on the trail.
    let r = call_as_agent(&m, "fs-engine", "writer", "made.txt");
    assert_eq!(
        r["ok"], false,
        "write_file answers nothing, which is not JSON: {r}"
    );
    let made = fs::metadata(m.backing("workspaces/default/made.txt")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&made), 61006);
    // With the caller's umask, as what it makes itself (the daemon serves with none).
    assert_eq!(std::os::unix::fs::MetadataExt::mode(&made) & 0o777, 0o644);
    // So is one a component writes, through a stream.
    let r = call_as_agent(&m, "fs-engine", "component-writer", "streamed.txt");
    assert_eq!(r["ok"], false, "{r}");
    let streamed = m.backing("workspaces/default/streamed.txt");
    assert_eq!(fs::read_to_string(&streamed).unwrap(), "written");
    let made = fs::metadata(&streamed).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&made), 61006);
    assert_eq!(std::os::unix::fs::MetadataExt::mode(&made) & 0o777, 0o644);
    // The git guard holds for the tool as for the agent.
    let r = call_as_agent(&m, "fs-engine", "writer", "repo/.git/hooks/pre-commit");
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("exited with status"),
        "{r}"
    );
    assert!(!m
        .backing("workspaces/default/repo/.git/hooks/pre-commit")
        .exists());

    // A tool past its time is stopped, and the daemon serves on.
    let r = call_as_agent(&m, "fs-engine", "spin", "");
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["message"].as_str().unwrap().contains("limit of 1 s"),
        "{r}"
    );
    let r = call_as_agent(&m, "fs-engine", "reader", "notes.json");
    assert_eq!(r["text"], "granted words", "{r}");

    let is = |r: &Value, op: &str, result: &str| {
        r["agent"] == "fs-engine" && r["operation"] == op && r["result"] == result
    };
    let trail = audit_until(&m, |recs| {
        recs.iter().any(|r| is(r, "tool:spin", "error"))
            && recs
                .iter()
                .any(|r| is(r, "create", "ok") && r["path"] == "/workspaces/default/made.txt")
    });
    let find = |op: &str, result: &str| {
        trail
            .iter()
            .find(|r| is(r, op, result))
            .unwrap_or_else(|| panic!("no {op} {result} of fs-engine in {trail:?}"))
    };
    let read = find("tool:reader", "ok");
    assert_eq!(read["path"], "/tools/binaries/reader-v1.0.0.wasm");
    assert!(
        read["target"]
            .as_str()
            .unwrap()
            .contains("reads /workspaces/default"),
        "{read}"
    );
    find("tool:snoop", "denied");
    find("tool:spin", "error");
    assert!(trail
        .iter()
        .any(|r| is(r, "create", "ok") && r["path"] == "/workspaces/default/made.txt"));
    assert!(
        trail.iter().any(|r| r["agent"] == "fs-engine"
            && r["result"] == "denied"
            && r["path"].as_str().is_some_and(|p| p.contains(".git/hooks"))),
        "the guard's refusal of the tool's write is the agent's"
    );
}

#[test]
fn an_mcp_client_lists_and_calls_a_published_tool() {
    let m = Mounted::new();
    signer(&m);
    publish(&m, "echo-args", &wat_tool("echo"), &[], 10);
    let out = crate::mcp::mcp_session(
        &m,
        "fs-engine",
        &[],
        serde_json::json!([["echo-args", {"greeting": "hi", "n": 2}]]),
    );
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tools.contains(&"echo-args"), "{tools:?}");
    assert!(tools.contains(&"read_file"), "{tools:?}");
    let r = &out["results"][0];
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(r["structured"]["greeting"], "hi", "{r}");
    assert_eq!(r["structured"]["n"], 2, "{r}");
    assert!(r["structured"].get("workspace").is_none(), "{r}");
}

#[test]
fn the_example_tool_counts_words_for_an_agent() {
    let m = Mounted::new();
    signer(&m);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm-tools");
    let dir = m.dir.path().join("example");
    fs::create_dir(&dir).unwrap();
    let wasm = wat::parse_file(example.join("word-count.wat")).unwrap();
    let bin = dir.join("word-count-v1.0.0.wasm");
    fs::write(&bin, wasm).unwrap();
    let def = example.join("tool-word-count.json");
    ok(cli(
        &m,
        &[
            "tools",
            "add",
            def.to_str().unwrap(),
            bin.to_str().unwrap(),
            "--as",
            "alice",
        ],
    ));
    fs::write(m.ws().join("poem.md"), "one two  three\nfour\n\tfive six\n").unwrap();
    let r = call_as_agent(&m, "fs-engine", "word-count", r#"{"path": "poem.md"}"#);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        (r["bytes"].clone(), r["lines"].clone(), r["words"].clone()),
        (30.into(), 3.into(), 6.into()),
        "{r}"
    );
    let r = call_as_agent(&m, "fs-engine", "word-count", r#"{"path": "missing.md"}"#);
    assert_eq!(r["ok"], false, "{r}");
}

/// Attacks found by a red team: a capability folder that is a symlink the agent made (to the
/// daemon's own descriptors, or out of the mount), links inside a folder, a FIFO, and one
/// caller holding every call slot.
#[test]
fn an_agent_cannot_lead_a_tool_out_of_its_folders() {
    let m = Mounted::new();
    signer(&m);
    fs::create_dir(m.path("workspaces/secret")).unwrap();
    fs::write(
        m.path("workspaces/secret/plans.json"),
        r#"{"top":"secret"}"#,
    )
    .unwrap();
    let default = "/clawfs/workspaces/default";
    publish(
        &m,
        "via-link",
        &wat_tool("read_file"),
        &[&format!("filesystem:read:{default}/hlnk")],
        5,
    );
    publish(
        &m,
        "via-out",
        &wat_tool("write_file"),
        &[&format!("filesystem:write:{default}/wlnk")],
        5,
    );
    publish(
        &m,
        "reader",
        &wat_tool("read_file"),
        &[&format!("filesystem:read:{default}")],
        2,
    );
    publish(&m, "spin", &wat_tool("spin"), &[], 4);
    let ws = m.mnt.join("workspaces/default");
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {ws} && for fd in $(seq 3 64); do ln -sf /proc/self/fd/$fd hlnk$fd; done \
             && ln -s /proc/self/fd/39 hlnk && ln -s /tmp wlnk && ln -s /proc/self/root/etc etc \
             && mkfifo ff",
            ws = ws.display()
        ),
    );
    assert!(out.status.success(), "{}", stderr(&out));

    // The folders are symlinks: refused, nothing read, nothing written outside.
    for (tool, request) in [
        ("via-link", "secret/plans.json"),
        ("via-out", "pwned-by-a-tool"),
    ] {
        let r = call_as_agent(&m, "fs-engine", tool, request);
        assert_eq!(r["ok"], false, "{r}");
        assert_eq!(r["error"], "denied", "{r}");
        assert!(!r.to_string().contains("secret\\\""), "{r}");
    }
    assert!(!Path::new("/tmp/pwned-by-a-tool").exists());
    // Links inside a folder lead nowhere.
    for fd in 3..=64 {
        let r = call_as_agent(
            &m,
            "fs-engine",
            "reader",
            &format!("hlnk{fd}/secret/plans.json"),
        );
        assert_eq!(r["ok"], false, "fd {fd}: {r}");
    }
    let r = call_as_agent(&m, "fs-engine", "reader", "etc/passwd");
    assert_eq!(r["ok"], false, "{r}");
    // A FIFO nobody writes: the call ends at its time.
    let r = call_as_agent(&m, "fs-engine", "reader", "ff");
    assert_eq!(r["ok"], false, "{r}");

    // One call at a time per caller: a second call of the same agent, made while its spin
    // runs, waits for its turn and is answered after the spin ends (not beside it, not
    // refused). "While it runs" is seen from the daemon: a tool thread burning CPU.
    let mnt = m.mnt.display().to_string();
    let before = m.tool_thread_ticks();
    let first = m
        .run_command("fs-engine")
        .args([
            "--no-sandbox",
            "--",
            "sh",
            "-c",
            &format!("exec 3<>{mnt}/tools/call/spin && printf x >&3 && cat <&3"),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    m.wait_for_busy_tool_threads(before);
    let second = call_as_agent(&m, "fs-engine", "reader", "nothing");
    assert!(!second.to_string().contains("one at a time"), "{second}");
    let first = first.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(text.contains("limit of 4 s"), "{text}");
    let trail = audit_until(&m, |a| {
        a.iter().any(|r| r["operation"] == "tool:reader")
            && a.iter().any(|r| r["operation"] == "tool:spin")
    });
    let at = |op: &str| trail.iter().rposition(|r| r["operation"] == op).unwrap();
    assert!(
        at("tool:spin") < at("tool:reader"),
        "the second call ended before the first: it ran beside it"
    );
}

/// A caller keeping many call files open with large requests is held to a total, and gets it
/// back as it closes them.
#[test]
fn a_caller_cannot_grow_the_daemon_with_open_requests() {
    let m = Mounted::new();
    fs::set_permissions(
        m.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let script = format!(
        r#"
import os, sys
path = "{}/tools/call/info"
chunk = b"x" * (1 << 20)
fds, refused = [], None
for i in range(24):
    fd = os.open(path, os.O_RDWR)
    fds.append(fd)
    try:
        for _ in range(4):
            os.write(fd, chunk[: (1 << 20) - 64])
    except OSError as e:
        refused = (i, e.errno)
        break
for fd in fds:
    os.close(fd)
fd = os.open(path, os.O_RDWR)
os.write(fd, chunk[: (1 << 20) - 64])
os.close(fd)
print(refused)
"#,
        m.mnt.display()
    );
    let out = sh_as_nobody(&format!("python3 -c '{script}'"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    // 64 MiB: sixteen requests of almost 4 MiB, refused in the seventeenth.
    assert_eq!(said.trim(), "(16, 27)", "{said}");
}

/// Closing copies of a call's descriptor while the call runs waits for nothing: the threads
/// those closes hold must not be the ones the tool's own file operations need.
#[test]
fn closes_during_a_call_leave_the_mount_serving() {
    let m = Mounted::new();
    signer(&m);
    let default = "/clawfs/workspaces/default";
    publish(
        &m,
        "slow-reader",
        &wat_tool("slow_read"),
        &[&format!("filesystem:read:{default}")],
        10,
    );
    fs::write(m.ws().join("hello.json"), r#"{"a":1}"#).unwrap();
    let script = format!(
        r#"
import os, threading, time
fd = os.open("{mnt}/tools/call/slow-reader", os.O_RDWR)
os.write(fd, b"hello.json")
out = []
reader = threading.Thread(target=lambda: out.append(os.pread(fd, 65536, 0)))
reader.start()
time.sleep(0.2)
closers = [threading.Thread(target=lambda: os.close(os.dup(fd))) for _ in range(6)]
for c in closers: c.start()
for c in closers: c.join()
reader.join()
print(out[0].decode())
"#,
        mnt = m.mnt.display()
    );
    let out = m.run_agent("fs-engine", &format!("timeout 60 python3 -c '{script}'"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(r#""a":1"#), "{}", stdout(&out));
    assert!(fs::metadata(m.ws()).is_ok(), "the mount serves on");
}

/// A real local HTTP server: the path of each request it answers, sent on the channel.
fn http_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let _ = tx.send(request.url().to_string());
            let _ = request.respond(tiny_http::Response::from_string("ok"));
        }
    });
    (port, rx)
}

/// `request` sent to `tools/call/ID` by a root shell: the daemon runs the tool, as root.
fn call_as_root(m: &Mounted, id: &str, request: &str) -> Value {
    let script = call_script(m, id, request);
    answer(
        &std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap(),
    )
}

#[test]
fn a_tool_connects_to_the_hosts_it_declares_that_its_caller_may_reach() {
    let m = Mounted::new();
    signer(&m);
    let (declared, declared_heard) = http_server();
    let (undeclared, undeclared_heard) = http_server();
    let connect = |port: u16| {
        wasm_support::component_of_world(&testdata(), "connect", &[("PORT", port.to_string())])
    };
    let capability = format!("network:outbound:127.0.0.1:{declared}");
    // `fetch` connects where it declares; `stray` declares the same host and port and
    // connects elsewhere.
    publish(&m, "fetch", &connect(declared), &[&capability], 10);
    publish(&m, "stray", &connect(undeclared), &[&capability], 10);
    let heard = |rx: &std::sync::mpsc::Receiver<String>| {
        rx.recv_timeout(std::time::Duration::from_secs(10)).ok()
    };

    let r = call_as_root(&m, "fetch", "");
    assert_eq!(r["connected"], true, "{r}");
    assert_eq!(heard(&declared_heard).as_deref(), Some("/from-tool"));
    // Refused by the runtime (WASI's access-denied, 1): the other server hears nothing.
    let r = call_as_root(&m, "stray", "");
    assert_eq!(
        (&r["connected"], &r["code"]),
        (&false.into(), &"01".into()),
        "{r}"
    );

    // An agent gets the host only if its own sandbox may reach it.
    let r = call_as_agent(&m, "fs-engine", "fetch", "");
    assert_eq!(r["connected"], true, "{r}");
    assert_eq!(heard(&declared_heard).as_deref(), Some("/from-tool"));
    let policy = fs::read_to_string(m.backing("system/policy.toml")).unwrap();
    let narrowed = policy.replacen(
        "[agents.fs-engine]\n",
        "[agents.fs-engine]\nsandbox = { network = \"none\" }\n",
        1,
    );
    assert_ne!(narrowed, policy);
    let file = m.dir.path().join("policy.toml");
    fs::write(&file, narrowed).unwrap();
    ok(cli(&m, &["policy", "reload", file.to_str().unwrap()]));
    let r = call_as_agent(&m, "fs-engine", "fetch", "");
    assert_eq!(
        (&r["connected"], &r["code"]),
        (&false.into(), &"01".into()),
        "{r}"
    );
    assert_eq!(heard(&declared_heard), None);
    assert_eq!(heard(&undeclared_heard), None);

    // The trail says where each call connected and where it was refused.
    let calls = |trail: &[Value], op: &str| -> Vec<String> {
        trail
            .iter()
            .filter(|r| r["operation"] == op)
            .map(|r| r["target"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let trail = audit_until(&m, |recs| calls(recs, "tool:fetch").len() == 3);
    let fetches = calls(&trail, "tool:fetch");
    let connected = format!("connected 127.0.0.1:{declared}");
    assert!(fetches[0].contains(&connected), "{fetches:?}");
    assert!(fetches[1].contains(&connected), "{fetches:?}");
    assert!(!fetches[2].contains("connected 1"), "{fetches:?}");
    let strays = calls(&trail, "tool:stray");
    assert!(
        strays[0].contains(&format!("refused 127.0.0.1:{undeclared}")),
        "{strays:?}"
    );
}

/// Calls of a tool with a folder, many at once: each opens its folder through the mount and
/// the tool's file operations go through it too, every one a request only a FUSE thread can
/// answer. However many callers, one thread stays free to answer them; with one thread, such
/// a tool is refused before anything reaches the mount.
#[test]
fn many_calls_at_once_never_take_every_fuse_thread() {
    for threads in ["2", "1"] {
        let m = Mounted::with_args(&["--threads", threads]);
        signer(&m);
        fs::write(m.ws().join("a.txt"), r#"{"text":"words"}"#).unwrap();
        publish(
            &m,
            "reader",
            &wat_tool("read_file"),
            &["filesystem:read:/clawfs/workspaces/default"],
            5,
        );
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for _ in 0..6 {
            let (script, done) = (call_script(&m, "reader", "a.txt"), done_tx.clone());
            let mnt = m.mnt.clone();
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                for _ in 0..10 {
                    let out = std::process::Command::new("sh")
                        .arg("-c")
                        .arg(&script)
                        .output()
                        .unwrap();
                    answers.push(String::from_utf8_lossy(&out.stdout).into_owned());
                }
                let _ = std::fs::metadata(mnt.join("workspaces/default/a.txt"));
                let _ = done.send(answers);
            });
        }
        drop(done_tx);
        let mut answers = Vec::new();
        for _ in 0..6 {
            match done_rx.recv_timeout(std::time::Duration::from_secs(120)) {
                Ok(a) => answers.extend(a),
                Err(_) => {
                    // Deadlocked: free the callers (they are in uninterruptible sleep) so the
                    // mount can be cleaned up, then fail.
                    abort_connection(&m);
                    panic!("--threads {threads}: the mount stopped answering");
                }
            }
        }
        let ok = answers.iter().filter(|a| a.contains("words")).count();
        if threads == "1" {
            assert_eq!(ok, 0);
            assert!(
                answers.iter().all(|a| a.contains("--threads 2")),
                "{answers:?}"
            );
        } else {
            assert!(ok > 0, "{answers:?}");
            assert!(
                answers.iter().all(|a| a.contains("words")
                    || a.contains("try again")
                    || a.contains("one at a time")),
                "{answers:?}"
            );
        }
        assert_eq!(
            fs::read_to_string(m.ws().join("a.txt")).unwrap(),
            r#"{"text":"words"}"#
        );
    }
}

/// Aborts the FUSE connection of `m`'s mount (the minor number of its device, from
/// mountinfo: nothing that could wait on the mount itself).
fn abort_connection(m: &Mounted) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mnt = m.mnt.to_string_lossy().into_owned();
    let minor = info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4) == Some(&mnt.as_str()))
            .then(|| f.get(2)?.split(':').nth(1)?.parse::<u32>().ok())?
    });
    if let Some(minor) = minor {
        let _ = fs::write(format!("/sys/fs/fuse/connections/{minor}/abort"), "1");
    }
}
