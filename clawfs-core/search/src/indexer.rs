//! The indexer: owns every workspace's index, and follows changes in the background, so that a
//! write through the mount never waits for indexing.
//!
//! Changes are queued ([`Indexer::notify`]) and taken in batches: after the first, the thread
//! waits until no change came for [`QUIET`] (at most [`MAX_WAIT`]), so a burst of writes to one
//! file is indexed once. The vector graphs a batch changed are saved once the queue has been
//! quiet for [`SAVE_QUIET`] (at the latest [`SAVE_AT_LEAST_EVERY`] under a steady stream of
//! changes, and when the indexer stops): a save rewrites and syncs the whole graph file, tens
//! to hundreds of megabytes, which done after every batch competed with the writers for the
//! disk. A graph left unsaved by a crash does not match the database's generation and is
//! rebuilt from the database at the next start.
//!
//! The quiet moment before a save is also when the vectors indexed since wait to be inserted
//! into the graph ([`super::hnsw`]): the inserts, most of indexing's work, stop as soon as a
//! change comes in, so they run when the writers pause, not beside them. Under a steady stream
//! they are inserted at the save of [`SAVE_AT_LEAST_EVERY`].

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::config::{EmbedderConfig, SearchConfig};
use super::embed::{BuiltinModel, Embedder, HashingEmbedder, RemoteClient};
use super::hnsw::HnswParams;
use super::lease::{Forwarded, Leases};
use super::workspace::{is_managed, IndexFiles, WorkspaceIndex};
use super::SearchError;

/// How long the queue must be quiet before a batch is indexed.
pub const QUIET: Duration = Duration::from_millis(150);
/// The longest a change waits in a busy queue.
pub const MAX_WAIT: Duration = Duration::from_secs(2);
/// How long the queue must be quiet before changed graphs are saved.
pub const SAVE_QUIET: Duration = Duration::from_secs(5);
/// The longest a changed graph goes unsaved while changes keep coming.
pub const SAVE_AT_LEAST_EVERY: Duration = Duration::from_secs(60);
/// How often an idle indexer retries files indexed without vectors.
pub const RETRY_UNEMBEDDED: Duration = Duration::from_secs(60);

/// A change to index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// A file was written, truncated, created or renamed here (or removed: then it is forgotten).
    File {
        /// Workspace name.
        workspace: String,
        /// Path in the workspace.
        rel: String,
    },
    /// A folder went: forget everything below it.
    Tree {
        /// Workspace name.
        workspace: String,
        /// Folder in the workspace.
        rel: String,
    },
    /// Compare the whole workspace with the index (at mount; after a folder rename).
    Rescan {
        /// Workspace name.
        workspace: String,
    },
    /// The workspace's dimension or graph parameters changed: reopen (re-indexing) it.
    Reconfigure {
        /// Workspace name.
        workspace: String,
    },
}

impl Change {
    /// The workspace it is in.
    pub fn workspace(&self) -> &str {
        match self {
            Change::File { workspace, .. }
            | Change::Tree { workspace, .. }
            | Change::Rescan { workspace }
            | Change::Reconfigure { workspace } => workspace,
        }
    }
}

/// Which embedder new indexes use.
#[derive(Clone)]
pub enum EmbedderChoice {
    /// The built-in model (the default).
    Builtin(BuiltinModel),
    /// An OpenAI-compatible endpoint (`system/search.toml`).
    Remote(Arc<RemoteClient>),
    /// Feature hashing: a test double, never the default.
    Hashing,
    /// None: text search only (the model is not installed).
    None,
}

impl EmbedderChoice {
    /// The embedder `system/search.toml` of the store at `store_root` names: the built-in model
    /// when the file is absent (or text only if the model is not installed); an error when the
    /// file is wrong.
    pub fn for_store(store_root: &Path) -> Result<EmbedderChoice, SearchError> {
        match SearchConfig::load(store_root)?.embedder {
            EmbedderConfig::Builtin => Ok(EmbedderChoice::builtin_or_text_only()),
            EmbedderConfig::OpenaiCompatible(config) => {
                let url = config.base_url.clone();
                let client = RemoteClient::new(config, super::config::vault_keys(store_root))
                    .map_err(|e| {
                        SearchError::Config(format!("{}: {e}", super::config::CONFIG_FILE))
                    })?;
                tracing::info!(endpoint = %url, "embedding with an OpenAI-compatible endpoint");
                Ok(EmbedderChoice::Remote(client))
            }
        }
    }

    /// The built-in model from its directory, or `None` with a warning when it is not installed.
    pub fn builtin_or_text_only() -> EmbedderChoice {
        let dir = BuiltinModel::model_dir();
        match BuiltinModel::load(&dir, 256) {
            Ok(m) => EmbedderChoice::Builtin(m),
            Err(e) => {
                tracing::warn!(error = %e, "no embedding model: search is by text only");
                EmbedderChoice::None
            }
        }
    }

    /// The embedder of vectors of `dim` components (None: text search only).
    pub fn for_dimension(&self, dim: usize) -> Option<Arc<dyn Embedder>> {
        match self {
            EmbedderChoice::Builtin(m) => Some(Arc::new(m.with_dimension(dim))),
            EmbedderChoice::Remote(c) => Some(Arc::new(c.embedder(dim))),
            EmbedderChoice::Hashing => Some(Arc::new(HashingEmbedder::new(dim))),
            EmbedderChoice::None => None,
        }
    }
}

struct Shared {
    /// The store's `workspaces/`, opened by the daemon.
    workspaces: OwnedFd,
    /// `.clawfs/index/`.
    index_root: PathBuf,
    embedder: EmbedderChoice,
    open: Mutex<HashMap<String, Arc<WorkspaceIndex>>>,
    /// Set by [`Indexer::stop`]: the thread ends at the next file instead of finishing its
    /// batch (minutes for a large tree, during which the daemon outlived its unmount).
    stopping: AtomicBool,
    /// The indexer thread's id, so that [`Indexer::stop`] can give it back a normal priority:
    /// a stopping thread left at the back of a busy machine would keep the daemon alive.
    tid: std::sync::atomic::AtomicI32,
    /// Changes queued, and those taken and applied since (the queue's length is the
    /// difference).
    queued: std::sync::atomic::AtomicU64,
    applied: std::sync::atomic::AtomicU64,
    /// When each workspace's last change was applied.
    last_indexed: Mutex<HashMap<String, std::time::SystemTime>>,
    /// In a store that hosts share: which workspaces' indexes this host writes.
    leases: Option<Leases>,
}

/// Every workspace's index and the thread that keeps them current.
pub struct Indexer {
    shared: Arc<Shared>,
    queue: Mutex<Option<mpsc::Sender<Change>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Indexer {
    /// An indexer for the store at `store_root`; with `background`, its thread is started.
    pub fn new(
        store_root: &Path,
        embedder: EmbedderChoice,
        background: bool,
    ) -> Result<Arc<Indexer>, SearchError> {
        Self::with_leases(store_root, embedder, background, None)
    }

    /// [`Self::new`] for one host of a store that hosts share: it writes the indexes whose
    /// lease it holds and searches replicas of the others ([`crate::lease`]).
    pub fn with_leases(
        store_root: &Path,
        embedder: EmbedderChoice,
        background: bool,
        leases: Option<Leases>,
    ) -> Result<Arc<Indexer>, SearchError> {
        let root = clawfs_store::beneath::open_root(store_root).map_err(|e| {
            SearchError::io(format!("opening the store {}", store_root.display()), e)
        })?;
        let workspaces = clawfs_store::beneath::open(
            root.as_fd(),
            Path::new(clawfs_store::area::Area::Workspaces.dir_name()),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            0,
        )
        .map_err(|e| SearchError::io("opening workspaces/", e))?;
        let shared = Arc::new(Shared {
            workspaces,
            index_root: store_root
                .join(clawfs_store::layout::PRIVATE_DIR)
                .join("index"),
            embedder,
            open: Mutex::default(),
            stopping: AtomicBool::new(false),
            tid: std::sync::atomic::AtomicI32::new(0),
            queued: Default::default(),
            applied: Default::default(),
            last_indexed: Mutex::default(),
            leases,
        });
        let indexer = Arc::new(Indexer {
            shared: Arc::clone(&shared),
            queue: Mutex::new(None),
            thread: Mutex::new(None),
        });
        if background {
            let (tx, rx) = mpsc::channel();
            let handle = std::thread::Builder::new()
                .name("indexer".into())
                .spawn(move || {
                    let tid = rustix::thread::gettid().as_raw_nonzero().get();
                    shared.tid.store(tid, Ordering::Relaxed);
                    set_priority(tid, true);
                    run(&shared, &rx)
                })
                .map_err(|e| SearchError::io("starting the indexer", e))?;
            *indexer.queue.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
            *indexer
                .thread
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(handle);
        }
        Ok(indexer)
    }

    /// Queues a change (never blocks; dropped after [`Indexer::stop`]).
    pub fn notify(&self, change: Change) {
        if let Some(tx) = self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            if tx.send(change).is_ok() {
                self.shared.queued.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Changes queued and not yet applied.
    pub fn pending(&self) -> u64 {
        let applied = self.shared.applied.load(Ordering::Relaxed);
        self.shared
            .queued
            .load(Ordering::Relaxed)
            .saturating_sub(applied)
    }

    /// When each workspace's index last took a change, since the daemon started.
    pub fn last_indexed(&self) -> Vec<(String, std::time::SystemTime)> {
        let last = self
            .shared
            .last_indexed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        last.iter().map(|(w, t)| (w.clone(), *t)).collect()
    }

    /// Queues a rescan of every workspace (at mount: changes made while unmounted).
    pub fn rescan_all(&self) -> Result<(), SearchError> {
        for ws in self.workspace_names()? {
            self.notify(Change::Rescan { workspace: ws });
        }
        Ok(())
    }

    /// The workspaces of the store.
    pub fn workspace_names(&self) -> Result<Vec<String>, SearchError> {
        workspace_names_of(&self.shared)
    }

    /// The index of `workspace` to search (opened on first use): in a store that hosts
    /// share, a replica of it unless this host writes it.
    pub fn index(&self, workspace: &str) -> Result<Arc<WorkspaceIndex>, SearchError> {
        match &self.shared.leases {
            Some(leases) if !leases.holds(workspace) => {
                let ws = workspace_fd(&self.shared, workspace)?;
                let (dim, params) = workspace_settings(&ws);
                leases.replica(workspace, |dir| {
                    let (ix, _) = WorkspaceIndex::open(
                        workspace,
                        &IndexFiles::private(dir)?,
                        dim,
                        params,
                        self.shared.embedder.for_dimension(dim),
                    )?;
                    Ok(Arc::new(ix))
                })
            }
            _ => open_index(&self.shared, workspace).map(|(ix, _)| ix),
        }
    }

    /// The folder of `workspace`, by descriptor beneath the store.
    pub fn workspace_dir(&self, workspace: &str) -> Result<OwnedFd, SearchError> {
        workspace_fd(&self.shared, workspace)
    }

    /// Rescans `workspace` now, on this thread, reporting progress.
    pub fn rebuild(
        &self,
        workspace: &str,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<super::workspace::RescanReport, SearchError> {
        let ix = self.index(workspace)?;
        let ws = workspace_fd(&self.shared, workspace)?;
        ix.rescan(ws.as_fd(), progress)
    }

    /// Stops the thread at the next file, and saves every graph. Changes not indexed yet are
    /// found by the rescan of the next mount.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        // It finishes its file and saves at once, whatever else the machine does.
        match self.shared.tid.load(Ordering::Relaxed) {
            0 => {}
            tid => set_priority(tid, false),
        }
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = h.join();
        }
        for ix in self
            .shared
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            if let Err(e) = ix.save_graph() {
                tracing::warn!(workspace = ix.name(), error = %e, "saving the vector graph");
            }
        }
    }
}

/// The workspaces of the store.
fn workspace_names_of(shared: &Shared) -> Result<Vec<String>, SearchError> {
    let dir = clawfs_store::beneath::open_dir(shared.workspaces.as_fd(), Path::new("."))
        .map_err(|e| SearchError::io("listing workspaces/", e))?;
    let mut names = Vec::new();
    let mut it = rustix::fs::Dir::read_from(&dir)
        .map_err(|e| SearchError::io("listing workspaces/", e.into()))?;
    while let Some(Ok(ent)) = it.read() {
        if ent.file_type() != rustix::fs::FileType::Directory {
            continue;
        }
        if let Ok(n) = ent.file_name().to_str() {
            if clawfs_store::names::check_system_name(std::ffi::OsStr::new(n)).is_ok() {
                names.push(n.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// The workspace folder `workspace`, by descriptor beneath the store.
fn workspace_fd(shared: &Shared, workspace: &str) -> Result<OwnedFd, SearchError> {
    clawfs_store::names::check_system_name(std::ffi::OsStr::new(workspace))
        .map_err(|e| SearchError::Unavailable(format!("workspace {workspace:?}: {e}")))?;
    clawfs_store::beneath::open_dir(shared.workspaces.as_fd(), Path::new(workspace)).map_err(|e| {
        match e.kind() {
            std::io::ErrorKind::NotFound => {
                SearchError::Unavailable(format!("there is no workspace {workspace:?}"))
            }
            _ => SearchError::io(format!("opening workspace {workspace}"), e),
        }
    })
}

/// The dimension and graph parameters in the workspace's `metadata.json` (defaults if absent
/// or unreadable).
fn workspace_settings(ws: &OwnedFd) -> (usize, HnswParams) {
    #[derive(serde::Deserialize)]
    struct Meta {
        vector_dimension: Option<usize>,
        hnsw_params: Option<HnswParams>,
    }
    let meta = clawfs_store::beneath::read(ws.as_fd(), Path::new("metadata.json"), 1 << 20)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<Meta>(&b).ok());
    let dim = meta
        .as_ref()
        .and_then(|m| m.vector_dimension)
        .filter(|d| (128..=4096).contains(d))
        .unwrap_or(crate::DEFAULT_VECTOR_DIMENSION as usize);
    let params = meta
        .and_then(|m| m.hnsw_params)
        .unwrap_or_default()
        .clamped();
    (dim, params)
}

/// The open index of `workspace`, opening it if needed; true when it was just opened empty
/// (new, rebuilt or re-embedded) and needs a rescan.
fn open_index(
    shared: &Shared,
    workspace: &str,
) -> Result<(Arc<WorkspaceIndex>, bool), SearchError> {
    if let Some(ix) = shared
        .open
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(workspace)
    {
        return Ok((Arc::clone(ix), false));
    }
    let ws = workspace_fd(shared, workspace)?;
    let (dim, params) = workspace_settings(&ws);
    // A shared store's holder writes its index on local disk.
    let dir = match &shared.leases {
        Some(leases) => leases.working(workspace)?,
        None => shared.index_root.join(workspace),
    };
    let (ix, fresh) = WorkspaceIndex::open(
        workspace,
        &IndexFiles::private(&dir)?,
        dim,
        params,
        shared.embedder.for_dimension(dim),
    )?;
    let ix = Arc::new(ix);
    let mut open = shared.open.lock().unwrap_or_else(PoisonError::into_inner);
    let ix = open.entry(workspace.to_string()).or_insert(ix);
    Ok((Arc::clone(ix), fresh))
}

fn run(shared: &Shared, rx: &mpsc::Receiver<Change>) {
    // Workspaces whose graph changed since it was saved, and since when.
    let mut unsaved = BTreeSet::new();
    let mut unsaved_since = None;
    // When the last batch was indexed.
    let mut last_batch = Instant::now();
    loop {
        let wait = match unsaved.is_empty() {
            true => RETRY_UNEMBEDDED,
            false => SAVE_QUIET,
        };
        let wait = match &shared.leases {
            Some(_) => wait.min(crate::lease::LOOK_EVERY),
            None => wait,
        };
        if let Some(leases) = &shared.leases {
            look_at_leases(shared, leases, &mut unsaved);
        }
        let first = match rx.recv_timeout(wait) {
            Ok(c) => c,
            // Leases are looked at every second; graphs are saved by the same rule as in a
            // store of one host, not at each look: a save rewrites the whole graph file, which
            // on a shared volume is new objects every time.
            Err(RecvTimeoutError::Timeout) if shared.leases.is_some() => {
                if !unsaved.is_empty() && last_batch.elapsed() >= SAVE_QUIET {
                    settle_graphs(shared, &mut unsaved);
                    if unsaved.is_empty() {
                        unsaved_since = None;
                    }
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) if unsaved.is_empty() => {
                retry_unembedded(shared);
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {
                settle_graphs(shared, &mut unsaved);
                if unsaved.is_empty() {
                    unsaved_since = None;
                }
                continue;
            }
            // Stopping: `Indexer::stop` saves every open graph.
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut batch = BTreeSet::from([first]);
        let mut taken = 1u64;
        let started = Instant::now();
        loop {
            // Sleeps instead of waiting on the queue: a waiting receiver is woken by every
            // change, which cost each write through the mount a wake-up of this thread.
            std::thread::sleep(QUIET);
            let (mut came, mut gone) = (false, false);
            loop {
                match rx.try_recv() {
                    Ok(c) => {
                        batch.insert(c);
                        taken += 1;
                        came = true;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        gone = true;
                        break;
                    }
                }
            }
            if gone || !came || started.elapsed() > MAX_WAIT {
                break;
            }
        }
        let mut batches = Batches::default();
        for change in batch {
            if shared.stopping.load(Ordering::Relaxed) {
                return;
            }
            batches.prepare(shared, &change);
            if let Err(e) = apply(shared, &change, &mut unsaved) {
                tracing::warn!(?change, error = %e, "indexing failed");
            }
            let now = std::time::SystemTime::now();
            let mut last = shared
                .last_indexed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match last.get_mut(change.workspace()) {
                Some(t) => *t = now,
                None => {
                    last.insert(change.workspace().to_string(), now);
                }
            }
        }
        // A batch rolled back (a full disk, say) lost files that were indexed: the workspace
        // is compared with its index again, which indexes them once writes work.
        for workspace in batches.commit() {
            tracing::warn!(workspace = %workspace, "indexed files rolled back: comparing the workspace with its index again");
            if let Err(e) = apply(shared, &Change::Rescan { workspace }, &mut unsaved) {
                tracing::warn!(error = %e, "indexing failed");
            }
        }
        shared.applied.fetch_add(taken, Ordering::Relaxed);
        last_batch = Instant::now();
        if !unsaved.is_empty()
            && unsaved_since.get_or_insert_with(Instant::now).elapsed() >= SAVE_AT_LEAST_EVERY
        {
            save_graphs(shared, &mut unsaved);
            unsaved_since = None;
        }
    }
}

/// The workspaces whose files a batch of changes indexes in one transaction each
/// ([`WorkspaceIndex::begin_batch`]), all committed when this is dropped.
#[derive(Default)]
struct Batches(HashMap<String, Arc<WorkspaceIndex>>);

impl Batches {
    /// Before `change` is applied: a file or folder change joins its workspace's batch; a
    /// rescan or a new dimension, which reopen or rebuild an index, first commits them all. In
    /// a store that hosts share, whether this host writes an index is the lease's to say, at
    /// each change: there, every file keeps its own transaction.
    fn prepare(&mut self, shared: &Shared, change: &Change) {
        if shared.leases.is_some() {
            return;
        }
        match change {
            Change::File { workspace, .. } | Change::Tree { workspace, .. } => {
                if self.0.contains_key(workspace) {
                    return;
                }
                if let Ok((ix, _)) = open_index(shared, workspace) {
                    ix.begin_batch();
                    self.0.insert(workspace.clone(), ix);
                }
            }
            // What a rescan would find again, this one finds.
            Change::Rescan { .. } | Change::Reconfigure { .. } => drop(self.commit()),
        }
    }

    /// Commits every batch; returns the workspaces that lost part of theirs.
    fn commit(&mut self) -> Vec<String> {
        let mut lost = Vec::new();
        for (ws, ix) in self.0.drain() {
            match ix.end_batch() {
                Ok(true) => {}
                Ok(false) => lost.push(ws),
                Err(e) => {
                    tracing::warn!(workspace = %ws, error = %e, "committing indexed files");
                    lost.push(ws);
                }
            }
        }
        lost
    }
}

impl Drop for Batches {
    fn drop(&mut self) {
        self.commit();
    }
}

/// In a store that hosts share: takes the leases of workspaces whose holder is gone and
/// catches their indexes up, rescans the workspaces other hosts changed, and publishes what
/// changed.
fn look_at_leases(shared: &Shared, leases: &Leases, unsaved: &mut BTreeSet<String>) {
    leases.mark_pending();
    let names = match workspace_names_of(shared) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "listing workspaces");
            return;
        }
    };
    for ws in names {
        if shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        let forwarded = match leases.hold(&ws) {
            None => continue,
            Some(true) => vec![Forwarded::All],
            Some(false) => leases.changed_elsewhere(&ws),
        };
        if !leases.is_published(&ws) {
            // For a host that joins later.
            leases.changed(&ws);
        }
        for f in forwarded {
            let workspace = ws.clone();
            let change = match f {
                Forwarded::File(rel) => Change::File { workspace, rel },
                Forwarded::Tree(rel) => Change::Tree { workspace, rel },
                Forwarded::All => Change::Rescan { workspace },
            };
            if let Err(e) = apply(shared, &change, unsaved) {
                tracing::warn!(workspace = %ws, error = %e, "indexing other hosts' changes");
            }
        }
    }
    for ws in leases.due() {
        if let Ok((ix, _)) = open_index(shared, &ws) {
            leases.publish(&ix);
        }
    }
}

/// In a quiet moment: inserts the vectors waiting beside the graphs of the workspaces in
/// `unsaved` until a change comes, and saves each graph that has none left waiting (it leaves
/// `unsaved`).
fn settle_graphs(shared: &Shared, unsaved: &mut BTreeSet<String>) {
    let quiet = || {
        !shared.stopping.load(Ordering::Relaxed)
            && shared.queued.load(Ordering::Relaxed) <= shared.applied.load(Ordering::Relaxed)
    };
    for ws in unsaved.clone() {
        if !quiet() {
            return;
        }
        let Ok((ix, _)) = open_index(shared, &ws) else {
            unsaved.remove(&ws);
            continue;
        };
        match ix.settle_graph(&quiet) {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(workspace = %ws, error = %e, "inserting into the vector graph")
            }
        }
        unsaved.remove(&ws);
        if let Err(e) = ix.save_graph() {
            tracing::warn!(workspace = %ws, error = %e, "saving the vector graph");
        }
    }
}

/// Saves the graphs of the workspaces in `unsaved` (their waiting vectors inserted first),
/// and empties it.
fn save_graphs(shared: &Shared, unsaved: &mut BTreeSet<String>) {
    for ws in std::mem::take(unsaved) {
        if let Ok((ix, _)) = open_index(shared, &ws) {
            if let Err(e) = ix.save_graph() {
                tracing::warn!(workspace = %ws, error = %e, "saving the vector graph");
            }
        }
    }
}

/// Puts the thread `tid` (and the threads it starts, which inherit it) at the back of the
/// machine (`background`): `SCHED_IDLE` for the CPU, the idle I/O class for the disk, so
/// indexing takes a core or the disk only when nothing else wants them (nice 19 where
/// `SCHED_IDLE` is refused); or back to a normal priority.
fn set_priority(tid: i32, background: bool) {
    let (policy, io_class) = match background {
        true => (libc::SCHED_IDLE, 3),
        false => (libc::SCHED_OTHER, 2),
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets a thread's policy from a valid parameter block.
    if unsafe { libc::sched_setscheduler(tid, policy, &param) } != 0 && background {
        let thread = rustix::process::Pid::from_raw(tid);
        if let Err(e) = rustix::process::setpriority_process(thread, 19) {
            tracing::debug!(error = %e, "indexer priority unchanged");
        }
    }
    // IOPRIO_WHO_PROCESS of the thread; the class << IOPRIO_CLASS_SHIFT (13), level 4.
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    let prio = libc::c_long::from((io_class << 13) | 4);
    // SAFETY: ioprio_set takes three integers; a refusal changes nothing.
    if unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            libc::c_long::from(tid),
            prio,
        )
    } != 0
    {
        tracing::debug!("indexer I/O priority unchanged");
    }
}

/// Rescans `ix` until the indexer stops.
fn rescan(
    shared: &Shared,
    ix: &WorkspaceIndex,
    ws: &OwnedFd,
) -> Result<super::workspace::RescanReport, SearchError> {
    ix.rescan_while(ws.as_fd(), &mut |_, _| {}, &|| {
        !shared.stopping.load(Ordering::Relaxed)
    })
}

/// Gives the files indexed without vectors (the embedder was unavailable) another try, in
/// every open index that has some.
fn retry_unembedded(shared: &Shared) {
    let open: Vec<Arc<WorkspaceIndex>> = shared
        .open
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .cloned()
        .collect();
    for ix in open {
        if ix.unembedded().unwrap_or(0) == 0 || !ix.embedder_answers() {
            continue;
        }
        let Ok(ws) = workspace_fd(shared, ix.name()) else {
            continue;
        };
        match rescan(shared, &ix, &ws) {
            Ok(r) => tracing::info!(
                workspace = ix.name(),
                updated = r.updated,
                "files waiting for vectors indexed again"
            ),
            Err(e) => tracing::warn!(workspace = ix.name(), error = %e, "indexing again"),
        }
    }
}

fn apply(
    shared: &Shared,
    change: &Change,
    touched: &mut BTreeSet<String>,
) -> Result<(), SearchError> {
    if let Some(leases) = &shared.leases {
        let ws = change.workspace();
        match leases.hold(ws) {
            // Another host writes this index: it indexes again what this host's agents changed.
            None => {
                let forwarded = match change {
                    Change::File { rel, .. } => Forwarded::File(rel.clone()),
                    Change::Tree { rel, .. } => Forwarded::Tree(rel.clone()),
                    Change::Rescan { .. } | Change::Reconfigure { .. } => Forwarded::All,
                };
                leases.mark_changed(ws, forwarded);
                return Ok(());
            }
            // Taken over just now: the index catches up with every host's changes.
            Some(true) if !matches!(change, Change::Rescan { .. }) => {
                let rescan = Change::Rescan {
                    workspace: ws.to_string(),
                };
                return apply(shared, &rescan, touched);
            }
            Some(_) => leases.changed(ws),
        }
    }
    match change {
        Change::File { rel, .. } | Change::Tree { rel, .. } if is_managed(rel) => Ok(()),
        Change::File { workspace, rel } => {
            let (ix, fresh) = open_index(shared, workspace)?;
            let ws = workspace_fd(shared, workspace)?;
            if fresh {
                rescan(shared, &ix, &ws)?;
            } else {
                ix.update(ws.as_fd(), rel)?;
            }
            touched.insert(workspace.clone());
            Ok(())
        }
        Change::Tree { workspace, rel } => {
            let (ix, _) = open_index(shared, workspace)?;
            ix.forget(rel, true)?;
            touched.insert(workspace.clone());
            Ok(())
        }
        Change::Rescan { workspace } => {
            let ws = match workspace_fd(shared, workspace) {
                Ok(ws) => ws,
                // A workspace removed since: nothing to index.
                Err(SearchError::Unavailable(_)) => return Ok(()),
                Err(e) => return Err(e),
            };
            let (ix, _) = open_index(shared, workspace)?;
            let r = rescan(shared, &ix, &ws)?;
            if r.left > 0 {
                tracing::info!(workspace = %workspace, updated = r.updated, removed = r.removed, failed = r.failed, left = r.left, "workspace indexing stopped; the next mount goes on");
            } else {
                tracing::info!(workspace = %workspace, updated = r.updated, removed = r.removed, failed = r.failed, "workspace indexed");
            }
            Ok(())
        }
        Change::Reconfigure { workspace } => {
            shared
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(workspace);
            let (ix, _) = open_index(shared, workspace)?;
            let ws = workspace_fd(shared, workspace)?;
            rescan(shared, &ix, &ws)?;
            Ok(())
        }
    }
}
