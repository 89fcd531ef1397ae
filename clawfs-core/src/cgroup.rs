//! cgroup v2 groups for agents (core, Linux-only): finding the hierarchy, creating an agent's
//! group and a per-run sub-group, enabling controllers, applying quotas, moving processes in,
//! waiting for a group to empty, removing it — and the reverse lookup the daemon uses to name
//! the agent behind a pid.
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

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::fs::inotify;

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
        let mut found: Vec<Cgroup2> = text
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let sep = fields.iter().position(|f| *f == "-")?;
                if *fields.get(sep + 1)? != "cgroup2" {
                    return None;
                }
                Some(Cgroup2 {
                    mount: PathBuf::from(crate::mountinfo::unescape(fields.get(4)?)),
                    root: crate::mountinfo::unescape(fields.get(3)?),
                })
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
        let root = self.root.trim_end_matches('/');
        let rest = cgroup_path.strip_prefix(root)?;
        let rest = rest.strip_prefix('/')?;
        let mut parts = rest.split('/');
        if parts.next()? != BASE_DIR {
            return None;
        }
        let name = parts.next()?.strip_prefix(AGENT_PREFIX)?;
        valid_agent(name).then(|| name.to_string())
    }

    /// The agent of a `/proc/<pid>/cgroup` text: its `0::` line through [`Self::agent_of_path`].
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

/// Whether `name` is a valid agent name (`[a-z0-9-]+`, ≤ 64 bytes, no hyphen at either end).
pub fn valid_agent(name: &str) -> bool {
    crate::names::check_system_name(std::ffi::OsStr::new(name)).is_ok()
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

    /// Creates the group at `dir` (its parent must exist); an existing group is fine.
    pub fn create(dir: impl Into<PathBuf>) -> Result<Group, CgroupError> {
        let dir = dir.into();
        match fs::create_dir(&dir) {
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

    /// Whether the group or any sub-group has a live process (`populated` in `cgroup.events`).
    pub fn is_populated(&self) -> Result<bool, CgroupError> {
        let events = self.read("cgroup.events")?;
        Ok(events
            .lines()
            .find_map(|l| l.strip_prefix("populated "))
            .is_some_and(|v| v.trim() != "0"))
    }

    /// Waits until the group has no process left, watching `cgroup.events` with inotify (the
    /// kernel signals a modification when `populated` changes) and re-reading at least every
    /// 500 ms in case a notification is missed. `None`: no time limit.
    pub fn wait_empty(&self, timeout: Option<Duration>) -> Result<(), CgroupError> {
        let events = self.dir.join("cgroup.events");
        let start = Instant::now();
        // Without inotify we still poll.
        let watch = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .and_then(|fd| {
                inotify::add_watch(&fd, &events, inotify::WatchFlags::MODIFY).map(|_| fd)
            })
            .ok();
        let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
        loop {
            if !self.is_populated()? {
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
            match &watch {
                Some(fd) => {
                    let mut pfd = libc::pollfd {
                        fd: fd.as_fd().as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call.
                    unsafe { libc::poll(&mut pfd, 1, slice.as_millis() as libc::c_int) };
                    let mut reader = inotify::Reader::new(fd, &mut buf);
                    while reader.next().is_ok() {}
                }
                None => std::thread::sleep(slice),
            }
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

/// The groups of one `clawfs run`: the agent's group and the run's own leaf inside it.
#[derive(Debug)]
pub struct RunGroup {
    agent: Group,
    run: Group,
}

/// What setting up a run's groups did about controllers and limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetupReport {
    /// Controllers asked for in `clawfs/`'s (and, if needed, the hierarchy root's) subtree_control.
    pub controllers: ControllerReport,
    /// Limits written to the agent's group.
    pub limits: LimitReport,
}

impl SetupReport {
    /// One line naming every controller and limit that is not in force, or `None` if all are.
    pub fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.limits.skipped.is_empty() {
            let keys: Vec<&str> = self
                .limits
                .skipped
                .iter()
                .map(|(k, _)| k.as_str())
                .collect();
            parts.push(format!("not enforced (no such file): {}", keys.join(", ")));
        }
        for (k, why) in &self.limits.failed {
            parts.push(format!("{k} not applied: {why}"));
        }
        if let Some((_, why)) = self.controllers.not_enabled.first() {
            let names: Vec<&str> = self
                .controllers
                .not_enabled
                .iter()
                .map(|(c, _)| c.as_str())
                .collect();
            parts.push(format!(
                "controllers not enabled: {} ({}: {why})",
                names.join(", "),
                names[0]
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
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
    /// being set up (creation is retried).
    pub fn create(
        cg: &Cgroup2,
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

        let agent_dir = cg.agent_dir(agent);
        let run_dir = agent_dir.join(format!("{RUN_PREFIX}{run_id}"));
        let mut attempts = 0;
        let (agent_group, run) = loop {
            let agent_group = Group::create(&agent_dir)?;
            match fs::create_dir(&run_dir) {
                Ok(()) => break (agent_group, Group::at(&run_dir)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    break (agent_group, Group::at(&run_dir))
                }
                // Another run removed the agent's (then empty) group between our two mkdirs.
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 20 => attempts += 1,
                Err(e) => return Err(io_err("create", &run_dir)(e)),
            }
        };
        // Our leaf keeps the agent group alive from here on.
        report.limits = agent_group.apply_limits(limits)?;
        let group = RunGroup {
            agent: agent_group,
            run,
        };
        group.sweep_stale(run_id);
        Ok((group, report))
    }

    /// Removes empty `run-<pid>` leaves whose `clawfs run` is gone (killed before cleaning up).
    fn sweep_stale(&self, own: u32) {
        let Ok(entries) = fs::read_dir(self.agent.path()) else {
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
            if pid != own && !pid_alive(pid) && leaf.is_populated().ok() == Some(false) {
                let _ = leaf.remove();
            }
        }
    }

    /// The agent's group.
    pub fn agent(&self) -> &Group {
        &self.agent
    }

    /// This run's leaf, where its processes go.
    pub fn run(&self) -> &Group {
        &self.run
    }

    /// Removes the run's leaf (which must be empty: see [`Group::wait_empty`]) and then the agent's
    /// group if no other run uses it. Returns whether the agent group was removed.
    pub fn remove(&self) -> Result<bool, CgroupError> {
        // A leaf that just emptied can report EBUSY for a moment; retry briefly.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.run.remove()? && self.run.path().exists() {
            if Instant::now() > deadline {
                return Err(io_err("remove", self.run.path())(
                    io::Error::from_raw_os_error(libc::EBUSY),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.agent.remove()
    }
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
        assert!(w.contains("not enforced (no such file): memory.max"), "{w}");
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
    }

    #[test]
    fn this_process_is_no_agent() {
        assert_eq!(agent_of_pid(std::process::id()).unwrap(), None);
        assert!(agent_of_pid(u32::MAX).is_err());
    }
}
