//! What `clawfs top` shows, sampled: each agent of the roster with its running processes (from
//! its control group), what it did (the audit trail, followed as it grows: operations, bytes,
//! refusals and the latest reason) and what it holds (the daemon's saved quota counts).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clawfs_audit::{self as audit, AuditRecord, Follow, Outcome};
use clawfs_core::held::Held;
use clawfs_core::store::Store;
use clawfs_policy::Quota;
use clawfs_store::agent_groups::Cgroup2;
use serde::Serialize;

use crate::error::Failure;

/// How many of the trail's last records are read at the start for each agent's latest refusal.
const SEED_RECORDS: usize = 2000;

/// A command line shown is cut to this many characters.
const COMMAND_CHARS: usize = 200;

/// Everything shown at one moment.
#[derive(Debug, Serialize)]
pub struct Sample {
    /// When it was taken, RFC 3339.
    pub time: String,
    /// The store watched.
    pub store: PathBuf,
    /// Seconds the rates are over.
    pub seconds: f64,
    /// The agents of the roster.
    pub agents: Vec<AgentSample>,
}

/// One agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentSample {
    /// Its name.
    pub agent: String,
    /// Its processes running now.
    pub processes: usize,
    /// Its runs: the processes of its group whose parent is outside it, with their commands.
    pub runs: Vec<Run>,
    /// Audited operations per second over the sample.
    pub ops_per_second: f64,
    /// Audited operations since the view started.
    pub ops: u64,
    /// Bytes the audited operations read and wrote since the view started.
    pub bytes: u64,
    /// Refusals since the view started.
    pub refusals: u64,
    /// The latest refusal seen (also from before the view started).
    pub last_refusal: Option<Refusal>,
    /// What it holds and may hold.
    pub quota: QuotaUse,
}

/// A run of an agent.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The process at its top.
    pub pid: u32,
    /// Its command line.
    pub command: String,
}

/// A refusal, as the trail has it.
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    /// When, RFC 3339.
    pub time: String,
    /// The operation refused.
    pub operation: String,
    /// On what.
    pub path: String,
    /// The rule that refused it.
    pub rule: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// Bytes and files held, and the limits (none when unlimited).
#[derive(Debug, Clone, Serialize)]
pub struct QuotaUse {
    pub bytes: u64,
    pub bytes_limit: Option<u64>,
    pub files: u64,
    pub files_limit: Option<u64>,
}

impl QuotaUse {
    /// The share of the byte limit used, if there is one.
    pub fn bytes_share(&self) -> Option<f64> {
        self.bytes_limit
            .filter(|&l| l > 0)
            .map(|l| self.bytes as f64 / l as f64)
    }
}

/// What the trail said of one agent so far.
#[derive(Debug, Default)]
struct Seen {
    ops: u64,
    /// Operations in the sample being taken.
    recent: u64,
    bytes: u64,
    refusals: u64,
    last_refusal: Option<Refusal>,
}

/// Takes [`Sample`]s of one store.
pub struct Sampler {
    store_root: PathBuf,
    store: Store,
    follow: Follow,
    seen: HashMap<String, Seen>,
    since: Instant,
}

impl Sampler {
    /// Starts watching the store at `store_root`: the trail from its end now.
    pub fn new(store_root: &Path) -> Result<Sampler, Failure> {
        let store = Store::open(store_root)?;
        let dir = store.audit_dir();
        let follow = Follow::from_end(&dir).map_err(|e| Failure::Other(e.into()))?;
        let mut seen: HashMap<String, Seen> = HashMap::new();
        for rec in audit::tail(&dir, SEED_RECORDS)
            .map_err(|e| Failure::Other(e.into()))?
            .into_iter()
            .flatten()
        {
            if rec.event.result == Outcome::Denied {
                seen.entry(rec.event.agent.clone())
                    .or_default()
                    .last_refusal = Some(refusal(&rec));
            }
        }
        Ok(Sampler {
            store_root: store_root.to_path_buf(),
            store,
            follow,
            seen,
            since: Instant::now(),
        })
    }

    /// The sample after waiting up to `wait` for the trail to grow.
    pub fn sample(&mut self, wait: Duration) -> Result<Sample, Failure> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            for rec in self
                .follow
                .next_batch(left)
                .map_err(|e| Failure::Other(e.into()))?
                .into_iter()
                .flatten()
            {
                self.count(&rec);
            }
            if left.is_zero() {
                break;
            }
        }
        let seconds = self.since.elapsed().as_secs_f64().max(1e-3);
        self.since = Instant::now();
        let policy = crate::store_ops::installed_policy(&self.store)?;
        let saved = super::super::quota::read_saved(&self.store)?;
        let cgroups = Cgroup2::cached().ok();
        let agents = policy
            .agents()
            .map(|spec| {
                let name = spec.name.as_str();
                let seen = self.seen.entry(name.to_string()).or_default();
                let recent = std::mem::take(&mut seen.recent);
                let held = super::super::quota::held_by(&saved, name);
                let groups = cgroups
                    .map(|c| group_pids(&c.agent_dir(name)))
                    .unwrap_or_default();
                AgentSample {
                    agent: name.to_string(),
                    processes: groups.iter().map(Vec::len).sum(),
                    runs: groups.iter().flat_map(|g| runs_of(g)).collect(),
                    ops_per_second: recent as f64 / seconds,
                    ops: seen.ops,
                    bytes: seen.bytes,
                    refusals: seen.refusals,
                    last_refusal: seen.last_refusal.clone(),
                    quota: quota_use(held, spec.quota),
                }
            })
            .collect();
        Ok(Sample {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            store: self.store_root.clone(),
            seconds,
            agents,
        })
    }

    fn count(&mut self, rec: &AuditRecord) {
        let ev = &rec.event;
        let seen = self.seen.entry(ev.agent.clone()).or_default();
        seen.ops += 1;
        seen.recent += 1;
        seen.bytes = seen.bytes.saturating_add(ev.bytes.unwrap_or(0));
        if ev.result == Outcome::Denied {
            seen.refusals += 1;
            seen.last_refusal = Some(refusal(rec));
        }
    }
}

fn refusal(rec: &AuditRecord) -> Refusal {
    let ev = &rec.event;
    Refusal {
        time: ev.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        operation: ev.operation.to_string(),
        path: ev.path.clone(),
        rule: ev.rule.clone(),
        reason: ev.reason.clone(),
    }
}

fn quota_use(held: Held, limit: Quota) -> QuotaUse {
    let limited = |n: u64| (n != Quota::UNLIMITED).then_some(n);
    QuotaUse {
        bytes: held.bytes,
        bytes_limit: limited(limit.bytes),
        files: held.files,
        files_limit: limited(limit.files),
    }
}

/// The processes of the control group at `dir` and of each group inside it, group by group.
fn group_pids(dir: &Path) -> Vec<Vec<u32>> {
    let mut groups = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
            let mut pids: Vec<u32> = procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            pids.sort_unstable();
            if !pids.is_empty() {
                groups.push(pids);
            }
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    groups
}

/// The runs of one group's `pids`. A run's own group (`run-PID`, what `clawfs run` made) is one
/// run: its oldest process whose parent is outside the group, however many of its processes
/// left their parents since. Processes in the agent's group itself are each a run of their own
/// when their parent is not there.
fn runs_of(pids: &[u32]) -> Vec<Run> {
    let set: HashSet<u32> = pids.iter().copied().collect();
    let mut tops: BTreeMap<u64, u32> = BTreeMap::new();
    for &pid in pids {
        let Some((ppid, started)) = parent_and_start(pid) else {
            continue;
        };
        if !set.contains(&ppid) {
            tops.insert(started << 20 | u64::from(pid & 0xfffff), pid);
        }
    }
    let one_run = pids.first().and_then(|&p| own_group(p)).is_some();
    let tops: Vec<u32> = match one_run {
        true => tops.into_values().take(1).collect(),
        false => tops.into_values().collect(),
    };
    tops.into_iter()
        .map(|pid| Run {
            pid,
            command: command_of(pid),
        })
        .collect()
}

/// The `run-…` group `pid` is in (in the unified hierarchy), if it is in one.
fn own_group(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let leaf = path.rsplit('/').next()?;
    leaf.starts_with(clawfs_store::agent_groups::RUN_PREFIX)
        .then(|| leaf.to_string())
}

/// A process's parent and start time (clock ticks after boot), from `/proc/PID/stat`.
fn parent_and_start(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the fields follow the last ')'.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

/// A process's command line, its arguments joined by spaces and cut short: at most
/// [`COMMAND_CHARS`] characters are read and shown, however long the process made it.
fn command_of(pid: u32) -> String {
    use std::io::Read;
    let mut raw = Vec::new();
    if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/cmdline")) {
        // Four bytes at most per character shown, and one more to know it was cut.
        let _ = f.take(4 * COMMAND_CHARS as u64 + 1).read_to_end(&mut raw);
    }
    let line = String::from_utf8_lossy(&raw)
        .split('\0')
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let cut = line.char_indices().nth(COMMAND_CHARS).map(|(at, _)| at);
    let shown = super::printable(&line[..cut.unwrap_or(line.len())]);
    match cut {
        Some(_) => format!("{shown}…"),
        None if shown.is_empty() => format!("[pid {pid}]"),
        None => shown,
    }
}
