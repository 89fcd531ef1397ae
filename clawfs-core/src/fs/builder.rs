//! How a [`ClawFs`] is built: everything it is given is given before it serves, in one
//! [`ClawFsBuilder`]. Two things it talks to can only exist after it does (the FUSE session
//! that carries its cache invalidations to the kernel, and the activity monitor that records
//! for it); it is built with their ends already in hand: an [`Invalidations`] channel whose
//! queue the session's notifier drains once it runs, and an [`ActivityLink`] the monitor is
//! attached to once it has started.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use clawfs_audit::AuditLog;
use clawfs_search::Indexer;

use super::{ActivityMonitor, Atime, ClawFs, Invalidation};
use crate::error::OpenError;
use crate::store::Store;

/// How long a caller waits for the kernel to take a batch of invalidations.
const INVALIDATION_WAIT: Duration = Duration::from_secs(2);

/// One batch of invalidations, and who to tell once the kernel has taken it.
type Batch = (Vec<Invalidation>, Sender<()>);

/// The filesystem's end of the invalidation channel: sends a batch and waits (at most
/// [`INVALIDATION_WAIT`]) until the kernel has taken it. A batch sent while nothing drains the
/// queue (the session has ended, or never began) is dropped at once.
pub struct Invalidations {
    tx: Mutex<Sender<Batch>>,
}

/// The session's end: batches to hand to the kernel, in order, each acknowledged with
/// [`InvalidationQueue::next`]'s `done`.
pub struct InvalidationQueue {
    rx: Receiver<Batch>,
}

/// A new invalidation channel.
pub fn invalidation_channel() -> (Invalidations, InvalidationQueue) {
    let (tx, rx) = channel();
    (
        Invalidations { tx: Mutex::new(tx) },
        InvalidationQueue { rx },
    )
}

impl Invalidations {
    /// Hands `batch` to the kernel and waits until it is taken (or given up on).
    pub fn deliver(&self, batch: Vec<Invalidation>) {
        let (done_tx, done_rx) = channel();
        let sent = self
            .tx
            .lock()
            .map(|tx| tx.send((batch, done_tx)).is_ok())
            .unwrap_or(false);
        if sent && done_rx.recv_timeout(INVALIDATION_WAIT).is_err() {
            tracing::warn!("the kernel did not take cache invalidations in time");
        }
    }
}

impl InvalidationQueue {
    /// The next batch, and what to call once the kernel has taken it; `None` once the
    /// filesystem is gone.
    pub fn next(&self) -> Option<(Vec<Invalidation>, impl FnOnce())> {
        let (batch, done) = self.rx.recv().ok()?;
        Some((batch, move || {
            // The caller may have stopped waiting.
            let _ = done.send(());
        }))
    }
}

/// Where the daemon's activity monitor is found once it has started (it records for the
/// filesystem, so it starts after it). Held weakly: the monitor holds the filesystem, not the
/// other way round.
#[derive(Clone, Default)]
pub struct ActivityLink(Arc<OnceLock<Weak<dyn ActivityMonitor>>>);

impl ActivityLink {
    /// Attaches the monitor (the first one attached stays).
    pub fn attach(&self, monitor: Weak<dyn ActivityMonitor>) {
        let _ = self.0.set(monitor);
    }

    /// The monitor, while it runs.
    pub(super) fn get(&self) -> Option<Arc<dyn ActivityMonitor>> {
        self.0.get().and_then(Weak::upgrade)
    }
}

/// A [`ClawFs`] to be: `ClawFs::builder(store)`, what it is given, then [`build`].
///
/// [`build`]: ClawFsBuilder::build
pub struct ClawFsBuilder {
    pub(super) store: Store,
    pub(super) atime: Atime,
    pub(super) cache_ttl: Duration,
    pub(super) mountpoint: Option<PathBuf>,
    pub(super) audit: Option<Arc<AuditLog>>,
    pub(super) indexer: Option<Arc<Indexer>>,
    pub(super) invalidations: Option<Invalidations>,
    pub(super) activity: ActivityLink,
    pub(super) tool_slots: usize,
    pub(super) descriptor_limits: Option<crate::descriptors::DescriptorLimits>,
}

impl ClawFsBuilder {
    pub(super) fn new(store: Store) -> Self {
        Self {
            store,
            atime: Atime::default(),
            cache_ttl: Duration::from_secs(1),
            mountpoint: None,
            audit: None,
            indexer: None,
            invalidations: None,
            activity: ActivityLink::default(),
            tool_slots: 1,
            descriptor_limits: None,
        }
    }

    /// How reads on callers' behalf keep access times (default: the store's own).
    pub fn atime(mut self, atime: Atime) -> Self {
        self.atime = atime;
        self
    }

    /// How long the kernel may cache entries and attributes of stored nodes (default 1 s).
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.cache_ttl = ttl;
        self
    }

    /// Where the store is mounted: tool requests may use absolute paths under it, tool
    /// messages name its files, and the registry served must name it.
    pub fn mountpoint(mut self, mountpoint: PathBuf) -> Self {
        self.mountpoint = Some(mountpoint);
        self
    }

    /// The audit trail decisions are recorded on (none: `--no-audit`).
    pub fn audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// The workspaces' indexer, told of every change through the mount (none: search off).
    pub fn indexer(mut self, indexer: Arc<Indexer>) -> Self {
        self.indexer = Some(indexer);
        self
    }

    /// How the kernel is told of changes made behind its back (none: nothing is told).
    pub fn invalidations(mut self, invalidations: Invalidations) -> Self {
        self.invalidations = Some(invalidations);
        self
    }

    /// Where the activity monitor will be found once it runs.
    pub fn activity(mut self, link: ActivityLink) -> Self {
        self.activity = link;
        self
    }

    /// How many published WebAssembly tool calls may run at once (default 1; 0: none). A call's file
    /// operations come back through the mount, so give the mount's FUSE threads but one: a
    /// thread must stay free to serve them. As many threads (at least one) run tool calls.
    pub fn tool_slots(mut self, n: usize) -> Self {
        self.tool_slots = n;
        self
    }

    /// How many open files and folders callers may hold through the mount (default: by the
    /// process's `RLIMIT_NOFILE` when built, [`crate::descriptors::DEFAULT_PER_CALLER`] per
    /// caller).
    pub fn descriptor_limits(mut self, limits: crate::descriptors::DescriptorLimits) -> Self {
        self.descriptor_limits = Some(limits);
        self
    }

    /// The filesystem, ready to serve.
    pub fn build(self) -> Result<ClawFs, OpenError> {
        ClawFs::from_builder(self)
    }
}
