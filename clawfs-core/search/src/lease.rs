//! One writer per workspace index among hosts that share a store. SQLite must not be written
//! by two machines over a network file system (its WAL lives in shared memory), so each
//! workspace's index has a lease: an exclusive `flock` on `writer.lock` in its folder, which
//! JuiceFS holds cluster-wide and lets go when the holder's process (or, after its session
//! expires, its machine) dies. The holder indexes the workspace, as a store of one host does,
//! and, while another host has joined, publishes a consistent copy of the database
//! (`published.db`) after changes: at most every [`PUBLISH_EVERY`], and never spending more
//! than a [`PUBLISH_SHARE`] of its time at it (a large index is published less often). Every
//! other host:
//! - searches a replica of that copy in its own folder, taken again when a newer one is
//!   published (its graph is built from the copy's vectors);
//! - tells the holder what its agents changed by touching `changed-by-<host>`, which makes
//!   the holder rescan the workspace;
//! - tries for the lease every time it looks, so the lease moves when its holder dies.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::workspace::WorkspaceIndex;

/// The published copy of a workspace's database, in its index folder.
pub const PUBLISHED: &str = "published.db";
/// How often the holder publishes a changed index, at most.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// The holder waits this many times as long as its last publication took before the next:
/// each copies the whole database, which on a network file system costs object writes.
pub const PUBLISH_SHARE: u32 = 20;
/// How often hosts look at leases, markers and copies.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The file whose lock is the lease.
const LOCK_FILE: &str = "writer.lock";
/// How often a host that does not hold the lease touches its change marker, at most (a change
/// within this of the last touch is marked when it has passed).
const MARK_EVERY: Duration = Duration::from_millis(500);
/// How long after a marker was touched the holder rescans at each look: what another host
/// changed reaches this host's view of the volume within its caches' lifetime, not at once.
const RECHECK: Duration = Duration::from_secs(3);

/// A replica this host searches: the copy it was taken from (its change time) and the index.
struct Replica {
    taken_from: SystemTime,
    index: Arc<WorkspaceIndex>,
}

/// The leases of one host of a shared store.
pub struct Leases {
    host: String,
    /// `.clawfs/index/`: one folder per workspace, shared by the hosts.
    index_root: PathBuf,
    /// This host's own folder for replicas.
    replicas_root: PathBuf,
    /// The leases held: the locked file of each workspace.
    held: Mutex<HashMap<String, File>>,
    /// When each marker was last touched, and whether a change waits to be marked; when
    /// each holder last saw each marker.
    marked: Mutex<HashMap<String, (Instant, bool)>>,
    seen: Mutex<HashMap<PathBuf, SystemTime>>,
    /// Workspaces changed since published, and when each was last published and how long
    /// that took.
    unpublished: Mutex<HashMap<String, Option<(Instant, Duration)>>>,
    published: Mutex<HashMap<String, (Instant, Duration)>>,
    replicas: Mutex<HashMap<String, Replica>>,
}

impl Leases {
    /// The leases of host `host`, whose own folder is `host_dir`.
    pub fn new(host: &str, index_root: &Path, host_dir: &Path) -> Leases {
        Leases {
            host: host.to_string(),
            index_root: index_root.to_path_buf(),
            replicas_root: host_dir.join("index-replicas"),
            held: Mutex::default(),
            marked: Mutex::default(),
            seen: Mutex::default(),
            unpublished: Mutex::default(),
            published: Mutex::default(),
            replicas: Mutex::default(),
        }
    }

    /// Whether this host writes `workspace`'s index, taking the lease if it is free; `Some(true)`
    /// when it was taken just now (the index must catch up with the other hosts' changes).
    pub fn hold(&self, workspace: &str) -> Option<bool> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(workspace) {
            return Some(false);
        }
        let dir = self.index_root.join(workspace);
        std::fs::create_dir_all(&dir).ok()?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join(LOCK_FILE))
            .ok()?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return None;
        }
        // Copies a holder was making when it died.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(".publish-") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        tracing::info!(workspace, host = %self.host, "this host now writes the workspace's index");
        held.insert(workspace.to_string(), file);
        drop(held);
        // Its replica is of no use any more.
        self.replicas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(workspace);
        Some(true)
    }

    /// Whether this host writes `workspace`'s index (without trying for the lease).
    pub fn holds(&self, workspace: &str) -> bool {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(workspace)
    }

    /// Tells the holder of `workspace`'s lease that this host's agents changed it (now, or
    /// at the next [`Self::mark_pending`] if it was told less than [`MARK_EVERY`] ago).
    pub fn mark_changed(&self, workspace: &str) {
        let mut marked = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, pending)) = marked.get_mut(workspace) {
            if at.elapsed() < MARK_EVERY {
                *pending = true;
                return;
            }
        }
        marked.insert(workspace.to_string(), (Instant::now(), false));
        drop(marked);
        self.touch_marker(workspace);
    }

    /// Marks the changes [`Self::mark_changed`] held back.
    pub fn mark_pending(&self) {
        let due: Vec<String> = {
            let mut marked = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
            marked
                .iter_mut()
                .filter(|(_, (at, pending))| *pending && at.elapsed() >= MARK_EVERY)
                .map(|(w, entry)| {
                    *entry = (Instant::now(), false);
                    w.clone()
                })
                .collect()
        };
        for w in due {
            self.touch_marker(&w);
        }
    }

    fn touch_marker(&self, workspace: &str) {
        let dir = self.index_root.join(workspace);
        let _ = std::fs::create_dir_all(&dir);
        let stamp = format!("{:?}\n", SystemTime::now());
        let name = format!("changed-by-{}", self.host);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(name))
            .and_then(|mut f| std::io::Write::write_all(&mut f, stamp.as_bytes()));
        if let Err(e) = written {
            tracing::warn!(workspace, error = %e, "telling the index's holder of a change");
        }
    }

    /// Whether another host marked `workspace` changed since this host last looked.
    pub fn changed_elsewhere(&self, workspace: &str) -> bool {
        let Ok(entries) = std::fs::read_dir(self.index_root.join(workspace)) else {
            return false;
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut changed = false;
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("changed-by-") {
                continue;
            }
            let Ok(at) = e.metadata().and_then(|m| m.modified()) else {
                continue;
            };
            let recent = SystemTime::now()
                .duration_since(at)
                .is_ok_and(|age| age < RECHECK);
            if seen.insert(e.path(), at) != Some(at) || recent {
                changed = true;
            }
        }
        changed
    }

    /// Records that this host changed `workspace`'s index, to publish.
    pub fn changed(&self, workspace: &str) {
        let last = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(workspace)
            .copied();
        self.unpublished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(workspace.to_string())
            .or_insert(last);
    }

    /// Whether another host has joined the store (someone to publish for).
    fn others(&self) -> bool {
        let hosts = self.index_root.with_file_name("hosts");
        std::fs::read_dir(hosts).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name() != self.host.as_str() && e.path().join("host.json").exists())
        })
    }

    /// The workspaces to publish now: changed since published, and past the wait since the
    /// last publication ([`PUBLISH_EVERY`], [`PUBLISH_SHARE`]). None while no other host has
    /// joined; they are published once one has.
    pub fn due(&self) -> Vec<String> {
        let mut unpublished = self
            .unpublished
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if unpublished.is_empty() || !self.others() {
            return Vec::new();
        }
        let due: Vec<String> = unpublished
            .iter()
            .filter(|(_, last)| {
                last.is_none_or(|(at, took)| {
                    at.elapsed() >= PUBLISH_EVERY.max(took * PUBLISH_SHARE)
                })
            })
            .map(|(w, _)| w.clone())
            .collect();
        for w in &due {
            unpublished.remove(w);
        }
        due
    }

    /// Publishes `index` (this host holds its lease).
    pub fn publish(&self, index: &WorkspaceIndex) {
        let to = self.index_root.join(index.name()).join(PUBLISHED);
        let started = Instant::now();
        let done = index.publish(&to);
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index.name().to_string(), (started, started.elapsed()));
        match done {
            Ok(()) => {
                tracing::debug!(workspace = index.name(), took = ?started.elapsed(), "index published")
            }
            Err(e) => {
                tracing::warn!(workspace = index.name(), error = %e, "publishing the index");
                self.changed(index.name());
            }
        }
    }

    /// Whether `workspace`'s index has a published copy.
    pub fn is_published(&self, workspace: &str) -> bool {
        self.index_root.join(workspace).join(PUBLISHED).exists()
    }

    /// The replica of `workspace`'s published index this host searches, taken again when a
    /// newer copy was published; `open` opens the replica's files.
    pub fn replica(
        &self,
        workspace: &str,
        open: impl FnOnce(&Path) -> Result<Arc<WorkspaceIndex>, crate::SearchError>,
    ) -> Result<Arc<WorkspaceIndex>, crate::SearchError> {
        let published = self.index_root.join(workspace).join(PUBLISHED);
        let at = std::fs::metadata(&published)
            .and_then(|m| m.modified())
            .map_err(|_| {
                crate::SearchError::Unavailable(format!(
                    "the index of workspace {workspace} is being built by another host; try again shortly"
                ))
            })?;
        let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = replicas.get(workspace).filter(|r| r.taken_from == at) {
            return Ok(Arc::clone(&r.index));
        }
        // Searches that have the old replica open keep reading its (removed) files.
        let dir = self.replicas_root.join(workspace);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| crate::SearchError::io("creating the replica folder", e))?;
        std::fs::copy(&published, dir.join(super::index::DB_FILE))
            .map_err(|e| crate::SearchError::io("copying the published index", e))?;
        let index = open(&dir)?;
        replicas.insert(
            workspace.to_string(),
            Replica {
                taken_from: at,
                index: Arc::clone(&index),
            },
        );
        Ok(index)
    }
}
