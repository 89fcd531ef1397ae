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
const V1_MOUNT_OPTIONS: [&str; 8] = [
    "rw",
    "ro",
    "noprefix",
    "clone_children",
    "xattr",
    "cpuset_v2_mode",
    "favordynmods",
    "nofavordynmods",
];

/// A cgroup v1 hierarchy (hybrid hosts): where it is mounted and which controllers it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupV1 {
    /// Where it is mounted (e.g. `/sys/fs/cgroup/memory`).
    mount: PathBuf,
    /// The cgroup path of the mount's root, as `/proc/<pid>/cgroup` shows paths.
    root: String,
    /// The controllers bound to it (`cpu`, `cpuacct` for a `cpu,cpuacct` mount).
    controllers: Vec<String>,
}

impl CgroupV1 {
    /// Every v1 hierarchy with a controller mounted in this mount namespace.
    pub fn find_all() -> Result<Vec<CgroupV1>, CgroupError> {
        let text = fs::read_to_string("/proc/self/mountinfo").map_err(CgroupError::MountInfo)?;
        Ok(Self::all_from_mountinfo(&text))
    }

    /// The v1 hierarchy that has `controller`, if one is mounted.
    pub fn find(controller: &str) -> Option<CgroupV1> {
        Self::find_all()
            .ok()?
            .into_iter()
            .find(|h| h.has(controller))
    }

    /// The v1 hierarchies in mountinfo text (`cgroup` mounts), one per hierarchy: of several
    /// mounts of one (bind mounts), the first whose root is `/`, else the first. Named
    /// hierarchies without a controller (`name=systemd`) are left out.
    pub fn all_from_mountinfo(text: &str) -> Vec<CgroupV1> {
        let mut found: Vec<(u64, CgroupV1)> = Vec::new();
        for m in mount_entries(text).filter(|m| m.fstype == "cgroup") {
            let controllers: Vec<String> = m
                .super_options
                .split(',')
                .filter(|o| !o.is_empty() && !o.contains('=') && !V1_MOUNT_OPTIONS.contains(o))
                .map(str::to_string)
                .collect();
            if controllers.is_empty() {
                continue;
            }
            let h = CgroupV1 {
                mount: m.mount_point,
                root: m.root,
                controllers,
            };
            match found.iter_mut().find(|(dev, _)| *dev == m.dev) {
                Some((_, seen)) if seen.root != "/" && h.root == "/" => *seen = h,
                Some(_) => {}
                None => found.push((m.dev, h)),
            }
        }
        found.into_iter().map(|(_, h)| h).collect()
    }

    /// A hierarchy with `controllers` mounted at `mount`, whose root is the cgroup path `root`.
    pub fn new(mount: impl Into<PathBuf>, root: impl Into<String>, controllers: &[&str]) -> Self {
        CgroupV1 {
            mount: mount.into(),
            root: root.into(),
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
        }
    }

    /// Where it is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// The controllers bound to it.
    pub fn controllers(&self) -> &[String] {
        &self.controllers
    }

    /// Whether `controller` is bound to it.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// `<mount>/clawfs`.
    pub fn base_dir(&self) -> PathBuf {
        self.mount.join(BASE_DIR)
    }

    /// `<mount>/clawfs/agent-<agent>`.
    pub fn agent_dir(&self, agent: &str) -> PathBuf {
        agent_group_dir(&self.mount, agent)
    }

    /// The agent whose group in this hierarchy holds `cgroup_path` (as in the hierarchy's line of
    /// `/proc/<pid>/cgroup`), anchored at the mount's root like [`Cgroup2::agent_of_path`].
    pub fn agent_of_path(&self, cgroup_path: &str) -> Option<String> {
        agent_under(&self.root, cgroup_path)
    }
}

/// One write into a cgroup v1 group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V1Write {
    /// The interface file.
    pub file: &'static str,
    /// What is written.
    pub value: String,
    /// Leave it out when the file does not exist (rather than fail the limit).
    pub optional: bool,
}

impl V1Write {
    fn new(file: &'static str, value: impl Into<String>) -> V1Write {
        V1Write {
            file,
            value: value.into(),
            optional: false,
        }
    }
}

/// How a quotas.json key (a cgroup v2 interface file) is enforced in cgroup v1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum V1Limit {
    /// These writes, in this order, into the agent's v1 group.
    Writes(Vec<V1Write>),
    /// cgroup v1 has nothing equivalent (the limit is not enforced), and why.
    NoEquivalent(String),
    /// The value cannot be translated.
    Invalid(String),
}

/// A byte count as the kernel's `memparse` reads it: digits with an optional K, M, G, T, P or E
/// (either case).
fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, shift) = match s.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&s[..s.len() - 1], 10),
        b'm' => (&s[..s.len() - 1], 20),
        b'g' => (&s[..s.len() - 1], 30),
        b't' => (&s[..s.len() - 1], 40),
        b'p' => (&s[..s.len() - 1], 50),
        b'e' => (&s[..s.len() - 1], 60),
        _ => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// The cgroup v1 form of the quotas.json key `key` (its value is `limits[key]`; `memory.swap.max`
/// also needs `memory.max`):
///
/// - `pids.max` N or `max` → `pids.max` N or `max`;
/// - `memory.max` M or `max` → `memory.limit_in_bytes` M or -1 (after resetting
///   `memory.memsw.limit_in_bytes` to -1, if it exists: memory+swap may never be below memory);
/// - `memory.swap.max` S or `max` → `memory.memsw.limit_in_bytes` M+S or -1 (v1 limits memory
///   and swap only together, so a finite S needs a finite `memory.max`);
/// - `cpu.max` `"Q P"` or `"Q"` (Q a number or `max`) → `cpu.cfs_period_us` P, then
///   `cpu.cfs_quota_us` Q or -1;
/// - `cpu.weight` W → `cpu.shares` W×1024/100 (the defaults, 100 and 1024, match).
///
/// Any other key of those controllers has no v1 equivalent.
pub fn v1_limit(key: &str, limits: &BTreeMap<String, String>) -> V1Limit {
    let Some(value) = limits.get(key).map(|v| v.trim()) else {
        return V1Limit::Invalid(format!("no value for {key}"));
    };
    let bad = |what: &str| V1Limit::Invalid(format!("{value:?} is not {what}"));
    match key {
        "pids.max" => {
            if value != "max" && value.parse::<u64>().is_err() {
                return bad("a number or \"max\"");
            }
            V1Limit::Writes(vec![V1Write::new("pids.max", value)])
        }
        "memory.max" => {
            let bytes = match value {
                "max" => "-1".to_string(),
                v => match parse_bytes(v) {
                    Some(n) => n.to_string(),
                    None => return bad("a byte count or \"max\""),
                },
            };
            // Memory plus swap may never be below memory: lift a limit left by an earlier
            // setting first (memory.swap.max, written after this, sets it again).
            V1Limit::Writes(vec![
                V1Write {
                    optional: true,
                    ..V1Write::new("memory.memsw.limit_in_bytes", "-1")
                },
                V1Write::new("memory.limit_in_bytes", bytes),
            ])
        }
        "memory.swap.max" => {
            let memsw = if value == "max" {
                "-1".to_string()
            } else {
                let Some(swap) = parse_bytes(value) else {
                    return bad("a byte count or \"max\"");
                };
                let memory = limits
                    .get("memory.max")
                    .map(|m| m.trim())
                    .filter(|m| *m != "max");
                let Some(memory) = memory else {
                    return V1Limit::NoEquivalent(
                        "cgroup v1 limits memory and swap only together \
                         (memory.memsw.limit_in_bytes): set memory.max as well"
                            .to_string(),
                    );
                };
                match parse_bytes(memory).and_then(|m| m.checked_add(swap)) {
                    Some(total) => total.to_string(),
                    None => {
                        return V1Limit::Invalid(format!(
                            "memory.max {memory:?} plus {value:?} is not a byte count"
                        ))
                    }
                }
            };
            V1Limit::Writes(vec![V1Write::new("memory.memsw.limit_in_bytes", memsw)])
        }
        "cpu.max" => {
            let mut parts = value.split_whitespace();
            let (quota, period) = (parts.next(), parts.next());
            if parts.next().is_some() {
                return bad("\"QUOTA PERIOD\"");
            }
            let quota = match quota {
                Some("max") => "-1".to_string(),
                Some(q) if q.parse::<u64>().is_ok() => q.to_string(),
                _ => return bad("\"QUOTA PERIOD\" (QUOTA a number or \"max\")"),
            };
            let mut writes = Vec::new();
            if let Some(p) = period {
                if p.parse::<u64>().is_err() {
                    return bad("\"QUOTA PERIOD\" (PERIOD a number)");
                }
                writes.push(V1Write::new("cpu.cfs_period_us", p));
            }
            writes.push(V1Write::new("cpu.cfs_quota_us", quota));
            V1Limit::Writes(writes)
        }
        "cpu.weight" => match value.parse::<u64>() {
            Ok(w @ 1..=10000) => V1Limit::Writes(vec![V1Write::new(
                "cpu.shares",
                (w * 1024 / 100).max(2).to_string(),
            )]),
            _ => bad("a weight from 1 to 10000"),
        },
        _ => V1Limit::NoEquivalent(format!("cgroup v1 has no equivalent of {key}")),
    }
}

/// Whether `name` is a valid agent name (`[a-z0-9-]+`, ≤ 64 bytes, no hyphen at either end).
pub fn valid_agent(name: &str) -> bool {
    clawfs_store::names::check_system_name(std::ffi::OsStr::new(name)).is_ok()
}

/// What happened to each controller `enable_controllers` was asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerReport {
    /// Controllers now enabled for the children.
    pub enabled: Vec<String>,
    /// Controllers that could not be enabled, with the reason.
    pub not_enabled: Vec<(String, String)>,
}

/// What happened to each limit `apply_limits` was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitReport {
    /// Limits written.
    pub applied: Vec<String>,
    /// Limits whose interface file does not exist here (controller not enabled or not built).
    pub skipped: Vec<(String, String)>,
    /// Limits whose write failed (EPERM, EINVAL, …), with the reason.
    pub failed: Vec<(String, String)>,
}

impl LimitReport {
    /// Whether every limit was applied.
    pub fn complete(&self) -> bool {
        self.skipped.is_empty() && self.failed.is_empty()
    }
}

fn errno_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => format!("permission denied ({e})"),
        _ => e.to_string(),
    }
}

/// Checks a limit key: `<controller>.<file>` with lowercase letters, digits, `_` and `.`, and
/// not a core `cgroup.*` file (so a quota can never be `cgroup.procs`).
pub fn check_limit_key(key: &str) -> Result<(), CgroupError> {
    let bad = |reason| CgroupError::InvalidLimit {
        key: key.to_string(),
        reason,
    };
    let (controller, file) = key
        .split_once('.')
        .ok_or_else(|| bad("expected <controller>.<file>, like memory.max"))?;
    if controller.is_empty()
        || file.is_empty()
        || !controller.bytes().all(|b| b.is_ascii_lowercase())
        || !file
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
    {
        return Err(bad("expected <controller>.<file>, like memory.max"));
    }
    if controller == "cgroup" {
        return Err(bad("cgroup.* files are not limits"));
    }
    Ok(())
}

/// One cgroup directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    dir: PathBuf,
}

impl Group {
    /// The group at `dir` (not checked).
    pub fn at(dir: impl Into<PathBuf>) -> Group {
        Group { dir: dir.into() }
    }

    /// Creates the group at `dir` (its parent must exist), mode 0755 at most; an existing group
    /// is fine.
    pub fn create(dir: impl Into<PathBuf>) -> Result<Group, CgroupError> {
        let dir = dir.into();
        match mkdir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create", &dir)(e)),
        }
        Ok(Group { dir })
    }

    /// The group's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn read(&self, file: &str) -> Result<String, CgroupError> {
        let p = self.dir.join(file);
        fs::read_to_string(&p).map_err(io_err("read", &p))
    }

    /// The controllers this group's parent offers it (`cgroup.controllers`).
    pub fn controllers(&self) -> Result<Vec<String>, CgroupError> {
        Ok(self
            .read("cgroup.controllers")?
            .split_whitespace()
            .map(str::to_string)
            .collect())
    }

    /// Enables `controllers` for this group's children (`+c` in `cgroup.subtree_control`), one
    /// at a time so that one refusal does not hide the others. Never fails: what could not be
    /// enabled is in the report with the reason.
    pub fn enable_controllers(&self, controllers: &[&str]) -> ControllerReport {
        let mut report = ControllerReport::default();
        let available = self.controllers().unwrap_or_default();
        let file = self.dir.join("cgroup.subtree_control");
        for &c in controllers {
            if !available.iter().any(|a| a == c) {
                report.not_enabled.push((
                    c.to_string(),
                    format!(
                        "not offered in {} (cgroup.controllers: {:?}; on a hybrid host it may be bound to cgroup v1)",
                        self.dir.display(),
                        available.join(" ")
                    ),
                ));
                continue;
            }
            let write = OpenOptions::new()
                .write(true)
                .open(&file)
                .and_then(|mut f| f.write_all(format!("+{c}").as_bytes()));
            match write {
                Ok(()) => report.enabled.push(c.to_string()),
                Err(e) => report.not_enabled.push((
                    c.to_string(),
                    format!("writing {}: {}", file.display(), errno_text(&e)),
                )),
            }
        }
        report
    }

    /// Writes each `key → value` to the file `key` of this group. Keys are checked first (an
    /// invalid key fails the whole call, nothing written); a key whose file does not exist is
    /// skipped, a write the kernel refuses (EPERM without CAP_SYS_RESOURCE, EINVAL, …) is
    /// reported as failed. Neither stops the others.
    pub fn apply_limits(
        &self,
        limits: &BTreeMap<String, String>,
    ) -> Result<LimitReport, CgroupError> {
        for key in limits.keys() {
            check_limit_key(key)?;
        }
        let mut report = LimitReport::default();
        for (key, value) in limits {
            let file = self.dir.join(key);
            let write = OpenOptions::new()
                .write(true)
                .open(&file)
                .and_then(|mut f| f.write_all(value.as_bytes()));
            match write {
                Ok(()) => report.applied.push(key.clone()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let controller = key.split('.').next().unwrap_or(key);
                    report.skipped.push((
                        key.clone(),
                        format!("no {key} here (the {controller} controller is not enabled for this group)"),
                    ))
                }
                Err(e) => report.failed.push((
                    key.clone(),
                    format!("writing {value:?}: {}", errno_text(&e)),
                )),
            }
        }
        Ok(report)
    }

    /// Opens `cgroup.procs` for writing. Writing `0` to it moves the writer into the group:
    /// open it before `fork`, write in the child (async-signal-safe), as `clawfs run` does.
    pub fn procs_file(&self) -> Result<File, CgroupError> {
        let p = self.dir.join("cgroup.procs");
        OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(io_err("open", &p))
    }

    /// Opens a cgroup v1 group's `tasks` file for writing. Writing `0` to it moves the writing
    /// thread alone: for a single-threaded child between fork and exec that is the whole process,
    /// and unlike a `cgroup.procs` write it does not take the kernel's global threadgroup lock
    /// (whose write side waits for an RCU grace period, 5 to 20 ms).
    pub fn tasks_file(&self) -> Result<File, CgroupError> {
        let p = self.dir.join("tasks");
        OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(io_err("open", &p))
    }

    /// Opens the group's directory, as `clone3(CLONE_INTO_CGROUP)` takes it.
    pub fn dir_file(&self) -> Result<File, CgroupError> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&self.dir)
            .map_err(io_err("open", &self.dir))
    }

    /// Moves process `pid` (0: the caller) into the group.
    pub fn add_pid(&self, pid: u32) -> Result<(), CgroupError> {
        let p = self.dir.join("cgroup.procs");
        self.procs_file()?
            .write_all(pid.to_string().as_bytes())
            .map_err(io_err("write", &p))
    }

    /// The processes in the group itself (not its sub-groups).
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        Ok(self
            .read("cgroup.procs")?
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    /// Whether the group has a process in it or (cgroup v2 only) in a sub-group: `populated` in
    /// `cgroup.events` where there is one, else (cgroup v1) a non-empty `cgroup.procs`.
    pub fn has_processes(&self) -> Result<bool, CgroupError> {
        if self.dir.join("cgroup.events").exists() {
            self.is_populated()
        } else {
            Ok(!self.pids()?.is_empty())
        }
    }

    /// Writes the cgroup v1 form of the limits whose controller is one of `controllers` (see
    /// [`v1_limit`]; `limits` holds cgroup v2 keys) to this v1 group. As [`Self::apply_limits`]:
    /// a missing file skips the limit, a refused write fails it; neither stops the others. Also
    /// returns, for each limit applied, what was written.
    pub fn apply_v1_limits(
        &self,
        limits: &BTreeMap<String, String>,
        controllers: &[String],
    ) -> (LimitReport, Vec<(String, String)>) {
        let mut report = LimitReport::default();
        let mut written = Vec::new();
        for key in limits.keys() {
            let controller = key.split('.').next().unwrap_or(key);
            if !controllers.iter().any(|c| c == controller) {
                continue;
            }
            let writes = match v1_limit(key, limits) {
                V1Limit::Writes(w) => w,
                V1Limit::NoEquivalent(why) => {
                    report.skipped.push((
                        key.clone(),
                        format!("{why}; {controller} is a cgroup v1 controller here"),
                    ));
                    continue;
                }
                V1Limit::Invalid(why) => {
                    report.failed.push((key.clone(), why));
                    continue;
                }
            };
            let mut done = Vec::new();
            let mut outcome = Ok(());
            for w in &writes {
                let file = self.dir.join(w.file);
                let write = OpenOptions::new()
                    .write(true)
                    .open(&file)
                    .and_then(|mut f| f.write_all(w.value.as_bytes()));
                match write {
                    // The optional writes only prepare the others.
                    Ok(()) if w.optional => {}
                    Ok(()) => done.push(format!("{}={}", w.file, w.value)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound && w.optional => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        outcome = Err((
                            true,
                            format!(
                                "no {} in {} (cgroup v1; not built into this kernel or turned off)",
                                w.file,
                                self.dir.display()
                            ),
                        ));
                        break;
                    }
                    Err(e) => {
                        outcome = Err((
                            false,
                            format!(
                                "writing {:?} to {}: {}",
                                w.value,
                                file.display(),
                                errno_text(&e)
                            ),
                        ));
                        break;
                    }
                }
            }
            match outcome {
                Ok(()) => {
                    report.applied.push(key.clone());
                    written.push((key.clone(), done.join(" ")));
                }
                Err((true, why)) => report.skipped.push((key.clone(), why)),
                Err((false, why)) => report.failed.push((key.clone(), why)),
            }
        }
        (report, written)
    }

    /// Whether the group or any sub-group has a live process (`populated` in `cgroup.events`).
    pub fn is_populated(&self) -> Result<bool, CgroupError> {
        let events = self.read("cgroup.events")?;
        Ok(events
            .lines()
            .find_map(|l| l.strip_prefix("populated "))
            .is_some_and(|v| v.trim() != "0"))
    }

    /// Waits until the group has no process left. `cgroup.events` is polled (kernfs wakes
    /// `POLLPRI` waiters when `populated` changes) and re-read at least every 500 ms in case a
    /// wake-up is missed. Not inotify: closing an inotify descriptor waits for an SRCU grace
    /// period, 5 to 15 ms that every `clawfs run` would pay. `None`: no time limit.
    pub fn wait_empty(&self, timeout: Option<Duration>) -> Result<(), CgroupError> {
        let path = self.dir.join("cgroup.events");
        let mut file = File::open(&path).map_err(io_err("open", &path))?;
        let start = Instant::now();
        let mut text = String::new();
        loop {
            text.clear();
            file.seek(io::SeekFrom::Start(0))
                .and_then(|_| file.read_to_string(&mut text))
                .map_err(io_err("read", &path))?;
            let populated = text
                .lines()
                .find_map(|l| l.strip_prefix("populated "))
                .is_some_and(|v| v.trim() != "0");
            if !populated {
                return Ok(());
            }
            let mut slice = Duration::from_millis(500);
            if let Some(t) = timeout {
                let left = t.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Err(CgroupError::Timeout {
                        path: self.dir.clone(),
                        waited: t,
                    });
                }
                slice = slice.min(left);
            }
            let mut pfd = libc::pollfd {
                fd: file.as_raw_fd(),
                events: libc::POLLPRI,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, slice.as_millis() as libc::c_int) };
        }
    }

    /// Removes the group. `Ok(false)` when it is busy (processes or sub-groups left) or already
    /// gone; only other errors fail.
    pub fn remove(&self) -> Result<bool, CgroupError> {
        match fs::remove_dir(&self.dir) {
            Ok(()) => Ok(true),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EBUSY) | Some(libc::ENOTEMPTY) | Some(libc::ENOENT)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(io_err("remove", &self.dir)(e)),
        }
    }
}

fn mkdir(dir: &Path) -> io::Result<()> {
    // Never group- or world-writable, whatever the umask.
    fs::DirBuilder::new().mode(0o755).create(dir)
}

/// Creates (or joins) the agent group `agent_dir` and a leaf `run-<run_id>` in it. Concurrent runs
/// of one agent share the agent group; one that removes it as it finishes cannot pull it from
/// under another one being set up (creation is retried).
fn create_agent_and_run(agent_dir: &Path, run_id: u32) -> Result<(Group, Group), CgroupError> {
    let run_dir = agent_dir.join(format!("{RUN_PREFIX}{run_id}"));
    let mut attempts = 0;
    loop {
        let agent_group = Group::create(agent_dir)?;
        match mkdir(&run_dir) {
            Ok(()) => return Ok((agent_group, Group::at(&run_dir))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Ok((agent_group, Group::at(&run_dir)))
            }
            // Another run removed the agent's (then empty) group between our two mkdirs.
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 20 => attempts += 1,
            Err(e) => return Err(io_err("create", &run_dir)(e)),
        }
    }
}

/// Removes empty `run-<pid>` leaves of `agent` whose `clawfs run` is gone (killed before cleaning
/// up), except `own`'s.
fn sweep_stale(agent: &Group, own: u32) {
    let Ok(entries) = fs::read_dir(agent.path()) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUN_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let leaf = Group::at(e.path());
        if pid != own && !pid_alive(pid) && leaf.has_processes().ok() == Some(false) {
            let _ = leaf.remove();
        }
    }
}

/// Removes a run's leaf (which must be empty). A leaf that just emptied can report EBUSY for a
/// moment: retried for up to 2 s.
fn remove_leaf(leaf: &Group) -> Result<(), CgroupError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !leaf.remove()? && leaf.path().exists() {
        if Instant::now() > deadline {
            return Err(io_err("remove", leaf.path())(io::Error::from_raw_os_error(
                libc::EBUSY,
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A run's groups in one cgroup v1 hierarchy (hybrid hosts): the agent's group, which holds the
/// limits, and the run's leaf, which holds its processes.
#[derive(Clone, Debug)]
pub struct V1Group {
    controllers: Vec<String>,
    agent: Group,
    run: Group,
}

impl V1Group {
    /// Creates `<mount>/clawfs/agent-<agent>/run-<run_id>` in `hierarchy`, for `controllers`.
    fn create(
        hierarchy: &CgroupV1,
        agent: &str,
        run_id: u32,
        controllers: Vec<String>,
    ) -> Result<V1Group, CgroupError> {
        Group::create(hierarchy.base_dir())?;
        let (agent, run) = create_agent_and_run(&hierarchy.agent_dir(agent), run_id)?;
        Ok(V1Group {
            controllers,
            agent,
            run,
        })
    }

    /// The controllers `clawfs run` uses from this hierarchy.
    pub fn controllers(&self) -> &[String] {
        &self.controllers
    }

    /// The agent's group in this hierarchy (its limits).
    pub fn agent(&self) -> &Group {
        &self.agent
    }

    /// The run's leaf in this hierarchy, where its processes go.
    pub fn run(&self) -> &Group {
        &self.run
    }
}

/// The groups of one `clawfs run`: the agent's group and the run's own leaf inside it, and the
/// same pair in each cgroup v1 hierarchy used for a controller cgroup v2 does not offer.
#[derive(Debug)]
pub struct RunGroup {
    agent: Group,
    run: Group,
    v1: Vec<V1Group>,
}

/// What setting up a run's groups did about controllers and limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetupReport {
    /// Controllers asked for in `clawfs/`'s (and, if needed, the hierarchy root's) subtree_control.
    pub controllers: ControllerReport,
    /// Controllers cgroup v2 did not enable, used through cgroup v1 instead (`enabled`), or that
    /// no v1 hierarchy could provide either although one is mounted (`not_enabled`, with why).
    pub v1: ControllerReport,
    /// Every limit: written to the agent's v2 group, or in its v1 form to its v1 group.
    pub limits: LimitReport,
    /// The limits applied through cgroup v1: key and the v1 files written (`memory.max` →
    /// `memory.limit_in_bytes=67108864`).
    pub v1_limits: Vec<(String, String)>,
}

impl SetupReport {
    /// One line naming every controller and limit that is not in force, or `None` if all are.
    pub fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.limits.skipped.is_empty() {
            let keys: Vec<String> = self
                .limits
                .skipped
                .iter()
                .map(|(k, why)| format!("{k} ({why})"))
                .collect();
            parts.push(format!("not enforced: {}", keys.join(", ")));
        }
        for (k, why) in &self.limits.failed {
            parts.push(format!("{k} not applied: {why}"));
        }
        // Controllers that neither cgroup v2 nor cgroup v1 provides.
        let missing: Vec<&(String, String)> = self
            .controllers
            .not_enabled
            .iter()
            .filter(|(c, _)| !self.v1.enabled.contains(c))
            .collect();
        if let Some((first, why)) = missing.first() {
            let names: Vec<&str> = missing.iter().map(|(c, _)| c.as_str()).collect();
            let v1 = match self.v1.not_enabled.iter().find(|(c, _)| c == first) {
                Some((_, v1why)) => format!("; cgroup v1: {v1why}"),
                None => String::new(),
            };
            parts.push(format!(
                "controllers not enabled: {} ({first}: {why}{v1})",
                names.join(", ")
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// One line saying what cgroup v1 provides, or `None` when nothing comes from it.
    pub fn v1_summary(&self) -> Option<String> {
        if self.v1.enabled.is_empty() {
            return None;
        }
        let mut line = format!(
            "controllers through cgroup v1: {}",
            self.v1.enabled.join(", ")
        );
        if !self.v1_limits.is_empty() {
            let limits: Vec<String> = self
                .v1_limits
                .iter()
                .map(|(k, w)| format!("{k} as {w}"))
                .collect();
            line.push_str(&format!("; limits: {}", limits.join(", ")));
        }
        Some(line)
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

impl RunGroup {
    /// Creates (or joins) `clawfs/agent-<agent>` and a fresh `run-<run_id>` leaf in it, enables
    /// `controllers` for agent groups, writes `limits` to the agent's group, and removes empty
    /// leaves left by runs that died without cleaning up. Concurrent runs of one agent share the
    /// agent group; one that removes it as it finishes cannot pull it from under another one
    /// being set up (creation is retried). A controller that cgroup v2 cannot enable is used from
    /// the v1 hierarchy mounted for it, if any (see [`Self::create_with_v1`]).
    pub fn create(
        cg: &Cgroup2,
        agent: &str,
        run_id: u32,
        controllers: &[&str],
        limits: &BTreeMap<String, String>,
    ) -> Result<(RunGroup, SetupReport), CgroupError> {
        let v1 = CgroupV1::find_all().unwrap_or_default();
        Self::create_with_v1(cg, &v1, agent, run_id, controllers, limits)
    }

    /// [`Self::create`], with `v1` as the cgroup v1 hierarchies to fall back on: for each
    /// controller of `controllers` that cgroup v2 did not enable and one of them has, the run also
    /// gets `<v1 mount>/clawfs/agent-<agent>/run-<run_id>`, and that controller's limits go, in
    /// their v1 form, to the v1 agent group. A v1 group that cannot be made is reported (its
    /// limits as not enforced), not an error: the v2 group alone gives the run its identity.
    pub fn create_with_v1(
        cg: &Cgroup2,
        v1: &[CgroupV1],
        agent: &str,
        run_id: u32,
        controllers: &[&str],
        limits: &BTreeMap<String, String>,
    ) -> Result<(RunGroup, SetupReport), CgroupError> {
        if !valid_agent(agent) {
            return Err(CgroupError::InvalidAgent(agent.to_string()));
        }
        for key in limits.keys() {
            check_limit_key(key)?;
        }
        let mut report = SetupReport::default();
        let root = Group::at(cg.mount_point());
        let base = Group::create(cg.base_dir())?;
        // The base can offer only what the hierarchy root enables for its children.
        let offered = base.controllers().unwrap_or_default();
        let missing: Vec<&str> = controllers
            .iter()
            .copied()
            .filter(|c| !offered.iter().any(|o| o == c))
            .collect();
        if !missing.is_empty() {
            let r = root.enable_controllers(&missing);
            report.controllers.not_enabled = r.not_enabled;
        }
        let from_root: Vec<&str> = controllers
            .iter()
            .copied()
            .filter(|c| !report.controllers.not_enabled.iter().any(|(n, _)| n == c))
            .collect();
        let r = base.enable_controllers(&from_root);
        report.controllers.enabled = r.enabled;
        report.controllers.not_enabled.extend(r.not_enabled);

        let (agent_group, run) = create_agent_and_run(&cg.agent_dir(agent), run_id)?;

        // What cgroup v2 could not enable, from the v1 hierarchy that has it (one set of groups
        // per hierarchy, even if it has several of those controllers).
        let mut v1_groups: Vec<V1Group> = Vec::new();
        for hierarchy in v1 {
            let wanted: Vec<String> = report
                .controllers
                .not_enabled
                .iter()
                .map(|(c, _)| c.clone())
                .filter(|c| hierarchy.has(c) && !report.v1.enabled.contains(c))
                .collect();
            if wanted.is_empty() {
                continue;
            }
            match V1Group::create(hierarchy, agent, run_id, wanted.clone()) {
                Ok(g) => {
                    report.v1.enabled.extend(wanted);
                    v1_groups.push(g);
                }
                Err(e) => {
                    for c in wanted {
                        report.v1.not_enabled.push((c, e.to_string()));
                    }
                }
            }
        }

        // Our leaves keep the agent groups alive from here on.
        let (v1_keys, v2_keys): (BTreeMap<String, String>, BTreeMap<String, String>) =
            limits.clone().into_iter().partition(|(k, _)| {
                let controller = k.split('.').next().unwrap_or(k);
                report.v1.enabled.iter().any(|c| c == controller)
            });
        report.limits = agent_group.apply_limits(&v2_keys)?;
        for g in &v1_groups {
            let (r, written) = g.agent.apply_v1_limits(&v1_keys, &g.controllers);
            report.limits.applied.extend(r.applied);
            report.limits.skipped.extend(r.skipped);
            report.limits.failed.extend(r.failed);
            report.v1_limits.extend(written);
        }
        let group = RunGroup {
            agent: agent_group,
            run,
            v1: v1_groups,
        };
        sweep_stale(&group.agent, run_id);
        for g in &group.v1 {
            sweep_stale(&g.agent, run_id);
        }
        Ok((group, report))
    }

    /// The agent's group.
    pub fn agent(&self) -> &Group {
        &self.agent
    }

    /// This run's leaf, where its processes go.
    pub fn run(&self) -> &Group {
        &self.run
    }

    /// The run's groups in cgroup v1 hierarchies (hybrid hosts only; its processes go into each
    /// [`V1Group::run`] as well).
    pub fn v1(&self) -> &[V1Group] {
        &self.v1
    }

    /// Removes the run's leaf (which must be empty: see [`Group::wait_empty`]) and then the agent's
    /// group if no other run uses it; the same in each v1 hierarchy (whose leaves empty with the v2
    /// one: the run's processes are in both, and cannot leave either). Returns whether the
    /// agent's v2 group was removed; the first error, if any, once everything was tried.
    pub fn remove(&self) -> Result<bool, CgroupError> {
        let v2 = remove_leaf(&self.run).and_then(|()| self.agent.remove());
        let mut v1_error = None;
        for g in &self.v1 {
            if let Err(e) = remove_leaf(&g.run).and_then(|()| g.agent.remove()) {
                v1_error.get_or_insert(e);
            }
        }
        let removed = v2?;
        match v1_error {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }
}

// ---- emergency stop: freeze and kill -----------------------------------------------------------

/// What an emergency stop did to one run group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillReport {
    /// The agent.
    pub agent: String,
    /// The run group (`<cgroup2>/clawfs/agent-<NAME>/run-<PID>`).
    pub group: PathBuf,
    /// The processes it held when the stop began (more may have been forked and killed).
    pub pids: Vec<u32>,
    /// Whether the group was frozen first (`cgroup.freeze`).
    pub frozen: bool,
    /// How it was killed: `cgroup.kill` or `sigkill` (SIGKILL to every pid until empty).
    pub method: &'static str,
    /// Whether the group was empty when done.
    pub empty: bool,
}

impl Group {
    /// Freezes (`true`) or thaws the group and its sub-groups (cgroup v2 `cgroup.freeze`).
    /// `Ok(false)`: this group has no `cgroup.freeze` (the root, or a kernel before 5.2). A
    /// freeze is waited for (`frozen 1` in `cgroup.events`) at most `wait`.
    pub fn freeze(&self, on: bool, wait: Duration) -> Result<bool, CgroupError> {
        let file = self.dir.join("cgroup.freeze");
        if !file.exists() {
            return Ok(false);
        }
        OpenOptions::new()
            .write(true)
            .open(&file)
            .and_then(|mut f| f.write_all(if on { b"1" } else { b"0" }))
            .map_err(io_err("write", &file))?;
        let start = Instant::now();
        while on && start.elapsed() < wait {
            let frozen = self
                .read("cgroup.events")
                .map(|e| e.lines().any(|l| l.trim() == "frozen 1"))
                .unwrap_or(true);
            if frozen {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(true)
    }

    /// Kills every process of the group and its sub-groups: frozen first where the kernel can
    /// (so nothing forks while it is being killed), then `cgroup.kill` (Linux ≥ 5.14, atomic:
    /// a fork in progress is killed too), else SIGKILL to each pid in `cgroup.procs`, again and
    /// again until it is empty. Waits at most `timeout` for the group to empty.
    pub fn kill_all(
        &self,
        timeout: Duration,
    ) -> Result<(Vec<u32>, bool, &'static str, bool), CgroupError> {
        let pids = self.pids().unwrap_or_default();
        let frozen = self
            .freeze(true, Duration::from_millis(500))
            .unwrap_or(false);
        let kill_file = self.dir.join("cgroup.kill");
        let method = match OpenOptions::new()
            .write(true)
            .open(&kill_file)
            .and_then(|mut f| f.write_all(b"1"))
        {
            Ok(()) => "cgroup.kill",
            Err(_) => "sigkill",
        };
        let start = Instant::now();
        let empty = loop {
            let left = self.pids().unwrap_or_default();
            let populated = match self.dir.join("cgroup.events").exists() {
                true => self.is_populated().unwrap_or(!left.is_empty()),
                false => !left.is_empty(),
            };
            if !populated {
                break true;
            }
            if start.elapsed() >= timeout {
                break false;
            }
            for pid in left {
                // SAFETY: kill(2) with a pid read from the group; no memory is touched.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // A frozen group left empty stays frozen for nothing; thaw it so it can be removed
        // and reused by the next run.
        if frozen {
            let _ = self.freeze(false, Duration::ZERO);
        }
        Ok((pids, frozen, method, empty))
    }
}

/// Every run group `<cgroup2>/clawfs/agent-*/run-*` with its agent.
pub fn agent_runs(cg: &Cgroup2) -> Vec<(String, Group)> {
    let mut out = Vec::new();
    let Ok(agents) = fs::read_dir(cg.base_dir()) else {
        return out;
    };
    for a in agents.flatten() {
        let name = a.file_name().to_string_lossy().into_owned();
        let Some(agent) = name.strip_prefix(AGENT_PREFIX) else {
            continue;
        };
        let Ok(runs) = fs::read_dir(a.path()) else {
            continue;
        };
        for r in runs.flatten() {
            let is_run = r.file_name().to_string_lossy().starts_with(RUN_PREFIX);
            if is_run && r.file_type().is_ok_and(|t| t.is_dir()) {
                out.push((agent.to_string(), Group::at(r.path())));
            }
        }
    }
    out.sort_by(|a, b| a.1.path().cmp(b.1.path()));
    out
}

/// Freezes and kills every agent run (see [`Group::kill_all`]); runs found empty are left out
/// of the report.
pub fn kill_all_agent_runs(timeout: Duration) -> Result<Vec<KillReport>, CgroupError> {
    kill_agent_runs(timeout, |_| true)
}

/// Like [`kill_all_agent_runs`] for the runs whose `clawfs run` pid (the `run-PID` of the
/// group) `keep` accepts, e.g. the runs of one store.
pub fn kill_agent_runs(
    timeout: Duration,
    keep: impl Fn(u32) -> bool,
) -> Result<Vec<KillReport>, CgroupError> {
    let cg = Cgroup2::find()?;
    let mut out = Vec::new();
    for (agent, group) in agent_runs(&cg) {
        let run_pid = group
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(RUN_PREFIX))
            .and_then(|p| p.parse().ok());
        if !run_pid.is_some_and(&keep) {
            continue;
        }
        if !group.has_processes().unwrap_or(true) {
            continue;
        }
        let (pids, frozen, method, empty) = group.kill_all(timeout)?;
        out.push(KillReport {
            agent,
            group: group.path().to_path_buf(),
            pids,
            frozen,
            method,
            empty,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const UNIFIED: &str = "\
25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn finds_the_cgroup2_mount() {
        let cg = Cgroup2::from_mountinfo(HYBRID).unwrap();
        assert_eq!(cg.mount_point(), Path::new("/sys/fs/cgroup/unified"));
        let cg = Cgroup2::from_mountinfo(UNIFIED).unwrap();
        assert_eq!(cg.mount_point(), Path::new("/sys/fs/cgroup"));
        assert_eq!(
            cg.agent_dir("fs-engine"),
            Path::new("/sys/fs/cgroup/clawfs/agent-fs-engine")
        );
        assert_eq!(
            Cgroup2::from_mountinfo("1 2 0:3 / /with\\040space rw - cgroup2 none rw\n")
                .unwrap()
                .mount_point(),
            Path::new("/with space")
        );
        assert!(Cgroup2::from_mountinfo(&HYBRID.replace("cgroup2", "tmpfs")).is_none());
        assert!(Cgroup2::from_mountinfo("").is_none());
    }

    #[test]
    fn agent_group_dir_layout() {
        assert_eq!(
            agent_group_dir(Path::new("/sys/fs/cgroup/unified"), "a1"),
            Path::new("/sys/fs/cgroup/unified/clawfs/agent-a1")
        );
    }

    #[test]
    fn agent_of_cgroup_file_contents() {
        let cg = Cgroup2::new("/sys/fs/cgroup", "/");
        let file = |v2: &str| format!("12:pids:/\n4:memory:/x\n0::{v2}\n");
        let cases = [
            ("/clawfs/agent-fs-engine", Some("fs-engine")),
            ("/clawfs/agent-fs-engine/run-1234", Some("fs-engine")),
            ("/clawfs/agent-a/run-1/nested/deeper", Some("a")),
            // A sub-group the agent (or anyone) made to look like another agent stays the outer one.
            ("/clawfs/agent-a/run-1/clawfs/agent-b", Some("a")),
            ("/", None),
            ("/clawfs", None),
            ("/clawfs/run-1", None),
            ("/clawfs/agent-", None),
            ("/clawfs/agent-Bad_Name", None),
            ("/clawfsx/agent-a", None),
            ("/user.slice/clawfs/agent-a", None),
            ("/user.slice/user-1000.slice/clawfs/agent-a/run-1", None),
        ];
        for (path, want) in cases {
            assert_eq!(
                cg.agent_of_cgroup_file(&file(path)).as_deref(),
                want,
                "{path}"
            );
        }
        // Only the v2 line counts.
        assert_eq!(
            cg.agent_of_cgroup_file("4:memory:/clawfs/agent-a\n0::/\n"),
            None
        );
        assert_eq!(
            cg.agent_of_cgroup_file("0::/clawfs/agent-a\n"),
            Some("a".into())
        );
        assert_eq!(cg.agent_of_cgroup_file(""), None);
        // A hierarchy whose mount shows a sub-tree: paths are anchored at its root.
        let sub = Cgroup2::new("/sys/fs/cgroup", "/machine/ct1");
        assert_eq!(
            sub.agent_of_cgroup_file("0::/machine/ct1/clawfs/agent-a/run-9\n"),
            Some("a".into())
        );
        assert_eq!(sub.agent_of_cgroup_file("0::/clawfs/agent-a\n"), None);
        assert_eq!(
            sub.agent_of_cgroup_file("0::/machine/ct1x/clawfs/agent-a\n"),
            None
        );
    }

    #[test]
    fn limit_keys() {
        for ok in [
            "memory.max",
            "pids.max",
            "cpu.max",
            "memory.swap.max",
            "io.bfq.weight",
        ] {
            check_limit_key(ok).unwrap();
        }
        for bad in [
            "cgroup.procs",
            "cgroup.subtree_control",
            "memory",
            ".max",
            "memory.",
            "../cgroup.procs",
            "memory.max/x",
            "Memory.max",
            "memory.max ",
        ] {
            assert!(check_limit_key(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn setup_warning_names_what_is_missing() {
        let mut r = SetupReport::default();
        assert_eq!(r.warning(), None);
        r.controllers
            .not_enabled
            .push(("memory".into(), "not offered".into()));
        r.limits
            .skipped
            .push(("memory.max".into(), "no memory.max here".into()));
        let w = r.warning().unwrap();
        assert!(w.contains("controllers not enabled: memory"), "{w}");
        assert!(
            w.contains("not enforced: memory.max (no memory.max here)"),
            "{w}"
        );
        assert_eq!(r.v1_summary(), None);

        // memory comes from cgroup v1: only what is still not in force is named.
        let mut r = SetupReport::default();
        for c in ["memory", "pids", "cpu"] {
            r.controllers
                .not_enabled
                .push((c.into(), "not offered".into()));
        }
        r.v1.enabled = vec!["memory".into(), "pids".into()];
        r.v1.not_enabled = vec![("cpu".into(), "create …: read-only file system".into())];
        r.limits.applied = vec!["memory.max".into(), "pids.max".into()];
        r.v1_limits = vec![("pids.max".into(), "pids.max=20".into())];
        let w = r.warning().unwrap();
        assert!(
            w.contains("controllers not enabled: cpu (cpu: not offered; cgroup v1: create"),
            "{w}"
        );
        assert!(!w.contains("memory") && !w.contains("pids"), "{w}");
        let s = r.v1_summary().unwrap();
        assert!(s.contains("through cgroup v1: memory, pids"), "{s}");
        assert!(s.contains("pids.max as pids.max=20"), "{s}");
        r.controllers.not_enabled.retain(|(c, _)| c != "cpu");
        assert_eq!(r.warning(), None);
    }

    const HYBRID_FULL: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:32 /machine /srv/memory rw,relatime - cgroup cgroup rw,memory
51 23 0:36 /sub /srv/pids rw,relatime - cgroup cgroup rw,pids
";

    #[test]
    fn finds_the_cgroup_v1_hierarchies() {
        let all = CgroupV1::all_from_mountinfo(HYBRID_FULL);
        // One per hierarchy (the bind mounts of a sub-tree are the same ones), none for systemd.
        assert_eq!(
            all,
            vec![
                CgroupV1::new("/sys/fs/cgroup/cpu,cpuacct", "/", &["cpu", "cpuacct"]),
                CgroupV1::new("/sys/fs/cgroup/memory", "/", &["memory"]),
                CgroupV1::new("/sys/fs/cgroup/pids", "/", &["pids"]),
            ]
        );
        // The root-mounted one wins even when a sub-tree mount comes first.
        let reordered = "\
50 23 0:32 /machine /srv/memory rw - cgroup cgroup rw,memory
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        assert_eq!(
            CgroupV1::all_from_mountinfo(reordered),
            vec![CgroupV1::new("/sys/fs/cgroup/memory", "/", &["memory"])]
        );
        assert_eq!(
            all[2].agent_dir("a"),
            Path::new("/sys/fs/cgroup/pids/clawfs/agent-a")
        );
        assert!(all[0].has("cpu") && !all[0].has("memory"));
        assert!(CgroupV1::all_from_mountinfo(UNIFIED).is_empty());
        let cg = Cgroup2::from_mountinfo(HYBRID_FULL).unwrap();
        assert_eq!(cg.mount_point(), Path::new("/sys/fs/cgroup/unified"));
    }

    #[test]
    fn identity_is_the_v2_line_only() {
        let cg = Cgroup2::new("/sys/fs/cgroup/unified", "/");
        let pids = CgroupV1::new("/sys/fs/cgroup/pids", "/", &["pids"]);
        let file = |v2: &str, v1: &str| {
            format!("9:name=systemd:/\n8:pids:{v1}\n4:memory:{v1}\n1:cpu,cpuacct:{v1}\n0::{v2}\n")
        };
        let run = "/clawfs/agent-a/run-7";
        // What `clawfs run` does on a hybrid host: the same layout everywhere.
        assert_eq!(
            cg.agent_of_cgroup_file(&file(run, run)).as_deref(),
            Some("a")
        );
        assert_eq!(pids.agent_of_path(run).as_deref(), Some("a"));
        // The v2 line decides; v1 lines never name anyone (a child still root in pre_exec is in
        // its v1 groups before its v2 one).
        assert_eq!(
            cg.agent_of_cgroup_file(&file(run, "/clawfs/agent-b/run-7"))
                .as_deref(),
            Some("a")
        );
        assert_eq!(cg.agent_of_cgroup_file(&file("/", run)), None);
        // v1 paths are anchored like v2 ones.
        let sub = CgroupV1::new("/srv/pids", "/ct1", &["pids"]);
        assert_eq!(
            sub.agent_of_path("/ct1/clawfs/agent-a/run-1").as_deref(),
            Some("a")
        );
        assert_eq!(sub.agent_of_path("/clawfs/agent-a/run-1"), None);
    }

    #[test]
    fn v1_translations() {
        let limits = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let writes = |key: &str, l: &BTreeMap<String, String>| -> Vec<(&'static str, String)> {
            match v1_limit(key, l) {
                V1Limit::Writes(w) => w.into_iter().map(|w| (w.file, w.value)).collect(),
                other => panic!("{key}: {other:?}"),
            }
        };
        let l = limits(&[
            ("pids.max", "20"),
            ("memory.max", "64M"),
            ("memory.swap.max", "0"),
            ("cpu.max", "50000 100000"),
            ("cpu.weight", "50"),
        ]);
        assert_eq!(writes("pids.max", &l), [("pids.max", "20".into())]);
        assert_eq!(
            writes("memory.max", &l),
            [
                ("memory.memsw.limit_in_bytes", "-1".into()),
                ("memory.limit_in_bytes", "67108864".into())
            ]
        );
        match v1_limit("memory.max", &l) {
            V1Limit::Writes(w) => assert!(w[0].optional && !w[1].optional),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            writes("memory.swap.max", &l),
            [("memory.memsw.limit_in_bytes", "67108864".into())]
        );
        assert_eq!(
            writes("cpu.max", &l),
            [
                ("cpu.cfs_period_us", "100000".into()),
                ("cpu.cfs_quota_us", "50000".into())
            ]
        );
        assert_eq!(writes("cpu.weight", &l), [("cpu.shares", "512".into())]);

        let l = limits(&[
            ("pids.max", "max"),
            ("memory.max", "1073741824"),
            ("memory.swap.max", "1G"),
            ("cpu.max", "max"),
            ("cpu.weight", "1"),
        ]);
        assert_eq!(writes("pids.max", &l), [("pids.max", "max".into())]);
        assert_eq!(
            writes("memory.swap.max", &l),
            [("memory.memsw.limit_in_bytes", "2147483648".into())]
        );
        assert_eq!(writes("cpu.max", &l), [("cpu.cfs_quota_us", "-1".into())]);
        assert_eq!(writes("cpu.weight", &l), [("cpu.shares", "10".into())]);
        let l = limits(&[("memory.max", "max"), ("memory.swap.max", "max")]);
        assert_eq!(
            writes("memory.max", &l)[1],
            ("memory.limit_in_bytes", "-1".into())
        );
        assert_eq!(
            writes("memory.swap.max", &l),
            [("memory.memsw.limit_in_bytes", "-1".into())]
        );

        // Swap alone cannot be limited in v1; nor can what v1 does not have.
        for l in [
            limits(&[("memory.swap.max", "0")]),
            limits(&[("memory.swap.max", "0"), ("memory.max", "max")]),
        ] {
            assert!(matches!(
                v1_limit("memory.swap.max", &l),
                V1Limit::NoEquivalent(_)
            ));
        }
        let l = limits(&[("memory.high", "1G"), ("pids.peak", "1")]);
        assert!(matches!(
            v1_limit("memory.high", &l),
            V1Limit::NoEquivalent(_)
        ));
        assert!(matches!(
            v1_limit("pids.peak", &l),
            V1Limit::NoEquivalent(_)
        ));

        for (key, value) in [
            ("pids.max", "-1"),
            ("pids.max", "lots"),
            ("memory.max", "1X"),
            ("memory.max", ""),
            ("memory.max", "99999999999E"),
            ("cpu.max", "fast"),
            ("cpu.max", "max 1 2"),
            ("cpu.max", "50000 often"),
            ("cpu.weight", "0"),
            ("cpu.weight", "10001"),
        ] {
            assert!(
                matches!(v1_limit(key, &limits(&[(key, value)])), V1Limit::Invalid(_)),
                "{key} {value:?}"
            );
        }
        let l = limits(&[("memory.max", "lots"), ("memory.swap.max", "0")]);
        assert!(matches!(
            v1_limit("memory.swap.max", &l),
            V1Limit::Invalid(_)
        ));
        assert_eq!(parse_bytes("2k"), Some(2048));
        assert_eq!(parse_bytes("3"), Some(3));
        assert_eq!(parse_bytes("M"), None);
    }

    /// On the real hierarchy (root only; otherwise reported and skipped): a run group, a process
    /// moved in and named by `agent_of_pid`, waiting for it to leave, removal.
    #[test]
    fn run_group_lifecycle() {
        let Ok(cg) = Cgroup2::find().map_err(|e| eprintln!("skipped: {e}")) else {
            return;
        };
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let agent = format!("core-test-{}", std::process::id());
        let limits = BTreeMap::from([("pids.max".to_string(), "50".to_string())]);
        let (group, report) =
            RunGroup::create(&cg, &agent, 1, &DEFAULT_CONTROLLERS, &limits).unwrap();
        // Either in force or reported, never silently dropped.
        assert_eq!(
            report.limits.applied.len() + report.limits.skipped.len() + report.limits.failed.len(),
            1
        );
        assert_eq!(group.agent().path(), cg.agent_dir(&agent));
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        group.run().add_pid(sleeper.id()).unwrap();
        assert_eq!(group.run().pids().unwrap(), vec![sleeper.id()]);
        assert_eq!(agent_of_pid(sleeper.id()).unwrap(), Some(agent.clone()));
        // Hybrid host: the controllers cgroup v2 lacks come from v1 (this limit too), in the
        // same layout, root-owned.
        for g in group.v1() {
            assert!(g.agent().path().ends_with(format!("clawfs/agent-{agent}")));
            assert!(g
                .run()
                .path()
                .ends_with(format!("clawfs/agent-{agent}/run-1")));
            g.run().add_pid(sleeper.id()).unwrap();
            assert!(g.run().has_processes().unwrap());
            let meta = fs::metadata(g.run().path().join("cgroup.procs")).unwrap();
            assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
            assert_eq!(std::os::unix::fs::MetadataExt::mode(&meta) & 0o022, 0);
            if g.controllers().iter().any(|c| c == "pids") {
                assert!(report.limits.applied.contains(&"pids.max".to_string()));
                let v = fs::read_to_string(g.agent().path().join("pids.max")).unwrap();
                assert_eq!(v.trim(), "50");
            }
        }
        if !report.controllers.enabled.iter().any(|c| c == "pids")
            && CgroupV1::find("pids").is_some()
        {
            assert!(
                group
                    .v1()
                    .iter()
                    .any(|g| g.controllers().iter().any(|c| c == "pids")),
                "{report:?}"
            );
        }
        let v1_agents: Vec<PathBuf> = group
            .v1()
            .iter()
            .map(|g| g.agent().path().to_path_buf())
            .collect();
        assert!(group.run().is_populated().unwrap());
        assert!(group.agent().is_populated().unwrap());
        assert!(matches!(
            group.run().wait_empty(Some(Duration::from_millis(100))),
            Err(CgroupError::Timeout { .. })
        ));
        // Busy: nothing removed, no error.
        assert!(!group.agent().remove().unwrap());
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        group
            .run()
            .wait_empty(Some(Duration::from_secs(5)))
            .unwrap();
        assert!(group.remove().unwrap());
        assert!(!cg.agent_dir(&agent).exists());
        for dir in v1_agents {
            assert!(!dir.exists(), "{}", dir.display());
        }
    }

    #[test]
    fn this_process_is_no_agent() {
        assert_eq!(agent_of_pid(std::process::id()).unwrap(), None);
        assert!(agent_of_pid(u32::MAX).is_err());
    }
}
