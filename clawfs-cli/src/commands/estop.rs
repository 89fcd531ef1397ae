//! `clawfs estop`: the emergency stop. Records the stop in the store (it survives a daemon
//! restart), tells the daemon serving the store (SIGHUP; the daemon re-reads the flag and
//! refuses every agent write, tool call and commit of a change begun before) and waits for it to
//! say so, then freezes and kills every running agent. A `clawfs run` that looked for the flag
//! before it was written looks again from inside its group, where the kill finds it.
//! `--clear` lifts it; `--status` says whether one is in force.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clawfs_core::store::Store;
use clawfs_store::layout::PRIVATE_DIR;

use crate::error::Failure;
use crate::mounts::store_path;

/// The flag, in the store's private area (the daemon's gate reads the same name).
const ESTOP_FILE: &str = "estop";
/// Where the daemon acknowledges what it saw of the flag.
const ESTOP_SEEN_FILE: &str = "estop-seen.json";
/// How long each run group may take to empty once killed.
pub const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the daemon may take to acknowledge a change.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// `clawfs estop [--clear | --status]`.
pub fn run(store: &Option<PathBuf>, clear: bool, status: bool) -> Result<(), Failure> {
    let store = Store::open(&store_path(store))?;
    match (clear, status) {
        (_, true) => show(&store),
        (true, _) => lift(&store),
        _ => stop(&store),
    }
}

fn flag_path(store: &Store) -> PathBuf {
    flag_file(store.root())
}

/// Where the store at `store_root` records a stop.
pub fn flag_file(store_root: &Path) -> PathBuf {
    store_root.join(PRIVATE_DIR).join(ESTOP_FILE)
}

/// The stop in force, as the store records it. Read beneath the store root, a regular file
/// of at most 64 KiB: in a store that hosts share, another host's root could plant a FIFO, a
/// symlink or an endless file here. Anything unreadable counts as a stop in force.
pub fn read_flag(store: &Store) -> Option<serde_json::Value> {
    let rel = Path::new(PRIVATE_DIR).join(ESTOP_FILE);
    let unreadable = || serde_json::json!({"unreadable": true});
    match clawfs_store::beneath::read(store.root_fd(), &rel, 64 << 10) {
        Ok(None) => None,
        Ok(Some(text)) => Some(serde_json::from_slice(&text).unwrap_or_else(|_| unreadable())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) => Some(unreadable()),
    }
}

fn who() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    match std::env::var("SUDO_USER") {
        Ok(u) if !u.is_empty() => format!("uid:{uid} (sudo by {u})"),
        _ => format!("uid:{uid}"),
    }
}

/// Records a stop in the store, by `by` (and why, if given); its id.
pub fn record(store: &Store, by: &str, reason: Option<&str>) -> Result<String, Failure> {
    let id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let mut flag = serde_json::json!({
        "time": clawfs_store::clock::now_rfc3339(),
        "by": by,
        "id": id,
    });
    if let Some(reason) = reason {
        flag["reason"] = reason.into();
    }
    // In a store that hosts share, the other hosts' daemons stop their own agents.
    if let Some(host) = store.host().filter(|_| store.is_shared()) {
        flag["host"] = host.as_str().into();
    }
    let how = clawfs_store::beneath::FileMode::mode(0o600);
    store
        .write_beneath(
            Path::new(PRIVATE_DIR),
            ESTOP_FILE,
            flag.to_string().as_bytes(),
            how,
        )
        .with_context(|| format!("recording the stop in {}", flag_path(store).display()))?;
    Ok(id)
}

fn stop(store: &Store) -> Result<(), Failure> {
    let id = record(store, &who(), None)?;
    println!("emergency stop recorded in {}", flag_path(store).display());
    // The daemon first: once it has acknowledged, no agent writes, calls a tool or commits a
    // change it started before; so what the agents' deaths close (an identity file open for
    // writing) commits nothing. A daemon that does not acknowledge does not hold the kill up.
    let acknowledged = match signal_daemon(store)? {
        Some(pid) => wait_ack(store, pid, true, &id),
        None => Ok(()),
    };
    // The agents of this store: cgroups are host-wide, and other stores' agents are theirs. A
    // run whose `clawfs run` is gone (killed) is nobody's: its agents are stopped too.
    let this_store = std::fs::canonicalize(store.root()).unwrap_or_else(|_| store.root().into());
    let of_this_store =
        |run_pid: u32| clawfs_sandbox::runs::store_of_run(run_pid).is_none_or(|s| s == this_store);
    match clawfs_sandbox::cgroup::kill_agent_runs(KILL_TIMEOUT, of_this_store) {
        Ok(killed) if killed.is_empty() => println!("no agent was running"),
        Ok(killed) => {
            for k in &killed {
                println!(
                    "killed agent {}: {} ({} process(es) {:?}; {}{}){}",
                    k.agent,
                    k.group.display(),
                    k.pids.len(),
                    k.pids,
                    if k.frozen { "frozen, then " } else { "" },
                    k.method,
                    if k.empty { "" } else { " — NOT EMPTY" }
                );
            }
            if killed.iter().any(|k| !k.empty) {
                return Err(Failure::Other(anyhow::anyhow!(
                    "some agent groups still have processes after {} s",
                    KILL_TIMEOUT.as_secs()
                )));
            }
        }
        Err(e) => eprintln!("clawfs: killing agents: {e}"),
    }
    acknowledged
}

fn lift(store: &Store) -> Result<(), Failure> {
    let Some(flag) = read_flag(store) else {
        println!("no emergency stop is in force");
        return Ok(());
    };
    std::fs::remove_file(flag_path(store))
        .with_context(|| format!("removing {}", flag_path(store).display()))?;
    println!(
        "emergency stop of {} (by {}) cleared",
        flag["time"].as_str().unwrap_or("?"),
        flag["by"].as_str().unwrap_or("?")
    );
    if let Some(pid) = signal_daemon(store)? {
        let id = flag["id"].as_str().unwrap_or_default().to_string();
        wait_ack(store, pid, false, &id)?;
    }
    Ok(())
}

fn show(store: &Store) -> Result<(), Failure> {
    match read_flag(store) {
        Some(f) => println!(
            "emergency stop IN FORCE since {} (by {}); lift it with `clawfs estop --clear`",
            f["time"].as_str().unwrap_or("?"),
            f["by"].as_str().unwrap_or("?")
        ),
        None => println!("no emergency stop is in force"),
    }
    Ok(())
}

/// SIGHUPs the daemon serving the store (it re-reads the flag); its pid, if there is one.
fn signal_daemon(store: &Store) -> Result<Option<u32>, Failure> {
    let Some(daemon) = store.serving_daemon() else {
        println!("no daemon serves this store: the flag applies from its next mount");
        return Ok(None);
    };
    // SAFETY: sending SIGHUP to the daemon recorded for this store.
    if unsafe { libc::kill(daemon.pid as i32, libc::SIGHUP) } != 0 {
        eprintln!(
            "clawfs: signalling the daemon (pid {}): {}; it picks the flag up within seconds",
            daemon.pid,
            std::io::Error::last_os_error()
        );
        return Ok(None);
    }
    Ok(Some(daemon.pid))
}

/// Waits until the daemon says it has seen the flag `id` in force (or lifted).
fn wait_ack(store: &Store, pid: u32, in_force: bool, id: &str) -> Result<(), Failure> {
    let deadline = Instant::now() + ACK_TIMEOUT;
    loop {
        let seen: Option<serde_json::Value> = store
            .read_host_file(ESTOP_SEEN_FILE, 64 << 10)
            .and_then(|t| serde_json::from_slice(&t).ok());
        if let Some(s) = seen {
            if s["in_force"] == in_force && s["id"] == id {
                println!(
                    "the daemon (pid {pid}) has {} the stop",
                    if in_force { "applied" } else { "lifted" }
                );
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(Failure::Other(anyhow::anyhow!(
                "the daemon (pid {pid}) did not acknowledge within {} s",
                ACK_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
