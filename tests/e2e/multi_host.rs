//! Hosts sharing one store on a real JuiceFS volume (redis-server metadata, a file bucket),
//! each serving it with its own ClawFS daemon over its own JuiceFS mount: who may serve, what
//! each host writes where, and what crosses hosts without a signal (see docs/multi-host.md).

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::juicefs::SharedStore;
use crate::common::{ok, text};

/// Waits until `cond` holds, for at most `limit`; `what` names it if it never does.
fn within(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// The records of the chain in `dir` (every file, in order).
fn records(dir: &Path) -> Vec<Value> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "jsonl"));
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<Value>>()
        })
        .collect()
}

#[test]
fn only_hosts_that_joined_serve_and_each_host_once() {
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    // Unnamed, the daemon of a shared store is refused; so is a host that has not joined.
    let out = std::process::Command::new(crate::common::clawfs_bin())
        .env_remove("CLAWFS_HOST")
        .arg("mount")
        .arg(&a.mnt)
        .arg("--store")
        .arg(&a.store)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("is shared by hosts a, b: say which"),
        "{}",
        text(&out)
    );
    let out = a.try_mount("c");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("host c has not joined"),
        "{}",
        text(&out)
    );
    assert!(!a.store.join(".clawfs/hosts/c").exists());
    assert!(!a.is_mounted());

    a.mount();
    b.mount();
    // Host a again, from another mount point: refused while its daemon lives.
    let other = s.hosts[0].volume.parent().unwrap().join("mnt-a2");
    fs::create_dir(&other).unwrap();
    let out = a.cli(&["mount", other.to_str().unwrap(), "--host", "a"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("host a of store") && text(&out).contains("already served"),
        "{}",
        text(&out)
    );
    let listed: Value = serde_json::from_str(&ok(b.cli(&["host", "list", "--json"]))).unwrap();
    let by_host = |h: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == h)
            .cloned()
    };
    for h in ["a", "b"] {
        let r = by_host(h).unwrap();
        assert_eq!(r["lease"]["holds"], true, "{r}");
        assert_eq!(r["this_machine"], h == "b", "{r}");
    }
    assert!(by_host("c").is_none());
}

#[test]
fn a_lease_another_machine_renewed_holds_until_it_expires() {
    let s = SharedStore::new(&["a", "b"]);
    let a = s.host("a");
    // What a daemon of host a on another machine leaves while it serves: its lease, renewed
    // now. Its lock is out of this machine's reach (that daemon is not here).
    let forged = |renewed_at: u64| {
        let lease = serde_json::json!({
            "pid": 1, "mountpoint": "/elsewhere", "version": "0", "started_at": "",
            "passthrough": true, "host": "a", "machine": "elsewhere",
            "boot_id": "another-boot", "renewed_at": renewed_at,
        });
        fs::write(a.dir().join("daemon.json"), lease.to_string()).unwrap();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    forged(now);
    let out = a.try_mount("a");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("on elsewhere, lease renewed"),
        "{}",
        text(&out)
    );
    // Expired (that machine died): host a is served here.
    forged(now - 60);
    a.mount();
    let info: Value =
        serde_json::from_str(&fs::read_to_string(a.dir().join("daemon.json")).unwrap()).unwrap();
    assert_eq!(info["pid"], a.daemon_pid());
    assert_ne!(info["boot_id"], "another-boot");
}

#[test]
fn files_written_on_one_host_are_read_on_the_other() {
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    a.mount();
    b.mount();
    fs::write(a.path("workspaces/default/from-a.txt"), "written on a\n").unwrap();
    // A name B has looked for and missed, many times: found once A makes it.
    let late = b.path("workspaces/default/late.txt");
    for _ in 0..50 {
        assert!(fs::metadata(&late).is_err());
    }
    fs::write(a.path("workspaces/default/late.txt"), "late\n").unwrap();
    // B's kernel and JuiceFS client may each keep what they saw for a second.
    within(Duration::from_secs(5), "b sees a's files", || {
        fs::read_to_string(b.path("workspaces/default/from-a.txt"))
            .ok()
            .as_deref()
            == Some("written on a\n")
            && fs::read_to_string(&late).ok().as_deref() == Some("late\n")
    });
}

#[test]
fn each_host_audits_on_its_own_chain_and_verify_checks_every_chain() {
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    a.mount();
    b.mount();
    // Refusals on B: system/ is read-only.
    for n in ["from-b", "from-b2", "from-b3"] {
        let err = fs::write(b.path(&format!("system/{n}")), "x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    }
    fs::write(a.path("workspaces/default/on-a.txt"), "a\n").unwrap();
    let chain = |h: &crate::common::juicefs::Host| h.dir().join("audit");
    within(Duration::from_secs(10), "b's refusal on b's chain", || {
        records(&chain(b))
            .iter()
            .any(|r| r["path"] == "/system/from-b" && r["result"] == "denied")
    });
    assert!(!records(&chain(a))
        .iter()
        .any(|r| r["path"] == "/system/from-b"));
    assert!(
        !a.store.join(".clawfs/audit").exists()
            || records(&a.store.join(".clawfs/audit")).is_empty()
    );
    // Unmounted, each chain is complete on the volume.
    a.umount();
    b.umount();
    let v: Value = serde_json::from_str(&ok(a.cli(&["audit", "verify", "--json"]))).unwrap();
    assert_eq!(v["intact"], true, "{v}");
    let hosts: Vec<_> = v["chains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["host"].clone())
        .collect();
    assert_eq!(hosts, ["a", "b"]);

    // Cut a record from the middle of b's chain: verify fails, and names host b.
    let file = fs::read_dir(chain(b))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let body = fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = body.lines().collect();
    assert!(lines.len() >= 3, "{body}");
    let cut: String = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    fs::write(&file, cut).unwrap();
    let out = a.cli(&["audit", "verify"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("host b:"), "{}", text(&out));
}

#[test]
fn an_emergency_stop_on_one_host_stops_the_agents_of_another() {
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    a.mount();
    b.mount();
    let up = b.path("agents/fs-engine/up");
    let script = format!("echo up > {}; exec sleep 60", up.display());
    let mut agent = b
        .run_command("fs-engine")
        .args(["--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    within(Duration::from_secs(20), "the agent runs on b", || {
        up.exists()
    });
    let start = Instant::now();
    ok(a.cli(&["estop"]));
    let status = loop {
        if let Some(st) = agent.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the agent on b still runs 15 s after the stop on a"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{status:?} {:?}", status.signal());
    // B refuses agents' writes while the stop is in force, and says why.
    let out = b
        .run_command("fs-engine")
        .args(["--no-sandbox", "--", "sh", "-c", "echo x > /dev/null"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    ok(a.cli(&["estop", "--clear"]));
}

#[test]
fn a_policy_reloaded_on_one_host_is_reloaded_on_the_other() {
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    a.mount();
    b.mount();
    let status = b.dir().join("policy-status.json");
    assert!(!status.exists());
    // The admin installs an edited policy (`clawfs system update`) and reloads it on host a.
    let mut policy = fs::read_to_string(a.store.join("system/policy.toml")).unwrap();
    policy.push_str("\n# edited on host a\n");
    let file = a.volume.parent().unwrap().join("policy.toml");
    fs::write(&file, &policy).unwrap();
    ok(a.cli(&[
        "system",
        "update",
        &format!("policy.toml={}", file.display()),
    ]));
    ok(a.cli(&["policy", "reload"]));
    within(Duration::from_secs(10), "b reloads the policy", || {
        fs::read(&status)
            .ok()
            .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
            .is_some_and(|v| v["ok"] == true)
    });
}

/// A text search of the default workspace through `h`'s mount: the paths found.
fn found(h: &crate::common::juicefs::Host, query: &str) -> Vec<String> {
    use std::io::{Read, Write};
    let Ok(mut f) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(h.path("tools/call/semantic_search"))
    else {
        return Vec::new();
    };
    let request = serde_json::json!({"query": query, "mode": "text"});
    if f.write_all(request.to_string().as_bytes()).is_err() {
        return Vec::new();
    }
    let mut out = String::new();
    let _ = f.read_to_string(&mut out);
    let v: Value = serde_json::from_str(&out).unwrap_or_default();
    v["hits"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h["path"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn either_hosts_files_are_found_from_both_and_the_index_moves_when_its_writer_dies() {
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    a.mount();
    b.mount();
    let limit = Duration::from_secs(40);
    fs::write(
        a.path("workspaces/default/alpha.md"),
        "the kitten tracker alpha\n",
    )
    .unwrap();
    fs::write(
        b.path("workspaces/default/beta.md"),
        "the zebra ledger beta\n",
    )
    .unwrap();
    for (h, q, path) in [
        (b, "kitten tracker", "alpha.md"),
        (a, "kitten tracker", "alpha.md"),
        (a, "zebra ledger", "beta.md"),
        (b, "zebra ledger", "beta.md"),
    ] {
        let took = within(limit, &format!("{path} found from host {}", h.name), || {
            found(h, q).iter().any(|p| p == path)
        });
        eprintln!("{path} found from host {} after {took:?}", h.name);
    }
    // One host writes the index at a time: exactly one holds each lease.
    let writer_of = |h: &crate::common::juicefs::Host| {
        fs::read_to_string(h.dir().join("daemon.log"))
            .unwrap_or_default()
            .contains("now writes the workspace's index")
    };
    assert!(
        writer_of(a) != writer_of(b),
        "one writer for the default workspace"
    );
    let (writer, other) = if writer_of(a) { (a, b) } else { (b, a) };
    // Its working index is on its own disk; only the published copy is on the volume.
    let shared_dir = writer.store.join(".clawfs/index/default");
    assert!(shared_dir.join("published.db").exists());
    assert!(!shared_dir.join("index.db").exists());
    let working = |h: &crate::common::juicefs::Host| {
        fs::read_dir(&h.cache)
            .unwrap()
            .flatten()
            .any(|e| e.path().join("index/default/index.db").exists())
    };
    assert!(
        working(writer),
        "the writer's index in {}",
        writer.cache.display()
    );
    assert!(!working(other));
    // Commands read the published copy, from either host.
    for h in [a, b] {
        let out = ok(h.cli(&["index", "status", "--json"]));
        let status: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(status["indexed"], true, "{status}");
        assert!(status["files"].as_u64().unwrap() >= 2, "{status}");
    }

    // The writer's daemon dies while an admin writes through it: the other host takes the
    // index over and keeps it current, and every write the dead daemon acknowledged is there.
    let dir = writer.path("workspaces/default/burst");
    fs::create_dir(&dir).unwrap();
    let writing = std::thread::spawn(move || {
        let mut acknowledged = Vec::new();
        for i in 0.. {
            let body = format!("file {i}\n").repeat(100);
            match fs::write(dir.join(format!("f{i}")), &body) {
                Ok(()) => acknowledged.push((i, body)),
                Err(_) => break,
            }
        }
        acknowledged
    });
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) of the daemon this test started.
    assert_eq!(unsafe { libc::kill(writer.daemon_pid(), libc::SIGKILL) }, 0);
    let acknowledged = writing.join().unwrap();
    assert!(
        acknowledged.len() > 5,
        "{} writes before the kill",
        acknowledged.len()
    );
    within(
        limit,
        "every acknowledged write, read on the other host",
        || {
            acknowledged.iter().all(|(i, body)| {
                fs::read_to_string(other.path(&format!("workspaces/default/burst/f{i}")))
                    .ok()
                    .as_ref()
                    == Some(body)
            })
        },
    );
    fs::write(
        other.path("workspaces/default/gamma.md"),
        "the walrus almanac gamma\n",
    )
    .unwrap();
    let took = within(limit, "gamma.md found after the writer died", || {
        found(other, "walrus almanac")
            .iter()
            .any(|p| p == "gamma.md")
    });
    eprintln!("gamma.md found from host {} after {took:?}", other.name);
    assert!(writer_of(other));
    // The new writer started from the published copy, on its own disk.
    let log = fs::read_to_string(other.dir().join("daemon.log")).unwrap_or_default();
    assert!(log.contains("starts from the published copy"), "{log}");
    assert!(working(other));
    assert!(found(other, "kitten tracker")
        .iter()
        .any(|p| p == "alpha.md"));
    // The dead host comes back: its lock is free, its lease of this boot is taken over.
    writer.umount();
    writer.mount();
    within(limit, "the returning host finds gamma.md", || {
        found(writer, "walrus almanac")
            .iter()
            .any(|p| p == "gamma.md")
    });
}

/// What `h`'s daemon last saved of the bytes uid `uid` holds in the whole store (its view,
/// which it checks growth against).
fn held_as_seen_by(h: &crate::common::juicefs::Host, uid: u32) -> u64 {
    fs::read(h.dir().join("quota-usage.json"))
        .ok()
        .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
        .and_then(|v| v["by_uid"][uid.to_string()]["bytes"].as_u64())
        .unwrap_or(0)
}

/// `clawfs quota --json` as `h`: the bytes `agent` holds.
fn quota_bytes(h: &crate::common::juicefs::Host, agent: &str) -> u64 {
    let v: Value = serde_json::from_str(&ok(h.cli(&["quota", "--json"]))).unwrap();
    v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .and_then(|a| a["bytes"].as_u64())
        .unwrap()
}

#[test]
fn an_agents_quota_counts_what_it_holds_across_hosts() {
    const UID: u32 = 61006;
    const MB: u64 = 1_000_000;
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    // fs-engine may hold 3 MB in the whole store.
    let policy = fs::read_to_string(a.store.join("system/policy.toml")).unwrap();
    let tight = policy.replace(
        "[agents.fs-engine]\nuid = 61006\ngid = 61006\n",
        "[agents.fs-engine]\nuid = 61006\ngid = 61006\nquota = { bytes = 3000000 }\n",
    );
    assert_ne!(tight, policy, "the default policy changed shape");
    let file = a.volume.parent().unwrap().join("tight.toml");
    fs::write(&file, &tight).unwrap();
    ok(a.cli(&[
        "system",
        "update",
        &format!("policy.toml={}", file.display()),
    ]));
    a.mount();
    b.mount();
    let write = |h: &crate::common::juicefs::Host, name: &str| {
        let target = h.path(&format!("agents/fs-engine/{name}"));
        let script = format!("head -c 2000000 /dev/zero > {}", target.display());
        let out = h
            .run_command("fs-engine")
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        (out.status.success(), text(&out))
    };
    // 2 MB on host a: within the quota.
    let (written, out) = write(a, "on-a");
    assert!(written, "{out}");
    // Host b's daemon learns of it from a's saved changes, and checks against the total.
    within(Duration::from_secs(15), "b counts a's growth", || {
        held_as_seen_by(b, UID) >= 2 * MB
    });
    let (written, out) = write(b, "on-b");
    assert!(!written, "2 MB more on b passed the 3 MB quota: {out}");
    assert!(out.contains("Disk quota exceeded"), "{out}");
    // Both hosts show the same total.
    let on_a = quota_bytes(a, "fs-engine");
    assert!((2 * MB..=3 * MB).contains(&on_a), "{on_a}");
    within(Duration::from_secs(15), "b shows a's total", || {
        quota_bytes(b, "fs-engine") == quota_bytes(a, "fs-engine")
    });
    // Removed on b (a's file, and what b's refused write had put in its own), given back on
    // a: a's daemon lets the agent write there again.
    fs::remove_file(b.path("agents/fs-engine/on-a")).unwrap();
    fs::remove_file(b.path("agents/fs-engine/on-b")).unwrap();
    within(Duration::from_secs(15), "a counts b's removals", || {
        held_as_seen_by(a, UID) < MB / 10
    });
    let (written, out) = write(a, "again-on-a");
    assert!(written, "{out}");
    // A recount on b starts a new count, which a follows without counting anything twice.
    // (b counts what its view of the volume shows: a's file, once b's caches let it see it.)
    let on_b_volume = b.store.join("agents/fs-engine/again-on-a");
    within(Duration::from_secs(15), "b's volume shows a's file", || {
        fs::metadata(&on_b_volume).is_ok_and(|m| m.len() == 2 * MB)
    });
    ok(b.cli(&["quota", "rescan"]));
    let total = quota_bytes(b, "fs-engine");
    assert!((2 * MB..3 * MB).contains(&total), "{total}");
    within(Duration::from_secs(15), "a follows b's recount", || {
        let a_view = held_as_seen_by(a, UID);
        (2 * MB..3 * MB).contains(&a_view) && quota_bytes(a, "fs-engine") == total
    });
    let (written, out) = write(b, "over-on-b");
    assert!(!written, "{out}");
}

/// `clawfs vault ARGS --store STORE` as host `h`, with `stdin` and the vault passphrase `pass`.
fn vault_as(
    h: &crate::common::juicefs::Host,
    args: &[&str],
    stdin: &str,
    pass: Option<&str>,
) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut c = Command::new(crate::common::clawfs_bin());
    c.env_remove("LD_LIBRARY_PATH")
        .env_remove("CLAWFS_VAULT_PASSPHRASE")
        .env("CLAWFS_HOST", &h.name)
        .arg("vault")
        .args(args)
        .arg("--store")
        .arg(&h.store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(p) = pass {
        c.env("CLAWFS_VAULT_PASSPHRASE", p);
    }
    // Each host's own key files are on its own disk, never on the shared volume.
    c.env(
        "CLAWFS_VAULT_KEY_DIR",
        h.volume.parent().unwrap().join(format!("keys-{}", h.name)),
    );
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Locks every host's vault keyring when the test ends, pass or fail.
struct LockAll<'a>(Vec<&'a crate::common::juicefs::Host>);
impl Drop for LockAll<'_> {
    fn drop(&mut self) {
        for h in &self.0 {
            let _ = vault_as(h, &["lock"], "", None);
        }
    }
}

#[test]
fn a_host_reads_secrets_with_its_own_seal_once_a_host_with_the_key_adds_it() {
    const PASS: &str = "host b's own passphrase";
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    let _locks = LockAll(vec![a, b]);
    // Host a creates the vault: its key file seals the master key.
    ok(vault_as(a, &["init", "--sealer", "host-key"], "", None));
    ok(vault_as(a, &["put", "db-password"], "hunter2\n", None));
    ok(vault_as(
        a,
        &["grant", "fs-engine", "db-password"],
        "",
        None,
    ));
    a.mount();
    b.mount();
    let read_on_b = || {
        let script = format!("cat {}", b.path("vault/secrets/db-password").display());
        let out = b
            .run_command("fs-engine")
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        text(&out)
    };
    // Host b has no key: its agent's read fails, and so does unlocking there.
    assert!(!read_on_b().contains("hunter2"));
    let out = vault_as(b, &["unlock"], "", Some(PASS));
    assert!(!out.status.success(), "{}", text(&out));
    // b makes its own key pair, sealed by its passphrase; a has not granted it yet.
    let made = ok(vault_as(
        b,
        &["host-key", "--sealer", "passphrase"],
        "",
        Some(PASS),
    ));
    let out = vault_as(b, &["unlock"], "", Some(PASS));
    assert!(!out.status.success());
    assert!(
        text(&out).contains("clawfs vault add-host b"),
        "{}",
        text(&out)
    );
    // An admin on a, where the vault is unlocked, adds b: the fingerprints agree.
    let added = ok(vault_as(a, &["add-host", "b"], "", None));
    let fingerprint = |s: &str| {
        s.split_whitespace()
            .find(|w| w.len() == 16 && w.bytes().all(|c| c.is_ascii_hexdigit()))
            .map(str::to_string)
    };
    assert_eq!(fingerprint(&made), fingerprint(&added), "{made} / {added}");
    // b unlocks with its own passphrase (a wrong one fails) and its agent reads the secret.
    assert!(!vault_as(b, &["unlock"], "", Some("wrong")).status.success());
    ok(vault_as(b, &["unlock"], "", Some(PASS)));
    within(
        Duration::from_secs(10),
        "b's agent reads the secret",
        || read_on_b().starts_with("hunter2"),
    );
    let status = ok(vault_as(a, &["status"], "", None));
    assert!(
        status.contains("host b:") && status.contains("granted generation 1"),
        "{status}"
    );
    // A rotation on a gives b the new key: b unlocks again and still reads.
    let rotated = ok(vault_as(a, &["rotate"], "", None));
    assert!(rotated.contains("rotated"), "{rotated}");
    ok(vault_as(b, &["lock"], "", None));
    ok(vault_as(b, &["unlock"], "", Some(PASS)));
    within(
        Duration::from_secs(10),
        "b reads after the rotation",
        || read_on_b().starts_with("hunter2"),
    );
}

/// `edit_exact` of `workspaces/default/plan.md` by the sandboxed agent fs-engine through
/// `h`'s mount: the tool's answer.
fn edit_on(
    h: &crate::common::juicefs::Host,
    old: &str,
    new: &str,
    base: Option<&str>,
) -> std::process::Child {
    let mut request = serde_json::json!({"path": "plan.md", "old": old, "new": new});
    if let Some(b) = base {
        request["base_sha256"] = b.into();
    }
    let script = "import sys\nwith open(sys.argv[1], 'r+b', buffering=0) as f:\n    \
                  f.write(sys.argv[2].encode())\n    sys.stdout.write(f.read().decode())\n";
    h.run_command("fs-engine")
        .args(["--", "python3", "-c", script])
        .arg(h.path("tools/call/edit_exact"))
        .arg(request.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn answer(child: std::process::Child) -> Value {
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)))
}

#[test]
fn hash_checked_edits_on_two_hosts_at_once_lose_nothing() {
    use sha2::Digest;
    let s = SharedStore::new(&["a", "b"]);
    let (a, b) = (s.host("a"), s.host("b"));
    a.mount();
    b.mount();
    for round in 0..3 {
        let body: String = (1..=10)
            .map(|i| format!("item {i} of round {round}\n"))
            .collect();
        let plan = a.path("workspaces/default/plan.md");
        fs::write(&plan, &body).unwrap();
        // The admin's file, which the agents may write.
        let writable = std::os::unix::fs::PermissionsExt::from_mode(0o666);
        fs::set_permissions(&plan, writable).unwrap();
        // Rewritten in place on a, in a later round: b reads what a wrote, not what b's
        // daemon had open before (the network file system refreshes a file at open).
        within(
            Duration::from_secs(10),
            &format!("round {round}: b reads a's rewrite"),
            || fs::read_to_string(b.path("workspaces/default/plan.md")).is_ok_and(|t| t == body),
        );
        let base = hex::encode(sha2::Sha256::digest(body.as_bytes()));
        let (old_a, new_a) = (
            format!("item 3 of round {round}\n"),
            format!("item 3 of round {round}, done on a\n"),
        );
        let (old_b, new_b) = (
            format!("item 7 of round {round}\n"),
            format!("item 7 of round {round}, done on b\n"),
        );
        // Both agents edit the file they read, at once, each checking its hash.
        let on_a = edit_on(a, &old_a, &new_a, Some(&base));
        let on_b = edit_on(b, &old_b, &new_b, Some(&base));
        let (ra, rb) = (answer(on_a), answer(on_b));
        let won = |r: &Value| r["ok"] == true;
        assert!(
            won(&ra) != won(&rb),
            "round {round}: exactly one edit wins: a {ra} / b {rb}"
        );
        let lost = if won(&ra) { &rb } else { &ra };
        assert_eq!(lost["error"], "hash_mismatch", "{lost}");
        // The loser edits again without a hash, on its own host: it sees the winner's edit
        // first, so both are in the file.
        let retry = if won(&ra) {
            edit_on(b, &old_b, &new_b, None)
        } else {
            edit_on(a, &old_a, &new_a, None)
        };
        let r = answer(retry);
        assert_eq!(r["ok"], true, "{r}");
        for h in [a, b] {
            within(Duration::from_secs(10), "both edits on both hosts", || {
                fs::read_to_string(h.path("workspaces/default/plan.md"))
                    .is_ok_and(|t| t.contains(&new_a) && t.contains(&new_b))
            });
        }
    }
}
