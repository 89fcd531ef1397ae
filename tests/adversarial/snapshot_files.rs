//! Snapshot files as an attacker would make them: names that climb out of the workspace,
//! symlinks planted where a folder goes, files that are not snapshots at all. A restore or fork
//! refuses them with a clear error and writes nothing anywhere; an agent can neither read a
//! snapshot (it holds every file, whoever may read each) nor plant one through the mount.

use std::fs;
use std::path::Path;

use crate::common::{clawfs, errno, sh, Mounted};

fn cli(m: &Mounted, args: &[&str]) -> std::process::Output {
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    all.push("--store".as_ref());
    all.push(m.store.as_os_str());
    clawfs(all)
}

/// A snapshot file with the given sqlar rows `(name, mode, data)`, placed in the store as an
/// attacker with access to the store's disk (or a restored backup) would.
fn plant(m: &Mounted, name: &str, rows: &[(&str, u32, &str)]) -> String {
    let path = m.store.join("workspaces/default/snapshots").join(name);
    let mut sql = String::from(
        "CREATE TABLE sqlar(name TEXT PRIMARY KEY, mode INT, mtime INT, sz INT, data BLOB);
         CREATE TABLE clawfs_snapshot(key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE clawfs_owners(name TEXT PRIMARY KEY, uid INT, gid INT, mtime_ns INT);
         INSERT INTO clawfs_snapshot VALUES ('format', 'clawfs-snapshot-1');",
    );
    for (n, mode, data) in rows {
        sql.push_str(&format!(
            "INSERT INTO sqlar VALUES ('{n}', {mode}, 0, {}, CAST('{data}' AS BLOB));",
            if mode & 0o170000 == 0o120000 {
                -1
            } else {
                data.len() as i64
            }
        ));
    }
    sh(&format!("sqlite3 {} \"{sql}\"", path.display()));
    name.to_string()
}

fn tree_outside(m: &Mounted) -> Vec<(String, String)> {
    crate::common::tree(m.dir.path())
        .into_iter()
        .filter(|(p, _)| {
            !p.starts_with("store/workspaces/default/snapshots") && !p.starts_with("mnt")
        })
        .filter(|(p, _)| !p.starts_with("store/.clawfs"))
        .collect()
}

#[test]
fn crafted_snapshots_cannot_write_outside_the_workspace() {
    let m = Mounted::new();
    fs::write(m.ws().join("keep.txt"), "keep\n").unwrap();
    let cases = [
        plant(
            &m,
            "snapshot-2001-01-01.db",
            &[("../../escape.txt", 0o100644, "pwned")],
        ),
        plant(
            &m,
            "snapshot-2001-01-02.db",
            &[("/tmp/escape.txt", 0o100644, "pwned")],
        ),
        plant(
            &m,
            "snapshot-2001-01-03.db",
            &[("a/./../../escape.txt", 0o100644, "pwned")],
        ),
        // A symlink to outside, then a file "through" it.
        plant(
            &m,
            "snapshot-2001-01-04.db",
            &[
                ("evil", 0o120777, "/tmp"),
                ("evil/escape.txt", 0o100644, "pwned"),
            ],
        ),
    ];
    let before = tree_outside(&m);
    for name in &cases {
        for args in [
            vec!["snapshot", "restore", "default", name],
            vec!["workspace", "fork", "default", "forked", "--from", name],
        ] {
            let out = cli(&m, &args);
            assert!(!out.status.success(), "{args:?} succeeded");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("damaged")
                    || err.contains("restoring")
                    || err.contains("Too many levels"),
                "{args:?}: {err}"
            );
        }
    }
    assert!(!Path::new("/tmp/escape.txt").exists());
    assert!(!m.dir.path().join("escape.txt").exists());
    assert!(!m.store.join("escape.txt").exists());
    assert!(!m.store.join("workspaces/forked").exists());
    // The workspace is as it was (a failed restore swaps nothing in).
    assert_eq!(
        fs::read_to_string(m.ws().join("keep.txt")).unwrap(),
        "keep\n"
    );
    assert_eq!(tree_outside(&m), before);
}

#[test]
fn files_that_are_not_snapshots_are_refused_by_name() {
    let m = Mounted::new();
    let snaps = m.store.join("workspaces/default/snapshots");
    fs::write(
        snaps.join("snapshot-2002-02-02.db"),
        b"not a database at all",
    )
    .unwrap();
    sh(&format!(
        "sqlite3 {} 'CREATE TABLE t(x)'",
        snaps.join("snapshot-2002-02-03.db").display()
    ));
    for name in ["snapshot-2002-02-02.db", "snapshot-2002-02-03.db"] {
        let out = cli(&m, &["snapshot", "restore", "default", name]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("not a ClawFS snapshot") || err.contains("not a database"),
            "{err}"
        );
    }
    // Listing skips them.
    let out = cli(&m, &["snapshot", "list", "default"]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("2002-02"));
}

#[test]
fn an_agent_can_neither_read_nor_plant_a_snapshot() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    fs::write(m.ws().join("secret.txt"), "root only\n").unwrap();
    let out = cli(&m, &["snapshot", "create", "default", "--json"]);
    assert!(out.status.success());
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let snap = m.ws().join("snapshots").join(s["name"].as_str().unwrap());
    let mnt = m.mnt.display().to_string();
    let o = m.run_agent(
        "fs-engine",
        &format!(
            "cat {snap} >/dev/null 2>&1 && echo READ; \
             echo x > {mnt}/workspaces/default/snapshots/snapshot-2030-01-01.db 2>/dev/null && echo PLANTED; \
             echo done",
            snap = snap.display()
        ),
    );
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("done"),
        "{said} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !said.contains("READ") && !said.contains("PLANTED"),
        "{said}"
    );
    assert_eq!(
        errno(fs::write(
            m.ws().join("snapshots/snapshot-2030-01-01.db"),
            b"x"
        )),
        libc::EROFS
    );
}

/// What an agent can make in its workspace — a path too long to open, a sparse file past the
/// snapshot limit, names that are not UTF-8 — never stops a snapshot, a restore or a fork, and
/// a restore never loses what its safety snapshot could not hold. Forks keep holes.
#[test]
fn agent_made_oddities_cannot_block_or_defeat_snapshots() {
    use std::os::unix::ffi::OsStrExt;
    let m = Mounted::new();
    m.open_workspace_to_all();
    let long = "x".repeat(250);
    let mnt = m.mnt.display().to_string();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {mnt}/workspaces/default && mkdir deep && cd deep && \
             for i in $(seq 17); do mkdir {long} && cd {long}; done; echo hi > f.txt; \
             cd {mnt}/workspaces/default && truncate -s 1000000001 big.bin && \
             printf keep > \"$(printf 'bad\\377name')\" && echo ok"
        ),
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(m.ws().join("plain.txt"), "plain\n").unwrap();
    let out = cli(&m, &["snapshot", "create", "default", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let skipped = s["skipped"].to_string();
    assert!(skipped.contains("too long"), "{skipped}");
    assert!(
        skipped.contains("big.bin") && skipped.contains("larger"),
        "{skipped}"
    );
    assert!(skipped.contains("not UTF-8"), "{skipped}");

    // A restore swaps the snapshot in, and keeps the replaced tree whole (its safety snapshot
    // could not hold everything).
    let out = cli(
        &m,
        &[
            "snapshot",
            "restore",
            "default",
            s["name"].as_str().unwrap(),
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kept = m
        .store
        .join(r["kept_at"].as_str().expect("the replaced tree is kept"));
    let bad = std::ffi::OsStr::from_bytes(b"bad\xffname");
    assert_eq!(fs::read(kept.join(bad)).unwrap(), b"keep");
    assert_eq!(
        fs::read_to_string(m.ws().join("plain.txt")).unwrap(),
        "plain\n"
    );

    // A fork of the kept state: the sparse file stays sparse.
    fs::write(m.ws().join("sparse.bin"), b"").unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(m.ws().join("sparse.bin"))
        .unwrap()
        .set_len(500_000_000)
        .unwrap();
    let out = cli(&m, &["workspace", "fork", "default", "copy"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = fs::metadata(m.store.join("workspaces/copy/sparse.bin")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(st.len(), 500_000_000);
    assert!(
        st.blocks() * 512 < 1 << 20,
        "{} bytes allocated",
        st.blocks() * 512
    );
}

#[test]
fn a_snapshot_cannot_be_linked_out_through_the_mount_by_root_either() {
    let m = Mounted::new();
    let out = cli(&m, &["snapshot", "create", "default", "--json"]);
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let snap = m.ws().join("snapshots").join(s["name"].as_str().unwrap());
    assert_eq!(
        errno(fs::hard_link(&snap, m.ws().join("copy.db"))),
        libc::EROFS
    );
    assert!(!m.ws().join("copy.db").exists());
    // snapshots/ is root's alone once it holds snapshots.
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(m.ws().join("snapshots")).unwrap();
    assert_eq!((md.mode() & 0o777, md.uid()), (0o700, 0));
}

/// A real snapshot of the workspace, then changed with `sqlite3` as a hostile archive author
/// would (`sql` runs against it): the name of the copy in `snapshots/`.
fn tamper(m: &Mounted, copy: &str, sql: &str) -> String {
    let out = cli(m, &["snapshot", "create", "default", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let snaps = m.store.join("workspaces/default/snapshots");
    let from = snaps.join(s["name"].as_str().unwrap());
    fs::copy(&from, snaps.join(copy)).unwrap();
    fs::remove_file(&from).unwrap();
    sh(&format!("sqlite3 {} \"{sql}\"", snaps.join(copy).display()));
    copy.to_string()
}

fn snapshot_names(m: &Mounted) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(m.store.join("workspaces/default/snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Archives whose sizes, blobs and names lie: a restore or a fork gives a clear "damaged
/// snapshot" error (never an abort), leaves no staging folder, takes no pre-restore snapshot
/// and changes nothing in the workspace. A file that claims setuid root comes back without it.
#[test]
fn hostile_archives_are_refused_whole() {
    let m = Mounted::new();
    let body = "compressible ".repeat(2000);
    fs::write(m.ws().join("big.txt"), &body).unwrap();
    fs::write(m.ws().join("keep.txt"), "keep\n").unwrap();
    let cases = [
        // The size that made the restore allocate 1 PB and abort.
        tamper(
            &m,
            "snapshot-2003-01-01.db",
            "update sqlar set sz=1000000000000000 where name='big.txt'",
        ),
        tamper(
            &m,
            "snapshot-2003-01-02.db",
            "update sqlar set sz=-5 where name='big.txt'",
        ),
        tamper(
            &m,
            "snapshot-2003-01-03.db",
            "update sqlar set sz=999999999 where name='big.txt'",
        ),
        // A compressed blob cut short.
        tamper(
            &m,
            "snapshot-2003-01-04.db",
            "update sqlar set data=substr(data, 1, length(data) / 2) where name='big.txt'",
        ),
        // Two entries of one name (a table made without its primary key).
        tamper(
            &m,
            "snapshot-2003-01-05.db",
            "create table t as select * from sqlar; drop table sqlar; alter table t rename to sqlar; \
             insert into sqlar select * from sqlar where name='keep.txt'",
        ),
    ];
    let before_tree = tree_outside(&m);
    let before_snaps = snapshot_names(&m);
    for name in &cases {
        for args in [
            vec!["snapshot", "restore", "default", name],
            vec!["workspace", "fork", "default", "forked", "--from", name],
        ] {
            let out = cli(&m, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains("damaged"), "{args:?}: {err}");
        }
        assert_eq!(snapshot_names(&m), before_snaps, "{name}");
        let tmp = m.store.join(".clawfs/tmp");
        let left: Vec<_> = fs::read_dir(&tmp)
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{name}: staging left behind: {left:?}");
    }
    assert_eq!(tree_outside(&m), before_tree);
    assert!(!m.store.join("workspaces/forked").exists());
    assert_eq!(fs::read_to_string(m.ws().join("big.txt")).unwrap(), body);

    // setuid and setgid root, as the archive claims: restored as an ordinary file of root's.
    let name = tamper(
        &m,
        "snapshot-2003-01-06.db",
        "update sqlar set mode=36333 where name='keep.txt'; \
         update clawfs_owners set uid=0, gid=0 where name='keep.txt'",
    );
    let out = cli(&m, &["snapshot", "restore", "default", &name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(m.ws().join("keep.txt")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o755, "mode {:o}", md.mode());
}
