//! Agent activity the daemon does not see, on the audit trail: the eBPF monitor (`clawfs-ebpf`)
//! reports what processes in `<cgroup2>/clawfs/agent-*` groups do, and a thread records it with
//! the daemon's audit log:
//!
//! * `exec`: path = the file executed (as given to execve);
//! * `connect`: path = `tcp://ADDR:PORT` (IPv6 in brackets) or the Unix socket path;
//! * `open` (open, openat, openat2, creat, when they return, with their outcome: ok, or failed
//!   with the errno): only paths outside the mount. Opens through the mount are audited by the
//!   daemon itself, so an absolute path under the mountpoint is dropped, and so is a relative one
//!   (relative to a directory the event does not name) or an empty one (not readable when the
//!   call was traced).
//!
//! Refusals, recorded as denials of the agent (audit trail and its `denials` file):
//!
//! * a path system call on the mount that the kernel refused with EACCES or EPERM before it
//!   reached the daemon (the mode checks of `default_permissions`, or Landlock): operation = the
//!   system call, path = the namespace path, rule [`RULE_KERNEL`]. A relative path is placed
//!   from the inode of the directory it was relative to; a refusal this daemon answered itself
//!   (already on record) is not recorded again. Refusals outside the mount are not recorded;
//! * a system call refused by the sandbox's seccomp filter: operation = its name, rule
//!   [`RULE_SECCOMP`] (ENOSYS answers, which tell programs to fall back — `clone3` → `clone` —
//!   are not refusals of anything and are left out);
//! * a connect or a UDP datagram refused (the egress filter's cgroup programs, or Landlock):
//!   operation `connect`, `sendto` or `sendmsg`, path = `tcp://ADDR:PORT` (`udp://` for the
//!   sends), rule [`RULE_NETWORK`].
//!
//! The monitor's tracepoints run for every system call of the host, agent or not, so they are
//! attached only while a run of this store may be alive: from an agent's announcement (before
//! `clawfs run` execs the agent's program, the process opens `agents/self` as the agent, and the
//! open is answered once they are attached: [`AgentEvents::arm`]) until no run of the store has
//! a process left and none was announced for [`ARMED`]. The maintenance loop also attaches them
//! when it finds a live run of the store that did not announce itself.
//!
//! An announcing run's agent group is watched before the announcement is answered (the cgroup
//! id is the directory's inode number), and the daemon's maintenance loop calls
//! [`AgentEvents::refresh`] every 2 s: it watches each `agent-*` directory and unwatches
//! vanished ones. Agent groups come and go with runs, so the `clawfs` base group is watched
//! too: an event of an agent group not yet watched (a run that did not announce itself) arrives
//! under it, its agent is read from `/proc/PID/cgroup` (and that group is watched at once).
//!
//! Agent groups are host-wide: only events of runs of this daemon's store are recorded (the
//! `clawfs run` process named by the `run-PID` leaf recorded this store: [`crate::runs`]). A run settles before it ends ([`AgentEvents::settle`]), so its events are
//! read while it is there; an event of a run that could not (its `clawfs run` killed) read after
//! its process and run are gone cannot be placed and is dropped.
//!
//! Volume is bounded, per agent and kind, so that a flood of one kind hides no other: beyond
//! [`MAX_PER_SECOND`] activity events of one kind (exec, open or connect) in a second, or
//! [`MAX_REFUSALS_PER_SECOND`] refusals of one rule and operation (`SECCOMP` `ptrace`, `NETWORK`
//! `connect`…), the rest are dropped, and one `audit:events-dropped` record says how many of
//! which kind. The event thread never waits on
//! the audit log: records go through a bounded queue to a forwarding thread, and what does not
//! fit is counted as dropped too.

use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clawfs_audit::AuditEvent;
use clawfs_policy::Policy;

use crate::cgroup::Cgroup2;
use clawfs_ebpf::{Coverage, Event, EventKind, Monitor, Refusal, RefusedObject};
use rustix::event::{PollFd, PollFlags};
use tracing::{debug, warn};

/// Events recorded per agent per second at most; the rest are counted and dropped.
pub const MAX_PER_SECOND: u32 = 1000;
/// Refusals of one rule and operation recorded per agent per second at most.
pub const MAX_REFUSALS_PER_SECOND: u32 = 100;
/// Operation of the record saying how many events were dropped.
pub const OP_DROPPED: &str = "audit:events-dropped";
/// How long an announcement keeps the tracepoints attached by itself; then the maintenance loop
/// keeps them while it finds a run of the store alive (a margin: the announcing run is alive
/// when it announces, so the loop finds it at its next look).
const ARMED: Duration = Duration::from_secs(10);
/// Name the base group is watched under.
const BASE: &str = "clawfs:base";
/// How long a settle request waits at most.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the event thread trusts what it learned of a process's run.
const PID_TTL: Duration = Duration::from_secs(1);
/// Records waiting for the audit log at most.
const QUEUE: usize = 4096;
/// How long the event thread waits for the ring buffer before looking again (for events the
/// kernel counted as lost; new events wake it at once).
const IDLE: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 1,
    tv_nsec: 0,
};
/// Rule of a path system call on the mount refused by the kernel itself.
pub const RULE_KERNEL: &str = "KERNEL";
/// Rule of a system call refused by the sandbox's seccomp filter.
pub const RULE_SECCOMP: &str = "SECCOMP";
/// Rule of a connect refused by the agent's egress filter.
pub const RULE_NETWORK: &str = "NETWORK";

/// What the consumer asks of the filesystem it records for (the daemon's).
pub trait Served: Send + Sync {
    /// Puts an activity record on the audit trail (if auditing is on).
    fn record(&self, event: AuditEvent);
    /// Puts a kernel-side refusal on record: the audit trail and the agent's denials file.
    fn record_refusal(&self, event: AuditEvent);
    /// Waits until what was recorded so far is written.
    fn flush_records(&self) -> Result<(), clawfs_audit::AuditError>;
    /// Whether the daemon itself refused a request of thread `tid` (and so recorded it) between
    /// the two `CLOCK_MONOTONIC` instants, in nanoseconds.
    fn answered_refusal(&self, tid: u32, span_ns: (u64, u64)) -> bool;
    /// The store directory, by descriptor.
    fn store_fd(&self) -> BorrowedFd<'_>;
    /// The policy in force.
    fn policy(&self) -> Arc<Policy>;
    /// The namespace path (`/workspaces/w/f`) of the mount's inode `ino`, if it is known.
    fn ns_path_of_ino(&self, ino: u64) -> Option<String>;
}

/// What the event thread hands to the recording thread.
enum Out {
    /// An activity record.
    Record(AuditEvent),
    /// A refusal: recorded and added to the agent's denials file.
    Refusal(AuditEvent),
    /// Everything before it is queued: settle point N is reached once it is written.
    Settled(u64),
}

/// The running monitor; dropped with the daemon.
pub struct AgentEvents {
    shared: Arc<Shared>,
}

struct Shared {
    /// `None` once stopped.
    monitor: Mutex<Option<Watching>>,
    cgroup: &'static Cgroup2,
    /// The store, canonical: only its runs are recorded.
    store: PathBuf,
    mountpoint: PathBuf,
    fs: Arc<dyn Served>,
    /// The mount's device (kernel encoding), read from mountinfo when first needed.
    mount_dev: std::sync::OnceLock<Option<u32>>,
    settle: Settle,
}

/// Settle points ([`AgentEvents::settle`]): each request takes the next number and wakes the event
/// thread; the number is reached when the events read after it are on record.
struct Settle {
    /// (last asked, last reached); reached is `u64::MAX` once the event thread has ended.
    points: Mutex<(u64, u64)>,
    reached: Condvar,
    /// Written to wake the event thread.
    wake: OwnedFd,
}

impl Settle {
    fn asked(&self) -> u64 {
        self.points.lock().unwrap_or_else(PoisonError::into_inner).0
    }

    fn reach(&self, point: u64) {
        let mut p = self.points.lock().unwrap_or_else(PoisonError::into_inner);
        p.1 = p.1.max(point);
        self.reached.notify_all();
    }
}

struct Watching {
    monitor: Monitor,
    /// cgroup id → agent name (`BASE` for the base group).
    ids: HashMap<u64, String>,
    /// Until when the last announced run keeps the tracepoints attached.
    armed_until: Option<Instant>,
}

impl Watching {
    /// Attaches the tracepoints, if they are not.
    fn attach(&mut self) {
        if self.monitor.is_attached() {
            return;
        }
        match self.monitor.attach() {
            Ok(()) => debug!("eBPF monitor attached: agents may run"),
            Err(e) => warn!(error = %e, "eBPF monitor: attaching; agent activity is not audited"),
        }
    }

    /// Detaches the tracepoints, if they are attached and no run was announced lately.
    fn detach_unless_armed(&mut self, now: Instant) {
        if !self.monitor.is_attached() || self.armed_until.is_some_and(|t| now < t) {
            return;
        }
        match self.monitor.detach() {
            Ok(()) => debug!("eBPF monitor detached: no agent runs"),
            Err(e) => warn!(error = %e, "eBPF monitor: detaching"),
        }
    }

    /// Watches the group of `agent` under `cgroup` (it may be new: agent groups go when their
    /// last run ends).
    fn watch_agent(&mut self, cgroup: &Cgroup2, agent: &str) {
        if let Ok(id) = clawfs_ebpf::cgroup_id(&cgroup.agent_dir(agent)) {
            self.watch(id, agent);
        }
    }

    fn watch(&mut self, id: u64, agent: &str) {
        if self.ids.get(&id).is_some_and(|a| a == agent) {
            return;
        }
        match self.monitor.watch(id, agent) {
            Ok(()) => {
                self.ids.insert(id, agent.to_string());
            }
            Err(e) => warn!(agent, error = %e, "eBPF monitor: watching the agent's group"),
        }
    }
}

impl AgentEvents {
    /// Starts the monitor and its threads, recording with `fs`; `None` (after one warning)
    /// where eBPF monitoring is not available. Never fails the mount.
    pub fn start(
        fs: Arc<dyn Served>,
        store: &Path,
        mountpoint: &Path,
        coverage: Coverage,
    ) -> Option<AgentEvents> {
        let store = store.to_path_buf();
        let cgroup = match Cgroup2::cached() {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "agent activity is not audited: no cgroup v2 hierarchy");
                return None;
            }
        };
        let monitor = match Monitor::start(coverage) {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e, "agent activity (exec, open, connect) is not audited: the eBPF monitor is not available");
                return None;
            }
        };
        let wake = match rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                warn!(error = %e, "agent activity is not audited: creating its wake-up descriptor");
                return None;
            }
        };
        let shared = Arc::new(Shared {
            monitor: Mutex::new(Some(Watching {
                monitor,
                ids: HashMap::new(),
                armed_until: None,
            })),
            cgroup,
            store: std::fs::canonicalize(&store).unwrap_or_else(|_| store.clone()),
            mountpoint: mountpoint.to_path_buf(),
            fs: Arc::clone(&fs),
            mount_dev: std::sync::OnceLock::new(),
            settle: Settle {
                points: Mutex::new((0, 0)),
                reached: Condvar::new(),
                wake,
            },
        });
        let (tx, rx) = sync_channel::<Out>(QUEUE);
        let forwarding = Arc::clone(&shared);
        let forward = std::thread::Builder::new()
            .name("agent-events-audit".into())
            .spawn(move || {
                for out in rx {
                    match out {
                        Out::Record(ev) => fs.record(ev),
                        Out::Refusal(ev) => fs.record_refusal(ev),
                        Out::Settled(point) => {
                            if let Err(e) = fs.flush_records() {
                                warn!(error = %e, "flushing the audit trail");
                            }
                            forwarding.settle.reach(point);
                        }
                    }
                }
                // The event thread has ended: nobody is left to wait for.
                forwarding.settle.reach(u64::MAX);
            });
        if let Err(e) = forward {
            warn!(error = %e, "agent activity is not audited: starting its thread");
            return None;
        }
        let events = AgentEvents { shared };
        events.refresh();
        let shared = Arc::clone(&events.shared);
        let drain = std::thread::Builder::new()
            .name("agent-events".into())
            .spawn(move || drain(&shared, &tx));
        if let Err(e) = drain {
            warn!(error = %e, "agent activity is not audited: starting its thread");
            return None;
        }
        debug!(?coverage, "eBPF monitor started: agent activity audited");
        Some(events)
    }

    /// Detaches the programs and ends the threads (events not yet drained are lost). The daemon
    /// calls it when the mount ends, so the detach (which can take a while) is over before the
    /// daemon exits and `clawfs umount` returns.
    pub fn stop(&self) {
        let monitor = self
            .shared
            .monitor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(monitor);
    }

    /// Thread `tid` of an agent process announced itself: if it is of a run of this store, the
    /// tracepoints are attached when this returns, and stay attached for at least [`ARMED`].
    /// (Agent groups are host-wide: another store's agent must not keep this daemon's
    /// tracepoints, and the host's system calls, slowed.)
    pub fn arm(&self, tid: u32) {
        let Some((agent, run)) = leaf_of(&self.shared, tid) else {
            return;
        };
        if !self.shared.serves(run) {
            return;
        }
        let mut guard = self
            .shared
            .monitor
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(w) = guard.as_mut() else { return };
        // Watched now, so that the run's events carry their agent even when the process is
        // gone before they are read.
        w.watch_agent(self.shared.cgroup, &agent);
        w.armed_until = Some(Instant::now() + ARMED);
        w.attach();
    }

    /// Waits until the events the kernel reported before this call are on record (the audit
    /// trail flushed, refusals in the agents' denials files), at most [`SETTLE_TIMEOUT`];
    /// `false` if that took longer.
    pub fn settle(&self) -> bool {
        let s = &self.shared.settle;
        let mut points = s.points.lock().unwrap_or_else(PoisonError::into_inner);
        points.0 += 1;
        let want = points.0;
        if let Err(e) = rustix::io::write(&s.wake, &1u64.to_ne_bytes()) {
            warn!(error = %e, "waking the agent event thread");
        }
        let (_points, waited) = s
            .reached
            .wait_timeout_while(points, SETTLE_TIMEOUT, |p| p.1 < want)
            .unwrap_or_else(PoisonError::into_inner);
        !waited.timed_out()
    }

    /// Watches the base group and each `agent-*` group now present, unwatches vanished ones;
    /// attaches the tracepoints while a run of the store is alive, and detaches them when none
    /// is and no run was announced for [`ARMED`].
    pub fn refresh(&self) {
        let base = self.shared.cgroup.base_dir();
        let mut present: Vec<(u64, String)> = Vec::new();
        let mut ours_alive = false;
        if let Ok(m) = std::fs::metadata(&base) {
            present.push((m.ino(), BASE.to_string()));
        }
        if let Ok(dir) = std::fs::read_dir(&base) {
            for entry in dir.flatten() {
                let name = entry.file_name();
                let Some(agent) = name.to_str().and_then(|n| n.strip_prefix("agent-")) else {
                    continue;
                };
                if let Ok(m) = entry.metadata() {
                    if m.is_dir() {
                        present.push((m.ino(), agent.to_string()));
                        ours_alive = ours_alive || self.run_alive(&entry.path());
                    }
                }
            }
        }
        let mut guard = self
            .shared
            .monitor
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(w) = guard.as_mut() else { return };
        let gone: Vec<u64> = w
            .ids
            .keys()
            .filter(|id| !present.iter().any(|(p, _)| p == *id))
            .copied()
            .collect();
        for id in gone {
            w.ids.remove(&id);
            if let Err(e) = w.monitor.unwatch(id) {
                debug!(id, error = %e, "eBPF monitor: unwatching a vanished group");
            }
        }
        for (id, agent) in present {
            w.watch(id, &agent);
        }
        // The detach is decided under the lock, so that an announcement cannot fall between
        // it and the runs' reading; a run announces itself after its group is populated.
        if ours_alive {
            w.attach();
        } else {
            w.detach_unless_armed(Instant::now());
        }
    }

    /// Whether agent group `agent_dir` has a `run-PID` group with a process in it whose `clawfs
    /// run` serves this store.
    fn run_alive(&self, agent_dir: &Path) -> bool {
        let Ok(runs) = std::fs::read_dir(agent_dir) else {
            return false;
        };
        runs.flatten().any(|run| {
            run.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("run-"))
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|pid| populated(&run.path()) && self.shared.serves(pid))
        })
    }
}

/// Whether a process is in cgroup v2 group `dir` or below it (its `cgroup.events`).
fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|l| l == "populated 1"))
}

/// Per-agent volume of the current second.
struct Budget {
    since: Instant,
    count: u32,
    dropped: u64,
    /// Up to [`SAMPLES`] distinct paths of the dropped events, named in the dropped record.
    samples: Vec<String>,
}

/// Distinct paths of dropped events named in an `audit:events-dropped` record at most.
const SAMPLES: usize = 16;

impl Budget {
    fn drop_one(&mut self, path: &str) {
        self.dropped += 1;
        if self.samples.len() < SAMPLES && !self.samples.iter().any(|p| p == path) {
            self.samples.push(path.to_string());
        }
    }
}

/// The event thread: drains the monitor, turns events into records and queues them.
fn drain(shared: &Shared, tx: &SyncSender<Out>) {
    let mut runs = Runs {
        known: HashMap::new(),
        pids: HashMap::new(),
    };
    // (agent, kind) → the volume of the current second.
    let mut budgets: HashMap<(String, String), Budget> = HashMap::new();
    let ready = match shared
        .monitor
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|w| w.monitor.events_fd())
    {
        Some(Ok(fd)) => fd,
        Some(Err(e)) => {
            warn!(error = %e, "eBPF monitor: agent activity is no longer audited");
            return;
        }
        None => return,
    };
    // The last settle point queued.
    let mut settled = 0;
    loop {
        // Waits without the monitor's lock, so that watching a new agent's group never waits
        // for it.
        let mut fds = [
            PollFd::new(&ready, PollFlags::IN),
            PollFd::new(&shared.settle.wake, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, Some(&IDLE)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                warn!(error = %e, "eBPF monitor: waiting for events; agent activity is no longer audited");
                return;
            }
        }
        let mut counter = [0u8; 8];
        let _ = rustix::io::read(&shared.settle.wake, &mut counter);
        // Asked before the ring buffer is read: the events of a settle request's past are all
        // in this read.
        let asked = shared.settle.asked();
        let (events, lost) = {
            let mut guard = shared
                .monitor
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(w) = guard.as_mut() else { return };
            match w.monitor.next_events(Duration::ZERO) {
                Ok(evs) => (evs, w.monitor.lost_events()),
                Err(e) => {
                    warn!(error = %e, "eBPF monitor: reading events; agent activity is no longer audited");
                    return;
                }
            }
        };
        // Events the kernel had no room for: counted there, per agent group (the group may be
        // another store's: agent groups are host-wide).
        for (agent, n) in lost {
            let ev = AuditEvent::new(agent.clone(), 0, OP_DROPPED, "/").reason(format!(
                "{n} events of agent group {agent} lost in the kernel (the event ring buffer was full)"
            ));
            let _ = tx.try_send(Out::Record(ev));
        }
        let now = Instant::now();
        for ev in &events {
            // The cheap filter first: most opens are through the mount.
            let Some(mut out) = to_out(shared, ev) else {
                continue;
            };
            let Some(agent) = agent_of(shared, &mut runs, ev) else {
                continue;
            };
            let (kind, limit, path) = match &mut out {
                Out::Record(r) => {
                    r.agent.clone_from(&agent);
                    (r.operation.to_string(), MAX_PER_SECOND, r.path.clone())
                }
                Out::Refusal(r) => {
                    r.agent.clone_from(&agent);
                    let rule = r.rule.as_deref().unwrap_or_default();
                    let kind = format!("{rule} {}", r.operation);
                    (kind, MAX_REFUSALS_PER_SECOND, r.path.clone())
                }
                Out::Settled(_) => continue,
            };
            if budgets.len() > 4096 {
                budgets.retain(|_, b| b.dropped > 0);
            }
            let b = budgets.entry((agent, kind)).or_insert(Budget {
                since: now,
                count: 0,
                dropped: 0,
                samples: Vec::new(),
            });
            if b.count >= limit {
                b.drop_one(&path);
                continue;
            }
            b.count += 1;
            if let Err(TrySendError::Full(_)) = tx.try_send(out) {
                b.drop_one(&path);
            }
        }
        // Ends the seconds that are over, with a record of what was dropped in them; at a
        // settle point, what was dropped so far is on record at once (the second goes on).
        let settling = asked > settled;
        budgets.retain(|(agent, kind), b| {
            let over = now.duration_since(b.since) >= Duration::from_secs(1);
            if (over || settling) && b.dropped > 0 {
                let more = if b.dropped as usize > b.samples.len() { ", …" } else { "" };
                let ev = AuditEvent::new(agent.clone(), 0, OP_DROPPED, "/").reason(format!(
                    "{} {kind} events of agent {agent} dropped in a second (over the limit of their kind, or the audit queue was full); their paths: {}{more}",
                    b.dropped,
                    b.samples.join(", ")
                ));
                if tx.try_send(Out::Record(ev)).is_err() {
                    // Counted again in the next second; the record is not lost.
                    b.since = now;
                    b.count = 0;
                    return true;
                }
                b.dropped = 0;
                b.samples.clear();
            }
            !over
        });
        if settling {
            // Waits for room: the point must follow what was queued before it.
            if tx.send(Out::Settled(asked)).is_err() {
                return;
            }
            settled = asked;
        }
    }
}

/// Which runs serve this daemon's store: `clawfs run` pid → whether its `--store` (or the default
/// store) is this one. Agent groups are host-wide, shared by every store's runs.
struct Runs {
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
    fn serves(&self, run_pid: u32) -> bool {
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
fn leaf_of(shared: &Shared, pid: u32) -> Option<(String, u32)> {
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
fn agent_of(shared: &Shared, runs: &mut Runs, ev: &Event) -> Option<String> {
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
            if let Some(w) = shared
                .monitor
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_mut()
            {
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

/// What to record of `ev`, if anything (see the module documentation).
fn to_out(shared: &Shared, ev: &Event) -> Option<Out> {
    match &ev.kind {
        EventKind::Refused(r) => refusal(shared, ev, r),
        EventKind::Seccomp { nr, errno } => {
            // ENOSYS tells the program to fall back (clone3 -> clone): nothing was refused.
            if *errno == libc::ENOSYS {
                return None;
            }
            let name = clawfs_seccomp::syscall_name(*nr).unwrap_or_else(|| format!("syscall-{nr}"));
            let reason = clawfs_seccomp::refusal_reason(&name);
            Some(Out::Refusal(
                AuditEvent::new(&ev.agent, ev.pid, name, "").denied(*errno, RULE_SECCOMP, reason),
            ))
        }
        _ => to_record(&ev.agent, ev, &shared.mountpoint).map(Out::Record),
    }
}

/// What to record of a call the kernel refused: a denial on the mount or of the network; an
/// open refused elsewhere is activity, recorded with its errno.
fn refusal(shared: &Shared, ev: &Event, r: &Refusal) -> Option<Out> {
    let op = clawfs_seccomp::syscall_name(r.nr).unwrap_or_else(|| format!("syscall-{}", r.nr));
    match &r.object {
        RefusedObject::Inet { addr, port } => {
            // A datagram sent to an address is UDP; a connect is taken for TCP (the event does
            // not say which socket type made it).
            let scheme = if matches!(op.as_str(), "connect" | "bind" | "socket") {
                "tcp"
            } else {
                "udp"
            };
            let dest = match addr {
                std::net::IpAddr::V4(a) => format!("{scheme}://{a}:{port}"),
                std::net::IpAddr::V6(a) => format!("{scheme}://[{a}]:{port}"),
            };
            let setting = format!("[agents.{}.sandbox] network in the policy", ev.agent);
            let reason = match op.as_str() {
                "bind" => format!(
                    "the agent's network setting does not allow it to listen or receive on {dest}: only \"all\" does ({setting})"
                ),
                "socket" => format!(
                    "the agent's network setting is \"none\": it may not open an IPv4 or IPv6 socket ({setting})"
                ),
                _ => format!("the agent's egress filter does not allow connecting to {dest} ({setting})"),
            };
            Some(Out::Refusal(
                AuditEvent::new(&ev.agent, ev.pid, op, dest).denied(r.errno, RULE_NETWORK, reason),
            ))
        }
        RefusedObject::Unix { .. } => None,
        RefusedObject::Path { path, dirfd, base } => {
            let Some(ns) = in_mount(shared, ev, path, *dirfd, *base) else {
                let is_open = matches!(op.as_str(), "open" | "openat" | "openat2" | "creat");
                return (is_open
                    && path.starts_with('/')
                    && !Path::new(path).starts_with(&shared.mountpoint))
                .then(|| {
                    Out::Record(
                        AuditEvent::new(&ev.agent, ev.pid, "open", path.clone()).failed(r.errno),
                    )
                });
            };
            // The kernel names the calling thread in a FUSE request.
            if shared.fs.answered_refusal(ev.tid, r.span_ns) {
                return None;
            }
            // Where the kernel enforced the policy itself (the ACLs of agent folders,
            // workspaces and secrets), the record says which rule and why, as the daemon would.
            if let Some((fuse_op, denial)) = policy_refusal(shared, ev, &op, &ns) {
                let reason = format!("the kernel refused {op}: {}", denial.reason);
                return Some(Out::Refusal(
                    AuditEvent::new(&ev.agent, ev.pid, fuse_op, ns).denied(
                        r.errno,
                        denial.rule,
                        reason,
                    ),
                ));
            }
            let reason = format!(
                "the kernel refused {op} before it reached ClawFS: the permissions of the file or of a directory on its path do not allow it (in a sandboxed run, its Landlock rules may refuse it too)"
            );
            Some(Out::Refusal(
                AuditEvent::new(&ev.agent, ev.pid, op, ns).denied(r.errno, RULE_KERNEL, reason),
            ))
        }
    }
}

/// The policy's own refusal of the system call `op` on `ns` by the event's agent, if the
/// policy refuses it, with the name of the operation the daemon would have seen: the kernel
/// applied the policy from the ACLs ClawFS reports. The access is the call's: an open of a
/// name that is not there would have created it.
fn policy_refusal(
    shared: &Shared,
    ev: &Event,
    op: &str,
    ns: &str,
) -> Option<(String, clawfs_policy::Denial)> {
    use clawfs_policy::{Access, AgentName, Identity, NsPath};
    let path = NsPath::parse(ns).ok()?;
    // Looked for in the store, never through the mount this daemon serves.
    let exists =
        || clawfs_store::tree::stat(shared.fs.store_fd(), ns.trim_start_matches('/')).is_ok();
    let (access, fuse_op) = match op {
        "open" | "openat" | "openat2" | "creat" if !exists() => (Access::Create, "create"),
        "open" | "openat" | "openat2" => (Access::Read, "open"),
        "mkdir" | "mkdirat" => (Access::Create, "mkdir"),
        "link" | "linkat" => (Access::Create, "link"),
        "mknod" | "mknodat" | "symlink" | "symlinkat" => (Access::Create, op),
        "rename" | "renameat" | "renameat2" => (Access::Delete, "rename"),
        "unlink" | "unlinkat" | "rmdir" => (Access::Delete, op),
        "chmod" | "fchmodat" | "fchmodat2" | "chown" | "lchown" | "fchownat" | "truncate"
        | "utimensat" | "setxattr" | "lsetxattr" | "removexattr" | "lremovexattr" => {
            (Access::Write, op)
        }
        _ => (Access::Read, op),
    };
    let who = Identity::Agent(AgentName::new(&ev.agent).ok()?);
    let denial = shared.fs.policy().check(&who, access, &path).err()?;
    Some((fuse_op.to_string(), denial))
}

/// The namespace path of a refused path, if it is in the mount. A relative path is made absolute
/// from the directory it was relative to, as the kernel saw it (its device and inode, read at the
/// call): a node of this mount gives its namespace path; a directory elsewhere is found in
/// `/proc` (the process's working directory or `dirfd`) if the process is still there and that
/// is still the same directory. The symlinks of the existing part are then followed, as the
/// kernel did: a refusal reached through `openat(fd of "/", "…/mnt/…")` or through a link to a
/// directory in the mount is placed too.
fn in_mount(
    shared: &Shared,
    ev: &Event,
    path: &str,
    dirfd: i32,
    base: Option<(u32, u64)>,
) -> Option<String> {
    let absolute = if path.starts_with('/') {
        // The caller's /proc/self, not the daemon's.
        let own = if let Some(rest) = path.strip_prefix("/proc/thread-self/") {
            format!("/proc/{}/task/{}/{rest}", ev.pid, ev.tid)
        } else if let Some(rest) = path.strip_prefix("/proc/self/") {
            format!("/proc/{}/{rest}", ev.pid)
        } else {
            path.to_string()
        };
        PathBuf::from(own)
    } else {
        let (dev, ino) = base?;
        let mount_dev = *shared.mount_dev.get_or_init(|| {
            clawfs_store::mountinfo::mount_at(&shared.mountpoint)
                .ok()
                .flatten()
                .map(|m| clawfs_ebpf::kernel_dev(m.dev))
        });
        let dir = if mount_dev == Some(dev) {
            let ns = shared.fs.ns_path_of_ino(ino)?;
            shared.mountpoint.join(ns.trim_start_matches('/'))
        } else {
            let link = if dirfd == libc::AT_FDCWD {
                format!("/proc/{}/task/{}/cwd", ev.pid, ev.tid)
            } else {
                format!("/proc/{}/fd/{dirfd}", ev.pid)
            };
            let dir = std::fs::read_link(link).ok()?;
            let md = std::fs::metadata(&dir).ok()?;
            (clawfs_ebpf::kernel_dev(md.dev()) == dev && md.ino() == ino).then_some(dir)?
        };
        dir.join(path)
    };
    let resolved = normalize(Path::new("/"), &resolve_links(&absolute).to_string_lossy())?;
    let rest = resolved.strip_prefix(&shared.mountpoint).ok()?;
    Some(format!("/{}", rest.display()))
}

/// `path` with the symlinks of its longest existing ancestor resolved (`canonicalize`), the rest
/// (what did not exist: the file refused creation) appended as it is.
fn resolve_links(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// `base` joined with `path`, `.` and `..` resolved by name (no file system access); `None` if
/// `..` climbs above `/`.
fn normalize(base: &Path, path: &str) -> Option<PathBuf> {
    let mut out = base.to_path_buf();
    for c in Path::new(path).components() {
        match c {
            std::path::Component::RootDir => out = PathBuf::from("/"),
            std::path::Component::CurDir | std::path::Component::Prefix(_) => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            std::path::Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

/// The audit record of `ev`, or `None` for an open the daemon audits itself (see the module
/// documentation).
pub fn to_record(agent: &str, ev: &Event, mountpoint: &Path) -> Option<AuditEvent> {
    let (op, path) = match &ev.kind {
        EventKind::Exec { filename } => ("exec", filename.clone()),
        EventKind::Connect { addr, port } => (
            "connect",
            match addr {
                std::net::IpAddr::V4(a) => format!("tcp://{a}:{port}"),
                std::net::IpAddr::V6(a) => format!("tcp://[{a}]:{port}"),
            },
        ),
        EventKind::ConnectUnix { path } => ("connect", path.clone()),
        EventKind::Open { path, errno } => {
            let p = Path::new(path);
            if !p.is_absolute() || p.starts_with(mountpoint) {
                return None;
            }
            let ev = AuditEvent::new(agent, ev.pid, "open", path.clone());
            return Some(if *errno == 0 { ev } else { ev.failed(*errno) });
        }
        EventKind::Refused(_) | EventKind::Seccomp { .. } => return None,
    };
    Some(AuditEvent::new(agent, ev.pid, op, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind) -> Event {
        Event {
            agent: "a".into(),
            cgroup_id: 1,
            pid: 7,
            tid: 7,
            kind,
        }
    }

    #[test]
    fn opens_in_the_mount_or_relative_are_dropped() {
        let mp = Path::new("/mnt/claw");
        let open = |p: &str| {
            to_record(
                "a",
                &ev(EventKind::Open {
                    path: p.into(),
                    errno: 0,
                }),
                mp,
            )
        };
        assert!(open("/mnt/claw/agents/a/x").is_none());
        assert!(open("x/y").is_none());
        assert!(open("").is_none());
        let r = open("/etc/hostname").unwrap();
        assert_eq!(
            (r.operation.as_ref(), r.path.as_str()),
            ("open", "/etc/hostname")
        );
        assert!(open("/mnt/clawx/y").is_some());
    }

    #[test]
    fn normalize_resolves_dots_by_name() {
        let n = |b: &str, p: &str| normalize(Path::new(b), p).map(|p| p.display().to_string());
        assert_eq!(n("/agents/a", "x/./y").as_deref(), Some("/agents/a/x/y"));
        assert_eq!(n("/agents/a", "../b/f").as_deref(), Some("/agents/b/f"));
        assert_eq!(n("/agents", "../../etc"), None);
        assert_eq!(n("/x", "/etc/../tmp").as_deref(), Some("/tmp"));
    }

    #[test]
    fn connect_paths() {
        let mp = Path::new("/m");
        let r = to_record(
            "a",
            &ev(EventKind::Connect {
                addr: "127.0.0.1".parse().unwrap(),
                port: 80,
            }),
            mp,
        )
        .unwrap();
        assert_eq!(r.path, "tcp://127.0.0.1:80");
        let r = to_record(
            "a",
            &ev(EventKind::Connect {
                addr: "::1".parse().unwrap(),
                port: 443,
            }),
            mp,
        )
        .unwrap();
        assert_eq!(r.path, "tcp://[::1]:443");
    }
}
