//! A store that hosts share, attacked by a host's admin who is not trusted with the vault: an
//! unnamed or unjoined host, a key file planted on the shared volume, and another host's usage
//! file that tries to make root, the kernel's "no uid" or an unconfigured name an agent. The
//! store is on local disk here: what is refused does not depend on the volume.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{clawfs, clawfs_bin, ok, text, tree, Mounted};

/// A store on local disk that hosts `a` and `b` have joined, not mounted.
fn shared_store() -> Mounted {
    let dir = tempfile::Builder::new()
        .prefix("clawfs-test.")
        .tempdir_in("/tmp")
        .unwrap();
    let m = Mounted {
        mnt: dir.path().join("mnt"),
        store: dir.path().join("store"),
        dir,
    };
    fs::create_dir(&m.mnt).unwrap();
    ok(clawfs([
        OsStr::new("init"),
        OsStr::new("--store"),
        m.store.as_os_str(),
    ]));
    for h in ["a", "b"] {
        ok(clawfs([
            OsStr::new("host"),
            OsStr::new("join"),
            OsStr::new(h),
            OsStr::new("--store"),
            m.store.as_os_str(),
        ]));
    }
    m
}

/// A host's own disk, outside the store: its key files and caches.
fn own_disk(m: &Mounted, host: &str) -> PathBuf {
    m.dir.path().join(format!("disk-{host}"))
}

/// `clawfs vault ARGS --store STORE` as `host` (none: unnamed), its key files in `key_dir`.
fn vault_as(m: &Mounted, host: Option<&str>, key_dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(clawfs_bin());
    c.env_remove("CLAWFS_HOST")
        .env_remove("CLAWFS_VAULT_PASSPHRASE")
        .env("CLAWFS_VAULT_KEY_DIR", key_dir)
        .arg("vault")
        .args(args)
        .arg("--store")
        .arg(&m.store);
    if let Some(h) = host {
        c.env("CLAWFS_HOST", h);
    }
    c.output().unwrap()
}

/// Locks the test's vault (its key is in the kernel keyring) however the test ends.
struct Locked<'a>(&'a Mounted);
impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = vault_as(self.0, Some("a"), &own_disk(self.0, "a"), &["lock"]);
    }
}

fn refused(out: &Output, says: &str) {
    assert!(!out.status.success(), "{}", text(out));
    assert!(text(out).contains(says), "{says:?} not in: {}", text(out));
}

#[test]
fn the_vault_of_a_shared_store_is_kept_from_unnamed_and_unjoined_hosts_and_from_the_volume() {
    let m = shared_store();
    let _locked = Locked(&m);
    // The vault's (empty) lock file, taken by a command before it refuses, aside.
    let tree = |p: &Path| {
        let mut t = tree(p);
        t.retain(|(rel, _)| !rel.ends_with(".lock"));
        t
    };
    let before = tree(&m.store);
    let own_a = own_disk(&m, "a");

    // No host named: nothing is created, whatever the sealer.
    for sealer in ["host-key", "passphrase"] {
        let out = vault_as(&m, None, &own_a, &["init", "--sealer", sealer]);
        refused(&out, "say which host this is");
    }
    // A host that has not joined.
    refused(
        &vault_as(&m, Some("c"), &own_a, &["init", "--sealer", "host-key"]),
        "has not joined",
    );
    // The master key sealed by a key file on the volume every host reads: in the store, or
    // reached through a symlink into it, down folders that do not exist yet.
    let planted = m.store.join("workspaces/default/keys");
    refused(
        &vault_as(&m, Some("a"), &planted, &["init", "--sealer", "host-key"]),
        "own disk",
    );
    fs::create_dir_all(&own_a).unwrap();
    std::os::unix::fs::symlink(m.store.join("workspaces"), own_a.join("link")).unwrap();
    let through_link = own_a.join("link/new/keys");
    refused(
        &vault_as(
            &m,
            Some("a"),
            &through_link,
            &["init", "--sealer", "host-key"],
        ),
        "own disk",
    );
    assert_eq!(tree(&m.store), before, "a refusal changed the store");
    assert!(!m.store.join("workspaces/new").exists());

    // Host a makes the vault with its key file on its own disk.
    ok(vault_as(
        &m,
        Some("a"),
        &own_a,
        &["init", "--sealer", "host-key"],
    ));
    let vault = m.store.join("vault");
    let vault_before = tree(&vault);
    // Host c, not joined, can neither make a host key nor be added by a.
    refused(
        &vault_as(
            &m,
            Some("c"),
            &own_disk(&m, "c"),
            &["host-key", "--sealer", "host-key"],
        ),
        "has not joined",
    );
    refused(
        &vault_as(&m, Some("a"), &own_a, &["add-host", "c"]),
        "has not joined",
    );
    // Host b's key file may not be on the volume either.
    refused(
        &vault_as(
            &m,
            Some("b"),
            &planted,
            &["host-key", "--sealer", "host-key"],
        ),
        "own disk",
    );
    assert_eq!(tree(&vault), vault_before, "a refusal changed the vault");
    assert!(!planted.exists());
}

/// Waits for `cond`, up to `limit`.
fn within(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn another_hosts_usage_file_cannot_make_root_or_nobody_an_agent() {
    let m = shared_store();
    // fs-engine may hold 3 MB in the whole store: a forged terabyte would leave it no room.
    let policy = fs::read_to_string(m.store.join("system/policy.toml")).unwrap();
    let tight = policy.replace(
        "[agents.fs-engine]\nuid = 61006\ngid = 61006\n",
        "[agents.fs-engine]\nuid = 61006\ngid = 61006\nquota = { bytes = 3000000 }\n",
    );
    assert_ne!(tight, policy, "the default policy changed shape");
    let file = m.dir.path().join("tight.toml");
    fs::write(&file, &tight).unwrap();
    let update = Command::new(clawfs_bin())
        .env("CLAWFS_HOST", "a")
        .args(["system", "update"])
        .arg(format!("policy.toml={}", file.display()))
        .arg("--store")
        .arg(&m.store)
        .output()
        .unwrap();
    ok(update);
    let cache = own_disk(&m, "a").to_string_lossy().into_owned();
    m.mount_env(
        &["--host", "a", "--no-search"],
        &[("CLAWFS_CACHE_DIR", cache.as_str())],
    );
    let ws = m.path("workspaces/default");
    let write_as_agent = |name: &str| {
        m.run_command("fs-engine")
            .env("CLAWFS_HOST", "a")
            .args(["--", "sh", "-c"])
            .arg(format!("echo mine > {}/{name}", ws.display()))
            .current_dir("/")
            .output()
            .unwrap()
    };
    let out = write_as_agent("first");
    assert!(out.status.success(), "{}", text(&out));
    // Host a's saved usage: the shape host b's daemon would write.
    let own = m.store.join(".clawfs/hosts/a/quota-usage.json");
    within(Duration::from_secs(10), "host a saves its usage", || {
        fs::read(&own)
            .ok()
            .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
            .is_some_and(|v| v["epoch"].as_u64().is_some_and(|e| e > 0))
    });
    let mut forged: Value = serde_json::from_slice(&fs::read(&own).unwrap()).unwrap();
    let lots = json!({"bytes": 1i64 << 40, "files": 1});
    forged["agents"] = json!({
        "0": "fs-engine",
        "4294967295": "fs-engine",
        "4242": "nobody-configured",
    });
    forged["changes"] = json!({"0": lots, "4294967295": lots, "4242": lots});
    fs::write(
        m.store.join(".clawfs/hosts/b/quota-usage.json"),
        serde_json::to_vec(&forged).unwrap(),
    )
    .unwrap();
    // Past the daemon's next look at the hosts' files (every 2 s).
    std::thread::sleep(Duration::from_millis(2500));

    // The agent still writes, root still writes, and no refusal names the forged pairs.
    let out = write_as_agent("second");
    assert!(out.status.success(), "{}", text(&out));
    fs::write(ws.join("by-root"), "root's\n").unwrap();
    assert_eq!(fs::read_to_string(ws.join("second")).unwrap(), "mine\n");
    let log = fs::read_to_string(m.store.join(".clawfs/hosts/a/daemon.log")).unwrap();
    assert!(!log.contains("ONE-UID"), "{log}");
    // The agent's total is its own files, not the forged terabyte.
    let out = Command::new(clawfs_bin())
        .env("CLAWFS_HOST", "a")
        .args(["quota", "--json", "--store"])
        .arg(&m.store)
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&ok(out)).unwrap();
    let agents = report["agents"].as_array().unwrap();
    assert!(
        agents.iter().all(|a| a["agent"] != "nobody-configured"),
        "{report}"
    );
    let engine = agents.iter().find(|a| a["agent"] == "fs-engine").unwrap();
    assert!(engine["bytes"].as_u64().unwrap() < 1 << 20, "{report}");
}

#[test]
fn another_hosts_root_cannot_point_this_hosts_log_lock_or_trail_at_its_own_disk() {
    let m = shared_store();
    let cache = own_disk(&m, "a").to_string_lossy().into_owned();
    let env = [("CLAWFS_CACHE_DIR", cache.as_str())];
    let args = ["--host", "a", "--no-search"];
    let local = m.dir.path().join("local-disk");
    fs::create_dir_all(local.join("trail")).unwrap();
    fs::write(local.join("bashrc"), "# this machine's own file\n").unwrap();
    let host_dir = m.store.join(".clawfs/hosts/a");
    let mount = || {
        let mut c = Command::new(clawfs_bin());
        c.arg("mount")
            .arg(&m.mnt)
            .arg("--store")
            .arg(&m.store)
            .args(args)
            .envs(env);
        c.output().unwrap()
    };
    // Each planted symlink: the mount refuses, and nothing is written where it points.
    for (name, target) in [
        ("daemon.log", local.join("bashrc")),
        ("lock", local.join("nologin")),
        ("audit", local.join("trail")),
    ] {
        let planted = host_dir.join(name);
        let _ = fs::remove_dir_all(&planted);
        let _ = fs::remove_file(&planted);
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let out = mount();
        assert!(!out.status.success(), "{name}: {}", text(&out));
        assert!(!m.is_mounted(), "{name}");
        fs::remove_file(&planted).unwrap();
    }
    assert_eq!(
        fs::read_to_string(local.join("bashrc")).unwrap(),
        "# this machine's own file\n"
    );
    assert!(!local.join("nologin").exists());
    assert_eq!(fs::read_dir(local.join("trail")).unwrap().count(), 0);
    // With real files and folders, the host serves.
    m.mount_env(&args, &env);
    assert!(m.is_mounted());
}

/// `clawfs ARGS --store STORE` as host a, given at most 20 s (a hang is a failure).
fn cli_a(m: &Mounted, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .arg("20")
        .arg(clawfs_bin())
        .args(args)
        .arg("--store")
        .arg(&m.store)
        .env("CLAWFS_HOST", "a")
        .output()
        .unwrap();
    assert_ne!(
        out.status.code(),
        Some(124),
        "{args:?} hung: {}",
        text(&out)
    );
    out
}

/// The lease host a's daemon last renewed.
fn renewed_at(m: &Mounted) -> u64 {
    let json = fs::read(m.store.join(".clawfs/hosts/a/daemon.json")).unwrap();
    serde_json::from_slice::<Value>(&json).unwrap()["renewed_at"]
        .as_u64()
        .unwrap()
}

#[test]
fn another_hosts_root_cannot_stall_exhaust_or_redirect_this_hosts_daemon_and_commands() {
    let m = shared_store();
    let cache = own_disk(&m, "a").to_string_lossy().into_owned();
    m.mount_env(
        &["--host", "a", "--no-search"],
        &[("CLAWFS_CACHE_DIR", cache.as_str())],
    );
    let private = m.store.join(".clawfs");
    let local = m.dir.path().join("local-disk");
    fs::create_dir_all(local.join("a")).unwrap();
    let record: Value =
        serde_json::from_slice(&fs::read(private.join("hosts/a/daemon.json")).unwrap()).unwrap();
    let daemon = record["pid"].as_u64().unwrap();
    let rss_kb = || {
        let status = fs::read_to_string(format!("/proc/{daemon}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
            .unwrap()
    };
    let rss_before = rss_kb();

    // A FIFO as the emergency stop and as a host's record, an endless file as another's.
    let fifo = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo of a path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    fifo(&private.join("estop"));
    fs::create_dir_all(private.join("hosts/zz")).unwrap();
    fifo(&private.join("hosts/zz/host.json"));
    fs::create_dir_all(private.join("hosts/yy")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", private.join("hosts/yy/host.json")).unwrap();
    let before = renewed_at(&m);
    std::thread::sleep(Duration::from_secs(5));
    // The daemon still renews its lease and its memory did not grow by the endless file.
    assert!(renewed_at(&m) > before, "the lease stopped");
    assert!(rss_kb() < rss_before + 200_000, "{} kB", rss_kb());
    // Commands finish: the host list ignores both; an unreadable stop counts as one in force.
    let listed = text(&cli_a(&m, &["host", "list"]));
    assert!(!listed.contains("zz") && !listed.contains("yy"), "{listed}");
    let status = cli_a(&m, &["estop", "--status"]);
    assert!(
        text(&status).contains("unreadable") || status.status.success(),
        "{}",
        text(&status)
    );
    fs::remove_file(private.join("estop")).unwrap();

    // The hosts' folder swapped for a symlink to this machine's disk: the daemon keeps
    // writing its lease and policy status into its own folder of the store.
    fs::rename(private.join("hosts"), private.join("hosts.real")).unwrap();
    std::os::unix::fs::symlink(&local, private.join("hosts")).unwrap();
    let policy = m.store.join("system/policy.toml");
    let p = fs::read(&policy).unwrap();
    fs::write(&policy, p).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        fs::read_dir(local.join("a")).unwrap().count(),
        0,
        "written on the local disk"
    );
    // Commands refuse a host folder that is not a real folder, without reading through it.
    let out = cli_a(&m, &["quota"]);
    assert!(!out.status.success(), "{}", text(&out));
    fs::remove_file(private.join("hosts")).unwrap();
    fs::rename(private.join("hosts.real"), private.join("hosts")).unwrap();

    // A forged record of the serving daemon naming another process: nothing is signalled.
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let record = private.join("hosts/a/daemon.json");
    let real = fs::read(&record).unwrap();
    let mut forged: Value = serde_json::from_slice(&real).unwrap();
    forged["pid"] = json!(victim.id());
    fs::write(&record, serde_json::to_vec(&forged).unwrap()).unwrap();
    let _ = cli_a(&m, &["index", "rebuild"]);
    let _ = cli_a(&m, &["policy", "reload"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the forged pid was signalled"
    );
    let _ = victim.kill();
    let _ = victim.wait();

    // The store's format file pointing at a file of this machine: refused, never shown.
    fs::write(local.join("secret"), "hunter2 of this machine\n").unwrap();
    let format = private.join("format");
    let kept = fs::read(&format).unwrap();
    fs::remove_file(&format).unwrap();
    std::os::unix::fs::symlink(local.join("secret"), &format).unwrap();
    let out = cli_a(&m, &["host", "list"]);
    assert!(!out.status.success());
    assert!(!text(&out).contains("hunter2"), "{}", text(&out));
    fs::remove_file(&format).unwrap();
    fs::write(&format, kept).unwrap();
}

#[test]
fn another_hosts_audit_chain_cannot_stall_exhaust_or_redirect_audit_verify() {
    let m = shared_store();
    let chain = m.store.join(".clawfs/hosts/b/audit");
    fs::create_dir_all(&chain).unwrap();
    let segment = chain.join("audit-2026-11-29.jsonl");
    let local = m.dir.path().join("local-disk");
    fs::create_dir_all(&local).unwrap();
    fs::write(
        local.join("audit-2026-11-29.jsonl"),
        "this machine's own file\n",
    )
    .unwrap();
    let fifo = std::ffi::CString::new(segment.as_os_str().as_encoded_bytes()).unwrap();
    // A FIFO, an endless file, a symlink to this machine's folder: each refused in time.
    // SAFETY: mkfifo of a path this test owns.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert!(!cli_a(&m, &["audit", "verify"]).status.success());
    fs::remove_file(&segment).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &segment).unwrap();
    assert!(!cli_a(&m, &["audit", "verify"]).status.success());
    fs::remove_file(&segment).unwrap();
    fs::remove_dir(&chain).unwrap();
    std::os::unix::fs::symlink(&local, &chain).unwrap();
    let out = cli_a(&m, &["audit", "verify"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        !text(&out).contains("this machine's own file"),
        "{}",
        text(&out)
    );
}
