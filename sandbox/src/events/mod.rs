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
use clawfs_ebpf::{Coverage, Monitor};
use rustix::event::{PollFd, PollFlags};

mod records;
mod runs;

use records::to_out;
pub use records::to_record;
use runs::{agent_of, leaf_of, Runs};
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

impl Shared {
    /// The monitor and what it watches (`None` once stopped), locked.
    fn watching(&self) -> std::sync::MutexGuard<'_, Option<Watching>> {
        self.monitor.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
        let monitor = self.shared.watching().take();
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
        let mut guard = self.shared.watching();
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
        // The groups are read under the lock an announcement takes to watch its agent's group:
        // a group made and watched between a reading made before the lock and the lock would
        // count as vanished, and its run's refusals would go unseen (two agents started at once
        // lost one's refusal of a write to the other's folder).
        let mut guard = self.shared.watching();
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
    let mut runs = Runs::default();
    // (agent, kind) → the volume of the current second.
    let mut budgets: HashMap<(String, String), Budget> = HashMap::new();
    let ready = match shared.watching().as_ref().map(|w| w.monitor.events_fd()) {
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
            let mut guard = shared.watching();
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
            clawfs_metrics::monitor_dropped("kernel", n);
            let ev = AuditEvent::new(agent.clone(), 0, OP_DROPPED, "/").reason(format!(
                "{n} events of agent group {agent} lost in the kernel (the event ring buffer was full)"
            ));
            let _ = tx.try_send(Out::Record(ev));
        }
        let now = Instant::now();
        for ev in &events {
            clawfs_metrics::monitor_event(kind_name(&ev.kind));
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
                clawfs_metrics::monitor_dropped("rate", 1);
                b.drop_one(&path);
                continue;
            }
            b.count += 1;
            if let Err(TrySendError::Full(_)) = tx.try_send(out) {
                clawfs_metrics::monitor_dropped("queue", 1);
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

/// The metrics' name of an event's kind.
fn kind_name(kind: &clawfs_ebpf::EventKind) -> &'static str {
    use clawfs_ebpf::EventKind;
    match kind {
        EventKind::Exec { .. } => "exec",
        EventKind::Open { .. } => "open",
        EventKind::Connect { .. } => "connect",
        EventKind::ConnectUnix { .. } => "connect_unix",
        EventKind::Refused(_) => "refused",
        EventKind::Seccomp { .. } => "seccomp",
    }
}
