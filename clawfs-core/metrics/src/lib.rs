//! What the daemon counts for Prometheus, and the HTTP endpoint that serves it.
//!
//! Nothing is recorded unless the mount serves metrics (`clawfs mount --metrics ADDR`):
//! [`active`] is then `Some`, and every recording site asks it first, so a mount without
//! metrics pays one atomic load per site. Label values are bounded: FUSE operation names and
//! errno names from fixed lists, agent names from the policy's roster, refusal rules from the
//! gate's own set; no path is ever a label.

mod serve;

use std::sync::OnceLock;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use serve::{serve, Server};

/// A FUSE operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Op {
    /// Its name (`lookup`, `write`, …).
    pub op: &'static str,
}

/// A FUSE operation that failed, and how.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpError {
    /// The operation.
    pub op: &'static str,
    /// The errno's name (`ENOENT`, …).
    pub errno: &'static str,
}

/// Bytes moved by the daemon.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Direction {
    /// `read` or `write`.
    pub direction: &'static str,
}

/// How an open file is served.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Transport {
    /// `passthrough` (the kernel reads and writes the backing file itself) or `daemon`.
    pub io: &'static str,
}

/// A refusal: whose (an agent of the roster, or `-` for users), by which rule.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Refusal {
    /// The agent, or `-`.
    pub agent: String,
    /// The rule that refused.
    pub rule: String,
}

/// One agent of the roster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Agent {
    /// Its name.
    pub agent: String,
}

/// A workspace (the store's folders: an administrator's list, not callers' paths).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Workspace {
    /// Its name.
    pub workspace: String,
}

/// What the kernel monitor of agent processes saw.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MonitorKind {
    /// `exec`, `open`, `connect`, `connect_unix`, `refused` or `seccomp`.
    pub kind: &'static str,
}

/// Monitor events not put on the trail, and why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MonitorDrop {
    /// `kernel` (the ring buffer was full), `rate` (over an agent's per-second budget; each
    /// second's drops are summed on the trail) or `queue` (the writer's queue was full).
    pub why: &'static str,
}

/// Every metric of a mount.
pub struct Metrics {
    registry: Registry,
    /// FUSE requests answered, by operation.
    pub requests: Family<Op, Counter>,
    /// FUSE requests answered with an error, by operation and errno.
    pub errors: Family<OpError, Counter>,
    /// Time from a request's arrival to its answer, by operation.
    pub latency: Family<Op, Histogram>,
    /// Bytes the daemon itself read or wrote for callers (passthrough I/O never reaches it).
    pub bytes: Family<Direction, Counter>,
    /// Files opened, by how they are served.
    pub opens: Family<Transport, Counter>,
    /// Open file and folder handles.
    pub open_handles: Gauge,
    /// Kernel cache entries the daemon invalidated (names and attributes changed behind it).
    pub invalidations: Counter,
    /// Refusals, by agent and rule.
    pub refusals: Family<Refusal, Counter>,
    /// Audit records handed to the trail's writer.
    pub audit_records: Counter,
    /// Bytes each agent holds, as its quota counts them.
    pub quota_bytes: Family<Agent, Gauge>,
    /// Files each agent holds.
    pub quota_files: Family<Agent, Gauge>,
    /// Each agent's byte quota (absent when unlimited).
    pub quota_bytes_limit: Family<Agent, Gauge>,
    /// Each agent's file quota (absent when unlimited).
    pub quota_files_limit: Family<Agent, Gauge>,
    /// Processes of each agent running now (in its cgroup).
    pub agent_processes: Family<Agent, Gauge>,
    /// 1 while an emergency stop is in force.
    pub estop: Gauge,
    /// 1 while the vault's master key is unsealed (in the kernel keyring).
    pub vault_unsealed: Gauge,
    /// Audit records handed to the writer and not yet written.
    pub audit_lag: Gauge,
    /// Changes queued for the search index and not yet applied.
    pub index_pending: Gauge,
    /// When each workspace's index last took a change (Unix seconds), since the daemon started.
    pub index_last: Family<Workspace, Gauge>,
    /// Events of agent processes the kernel monitor reported, by kind.
    pub monitor_events: Family<MonitorKind, Counter>,
    /// Monitor events not put on the trail one by one, by why.
    pub monitor_dropped: Family<MonitorDrop, Counter>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("clawfs");
        let m = Metrics {
            requests: Family::default(),
            errors: Family::default(),
            // 10 µs to about 2.6 s.
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_01, 4.0, 10))
            }),
            bytes: Family::default(),
            opens: Family::default(),
            open_handles: Gauge::default(),
            invalidations: Counter::default(),
            refusals: Family::default(),
            audit_records: Counter::default(),
            quota_bytes: Family::default(),
            quota_files: Family::default(),
            quota_bytes_limit: Family::default(),
            quota_files_limit: Family::default(),
            agent_processes: Family::default(),
            estop: Gauge::default(),
            vault_unsealed: Gauge::default(),
            audit_lag: Gauge::default(),
            index_pending: Gauge::default(),
            index_last: Family::default(),
            monitor_events: Family::default(),
            monitor_dropped: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "fuse_requests",
            "FUSE requests answered",
            m.requests.clone(),
        );
        registry.register(
            "fuse_errors",
            "FUSE requests answered with an error",
            m.errors.clone(),
        );
        registry.register(
            "fuse_request_seconds",
            "Time from a FUSE request's arrival to its answer",
            m.latency.clone(),
        );
        registry.register(
            "daemon_bytes",
            "Bytes the daemon read or wrote for callers (passthrough I/O is the kernel's and not counted)",
            m.bytes.clone(),
        );
        registry.register(
            "opens",
            "Files opened, by how they are served",
            m.opens.clone(),
        );
        registry.register(
            "open_handles",
            "Open file and folder handles",
            m.open_handles.clone(),
        );
        registry.register(
            "kernel_invalidations",
            "Kernel cache entries invalidated by the daemon",
            m.invalidations.clone(),
        );
        registry.register(
            "refusals",
            "Refusals, by agent and rule",
            m.refusals.clone(),
        );
        registry.register(
            "audit_records",
            "Audit records handed to the trail's writer",
            m.audit_records.clone(),
        );
        registry.register(
            "quota_used_bytes",
            "Bytes each agent holds",
            m.quota_bytes.clone(),
        );
        registry.register(
            "quota_used_files",
            "Files each agent holds",
            m.quota_files.clone(),
        );
        registry.register(
            "quota_limit_bytes",
            "Each agent's byte quota (absent when unlimited)",
            m.quota_bytes_limit.clone(),
        );
        registry.register(
            "quota_limit_files",
            "Each agent's file quota (absent when unlimited)",
            m.quota_files_limit.clone(),
        );
        registry.register(
            "agent_processes",
            "Processes running in each agent's cgroup",
            m.agent_processes.clone(),
        );
        registry.register(
            "estop",
            "1 while an emergency stop is in force",
            m.estop.clone(),
        );
        registry.register(
            "vault_unsealed",
            "1 while the vault's master key is unsealed (in the kernel keyring)",
            m.vault_unsealed.clone(),
        );
        // Every kind and reason from the start, at zero: a rate over them answers before the
        // first event.
        for kind in [
            "exec",
            "open",
            "connect",
            "connect_unix",
            "refused",
            "seccomp",
        ] {
            drop(m.monitor_events.get_or_create(&MonitorKind { kind }));
        }
        for why in ["kernel", "rate", "queue"] {
            drop(m.monitor_dropped.get_or_create(&MonitorDrop { why }));
        }
        registry.register(
            "audit_lag_records",
            "Audit records handed to the writer and not yet written",
            m.audit_lag.clone(),
        );
        registry.register(
            "index_pending_changes",
            "Changes queued for the search index and not yet applied",
            m.index_pending.clone(),
        );
        registry.register(
            "index_last_indexed_timestamp_seconds",
            "When each workspace's index last took a change, since the daemon started",
            m.index_last.clone(),
        );
        registry.register(
            "monitor_events",
            "Events of agent processes reported by the kernel monitor, by kind",
            m.monitor_events.clone(),
        );
        registry.register(
            "monitor_dropped_events",
            "Monitor events not put on the audit trail one by one, by why",
            m.monitor_dropped.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The metrics as OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Starts recording (once per process); the metrics.
pub fn enable() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// The metrics, if this mount records them.
#[inline]
pub fn active() -> Option<&'static Metrics> {
    METRICS.get()
}

/// Times one FUSE request from here to its drop, when metrics are recorded.
pub struct Timed {
    op: &'static str,
    started: Instant,
}

impl Timed {
    /// The request `op` starts now.
    #[inline]
    pub fn start(op: &'static str) -> Option<Timed> {
        active().map(|_| Timed {
            op,
            started: Instant::now(),
        })
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        let Some(m) = active() else {
            return;
        };
        let seconds = self.started.elapsed().as_secs_f64();
        // Each thread keeps the handles of the operations it served: no lookup in the
        // families (a lock and a hash) per request.
        thread_local! {
            static HANDLES: std::cell::RefCell<Vec<(usize, Counter, Histogram)>> =
                const { std::cell::RefCell::new(Vec::new()) };
        }
        HANDLES.with_borrow_mut(|handles| {
            let key = self.op.as_ptr() as usize;
            let i = match handles.iter().position(|h| h.0 == key) {
                Some(i) => i,
                None => {
                    let op = Op { op: self.op };
                    handles.push((
                        key,
                        m.requests.get_or_create(&op).clone(),
                        m.latency.get_or_create(&op).clone(),
                    ));
                    handles.len() - 1
                }
            };
            let (_, requests, latency) = &handles[i];
            requests.inc();
            latency.observe(seconds);
        });
    }
}

/// Counts a request of `op` answered with `errno` (its name).
#[inline]
pub fn error(op: &'static str, errno: &'static str) {
    if let Some(m) = active() {
        m.errors.get_or_create(&OpError { op, errno }).inc();
    }
}

/// Counts bytes the daemon read (`"read"`) or wrote (`"write"`).
#[inline]
pub fn bytes(direction: &'static str, n: usize) {
    if let Some(m) = active() {
        m.bytes
            .get_or_create(&Direction { direction })
            .inc_by(n as u64);
    }
}

/// Counts an open served by `io` (`"passthrough"` or `"daemon"`) and the handle it holds.
#[inline]
pub fn opened(io: &'static str) {
    if let Some(m) = active() {
        m.opens.get_or_create(&Transport { io }).inc();
        m.open_handles.inc();
    }
}

/// A handle that counted as opened ([`opened`], [`opened_dir`]) was released.
#[inline]
pub fn released() {
    if let Some(m) = active() {
        m.open_handles.dec();
    }
}

/// A folder handle was opened.
#[inline]
pub fn opened_dir() {
    if let Some(m) = active() {
        m.open_handles.inc();
    }
}

/// Counts a refusal of `agent` (`None` for a user) by `rule`.
pub fn refusal(agent: Option<&str>, rule: &str) {
    if let Some(m) = active() {
        m.refusals
            .get_or_create(&Refusal {
                agent: agent.unwrap_or("-").to_string(),
                rule: rule.to_string(),
            })
            .inc();
    }
}

/// Counts an audit record handed to the writer.
#[inline]
pub fn audit_record() {
    if let Some(m) = active() {
        m.audit_records.inc();
    }
}

/// Counts an event of kind `kind` from the kernel monitor.
#[inline]
pub fn monitor_event(kind: &'static str) {
    if let Some(m) = active() {
        m.monitor_events.get_or_create(&MonitorKind { kind }).inc();
    }
}

/// Counts `n` monitor events dropped for `why` (see [`MonitorDrop`]).
#[inline]
pub fn monitor_dropped(why: &'static str, n: u64) {
    if let Some(m) = active() {
        m.monitor_dropped
            .get_or_create(&MonitorDrop { why })
            .inc_by(n);
    }
}

/// Counts a kernel cache invalidation.
#[inline]
pub fn invalidation() {
    if let Some(m) = active() {
        m.invalidations.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_metrics_are_encoded_with_their_labels() {
        let m = enable();
        {
            let _t = Timed::start("lookup");
        }
        error("lookup", "ENOENT");
        bytes("write", 4096);
        opened("passthrough");
        refusal(Some("fs-engine"), "VAULT-GRANT");
        let text = m.encode();
        for line in [
            "clawfs_fuse_requests_total{op=\"lookup\"} 1",
            "clawfs_fuse_errors_total{op=\"lookup\",errno=\"ENOENT\"} 1",
            "clawfs_daemon_bytes_total{direction=\"write\"} 4096",
            "clawfs_opens_total{io=\"passthrough\"} 1",
            "clawfs_open_handles 1",
            "clawfs_refusals_total{agent=\"fs-engine\",rule=\"VAULT-GRANT\"} 1",
            "clawfs_fuse_request_seconds_count{op=\"lookup\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
