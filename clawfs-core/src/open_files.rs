//! Open file and directory handles. Handle numbers come from an atomic counter and carry no
//! meaning; each maps to an `Arc` so a slow read never holds the table lock.

use std::any::Any;
use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::attr::FileKind;
use crate::error::{FsError, FsResult};
use crate::io_mode::{IoChoice, IoMode};

/// A backing descriptor and what the adapter keeps alive with it (the passthrough backing id).
/// With passthrough, one is shared by every open of an inode (the kernel requires one backing
/// file per inode); without, each open has its own, opened with the caller's flags.
pub struct BackingFile {
    /// The backing file.
    pub file: File,
    /// Opaque to the core: set once by the adapter.
    pub attachment: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl BackingFile {
    /// A backing file with nothing attached yet.
    pub fn new(file: File) -> Self {
        Self {
            file,
            attachment: OnceLock::new(),
        }
    }
}

/// Who writes through a handle, for the audit record and the quota at close.
#[derive(Debug)]
pub struct WriteHandle {
    /// The writer.
    pub who: clawfs_policy::Identity,
    /// Its process.
    pub pid: u32,
    /// Its fs uid.
    pub uid: u32,
    /// The file's namespace path at open.
    pub path: clawfs_policy::NsPath,
    /// The size at open.
    pub size_at_open: u64,
    /// The writer is an agent with a byte quota: every write is charged as it is made (such a
    /// handle is never passthrough, so no write escapes the count).
    pub metered: bool,
}

/// Where a staged write goes when it is closed (an identity file: `crate::fs::staged`).
#[derive(Debug)]
pub struct StagedTarget {
    /// The agent whose identity file this is.
    pub agent: String,
    /// The agent's directory, relative to the store root (`agents/<agent>`).
    pub dir: std::path::PathBuf,
    /// Changed since the last commit, by a write, `ftruncate`, `fallocate` or
    /// `copy_file_range` through a descriptor. A descriptor closed without any (a shell's copy
    /// after `dup2`, a bare `O_TRUNC` open) commits nothing.
    pub dirty: std::sync::atomic::AtomicBool,
}

impl StagedTarget {
    /// The private copy changed: it is validated and committed at the next close.
    pub fn changed(&self) {
        self.dirty.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// An open regular file.
pub struct OpenFile {
    /// Inode number on the mount.
    pub ino: u64,
    /// What its owner is charged for: the file's [`crate::inodes::Node::held`], which counts
    /// this open until it is released.
    pub held: Arc<crate::held::HeldSize>,
    /// The backing descriptor serving it.
    pub backing: Arc<BackingFile>,
    /// For a handle opened for writing: who and where, and the size at open, so that closing
    /// it records the bytes it added (and counts them against an agent's quota).
    pub writer: Option<WriteHandle>,
    /// For a staged write (an identity file): where it goes when it is closed.
    pub staged: Option<StagedTarget>,
    /// With passthrough on: how this open is served, counted in its inode's mode.
    pub io: Option<(IoChoice, Arc<IoMode>)>,
    /// For an open by `execve`: the inode's modes, where it is counted until released.
    pub exec: Option<Arc<IoMode>>,
    /// For an open for writing: the inode's modes, where it is counted as a writer until
    /// released.
    pub writing: Option<Arc<IoMode>>,
    /// The descriptor held for the opener, counted against its limit until released.
    pub charge: crate::descriptors::Charge,
}

impl OpenFile {
    /// `Some(keep_cache)` for an open served through the page cache by choice; `None` for one
    /// to serve by passthrough if the kernel allows it.
    pub fn cached(&self) -> Option<bool> {
        match self.io {
            Some((IoChoice::Cached { keep_cache }, _)) => Some(keep_cache),
            _ => None,
        }
    }
}

impl std::ops::Deref for OpenFile {
    type Target = File;
    fn deref(&self) -> &File {
        &self.backing.file
    }
}

/// One directory entry as the mount shows it.
#[derive(Clone, Debug)]
pub struct DirEntry {
    /// Inode number on the mount.
    pub ino: u64,
    /// Entry type.
    pub kind: FileKind,
    /// Entry name.
    pub name: std::ffi::OsString,
}

impl DirEntry {
    /// The `.` and `..` entries that start every listing.
    pub fn dots(ino: u64, parent: u64) -> Vec<DirEntry> {
        vec![
            DirEntry {
                ino,
                kind: FileKind::Dir,
                name: ".".into(),
            },
            DirEntry {
                ino: parent,
                kind: FileKind::Dir,
                name: "..".into(),
            },
        ]
    }
}

/// An open directory: its entries, read at `opendir` and again at a rewind.
pub struct OpenDir {
    /// Inode number on the mount.
    pub ino: u64,
    /// Who opened it (generated directories list per caller).
    pub caller: crate::creds::Caller,
    /// The snapshot of entries being served (none before the handle's first reading).
    pub entries: Mutex<Option<Arc<Vec<DirEntry>>>>,
    /// The directory of the store, held while it is open (not for generated directories):
    /// `fstat` of an open directory that was removed still answers from it.
    pub fd: Option<std::os::fd::OwnedFd>,
    /// The descriptor `fd` held for the opener, counted against its limit until released.
    pub charge: Option<crate::descriptors::Charge>,
}

/// A table of open handles of one kind.
pub struct HandleTable<T> {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<T>>>,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::numbered_from(1)
    }
}

/// Where the numbers of each table's handles start: far apart, so that a handle of one kind
/// (a generated file's) never has the number of a handle of another (an open store file's).
pub const FILE_HANDLES_FROM: u64 = 1;
/// See [`FILE_HANDLES_FROM`].
pub const DIR_HANDLES_FROM: u64 = 1 << 60;
/// See [`FILE_HANDLES_FROM`].
pub const GENERATED_HANDLES_FROM: u64 = 1 << 61;

impl<T> HandleTable<T> {
    /// An empty table whose first handle is `first`.
    pub fn numbered_from(first: u64) -> Self {
        Self {
            next: AtomicU64::new(first),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Registers `value` and returns its new handle number.
    pub fn insert(&self, value: T) -> (u64, Arc<T>) {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        let value = Arc::new(value);
        self.lock().insert(fh, Arc::clone(&value));
        (fh, value)
    }

    /// The handle `fh`.
    pub fn get(&self, fh: u64) -> FsResult<Arc<T>> {
        self.lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::UnknownHandle(fh))
    }

    /// Removes `fh`; the value lives on while other threads still use it.
    pub fn remove(&self, fh: u64) -> Option<Arc<T>> {
        self.lock().remove(&fh)
    }

    /// The open handles for which `pred` holds, with their numbers. `pred` runs under the
    /// table's lock: it must take no other lock.
    pub fn matching(&self, pred: impl Fn(&T) -> bool) -> Vec<(u64, Arc<T>)> {
        self.lock()
            .iter()
            .filter(|(_, v)| pred(v))
            .map(|(fh, v)| (*fh, Arc::clone(v)))
            .collect()
    }

    /// Number of open handles.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One value per inode shared by all its open handles, alive while any handle holds it (the
/// kernel requires every passthrough open of an inode to use the same backing file).
pub struct SharedByInode<T> {
    map: Mutex<(HashMap<u64, std::sync::Weak<T>>, usize)>,
}

impl<T> Default for SharedByInode<T> {
    fn default() -> Self {
        Self {
            map: Mutex::new((HashMap::new(), 0)),
        }
    }
}

impl<T> SharedByInode<T> {
    /// The live value of `ino`, if any.
    pub fn get(&self, ino: u64) -> Option<Arc<T>> {
        let guard = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0.get(&ino).and_then(std::sync::Weak::upgrade)
    }

    /// The live value of `ino`, or a new one from `make` (called under the lock, so two opens
    /// never make two values for one inode).
    pub fn get_or_try_insert<E>(
        &self,
        ino: u64,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let mut guard = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let (map, inserts) = &mut *guard;
        if let Some(v) = map.get(&ino).and_then(std::sync::Weak::upgrade) {
            return Ok(v);
        }
        let v = Arc::new(make()?);
        map.insert(ino, Arc::downgrade(&v));
        *inserts += 1;
        if *inserts % 1024 == 0 {
            map.retain(|_, w| w.strong_count() > 0);
        }
        Ok(v)
    }
}
