//! What the kernel decides without asking the daemon: an inotify watch needs only the kernel's
//! own permission check, from the attributes (and ACLs) ClawFS reports. A hostile agent in the
//! default sandbox watches another agent's folder, a workspace it has no grant to, the vault's
//! secrets and the host's shared temporary folder, to learn names and activity the policy hides.

use std::fs;
use std::time::Duration;

use crate::common::{vault, Mounted};
use crate::support::{agent_policy, audit_until, text};

/// `inotifywait` on each of `targets` in turn, as `agent` in the default sandbox: one line per
/// target, `WATCHED <target>` when the watch was set (it then times out), else `REFUSED
/// <target>: <why>`.
fn watch_each(m: &Mounted, agent: &str, targets: &[String]) -> String {
    let script: String = targets
        .iter()
        .map(|t| {
            format!(
                "if inotifywait -q -t 1 -e create,open,access '{t}' >/dev/null 2>/tmp/w.err || [ $? -eq 2 ]; \
                 then echo 'WATCHED {t}'; else echo \"REFUSED {t}: $(cat /tmp/w.err)\"; fi\n"
            )
        })
        .collect();
    // stderr into the agent's own temporary folder: cd there first.
    let script = script.replace("/tmp/w.err", "w.err");
    let out = m.run_agent_as(agent, &[], &format!("cd \"$TMPDIR\"\n{script}"));
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

#[test]
fn watches_reach_only_what_the_policy_grants() {
    let m = Mounted::with_args(&["--trace-syscalls"]);
    fs::create_dir(m.path("workspaces/secretws")).unwrap();
    fs::write(m.path("workspaces/secretws/ROOT-NOTE.md"), "root\n").unwrap();
    fs::write(
        m.path("agents/kernel-engine/cache/PRIVATE-NAME-ke.txt"),
        "k\n",
    )
    .unwrap();
    for args in [
        &["init", "--sealer", "passphrase"][..],
        &["put", "ke-token"],
        &["put", "fs-token"],
    ] {
        let out = vault(&m, args, Some("s3cret\n"));
        assert!(out.status.success(), "vault {args:?}: {}", text(&out));
    }
    agent_policy(&m, "kernel-engine", "secrets = [\"ke-token\"]");
    agent_policy(&m, "fs-engine", "secrets = [\"fs-token\"]");

    let refused: Vec<String> = [
        "agents/kernel-engine",
        "agents/kernel-engine/cache",
        "agents/kernel-engine/cache/PRIVATE-NAME-ke.txt",
        "workspaces/secretws",
        "workspaces/secretws/ROOT-NOTE.md",
        "vault/secrets",
        "vault/secrets/ke-token",
    ]
    .iter()
    .map(|p| m.path(p).display().to_string())
    .collect();
    let granted: Vec<String> = [
        "agents/fs-engine",
        "workspaces/default",
        "vault/secrets/fs-token",
    ]
    .iter()
    .map(|p| m.path(p).display().to_string())
    .collect();
    let all: Vec<String> = refused.iter().chain(&granted).cloned().collect();
    let said = watch_each(&m, "fs-engine", &all);
    for t in &refused {
        assert!(
            said.contains(&format!("REFUSED {t}: ")),
            "{t} was watched: {said}"
        );
    }
    for t in &granted {
        assert!(said.contains(&format!("WATCHED {t}")), "{t}: {said}");
    }
    // What the policy grants still works: its own secret, by name.
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!("cat {}", m.path("vault/secrets/fs-token").display()),
    );
    assert_eq!(text(&out).trim(), "s3cret", "{}", text(&out));
    // observability reads every agent's folder (read_agents = ["*"]): it may watch them.
    let theirs = vec![m.path("agents/kernel-engine/cache").display().to_string()];
    let said = watch_each(&m, "observability", &theirs);
    assert!(said.contains("WATCHED"), "{said}");

    // Each refused watch is on record as the agent's denial, with the policy's rule.
    let target = "/agents/kernel-engine/cache";
    let all = audit_until(&m, |all| {
        all.iter().any(|r| {
            r["agent"] == "fs-engine"
                && r["operation"] == "inotify_add_watch"
                && r["path"] == target
        })
    });
    let rec = all
        .iter()
        .find(|r| r["operation"] == "inotify_add_watch" && r["path"] == target)
        .expect("the refused watch is on record");
    assert_eq!(rec["result"], "denied", "{rec}");
    assert_eq!(rec["rule"], "AGENT-READ", "{rec}");

    // A grant given by a policy reload reaches the kernel's check at once, and goes with the
    // next reload.
    agent_policy(
        &m,
        "fs-engine",
        "workspaces = { default = \"read-write\", secretws = \"read\" }",
    );
    let ws = vec![m.path("workspaces/secretws").display().to_string()];
    assert!(watch_each(&m, "fs-engine", &ws).contains("WATCHED"));
}

/// The host's /tmp, as a sandboxed agent sees it: what others make there is neither listed nor
/// reported to a watch, while the agent's own temporary folder and the mount stay where they
/// were.
#[test]
fn the_hosts_temporary_folders_stay_out_of_sight() {
    let m = Mounted::new();
    let marker = format!("HOST-NOTE-{}", std::process::id());
    let host_file = std::path::Path::new("/tmp").join(&marker);
    let _ = fs::remove_file(&host_file);
    let writer = {
        let host_file = host_file.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            fs::write(&host_file, "host\n").unwrap();
        })
    };
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "inotifywait -q -t 4 -e create /tmp /var/tmp /dev/shm; echo watch=$?; \
             ls -a /tmp /var/tmp /dev/shm; \
             echo OWN-{pid} > \"$TMPDIR/own.txt\" && cat \"$TMPDIR/own.txt\"; \
             ls {mnt}/agents/fs-engine >/dev/null && echo MOUNT-OK-{pid}",
            pid = std::process::id(),
            mnt = m.mnt.display()
        ),
    );
    writer.join().unwrap();
    let said = text(&out);
    let _ = fs::remove_file(&host_file);
    assert!(said.contains("watch=2"), "the watch saw something: {said}");
    assert!(!said.contains(&marker), "{said}");
    let (own, mount_ok) = (
        format!("OWN-{}", std::process::id()),
        format!("MOUNT-OK-{}", std::process::id()),
    );
    assert!(said.contains(&own) && said.contains(&mount_ok), "{said}");
    // Nothing of the host's /tmp is listed but the way to the mount.
    for name in fs::read_dir("/tmp").unwrap().flatten() {
        let name = name.file_name().to_string_lossy().into_owned();
        let own_tmp = name.starts_with("clawfs-fs-engine-");
        if !own_tmp && !m.mnt.starts_with(std::path::Path::new("/tmp").join(&name)) {
            assert!(
                !said.contains(&format!("\n{name}\n")),
                "{name} is listed: {said}"
            );
        }
    }
}

/// The same checks for what the first round found around them: a run started from a host
/// folder (its inherited working directory), an agent run under another uid (`--user`), an
/// agent that `chmod`s its folder against `read_agents`, and ordinary users watching the
/// folders that name everyone's secrets and tool calls.
#[test]
fn starting_folders_other_uids_modes_and_users_leak_nothing() {
    let m = Mounted::new();
    fs::write(m.dir.path().join("HOST-SECRET.txt"), "host\n").unwrap();
    let kernel_cache = m.path("agents/kernel-engine/cache").display().to_string();
    // Started from a host folder under /tmp: the agent is in that path as its namespace shows
    // it (the way to the mount only), never in the host's folder.
    let out = m
        .run_command("fs-engine")
        .args(["--", "sh", "-c", "pwd; ls -a .; echo done"])
        .current_dir(m.dir.path())
        .output()
        .unwrap();
    let said = text(&out);
    assert!(said.contains("done"), "{said}");
    assert!(!said.contains("HOST-SECRET"), "{said}");
    assert!(!said.contains("store"), "{said}");

    // Another uid acting as fs-engine is held to fs-engine's grants by the kernel too.
    let out = m.run_agent_as(
        "fs-engine",
        &["--user", "1001"],
        &format!(
            "inotifywait -q -t 1 -e create '{kernel_cache}' 2>&1; echo rc=$?; \
             inotifywait -q -t 1 -e create {own} >/dev/null 2>&1; echo own=$?",
            own = m.path("agents/fs-engine").display()
        ),
    );
    let said = text(&out);
    assert!(
        said.contains("rc=1") && said.contains("Permission denied"),
        "{said}"
    );

    // An agent's chmod narrows what people get, not what the policy grants other agents.
    let own = m.path("agents/fs-engine").display().to_string();
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!("chmod 700 {own} && echo chmodded"),
    );
    assert!(text(&out).contains("chmodded"), "{}", text(&out));
    let out = m.run_agent_as("observability", &[], &format!("ls {own} && echo listed"));
    assert!(text(&out).contains("listed"), "{}", text(&out));

    // An ordinary user may not watch the secrets or everyone's tool calls.
    for dir in ["vault/secrets", "tools/requests"] {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["inotifywait", "-q", "-t", "1", "-e", "create"])
            .arg(m.path(dir))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{dir}: {}", text(&out));
    }
}
