//! Race tests: a thread swaps a folder inside the workspace with a symlink to a folder outside it
//! (`renameat2(RENAME_EXCHANGE)`, as an attacker sharing the workspace would) while tools are
//! called on paths through that folder. No response may carry anything from outside, and nothing
//! outside may be created or changed.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawfs_agent_tools::{call, ToolRoot};
use rustix::fs::{renameat_with, RenameFlags, CWD};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const SECRET: &str = "OUTSIDE-SECRET-c0ffee";
const SECRET_NAME: &str = "leaked-name-5eed";

/// Every entry below `dir` (not following symlinks): type plus content hash or link target.
fn snapshot(dir: &Path, skip: Option<&Path>) -> BTreeMap<String, String> {
    fn go(base: &Path, dir: &Path, skip: Option<&Path>, out: &mut BTreeMap<String, String>) {
        let mut names: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap()).collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let p = e.path();
            if Some(p.as_path()) == skip {
                continue;
            }
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let m = fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link {}", fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                go(base, &p, skip, out);
                "dir".to_string()
            } else {
                format!(
                    "file {}",
                    hex::encode(Sha256::digest(fs::read(&p).unwrap()))
                )
            };
            out.insert(rel, what);
        }
    }
    let mut out = BTreeMap::new();
    go(dir, dir, skip, &mut out);
    out
}

#[test]
fn swapping_a_folder_for_an_outside_symlink_never_leaks_or_escapes() {
    let outer = tempfile::TempDir::new().unwrap();
    let outer_path = fs::canonicalize(outer.path()).unwrap();
    let ws = outer_path.join("ws");
    let outside = outer_path.join("outside");
    fs::create_dir_all(ws.join("sub")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(ws.join("sub/f.txt"), "shared line\ninside\n").unwrap();
    fs::write(outside.join("f.txt"), format!("shared line\n{SECRET}\n")).unwrap();
    fs::write(outside.join(format!("{SECRET_NAME}.txt")), SECRET).unwrap();
    fs::create_dir(outside.join("x")).unwrap();
    symlink(&outside, ws.join("link")).unwrap();
    let before = snapshot(&outer_path, Some(&ws));

    let root = ToolRoot::new(&ws).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let racer = {
        let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        let (a, b) = (ws.join("sub"), ws.join("link"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                renameat_with(CWD, &a, CWD, &b, RenameFlags::EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let requests: Vec<(&str, Value)> = vec![
        ("read_file", json!({"path": "sub/f.txt"})),
        (
            "write_file",
            json!({"path": "sub/new.txt", "content": "new\n"}),
        ),
        (
            "edit_file",
            json!({"path": "sub/f.txt", "insert": {"line": 0, "text": "edited"}}),
        ),
        (
            "edit_exact",
            json!({"path": "sub/f.txt", "old": "shared line", "new": "shared line"}),
        ),
        ("info", json!({"path": "sub/f.txt"})),
        ("search", json!({"path": "sub/f.txt", "pattern": "e"})),
        ("read_range", json!({"path": "sub/f.txt", "start": 1})),
        ("tail", json!({"path": "sub/f.txt"})),
        ("outline", json!({"path": "sub/f.txt"})),
        ("read_file", json!({"path": "sub/F.TXT"})),
        ("resolve", json!({"path": "SUB/f.txt"})),
        ("get_file_info", json!({"path": "sub"})),
        ("list_files", json!({"path": "sub"})),
        ("search_files", json!({"path": "sub", "pattern": "."})),
        ("directory_tree", json!({"path": "sub"})),
        ("search_files", json!({"pattern": "SECRET"})),
        ("create_folder", json!({"path": "sub/made/deeper"})),
        (
            "write_file",
            json!({"path": "sub/p/q/r.txt", "content": "r\n"}),
        ),
        (
            "move",
            json!({"from": "sub/new.txt", "to": "sub/moved.txt"}),
        ),
        ("move", json!({"from": "sub/x", "to": "moved-x"})),
        ("delete", json!({"path": "sub/moved.txt"})),
        ("delete", json!({"path": "sub/f.txt"})),
        (
            "write_file",
            json!({"path": "sub/f.txt", "content": "shared line\ninside\n"}),
        ),
    ];

    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut calls, mut ok_reads) = (0u64, 0u64);
    let mut leaks = Vec::new();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    'outer: while Instant::now() < deadline {
        for (tool, req) in &requests {
            let out = call(&root, tool, req.to_string().as_bytes());
            let text = String::from_utf8_lossy(&out);
            calls += 1;
            let v: Value = serde_json::from_slice(&out).unwrap();
            let code = v["error"].as_str().unwrap_or("ok");
            *outcomes.entry(format!("{tool}: {code}")).or_default() += 1;
            if text.contains(SECRET) || text.contains(SECRET_NAME) {
                leaks.push(format!("{tool} {req} -> {text}"));
            }
            if *tool == "read_file" && text.contains("inside") {
                ok_reads += 1;
            }
            if leaks.len() > 5 {
                break 'outer;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();

    eprintln!(
        "{calls} calls, {} swaps: {outcomes:#?}",
        swaps.load(Ordering::Relaxed)
    );
    let after = snapshot(&outer_path, Some(&ws));
    assert!(
        leaks.is_empty(),
        "responses leaked the outside:\n{}",
        leaks.join("\n")
    );
    assert_eq!(before, after, "the outside changed during {calls} calls");
    assert!(
        swaps.load(Ordering::Relaxed) > 1000,
        "the racer barely ran ({} swaps)",
        swaps.load(Ordering::Relaxed)
    );
    assert!(
        calls > 200 && ok_reads > 0,
        "too few calls got through to prove anything ({calls} calls, {ok_reads} reads)"
    );
}
