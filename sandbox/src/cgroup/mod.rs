//! cgroup v2 groups for agents (Linux-only): finding the hierarchy, creating an agent's
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
use std::time::{Duration, Instant};

pub use clawfs_store::agent_groups::{
    agent_group_dir, agent_of_pid, agent_under, valid_agent, Cgroup2, NoCgroup2, AGENT_PREFIX,
    BASE_DIR, RUN_PREFIX,
};

/// The controllers `clawfs run` enables for agent groups.
pub const DEFAULT_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// Why a cgroup operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup2 hierarchy to use.
    #[error(transparent)]
    NoCgroup2(#[from] NoCgroup2),
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

/// Options of a cgroup v1 mount that are not controller names.
mod estop;
mod group;
mod quotas;
#[cfg(test)]
mod tests;
mod v1;

pub use estop::*;
pub use group::*;
pub use quotas::*;
pub use v1::*;
