//! cgroup v2 groups for agents (core, Linux-only): finding the hierarchy, creating an agent's
//! group and a per-run sub-group, enabling controllers, applying quotas, moving processes in,
//! waiting for a group to empty, removing it — and the reverse lookup the daemon uses to name
//! the agent behind a pid. On hybrid hosts, the cgroup v1 fallback for the controllers cgroup v2
//! does not offer.
//!
//! Layout, under the cgroup2 mount (found in `/proc/self/mountinfo`, never assumed):
//!
//! ```text
//! <cgroup2>/clawfs/                  base; controllers enabled in its cgroup.subtree_control
//! <cgroup2>/clawfs/agent-<NAME>/     one group per agent; quotas are written here
//! <cgroup2>/clawfs/agent-<NAME>/run-<PID>/   one leaf per `clawfs run` (PID = that process)
//! ```
//!
//! Invariants: only root creates anything under `clawfs/`; every directory and control file there
//! is root-owned and 0644/0755, so an agent (which runs as an unprivileged uid with no_new_privs)
//! can neither move itself out nor create a group that would name it someone else. Processes live
//! only in `run-*` leaves (the "no internal processes" rule of cgroup v2 lets `agent-*` hold the
//! quotas for all runs of the agent). A process inside `agent-<NAME>/…`, at any depth, is NAME.
//!
//! **cgroup v1 fallback.** On a hybrid host (cgroup2 at, say, `/sys/fs/cgroup/unified`, the
//! controllers bound to v1 hierarchies), a controller of [`DEFAULT_CONTROLLERS`] that cgroup v2
//! cannot enable but a mounted v1 hierarchy has is used there, with the same layout:
//! `<v1 mount>/clawfs/agent-<NAME>/run-<PID>`. The run's processes are in both trees (a process
//! is in one group per hierarchy); the quotas.json keys of that controller are translated to the
//! v1 files (see [`v1_limit`]) and written to the v1 agent group. The v2 group alone is the
//! identity: the daemon reads the `0::` line of `/proc/<pid>/cgroup` and no v1 line (see
//! [`Cgroup2::agent_of_cgroup_file`]).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The directory under the cgroup2 root that holds every ClawFS group.
pub const BASE_DIR: &str = "clawfs";
/// Prefix of an agent's group directory.
pub const AGENT_PREFIX: &str = "agent-";
/// Prefix of a per-run sub-group.
pub const RUN_PREFIX: &str = "run-";
/// The controllers `clawfs run` enables for agent groups.
pub const DEFAULT_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// Why a cgroup operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup2 filesystem in this mount namespace.
    #[error("cgroup v2 is not available: no cgroup2 filesystem in /proc/self/mountinfo")]
    NotMounted,
    /// mountinfo could not be read.
    #[error("reading /proc/self/mountinfo: {0}")]
    MountInfo(#[source] io::Error),
    /// An agent name that cannot be a group name.
    #[error("invalid agent name {0:?}: use [a-z0-9-]+, at most 64 characters")]
    InvalidAgent(String),
    /// A quota key that is not a controller interface file.
    #[error("invalid cgroup limit {key:?}: {reason}")]
    InvalidLimit {
        /// The key as given.
        key: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An operation on a cgroup file or directory failed.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        /// What was being done ("create", "write", "read", "remove", …).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A group did not empty in time.
    #[error("{} still has processes after {:?}", .path.display(), .waited)]
    Timeout {
        /// The group.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn mount_entries(text: &str) -> impl Iterator<Item = clawfs_store::mountinfo::MountEntry> {
    clawfs_store::mountinfo::parse(text).into_iter()
}

/// The agent whose group holds `cgroup_path` in a hierarchy whose mount shows the cgroup `root`:
/// `<root>/clawfs/agent-<NAME>` or inside it.
fn agent_under(root: &str, cgroup_path: &str) -> Option<String> {
    let root = root.trim_end_matches('/');
    let rest = cgroup_path.strip_prefix(root)?;
    let rest = rest.strip_prefix('/')?;
    let mut parts = rest.split('/');
    if parts.next()? != BASE_DIR {
        return None;
    }
    let name = parts.next()?.strip_prefix(AGENT_PREFIX)?;
    valid_agent(name).then(|| name.to_string())
}

/// The cgroup2 hierarchy as this process sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup2 {
    /// Where cgroup2 is mounted (e.g. `/sys/fs/cgroup` or `/sys/fs/cgroup/unified`).
    mount: PathBuf,
    /// The cgroup path of the mount's root, as `/proc/<pid>/cgroup` shows paths (`/` unless the
    /// mount shows only a sub-tree). Paths in `/proc/<pid>/cgroup` are relative to the reader's
    /// cgroup namespace, and so is this.
    root: String,
}

impl Cgroup2 {
    /// Finds the cgroup2 mount in `/proc/self/mountinfo`.
    pub fn find() -> Result<Cgroup2, CgroupError> {
        let text = fs::read_to_string("/proc/self/mountinfo").map_err(CgroupError::MountInfo)?;
        Self::from_mountinfo(&text).ok_or(CgroupError::NotMounted)
    }

    /// The hierarchy found once per process (the daemon's lookups use this).
    pub fn cached() -> Result<&'static Cgroup2, &'static CgroupError> {
        static FOUND: OnceLock<Result<Cgroup2, CgroupError>> = OnceLock::new();
        FOUND.get_or_init(Self::find).as_ref()
    }

    /// Picks the cgroup2 mount from mountinfo text: the first whose root is `/`, else the first.
    pub fn from_mountinfo(text: &str) -> Option<Cgroup2> {
        let mut found: Vec<Cgroup2> = mount_entries(text)
            .filter(|m| m.fstype == "cgroup2")
            .map(|m| Cgroup2 {
                mount: m.mount_point,
                root: m.root,
            })
            .collect();
        let pos = found.iter().position(|c| c.root == "/").unwrap_or(0);
        (!found.is_empty()).then(|| found.swap_remove(pos))
    }

    /// A hierarchy mounted at `mount` whose root is the cgroup path `root` (for tests).
    pub fn new(mount: impl Into<PathBuf>, root: impl Into<String>) -> Cgroup2 {
        Cgroup2 {
            mount: mount.into(),
            root: root.into(),
        }
    }

    /// Where cgroup2 is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// `<cgroup2>/clawfs`.
    pub fn base_dir(&self) -> PathBuf {
        self.mount.join(BASE_DIR)
    }

    /// `<cgroup2>/clawfs/agent-<agent>`.
    pub fn agent_dir(&self, agent: &str) -> PathBuf {
        agent_group_dir(&self.mount, agent)
    }

    /// The agent whose group holds `cgroup_path` (a path as in `/proc/<pid>/cgroup`): the path
    /// must be `<root>/clawfs/agent-<NAME>` or lie inside it. Anchored at this hierarchy's root,
    /// so a look-alike `…/clawfs/agent-x` elsewhere (say in a delegated user sub-tree) is nobody.
    pub fn agent_of_path(&self, cgroup_path: &str) -> Option<String> {
        agent_under(&self.root, cgroup_path)
    }

    /// The agent of a `/proc/<pid>/cgroup` text: its `0::` (cgroup v2) line through
    /// [`Self::agent_of_path`]. The v2 group is the only identity. On a hybrid host the run is also
    /// in `clawfs/agent-<NAME>/…` of v1 hierarchies (`4:memory:/clawfs/agent-a/run-1`); those lines
    /// are never read: the child joins them while it is still root (it is created in its v2
    /// group, `clawfs-fuse/src/spawn.rs`), and they add nothing (they are set with the v2 group,
    /// and only root can change either).
    pub fn agent_of_cgroup_file(&self, contents: &str) -> Option<String> {
        contents
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .and_then(|p| self.agent_of_path(p.trim_end()))
    }

    /// The agent whose group process `pid` is in, if any. Errors are those of reading
    /// `/proc/<pid>/cgroup` (ENOENT/ESRCH: the process is gone).
    pub fn agent_of_pid(&self, pid: u32) -> io::Result<Option<String>> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
        Ok(self.agent_of_cgroup_file(&text))
    }
}

/// `<root>/clawfs/agent-<agent>`, where `root` is the cgroup2 mount point.
pub fn agent_group_dir(root: &Path, agent: &str) -> PathBuf {
    root.join(BASE_DIR).join(format!("{AGENT_PREFIX}{agent}"))
}

/// The agent whose cgroup holds process `pid` (a pid or thread id), or `None` for a process
/// outside every agent group, or when this host has no cgroup2. Reads `/proc/<pid>/cgroup`; an
/// error means the process could not be inspected (typically it has exited).
pub fn agent_of_pid(pid: u32) -> io::Result<Option<String>> {
    match Cgroup2::cached() {
        Ok(cg) => cg.agent_of_pid(pid),
        Err(_) => Ok(None),
    }
}

/// Options of a cgroup v1 mount that are not controller names.
mod estop;
mod group;
#[cfg(test)]
mod tests;
mod v1;

pub use estop::*;
pub use group::*;
pub use v1::*;
