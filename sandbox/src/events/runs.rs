//! Whose an event is: the agent of the run its process is in, if that run serves this
//! daemon's store (runs of every store share the host-wide agent groups).

use std::collections::HashMap;
use std::time::Instant;

use clawfs_ebpf::Event;

use super::{Shared, BASE, PID_TTL};

/// Which runs serve this daemon's store: `clawfs run` pid → whether its `--store` (or the default
/// store) is this one. Agent groups are host-wide, shared by every store's runs.
#[derive(Default)]
pub(super) struct Runs {
    /// For [`PID_TTL`]: a `clawfs run` pid may be reused by another store's run.
    known: HashMap<u32, (Instant, bool)>,
    /// (process id, watched group) → its agent if it is of a run of this store (a process stays
    /// in its group; a pid reused by a process of another agent's group is another key). Kept
    /// for [`PID_TTL`], so that a pid reused in the same agent group by another store's run is
    /// looked at again.
    pids: HashMap<(u32, u64), (Instant, Option<String>)>,
}

impl Shared {
    /// Whether the `clawfs run` process `run_pid` serves this store.
    pub(super) fn serves(&self, run_pid: u32) -> bool {
        crate::runs::store_of_run(run_pid).is_some_and(|s| s == self.store)
    }
}

impl Runs {
    fn ours(&mut self, shared: &Shared, run_pid: u32) -> bool {
        if let Some((at, ours)) = self.known.get(&run_pid) {
            if at.elapsed() < PID_TTL {
                return *ours;
            }
        }
        if self.known.len() > 4096 {
            self.known.retain(|_, (at, _)| at.elapsed() < PID_TTL);
        }
        let ours = shared.serves(run_pid);
        self.known.insert(run_pid, (Instant::now(), ours));
        ours
    }
}

/// The agent and `clawfs run` pid of the run process `pid` is in, from `/proc/PID/cgroup`.
pub(super) fn leaf_of(shared: &Shared, pid: u32) -> Option<(String, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim_end();
    let agent = shared.cgroup.agent_of_path(path)?;
    let run = path
        .rsplit('/')
        .next()
        .and_then(|leaf| leaf.strip_prefix("run-"))
        .and_then(|n| n.parse().ok())?;
    Some((agent, run))
}

/// The agent an event belongs to, if the event is of a run of this daemon's store. From the
/// process's own run leaf when it can still be read (and its agent group is then watched, for an
/// event that arrived under the base group); else, for a process already gone, the watched agent
/// group's, if a run of this store is in it now. An event of a process gone before its group could
/// be read that arrived under the base group cannot be placed and is dropped.
pub(super) fn agent_of(shared: &Shared, runs: &mut Runs, ev: &Event) -> Option<String> {
    let key = (ev.pid, ev.cgroup_id);
    if let Some((at, known)) = runs.pids.get(&key) {
        if at.elapsed() < PID_TTL {
            return known.clone();
        }
    }
    if runs.pids.len() > 4096 {
        runs.pids.retain(|_, (at, _)| at.elapsed() < PID_TTL);
    }
    if let Some((agent, run)) = leaf_of(shared, ev.pid) {
        if ev.agent == BASE {
            if let Some(w) = shared.watching().as_mut() {
                w.watch_agent(shared.cgroup, &agent);
            }
        }
        let found = runs.ours(shared, run).then_some(agent);
        runs.pids.insert(key, (Instant::now(), found.clone()));
        return found;
    }
    if ev.agent == BASE {
        return None;
    }
    // The process is gone: the event is put down to the agent if a run of this store is in
    // its group now. Another store's run of the same agent there makes that a guess (the
    // event names the agent's group, not the run's), which docs/sandbox.md states.
    let dir = std::fs::read_dir(shared.cgroup.agent_dir(&ev.agent)).ok()?;
    let any_ours = dir.flatten().any(|e| {
        e.file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|n| n.parse().ok())
            .is_some_and(|run| runs.ours(shared, run))
    });
    any_ours.then(|| ev.agent.clone())
}
