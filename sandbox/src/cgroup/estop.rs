//! The emergency stop: freezing every agent run and killing it.

use super::*;

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
