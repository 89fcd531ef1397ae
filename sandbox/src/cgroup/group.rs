//! One group and a run's groups: creating them, enabling controllers, writing limits, moving
//! processes in, waiting for them to empty, removing them.

use super::*;

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
    pub(super) dir: PathBuf,
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

    pub(super) fn read(&self, file: &str) -> Result<String, CgroupError> {
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
pub(super) fn create_agent_and_run(
    agent_dir: &Path,
    run_id: u32,
) -> Result<(Group, Group), CgroupError> {
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
