//! Commands that work through the mount find it from the store (and the store from a mount):
//! a store served at a temp mount point, never `/clawfs`, used by `clawfs run`, `index status`
//! and `search` without `--mount`; a `--mount` that serves another store, or no store at all,
//! is an error naming both; what the daemon generates names the real mount.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{clawfs, clawfs_bin, cli, text, Mounted};

/// `clawfs run --agent fs-engine [--store STORE] [--mount MOUNT] -- sh -c SCRIPT`, sandboxed.
fn run(store: Option<&Path>, mount: Option<&Path>, script: &str) -> Output {
    let mut c = Command::new(clawfs_bin());
    c.arg("run");
    if let Some(s) = store {
        c.arg("--store").arg(s);
    }
    if let Some(m) = mount {
        c.arg("--mount").arg(m);
    }
    c.args(["--agent", "fs-engine", "--", "sh", "-c", script])
        .current_dir("/")
        .output()
        .expect("run clawfs run")
}

#[test]
fn a_run_finds_the_mount_its_store_is_served_at() {
    let m = Mounted::new();
    let f = m.path("agents/fs-engine/f");
    let out = run(
        Some(&m.store),
        None,
        &format!("echo x > {} && cat {}", f.display(), f.display()),
    );
    assert!(out.status.success(), "{}\n{}", text(&out), m.log());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n");
    assert_eq!(
        std::fs::read_to_string(m.backing("agents/fs-engine/f")).unwrap(),
        "x\n"
    );
    // Given only the mount, the run works on the store that mount serves.
    let out = run(None, Some(&m.mnt), &format!("echo y >> {}", f.display()));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(m.backing("agents/fs-engine/f")).unwrap(),
        "x\ny\n"
    );
}

#[test]
fn a_mount_that_does_not_serve_the_store_is_an_error_naming_both() {
    let a = Mounted::new();
    let b = Mounted::new();
    let plain = a.dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let shown = |p: &Path| p.display().to_string();
    for (mount, also) in [(&b.mnt, Some(&b.store)), (&plain, None)] {
        for cmd in ["run", "mcp"] {
            let mut args: Vec<&OsStr> = vec![
                OsStr::new(cmd),
                OsStr::new("--store"),
                a.store.as_os_str(),
                OsStr::new("--mount"),
                mount.as_os_str(),
                OsStr::new("--agent"),
                OsStr::new("fs-engine"),
            ];
            if cmd == "run" {
                args.extend([OsStr::new("--"), OsStr::new("true")]);
            }
            let out = clawfs(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{cmd} --mount {mount:?}: {err}");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            for named in [shown(mount), shown(&a.store), shown(&a.mnt)] {
                assert!(err.contains(&named), "{cmd}: {named} not in: {err}");
            }
            if let Some(other) = also {
                assert!(err.contains(&shown(other)), "{cmd}: {err}");
            }
            assert!(out.stdout.is_empty(), "{cmd}");
        }
    }
    // A store that is not mounted at all says so, and how to mount it.
    let idle = tempfile::tempdir_in("/tmp").unwrap();
    let store = idle.path().join("store");
    assert!(
        clawfs([OsStr::new("init"), OsStr::new("--store"), store.as_os_str()])
            .status
            .success()
    );
    let out = run(Some(&store), None, "true");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("is not mounted"), "{err}");
    assert!(err.contains(&shown(&store)), "{err}");
}

#[test]
fn index_status_and_search_need_no_mount_option() {
    let m = Mounted::new();
    std::fs::write(
        m.ws().join("deploy.md"),
        "# Deploy\n\nrun the deploy script\n",
    )
    .unwrap();
    let out = cli(&m, &["index", "status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l["workspace"] == "default"),
        "{lines:?}"
    );
    // Searching goes through the mount the store is served at.
    let out = cli(&m, &["search", "default", "deploy", "--mode", "text"]);
    assert!(out.status.success(), "{}\n{}", text(&out), m.log());
    let out = cli(&m, &["search", "default", "deploy", "--mount", "/"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}

#[test]
fn generated_text_names_the_real_mount() {
    let m = Mounted::new();
    let tools = m.path("tools");
    let registry: Value =
        serde_json::from_slice(&std::fs::read(tools.join("registry.json")).unwrap()).unwrap();
    let call = registry["protocol"]["call"].as_str().unwrap();
    assert!(
        call.contains(&format!("{}/call/<tool>", tools.display())),
        "{call}"
    );
    let requests = registry["protocol"]["requests"].as_str().unwrap();
    assert!(
        requests.contains(&format!("{}/responses/<id>.json", tools.display())),
        "{requests}"
    );
    assert!(!registry["protocol"].to_string().contains("/clawfs/"));
    // An unknown tool, asked for by the agent, names the registry under the real mount.
    let out = run(
        Some(&m.store),
        None,
        &format!(
            "printf '{{\"tool\":\"zap\"}}' > {t}/requests/z.json && cat {t}/responses/z.json",
            t = tools.display()
        ),
    );
    assert!(out.status.success(), "{}\n{}", text(&out), m.log());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"], "unknown_tool", "{v}");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("{}/registry.json", tools.display())),
        "{msg}"
    );
}
