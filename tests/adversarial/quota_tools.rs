//! An agent uses the tools (file-interface calls) to hold more than its quota, or to make
//! another agent hold what it cannot give back: folders grown by long names, deep paths,
//! calls made at once, another agent's file, trash entries, truncations, deletes of another
//! agent's file, and the trash's backups. After each, the running count must agree with a
//! recount of the store, and no agent may hold more than its quota.

use std::fs;

use crate::common::Mounted;
use crate::quota::held;
use crate::support::{agent_policy, text};

/// Runs `script` as `agent` in the default sandbox, in the workspace, with `call TOOL JSON`
/// making a tool call; its output.
pub(crate) fn as_agent(m: &Mounted, agent: &str, script: &str) -> String {
    let out = m.run_agent_as(
        agent,
        &[],
        &format!(
            "call() {{ exec 3<>{mnt}/tools/call/$1; printf '%s' \"$2\" >&3; cat <&3; echo; exec 3>&-; }}\ncd {ws} || exit 9\n{script}",
            mnt = m.mnt.display(),
            ws = m.ws().display()
        ),
    );
    text(&out)
}

/// What `agent` holds, after checking that the running count agrees with a recount.
pub(crate) fn recounted(m: &Mounted, agent: &str) -> (u64, u64) {
    let live = held(m, agent);
    let out = crate::common::cli(m, &["quota", "rescan"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        held(m, agent),
        live,
        "{agent}: the running count drifted from the store"
    );
    live
}

/// Folders a call grows with long names are counted whether or not the kernel knows them,
/// so growing and removing them mints nothing; a deep path is charged folder by folder and
/// refused at the quota.
#[test]
fn folders_tools_grow_and_deep_paths_are_charged() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"call create_folder '{"path":"g"}'
           long=$(head -c 240 /dev/zero | tr '\0' n)
           i=0; while [ $i -lt 120 ]; do call write_file "{\"path\":\"g/$long$i\",\"content\":\"\"}" >/dev/null; i=$((i+1)); done
           echo made"#,
    );
    assert!(o.contains("made"), "{o}");
    recounted(&m, "fs-engine");
    // Moving them grows another folder: counted too, as are restores.
    let o = as_agent(
        &m,
        "fs-engine",
        r#"call create_folder '{"path":"h"}'
           long=$(head -c 240 /dev/zero | tr '\0' n)
           i=0; while [ $i -lt 120 ]; do call move "{\"from\":\"g/$long$i\",\"to\":\"h/$long$i\"}" >/dev/null; i=$((i+1)); done
           echo moved"#,
    );
    assert!(o.contains("moved"), "{o}");
    recounted(&m, "fs-engine");
    let o = as_agent(&m, "fs-engine", "rm -rf g h && echo removed");
    assert!(o.contains("removed"), "{o}");
    recounted(&m, "fs-engine");
    let deep = vec!["q"; 400].join("/");
    let o = as_agent(
        &m,
        "fs-engine",
        &format!("call create_folder '{{\"path\":\"{deep}\"}}'"),
    );
    assert!(o.contains("\"denied\"") && o.contains("quota"), "{o}");
    let (bytes, _) = recounted(&m, "fs-engine");
    assert!(bytes <= 1 << 20, "holds {bytes} with a 1 MiB quota");
}

/// Calls made at once share one quota: twelve 300 KB writes together leave at most 1 MiB.
#[test]
fn calls_made_at_once_cannot_pass_the_quota_together() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"big=$(head -c 300000 /dev/zero | tr '\0' a)
           for i in 1 2 3 4 5 6 7 8 9 10 11 12; do call write_file "{\"path\":\"p$i.txt\",\"content\":\"$big\"}" > out$i 2>&1 & done
           wait; cat out*; rm -f out*"#,
    );
    assert!(o.contains("\"ok\":true") && o.contains("quota"), "{o}");
    let (bytes, _) = recounted(&m, "fs-engine");
    assert!(bytes <= 1 << 20, "holds {bytes} with a 1 MiB quota: {o}");
}

/// Growing another agent's file through a tool is checked against the owner's quota, as a
/// write through the mount is; a trash entry costs its folder and record.
#[test]
fn another_agents_file_and_trash_entries_are_charged_to_who_holds_them() {
    let m = Mounted::new();
    agent_policy(&m, "kernel-engine", "quota = { bytes = \"1MiB\" }");
    agent_policy(&m, "fs-engine", "quota = { bytes = \"400KiB\" }");
    let o = as_agent(
        &m,
        "kernel-engine",
        "echo hi > shared.txt && chmod 666 shared.txt && echo ok",
    );
    assert!(o.contains("ok"), "{o}");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"big=$(head -c 2000000 /dev/zero | tr '\0' a)
           call write_file "{\"path\":\"shared.txt\",\"content\":\"$big\"}""#,
    );
    assert!(
        o.contains("\"denied\"") && o.contains("kernel-engine"),
        "{o}"
    );
    assert_eq!(
        fs::read_to_string(m.ws().join("shared.txt")).unwrap(),
        "hi\n"
    );
    // At its quota, the agent cannot park bytes in trash entries.
    let o = as_agent(
        &m,
        "fs-engine",
        r#"big=$(head -c 380000 /dev/zero | tr '\0' a)
           call write_file "{\"path\":\"fill.txt\",\"content\":\"$big\"}"
           i=0; while [ $i -lt 60 ]; do touch e$i; call delete "{\"path\":\"e$i\"}"; i=$((i+1)); done"#,
    );
    assert!(o.contains("quota"), "{o}");
    let (bytes, _) = recounted(&m, "fs-engine");
    assert!(bytes <= 400 << 10, "holds {bytes} with a 400 KiB quota");
    recounted(&m, "kernel-engine");
}

/// Truncating, through the mount, a file a tool wrote gives its bytes back.
#[test]
fn truncating_a_file_a_tool_wrote_gives_its_bytes_back() {
    let m = Mounted::new();
    let (base, _) = held(&m, "fs-engine");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"big=$(head -c 300000 /dev/zero | tr '\0' a)
           call write_file "{\"path\":\"tr.txt\",\"content\":\"$big\"}"
           : > tr.txt && echo truncated"#,
    );
    assert!(o.contains("truncated"), "{o}");
    let (bytes, _) = recounted(&m, "fs-engine");
    assert!(bytes < base + 100_000, "{base} -> {bytes}");
}

/// Another agent deleting an agent's file (in a folder the owner opened to all) through a tool
/// puts it in its own trash: the owner, who still holds it, sees it and may empty it; emptying the trash leaves the backups
/// other agents keep; an empty_trash that finds nothing of one's own is no refusal.
#[test]
fn the_owner_of_a_file_someone_else_trashed_may_empty_it() {
    let m = Mounted::new();
    let (base, _) = held(&m, "kernel-engine");
    let o = as_agent(
        &m,
        "kernel-engine",
        r#"big=$(head -c 500000 /dev/zero | tr '\0' a)
           mkdir -m 777 open && call write_file "{\"path\":\"open/k.bin\",\"content\":\"$big\"}"
           call write_file '{"path":"sh/notes.md","content":"one"}'
           call write_file '{"path":"sh/notes.md","content":"two"}'
           call write_file '{"path":"sh/notes.md","content":"three"}'
           call move '{"from":"sh","to":"sh-final"}'"#,
    );
    assert_eq!(o.matches("\"ok\":true").count(), 5, "{o}");
    let backups = m.backing("workspaces/default/.clawfs/backups/sh");
    assert_eq!(fs::read_dir(&backups).unwrap().count(), 2);
    let o = as_agent(&m, "fs-engine", r#"call delete '{"path":"open/k.bin"}'"#);
    assert!(o.contains("\"ok\":true"), "{o}");
    let o = as_agent(
        &m,
        "kernel-engine",
        "call list_trash '{}'; call empty_trash '{}'",
    );
    assert!(o.contains("\"path\":\"open/k.bin\""), "{o}");
    assert!(o.contains("\"removed\":[\""), "{o}");
    let (bytes, _) = recounted(&m, "kernel-engine");
    assert!(bytes < base + 100_000, "{base} -> {bytes}: {o}");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"call create_folder '{"path":"sh"}'
           call delete '{"path":"sh"}'
           call empty_trash '{}'"#,
    );
    assert_eq!(o.matches("\"ok\":true").count(), 3, "{o}");
    assert_eq!(
        fs::read_dir(&backups).unwrap().count(),
        2,
        "others' backups were removed: {o}"
    );
    let o = as_agent(
        &m,
        "kernel-engine",
        "touch mine && call delete '{\"path\":\"mine\"}'",
    );
    assert!(o.contains("\"ok\":true"), "{o}");
    let o = as_agent(&m, "fs-engine", "call empty_trash '{}'");
    assert!(
        o.contains("\"ok\":true") && o.contains("\"removed\":[]"),
        "{o}"
    );
}

/// A file an agent removes with `rm` through the mount (no tool sees it go) keeps the agent's
/// history of it: listed and restorable (the file made again, the agent's) until it ages out.
/// Then the daemon gives it back, quota included, though no edit of that name ever prunes it
/// again; another agent sees and restores none of it.
#[test]
fn backups_of_a_file_removed_with_rm_are_restorable_then_given_back() {
    let m = Mounted::new();
    let (base, _) = held(&m, "kernel-engine");
    let o = as_agent(
        &m,
        "kernel-engine",
        r#"big=$(head -c 300000 /dev/zero | tr '\0' a)
           call write_file "{\"path\":\"gone/plan.md\",\"content\":\"$big\"}"
           call write_file '{"path":"gone/plan.md","content":"two"}'
           call write_file '{"path":"gone/plan.md","content":"three"}'
           rm gone/plan.md
           call list_backups '{"path":"gone/plan.md"}'"#,
    );
    assert_eq!(o.matches("\"ok\":true").count(), 4, "{o}");
    // The backup folder its backups made is the agent's, charged to it like the backups.
    use std::os::unix::fs::MetadataExt;
    let agent_uid = fs::metadata(m.ws().join("gone")).unwrap().uid();
    let mirror = m.backing("workspaces/default/.clawfs/backups/gone");
    assert_eq!(fs::metadata(&mirror).unwrap().uid(), agent_uid);
    let listed = last_answer(&o);
    let backups = listed["backups"].as_array().unwrap();
    assert_eq!(backups.len(), 2, "{listed}");
    let newest = backups[0]["backup"].as_str().unwrap();
    // Not another agent's to see or to take.
    let o = as_agent(
        &m,
        "fs-engine",
        &format!(
            r#"call list_backups '{{"path":"gone/plan.md"}}'
               call restore_backup '{{"path":"gone/plan.md","backup":"{newest}"}}'"#
        ),
    );
    assert!(o.contains("\"backups\":[]"), "{o}");
    assert!(
        o.contains("\"error\":\"not_found\"") || o.contains("\"error\":\"denied\""),
        "{o}"
    );
    assert!(!m.ws().join("gone/plan.md").exists(), "{o}");
    let o = as_agent(
        &m,
        "kernel-engine",
        &format!(r#"call restore_backup '{{"path":"gone/plan.md","backup":"{newest}"}}'"#),
    );
    assert!(o.contains("\"ok\":true"), "{o}");
    assert_eq!(
        fs::read_to_string(m.ws().join("gone/plan.md")).unwrap(),
        "two"
    );
    // The agent's, as the folder its first write made.
    let made = fs::metadata(m.ws().join("gone/plan.md")).unwrap();
    assert_eq!(made.uid(), fs::metadata(m.ws().join("gone")).unwrap().uid());
    assert_ne!(made.uid(), 0);
    // Removed again, then past its age (its backups' stamps made older than the 30 days kept):
    // given back at the first call after a restart.
    fs::remove_file(m.ws().join("gone/plan.md")).unwrap();
    let folder = m.backing("workspaces/default/.clawfs/backups/gone");
    for (i, e) in fs::read_dir(&folder).unwrap().enumerate() {
        let e = e.unwrap();
        fs::rename(
            e.path(),
            folder.join(format!("plan.md.bak.20200101-00000{i}")),
        )
        .unwrap();
    }
    let out = m.umount();
    assert!(out.status.success(), "{}", text(&out));
    m.mount(&[]);
    let o = as_agent(
        &m,
        "kernel-engine",
        r#"call list_backups '{"path":"gone/plan.md"}'
           call list_backups '{"path":"gone/plan.md"}'"#,
    );
    assert_eq!(last_answer(&o)["backups"], serde_json::json!([]), "{o}");
    let (bytes, _) = recounted(&m, "kernel-engine");
    assert!(bytes < base + 100_000, "{base} -> {bytes}: {o}");
}

/// The last answer of a tool call in `as_agent`'s output.
fn last_answer(out: &str) -> serde_json::Value {
    let line = out.lines().rev().find(|l| l.starts_with('{'));
    serde_json::from_str(line.unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The workspace root is sticky, like /tmp: another agent can neither move an agent's file
/// into a folder of its own (out of the owner's reach, where the owner's quota still counts
/// it) nor remove it, through the mount or a tool; the owner still can.
#[test]
fn nobody_moves_or_removes_another_agents_file_in_a_workspace_root() {
    let m = Mounted::new();
    let o = as_agent(&m, "kernel-engine", "echo mine > kv && echo ok");
    assert!(o.contains("ok"), "{o}");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"mkdir hide && chmod 700 hide
           mv kv hide/ 2>&1 || echo mv-refused
           rm -f kv 2>&1 || echo rm-refused
           call move '{"from":"kv","to":"hide/kv"}'
           call delete '{"path":"kv"}'"#,
    );
    assert!(o.contains("mv-refused") && o.contains("rm-refused"), "{o}");
    assert_eq!(o.matches("\"ok\":false").count(), 2, "{o}");
    assert_eq!(fs::read_to_string(m.ws().join("kv")).unwrap(), "mine\n");
    let o = as_agent(&m, "kernel-engine", "mv kv kv2 && rm kv2 && echo gone");
    assert!(o.contains("gone"), "{o}");
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(m.backing("workspaces/default"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o1000, 0o1000, "{mode:o}");
}

/// A snapshot restore behind the mount's back is counted before the command returns: the
/// agent is not refused for bytes it no longer holds.
#[test]
fn a_snapshot_restore_is_counted_at_once() {
    let m = Mounted::new();
    let out = crate::common::cli(&m, &["snapshot", "create", "default", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name = made["name"]
        .as_str()
        .unwrap_or_else(|| panic!("{made}"))
        .to_string();
    let (base, _) = held(&m, "fs-engine");
    let o = as_agent(
        &m,
        "fs-engine",
        "head -c 300000 /dev/zero > big && echo written",
    );
    assert!(o.contains("written"), "{o}");
    assert!(held(&m, "fs-engine").0 >= base + 300_000);
    let out = crate::common::cli(&m, &["snapshot", "restore", "default", &name]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!m.ws().join("big").exists());
    let (after, _) = recounted(&m, "fs-engine");
    assert!(after < base + 100_000, "{base} -> {after}");
}

/// Growing another agent's file by truncation is checked against the owner's quota (as a write
/// is), and an agent over its quota may still truncate and shrink its own files.
#[test]
fn truncation_is_checked_for_the_owner_and_never_refused_when_it_shrinks() {
    let m = Mounted::new();
    agent_policy(&m, "kernel-engine", "quota = { bytes = \"1MiB\" }");
    let o = as_agent(
        &m,
        "kernel-engine",
        "echo v > kv.md && chmod 666 kv.md && head -c 900000 /dev/zero > mine && echo ok",
    );
    assert!(o.contains("ok"), "{o}");
    let o = as_agent(
        &m,
        "build-engine",
        "truncate -s 3000000 kv.md 2>&1 || echo refused",
    );
    assert!(o.contains("refused") && o.contains("quota"), "{o}");
    assert_eq!(fs::metadata(m.ws().join("kv.md")).unwrap().len(), 2);
    // The policy lowers the quota under what the agent holds: shrinking still works.
    crate::support::edit_policy(&m, |p| {
        p.replace(
            "quota = { bytes = \"1MiB\" }",
            "quota = { bytes = \"100KiB\" }",
        )
    });
    let o = as_agent(
        &m,
        "kernel-engine",
        "truncate -s 1000 mine && : > kv.md && echo shrunk; head -c 200000 /dev/zero >> mine 2>&1 || echo grow-refused",
    );
    assert!(o.contains("shrunk") && o.contains("grow-refused"), "{o}");
    recounted(&m, "kernel-engine");
}

/// An entry empty_trash cannot remove whole stays listed and restorable (its record goes
/// last); another agent's entry holding an agent's files gives that agent its bytes back.
#[test]
fn a_stuck_entry_stays_listed_and_owners_empty_their_files_from_others_entries() {
    let m = Mounted::new();
    let o = as_agent(
        &m,
        "fs-engine",
        r#"mkdir -p ro/inner && head -c 50000 /dev/zero > ro/inner/f && chmod 500 ro/inner
           call delete '{"path":"ro"}'
           call empty_trash '{}'
           call list_trash '{}'"#,
    );
    assert!(
        o.contains("\"failed\"") && o.contains("\"path\":\"ro\""),
        "{o}"
    );
    let id = o
        .split("\"trash_id\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("{o}"))
        .to_string();
    let o = as_agent(
        &m,
        "fs-engine",
        &format!("call restore '{{\"trash_id\":\"{id}\"}}'"),
    );
    assert!(o.contains("\"ok\":true"), "{o}");
    assert!(m.ws().join("ro/inner/f").exists());
    recounted(&m, "fs-engine");
    // kernel-engine's file in fs-engine's shared folder, trashed by fs-engine.
    let (base, _) = held(&m, "kernel-engine");
    let o = as_agent(&m, "fs-engine", "mkdir -m 777 shared && echo ok");
    assert!(o.contains("ok"), "{o}");
    let o = as_agent(
        &m,
        "kernel-engine",
        "head -c 300000 /dev/zero > shared/kbig && echo ok",
    );
    assert!(o.contains("ok"), "{o}");
    let o = as_agent(&m, "fs-engine", r#"call delete '{"path":"shared"}'"#);
    assert!(o.contains("\"ok\":true"), "{o}");
    let o = as_agent(&m, "kernel-engine", "call empty_trash '{}'");
    assert!(o.contains("\"ok\":true"), "{o}");
    let (after, _) = recounted(&m, "kernel-engine");
    assert!(after < base + 100_000, "{base} -> {after}: {o}");
    // fs-engine's entry is still there, without kernel-engine's file.
    let o = as_agent(&m, "fs-engine", "call list_trash '{}'");
    assert!(o.contains("\"path\":\"shared\""), "{o}");
}

/// User attributes past what the backing inode holds (kept beside it by the store) are the
/// file's owner's: counted as they are set, refused at the quota, carried to the replacement a
/// tool's edit writes, and given back with the file, the running count agreeing with a
/// recount at each step.
#[test]
fn attributes_kept_beside_a_file_are_charged_carried_and_given_back() {
    let m = Mounted::new();
    agent_policy(&m, "fs-engine", "quota = { bytes = \"1MiB\" }");
    let (base, _) = recounted(&m, "fs-engine");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"printf 'one\ntwo\n' > a.txt
           v=$(printf '%01000d' 0)
           i=0; while [ $i -lt 300 ]; do setfattr -n user.a$i -v $v a.txt || exit 1; i=$((i+1)); done
           echo set"#,
    );
    assert!(o.contains("set"), "{o}");
    let (bytes, _) = recounted(&m, "fs-engine");
    assert!(bytes >= base + 300 * 1000, "{base} → {bytes}");
    let o = as_agent(
        &m,
        "fs-engine",
        r#"call edit_file '{"path":"a.txt","edits":[{"old":"two","new":"three"}]}'
           getfattr -d a.txt | grep -c '^user.a'
           v=$(printf '%01000d' 0)
           i=0; while [ $i -lt 1000 ]; do setfattr -n user.b$i -v $v a.txt 2>err || break; i=$((i+1)); done
           cat err"#,
    );
    assert!(o.contains("\n300\n"), "the edit kept them: {o}");
    assert!(o.contains("Disk quota exceeded"), "{o}");
    let (full, _) = recounted(&m, "fs-engine");
    assert!(full <= 1 << 20 && full > bytes, "{bytes} → {full}");
    let o = as_agent(&m, "fs-engine", "rm a.txt && echo removed");
    assert!(o.contains("removed"), "{o}");
    // What stays is the edit's backup of the 8-byte file (its content and creation time).
    let after = recounted(&m, "fs-engine").0;
    assert!((base..base + 100).contains(&after), "{base} → {after}");
    let spill = clawfs_core::xattr_spill::Spill::new(&m.backing(".clawfs"));
    assert!(spill.bytes_by_handle().unwrap().is_empty());
}

/// Attributes another agent or a local user sets on an agent's file are the owner's to hold:
/// refused at the owner's quota (EDQUOT, audited) however many files they spread over, as
/// data growth is. Attributes set on a file after its last name is gone add nothing counted
/// and nothing kept beside it: the file gives back what it held at its last close, and the
/// running count agrees with a recount.
#[test]
fn attributes_others_set_are_held_to_the_owners_quota() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    agent_policy(&m, "build-engine", "quota = { bytes = \"1MiB\" }");
    let o = as_agent(
        &m,
        "build-engine",
        "mkdir -m 777 open && for i in 1 2 3 4 5 6; do echo s > open/f$i; chmod 666 open/f$i; done && echo made",
    );
    assert!(o.contains("made"), "{o}");
    let fill = |dir: &str| {
        format!(
            r#"v=$(printf '%060000d' 0)
               for f in 1 2 3 4 5 6; do i=0; while [ $i -lt 64 ]; do
                 e=$(setfattr -n user.x$i -v $v {dir}/open/f$f 2>&1) || {{ echo "$e"; break 2; }}
                 i=$((i+1)); done; done"#
        )
    };
    let ws = m.ws().display().to_string();
    let o = as_agent(&m, "fs-engine", &fill(&ws));
    assert!(o.contains("Disk quota exceeded"), "{o}");
    let (held, _) = recounted(&m, "build-engine");
    assert!(held <= 1 << 20, "build-engine holds {held}");
    let user = crate::support::TempUser::new("xq");
    let out = user.sh(&fill(&ws));
    assert!(text(&out).contains("Disk quota exceeded"), "{}", text(&out));
    assert!(recounted(&m, "build-engine").0 <= 1 << 20);
    let refused = crate::common::audit_until(&m, |all| {
        all.iter().any(|r| {
            r["operation"] == "setxattr" && r["agent"] == "fs-engine" && r["result"] == "denied"
        })
    });
    assert!(!refused.is_empty());
    // A removed file still open: what is set on it counts for nothing, and goes with it.
    let o = as_agent(
        &m,
        "build-engine",
        r#"rm -f open/f*
           python3 -c '
import os
fd = os.open("gone", os.O_RDWR | os.O_CREAT, 0o600)
os.unlink("gone")
n = 0
for i in range(200):
    try:
        os.setxattr(fd, "user.u%d" % i, b"x" * 60000)
        n += 1
    except OSError as e:
        print("stopped", e.errno)
        break
os.close(fd)
print("set", n)'"#,
    );
    assert!(o.contains("stopped"), "{o}");
    let (after, _) = recounted(&m, "build-engine");
    assert!(after < 100_000, "{after}");
    let spill = clawfs_core::xattr_spill::Spill::new(&m.backing(".clawfs"));
    assert!(spill.bytes_by_handle().unwrap().is_empty());
}
