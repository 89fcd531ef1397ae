//! Which store each `clawfs run` serves, as the run itself recorded it. While it lives, a run
//! keeps `/run/clawfs/runs/PID` (root's alone): its start time as the kernel counts it
//! (`/proc/PID/stat`, field 22) and its store. The daemon's event consumer asks it whose events
//! it is reading, and `clawfs estop` whose runs to stop. A record whose pid the kernel has since
//! given to another process does not match that process's start time, and is not believed.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use clawfs_store::beneath::{self, FileMode};
use rustix::fs::{AtFlags, OFlags};

/// Where runs keep their records.
pub const RUNS_DIR: &str = "/run/clawfs/runs";
/// The system directory [`RUNS_DIR`] is made in, and its path there.
const RUN_BASE: (&str, &str) = ("/run", "clawfs/runs");

/// The record of the running process's run; removed when dropped.
#[derive(Debug)]
pub struct RunRecord {
    dir: OwnedFd,
    name: String,
}

impl RunRecord {
    /// Records that this process is a run of `store` (canonical).
    pub fn create(store: &Path) -> io::Result<RunRecord> {
        Self::create_in(Path::new(RUN_BASE.0), Path::new(RUN_BASE.1), store)
    }

    fn create_in(base: &Path, runs_dir: &Path, store: &Path) -> io::Result<RunRecord> {
        let pid = std::process::id();
        let start =
            start_time(pid).ok_or_else(|| io::Error::other("reading this process's start time"))?;
        let base = open_dir(base)?;
        let dir = beneath::create_dir_all(base.as_fd(), runs_dir, 0o700, None)?;
        let mut text = format!("{start}\n").into_bytes();
        text.extend_from_slice(store.as_os_str().as_bytes());
        let name = pid.to_string();
        beneath::write_atomic_beneath(dir.as_fd(), Path::new("."), &name, &text, ROOT_ONLY)?;
        Ok(RunRecord { dir, name })
    }
}

impl Drop for RunRecord {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
    }
}

const ROOT_ONLY: FileMode = FileMode::mode(0o600);

/// Opens a directory of the system's (`/run`), refusing a symlink at its last step.
fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// The store the run `pid` recorded, if `pid` is a live run that recorded one.
pub fn store_of_run(pid: u32) -> Option<PathBuf> {
    store_in(Path::new(RUNS_DIR), pid)
}

fn store_in(runs_dir: &Path, pid: u32) -> Option<PathBuf> {
    let dir = open_dir(runs_dir).ok()?;
    let text = beneath::read(dir.as_fd(), Path::new(&pid.to_string()), 1 << 16).ok()??;
    let newline = text.iter().position(|&b| b == b'\n')?;
    let recorded: u64 = std::str::from_utf8(&text[..newline]).ok()?.parse().ok()?;
    // Read last: a run that ends after reading its record no longer matches.
    (start_time(pid)? == recorded).then(|| PathBuf::from(OsStr::from_bytes(&text[newline + 1..])))
}

/// When `pid` started, in clock ticks since boot (`/proc/PID/stat` field 22); `None` if it is
/// gone.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_found_while_it_lives_and_gone_after() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = tmp.path().join("clawfs/runs");
        let store = Path::new("/var/lib/claw\nfs");
        let record = RunRecord::create_in(tmp.path(), Path::new("clawfs/runs"), store).unwrap();
        let me = std::process::id();
        assert_eq!(store_in(&runs, me).as_deref(), Some(store));
        drop(record);
        assert_eq!(store_in(&runs, me), None);
    }

    #[test]
    fn a_record_of_an_earlier_process_with_the_same_pid_is_not_believed() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = tmp.path().join("clawfs/runs");
        let record =
            RunRecord::create_in(tmp.path(), Path::new("clawfs/runs"), Path::new("/s")).unwrap();
        let me = std::process::id();
        let start = start_time(me).unwrap();
        std::fs::write(runs.join(me.to_string()), format!("{}\n/s", start + 1)).unwrap();
        assert_eq!(store_in(&runs, me), None);
        drop(record);
    }

    #[test]
    fn start_time_reads_past_a_command_name_with_spaces_and_parentheses() {
        assert!(start_time(std::process::id()).is_some_and(|t| t > 0));
        assert_eq!(start_time(u32::MAX), None);
    }
}
