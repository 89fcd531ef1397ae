//! One writer per workspace index among hosts that share a store. SQLite must not be written
//! by two machines over a network file system (its WAL lives in shared memory), so each
//! workspace's index has a lease: an exclusive `flock` on `writer.lock` in its folder, which
//! JuiceFS holds cluster-wide and lets go when the holder's process (or, after its session
//! expires, its machine) dies. The holder indexes the workspace, as a store of one host does,
//! and, while another host has joined, publishes a consistent copy of the database
//! (`published.db`) after changes that another host searches for: at most every
//! [`PUBLISH_EVERY`], and never spending more than a [`PUBLISH_SHARE`] of its time at it (a
//! large index is published less often). Every other host:
//! - searches a replica of that copy in its own folder, taken again when a newer one is
//!   published (its graph is built from the copy's vectors), and asks for a newer copy by
//!   touching `wanted-by-<host>` as it searches: the holder copies only for hosts that search;
//! - tells the holder what its agents changed in `changed-by-<host>`: the paths (and removed
//!   folders) of the last [`RECHECK`], which the holder indexes again at each look while the
//!   file is that recent. A burst of more than [`FORWARD_MAX`] changes, or changes the holder
//!   may have missed, make it rescan the whole workspace instead;
//! - tries for the lease every time it looks, so the lease moves when its holder dies.
//!
//! Only the lease, the markers and the published copy live on the shared volume. The
//! holder's working database and graph, and every host's replicas, are in the host's own cache
//! folder on local disk ([`Leases::new`]): SQLite's page writes and graph saves on a network
//! file system are new objects each time, which made the index, not the agents' files, most of
//! a holder's traffic. A host that takes a lease starts from the newer of its own working copy
//! and the published one, and rescans the workspace to catch up.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::workspace::WorkspaceIndex;

mod volume;
use volume::Volume;

/// An id for this daemon's markers, unlike another's of the same host: the process and the
/// time it started them.
fn run_id() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

/// The published copy of a workspace's database, in its index folder.
pub const PUBLISHED: &str = "published.db";
/// How often the holder publishes a changed index, at most.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// The holder waits this many times as long as its last publication took before the next:
/// each copies the whole database, which on a network file system costs object writes.
pub const PUBLISH_SHARE: u32 = 20;
/// While another host has joined, the holder publishes a changed index at least this often
/// even if nobody searches from elsewhere: the copy a host that takes the lease over starts
/// from.
pub const HANDOVER_EVERY: Duration = Duration::from_secs(60);
/// How far before the holder's last copy another host's search still asks for a new one.
const WANT_SLACK: Duration = Duration::from_secs(2);
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
/// The most changes a marker lists: past this it asks for a rescan of the whole workspace.
pub const FORWARD_MAX: usize = 4096;
/// The largest marker read: [`FORWARD_MAX`] changes of long paths. A larger one is taken as
/// unreadable (the whole workspace is rescanned).
const MARKER_MAX: u64 = 24 << 20;
/// A published copy is taken only if it needs at most 1/`FREE_SHARE` of the local disk's free
/// space: a copy is as large as the file, however sparse the file is on the volume.
const FREE_SHARE: u64 = 2;

/// A change another host's agents made, as its marker forwards it to the holder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Forwarded {
    /// A file changed, came or went.
    #[serde(rename = "file")]
    File(String),
    /// A folder went.
    #[serde(rename = "tree")]
    Tree(String),
    /// Anything: rescan the workspace.
    #[serde(rename = "all")]
    All,
}

/// What a `changed-by-<host>` file holds: the changes its daemon (`run`) made, numbered in
/// order, from number `from` to before `to`. A holder that read the marker of the same run
/// up to `to` ≥ this `from` has every change between the two; otherwise it may have missed
/// some.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Marker {
    /// The writing daemon: numbers count from its start.
    run: u64,
    /// Every change numbered from this on is listed (or a later one that repeats it).
    from: u64,
    /// The number the next change will have.
    to: u64,
    /// The changes, oldest first.
    changes: Vec<Forwarded>,
}

/// What this host has told, or holds back to tell, the holder of one workspace's lease.
#[derive(Debug)]
struct Marks {
    /// When the marker was last written, and whether changes wait for the next write.
    written: Instant,
    pending: bool,
    /// The changes of the last [`RECHECK`], with when each was made and its number.
    recent: Vec<(Instant, u64, Forwarded)>,
    /// Every change from this number on is in `recent`; the next change's number.
    from: u64,
    next: u64,
}

/// A marker this host read, holding a lease: the workspace and the marker's name.
type MarkerKey = (String, String);

/// A replica this host searches: the copy it was taken from (its change time) and the index.
struct Replica {
    taken_from: SystemTime,
    index: Arc<WorkspaceIndex>,
}

/// The leases of one host of a shared store.
pub struct Leases {
    host: String,
    /// `.clawfs/index/`: one folder per workspace, shared by the hosts.
    volume: Volume,
    /// On this host's local disk: the working indexes of the leases it holds.
    working_root: PathBuf,
    /// On this host's local disk: the replicas it searches.
    replicas_root: PathBuf,
    /// The leases held: the locked file of each workspace.
    held: Mutex<HashMap<String, File>>,
    /// This daemon, in its markers.
    run: u64,
    /// What this host told each workspace's holder; for each marker this host, holding a
    /// lease, read: its change time, run and `to` then.
    marked: Mutex<HashMap<String, Marks>>,
    seen: Mutex<HashMap<MarkerKey, (SystemTime, u64, u64)>>,
    /// Workspaces changed since published, and when each was last published and how long
    /// that took.
    unpublished: Mutex<HashMap<String, Option<(Instant, Duration)>>>,
    published: Mutex<HashMap<String, (Instant, Duration, SystemTime)>>,
    replicas: Mutex<HashMap<String, Replica>>,
    /// When this host last asked each workspace's holder for a fresher copy.
    wanted: Mutex<HashMap<String, Instant>>,
}

impl Leases {
    /// The leases of host `host` of the store at `store_root` (its `.clawfs/index/`); `cache`
    /// is the host's own folder on local disk for working indexes and replicas.
    pub fn new(host: &str, store_root: &Path, cache: &Path) -> std::io::Result<Leases> {
        Ok(Leases {
            host: host.to_string(),
            volume: Volume::open(store_root)?,
            working_root: cache.join("index"),
            replicas_root: cache.join("replicas"),
            held: Mutex::default(),
            run: run_id(),
            marked: Mutex::default(),
            seen: Mutex::default(),
            unpublished: Mutex::default(),
            published: Mutex::default(),
            replicas: Mutex::default(),
            wanted: Mutex::default(),
        })
    }

    /// Whether this host writes `workspace`'s index, taking the lease if it is free; `Some(true)`
    /// when it was taken just now (the index must catch up with the other hosts' changes).
    pub fn hold(&self, workspace: &str) -> Option<bool> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(workspace) {
            return Some(false);
        }
        let file = match self.volume.lock_file(workspace, LOCK_FILE) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(workspace, error = %e, "the index's lease file");
                return None;
            }
        };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return None;
        }
        // Copies a holder was making when it died.
        self.volume.remove_unfinished(workspace);
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

    /// Tells the holder of `workspace`'s lease that this host's agents made `change` (now, or
    /// at the next [`Self::mark_pending`] if it was told less than [`MARK_EVERY`] ago).
    pub fn mark_changed(&self, workspace: &str, change: Forwarded) {
        let mut marked = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
        let marks = marked
            .entry(workspace.to_string())
            .or_insert_with(|| Marks {
                written: Instant::now() - MARK_EVERY,
                pending: false,
                recent: Vec::new(),
                from: 0,
                next: 0,
            });
        marks.recent.retain(|(_, _, c)| *c != change);
        marks.recent.push((Instant::now(), marks.next, change));
        marks.next += 1;
        marks.pending = true;
        if marks.written.elapsed() < MARK_EVERY {
            return;
        }
        let marker = self.take_marker(marks);
        drop(marked);
        self.write_marker(workspace, &marker);
    }

    /// Marks the changes [`Self::mark_changed`] held back.
    pub fn mark_pending(&self) {
        let due: Vec<(String, Marker)> = {
            let mut marked = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
            marked
                .iter_mut()
                .filter(|(_, m)| m.pending && m.written.elapsed() >= MARK_EVERY)
                .map(|(w, m)| (w.clone(), self.take_marker(m)))
                .collect()
        };
        for (w, marker) in due {
            self.write_marker(&w, &marker);
        }
    }

    /// The marker to write for `marks` now: the changes of the last [`RECHECK`] (all of them
    /// while they are few), which it then counts as told.
    fn take_marker(&self, marks: &mut Marks) -> Marker {
        let old = marks
            .recent
            .iter()
            .take_while(|(at, _, _)| at.elapsed() >= RECHECK)
            .count();
        if let Some((_, last, _)) = marks.recent.drain(..old).next_back() {
            marks.from = last + 1;
        }
        if marks.recent.len() > FORWARD_MAX {
            marks.recent = vec![(Instant::now(), marks.next - 1, Forwarded::All)];
        }
        marks.written = Instant::now();
        marks.pending = false;
        Marker {
            run: self.run,
            from: marks.from,
            to: marks.next,
            changes: marks.recent.iter().map(|(_, _, c)| c.clone()).collect(),
        }
    }

    fn write_marker(&self, workspace: &str, marker: &Marker) {
        let json = serde_json::to_vec(marker).expect("a marker serialises");
        let name = format!("{CHANGED_BY}{}", self.host);
        if let Err(e) = self.volume.write(workspace, &name, &json) {
            tracing::warn!(workspace, error = %e, "telling the index's holder of a change");
        }
    }

    /// What other hosts changed in `workspace` that this host, its holder, should index again:
    /// the changes of every marker written since this host last read it or within [`RECHECK`]
    /// (what they changed reaches this host's view of the volume within its caches' lifetime).
    /// [`Forwarded::All`] when a marker cannot say (unreadable, first read, or it no longer
    /// lists every change since the one this host read before).
    pub fn changed_elsewhere(&self, workspace: &str) -> Vec<Forwarded> {
        let entries = self.volume.entries(workspace, CHANGED_BY);
        if entries.is_empty() {
            return Vec::new();
        }
        let joined = self.volume.joined();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut changes = std::collections::HashSet::new();
        let now = SystemTime::now();
        for e in entries {
            // Only a host that joined forwards changes (another name is nobody's marker).
            let host = &e.name[CHANGED_BY.len()..];
            if host == self.host || !joined.iter().any(|h| h == host) {
                continue;
            }
            let at = e.modified;
            let recent = now.duration_since(at).is_ok_and(|age| age < RECHECK);
            let key = (workspace.to_string(), e.name.clone());
            let last = seen.get(&key).copied();
            if last.is_some_and(|(marker_at, _, _)| marker_at == at) && !recent {
                continue;
            }
            let marker = self
                .volume
                .read(workspace, &e.name, MARKER_MAX)
                .ok()
                .flatten()
                .and_then(|b| serde_json::from_slice::<Marker>(&b).ok());
            let Some(m) = marker else {
                changes.insert(Forwarded::All);
                seen.insert(key, (at, 0, 0));
                continue;
            };
            match last {
                Some((_, run, to)) if run == m.run && m.from <= to => changes.extend(m.changes),
                // Never read, another daemon of that host, or it no longer lists every change
                // since the one read before: compare the whole workspace.
                _ => {
                    changes.insert(Forwarded::All);
                }
            }
            seen.insert(key, (at, m.run, m.to));
        }
        match changes.contains(&Forwarded::All) {
            true => vec![Forwarded::All],
            false => changes.into_iter().collect(),
        }
    }

    /// Records that this host changed `workspace`'s index, to publish.
    pub fn changed(&self, workspace: &str) {
        let last = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(workspace)
            .map(|&(at, took, _)| (at, took));
        self.unpublished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(workspace.to_string())
            .or_insert(last);
    }

    /// Whether another host has joined the store (someone to publish for).
    fn others(&self) -> bool {
        self.volume.joined().iter().any(|h| *h != self.host)
    }

    /// The workspaces to publish now: changed since published, searched from another host
    /// since then (its `wanted-by-<host>` marker moved; the first copy needs none) or last
    /// published [`HANDOVER_EVERY`] ago, and past the wait since the last publication
    /// ([`PUBLISH_EVERY`], [`PUBLISH_SHARE`]). None while no other host has joined. A copy
    /// rewrites the whole database, which on a shared volume is new objects each time.
    pub fn due(&self) -> Vec<String> {
        let mut unpublished = self
            .unpublished
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if unpublished.is_empty() || !self.others() {
            return Vec::new();
        }
        let published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due: Vec<String> = unpublished
            .iter()
            .filter(|(_, last)| {
                last.is_none_or(|(at, took)| {
                    at.elapsed() >= PUBLISH_EVERY.max(took * PUBLISH_SHARE)
                })
            })
            .filter(|(w, _)| {
                let last = published.get(*w);
                last.is_none_or(|p| p.0.elapsed() >= HANDOVER_EVERY)
                    || self.wanted_since(w, last.map(|p| p.2))
            })
            .map(|(w, _)| w.clone())
            .collect();
        drop(published);
        for w in &due {
            unpublished.remove(w);
        }
        due
    }

    /// Publishes `index` (this host holds its lease): a consistent copy is made on local disk,
    /// then written to the volume in one sequential pass and put in place atomically. SQLite
    /// writing the copy page by page on the volume would cost a network file system objects
    /// for every page and the merging of its many small slices.
    pub fn publish(&self, index: &WorkspaceIndex) {
        let started = Instant::now();
        let local = self.working_root.join(index.name()).join(PUBLISHED);
        let done = index
            .publish(&local)
            .and_then(|()| self.ship(index.name(), &local));
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                index.name().to_string(),
                (started, started.elapsed(), SystemTime::now()),
            );
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

    /// Copies the local copy `local` of `workspace`'s index to the volume as its published
    /// copy (a new file beside it, synced, renamed over), then removes it.
    fn ship(&self, workspace: &str, local: &Path) -> Result<(), crate::SearchError> {
        let shipped = File::open(local)
            .and_then(|mut from| self.volume.replace_from(workspace, PUBLISHED, &mut from))
            .map_err(|e| crate::SearchError::io("publishing the index", e));
        let _ = std::fs::remove_file(local);
        shipped
    }

    /// Copies `workspace`'s published copy to the new local file `to`; answers the copy's
    /// change time, or `None` if there is none. Refused: anything but a regular file (a
    /// symlink, a FIFO), and a copy that would take more than half the local disk's free
    /// space (a sparse file costs the volume nothing and this disk its size).
    fn take_published(
        &self,
        workspace: &str,
        to: &Path,
    ) -> Result<Option<SystemTime>, crate::SearchError> {
        let err = |e| crate::SearchError::io("copying the published index", e);
        let Some(mut from) = self
            .volume
            .open_regular(workspace, PUBLISHED)
            .map_err(err)?
        else {
            return Ok(None);
        };
        let meta = from.metadata().map_err(err)?;
        let folder = to.parent().unwrap_or(Path::new("."));
        let free = rustix::fs::statvfs(folder).map_err(|e| err(e.into()))?;
        let free = free.f_bavail.saturating_mul(free.f_frsize);
        if meta.len() > free / FREE_SHARE {
            return Err(crate::SearchError::Unavailable(format!(
                "the published index of workspace {workspace} is {} bytes, more than this host's \
                 disk can take ({free} bytes free)",
                meta.len()
            )));
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(to)
            .map_err(err)?;
        std::io::copy(&mut (&mut from).take(meta.len()), &mut out).map_err(err)?;
        Ok(Some(meta.modified().map_err(err)?))
    }

    /// Whether another host searched `workspace` (its marker moved) since `since`, the time of
    /// this host's last copy (none yet: a first copy is always wanted). A little before counts
    /// too: markers carry the writing host's clock, and a search just before a copy may have
    /// met the one before.
    fn wanted_since(&self, workspace: &str, since: Option<SystemTime>) -> bool {
        let Some(since) = since else { return true };
        let since = since
            .checked_sub(WANT_SLACK)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let joined = self.volume.joined();
        self.volume
            .entries(workspace, WANTED_BY)
            .iter()
            .filter(|e| joined.iter().any(|h| *h == e.name[WANTED_BY.len()..]))
            .any(|e| e.modified >= since)
    }

    /// Asks the holder of `workspace`'s lease for a fresher copy: this host searches it (at
    /// most every [`LOOK_EVERY`]).
    fn want(&self, workspace: &str) {
        let mut wanted = self.wanted.lock().unwrap_or_else(PoisonError::into_inner);
        if wanted
            .get(workspace)
            .is_some_and(|at| at.elapsed() < LOOK_EVERY)
        {
            return;
        }
        wanted.insert(workspace.to_string(), Instant::now());
        drop(wanted);
        let name = format!("{WANTED_BY}{}", self.host);
        if let Err(e) = self.volume.write(workspace, &name, b"") {
            tracing::warn!(workspace, error = %e, "asking the index's holder for a copy");
        }
    }

    /// The folder of `workspace`'s working index while this host holds its lease, on local
    /// disk. It is first brought to the published copy when that is newer (another host wrote
    /// the index since this one last did): the holder then rescans only to catch up.
    pub fn working(&self, workspace: &str) -> Result<PathBuf, crate::SearchError> {
        let dir = self.working_root.join(workspace);
        let Some(copy_at) = self.volume.modified(workspace, PUBLISHED) else {
            return Ok(dir);
        };
        let db = dir.join(super::index::DB_FILE);
        let wal = dir.join(format!("{}-wal", super::index::DB_FILE));
        let own_at = modified(&db).max(modified(&wal));
        if own_at.is_some_and(|at| at >= copy_at) {
            return Ok(dir);
        }
        let files = crate::workspace::IndexFiles::private(&dir)?;
        let tmp = dir.join(format!(".seed-{}", run_id()));
        let _ = std::fs::remove_file(&tmp);
        if let Err(e) = self.take_published(workspace, &tmp) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        // The graph is rebuilt from the copy's vectors: a saved one belongs to the old database.
        let shm = dir.join(format!("{}-shm", super::index::DB_FILE));
        for stale in [&wal, &shm, &files.graph, &files.generation] {
            let _ = std::fs::remove_file(stale);
        }
        std::fs::rename(&tmp, &db).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            crate::SearchError::io("taking the published index", e)
        })?;
        tracing::info!(
            workspace,
            "the working index starts from the published copy"
        );
        Ok(dir)
    }

    /// Whether `workspace`'s index has a published copy.
    pub fn is_published(&self, workspace: &str) -> bool {
        self.volume.modified(workspace, PUBLISHED).is_some()
    }

    /// The replica of `workspace`'s published index this host searches, taken again when a
    /// newer copy was published; `open` opens the replica's files.
    pub fn replica(
        &self,
        workspace: &str,
        open: impl FnOnce(&Path) -> Result<Arc<WorkspaceIndex>, crate::SearchError>,
    ) -> Result<Arc<WorkspaceIndex>, crate::SearchError> {
        self.want(workspace);
        let building = || {
            crate::SearchError::Unavailable(format!(
                "the index of workspace {workspace} is being built by another host; try again shortly"
            ))
        };
        let at = self
            .volume
            .modified(workspace, PUBLISHED)
            .ok_or_else(building)?;
        let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = replicas.get(workspace).filter(|r| r.taken_from == at) {
            return Ok(Arc::clone(&r.index));
        }
        // Searches that have the old replica open keep reading its (removed) files.
        let dir = self.replicas_root.join(workspace);
        let _ = std::fs::remove_dir_all(&dir);
        crate::workspace::IndexFiles::private(&dir)?;
        // The copy's own change time: a newer copy published meanwhile is taken next time.
        let at = self
            .take_published(workspace, &dir.join(super::index::DB_FILE))?
            .ok_or_else(building)?;
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

/// The names of the change markers (`changed-by-<host>`) and of the searching hosts' requests
/// for copies (`wanted-by-<host>`).
const CHANGED_BY: &str = "changed-by-";
const WANTED_BY: &str = "wanted-by-";

/// When `path` was last modified, if it exists.
fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store at `root` that `hosts` joined; answers its index folder.
    fn store_of(root: &Path, hosts: &[&str]) -> PathBuf {
        for h in hosts {
            let dir = root.join(".clawfs/hosts").join(h);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("host.json"), "{}").unwrap();
        }
        root.join(".clawfs/index")
    }

    fn file(rel: &str) -> Forwarded {
        Forwarded::File(rel.into())
    }

    fn sorted(mut v: Vec<Forwarded>) -> Vec<Forwarded> {
        v.sort_by_key(|f| format!("{f:?}"));
        v
    }

    #[test]
    fn the_holder_indexes_again_what_another_host_forwards_and_rescans_when_it_cannot_tell() {
        let dir = tempfile::tempdir().unwrap();
        let index = store_of(dir.path(), &["a", "b"]);
        let holder = Leases::new("a", dir.path(), &dir.path().join("cache-a")).unwrap();
        let other = Leases::new("b", dir.path(), &dir.path().join("cache-b")).unwrap();
        assert_eq!(holder.hold("ws"), Some(true));
        assert!(holder.changed_elsewhere("ws").is_empty());
        // The first marker of a host the holder never read: the whole workspace.
        other.mark_changed("ws", file("a.md"));
        assert_eq!(holder.changed_elsewhere("ws"), [Forwarded::All]);
        // Within MARK_EVERY changes wait; marked, the holder gets the recent ones by path.
        other.mark_changed("ws", file("b.md"));
        other.mark_changed("ws", Forwarded::Tree("old".into()));
        std::thread::sleep(MARK_EVERY);
        other.mark_pending();
        assert_eq!(
            sorted(holder.changed_elsewhere("ws")),
            sorted(vec![
                file("a.md"),
                file("b.md"),
                Forwarded::Tree("old".into())
            ])
        );
        // A burst past FORWARD_MAX asks for the whole workspace.
        std::thread::sleep(MARK_EVERY);
        for i in 0..=FORWARD_MAX {
            other.mark_changed("ws", file(&format!("f{i}")));
        }
        std::thread::sleep(MARK_EVERY);
        other.mark_pending();
        assert_eq!(holder.changed_elsewhere("ws"), [Forwarded::All]);
        // Another daemon of that host numbers its changes anew: the whole workspace.
        let restarted = Leases::new("b", dir.path(), &dir.path().join("cache-b")).unwrap();
        restarted.mark_changed("ws", file("c.md"));
        assert_eq!(holder.changed_elsewhere("ws"), [Forwarded::All]);
        // A marker that no longer lists what the holder has not read: the whole workspace.
        let mut gap = Marker {
            run: restarted.run,
            from: 5,
            to: 6,
            changes: vec![file("d.md")],
        };
        std::thread::sleep(Duration::from_millis(20));
        restarted.write_marker("ws", &gap);
        assert_eq!(holder.changed_elsewhere("ws"), [Forwarded::All]);
        gap.from = 6;
        gap.to = 7;
        gap.changes = vec![file("e.md")];
        std::thread::sleep(Duration::from_millis(20));
        restarted.write_marker("ws", &gap);
        assert_eq!(holder.changed_elsewhere("ws"), [file("e.md")]);
        // A marker that does not parse: the whole workspace.
        std::fs::write(index.join("ws/changed-by-b"), "not json").unwrap();
        assert_eq!(holder.changed_elsewhere("ws"), [Forwarded::All]);
    }

    #[test]
    fn a_host_taking_a_lease_starts_from_the_newer_of_its_own_index_and_the_published_one() {
        let dir = tempfile::tempdir().unwrap();
        let index = store_of(dir.path(), &["a"]);
        let a = Leases::new("a", dir.path(), &dir.path().join("cache-a")).unwrap();
        // Nothing published: the (empty) local folder, on local disk, not the shared one.
        let own = a.working("ws").unwrap();
        assert_eq!(own, dir.path().join("cache-a/index/ws"));
        assert!(!index.join("ws").join(crate::index::DB_FILE).exists());
        // A copy another host published, newer than nothing: taken, and the old graph dropped.
        std::fs::create_dir_all(index.join("ws")).unwrap();
        std::fs::write(index.join("ws").join(PUBLISHED), b"published").unwrap();
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("hnsw.usearch"), b"old graph").unwrap();
        std::fs::write(own.join("index.db-wal"), b"old wal").unwrap();
        filetime_back(&own.join("index.db-wal"));
        a.working("ws").unwrap();
        assert_eq!(
            std::fs::read(own.join(crate::index::DB_FILE)).unwrap(),
            b"published"
        );
        assert!(!own.join("hnsw.usearch").exists());
        assert!(!own.join("index.db-wal").exists());
        // Its own index written since: kept.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(own.join("index.db-wal"), b"newer").unwrap();
        std::fs::write(own.join(crate::index::DB_FILE), b"own").unwrap();
        a.working("ws").unwrap();
        assert_eq!(
            std::fs::read(own.join(crate::index::DB_FILE)).unwrap(),
            b"own"
        );
        assert!(own.join("index.db-wal").exists());
    }

    /// Sets `path`'s modification time a minute back.
    fn filetime_back(path: &Path) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(60))
            .unwrap();
    }

    #[test]
    fn what_another_hosts_root_plants_in_the_index_folders_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let index = store_of(dir.path(), &["a", "b"]);
        let local = dir.path().join("local-disk");
        std::fs::create_dir_all(&local).unwrap();
        let a = Leases::new("a", dir.path(), &dir.path().join("cache-a")).unwrap();
        let ws = index.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let open_none = |_: &Path| -> Result<Arc<WorkspaceIndex>, crate::SearchError> {
            panic!("a planted copy was opened")
        };
        // A FIFO as the published copy: refused at once, not waited on.
        let fifo =
            std::ffi::CString::new(ws.join(PUBLISHED).as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo of a path we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(a.replica("ws", open_none).is_err());
        assert!(a
            .working("ws")
            .is_ok_and(|d| !d.join(crate::index::DB_FILE).exists()));
        // A symlink to this host's own disk: not followed.
        std::fs::remove_file(ws.join(PUBLISHED)).unwrap();
        std::fs::write(local.join("secret.db"), b"local").unwrap();
        std::os::unix::fs::symlink(local.join("secret.db"), ws.join(PUBLISHED)).unwrap();
        assert!(a.replica("ws", open_none).is_err());
        // A sparse copy larger than this disk can take.
        std::fs::remove_file(ws.join(PUBLISHED)).unwrap();
        let huge = File::create(ws.join(PUBLISHED)).unwrap();
        huge.set_len(1 << 43).unwrap();
        let err = a.replica("ws", open_none).err().unwrap().to_string();
        assert!(err.contains("more than this host's disk can take"), "{err}");
        // The lease's lock file as a symlink: nothing created where it points, no lease.
        std::os::unix::fs::symlink(local.join("nologin"), index.join("ws2")).unwrap_or(());
        std::fs::create_dir_all(index.join("ws3")).unwrap();
        std::os::unix::fs::symlink(local.join("nologin"), index.join("ws3").join(LOCK_FILE))
            .unwrap();
        assert_eq!(a.hold("ws3"), None);
        assert_eq!(a.hold("ws2"), None);
        assert!(!local.join("nologin").exists());
        // Markers: of a host that never joined, ignored; one too large to read, a rescan.
        assert_eq!(a.hold("ws4"), Some(true));
        std::fs::write(index.join("ws4/changed-by-x"), "not json").unwrap();
        assert!(a.changed_elsewhere("ws4").is_empty());
        let big = File::create(index.join("ws4/changed-by-b")).unwrap();
        big.set_len(MARKER_MAX + 1).unwrap();
        assert_eq!(a.changed_elsewhere("ws4"), [Forwarded::All]);
    }
}
