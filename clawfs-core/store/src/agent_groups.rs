//! Which agent a process is: the agents' cgroup v2 groups, as the kernel shows a process's
//! group in `/proc/PID/cgroup`. An agent's processes live in `<cgroup2>/clawfs/agent-<NAME>/…`;
//! only root creates anything under `clawfs/`, so a process there, at any depth, is NAME. The
//! groups themselves (creating them, quotas, the v1 fallback) are the sandbox's.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory under the cgroup2 root that holds every ClawFS group.
pub const BASE_DIR: &str = "clawfs";
/// Prefix of an agent's group directory.
pub const AGENT_PREFIX: &str = "agent-";
/// Prefix of a per-run sub-group.
pub const RUN_PREFIX: &str = "run-";
/// Why there is no cgroup v2 hierarchy to use.
#[derive(Debug, thiserror::Error)]
pub enum NoCgroup2 {
    /// No cgroup2 filesystem in this mount namespace.
    #[error("cgroup v2 is not available: no cgroup2 filesystem in /proc/self/mountinfo")]
    NotMounted,
    /// mountinfo could not be read.
    #[error("reading /proc/self/mountinfo: {0}")]
    MountInfo(#[source] io::Error),
}

/// Whether `name` is a valid agent name (`[a-z0-9-]+`, ≤ 64 bytes, no hyphen at either end).
pub fn valid_agent(name: &str) -> bool {
    crate::names::check_system_name(std::ffi::OsStr::new(name)).is_ok()
}

/// The agent whose group holds `cgroup_path` in a hierarchy whose mount shows the cgroup `root`:
/// `<root>/clawfs/agent-<NAME>` or inside it.
pub fn agent_under(root: &str, cgroup_path: &str) -> Option<String> {
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
    pub fn find() -> Result<Cgroup2, NoCgroup2> {
        let text = fs::read_to_string("/proc/self/mountinfo").map_err(NoCgroup2::MountInfo)?;
        Self::from_mountinfo(&text).ok_or(NoCgroup2::NotMounted)
    }

    /// The hierarchy found once per process (the daemon's lookups use this).
    pub fn cached() -> Result<&'static Cgroup2, &'static NoCgroup2> {
        static FOUND: OnceLock<Result<Cgroup2, NoCgroup2>> = OnceLock::new();
        FOUND.get_or_init(Self::find).as_ref()
    }

    /// Picks the cgroup2 mount from mountinfo text: the first whose root is `/`, else the first.
    pub fn from_mountinfo(text: &str) -> Option<Cgroup2> {
        let mut found: Vec<Cgroup2> = crate::mountinfo::parse(text)
            .into_iter()
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
    /// group, `sandbox/src/spawn.rs`), and they add nothing (they are set with the v2 group,
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
