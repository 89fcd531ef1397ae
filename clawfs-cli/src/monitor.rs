//! The daemon's agent event consumer (`clawfs_sandbox::events`) wired to the filesystem it
//! records for, both ways: what the consumer asks of the filesystem, and the filesystem's
//! activity monitor.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use clawfs_audit::AuditEvent;
use clawfs_core::fs::ActivityMonitor;
use clawfs_core::ClawFs;
use clawfs_sandbox::events::{AgentEvents, Served};

/// The event consumer's view of the filesystem it records for.
pub struct Recorder(pub Arc<ClawFs>);

impl Served for Recorder {
    fn record(&self, event: AuditEvent) {
        if let Some(audit) = self.0.audit_log() {
            audit.record(event);
        }
    }

    fn record_refusal(&self, event: AuditEvent) {
        self.0.record_kernel_refusal(event);
    }

    fn flush_records(&self) -> Result<(), clawfs_audit::AuditError> {
        self.0.audit_log().map_or(Ok(()), |audit| audit.flush())
    }

    fn answered_refusal(&self, tid: u32, span_ns: (u64, u64)) -> bool {
        self.0.answered_refusal(tid, span_ns)
    }

    fn store_fd(&self) -> BorrowedFd<'_> {
        self.0.store().root_fd()
    }

    fn policy(&self) -> Arc<clawfs_policy::Policy> {
        self.0.policy()
    }

    fn ns_path_of_ino(&self, ino: u64) -> Option<String> {
        self.0.ns_path_of_ino(ino).map(|p| p.to_string())
    }
}

/// The event consumer as the filesystem's activity monitor: announcements arm it, settle
/// requests wait on it.
pub struct Monitor(pub Arc<AgentEvents>);

impl ActivityMonitor for Monitor {
    fn agent_starting(&self, tid: u32) {
        self.0.arm(tid);
    }

    fn settle(&self) -> bool {
        self.0.settle()
    }
}
