//! Agents through a real mount: processes started with `clawfs run` are their agent to the
//! daemon, which enforces the policy on every call, records each decision in the audit trail,
//! and tells the agent why in its denials file. Every refusal is checked for its errno, its
//! records and an unchanged store.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::Output;

use crate::common::{clawfs, cli, ok, Mounted};
use serde_json::Value;

/// `clawfs run --agent AGENT -- sh -c SCRIPT` against the mount.
fn run_agent(m: &Mounted, agent: &str, script: &str) -> Output {
    m.run_agent(agent, script)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The audit records of `agent` (flushed: the daemon syncs its trail within a second).
fn audit(m: &Mounted, args: &[&str]) -> Vec<Value> {
    let mut all = vec![
        OsStr::new("audit"),
        OsStr::new("--store"),
        m.store.as_os_str(),
        OsStr::new("search"),
        OsStr::new("--json"),
    ];
    all.extend(args.iter().map(OsStr::new));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let out = clawfs(&all);
        assert!(out.status.success(), "{}", stderr(&out));
        let records: Vec<Value> = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if !records.is_empty() || std::time::Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn denials(m: &Mounted, agent: &str) -> Vec<Value> {
    fs::read_to_string(m.backing(&format!("agents/{agent}/denials")))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

#[test]
fn two_agents_each_write_only_their_own_directory() {
    let m = Mounted::with_args(&["--trace-syscalls"]);
    let mnt = m.mnt.display().to_string();
    let script = |me: &str, other: &str| {
        format!(
            "echo mine > {mnt}/agents/{me}/notes.txt && \
             (echo theirs > {mnt}/agents/{other}/intruder.txt) 2>&1; \
             (cat {mnt}/agents/{other}/identity.json > /dev/null) 2>&1; \
             cat {mnt}/agents/self"
        )
    };
    // In parallel, each in its own cgroup.
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| run_agent(&m, "fs-engine", &script("fs-engine", "kernel-engine")));
        let b = run_agent(&m, "kernel-engine", &script("kernel-engine", "fs-engine"));
        (a.join().unwrap(), b)
    });
    for (out, me, other) in [
        (&a, "fs-engine", "kernel-engine"),
        (&b, "kernel-engine", "fs-engine"),
    ] {
        let text = stdout(out);
        assert!(
            text.contains("Permission denied"),
            "{me}: {text} {}",
            stderr(out)
        );
        // The agent knows who it is.
        let json_start = text.find('{').unwrap();
        let me_json: Value = serde_json::from_str(&text[json_start..]).unwrap();
        assert_eq!(me_json["identity"], "agent");
        assert_eq!(me_json["agent"], me);
        // Its own write landed, as a real file owned by its uid; nothing landed next door.
        assert_eq!(
            fs::read_to_string(m.backing(&format!("agents/{me}/notes.txt"))).unwrap(),
            "mine\n"
        );
        assert!(!exists(&m.backing(&format!("agents/{other}/intruder.txt"))));
        // The refusal is on record, for the agent and in the audit trail, with its rule.
        let d = denials(&m, me);
        assert!(
            d.iter()
                .any(|r| r["path"] == format!("/agents/{other}/intruder.txt")
                    && r["rule"] == "RULE-001"
                    && r["operation"] == "create"),
            "{d:?}"
        );
        let recs = audit(&m, &["--agent", me, "--denied"]);
        assert!(
            recs.iter()
                .any(|r| r["path"] == format!("/agents/{other}/intruder.txt")
                    && r["errno"] == libc::EACCES),
            "{recs:?}"
        );
    }
    // The daily view of an agent holds its own records only.
    let logs: Vec<_> = fs::read_dir(m.backing("agents/fs-engine/logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = fs::read_to_string(&logs[0]).unwrap();
    assert!(log.lines().count() >= 2);
    assert!(
        log.lines().all(|l| l.contains("\"agent\":\"fs-engine\"")),
        "{log}"
    );
    // And the chain is intact.
    let out = clawfs([
        OsStr::new("audit"),
        OsStr::new("--store"),
        m.store.as_os_str(),
        OsStr::new("verify"),
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn agents_cannot_write_their_logs_or_denials_or_read_only_roots() {
    let m = Mounted::new();
    let mnt = m.mnt.display().to_string();
    let out = run_agent(
        &m,
        "fs-engine",
        &format!(
            "for p in agents/fs-engine/logs/x.log agents/fs-engine/denials tools/registry.json; do \
               (echo x >> {mnt}/$p) 2>&1; done; true"
        ),
    );
    let text = stdout(&out);
    assert_eq!(
        text.matches("Operation not permitted").count()
            + text.matches("Permission denied").count()
            + text.matches("Read-only file system").count(),
        3,
        "{text}"
    );
    assert!(!exists(&m.backing("agents/fs-engine/logs/x.log")));
}

#[test]
fn workspace_grants_and_protected_names() {
    let m = Mounted::with_args(&["--trace-syscalls"]);
    fs::create_dir(m.path("workspaces/secret-project")).unwrap();
    fs::write(m.path("workspaces/secret-project/plan.md"), "hidden").unwrap();
    fs::create_dir(m.path("workspaces/default/.git")).unwrap();
    fs::write(m.path("workspaces/default/.git/config"), "[core]").unwrap();
    // POSIX would let anyone in: what refuses is the policy.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(
        m.path("workspaces/default/.git"),
        fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    fs::set_permissions(
        m.path("workspaces/default/.git/config"),
        fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let mnt = m.mnt.display().to_string();
    let out = run_agent(
        &m,
        "fs-engine",
        &format!(
            "cd {mnt}/workspaces/default && echo ok > shared.md && cat shared.md; \
             (cat {mnt}/workspaces/secret-project/plan.md) 2>&1; \
             (ls {mnt}/workspaces/secret-project) 2>&1; \
             (cat .git/config) 2>&1; (echo x > .git/new) 2>&1; (rm .git/config) 2>&1; \
             for n in .GIT .Git .gIT .Obsidian .SMARTHOLE .clawfs-x; do (mkdir $n) 2>&1; done; true"
        ),
    );
    let text = stdout(&out);
    assert!(text.starts_with("ok\n"), "{text}");
    // No grant on secret-project: read and list refused.
    assert!(text.contains("plan.md: Permission denied"), "{text}");
    // Protected names, in every case variant, refused. `.git` is for git: readable and
    // writable, but its config (and hooks) read-only (policy/README.md).
    assert!(text.contains("[core]"), "{text}");
    assert!(
        text.contains("cannot remove '.git/config': Read-only file system"),
        "{text}"
    );
    assert_eq!(text.matches("Operation not permitted").count(), 3, "{text}");
    assert!(exists(&m.backing("workspaces/default/.git/config")));
    assert!(exists(&m.backing("workspaces/default/.git/new")));
    assert!(!exists(&m.backing("workspaces/default/.Obsidian")));
    let d = denials(&m, "fs-engine");
    assert!(d.iter().any(|r| r["rule"] == "PROTECTED"), "{d:?}");
    assert!(d.iter().any(|r| r["rule"] == "WORKSPACE-GRANT"), "{d:?}");
}

#[test]
fn renames_links_and_symlinks_cannot_escape() {
    let m = Mounted::with_args(&["--trace-syscalls"]);
    fs::create_dir(m.path("workspaces/secret-project")).unwrap();
    fs::write(m.path("workspaces/secret-project/plan.md"), "hidden").unwrap();
    fs::write(m.path("agents/kernel-engine/private.txt"), "k").unwrap();
    let mnt = m.mnt.display().to_string();
    let out = run_agent(
        &m,
        "fs-engine",
        &format!(
            "cd {mnt}/agents/fs-engine; \
             (ln {mnt}/workspaces/secret-project/plan.md stolen) 2>&1; \
             (mv {mnt}/agents/kernel-engine/private.txt mine.txt) 2>&1; \
             echo x > mine2.txt; (mv mine2.txt {mnt}/agents/kernel-engine/planted) 2>&1; \
             (ln mine2.txt {mnt}/agents/kernel-engine/hardlinked) 2>&1; \
             ln -s {mnt}/workspaces/secret-project/plan.md link; (cat link) 2>&1; \
             ln -s ../kernel-engine/private.txt link2; (cat link2) 2>&1; true"
        ),
    );
    let text = stdout(&out);
    assert!(!text.contains("hidden") && !text.contains("k\n"), "{text}");
    assert!(!exists(&m.backing("agents/fs-engine/stolen")));
    assert!(exists(&m.backing("agents/kernel-engine/private.txt")));
    assert!(!exists(&m.backing("agents/fs-engine/mine.txt")));
    assert!(!exists(&m.backing("agents/kernel-engine/planted")));
    assert!(!exists(&m.backing("agents/kernel-engine/hardlinked")));
    assert!(exists(&m.backing("agents/fs-engine/mine2.txt")));
    let ops: Vec<String> = denials(&m, "fs-engine")
        .iter()
        .map(|r| r["operation"].as_str().unwrap().to_string())
        .collect();
    // The daemon's operation, or the system call when the kernel refused it first.
    for op in ["link", "rename", "open"] {
        assert!(
            ops.iter().any(|o| o.starts_with(op)),
            "{op} not refused: {:?}",
            denials(&m, "fs-engine")
        );
    }
}

#[test]
fn quotas_and_policy_reload() {
    let m = Mounted::new();
    let policy_path = m.backing("system/policy.toml");
    let original = fs::read_to_string(&policy_path).unwrap();
    let tight = original.replace(
        "[agents.fs-engine]\nuid = 61006\ngid = 61006\n",
        // Its directory, cache/, identity.json and state.json are its own: 4 + 3 new files.
        "[agents.fs-engine]\nuid = 61006\ngid = 61006\nquota = { files = 7 }\nworkspaces = { default = \"read\" }\n",
    );
    assert_ne!(tight, original, "the default policy changed shape");
    let new_policy = m.dir.path().join("tight.toml");
    fs::write(&new_policy, &tight).unwrap();
    let reload = |file: &Path| {
        clawfs([
            OsStr::new("policy"),
            OsStr::new("reload"),
            file.as_os_str(),
            OsStr::new("--store"),
            m.store.as_os_str(),
        ])
    };
    let out = reload(&new_policy);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(m.path("system/policy.toml")).unwrap(),
        tight,
        "the policy in force is visible read-only"
    );
    let mnt = m.mnt.display().to_string();
    let out = run_agent(
        &m,
        "fs-engine",
        &format!(
            "cd {mnt}/agents/fs-engine; for i in 1 2 3 4 5; do (touch f$i) 2>&1; done; \
             (echo x > {mnt}/workspaces/default/w.txt) 2>&1; true"
        ),
    );
    let text = stdout(&out);
    assert!(text.contains("Disk quota exceeded"), "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(exists(&m.backing("agents/fs-engine/f3")));
    assert!(!exists(&m.backing("agents/fs-engine/f4")));
    assert!(!exists(&m.backing("workspaces/default/w.txt")));

    // An invalid policy is refused with every error, and the old one stays in force.
    let bad = m.dir.path().join("bad.toml");
    fs::write(
        &bad,
        "version = 1\nusers = \"sometimes\"\n[agents.Bad_Name]\nuid = 0\n",
    )
    .unwrap();
    let out = reload(&bad);
    assert!(!out.status.success());
    assert!(
        stderr(&out).matches("bad.toml:").count() >= 2,
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read_to_string(&policy_path).unwrap(), tight);
    // And the agent is still read-only on the workspace.
    let out = run_agent(
        &m,
        "fs-engine",
        &format!("(echo x > {mnt}/workspaces/default/w.txt) 2>&1; true"),
    );
    assert!(
        stdout(&out).contains("Read-only file system"),
        "{}",
        stdout(&out)
    );
    // Usage survives a restart of the daemon.
    assert!(m.umount().status.success());
    m.mount(&[]);
    let out = run_agent(
        &m,
        "fs-engine",
        &format!("(touch {mnt}/agents/fs-engine/f9) 2>&1; true"),
    );
    assert!(
        stdout(&out).contains("Disk quota exceeded"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn an_agent_not_in_the_policy_cannot_run() {
    let m = Mounted::new();
    fs::create_dir(m.backing("agents/rogue")).unwrap();
    let out = run_agent(&m, "rogue", "true");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not in the policy"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn identity_files_are_validated_on_close_and_verifiable() {
    let m = Mounted::new();
    let id_path = m.backing("agents/fs-engine/identity.json");
    let before = fs::read(&id_path).unwrap();
    let mut doc: Value = serde_json::from_slice(&before).unwrap();
    doc["state"]["current_task"] = Value::from("A-02");
    doc["history"]["total_executions"] = Value::from(7);
    let edited = m.dir.path().join("edited.json");
    fs::write(&edited, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    fs::set_permissions(
        m.dir.path().join("edited.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let mnt = m.mnt.display().to_string();
    let target = format!("{mnt}/agents/fs-engine/identity.json");
    // A valid edit is accepted, stamped and checksummed; the old version is kept.
    let out = run_agent(
        &m,
        "fs-engine",
        &format!("cat {} > {target}", edited.display()),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let saved: Value = serde_json::from_slice(&fs::read(&id_path).unwrap()).unwrap();
    assert_eq!(saved["state"]["current_task"], "A-02");
    assert!(clawfs_core::identity::verify(&saved));
    let backups: Vec<_> = fs::read_dir(m.backing("agents/fs-engine/backups"))
        .unwrap()
        .collect();
    assert_eq!(backups.len(), 1);
    // Malformed JSON and a schema violation are refused at close; the file stays as it was.
    let good = fs::read(&id_path).unwrap();
    for bad in [
        r#"{"agent_id": "fs-engine", "#,
        r#"{"agent_id": "kernel-engine", "version": 1}"#,
    ] {
        fs::write(&edited, bad).unwrap();
        // cat reports an error of its final close(), as a careful writer does.
        let out = run_agent(
            &m,
            "fs-engine",
            &format!("cat {} > {target}", edited.display()),
        );
        assert!(!out.status.success(), "{bad} was accepted");
        assert!(
            stderr(&out).contains("Invalid argument"),
            "{}",
            stderr(&out)
        );
        assert_eq!(fs::read(&id_path).unwrap(), good, "{bad} changed the file");
    }
    let d = denials(&m, "fs-engine");
    assert!(d.iter().any(|r| r["rule"] == "IDENTITY-SCHEMA"), "{d:?}");
    // `clawfs identity verify` finds an edit made behind the daemon's back.
    let verify = || {
        clawfs([
            OsStr::new("identity"),
            OsStr::new("verify"),
            OsStr::new("--store"),
            m.store.as_os_str(),
        ])
    };
    assert!(verify().status.success(), "{}", stdout(&verify()));
    let mut tampered: Value = serde_json::from_slice(&good).unwrap();
    tampered["history"]["total_executions"] = Value::from(9999);
    fs::write(&id_path, serde_json::to_vec_pretty(&tampered).unwrap()).unwrap();
    let out = verify();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("fs-engine: BAD: checksum mismatch"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("kernel-engine: ok"));
}

#[test]
fn a_new_agent_gets_its_identity_file_on_first_run() {
    let m = Mounted::new();
    let policy = m.backing("system/policy.toml");
    let mut text = fs::read_to_string(&policy).unwrap();
    text.push_str("\n[agents.newbie]\nuid = 61020\ngid = 61020\n");
    let file = m.dir.path().join("policy.toml");
    fs::write(&file, text).unwrap();
    ok(cli(
        &m,
        &[
            "system",
            "update",
            &format!("policy.toml={}", file.display()),
        ],
    ));
    fs::create_dir(m.backing("agents/newbie")).unwrap();
    let out = run_agent(&m, "newbie", "true");
    assert!(out.status.success(), "{}", stderr(&out));
    let id: Value =
        serde_json::from_slice(&fs::read(m.backing("agents/newbie/identity.json")).unwrap())
            .unwrap();
    assert_eq!(id["agent_id"], "newbie");
    assert!(clawfs_core::identity::verify(&id));
}

#[test]
fn audit_verify_names_an_edited_a_deleted_and_a_reordered_record() {
    let m = Mounted::new();
    for i in 0..6 {
        fs::write(m.ws().join(format!("f{i}")), "x").unwrap();
    }
    // ClawFS's own rules are decisions on record too.
    assert!(fs::write(m.path("system/x"), "x").is_err());
    // Unmounting flushes the trail.
    assert!(m.umount().status.success());
    let dir = m.store.join(".clawfs/audit");
    let file = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let text = fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("\"rule\":\"NAMESPACE\"") && text.contains("/system/x"),
        "{text}"
    );
    // Writes are summarised per handle: the close says how many bytes it added.
    assert!(
        text.lines()
            .any(|l| l.contains("\"operation\":\"close\"") && l.contains("\"bytes\":1")),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 7, "{text}");
    let verify = |lines: Vec<String>| {
        let copy = tempfile::tempdir().unwrap();
        let audit = copy.path().join(".clawfs/audit");
        fs::create_dir_all(&audit).unwrap();
        fs::write(
            audit.join(file.file_name().unwrap()),
            lines.join("\n") + "\n",
        )
        .unwrap();
        let out = clawfs([
            OsStr::new("audit"),
            OsStr::new("--store"),
            copy.path().as_os_str(),
            OsStr::new("verify"),
        ]);
        (out.status.code(), stdout(&out) + &stderr(&out))
    };
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (code, _) = verify(owned(&lines));
    assert_eq!(code, Some(0));
    let mut edited = owned(&lines);
    edited[3] = edited[3].replace("/workspaces/default", "/workspaces/elsewhere");
    let (code, msg) = verify(edited);
    assert_eq!(code, Some(1));
    assert!(msg.contains("edited"), "{msg}");
    let mut deleted = owned(&lines);
    deleted.remove(4);
    let (code, msg) = verify(deleted);
    assert_eq!(code, Some(1));
    assert!(msg.contains("deleted"), "{msg}");
    let mut reordered = owned(&lines);
    reordered.swap(3, 5);
    let (code, msg) = verify(reordered);
    assert_eq!(code, Some(1));
    assert!(msg.contains("reordered") || msg.contains("edited"), "{msg}");
}

#[test]
fn agents_see_only_their_own_tool_responses_and_calls_run_under_their_policy() {
    let m = Mounted::new();
    fs::create_dir(m.path("workspaces/secret-project")).unwrap();
    fs::write(m.path("workspaces/secret-project/plan.md"), "hidden").unwrap();
    let mnt = m.mnt.display().to_string();
    let out = run_agent(
        &m,
        "fs-engine",
        &format!(
            "echo '{{\"tool\":\"list_allowed\"}}' > {mnt}/tools/requests/q.json && \
             cat {mnt}/tools/responses/q.json; echo; \
             exec 3<>{mnt}/tools/call/read_file; \
             printf '{{\"workspace\":\"secret-project\",\"path\":\"plan.md\"}}' >&3; cat <&3"
        ),
    );
    let text = stdout(&out);
    let mut lines = text.lines().filter(|l| l.starts_with('{'));
    let allowed: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(allowed["ok"], true, "{text}");
    let denied: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(denied["ok"], false, "{text}");
    assert_eq!(denied["error"], "denied", "{text}");
    assert!(!text.contains("hidden"));
    // Another agent does not see fs-engine's response.
    let out = run_agent(
        &m,
        "kernel-engine",
        &format!("cat {mnt}/tools/responses/q.json 2>&1; true"),
    );
    assert!(stdout(&out).contains("No such file"), "{}", stdout(&out));
}
