//! An agent with a byte quota writes past it through new files, appends and descriptors it
//! keeps open: the write that crosses the quota fails with EDQUOT, whichever way.

use std::fs;

use crate::common::Mounted;
use crate::support::{agent_policy, audit_until, denials, text};

#[test]
fn every_byte_counts_against_the_quota() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let dir = format!("{}/agents/fs-engine", m.mnt.display());
    // New files, one after another; then one descriptor held open, written in a loop.
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {dir} || exit 9
             for i in 1 2 3 4 5 6; do
               head -c 300000 /dev/zero > new$i 2>&1 || echo new$i-refused
             done
             exec 4>held
             i=0; while [ $i -lt 40 ]; do head -c 100000 /dev/zero >&4 || {{ echo held-refused; break; }}; i=$((i+1)); done
             exec 4>&-
             python3 -c 'import os
f=os.open(\"py\", os.O_WRONLY|os.O_CREAT, 0o644)
try:
    [os.write(f, bytes(65536)) for _ in range(64)]
    print(\"py-wrote-all\")
except OSError as e:
    print(\"py-refused\", e.errno)' 2>&1
             true"
        ),
    );
    let out = text(&out);
    assert!(out.contains("new4-refused"), "{out}");
    assert!(out.contains("held-refused"), "{out}");
    assert!(
        out.contains(&format!("py-refused {}", libc::EDQUOT)),
        "{out}"
    );
    let total: u64 = fs::read_dir(m.backing("agents/fs-engine"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.metadata().unwrap().len())
        .filter(|&n| n > 4096 || n == 0)
        .sum();
    assert!(
        total <= 1 << 20,
        "the agent stored {total} bytes with a 1 MiB quota: {out}"
    );
    let all = audit_until(&m, |a| a.iter().any(|r| r["rule"] == "QUOTA"));
    assert!(all
        .iter()
        .any(|r| r["rule"] == "QUOTA" && r["errno"] == libc::EDQUOT));
    assert!(denials(&m, "fs-engine")
        .iter()
        .any(|d| d["rule"] == "QUOTA"));
}

#[test]
fn extending_preallocating_tools_and_identity_rewrites_are_charged_too() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let dir = format!("{}/agents/fs-engine", m.mnt.display());
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {dir} || exit 9
             truncate -s 50M sparse 2>&1 || echo truncate-refused
             fallocate -n -l 30M kept 2>&1 || echo fallocate-refused
             true"
        ),
    );
    let out = text(&out);
    assert!(out.contains("truncate-refused"), "{out}");
    assert!(out.contains("fallocate-refused"), "{out}");
    // Tool writes into a workspace count against the same quota.
    let big = "a".repeat(700_000);
    let req = |p: &str| format!("{{\"path\":\"{p}\",\"content\":\"{big}\"}}");
    fs::write(m.dir.path().join("r1.json"), req("t1.md")).unwrap();
    fs::write(m.dir.path().join("r2.json"), req("t2.md")).unwrap();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "for r in r1 r2; do exec 3<>{mnt}/tools/call/write_file; cat {d}/$r.json >&3; cat <&3; echo; exec 3>&-; done",
            mnt = m.mnt.display(),
            d = m.dir.path().display()
        ),
    );
    let out = text(&out);
    assert!(out.contains("\"ok\":true"), "{out}");
    assert!(out.contains("quota"), "{out}");
    assert!(!m.ws().join("t2.md").exists(), "{out}");
    // Identity rewrites keep a bounded number of backups.
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {dir}; i=0; while [ $i -lt 30 ]; do cp identity.json /tmp/i.json; cat /tmp/i.json > identity.json; i=$((i+1)); done; echo done"
        ),
    );
    assert!(text(&out).contains("done"), "{}", text(&out));
    let kept = fs::read_dir(m.backing("agents/fs-engine/backups"))
        .unwrap()
        .count();
    assert!(kept <= 16, "{kept} identity backups kept");
}

/// Backups are charged to the agent whose edits keep them: with a 300 KiB quota, edits of a
/// 100 KB file stop when the next backup would cross it. An edit the file's permissions
/// refuse writes nothing, backup included.
#[test]
fn tool_backups_are_charged_and_a_refused_edit_writes_none() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"300KiB\" }");
    let mut body = String::from("TOKENA\n");
    body.push_str(&"line of text abc\n".repeat(6000));
    let big = m.ws().join("big.md");
    fs::write(&big, &body).unwrap();
    let mnt = m.mnt.display();
    let edits = |n: usize| {
        let out = m.run_agent(
            "fs-engine",
            &format!(
                "i=0; while [ $i -lt {n} ]; do
                   exec 3<>{mnt}/tools/call/edit_exact; printf '%s' '{{\"path\":\"big.md\",\"old\":\"TOKENA\",\"new\":\"TOKENB\"}}' >&3; cat <&3; echo; exec 3>&-
                   exec 3<>{mnt}/tools/call/edit_exact; printf '%s' '{{\"path\":\"big.md\",\"old\":\"TOKENB\",\"new\":\"TOKENA\"}}' >&3; cat <&3; echo; exec 3>&-
                   i=$((i+1))
                 done"
            ),
        );
        text(&out)
    };
    // Root's 0644 file: refused by its mode, before any backup.
    let out = edits(1);
    assert!(
        out.contains("refused by the permissions of the file"),
        "{out}"
    );
    let backups = m.backing("workspaces/default/.clawfs/backups");
    assert_eq!(
        walk_sizes(&backups),
        0,
        "a refused edit left a backup: {out}"
    );
    assert_eq!(fs::read_to_string(&big).unwrap(), body);
    // Writable by the agent: each edit keeps a backup of the old content, charged to it.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&big, fs::Permissions::from_mode(0o666)).unwrap();
    let out = edits(6);
    assert!(out.contains("\"ok\":true"), "{out}");
    assert!(out.contains("quota"), "{out}");
    let kept = walk_sizes(&backups);
    assert!(
        kept <= 300 << 10,
        "{kept} bytes of backups with a 300 KiB quota: {out}"
    );
}

fn walk_sizes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let md = fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                walk_sizes(&e.path())
            } else {
                md.len()
            }
        })
        .sum()
}

/// A tarball shaped like an npm install, `files` files in nested packages and `bytes` in all,
/// built in `work` and put in `dir`. (The install the benchmark times, bench/agentwork.sh, is
/// typescript, eslint, webpack, react, lodash, express and jest: 13,395 files, 148 MB.)
fn node_modules_tarball(
    work: &std::path::Path,
    dir: &std::path::Path,
    (files, bytes): (u64, u64),
) -> std::path::PathBuf {
    let src = work.join("nm-src");
    let mut left: u64 = bytes;
    for i in 0..files {
        // About 30 files per package, in three folders.
        let pkg = src.join(format!("node_modules/pkg{:03}/lib/sub{}", i / 30, i % 3));
        fs::create_dir_all(&pkg).unwrap();
        // Mostly small files and a few large ones, as packages ship them.
        let size = match i % 50 {
            0 => bytes / files * 27,
            _ => bytes / files / 2,
        }
        .min(left);
        left -= size;
        fs::write(pkg.join(format!("f{i}.js")), vec![b'x'; size as usize]).unwrap();
    }
    let tar = dir.join("node_modules.tar");
    let st = std::process::Command::new("tar")
        .arg("cf")
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .arg("node_modules")
        .status()
        .unwrap();
    assert!(st.success());
    fs::remove_dir_all(&src).unwrap();
    tar
}

/// The quota counts what the agent holds: 20 installs and removals of a tree that fits the
/// quota are never refused though they write 15 times the quota in all, and what the agent
/// holds after the last removal is what it held before the first. (The issue's shape — a
/// 148 MB, 13,395-file install under 512 MiB — is the same ratio; it takes 13 minutes in a
/// debug build, so CI runs it scaled down to 1,000 files and 8 MB under 12 MiB, and
/// bench/agentwork.sh runs it full size on a release build.)
#[test]
fn installs_and_removals_give_their_bytes_back() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"12MiB\" }");
    let tar = node_modules_tarball(m.dir.path(), &m.ws(), (1_000, 8_000_000));
    let before = held(&m, "fs-engine");
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "cd {ws} || exit 9
             i=0
             while [ $i -lt 20 ]; do
               mkdir app && tar xf {tar} -C app || {{ echo refused-at-$i; exit 1; }}
               rm -rf app || {{ echo rm-failed-at-$i; exit 1; }}
               i=$((i+1))
             done
             echo cycles=$i",
            ws = m.ws().display(),
            tar = tar.display()
        ),
    );
    let o = text(&out);
    assert!(out.status.success() && o.contains("cycles=20"), "{o}");
    assert_eq!(held(&m, "fs-engine"), before, "{o}");
}

/// What `clawfs quota --json` says `agent` holds: (bytes, files).
pub(crate) fn held(m: &Mounted, agent: &str) -> (u64, u64) {
    // The daemon saves its counts every 2 s.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let out = crate::common::cli(m, &["quota", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .unwrap_or_else(|| panic!("{agent} not in {v}"));
    (a["bytes"].as_u64().unwrap(), a["files"].as_u64().unwrap())
}

/// Metadata is charged: symlink targets, `user.*` xattrs and folders count, so an agent with
/// a 1 MiB quota cannot hold 2.6 MB of them (200 symlinks of 4,000-byte targets, 3,900-byte
/// xattrs on 40 folders). The refusal is EDQUOT, audited, and the counts agree with a recount
/// of the store.
#[test]
fn symlink_targets_xattrs_and_folders_are_charged() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let target = "t".repeat(4000);
    let value = "v".repeat(3900);
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "cd {ws} || exit 9
             mkdir meta && cd meta
             i=0; while [ $i -lt 200 ]; do ln -s {target} l$i 2>/dev/null || echo link-refused; i=$((i+1)); done
             i=0; while [ $i -lt 40 ]; do mkdir d$i 2>/dev/null || echo mkdir-refused; setfattr -n user.pad -v {value} d$i 2>/dev/null || echo xattr-refused; i=$((i+1)); done
             echo end",
            ws = m.ws().display()
        ),
    );
    let o = text(&out);
    assert!(o.contains("end"), "{o}");
    assert!(
        o.contains("link-refused") || o.contains("xattr-refused") || o.contains("mkdir-refused"),
        "nothing was refused: {o}"
    );
    let (bytes, _) = held(&m, "fs-engine");
    assert!(bytes <= 1 << 20, "holds {bytes} bytes with a 1 MiB quota");
    // What the backing store holds for the agent agrees with the count.
    let out = crate::common::cli(&m, &["quota", "rescan"]);
    assert!(out.status.success(), "{}", text(&out));
    let (recounted, _) = held(&m, "fs-engine");
    assert_eq!(recounted, bytes, "the running count drifted from the store");
    let all = audit_until(&m, |a| a.iter().any(|r| r["rule"] == "QUOTA"));
    assert!(all
        .iter()
        .any(|r| r["rule"] == "QUOTA" && r["errno"] == libc::EDQUOT));
}

/// The counts survive a clean restart as they are, and a daemon killed mid-work is recounted
/// from the store at the next mount; `clawfs quota rescan` on an unserved store agrees.
#[test]
fn counts_survive_restarts_and_crashes() {
    let m = Mounted::new();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {ws} && mkdir -p keep && head -c 300000 /dev/zero > keep/a && ln -s abc keep/s && echo ok",
            ws = m.ws().display()
        ),
    );
    assert!(text(&out).contains("ok"), "{}", text(&out));
    let first = held(&m, "fs-engine");
    assert!(first.0 >= 300_000, "{first:?}");
    assert!(m.umount().status.success());
    m.mount(&[]);
    assert_eq!(held(&m, "fs-engine"), first);
    // Files written behind a daemon killed before it saved: recounted at the next mount.
    fs::write(m.backing("workspaces/default/keep/b"), vec![0u8; 100_000]).unwrap();
    std::os::unix::fs::chown(m.backing("workspaces/default/keep/b"), Some(61006), None).unwrap();
    let pid = m.daemon_pid();
    // SAFETY: killing the test's own daemon.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    for _ in 0..100 {
        if !m.is_mounted() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = m.umount();
    m.mount(&[]);
    let after = held(&m, "fs-engine");
    // 100,000 bytes take 25 blocks of 4 KiB: a file costs its allocated space if larger.
    assert!(
        (first.0 + 100_000..=first.0 + 100_000 + 4096).contains(&after.0) && after.1 == first.1 + 1,
        "{after:?} after {first:?}"
    );
    assert!(m.umount().status.success());
    let out = crate::common::cli(&m, &["quota", "rescan"]);
    assert!(out.status.success(), "{}", text(&out));
    let v = crate::common::cli(&m, &["quota", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    let fs_engine = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == "fs-engine")
        .unwrap()
        .clone();
    assert_eq!(fs_engine["bytes"].as_u64().unwrap(), after.0, "{v}");
}

/// Routes round the count a red-team round found: growing a file root owns (a workspace's
/// `metadata.json`, writable by the agents' group) counts as the agent's; growing another
/// agent's shared file is checked against that agent's quota, whose owner holds it; and a file
/// removed while open stays counted until its last close.
#[test]
fn others_files_and_open_removed_files_do_not_escape_the_count() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"2MiB\" }");
    agent_policy(&m, "observability", "quota = { bytes = \"1MiB\" }");
    let ws = m.ws();
    // A file observability shares with the agents' group.
    let out = m.run_agent(
        "observability",
        &format!(
            "head -c 100000 /dev/zero > {w}/shared.bin && chgrp clawos-agents {w}/shared.bin && chmod 664 {w}/shared.bin && echo ok",
            w = ws.display()
        ),
    );
    assert!(text(&out).contains("ok"), "{}", text(&out));
    let py = r#"
import os, sys
held = []
refused = 0
for i in range(10):
    fd = os.open(f"gone{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.unlink(f"gone{i}")
    try:
        for _ in range(8):
            os.write(fd, bytes(65536))
    except OSError as e:
        refused += 1
    held.append(fd)
print("open-removed-refused", refused)
"#;
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "cd {w} || exit 9
             i=0; while [ $i -lt 5 ]; do head -c 1000000 /dev/zero >> metadata.json 2>/dev/null || {{ echo metadata-refused; break; }}; i=$((i+1)); done
             i=0; while [ $i -lt 12 ]; do head -c 100000 /dev/zero >> shared.bin 2>/dev/null || {{ echo shared-refused; break; }}; i=$((i+1)); done
             cd {a} && python3 -c '{py}'",
            w = ws.display(),
            a = m.path("agents/fs-engine").display(),
        ),
    );
    let o = text(&out);
    assert!(o.contains("metadata-refused"), "{o}");
    assert!(o.contains("shared-refused"), "{o}");
    let refused: u32 = o
        .split("open-removed-refused ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        refused > 0,
        "ten 512 KiB files removed while open fit a 2 MiB quota: {o}"
    );
    // The shared file stayed within its owner's quota.
    let shared = fs::metadata(m.backing("workspaces/default/shared.bin"))
        .unwrap()
        .len();
    assert!(
        shared <= 1 << 20,
        "{shared} bytes in observability's file: {o}"
    );
    // Once closed, what the removed files held is given back.
    let (bytes, _) = held(&m, "fs-engine");
    assert!(bytes <= 2 << 20, "{bytes}: {o}");
}

/// Names cost what they add to their folder: 20,000 hard links with long names to one file
/// (one inode) grew a folder by megabytes uncounted. Found by a red-team round.
#[test]
fn hard_link_names_are_charged_as_their_folder_grows() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let py = r#"
import os
os.mkdir("d"); open("d/f", "w").write("x")
n = 0
try:
    for i in range(20000):
        os.link("d/f", "d/%05d" % i + "L" * 240)
        n += 1
    print("all-linked", n)
except OSError as e:
    print("refused-after", n, e.errno)
"#;
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "cd {a} && python3 -c '{py}'",
            a = m.path("agents/fs-engine").display()
        ),
    );
    let o = text(&out);
    assert!(
        o.contains("refused-after") && o.contains(&libc::EDQUOT.to_string()),
        "{o}"
    );
    let dir = fs::metadata(m.backing("agents/fs-engine/d")).unwrap().len();
    assert!(
        dir <= (1 << 20) + 65536,
        "the folder is {dir} bytes with a 1 MiB quota: {o}"
    );
    let (bytes, _) = held(&m, "fs-engine");
    let out = crate::common::cli(&m, &["quota", "rescan"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        held(&m, "fs-engine").0,
        bytes,
        "the running count drifted from the store"
    );
}

/// Tool calls are counted as they change the store, not at the next recount: a file a call
/// makes, the backups its edits keep (at most ten per file), what it deletes into the trash
/// and gives back by emptying it. The running count agrees with a recount of the store after
/// each step; emptying the trash gives the bytes back; a call that would pass the agent's file
/// quota is refused, audited, and makes nothing.
#[test]
fn tool_calls_are_counted_as_they_change_the_store() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"4MiB\" }");
    let call = |script: &str| {
        let out = m.run_agent_as(
            "fs-engine",
            &[],
            &format!(
                "call() {{ exec 3<>{mnt}/tools/call/$1; printf '%s' \"$2\" >&3; cat <&3; echo; exec 3>&-; }}\n{script}",
                mnt = m.mnt.display()
            ),
        );
        text(&out)
    };
    let recounted = |m: &Mounted| {
        let live = held(m, "fs-engine");
        let out = crate::common::cli(m, &["quota", "rescan"]);
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(
            held(m, "fs-engine"),
            live,
            "the running count drifted from the store"
        );
        live
    };
    let (base, _) = held(&m, "fs-engine");
    let o = call(
        r#"big=$(head -c 20000 /dev/zero | tr '\0' a)
           call write_file "{\"path\":\"notes/a.md\",\"content\":\"T0 $big\"}"
           i=1; while [ $i -le 12 ]; do
             call edit_exact "{\"path\":\"notes/a.md\",\"old\":\"T$((i-1)) \",\"new\":\"T$i \"}"
             i=$((i+1))
           done
           call write_file '{"path":"deep/x/b.md","content":"b"}'
           call delete '{"path":"deep"}'
           call delete '{"path":"notes/a.md"}'"#,
    );
    assert_eq!(o.matches("\"ok\":true").count(), 16, "{o}");
    let backups = m.backing("workspaces/default/.clawfs/backups/notes");
    assert_eq!(fs::read_dir(&backups).unwrap().count(), 10, "{o}");
    let (trashed, _) = recounted(&m);
    // The file in the trash and its ten backups are the agent's.
    assert!(trashed >= base + 11 * 20_000, "{base} -> {trashed}");
    let o = call("call empty_trash '{}'");
    assert!(o.contains("\"ok\":true"), "{o}");
    assert!(!backups.exists(), "the backups go, with their folder: {o}");
    let (emptied, files) = recounted(&m);
    assert!(emptied < base + 20_000, "{base} -> {emptied}: {o}");
    // The file quota: two more files fit, the third call makes nothing.
    crate::support::edit_policy(&m, |p| {
        p.replace(
            "quota = { bytes = \"4MiB\" }",
            &format!("quota = {{ bytes = \"4MiB\", files = {} }}", files + 2),
        )
    });
    let o = call(
        r#"for f in c1 c2 c3; do call write_file "{\"path\":\"$f.md\",\"content\":\"x\"}"; done"#,
    );
    assert_eq!(o.matches("\"ok\":true").count(), 2, "{o}");
    assert!(o.contains("quota.files"), "{o}");
    assert!(!m.ws().join("c3.md").exists());
    let all = audit_until(&m, |a| {
        a.iter().any(|r| {
            r["operation"] == "tool:write_file"
                && r["result"] == "denied"
                && r["target"] == "/workspaces/default/c3.md"
        })
    });
    assert!(!all.is_empty());
    recounted(&m);
}
