//! The agent tools through the mount: `tools/call/<tool>` on one descriptor, from a program and
//! from a shell, and `agents/self`.

use std::fs;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::FileExt;

use crate::common::{sh, Mounted};
use serde_json::{json, Value};

/// One call on one descriptor: write the request, read the response.
fn call(m: &Mounted, tool: &str, request: Value) -> Value {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path(&format!("tools/call/{tool}")))
        .unwrap();
    f.write_all(request.to_string().as_bytes()).unwrap();
    let mut out = String::new();
    f.read_to_string(&mut out).unwrap();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn every_tool_is_a_file_and_answers_json() {
    let m = Mounted::new();
    let listed: Vec<String> = fs::read_dir(m.path("tools/call"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for tool in clawfs_agent_tools::TOOL_NAMES {
        assert!(listed.iter().any(|l| l == tool), "{tool} not listed");
    }
    fs::write(m.ws().join("note.md"), "# Title\n\nhello\n## Part\nworld\n").unwrap();
    let info = call(&m, "info", json!({"path": "note.md"}));
    assert_eq!(info["ok"], true, "{info}");
    assert_eq!(info["lines"], 5);
    let outline = call(
        &m,
        "outline",
        json!({"path": "/workspaces/default/note.md"}),
    );
    assert_eq!(outline["headings"][1]["text"], "Part");
    let abs = m.ws().join("note.md");
    let by_mount_path = call(&m, "info", json!({"path": abs.to_str().unwrap()}));
    assert_eq!(by_mount_path["ok"], true, "{by_mount_path}");
}

#[test]
fn errors_are_json_with_stable_codes() {
    let m = Mounted::new();
    assert_eq!(
        call(&m, "info", json!({"path": "missing.md"}))["error"],
        "not_found"
    );
    assert_eq!(
        call(&m, "info", json!({"path": "../../vault/x"}))["ok"],
        false
    );
    assert_eq!(
        call(&m, "info", json!({"path": 7}))["error"],
        "invalid_args"
    );
    assert_eq!(
        call(&m, "info", json!({"workspace": "nope", "path": "a"}))["error"],
        "not_found"
    );
    // Malformed JSON and invalid UTF-8: an error response, and the daemon lives on.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("tools/call/info"))
        .unwrap();
    f.write_all(b"{\"path\": \xff\xfe").unwrap();
    let mut out = String::new();
    f.read_to_string(&mut out).unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["error"], "invalid_json", "{v}");
    // Oversized requests are refused at write time.
    let big = vec![b' '; 5 << 20];
    let e = f.write_all_at(&big, 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
    assert!(m.path("tools/call/info").exists());
}

#[test]
fn a_shell_calls_a_tool_on_one_descriptor() {
    let m = Mounted::new();
    fs::write(m.ws().join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let out = sh(&format!(
        "exec 3<>{}; printf '{{\"path\":\"a.txt\",\"start\":2,\"end\":3}}' >&3; cat <&3",
        m.path("tools/call/read_range").display()
    ));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert!(v.to_string().contains("two"), "{v}");
    // A second open is an independent call.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("tools/call/head"))
        .unwrap();
    f.write_all(br#"{"path":"a.txt","lines":1}"#).unwrap();
    f.rewind().unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert!(s.contains("one") && !s.contains("three"), "{s}");
}

#[test]
fn tool_calls_run_as_the_caller() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    fs::write(m.ws().join("root-only.txt"), "secret").unwrap();
    fs::set_permissions(
        m.ws().join("root-only.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let call_as_nobody = |tool: &str, req: &str| -> Value {
        let out = crate::common::sh_as_nobody(&format!(
            "exec 3<>{}; printf '%s' '{req}' >&3; cat <&3",
            m.path(&format!("tools/call/{tool}")).display()
        ));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let denied = call_as_nobody("read_file", r#"{"path":"root-only.txt"}"#);
    assert_eq!(denied["ok"], false, "{denied}");
    let wrote = call_as_nobody("write_file", r#"{"path":"mine.txt","content":"hi"}"#);
    assert_eq!(wrote["ok"], true, "{wrote}");
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(m.backing("workspaces/default/mine.txt")).unwrap();
    assert_eq!(
        md.uid(),
        65534,
        "files written by a tool belong to the caller"
    );
}

#[test]
fn agents_self_tells_the_caller_who_it_is() {
    let m = Mounted::new();
    let me: Value = serde_json::from_slice(&fs::read(m.path("agents/self")).unwrap()).unwrap();
    assert_eq!(me["identity"], "admin");
    assert_eq!(me["uid"], 0);
    let out = crate::common::sh_as_nobody(&format!("cat {}", m.path("agents/self").display()));
    // agents/ is 0750: an outsider cannot reach it at all.
    assert!(!out.status.success());
    let e = fs::write(m.path("agents/self"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES));
    assert!(fs::create_dir(m.path("agents/self")).is_err());
}

#[test]
fn two_file_interface_for_whole_file_harnesses() {
    let m = Mounted::new();
    fs::write(m.ws().join("n.md"), "# A\ntext\n").unwrap();
    fs::write(
        m.path("tools/requests/job-1.json"),
        br#"{"tool": "outline", "path": "n.md"}"#,
    )
    .unwrap();
    let resp: Value =
        serde_json::from_slice(&fs::read(m.path("tools/responses/job-1.json")).unwrap()).unwrap();
    assert_eq!(resp["ok"], true, "{resp}");
    assert_eq!(resp["headings"][0]["text"], "A");
    let listed: Vec<_> = fs::read_dir(m.path("tools/responses"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, ["job-1.json"]);
    // The size is known, for harnesses that read st_size bytes.
    let len = fs::metadata(m.path("tools/responses/job-1.json"))
        .unwrap()
        .len();
    assert_eq!(
        len as usize,
        fs::read(m.path("tools/responses/job-1.json"))
            .unwrap()
            .len()
    );
    // Missing "tool", bad JSON: error responses, not errnos.
    fs::write(m.path("tools/requests/job-2.json"), br#"{"path": "n.md"}"#).unwrap();
    let resp: Value =
        serde_json::from_slice(&fs::read(m.path("tools/responses/job-2.json")).unwrap()).unwrap();
    assert_eq!(resp["error"], "invalid_args");
    // Bad request names are refused.
    let e = fs::write(m.path("tools/requests/bad name.txt"), b"{}").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    // Deleting a response forgets it.
    fs::remove_file(m.path("tools/responses/job-1.json")).unwrap();
    assert!(!m.path("tools/responses/job-1.json").exists());
}

#[test]
fn each_caller_sees_only_its_own_responses() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    fs::write(
        m.path("tools/requests/mine.json"),
        br#"{"tool":"list_allowed"}"#,
    )
    .unwrap();
    assert!(m.path("tools/responses/mine.json").exists());
    let out = crate::common::sh_as_nobody(&format!(
        "ls {d}; cat {d}/mine.json",
        d = m.path("tools/responses").display()
    ));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "nobody lists nothing"
    );
    let out = crate::common::sh_as_nobody(&format!(
        "printf '{{\"tool\":\"list_allowed\"}}' > {r}/theirs.json && cat {s}/theirs.json",
        r = m.path("tools/requests").display(),
        s = m.path("tools/responses").display()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !m.path("tools/responses/theirs.json").exists(),
        "root does not see nobody's"
    );
}

#[test]
fn callers_delete_their_own_responses_and_only_theirs() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    let (req, resp) = (m.path("tools/requests"), m.path("tools/responses"));
    // An agent and an ordinary user each ask, read their answer, and delete it.
    let script = format!(
        "printf '{{\"tool\":\"list_allowed\"}}' > {r}/job.json && cat {s}/job.json > /dev/null \
         && stat -c %u {s}/job.json && rm {s}/job.json && ls {s}",
        r = req.display(),
        s = resp.display()
    );
    let out = m.run_agent("fs-engine", &script);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "61006",
        "the agent's own file"
    );
    let out = crate::common::sh_as_nobody(&script);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "65534");
    // Root's response is not another caller's to delete (nor to see).
    fs::write(req.join("roots.json"), br#"{"tool":"list_allowed"}"#).unwrap();
    let out = crate::common::sh_as_nobody(&format!("rm {}/roots.json", resp.display()));
    assert!(!out.status.success());
    assert!(resp.join("roots.json").exists());
}

#[test]
fn a_request_past_the_limit_is_too_large_and_never_run() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    // 5 MiB of a write_file request, whichever way it is written: never run, only too_large.
    let body =
        json!({"tool": "write_file", "path": "big.md", "content": "x".repeat(5 << 20)}).to_string();
    for (i, chunk) in [body.len(), 128 << 10, 4096].into_iter().enumerate() {
        let path = m.path(&format!("tools/requests/big-{i}.json"));
        let mut f = fs::File::create(&path).unwrap();
        let mut refused = false;
        for part in body.as_bytes().chunks(chunk) {
            if let Err(e) = f.write_all(part) {
                assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
                refused = true;
                break;
            }
        }
        assert!(refused, "a write past 4 MiB fails with EFBIG");
        drop(f);
        let r: Value = serde_json::from_slice(
            &fs::read(m.path(&format!("tools/responses/big-{i}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(r["error"], "too_large", "{r}");
    }
    assert!(!m.ws().join("big.md").exists());
}
