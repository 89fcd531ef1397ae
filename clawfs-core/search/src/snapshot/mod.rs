//! Snapshots and forks of workspaces.
//!
//! A snapshot is `workspaces/<ws>/snapshots/snapshot-YYYY-MM-DD[-N].db`: one self-contained
//! SQLite file holding every file of the workspace in the SQLite Archive layout (so
//! `sqlite3 -A` lists and extracts it), each entry's owner, and a copy of the search index
//! ([`archive`]). Snapshots are read-only through the mount and readable by root alone (they
//! hold every file of the workspace, whoever may read each).
//!
//! - **Consistent.** A file is archived only if its status (size, modification and change
//!   times, inode) is the same before and after it is read, so a file is never archived half
//!   old and half new while agents write; one that keeps changing is read again, and after
//!   [`STABLE_ATTEMPTS`] it is left out and named in the snapshot's `skipped` list (as are
//!   files over [`MAX_FILE_BYTES`] and files removed meanwhile: what an agent does to one file
//!   must not stop the whole snapshot). The index is copied in one read transaction.
//! - **Atomic restore.** The snapshot is extracted into a folder of the store's private area,
//!   which is exchanged with the workspace's in one `renameat2(RENAME_EXCHANGE)`: a reader sees
//!   the old tree or the new one, never a mix. What it replaces is snapshotted first.
//! - **Cheap forks.** A fork copies each file as a reflink where the backing filesystem has them
//!   (btrfs, XFS: blocks shared until written) and with `copy_file_range` elsewhere. Hard links
//!   are never used: a write through one name would change the other workspace's file.
//!
//! Everything is reached by descriptor beneath the store; symlinks in a workspace are archived
//! and restored as symlinks, never followed.

pub mod archive;

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rayon::prelude::*;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};

use archive::{Content, Item, Reader, Writer};

/// Reads of a changing file before a snapshot gives up on it.
pub const STABLE_ATTEMPTS: u32 = 20;
/// The largest file a snapshot holds (SQLite's blob limit).
pub const MAX_FILE_BYTES: u64 = 1_000_000_000;

/// Why a snapshot, restore or fork failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// No such workspace.
    #[error("there is no workspace {0:?}")]
    NoWorkspace(String),
    /// No such snapshot.
    #[error("workspace {workspace:?} has no snapshot {name:?}")]
    NoSnapshot {
        /// The workspace.
        workspace: String,
        /// The name asked for.
        name: String,
    },
    /// A name breaks the naming rules.
    #[error(transparent)]
    BadName(#[from] clawfs_store::NameError),
    /// The target exists.
    #[error("workspace {0:?} exists already")]
    Exists(String),
    /// A file kept changing while it was read.
    #[error("{0} kept changing while it was read ({STABLE_ATTEMPTS} attempts): try again when it is quiet")]
    Busy(String),
    /// A file is larger than a snapshot holds.
    #[error("{0} is larger than a snapshot holds (1 GB)")]
    TooLarge(String),
    /// The file is not a ClawFS snapshot.
    #[error("{0} is not a ClawFS snapshot")]
    NotASnapshot(String),
    /// The snapshot is damaged.
    #[error("the snapshot is damaged: {0}")]
    Corrupt(String),
    /// SQLite failed.
    #[error("snapshot database: {0}")]
    Db(#[from] rusqlite::Error),
    /// Copying the search index failed.
    #[error("copying the search index: {0}")]
    Index(#[from] crate::SearchError),
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl SnapshotError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> SnapshotError {
        SnapshotError::Io {
            what: what.into(),
            source,
        }
    }
}

fn io<E: Into<std::io::Error>>(what: impl Into<String>) -> impl FnOnce(E) -> SnapshotError {
    let what = what.into();
    move |e| SnapshotError::io(what, e.into())
}

/// A snapshot, as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotInfo {
    /// File name in `snapshots/`.
    pub name: String,
    /// When it was taken (RFC 3339).
    pub created_at: String,
    /// Regular files in it.
    pub files: u64,
    /// Their total size.
    pub bytes: u64,
    /// The snapshot file's size.
    pub size: u64,
    /// Files left out, each with why (larger than 1 GB, never stopped changing, gone).
    pub skipped: Vec<String>,
}

/// What a restore did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Restored {
    /// The snapshot restored.
    pub snapshot: String,
    /// The snapshot of what it replaced.
    pub saved_as: String,
    /// Regular files restored.
    pub files: u64,
    /// Where the replaced tree was kept (relative to the store) because its snapshot left
    /// something out; None when it was removed.
    pub kept_at: Option<String>,
}

/// What a fork did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Forked {
    /// The new workspace.
    pub workspace: String,
    /// Regular files in it.
    pub files: u64,
    /// Of those, how many share their blocks with the source (reflinks).
    pub reflinked: u64,
    /// Files left out, each with why.
    pub skipped: Vec<String>,
}

/// The workspaces of one store, for snapshots and forks (run as root, beside or without the
/// daemon).
pub struct Workspaces {
    workspaces: OwnedFd,
    /// `.clawfs/`, where trees are built before they are swapped in.
    private: OwnedFd,
}

impl Workspaces {
    /// The workspaces of the store at `store_root`.
    pub fn open(store_root: &Path) -> Result<Workspaces, SnapshotError> {
        let root = clawfs_store::beneath::open_root(store_root)
            .map_err(io(format!("opening the store {}", store_root.display())))?;
        let workspaces = clawfs_store::beneath::open_dir(
            root.as_fd(),
            Path::new(clawfs_store::area::Area::Workspaces.dir_name()),
        )
        .map_err(io("opening workspaces/"))?;
        let private = clawfs_store::beneath::open_dir(
            root.as_fd(),
            Path::new(clawfs_store::layout::PRIVATE_DIR),
        )
        .map_err(io("opening the store's private folder"))?;
        Ok(Workspaces {
            workspaces,
            private,
        })
    }

    fn workspace(&self, ws: &str) -> Result<OwnedFd, SnapshotError> {
        clawfs_store::names::check_system_name(std::ffi::OsStr::new(ws))?;
        clawfs_store::beneath::open_dir(self.workspaces.as_fd(), Path::new(ws)).map_err(|e| match e
            .kind()
        {
            std::io::ErrorKind::NotFound => SnapshotError::NoWorkspace(ws.into()),
            _ => SnapshotError::io(format!("opening workspace {ws}"), e),
        })
    }

    /// The workspace's `snapshots/`, made root's alone (0700): snapshots hold every file of the
    /// workspace, so not even their names, sizes and times are for agents.
    fn snapshots_dir(&self, ws_fd: BorrowedFd<'_>) -> Result<OwnedFd, SnapshotError> {
        match rustix::fs::mkdirat(ws_fd, "snapshots", Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(SnapshotError::io("making snapshots/", e.into())),
        }
        let dir = clawfs_store::beneath::open_dir(ws_fd, Path::new("snapshots"))
            .map_err(io("opening snapshots/"))?;
        clawfs_store::beneath::chown_fd(&dir, 0, 0).map_err(io("snapshots/"))?;
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o700)).map_err(io("snapshots/"))?;
        Ok(dir)
    }

    /// Takes a snapshot of `ws` (and its index, from `index_db` when given).
    pub fn create(&self, ws: &str, index_db: Option<&Path>) -> Result<SnapshotInfo, SnapshotError> {
        let ws_fd = self.workspace(ws)?;
        let snaps = self.snapshots_dir(ws_fd.as_fd())?;
        let tmp = format!(".tmp-{}.db", random_hex());
        drop(
            rustix::fs::openat(
                &snaps,
                tmp.as_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(io("creating the snapshot file"))?,
        );
        let result = self.write_snapshot(ws, ws_fd.as_fd(), &fd_path(&snaps, &tmp), index_db);
        let done = result.and_then(|()| {
            let name = self.publish(snaps.as_fd(), &tmp)?;
            self.info(snaps.as_fd(), &name)
        });
        if done.is_err() {
            let _ = rustix::fs::unlinkat(&snaps, tmp.as_str(), AtFlags::empty());
        }
        done
    }

    fn write_snapshot(
        &self,
        ws: &str,
        ws_fd: BorrowedFd<'_>,
        path: &str,
        index_db: Option<&Path>,
    ) -> Result<(), SnapshotError> {
        let w = Writer::create(path)?;
        w.set_info("format", archive::FORMAT)?;
        w.set_info("workspace", ws)?;
        w.set_info("created_at", &clawfs_store::clock::now_rfc3339())?;
        let listing = clawfs_store::tree::walk(ws_fd, &|rel| rel == "snapshots")
            .map_err(io(format!("listing workspace {ws}")))?;
        let mut skipped = listing.unlisted;
        // Read and packed a group at a time on every core (compressing is most of the work),
        // written in order: at most two files per core in memory.
        let group = 2 * rayon::current_num_threads().max(1);
        for entries in listing.entries.chunks(group) {
            let packed: Vec<_> = entries
                .par_iter()
                .map(|e| archived(ws_fd, e).and_then(|i| i.map(archive::pack).transpose()))
                .collect();
            for (e, p) in entries.iter().zip(packed) {
                match p {
                    Ok(Some(p)) => w.add(&p)?,
                    Ok(None) => {}
                    Err(err) => leave_out(&e.rel, err, &mut skipped)?,
                }
            }
        }
        w.set_info(
            "skipped",
            &serde_json::to_string(&skipped).unwrap_or_default(),
        )?;
        if let Some(db) = index_db.filter(|p| p.exists()) {
            w.add_index(db)?;
        }
        w.finish()?;
        // On disk before it gets its name.
        let f = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(io("opening the snapshot"))?;
        rustix::fs::fsync(&f).map_err(io("syncing the snapshot"))?;
        Ok(())
    }

    /// Gives the finished temp file its name: the first free one of the day.
    fn publish(&self, snaps: BorrowedFd<'_>, tmp: &str) -> Result<String, SnapshotError> {
        let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
        for n in 1..1000 {
            let name = match n {
                1 => format!("snapshot-{day}.db"),
                n => format!("snapshot-{day}-{n}.db"),
            };
            match rustix::fs::renameat_with(
                snaps,
                tmp,
                snaps,
                name.as_str(),
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => {
                    let _ = rustix::fs::fsync(snaps);
                    return Ok(name);
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(SnapshotError::io("naming the snapshot", e.into())),
            }
        }
        Err(SnapshotError::io(
            "naming the snapshot",
            std::io::Error::other("a thousand snapshots today already"),
        ))
    }

    fn info(&self, snaps: BorrowedFd<'_>, name: &str) -> Result<SnapshotInfo, SnapshotError> {
        let st = rustix::fs::statat(snaps, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(io(format!("snapshot {name}")))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(SnapshotError::NotASnapshot(name.into()));
        }
        let r = Reader::open(&fd_path(snaps, name))?;
        let (files, bytes) = r.totals()?;
        Ok(SnapshotInfo {
            name: name.into(),
            created_at: r.info("created_at")?.unwrap_or_default(),
            files,
            bytes,
            size: st.st_size as u64,
            skipped: r
                .info("skipped")?
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_default(),
        })
    }

    /// The snapshots of `ws`, oldest first.
    pub fn list(&self, ws: &str) -> Result<Vec<SnapshotInfo>, SnapshotError> {
        let ws_fd = self.workspace(ws)?;
        let snaps = match clawfs_store::beneath::open_dir(ws_fd.as_fd(), Path::new("snapshots")) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SnapshotError::io("opening snapshots/", e)),
        };
        let mut out = Vec::new();
        let mut it = rustix::fs::Dir::read_from(&snaps).map_err(io("listing snapshots/"))?;
        while let Some(ent) = it.read() {
            let ent = ent.map_err(io("listing snapshots/"))?;
            let Ok(name) = ent.file_name().to_str() else {
                continue;
            };
            if clawfs_store::names::check_snapshot_name(std::ffi::OsStr::new(name)).is_err() {
                continue;
            }
            match self.info(snaps.as_fd(), name) {
                Ok(i) => out.push(i),
                Err(e) => tracing::warn!(snapshot = name, error = %e, "not listed"),
            }
        }
        // The day's later snapshots have longer names (-2, -10): order by length, then name.
        out.sort_by(|a, b| {
            (&a.created_at, a.name.len(), &a.name).cmp(&(&b.created_at, b.name.len(), &b.name))
        });
        Ok(out)
    }

    /// The snapshot `name` of `ws`, opened.
    fn snapshot(
        &self,
        ws: &str,
        ws_fd: BorrowedFd<'_>,
        name: &str,
    ) -> Result<(OwnedFd, Reader), SnapshotError> {
        clawfs_store::names::check_snapshot_name(std::ffi::OsStr::new(name))?;
        let missing = || SnapshotError::NoSnapshot {
            workspace: ws.into(),
            name: name.into(),
        };
        let snaps = clawfs_store::beneath::open_dir(ws_fd, Path::new("snapshots"))
            .map_err(|_| missing())?;
        let st =
            rustix::fs::statat(&snaps, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|_| missing())?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(missing());
        }
        let r = Reader::open(&fd_path(&snaps, name))?;
        Ok((snaps, r))
    }

    /// Removes the snapshot `name` of `ws`.
    pub fn remove(&self, ws: &str, name: &str) -> Result<(), SnapshotError> {
        let ws_fd = self.workspace(ws)?;
        let (snaps, reader) = self.snapshot(ws, ws_fd.as_fd(), name)?;
        drop(reader);
        rustix::fs::unlinkat(&snaps, name, AtFlags::empty()).map_err(io(format!("removing {name}")))
    }

    /// Replaces the files of `ws` with those of its snapshot `name`, atomically, after taking
    /// a snapshot of what it replaces. `metadata.json` and `snapshots/` stay as they are.
    pub fn restore(
        &self,
        ws: &str,
        name: &str,
        index_db: Option<&Path>,
    ) -> Result<Restored, SnapshotError> {
        let ws_fd = self.workspace(ws)?;
        let (_, reader) = self.snapshot(ws, ws_fd.as_fd(), name)?;
        let ((files, saved), (tmp_parent, tmp)) = self.staged(
            "restore",
            ws,
            RenameFlags::EXCHANGE,
            |e| SnapshotError::io("swapping the restored workspace in", e.into()),
            |new| {
                let files = extract(&reader, new, &not_copied)?;
                copy_file(ws_fd.as_fd(), new, "metadata.json")?;
                // What the restore replaces is saved once the snapshot has proved whole (a
                // damaged one changes nothing, not even the list of snapshots), and before the
                // snapshots are carried over, so the new tree lists it too.
                let saved = self.create(ws, index_db)?;
                self.keep_snapshots(ws_fd.as_fd(), new)?;
                copy_dir_status(ws_fd.as_fd(), new)?;
                Ok((files, saved))
            },
        )?;
        // The old tree, now in the private area. If the snapshot of it left something out
        // (a name that is not UTF-8, a path too long, a file over 1 GB), the tree is kept,
        // root's alone, rather than lose what no snapshot holds.
        let kept_at = match saved.skipped.is_empty() {
            true => {
                if let Err(e) = clawfs_store::tree::remove_all(tmp_parent.as_fd(), &tmp) {
                    tracing::warn!(error = %e, "removing the replaced workspace tree");
                }
                None
            }
            false => Some(self.keep_replaced(tmp_parent.as_fd(), &tmp, ws)?),
        };
        Ok(Restored {
            snapshot: name.into(),
            saved_as: saved.name,
            files,
            kept_at,
        })
    }

    /// Makes workspace `new` from the current state of `ws`, or from its snapshot `from`.
    pub fn fork(&self, ws: &str, new: &str, from: Option<&str>) -> Result<Forked, SnapshotError> {
        let ws_fd = self.workspace(ws)?;
        clawfs_store::names::check_workspace_name(std::ffi::OsStr::new(new))?;
        if rustix::fs::statat(&self.workspaces, new, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
            return Err(SnapshotError::Exists(new.into()));
        }
        let mut skipped = Vec::new();
        let ((files, reflinked), _) = self.staged(
            "fork",
            new,
            RenameFlags::NOREPLACE,
            |e| match e {
                rustix::io::Errno::EXIST => SnapshotError::Exists(new.into()),
                e => SnapshotError::io("naming the fork", e.into()),
            },
            |dst| {
                let counts = match from {
                    Some(name) => {
                        let (_, reader) = self.snapshot(ws, ws_fd.as_fd(), name)?;
                        (extract(&reader, dst, &not_copied)?, 0)
                    }
                    None => copy_tree(ws_fd.as_fd(), dst, &not_copied, &mut skipped)?,
                };
                self.fork_metadata(ws, ws_fd.as_fd(), dst, new, from)?;
                // Root's alone, like every snapshots/ that holds snapshots.
                drop(
                    clawfs_store::tree::create_dir(dst, "snapshots", 0o700)
                        .map_err(io("making snapshots/"))?,
                );
                copy_dir_status(ws_fd.as_fd(), dst)?;
                Ok(counts)
            },
        )?;
        Ok(Forked {
            workspace: new.into(),
            files,
            reflinked,
            skipped,
        })
    }

    /// Moves the replaced tree `name` of `parent` to `.clawfs/replaced/<ws>-<time>`; returns
    /// that path relative to the store.
    fn keep_replaced(
        &self,
        parent: BorrowedFd<'_>,
        name: &str,
        ws: &str,
    ) -> Result<String, SnapshotError> {
        match rustix::fs::mkdirat(&self.private, "replaced", Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(SnapshotError::io("making .clawfs/replaced", e.into())),
        }
        let dir = clawfs_store::beneath::open_dir(self.private.as_fd(), Path::new("replaced"))
            .map_err(io("opening .clawfs/replaced"))?;
        let kept = format!(
            "{ws}-{}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S"),
            &random_hex()[..8]
        );
        rustix::fs::renameat_with(parent, name, &dir, kept.as_str(), RenameFlags::NOREPLACE)
            .map_err(io("keeping the replaced tree"))?;
        Ok(format!(
            "{}/replaced/{kept}",
            clawfs_store::layout::PRIVATE_DIR
        ))
    }

    /// A new, empty, root-only folder in the private area's `tmp/`, and its name there.
    fn staging(&self, what: &str) -> Result<(OwnedFd, String), SnapshotError> {
        match rustix::fs::mkdirat(&self.private, "tmp", Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(SnapshotError::io("making .clawfs/tmp", e.into())),
        }
        let parent = clawfs_store::beneath::open_dir(self.private.as_fd(), Path::new("tmp"))
            .map_err(io("opening .clawfs/tmp"))?;
        let name = format!("{what}-{}", random_hex());
        rustix::fs::mkdirat(&parent, name.as_str(), Mode::from_raw_mode(0o700))
            .map_err(io("making a staging folder"))?;
        Ok((parent, name))
    }

    /// Builds a tree with `build` in a new staging folder, then renames it to
    /// `workspaces/<target>` with `flags` (`rename_failed` says why when that fails). On any
    /// failure the staging folder is removed. Returns `build`'s value and the staging folder
    /// (parent, name): after an exchange, where the replaced tree now is.
    fn staged<T>(
        &self,
        what: &str,
        target: &str,
        flags: RenameFlags,
        rename_failed: impl FnOnce(rustix::io::Errno) -> SnapshotError,
        build: impl FnOnce(BorrowedFd<'_>) -> Result<T, SnapshotError>,
    ) -> Result<(T, (OwnedFd, String)), SnapshotError> {
        let (parent, name) = self.staging(what)?;
        let built = clawfs_store::beneath::open_dir(parent.as_fd(), Path::new(&name))
            .map_err(io(format!("opening the {what} folder")))
            .and_then(|dir| build(dir.as_fd()))
            .and_then(|value| {
                rustix::fs::renameat_with(&parent, name.as_str(), &self.workspaces, target, flags)
                    .map_err(rename_failed)
                    .map(|()| value)
            });
        match built {
            Ok(value) => Ok((value, (parent, name))),
            Err(e) => {
                let _ = clawfs_store::tree::remove_all(parent.as_fd(), &name);
                Err(e)
            }
        }
    }

    /// Hard-links every snapshot of the workspace at `from` into a new `snapshots/` of `to`
    /// (snapshots are never written in place, so sharing them is safe).
    fn keep_snapshots(
        &self,
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
    ) -> Result<(), SnapshotError> {
        let src = self.snapshots_dir(from)?;
        let st = rustix::fs::fstat(&src).map_err(io("snapshots/"))?;
        let dst = clawfs_store::tree::create_dir(to, "snapshots", 0o700)
            .map_err(io("making snapshots/"))?;
        let mut it = rustix::fs::Dir::read_from(&src).map_err(io("listing snapshots/"))?;
        while let Some(ent) = it.read() {
            let ent = ent.map_err(io("listing snapshots/"))?;
            if ent.file_type() != FileType::RegularFile {
                continue;
            }
            let Ok(name) = ent.file_name().to_str() else {
                continue;
            };
            if clawfs_store::names::check_snapshot_name(std::ffi::OsStr::new(name)).is_err() {
                continue;
            }
            rustix::fs::linkat(&src, name, &dst, name, AtFlags::empty())
                .map_err(io(format!("keeping snapshot {name}")))?;
        }
        clawfs_store::tree::set_status(dst.as_fd(), st.st_uid, st.st_gid, st.st_mode, mtime_ns(&st))
            .map_err(io("snapshots/"))
    }

    /// The fork's `metadata.json`: the source's settings under the new name.
    fn fork_metadata(
        &self,
        ws: &str,
        ws_fd: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        new: &str,
        from: Option<&str>,
    ) -> Result<(), SnapshotError> {
        let src = clawfs_store::beneath::read(ws_fd, Path::new("metadata.json"), 1 << 20)
            .map_err(io("reading metadata.json"))?;
        let now = clawfs_store::clock::now_rfc3339();
        let mut meta: serde_json::Value = src
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::json!({}));
        meta["workspace_id"] = new.into();
        meta["created_at"] = now.clone().into();
        meta["updated_at"] = now.into();
        meta["forked_from"] = match from {
            Some(s) => format!("{ws}@{s}"),
            None => ws.to_string(),
        }
        .into();
        let mut text = serde_json::to_vec_pretty(&meta)
            .map_err(|e| SnapshotError::io("metadata.json", e.into()))?;
        text.push(b'\n');
        let st = rustix::fs::statat(ws_fd, "metadata.json", AtFlags::SYMLINK_NOFOLLOW).ok();
        let f = clawfs_store::tree::create_file(dst, "metadata.json", 0o600)
            .map_err(io("metadata.json"))?;
        std::fs::File::from(rustix::io::dup(&f).map_err(io("metadata.json"))?)
            .write_all(&text)
            .map_err(io("writing metadata.json"))?;
        if let Some(st) = st {
            clawfs_store::tree::set_status(f.as_fd(), st.st_uid, st.st_gid, st.st_mode, now_ns())
                .map_err(io("metadata.json"))?;
        }
        Ok(())
    }
}

/// Why a failure to read one entry leaves that entry out instead of failing the whole copy:
/// the things an agent can do to its own files.
fn left_out(e: &std::io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        libc::ENOENT | libc::ELOOP | libc::ENOTDIR | libc::ENXIO => {
            Some("gone or replaced while it was copied")
        }
        libc::ENAMETOOLONG => Some("the path is too long to open"),
        _ => None,
    }
}

/// Records in `skipped` why `rel` is left out when `e` is something an agent can do to one of
/// its files (grow it past the limit, never stop writing it, remove it or swap it for a link,
/// bury it too deep): that costs the file, not the whole copy. Any other error is returned.
fn leave_out(rel: &str, e: SnapshotError, skipped: &mut Vec<String>) -> Result<(), SnapshotError> {
    match e {
        e @ (SnapshotError::TooLarge(_) | SnapshotError::Busy(_)) => skipped.push(e.to_string()),
        SnapshotError::Io { what, source } => match left_out(&source) {
            Some(why) => skipped.push(format!("{rel}: {why}")),
            None => return Err(SnapshotError::Io { what, source }),
        },
        e => return Err(e),
    }
    Ok(())
}

/// The archive entry of `e` below `ws` (None for kinds a snapshot does not keep).
fn archived(
    ws: BorrowedFd<'_>,
    e: &clawfs_store::tree::Entry,
) -> Result<Option<Item>, SnapshotError> {
    let at = |err: std::io::Error| SnapshotError::io(e.rel.clone(), err);
    Ok(Some(match e.kind {
        FileType::Directory => {
            let st = clawfs_store::tree::stat(ws, &e.rel).map_err(at)?;
            item_of(&e.rel, &st, Content::Dir)
        }
        FileType::Symlink => {
            let st = clawfs_store::tree::stat(ws, &e.rel).map_err(at)?;
            let Some(target) = clawfs_store::tree::read_link(ws, &e.rel).map_err(at)? else {
                return Ok(None);
            };
            item_of(&e.rel, &st, Content::Symlink(target))
        }
        FileType::RegularFile => {
            let (bytes, st) = read_stable(ws, &e.rel)?;
            item_of(&e.rel, &st, Content::File(bytes))
        }
        // FIFOs, sockets, devices: nothing to keep.
        _ => return Ok(None),
    }))
}

/// What a restore or fork does not take from its source: the workspace's own settings
/// (`metadata.json`) and its snapshots.
fn not_copied(rel: &str) -> bool {
    rel == "metadata.json" || rel == "snapshots" || rel.starts_with("snapshots/")
}

/// `/proc/self/fd/N/name`: a path SQLite can open that reaches `name` through the descriptor
/// `dir` (never through the store's path again).
fn fd_path(dir: impl AsFd, name: &str) -> String {
    format!("/proc/self/fd/{}/{name}", dir.as_fd().as_raw_fd())
}

/// 24 random hex digits, for names nobody can guess.
pub(crate) fn random_hex() -> String {
    let mut b = [0u8; 12];
    getrandom::fill(&mut b).expect("the kernel's random source");
    hex::encode(b)
}

fn mtime_ns(st: &rustix::fs::Stat) -> i64 {
    st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64
}

fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
}

fn item_of(rel: &str, st: &rustix::fs::Stat, content: Content) -> Item {
    Item {
        name: rel.to_string(),
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        mtime_ns: mtime_ns(st),
        content,
    }
}

/// A file changed this recently may still be in the middle of a `write(2)`: the kernel sets its
/// times when a write starts, so the status alone cannot show the write going on.
const RECENT_NS: i64 = 5_000_000_000;

/// The bytes and status of the file `rel`, read while it did not change: same status before and
/// after, and, for a file changed in the last [`RECENT_NS`], the same bytes read twice.
fn read_stable(
    ws: BorrowedFd<'_>,
    rel: &str,
) -> Result<(Vec<u8>, rustix::fs::Stat), SnapshotError> {
    let read_all = |fd: &OwnedFd, size: usize| -> Result<Vec<u8>, SnapshotError> {
        let mut bytes = Vec::with_capacity(size);
        let f = std::fs::File::from(fd.try_clone().map_err(io(rel.to_string()))?);
        std::io::Read::by_ref(&mut &f)
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io(format!("reading {rel}")))?;
        Ok(bytes)
    };
    let stamp = crate::index::FileStamp::of;
    for attempt in 0..STABLE_ATTEMPTS {
        let fd = clawfs_store::beneath::open_file(ws, Path::new(rel), OFlags::RDONLY)
            .map_err(io(format!("opening {rel}")))?;
        let before = rustix::fs::fstat(&fd).map_err(io(rel.to_string()))?;
        if before.st_size as u64 > MAX_FILE_BYTES {
            return Err(SnapshotError::TooLarge(rel.into()));
        }
        let bytes = read_all(&fd, before.st_size as usize)?;
        let recent =
            now_ns() - (before.st_ctime * 1_000_000_000 + before.st_ctime_nsec as i64) < RECENT_NS;
        let same_again = !recent || {
            rustix::fs::seek(&fd, rustix::fs::SeekFrom::Start(0)).map_err(io(rel.to_string()))?;
            read_all(&fd, bytes.len())? == bytes
        };
        let after = rustix::fs::fstat(&fd).map_err(io(rel.to_string()))?;
        if same_again
            && stamp(&before) == stamp(&after)
            && bytes.len() as u64 == after.st_size as u64
        {
            return Ok((bytes, after));
        }
        std::thread::sleep(Duration::from_millis(5 * u64::from(attempt + 1)));
    }
    Err(SnapshotError::Busy(rel.into()))
}

/// Writes every entry of the snapshot not `skip`ped below `root`, with its owner, mode and
/// modification time; returns how many regular files.
fn extract(
    reader: &Reader,
    root: BorrowedFd<'_>,
    skip: &dyn Fn(&str) -> bool,
) -> Result<u64, SnapshotError> {
    let mut files = 0;
    // Folders get their status last: creating their entries changes their times.
    let mut dirs: Vec<Item> = Vec::new();
    reader.each(&mut |item| {
        if skip(&item.name) {
            return Ok(());
        }
        let at = |e: std::io::Error| SnapshotError::io(format!("restoring {}", item.name), e);
        match &item.content {
            Content::Dir => {
                drop(clawfs_store::tree::create_dir(root, &item.name, 0o700).map_err(at)?);
                dirs.push(item);
            }
            Content::Symlink(target) => {
                clawfs_store::tree::create_symlink(root, &item.name, target).map_err(at)?;
                clawfs_store::tree::chown_link(root, &item.name, item.uid, item.gid).map_err(at)?;
            }
            Content::File(bytes) => {
                let f = clawfs_store::tree::create_file(root, &item.name, 0o600).map_err(at)?;
                std::fs::File::from(rustix::io::dup(&f).map_err(|e| at(e.into()))?)
                    .write_all(bytes)
                    .map_err(at)?;
                // An archive can claim any owner: a file comes back without setuid or setgid
                // (the mount is nosuid anyway), so no archive makes a root program.
                let mode = item.mode & !(libc::S_ISUID | libc::S_ISGID);
                clawfs_store::tree::set_status(f.as_fd(), item.uid, item.gid, mode, item.mtime_ns)
                    .map_err(at)?;
                files += 1;
            }
        }
        Ok(())
    })?;
    for d in dirs.iter().rev() {
        let fd = clawfs_store::beneath::open_dir(root, Path::new(&d.name))
            .map_err(io(d.name.clone()))?;
        clawfs_store::tree::set_status(fd.as_fd(), d.uid, d.gid, d.mode, d.mtime_ns)
            .map_err(io(format!("restoring {}", d.name)))?;
    }
    Ok(files)
}

/// Copies the tree at `src` into the empty folder `dst` (reflinks where possible); returns
/// (regular files, of which reflinked).
fn copy_tree(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    skip: &dyn Fn(&str) -> bool,
    skipped: &mut Vec<String>,
) -> Result<(u64, u64), SnapshotError> {
    let (mut files, mut reflinked) = (0, 0);
    let mut dirs = Vec::new();
    let listing = clawfs_store::tree::walk(src, skip).map_err(io("listing the workspace"))?;
    skipped.extend(listing.unlisted);
    for e in listing.entries {
        let at = |err: std::io::Error| SnapshotError::io(format!("copying {}", e.rel), err);
        let st = match clawfs_store::tree::stat(src, &e.rel) {
            Ok(st) => st,
            Err(err) => {
                leave_out(&e.rel, at(err), skipped)?;
                continue;
            }
        };
        match e.kind {
            FileType::Directory => {
                drop(clawfs_store::tree::create_dir(dst, &e.rel, 0o700).map_err(at)?);
                dirs.push((e.rel.clone(), st));
            }
            FileType::Symlink => {
                let Some(target) = clawfs_store::tree::read_link(src, &e.rel).map_err(at)? else {
                    continue;
                };
                clawfs_store::tree::create_symlink(dst, &e.rel, &target).map_err(at)?;
                clawfs_store::tree::chown_link(dst, &e.rel, st.st_uid, st.st_gid).map_err(at)?;
            }
            FileType::RegularFile => match copy_stable(src, dst, &e.rel) {
                Ok(r) => {
                    reflinked += u64::from(r);
                    files += 1;
                }
                Err(err) => leave_out(&e.rel, err, skipped)?,
            },
            _ => {}
        }
    }
    for (rel, st) in dirs.iter().rev() {
        let fd = clawfs_store::beneath::open_dir(dst, Path::new(rel)).map_err(io(rel.clone()))?;
        clawfs_store::tree::set_status(fd.as_fd(), st.st_uid, st.st_gid, st.st_mode, mtime_ns(st))
            .map_err(io(rel.clone()))?;
    }
    Ok((files, reflinked))
}

/// Copies the file `rel` while it did not change; true when it was reflinked.
fn copy_stable(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, rel: &str) -> Result<bool, SnapshotError> {
    let at = |e: std::io::Error| SnapshotError::io(format!("copying {rel}"), e);
    for attempt in 0..STABLE_ATTEMPTS {
        let from =
            clawfs_store::beneath::open_file(src, Path::new(rel), OFlags::RDONLY).map_err(at)?;
        let before = rustix::fs::fstat(&from).map_err(|e| at(e.into()))?;
        let _ = clawfs_store::tree::remove_all(dst, rel);
        let to = clawfs_store::tree::create_file(dst, rel, 0o600).map_err(at)?;
        let reflinked = clawfs_store::tree::copy_contents(from.as_fd(), to.as_fd()).map_err(at)?;
        let after = rustix::fs::fstat(&from).map_err(|e| at(e.into()))?;
        let stamp = crate::index::FileStamp::of;
        if stamp(&before) == stamp(&after) {
            clawfs_store::tree::set_status(
                to.as_fd(),
                after.st_uid,
                after.st_gid,
                after.st_mode,
                mtime_ns(&after),
            )
            .map_err(at)?;
            return Ok(reflinked);
        }
        std::thread::sleep(Duration::from_millis(5 * u64::from(attempt + 1)));
    }
    Err(SnapshotError::Busy(rel.into()))
}

/// Copies the regular file `name` of `from` into `to`, with its status.
fn copy_file(from: BorrowedFd<'_>, to: BorrowedFd<'_>, name: &str) -> Result<(), SnapshotError> {
    match clawfs_store::beneath::open_file(from, Path::new(name), OFlags::RDONLY) {
        Ok(_) => copy_stable(from, to, name).map(|_| ()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SnapshotError::io(format!("opening {name}"), e)),
    }
}

/// Gives the folder `to` the owner, mode, times and extended attributes of `from` (the
/// workspace's own: its dimension, its tags).
fn copy_dir_status(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), SnapshotError> {
    let st = rustix::fs::fstat(from).map_err(io("the workspace folder"))?;
    let src = PathBuf::from(format!("/proc/self/fd/{}", from.as_raw_fd()));
    let dst = PathBuf::from(format!("/proc/self/fd/{}", to.as_raw_fd()));
    if let Ok(names) = xattr::list(&src) {
        for n in names {
            if let Ok(Some(v)) = xattr::get(&src, &n) {
                xattr::set(&dst, &n, &v)
                    .map_err(io(format!("copying the attribute {}", n.to_string_lossy())))?;
            }
        }
    }
    clawfs_store::tree::set_status(to, st.st_uid, st.st_gid, st.st_mode, mtime_ns(&st))
        .map_err(io("the workspace folder"))
}
