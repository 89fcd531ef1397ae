//! User attributes the backing inode cannot hold. ClawFS offers the kernel's own limits on any
//! backing filesystem: names up to 255 bytes, values up to 64 KiB, and as many attributes per
//! file as a 64 KiB list of their names holds (the most `listxattr` can return), with at most
//! [`SPILL_MAX`] bytes of them kept here per file. An ext4 inode holds about 110 small
//! attributes (one block) and no value larger than a block: what does not fit there is kept
//! in a SQLite table in the store's private area, keyed by the backing inode's file handle,
//! which stays with the inode across renames and links and is never given to another inode.
//!
//! An attribute lives in one place: once kept here it stays here until removed. A file's rows
//! go when its last name is removed, and rows of inodes that are gone (a crash between the
//! two) at the next mount.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use rusqlite::{params, Connection, OptionalExtension};

use clawfs_store::backing::BackingHandle;

/// The table's file in the store's private area.
pub const SPILL_FILE: &str = "xattrs.db";
/// The most bytes (names and values) of one file's attributes kept here.
pub const SPILL_MAX: u64 = 4 << 20;
/// The most bytes `listxattr` returns (`XATTR_LIST_MAX`): names, each NUL-terminated.
pub const LIST_MAX: usize = 65536;

/// The attributes kept beside the backing files of one store.
pub struct Spill {
    path: PathBuf,
    db: OnceLock<Mutex<Connection>>,
    /// Whether any attribute may be kept here: while not, no lookup touches the table.
    used: AtomicBool,
}

fn sql(e: rusqlite::Error) -> io::Error {
    io::Error::other(format!("the attribute table: {e}"))
}

impl Spill {
    /// The table of the store whose private area is `private`; opened at first use.
    pub fn new(private: &Path) -> Self {
        let path = private.join(SPILL_FILE);
        let used = AtomicBool::new(path.exists());
        Self {
            path,
            db: OnceLock::new(),
            used,
        }
    }

    /// Whether no attribute was ever kept here.
    pub fn unused(&self) -> bool {
        !self.used.load(Ordering::Acquire)
    }

    /// Runs `f` on the table, with the daemon's filesystem ids: the table is in the store's
    /// private area, and a caller's call may ask.
    fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> io::Result<T> {
        crate::creds::with_daemon_ids(|| {
            if self.db.get().is_none() {
                let _ = self.db.set(Mutex::new(self.open()?));
            }
            let conn = self
                .db
                .get()
                .expect("set above")
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&conn).map_err(sql)
        })
    }

    fn open(&self) -> io::Result<Connection> {
        let conn = Connection::open(&self.path).map_err(sql)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS xattrs (
                 handle BLOB NOT NULL,
                 name TEXT NOT NULL,
                 value BLOB NOT NULL,
                 PRIMARY KEY (handle, name)
             ) WITHOUT ROWID;",
        )
        .map_err(sql)?;
        Ok(conn)
    }

    fn key(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
        Ok(BackingHandle::of_fd(fd)?.to_bytes())
    }

    /// The bytes kept for `name` in `dir` (not followed if a symlink): see [`Self::bytes`].
    pub fn bytes_at(&self, dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> u64 {
        if self.unused() {
            return 0;
        }
        let Ok(handle) = BackingHandle::at(dir, name) else {
            return 0;
        };
        self.bytes_of(&handle.to_bytes()).unwrap_or(0)
    }

    /// The value of `name` kept for the file `fd`, if any.
    pub fn get(&self, fd: BorrowedFd<'_>, name: &str) -> io::Result<Option<Vec<u8>>> {
        if self.unused() {
            return Ok(None);
        }
        let key = Self::key(fd)?;
        self.with(|c| {
            c.query_row(
                "SELECT value FROM xattrs WHERE handle = ?1 AND name = ?2",
                params![key, name],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// The names kept for the file `fd`.
    pub fn names(&self, fd: BorrowedFd<'_>) -> io::Result<Vec<String>> {
        if self.unused() {
            return Ok(Vec::new());
        }
        let key = Self::key(fd)?;
        self.with(|c| {
            let mut q = c.prepare_cached("SELECT name FROM xattrs WHERE handle = ?1")?;
            let names = q.query_map([key], |r| r.get(0))?;
            names.collect()
        })
    }

    /// The bytes (names and values) kept for the file `fd`: what its owner is charged for them.
    pub fn bytes(&self, fd: BorrowedFd<'_>) -> u64 {
        if self.unused() {
            return 0;
        }
        let Ok(key) = Self::key(fd) else { return 0 };
        self.bytes_of(&key).unwrap_or(0)
    }

    fn bytes_of(&self, key: &[u8]) -> io::Result<u64> {
        self.with(|c| {
            c.query_row(
                "SELECT COALESCE(SUM(length(CAST(name AS BLOB)) + length(value)), 0)
                 FROM xattrs WHERE handle = ?1",
                [key],
                |r| r.get::<_, i64>(0),
            )
        })
        .map(|n| n.max(0) as u64)
    }

    /// Keeps `name` = `value` for the file `fd`, replacing what was kept. ENOSPC when the
    /// file's kept attributes would pass [`SPILL_MAX`].
    pub fn put(&self, fd: BorrowedFd<'_>, name: &str, value: &[u8]) -> io::Result<()> {
        let key = Self::key(fd)?;
        self.used.store(true, Ordering::Release);
        let old = self
            .get(fd, name)?
            .map_or(0, |v| (name.len() + v.len()) as u64);
        let total = self.bytes_of(&key)? - old + (name.len() + value.len()) as u64;
        if total > SPILL_MAX {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.with(|c| {
            c.execute(
                "INSERT OR REPLACE INTO xattrs (handle, name, value) VALUES (?1, ?2, ?3)",
                params![key, name, value],
            )
        })
        .map(|_| ())
    }

    /// Removes `name` kept for the file `fd`: whether it was kept.
    pub fn remove(&self, fd: BorrowedFd<'_>, name: &str) -> io::Result<bool> {
        if self.unused() {
            return Ok(false);
        }
        let key = Self::key(fd)?;
        self.with(|c| {
            c.execute(
                "DELETE FROM xattrs WHERE handle = ?1 AND name = ?2",
                params![key, name],
            )
        })
        .map(|n| n > 0)
    }

    /// Forgets every attribute kept for the inode `handle` (its last name is gone).
    pub fn forget(&self, handle: &BackingHandle) {
        if self.unused() {
            return;
        }
        let key = handle.to_bytes();
        if let Err(e) = self.with(|c| c.execute("DELETE FROM xattrs WHERE handle = ?1", [key])) {
            tracing::warn!(error = %e, "a removed file's attributes could not be forgotten");
        }
    }

    /// Gives the file `to` the attributes kept for `from` (a replacement keeps them).
    pub fn copy(&self, from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> io::Result<()> {
        if self.unused() {
            return Ok(());
        }
        let (from, to) = (Self::key(from)?, Self::key(to)?);
        self.with(|c| {
            c.execute(
                "INSERT OR REPLACE INTO xattrs (handle, name, value)
                 SELECT ?2, name, value FROM xattrs WHERE handle = ?1",
                params![from, to],
            )
        })
        .map(|_| ())
    }

    /// The bytes kept per inode, by backing handle: for a recount.
    pub fn bytes_by_handle(&self) -> io::Result<std::collections::HashMap<Vec<u8>, u64>> {
        if self.unused() {
            return Ok(Default::default());
        }
        self.with(|c| {
            let mut q = c.prepare(
                "SELECT handle, SUM(length(CAST(name AS BLOB)) + length(value))
                 FROM xattrs GROUP BY handle",
            )?;
            let rows = q.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?;
            rows.collect()
        })
    }

    /// Forgets the attributes of inodes that are gone from the backing filesystem that
    /// `mount_fd` is on: a crash between a removal and its forgetting leaves such rows.
    pub fn sweep(&self, mount_fd: BorrowedFd<'_>) -> io::Result<usize> {
        let mut gone = 0;
        for key in self.bytes_by_handle()?.into_keys() {
            let stale = match BackingHandle::from_bytes(&key) {
                Some(h) => h
                    .open_path(mount_fd)
                    .is_err_and(|e| e.raw_os_error() == Some(libc::ESTALE)),
                None => true,
            };
            if stale {
                gone += self.with(|c| c.execute("DELETE FROM xattrs WHERE handle = ?1", [key]))?;
            }
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn kept_per_inode_across_renames_copied_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill::new(dir.path());
        assert!(spill.unused());
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        std::fs::write(dir.path().join("b"), b"y").unwrap();
        let a = std::fs::File::open(dir.path().join("a")).unwrap();
        let b = std::fs::File::open(dir.path().join("b")).unwrap();
        assert_eq!(spill.get(a.as_fd(), "user.k").unwrap(), None);
        spill.put(a.as_fd(), "user.k", &[7; 1000]).unwrap();
        spill.put(a.as_fd(), "user.j", b"v").unwrap();
        assert!(!spill.unused());
        std::fs::rename(dir.path().join("a"), dir.path().join("c")).unwrap();
        let c = std::fs::File::open(dir.path().join("c")).unwrap();
        assert_eq!(spill.get(c.as_fd(), "user.k").unwrap(), Some(vec![7; 1000]));
        assert_eq!(spill.bytes(c.as_fd()), 6 + 1000 + 6 + 1);
        spill.copy(c.as_fd(), b.as_fd()).unwrap();
        let mut names = spill.names(b.as_fd()).unwrap();
        names.sort();
        assert_eq!(names, ["user.j", "user.k"]);
        assert!(spill.remove(b.as_fd(), "user.j").unwrap());
        assert!(!spill.remove(b.as_fd(), "user.j").unwrap());
        assert_eq!(spill.names(c.as_fd()).unwrap().len(), 2, "a copy is apart");
        let too_big = vec![0u8; SPILL_MAX as usize];
        assert_eq!(
            spill
                .put(c.as_fd(), "user.big", &too_big)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOSPC)
        );
        spill.forget(&BackingHandle::of_fd(c.as_fd()).unwrap());
        assert!(spill.names(c.as_fd()).unwrap().is_empty());
        assert_eq!(spill.names(b.as_fd()).unwrap(), ["user.k"]);
        // A reopened table knows it is in use, and the rows of a removed inode are swept.
        drop(spill);
        let spill = Spill::new(dir.path());
        assert!(!spill.unused());
        drop(b);
        std::fs::remove_file(dir.path().join("b")).unwrap();
        let root = std::fs::File::open(dir.path()).unwrap();
        // Opening by handle needs CAP_DAC_READ_SEARCH: unprivileged, nothing is swept.
        let swept = spill.sweep(root.as_fd()).unwrap();
        if rustix::process::geteuid().is_root() {
            assert_eq!(swept, 1);
            assert!(spill.bytes_by_handle().unwrap().is_empty());
        }
    }
}
