//! Mounting and unmounting: the happy path, every refusal with its message and exit code, and
//! recovery from a killed daemon.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use crate::common::{clawfs, Mounted};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mount_at(mnt: &std::path::Path, store: &std::path::Path) -> std::process::Output {
    clawfs([
        OsStr::new("mount"),
        mnt.as_os_str(),
        OsStr::new("--store"),
        store.as_os_str(),
    ])
}

#[test]
fn mounting_twice_is_refused() {
    let m = Mounted::new();
    let out = mount_at(&m.mnt, &m.store);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("already mounted"), "{}", stderr(&out));
    // A second mount point for the same store: the store is already served.
    let other = m.dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let out = mount_at(&other, &m.store);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("already served by pid"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_mount_points_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = mount_at(&dir.path().join("missing"), &store);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("no such directory"));
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"x").unwrap();
    let out = mount_at(&full, &store);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("not empty"));
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(mount_at(&file, &store).status.code(), Some(3));
}

#[test]
fn a_store_of_a_newer_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    assert!(
        clawfs([OsStr::new("init"), OsStr::new("--store"), store.as_os_str()])
            .status
            .success()
    );
    std::fs::write(store.join(".clawfs/format"), "99\n").unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = mount_at(&mnt, &store);
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("store format 99"), "{}", stderr(&out));
    // A non-empty directory that is not a store is not silently initialised.
    let junk = dir.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("data"), b"x").unwrap();
    let out = mount_at(&mnt, &junk);
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("not a ClawFS store"));
    assert_eq!(
        std::fs::read_dir(&junk).unwrap().count(),
        1,
        "nothing was written"
    );
}

#[test]
fn init_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let args = [OsStr::new("init"), OsStr::new("--store"), store.as_os_str()];
    let first = clawfs(args);
    assert!(String::from_utf8_lossy(&first.stdout).contains("initialised"));
    std::fs::write(store.join("workspaces/default/keep"), b"mine").unwrap();
    let again = clawfs(args);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("already"));
    assert_eq!(
        std::fs::read(store.join("workspaces/default/keep")).unwrap(),
        b"mine"
    );
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_unmounts_cleanly() {
    let m = Mounted::new();
    std::fs::write(m.ws().join("kept"), b"data").unwrap();
    let pid = m.daemon_pid();
    // SAFETY: sending a signal to the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_until("unmount", || !m.is_mounted());
    wait_until("daemon.json removal", || {
        !m.store.join(".clawfs/daemon.json").exists()
    });
    assert_eq!(
        std::fs::read(m.store.join("workspaces/default/kept")).unwrap(),
        b"data"
    );
    m.mount(&[]);
    assert_eq!(std::fs::read(m.ws().join("kept")).unwrap(), b"data");
}

#[test]
fn a_killed_daemon_is_recovered_by_umount() {
    let m = Mounted::new();
    std::fs::write(m.ws().join("kept"), b"data").unwrap();
    let pid = m.daemon_pid();
    // SAFETY: killing the daemon we started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // Either auto-unmount removed the mount, or it is stale ("Transport endpoint is not
    // connected"): `clawfs umount` clears it, and the store mounts again.
    wait_until("the daemon to die", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    });
    // The mount is stale now, or being removed by fusermount3's auto-unmount. A stat of its
    // root may still answer from the kernel's attribute cache, so staleness is not asked of it:
    // whatever is still mounted, `clawfs umount` clears.
    if m.is_mounted() {
        let out = m.umount();
        // fusermount3's auto-unmount may win the race and remove the mount first.
        let gone = !m.is_mounted() && stderr(&out).contains("not a ClawFS mount");
        assert!(out.status.success() || gone, "{}", stderr(&out));
    }
    wait_until("the mount to go", || !m.is_mounted());
    m.mount(&[]);
    assert_eq!(std::fs::read(m.ws().join("kept")).unwrap(), b"data");
}

#[test]
fn umount_refuses_what_is_not_clawfs_and_busy_mounts() {
    let m = Mounted::new();
    let out = clawfs([OsStr::new("umount"), m.dir.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("not a ClawFS mount"));
    let cwd_holder = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(m.ws())
        .spawn()
        .unwrap();
    let out = m.umount();
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("busy"), "{}", stderr(&out));
    let mut holder = cwd_holder;
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(m.umount().status.success());
    assert!(!m.is_mounted());
}

#[test]
fn status_of_something_else_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out = clawfs([OsStr::new("status"), dir.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("not a ClawFS mount"));
}

/// The systemd unit passes `systemd-analyze verify`, pointed at this build of `clawfs`.
#[test]
fn the_systemd_unit_verifies() {
    let Ok(probe) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        crate::common::skip("the_systemd_unit_verifies", "no systemd-analyze");
        return;
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/systemd/clawfs@.service"),
    )
    .unwrap()
    .replace("/usr/local/bin/clawfs", crate::common::clawfs_bin());
    // The instance of /clawfs, as `systemctl enable clawfs@clawfs.service` names it.
    let path = dir.path().join("clawfs@clawfs.service");
    std::fs::write(&path, unit).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("clawfs@clawfs.service"), "{said}");
}

/// `mount MOUNTPOINT` with a `fuse.clawfs` line in /etc/fstab runs `mount.fuse.clawfs` (this
/// build of `clawfs` under that name) and serves the store; `clawfs umount` takes it down. In a
/// mount namespace of its own, whose /etc/fstab and /usr/sbin are the test's.
#[test]
fn an_fstab_line_mounts_through_the_helper() {
    let dir = tempfile::tempdir().unwrap();
    let (sbin, mnt, store) = (
        dir.path().join("sbin"),
        dir.path().join("mnt"),
        dir.path().join("store"),
    );
    std::fs::create_dir(&sbin).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    // The machine's own helpers, but this build as mount.fuse.clawfs (an installed one, from
    // scripts/setup.sh, is left out).
    for e in std::fs::read_dir("/usr/sbin").unwrap().flatten() {
        if e.file_name() != "mount.fuse.clawfs" {
            std::os::unix::fs::symlink(e.path(), sbin.join(e.file_name())).unwrap();
        }
    }
    std::os::unix::fs::symlink(crate::common::clawfs_bin(), sbin.join("mount.fuse.clawfs"))
        .unwrap();
    let fstab = dir.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "{} {} fuse.clawfs defaults,threads=2,x-systemd.automount 0 0\n",
            store.display(),
            mnt.display()
        ),
    )
    .unwrap();
    let script = format!(
        "set -e
         mount --bind {sbin} /usr/sbin
         mount --bind {fstab} /etc/fstab
         trap '{bin} umount {mnt} >/dev/null 2>&1 || true' EXIT
         mount {mnt}
         ls {mnt}
         grep -c ' {mnt} .* fuse.clawfs ' /proc/self/mountinfo
         {bin} umount {mnt}
         trap - EXIT
         grep -c ' {mnt} ' /proc/self/mountinfo || echo unmounted",
        sbin = sbin.display(),
        fstab = fstab.display(),
        mnt = mnt.display(),
        bin = crate::common::clawfs_bin(),
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{shown}");
    for root in ["agents", "system", "tools", "vault", "workspaces", "specs"] {
        assert!(shown.lines().any(|l| l == root), "{root}: {shown}");
    }
    assert!(shown.lines().any(|l| l == "1"), "not mounted: {shown}");
    assert!(shown.contains("unmounted"), "{shown}");
    assert!(store.join(".clawfs/format").exists(), "{shown}");
}

/// The type of the mount at `mnt`, from mountinfo.
fn fstype_at(mnt: &std::path::Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        (std::path::Path::new(f[4]) == mnt).then(|| f[sep + 1].to_string())
    })
}

/// `clawfs mount` with no environment at all (as mount(8) and service managers start it) finds
/// `fusermount3` and mounts as `fuse.clawfs`; on a host without `fusermount3` the daemon mounts
/// by itself, as plain `fuse`, which every command still knows for a ClawFS mount. Neither waits
/// out the start timeout or leaves a dead mount behind.
#[test]
fn mounting_with_no_path_or_no_fusermount3_works() {
    let m = Mounted::new();
    assert!(m.umount().status.success());
    for (path, fstype) in [(None, "fuse.clawfs"), (Some("/nonexistent"), "fuse")] {
        let mut mount = std::process::Command::new(crate::common::clawfs_bin());
        mount
            .env_clear()
            .args(["mount"])
            .arg(&m.mnt)
            .arg("--store")
            .arg(&m.store);
        if let Some(p) = path {
            mount.env("PATH", p);
        }
        let started = Instant::now();
        let out = mount.output().unwrap();
        assert!(out.status.success(), "PATH {path:?}: {}", stderr(&out));
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "PATH {path:?}: waited"
        );
        assert_eq!(fstype_at(&m.mnt).as_deref(), Some(fstype), "PATH {path:?}");
        // Found by what works through the mount.
        let run = m.run_agent("fs-engine", "ls /dev/null");
        assert!(run.status.success(), "PATH {path:?}: {}", stderr(&run));
        let out = m.umount();
        assert!(out.status.success(), "PATH {path:?}: {}", stderr(&out));
        assert_eq!(
            fstype_at(&m.mnt),
            None,
            "PATH {path:?}: nothing left mounted"
        );
    }
    m.mount(&[]);
}

/// The daemon's FUSE worker threads: (name, state letter, scheduling policy, CPU ticks).
fn workers(pid: i32) -> Vec<(String, char, u32, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(task.join("comm")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(task.join("stat")) else {
            continue;
        };
        let comm = comm.trim().to_string();
        if !comm.starts_with("fuser-") {
            continue;
        }
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15, policy 41.
        let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let state = rest[0].chars().next().unwrap();
        let ticks = rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
        let policy = rest[38].parse::<u32>().unwrap();
        out.push((comm, state, policy, ticks));
    }
    out.sort();
    out
}

#[test]
fn the_polling_worker_serves_then_sleeps_at_its_own_priority() {
    // A mount on /dev/fuse polls by default (over io_uring nothing is left there to poll for).
    let m = Mounted::with_args(&["--no-io-uring"]);
    let pid = m.daemon_pid();
    // Requests back to back, which the polling worker takes as they come.
    for i in 0..300 {
        let p = m.ws().join(format!("f{i}"));
        std::fs::write(&p, b"x").unwrap();
        assert!(std::fs::metadata(m.ws().join(format!("missing{i}"))).is_err());
        std::fs::remove_file(&p).unwrap();
    }
    let all = workers(pid);
    assert_eq!(all.len(), 4, "{all:?}");
    // Idle, every worker sleeps (S) at the normal policy (0, SCHED_OTHER), not SCHED_IDLE (5)
    // where the poller polls.
    wait_until("every worker asleep at SCHED_OTHER", || {
        workers(pid)
            .iter()
            .all(|(_, state, policy, _)| *state == 'S' && *policy == 0)
    });
    // And stays asleep: a poller that never slept would burn a CPU (100 ticks a second).
    let before: u64 = workers(pid).iter().map(|w| w.3).sum();
    std::thread::sleep(Duration::from_secs(1));
    let after: u64 = workers(pid).iter().map(|w| w.3).sum();
    assert!(
        after - before < 10,
        "idle workers used {} ticks in 1 s",
        after - before
    );
    // Still serving after its sleep.
    std::fs::write(m.ws().join("after"), b"y").unwrap();
    assert_eq!(std::fs::read(m.ws().join("after")).unwrap(), b"y");
}

#[test]
fn busy_poll_can_be_turned_off_and_is_bounded() {
    let m = Mounted::with_args(&["--busy-poll", "0", "--threads", "1"]);
    std::fs::write(m.ws().join("f"), b"x").unwrap();
    assert_eq!(std::fs::read(m.ws().join("f")).unwrap(), b"x");
    let out = m.try_mount(&["--busy-poll", "20000"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--busy-poll"), "{}", stderr(&out));
}
