//! Snapshots and forks through a real mount: `clawfs snapshot create|list|restore|rm` and
//! `clawfs workspace fork`, checked with `sqlite3 -A`, the mount itself and the search index.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{cli, errno, ok, sh, tool_call, Mounted};

/// `clawfs snapshot create WS --json`.
fn snapshot(m: &Mounted, ws: &str) -> Value {
    serde_json::from_str(&ok(cli(m, &["snapshot", "create", ws, "--json"]))).unwrap()
}

/// The workspace's own files: what ClawFS manages beside them (metadata, snapshots, and
/// `workspace.db`, a copy of the index that follows the files in the background) is left out.
fn workspace_files(m: &Mounted, ws: &str) -> Vec<(String, String)> {
    crate::common::tree(&m.path(&format!("workspaces/{ws}")))
        .into_iter()
        .filter(|(p, _)| !p.starts_with("snapshots") && p != "metadata.json" && p != "workspace.db")
        .collect()
}

fn corpus(ws: &Path) {
    fs::create_dir_all(ws.join("notes/deep")).unwrap();
    fs::write(
        ws.join("notes/plan.md"),
        "# Plan\n\nShip the kitten tracker.\n",
    )
    .unwrap();
    fs::write(
        ws.join("notes/deep/data.bin"),
        (0..=255u8).cycle().take(70_000).collect::<Vec<u8>>(),
    )
    .unwrap();
    fs::write(ws.join("private.txt"), "mine alone\n").unwrap();
    fs::set_permissions(ws.join("private.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("notes/plan.md", ws.join("plan-link")).unwrap();
}

#[test]
fn a_snapshot_is_a_sqlite_archive_readable_by_sqlite3_and_read_only_through_the_mount() {
    let m = Mounted::new();
    let ws = m.ws();
    corpus(&ws);
    indexed(&m, "kitten tracker", "notes/plan.md");
    let s = snapshot(&m, "default");
    let name = s["name"].as_str().unwrap().to_string();
    assert!(
        name.starts_with("snapshot-") && name.ends_with(".db"),
        "{s}"
    );
    assert_eq!(s["files"], 4, "{s}"); // plan.md, data.bin, private.txt, metadata.json
    let file = m.backing(&format!("workspaces/default/snapshots/{name}"));
    let meta = fs::metadata(&file).unwrap();
    assert_eq!(
        (meta.mode() & 0o777, meta.uid()),
        (0o600, 0),
        "root's alone"
    );

    // sqlite3 -A lists and extracts it.
    let listed = sh(&format!("sqlite3 -A -t -f {}", file.display()));
    for p in [
        "notes/plan.md",
        "notes/deep/data.bin",
        "private.txt",
        "plan-link",
        "notes",
    ] {
        assert!(listed.lines().any(|l| l == p), "{p} not in\n{listed}");
    }
    assert!(!listed.contains("snapshots"), "{listed}");
    let out = tempfile::tempdir().unwrap();
    sh(&format!(
        "cd {} && sqlite3 -A -x -f {}",
        out.path().display(),
        file.display()
    ));
    assert_eq!(
        fs::read(out.path().join("notes/deep/data.bin")).unwrap(),
        fs::read(ws.join("notes/deep/data.bin")).unwrap()
    );
    assert_eq!(
        fs::read_to_string(out.path().join("notes/plan.md")).unwrap(),
        "# Plan\n\nShip the kitten tracker.\n"
    );
    // The index came along, searchable with FTS5.
    let hit = sh(&format!(
        "sqlite3 {} \"SELECT count(*) FROM index_documents WHERE index_documents MATCH 'kitten'\"",
        file.display()
    ));
    assert_eq!(hit.trim(), "1", "{hit}");

    // Listed; read-only through the mount, for root too.
    let list = ok(cli(&m, &["snapshot", "list", "default", "--json"]));
    let first: Value = serde_json::from_str(list.lines().next().unwrap()).unwrap();
    assert_eq!(first["name"], name.as_str());
    let snap = m.path(&format!("workspaces/default/snapshots/{name}"));
    assert_eq!(fs::read(&snap).unwrap(), fs::read(&file).unwrap());
    assert_eq!(
        errno(fs::OpenOptions::new().write(true).open(&snap)),
        libc::EROFS
    );
    assert_eq!(errno(fs::remove_file(&snap)), libc::EROFS);
    assert_eq!(
        errno(fs::set_permissions(
            &snap,
            fs::Permissions::from_mode(0o644)
        )),
        libc::EROFS
    );
    assert_eq!(errno(fs::rename(&snap, ws.join("stolen.db"))), libc::EROFS);
    assert_eq!(
        errno(fs::rename(
            ws.join("private.txt"),
            m.path("workspaces/default/snapshots/x.db")
        )),
        libc::EROFS
    );
    assert!(ws.join("private.txt").exists());

    // rm; an unknown or badly named one is refused with a clear message.
    let out = cli(&m, &["snapshot", "rm", "default", "snapshot-1999-01-01.db"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no snapshot"));
    let out = cli(&m, &["snapshot", "rm", "default", "../../etc/passwd"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("snapshots are named"));
    ok(cli(&m, &["snapshot", "rm", "default", &name]));
    assert!(!file.exists());
    let out = cli(&m, &["snapshot", "create", "nope"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no workspace \"nope\""));
}

#[test]
fn restore_is_atomic_saves_what_it_replaces_and_the_index_follows() {
    let m = Mounted::new();
    let ws = m.ws();
    corpus(&ws);
    let before = workspace_files(&m, "default");
    let s = snapshot(&m, "default");
    let name = s["name"].as_str().unwrap();
    // Change everything.
    fs::write(ws.join("notes/plan.md"), "# Plan\n\nAbandon ship.\n").unwrap();
    fs::remove_file(ws.join("private.txt")).unwrap();
    fs::write(ws.join("new.txt"), "added later\n").unwrap();
    let changed = workspace_files(&m, "default");

    let r: Value = serde_json::from_str(&ok(cli(
        &m,
        &["snapshot", "restore", "default", name, "--json"],
    )))
    .unwrap();
    assert_eq!(r["snapshot"], name);
    assert_eq!(
        workspace_files(&m, "default"),
        before,
        "restored through the mount"
    );
    let mode = fs::metadata(ws.join("private.txt")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600, "modes come back");
    assert_eq!(
        fs::read_link(ws.join("plan-link")).unwrap(),
        Path::new("notes/plan.md")
    );
    // What was replaced is a snapshot too: restoring it brings the changes back.
    let saved = r["saved_as"].as_str().unwrap();
    ok(cli(&m, &["snapshot", "restore", "default", saved]));
    assert_eq!(workspace_files(&m, "default"), changed);
    assert!(m.ws().join("metadata.json").exists());
    let listed = ok(cli(&m, &["snapshot", "list", "default"]));
    assert_eq!(listed.lines().count(), 3, "{listed}");

    // The index follows the restored files.
    ok(cli(&m, &["snapshot", "restore", "default", name]));
    indexed(&m, "kitten tracker", "notes/plan.md");
}

/// Waits until a text search for `query` finds `path` (the index follows in the background).
fn indexed(m: &Mounted, query: &str, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let h = tool_call(
            m,
            "semantic_search",
            &json!({"query": query, "mode": "text"}),
        );
        if h["hits"]
            .as_array()
            .is_some_and(|a| a.iter().any(|h| h["path"] == path))
        {
            return;
        }
        assert!(Instant::now() < deadline, "{path} not indexed: {h}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn forks_are_independent_copies_of_the_state_or_of_a_snapshot() {
    let m = Mounted::new();
    let ws = m.ws();
    corpus(&ws);
    let s = snapshot(&m, "default");
    fs::write(ws.join("notes/plan.md"), "# Plan\n\nVersion two.\n").unwrap();

    let f: Value = serde_json::from_str(&ok(cli(
        &m,
        &["workspace", "fork", "default", "trial", "--json"],
    )))
    .unwrap();
    assert_eq!(f["workspace"], "trial");
    assert_eq!(workspace_files(&m, "trial"), workspace_files(&m, "default"));
    let meta: Value = serde_json::from_str(
        &fs::read_to_string(m.path("workspaces/trial/metadata.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (meta["workspace_id"].as_str(), meta["forked_from"].as_str()),
        (Some("trial"), Some("default"))
    );
    assert!(fs::read_dir(m.path("workspaces/trial/snapshots"))
        .unwrap()
        .next()
        .is_none());
    // Writing in the fork leaves the source alone (no shared inode).
    fs::write(
        m.path("workspaces/trial/notes/plan.md"),
        "# Plan\n\nTrial run.\n",
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(ws.join("notes/plan.md")).unwrap(),
        "# Plan\n\nVersion two.\n"
    );

    // From the snapshot: the old state.
    ok(cli(
        &m,
        &[
            "workspace",
            "fork",
            "default",
            "old",
            "--from",
            s["name"].as_str().unwrap(),
        ],
    ));
    assert_eq!(
        fs::read_to_string(m.path("workspaces/old/notes/plan.md")).unwrap(),
        "# Plan\n\nShip the kitten tracker.\n"
    );
    // Refusals: a taken name, a bad name, a reserved one; nothing is left behind.
    for (new, why) in [
        ("trial", "exists already"),
        ("Bad_Name", "invalid"),
        ("..", "invalid"),
    ] {
        let out = cli(&m, &["workspace", "fork", "default", new]);
        assert!(!out.status.success(), "{new}");
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(err.contains(why) || err.contains("name"), "{new}: {err}");
    }
    let tmp = m.store.join(".clawfs/tmp");
    assert!(
        fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0) == 0,
        "staging left behind"
    );
}

/// A snapshot never holds a file half old and half new while agents replace it (write a new
/// version and rename it over the old, as editors and ClawFS's tools do) or append to it in
/// page-sized records. (An in-place overwrite by a writer stalled inside one write(2) is the
/// case a copy cannot rule out: docs/snapshots.md.)
#[test]
fn snapshots_never_mix_old_and_new_contents_of_a_file_being_written() {
    use std::io::Write;
    let m = Mounted::new();
    let ws = m.ws();
    let path = ws.join("hot.bin");
    const SIZE: usize = 4 << 20;
    const RECORD: usize = 4096;
    fs::write(&path, vec![b'A'; SIZE]).unwrap();
    fs::write(ws.join("log.bin"), b"").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, ws) = (stop.clone(), ws.clone());
        std::thread::spawn(move || {
            let mut log = fs::OpenOptions::new()
                .append(true)
                .open(ws.join("log.bin"))
                .unwrap();
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let letter = [b'A', b'B'][i % 2];
                fs::write(ws.join("hot.tmp"), vec![letter; SIZE]).unwrap();
                fs::rename(ws.join("hot.tmp"), ws.join("hot.bin")).unwrap();
                if i < 2000 {
                    log.write_all(&[letter; RECORD]).unwrap();
                }
                i += 1;
            }
            i
        })
    };
    let mut taken = 0;
    for _ in 0..6 {
        let out = cli(&m, &["snapshot", "create", "default", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s: Value = serde_json::from_slice(&out.stdout).unwrap();
        // A file that never settles is left out by name, never archived torn (hot.tmp, the
        // next version being written, may also be gone by the time it is read).
        let left_out = |f: &str| {
            s["skipped"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find(|w| w.starts_with(&format!("{f}:")) || w.contains(&format!("{f} ")))
                .map(str::to_string)
        };
        if let Some(why) = left_out("hot.bin").or_else(|| left_out("log.bin")) {
            assert!(why.contains("kept changing"), "{s}");
            continue;
        }
        let file = m.backing(&format!(
            "workspaces/default/snapshots/{}",
            s["name"].as_str().unwrap()
        ));
        let dir = tempfile::tempdir().unwrap();
        sh(&format!(
            "cd {} && sqlite3 -A -x -f {} hot.bin log.bin",
            dir.path().display(),
            file.display()
        ));
        let bytes = fs::read(dir.path().join("hot.bin")).unwrap();
        assert_eq!(bytes.len(), SIZE);
        assert!(
            bytes.iter().all(|b| *b == bytes[0]),
            "a torn copy of hot.bin"
        );
        let log = fs::read(dir.path().join("log.bin")).unwrap();
        assert_eq!(log.len() % RECORD, 0, "a partial record in log.bin");
        for (n, rec) in log.chunks(RECORD).enumerate() {
            assert!(
                rec.iter().all(|b| *b == [b'A', b'B'][n % 2]),
                "record {n} torn"
            );
        }
        taken += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(writes > 10, "the writer ran ({writes} writes)");
    eprintln!("{taken} snapshots taken during {writes} rewrites");
    assert!(taken >= 3, "only {taken} snapshots held both files");
}
