//! `clawfs init`, `umount` and `status`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clawfs_core::store::{InitOutcome, Store};
use clawfs_store::area::Area;
use clawfs_store::mountinfo;
use serde_json::json;

use crate::error::{mountpoint, Failure};
use crate::mounts::{store_path, unmount};

/// `clawfs init`.
pub fn init(store: &Option<PathBuf>) -> Result<(), Failure> {
    let path = store_path(store);
    match Store::init(&path)? {
        InitOutcome::Created => println!("initialised ClawFS store {}", path.display()),
        InitOutcome::AlreadyInitialised => {
            let repair = Store::open(&path)?.close_to_others()?;
            if repair.changed.is_empty() {
                println!(
                    "{} is already a ClawFS store; nothing changed",
                    path.display()
                )
            } else {
                println!("{} is already a ClawFS store", path.display());
                crate::store_ops::report_repair(&repair);
            }
        }
    }
    Ok(())
}

fn is_stale(mp: &Path) -> bool {
    std::fs::metadata(mp).err().and_then(|e| e.raw_os_error()) == Some(libc::ENOTCONN)
}

/// `clawfs umount`.
pub fn umount(mp: &Path, lazy: bool) -> Result<(), Failure> {
    let shown = mp.display();
    if is_stale(mp) {
        // A stale mount cannot be canonicalised itself (its root answers ENOTCONN); its parent can.
        let at = match (mp.parent(), mp.file_name()) {
            (Some(parent), Some(name)) => std::fs::canonicalize(parent)
                .map(|p| p.join(name))
                .unwrap_or_else(|_| mp.to_path_buf()),
            _ => mp.to_path_buf(),
        };
        unmount_unless_gone(&at, true).map_err(|e| mountpoint(format!("{shown}: {e}")))?;
        println!("removed the stale ClawFS mount at {shown} (its daemon had died)");
        return Ok(());
    }
    let canonical = std::fs::canonicalize(mp).map_err(|e| mountpoint(format!("{shown}: {e}")))?;
    let Some(entry) = mountinfo::clawfs_mount_at(&canonical).context("reading mountinfo")? else {
        return Err(mountpoint(format!("{shown}: not a ClawFS mount")));
    };
    let daemon = Store::open(Path::new(&entry.source))
        .ok()
        .and_then(|s| s.daemon_info());
    match unmount_unless_gone(&canonical, lazy) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            return Err(mountpoint(format!(
                "{shown}: busy (a process has a file open or its working directory there); close it or use --lazy"
            )))
        }
        Err(e) => return Err(mountpoint(format!("{shown}: {e}"))),
    }
    // Wait for the daemon to finish, so the store is free when we return. A copy of the mount
    // held in another mount namespace (a sandboxed agent's, of this store or another) keeps
    // the connection, and the daemon, alive: after a moment the connection is ended for all.
    if let Some(d) = daemon {
        let wait = |limit: Duration| {
            let deadline = Instant::now() + limit;
            while process_alive(d.pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        wait(Duration::from_secs(2));
        if process_alive(d.pid) {
            if let Err(e) = abort_connection(entry.dev) {
                eprintln!("clawfs: {shown}: ending the connection held elsewhere: {e}");
            }
            wait(Duration::from_secs(8));
        }
        if process_alive(d.pid) {
            eprintln!(
                "clawfs: {shown}: unmounted, but its daemon (pid {}) is still finishing; the store can be mounted again once it exits",
                d.pid
            );
        }
    }
    println!("unmounted {shown}");
    Ok(())
}

/// Unmounts `mp`, or finds it already gone: when a daemon dies, fusermount3's auto-unmount
/// removes its mount, and may do so between our look at mountinfo and our `umount2`, which
/// then answers EINVAL.
fn unmount_unless_gone(mp: &Path, lazy: bool) -> io::Result<()> {
    match unmount(mp, lazy) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && mountinfo::mount_at(mp)?.is_none() => {
            Ok(())
        }
        other => other,
    }
}

/// Ends the FUSE connection of the filesystem of device `dev` through fusectl's `abort`
/// (mounting fusectl at its usual place if it is not there).
fn abort_connection(dev: u64) -> std::io::Result<()> {
    let dir = Path::new("/sys/fs/fuse/connections");
    let mounted = clawfs_store::mountinfo::read()?
        .iter()
        .any(|m| m.fstype == "fusectl" && m.mount_point == dir);
    if !mounted {
        // SAFETY: NUL-terminated constant strings; no data argument.
        let r = unsafe {
            libc::mount(
                c"fusectl".as_ptr(),
                c"/sys/fs/fuse/connections".as_ptr(),
                c"fusectl".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // The connection is named by the device's minor number (FUSE devices have major 0).
    std::fs::write(dir.join(libc::minor(dev).to_string()).join("abort"), "1")
}

fn process_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state letter tells.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

fn count_dirs(p: &Path) -> usize {
    std::fs::read_dir(p)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .count()
        })
        .unwrap_or(0)
}

fn count_entries(p: &Path) -> usize {
    std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0)
}

fn describe(entry: &mountinfo::MountEntry) -> serde_json::Value {
    let store = Path::new(&entry.source);
    let daemon = Store::open(store).ok().and_then(|s| s.daemon_info());
    json!({
        "mountpoint": entry.mount_point,
        "state": "mounted",
        "store": entry.source,
        "daemon": daemon,
        "counts": {
            "agents": count_dirs(&store.join(Area::Agents.dir_name())),
            "workspaces": count_dirs(&store.join(Area::Workspaces.dir_name())),
            "secrets": count_entries(&store.join("vault/secrets")),
        }
    })
}

fn print_human(v: &serde_json::Value) {
    println!(
        "{}: {}",
        v["mountpoint"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?")
    );
    if let Some(store) = v["store"].as_str() {
        println!("  store:       {store}");
    }
    if let Some(d) = v["daemon"].as_object() {
        println!(
            "  daemon:      pid {}, clawfs {}, since {}",
            d["pid"],
            d["version"].as_str().unwrap_or("?"),
            d["started_at"].as_str().unwrap_or("?")
        );
        println!(
            "  passthrough: {}",
            if d["passthrough"].as_bool() == Some(true) {
                "requested"
            } else {
                "off"
            }
        );
    }
    if let Some(c) = v["counts"].as_object() {
        println!(
            "  agents: {}  workspaces: {}  secrets: {}",
            c["agents"], c["workspaces"], c["secrets"]
        );
    }
}

/// `clawfs status`.
pub fn status(mp: Option<&Path>, as_json: bool) -> Result<(), Failure> {
    let reports: Vec<serde_json::Value> = match mp {
        Some(mp) if is_stale(mp) => {
            return Err(mountpoint(format!(
                "{}: stale mount (its daemon died); run `clawfs umount {}`",
                mp.display(),
                mp.display()
            )))
        }
        Some(mp) => {
            let canonical = std::fs::canonicalize(mp)
                .map_err(|e: io::Error| mountpoint(format!("{}: {e}", mp.display())))?;
            let entry = mountinfo::clawfs_mount_at(&canonical)
                .context("reading mountinfo")?
                .ok_or_else(|| mountpoint(format!("{}: not a ClawFS mount", mp.display())))?;
            vec![describe(&entry)]
        }
        None => mountinfo::clawfs_mounts()
            .context("reading mountinfo")?
            .iter()
            .map(describe)
            .collect(),
    };
    if as_json {
        for r in &reports {
            crate::output::print_json(r).context("writing to stdout")?;
        }
    } else if reports.is_empty() {
        println!("no ClawFS mounts (clawfs {})", clawfs_core::VERSION);
    } else {
        for r in &reports {
            print_human(r);
        }
    }
    Ok(())
}
