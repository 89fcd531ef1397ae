//! The filesystem model: every operation the mount offers, on backing files, with ClawFS's
//! rules on top. Each method is what one FUSE callback calls; it takes the caller and returns
//! core types or an [`FsError`].
//!
//! Backing inodes are reached through kernel file handles ([`BackingHandle`]); calls that
//! create, remove or change nodes run with the caller's credentials ([`AsCaller`]) so the
//! backing filesystem applies native POSIX rules.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::SystemTime;

use rustix::fs::{AtFlags, Mode, RenameFlags, Timespec, Timestamps, XattrFlags};

use crate::attr::{decode_dev, Attr, FileKind};
use crate::creds::{AsCaller, Caller};
use crate::error::{FsError, FsResult};
use crate::generated_files::GeneratedInodes;
use crate::inodes::{InodeTable, Node, ROOT_INO};
use crate::io_mode::{IoChoice, IoMode, CACHED_MAX_SIZE, FMODE_EXEC};
use crate::open_files::{
    BackingFile, DirEntry, HandleTable, OpenDir, OpenFile, SharedByInode, WriteHandle,
};
use crate::path_cache::PathCache;
use crate::seed;
use crate::store::Store;
use crate::xattrs::{self, ClawfsAttr};
use clawfs_policy::{Denial, Identity, NsPath};
use clawfs_store::area::{Area, Place};
use clawfs_store::backing::{proc_fd_path, BackingHandle};
use clawfs_store::names;
use generated::Route;

mod builder;
mod dirs;
mod files;
mod gate;
mod generated;
mod git_guard;
mod git_repos;
pub(crate) mod handles;
mod kernel_cache;
mod listings;
mod metrics;
mod namespace;
mod nodes;
mod search_hooks;
mod secrets;
mod staged;
mod xattr_ops;

pub use builder::{
    invalidation_channel, ActivityLink, ClawFsBuilder, InvalidationQueue, Invalidations,
};
pub use gate::{audit_name, installed_policy, POLICY_FILE};
pub use generated::ToolStep;
pub use git_guard::AfterRelease;
pub use kernel_cache::{PlusEntry, READDIRPLUS_BATCH};
pub use staged::{
    identity_file_agent, validate as validate_identity, InvalidIdentity, MAX_IDENTITY_BYTES,
};

/// How the mount keeps access times. A read through the mount (passthrough or served by the
/// daemon) reads the backing file, so the store's filesystem updates its access time by its
/// own mount's rule (normally `relatime`); `noatime` and `nodiratime` keep the daemon's reads
/// of files and folders (or of folders only) from touching it. The daemon's own reads (the
/// index, its listings, recounts) never do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atime {
    /// The store's filesystem's rule (`relatime` unless it is mounted otherwise).
    #[default]
    Relatime,
    /// Reads never update access times.
    NoAtime,
    /// Listing a folder never updates its access time.
    NoDirAtime,
}

/// What a lookup-like call returns: the node's attributes and generation.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Attributes, with the mount's inode number.
    pub attr: Attr,
    /// Distinguishes files that reuse an inode number.
    pub generation: u64,
}

/// A time in a `setattr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// The current time.
    Now,
    /// A given time.
    At(SystemTime),
}

/// The changes of one `setattr` call; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
}

/// Filesystem statistics for `statfs`.
#[derive(Clone, Copy, Debug)]
pub struct StatFs {
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
    /// Fragment size.
    pub frsize: u32,
}

/// How a rename should treat an existing target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameMode {
    /// Fail with EEXIST if the target exists.
    pub noreplace: bool,
    /// Swap source and target atomically.
    pub exchange: bool,
}

/// Counts shown by `clawfs status`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Inodes the kernel currently holds.
    pub inodes: usize,
    /// Open files.
    pub open_files: usize,
    /// Open directories.
    pub open_dirs: usize,
}

/// Fault injection for tests (feature `fault-injection`), from the environment of the daemon:
/// `CLAWFS_FAULT_SLOW_LOOKUP=NAME=MS` makes every lookup of NAME take MS milliseconds.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Default)]
struct Faults {
    slow_lookup: Option<(OsString, std::time::Duration)>,
}

#[cfg(feature = "fault-injection")]
impl Faults {
    fn from_env() -> Self {
        let slow_lookup = std::env::var("CLAWFS_FAULT_SLOW_LOOKUP")
            .ok()
            .and_then(|v| {
                let (name, ms) = v.rsplit_once('=')?;
                Some((
                    name.into(),
                    std::time::Duration::from_millis(ms.parse().ok()?),
                ))
            });
        Self { slow_lookup }
    }
}

/// The ClawFS filesystem over one store.
///
/// # Locks
/// Every lock below is a leaf — held for a map operation, with no other lock taken and no
/// system call made while it is held — except, by design:
/// - `shared` (by inode): held while the inode's one shared backing descriptor is opened, so two
///   opens never make two; inside it only `inodes` is taken. Order: `shared` → `inodes`.
/// - the gate's `denials`: held while an agent's denials file is rewritten, so that two denials
///   never interleave their rewrites. Nothing else is taken inside it.
/// - `git_moves` (a turn, shared or sole): held by a rename, the making of a name (create,
///   mkdir, mknod, symlink, link) and the tools' moves for the whole operation, leaf locks taken inside it; never taken twice
///   by one thread, never held while waiting for the kernel's FUSE side.
///
/// A request never holds two leaf locks at once; `Arc`s are cloned out of a map and the lock is
/// dropped before the work.
pub struct ClawFs {
    #[cfg(feature = "fault-injection")]
    faults: Faults,
    store: Store,
    /// Inode number → node and lookup count (leaf lock).
    inodes: InodeTable,
    /// Open files, directories and generated files by handle (each a leaf lock).
    files: HandleTable<OpenFile>,
    dirs: HandleTable<OpenDir>,
    /// The store's descriptors held for callers' open files and folders, by uid (leaf lock).
    descriptors: crate::descriptors::Descriptors,
    /// The generated files: their inodes, open handles and kept responses (leaf locks).
    generated: generated::Generated,
    /// Where the store is mounted, for tool requests that use absolute paths.
    mountpoint: Option<std::path::PathBuf>,
    specs: clawfs_integrity::specs::SpecChecker,
    tool_files: clawfs_integrity::registry::ToolChecker,
    /// Whether the kernel does file I/O itself (passthrough): then every open of an inode
    /// shares one read-write backing descriptor.
    passthrough: std::sync::atomic::AtomicBool,
    /// How long the kernel may cache stored nodes' entries and attributes, in nanoseconds
    /// (`kernel_cache.rs`).
    cache_ttl_ns: std::sync::atomic::AtomicU64,
    /// The shared backing descriptor of each open inode (lock: see `# Locks`).
    shared: SharedByInode<BackingFile>,
    gate: gate::Gate,
    /// How the kernel is told of changes made behind its back.
    invalidations: Option<Invalidations>,
    /// The daemon's monitor of agent activity, once it runs.
    activity: ActivityLink,
    vault: std::sync::OnceLock<clawfs_vault::Vault>,
    /// The workspaces' indexes, when search is on.
    indexer: Option<Arc<clawfs_search::Indexer>>,
    /// Backing descriptors of recently closed files, kept (with their passthrough
    /// registration) so that reopening a file costs no open and no registration. An entry goes
    /// when the kernel forgets the inode, so an unlinked file's space is not held (leaf lock).
    recent: std::sync::Mutex<lru::LruCache<u64, Arc<BackingFile>>>,
    /// The HMAC key the audit trail is signed with now (the vault's, while unlocked; leaf).
    audit_key: std::sync::Mutex<Option<[u8; 32]>>,
    /// User attributes the backing inodes cannot hold.
    spill: Arc<crate::xattr_spill::Spill>,
    /// Recently used `O_PATH` descriptors by backing handle (leaf lock: opened outside it).
    path_fds: std::sync::Mutex<lru::LruCache<Arc<BackingHandle>, Arc<OwnedFd>>>,
    /// Namespace paths of nodes in use, for policy decisions (leaf lock).
    paths: PathCache,
    /// The order of renames and the making of names against the git guard's looks through
    /// moved folders and its checked renames (lock: see `# Locks`).
    git_moves: Arc<git_guard::MoveOrder>,
    /// The published WebAssembly tools' runtime and call slots.
    wasm: generated::WasmTools,
    /// Where requests that run a tool call are served, off the FUSE workers.
    tool_threads: generated::ToolThreads,
    /// The names of folders where lookups keep missing, to answer misses without asking the
    /// store (leaf lock).
    listings: listings::Listings,
    /// How reads on callers' behalf keep access times (`clawfs mount --atime`).
    atime: Atime,
    /// When each workspace's backups were last aged out (leaf lock).
    backup_sweeps: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// The permission bits the mount's root shows: everyone may look in, through the "other" bits.
/// No group bits, so that the kernel never asks for the root's ACL: it cannot keep the answer
/// for the root (whose inode it makes before ACLs are switched on), and would otherwise ask
/// ClawFS, and leave its lock-free path walk, for every path a non-owner walks through the root.
const MOUNT_ROOT_MODE: u16 = 0o705;

/// How many `O_PATH` descriptors are kept open (well under the 20,000 open-file limit).
const PATH_FDS: NonZeroUsize = NonZeroUsize::new(512).unwrap();

/// How many closed files keep their backing descriptor (well under the fd limit).
const RECENT_BACKINGS: NonZeroUsize = NonZeroUsize::new(1024).unwrap();

/// A kernel cache entry to drop because the store changed behind the kernel's back (a tool
/// call wrote the backing files directly).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalidation {
    /// The name `name` in directory `parent`.
    Entry {
        /// Directory inode on the mount.
        parent: u64,
        /// The entry's name.
        name: OsString,
    },
    /// The attributes and cached data of `ino`.
    Inode {
        /// Inode on the mount.
        ino: u64,
    },
    /// The attributes of `ino` only (its cached data stays).
    Attributes {
        /// Inode on the mount.
        ino: u64,
    },
}

/// The daemon's monitor of what agent processes do outside the mount. Before `clawfs run` hands a
/// process to the agent's program, the process (already in its agent group, as the agent) opens
/// `agents/self`, and the open is answered only after [`agent_starting`] returns; when the run's
/// processes have all exited, `clawfs run` asks for [`settle`] (the `trusted.clawfs.settle`
/// xattr of the mount's root), so that the run's refusals are on record when it returns.
///
/// [`agent_starting`]: ActivityMonitor::agent_starting
/// [`settle`]: ActivityMonitor::settle
pub trait ActivityMonitor: Send + Sync {
    /// Thread `tid` of an agent process announced itself (it opened `agents/self`): the monitor
    /// is watching when this returns.
    fn agent_starting(&self, tid: u32);
    /// Waits until what agents did so far (the events the kernel has reported) is on record;
    /// `false` if that took too long.
    fn settle(&self) -> bool;
}

/// What `open` opened.
pub enum Opened {
    /// A backing file; the adapter may register it for passthrough.
    Backing(u64, Arc<OpenFile>),
    /// A generated file: never passthrough, never cached.
    Generated(u64),
}

fn not_found() -> FsError {
    FsError::Io(io::Error::from_raw_os_error(libc::ENOENT))
}

fn errno(code: i32) -> FsError {
    FsError::Io(io::Error::from_raw_os_error(code))
}

fn timespec(t: Option<SetTime>) -> Timespec {
    match t {
        None => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(SetTime::Now) => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(SetTime::At(t)) => {
            let (sec, nsec) = match t.duration_since(SystemTime::UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut sec = -(d.as_secs() as i64);
                    let mut nsec = -(d.subsec_nanos() as i64);
                    if nsec < 0 {
                        sec -= 1;
                        nsec += 1_000_000_000;
                    }
                    (sec, nsec)
                }
            };
            Timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            }
        }
    }
}

impl ClawFs {
    /// Serves `store`, with nothing else attached (no audit, no indexer, no mount): see
    /// [`ClawFs::builder`].
    pub fn new(store: Store) -> Result<Self, crate::error::OpenError> {
        Self::builder(store).build()
    }

    /// A filesystem over `store`, to be given what it serves with.
    pub fn builder(store: Store) -> ClawFsBuilder {
        ClawFsBuilder::new(store)
    }

    fn from_builder(b: ClawFsBuilder) -> Result<Self, crate::error::OpenError> {
        let ClawFsBuilder {
            store,
            atime,
            cache_ttl,
            mountpoint,
            audit,
            indexer,
            invalidations,
            activity,
            tool_slots,
            descriptor_limits,
        } = b;
        let root = BackingHandle::at(store.root_fd(), OsStr::new(""))?;
        let st = rustix::fs::fstat(store.root_fd())?;
        let policy = match clawfs_policy::Policy::load(&store.root().join(POLICY_FILE)) {
            Ok(p) => p,
            Err(clawfs_policy::PolicyLoadError::Io { source, .. })
                if source.kind() == io::ErrorKind::NotFound =>
            {
                tracing::warn!("{POLICY_FILE} is missing; using the default policy");
                clawfs_policy::Policy::default_policy()
            }
            Err(e) => return Err(e.into()),
        };
        if indexer.is_some() {
            // Views left by a daemon that stopped while callers had them open.
            let _ = std::fs::remove_dir_all(store.host_dir().join(generated::VIEWS_DIR));
        }
        let listings = listings::Listings::for_store(&store.private_dir());
        let descriptor_limits = descriptor_limits
            .unwrap_or_else(|| crate::descriptors::DescriptorLimits::for_this_process(None));
        let fs = Self {
            descriptors: crate::descriptors::Descriptors::new(descriptor_limits),
            spill: Arc::new(crate::xattr_spill::Spill::new(&store.private_dir())),
            gate: gate::Gate::new(policy, st.st_uid, audit),
            #[cfg(feature = "fault-injection")]
            faults: Faults::from_env(),
            inodes: InodeTable::new(root, st.st_ino),
            store,
            files: HandleTable::numbered_from(crate::open_files::FILE_HANDLES_FROM),
            dirs: HandleTable::numbered_from(crate::open_files::DIR_HANDLES_FROM),
            generated: generated::Generated::new(),
            specs: Default::default(),
            tool_files: clawfs_integrity::registry::ToolChecker::new(mountpoint.clone()),
            mountpoint,
            passthrough: Default::default(),
            cache_ttl_ns: std::sync::atomic::AtomicU64::new(
                u64::try_from(cache_ttl.as_nanos()).unwrap_or(u64::MAX),
            ),
            shared: Default::default(),
            invalidations,
            activity,
            vault: Default::default(),
            indexer,
            recent: std::sync::Mutex::new(lru::LruCache::new(RECENT_BACKINGS)),
            audit_key: Default::default(),
            path_fds: std::sync::Mutex::new(lru::LruCache::new(PATH_FDS)),
            paths: Default::default(),
            git_moves: Default::default(),
            wasm: generated::WasmTools::with_slots(tool_slots),
            tool_threads: generated::ToolThreads::start(tool_slots.max(1))?,
            listings,
            atime,
            backup_sweeps: Default::default(),
        };
        fs.load_usage();
        fs.load_handles();
        fs.sticky_workspaces();
        fs.sweep_spilled_xattrs();
        Ok(fs)
    }

    /// Makes every workspace root sticky, as new ones are made (a store from before they were):
    /// in a folder several agents write, each moves or removes only its own files, so none can
    /// move another's out of its reach (where its quota still counts them).
    fn sticky_workspaces(&self) {
        let area = std::path::Path::new(clawfs_store::area::Area::Workspaces.dir_name());
        let Ok(dir) = clawfs_store::beneath::open_dir(self.store.root_fd(), area) else {
            return;
        };
        let Ok(entries) = rustix::fs::Dir::read_from(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if name.to_bytes().starts_with(b".") || e.file_type() != rustix::fs::FileType::Directory
            {
                continue;
            }
            let Ok(ws) = clawfs_store::beneath::open_dir_noatime(
                dir.as_fd(),
                OsStr::from_bytes(name.to_bytes()),
            ) else {
                continue;
            };
            if let Ok(st) = rustix::fs::fstat(&ws) {
                if st.st_mode & 0o1000 == 0 {
                    let sticky = Mode::from_raw_mode((st.st_mode & 0o7777) | 0o1000);
                    match rustix::fs::fchmod(&ws, sticky) {
                        Ok(()) => tracing::info!(workspace = ?name, "workspace made sticky"),
                        Err(e) => {
                            tracing::warn!(workspace = ?name, error = %e, "making a workspace sticky")
                        }
                    }
                }
            }
        }
    }

    /// The open flag that keeps a read on a caller's behalf of a file (or a folder: `dir`)
    /// from changing its access time, as the mount's mode asks.
    fn atime_flag(&self, dir: bool) -> i32 {
        match (self.atime, dir) {
            (Atime::NoAtime, _) | (Atime::NoDirAtime, true) => libc::O_NOATIME,
            _ => 0,
        }
    }

    /// Whether the kernel serves reads and writes itself (FUSE passthrough), as negotiated at
    /// session start.
    pub fn set_passthrough(&self, on: bool) {
        self.passthrough
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn passthrough(&self) -> bool {
        self.passthrough.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Hands `batch` to the kernel, if it is told anything, and waits until it is taken.
    pub(crate) fn invalidate(&self, batch: Vec<Invalidation>) {
        if let Some(invalidations) = &self.invalidations {
            invalidations.deliver(batch);
        }
    }

    /// Thread `tid` of an agent announced itself: tells the monitor, if any.
    pub(crate) fn agent_starting(&self, tid: u32) {
        if let Some(m) = self.activity.get() {
            m.agent_starting(tid);
        }
    }

    /// Waits until the monitor has recorded what agents did so far; `true` when there is no
    /// monitor (nothing to wait for).
    pub(crate) fn settle_activity(&self) -> bool {
        self.activity.get().is_none_or(|m| m.settle())
    }

    /// Tells the kernel that the backing entries at `paths` (absolute, inside the store) changed:
    /// their names and their directories' attributes and listings are dropped from its caches.
    pub(crate) fn invalidate_paths(&self, paths: &[std::path::PathBuf]) {
        self.paths_changed(); // a tool may have moved a directory
        if self.invalidations.is_none() {
            return;
        }
        let mut batch = Vec::new();
        for p in paths {
            let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
                continue;
            };
            let Ok(st) = rustix::fs::stat(dir) else {
                continue;
            };
            let parent = self.inodes.mount_ino(st.st_ino);
            batch.push(Invalidation::Entry {
                parent,
                name: name.to_owned(),
            });
            batch.push(Invalidation::Inode { ino: parent });
        }
        if !batch.is_empty() {
            self.invalidate(batch);
        }
    }

    /// Drops the kernel's cached entries of every workspace folder: `clawfs snapshot restore`
    /// swaps a workspace's folder for another behind the daemon's back.
    pub fn workspaces_replaced(&self) {
        let dir = self.store.root().join(Area::Workspaces.dir_name());
        let paths: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
            .map(|it| it.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        self.invalidate_paths(&paths);
    }

    /// The store being served.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Current table sizes.
    pub fn counts(&self) -> Counts {
        Counts {
            inodes: self.inodes.len(),
            open_files: self.files.len(),
            open_dirs: self.dirs.len(),
        }
    }

    fn mount_fd(&self) -> BorrowedFd<'_> {
        self.store.root_fd()
    }

    fn node(&self, ino: u64) -> FsResult<Node> {
        if GeneratedInodes::is_generated(ino) {
            // Generated files have no backing node: nothing but their own calls applies.
            return Err(FsError::Refused {
                errno: libc::EPERM,
                why: "a generated file serves only reads and its own calls",
            });
        }
        self.inodes.get(ino).ok_or(FsError::UnknownInode(ino))
    }

    /// An `O_PATH` descriptor of `node`; the last [`PATH_FDS`] are kept, so the directories a
    /// workload walks are not reopened by handle on every call. An entry goes when the kernel
    /// forgets the inode.
    fn open_path(&self, node: &Node) -> FsResult<Arc<OwnedFd>> {
        let lock = || {
            self.path_fds
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(fd) = lock().get(&node.handle) {
            return Ok(Arc::clone(fd));
        }
        // Opened without the cache's lock: `open_by_handle_at` can take a while (a cold inode),
        // and every request looks up this cache. Two threads may both open it; one is kept.
        let fd = Arc::new(node.handle.open_path(self.mount_fd())?);
        Ok(Arc::clone(
            lock().get_or_insert(Arc::clone(&node.handle), || fd),
        ))
    }

    fn attr_of(&self, fd: impl AsFd) -> FsResult<Attr> {
        let attr = self.stored_attr(fd)?;
        Ok(self.presented(attr, self.inodes.place_of(attr.ino)))
    }

    /// The stored attributes of a node at `place` as the mount shows them.
    fn presented(&self, mut attr: Attr, place: Option<Place>) -> Attr {
        match place {
            // The store root is root's alone (0700); on the mount everyone may look in.
            Some(Place::MountRoot) => attr.perm = MOUNT_ROOT_MODE,
            // Places with a kernel ACL show its mask (see `kernel_acl`).
            Some(Place::AgentRoot) => {
                attr.perm = clawfs_policy::kernel_acl::presented_perm(attr.perm)
            }
            // A workspace root's sticky bit is enforced by the store's filesystem, where the
            // daemon and the tools act as the caller. Shown to the kernel, it would also keep
            // everyone but the root's owner from its `user.clawfs.*` settings.
            Some(Place::WorkspaceRoot) => {
                attr.perm = clawfs_policy::kernel_acl::presented_perm(attr.perm) & !0o1000
            }
            _ => {}
        }
        attr
    }

    /// The stored attributes of `fd`, as stored: what the kernel ACL of the node is made from.
    fn stored_attr(&self, fd: impl AsFd) -> FsResult<Attr> {
        let st = rustix::fs::fstat(fd)?;
        Ok(Attr::from_stat(&st, self.inodes.mount_ino(st.st_ino)))
    }

    /// Looks `name` up in the directory `dir` and records the kernel's new reference.
    fn entry_at(
        &self,
        parent: u64,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        place: Place,
    ) -> FsResult<Entry> {
        let handle = BackingHandle::at(dir, name)?;
        let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let kind = crate::attr::FileKind::from_mode(st.st_mode);
        if place.area().is_checked()
            && !matches!(
                kind,
                crate::attr::FileKind::File | crate::attr::FileKind::Dir
            )
        {
            // system/, specs/ and tools/ hold files and folders only; a symlink or FIFO there
            // was planted in the store and would bypass the checks on their files.
            return Err(FsError::Tampered(
                clawfs_integrity::IntegrityError::Refused(format!(
                    "{} in a checked area is a {kind:?}, not a file or folder: not served",
                    name.to_string_lossy()
                )),
            ));
        }
        let ino = self.inodes.mount_ino(st.st_ino);
        let generation = handle.generation();
        self.inodes
            .remember(ino, handle, place, Some((parent, name)));
        Ok(Entry {
            attr: self.presented(Attr::from_stat(&st, ino), Some(place)),
            generation,
        })
    }

    /// Records the kernel's reference to a node just created through `fd`.
    fn entry_of_fd(
        &self,
        fd: BorrowedFd<'_>,
        place: Place,
        (parent, name): (u64, &OsStr),
    ) -> FsResult<Entry> {
        let handle = BackingHandle::of_fd(fd)?;
        let attr = self.attr_of(fd)?;
        let generation = handle.generation();
        self.inodes
            .remember(attr.ino, handle, place, Some((parent, name)));
        Ok(Entry { attr, generation })
    }

    // ---- rules ----------------------------------------------------------------------------

    /// What create, mknod, mkdir and symlink check before making `name` in `parent`: ClawFS's
    /// naming and area rules, then the policy and the quota for one file of `bytes` (each
    /// refusal audited). Returns what the creator needs to make it ([`Creating`]).
    fn begin_create(
        &self,
        caller: &Caller,
        op: &'static str,
        parent: u64,
        name: &OsStr,
        (kind, bytes): (FileKind, u64),
    ) -> FsResult<Creating<'_>> {
        // Names are made in the git guard's order (`git_guard.rs`), from before the path is
        // computed until the name is made: a `.git` lands before a look through its folder or
        // is decided after the move, and no name is made while a file is checked for its
        // rename onto git's config.
        let turn = self.git_moves.shared();
        // Read before the path is: a rename from here on voids the path cached for the new node.
        let generation = self.paths.generation();
        let pnode = self.node_for(caller, op, parent)?;
        let place = self
            .check_create(&pnode, name, kind)
            .map_err(|e| self.rule_refusal(caller, op, &pnode, Some(name), e))?;
        let dir = self.open_path(&pnode)?;
        let (who, path) = self.decide_create(caller, op, (&pnode, &dir, name), bytes)?;
        if kind != FileKind::Dir
            && matches!(who, Identity::Agent(_))
            && self.policy().is_git_dir_name(&name.to_string_lossy())
        {
            // A gitdir file of the agent's own, in a folder of its own (git submodule, git
            // worktree), is one git trusts for the agent alone; a symlink is never made.
            use clawfs_policy::GitRepos;
            let git = self.repos(caller);
            if kind != FileKind::File || git.foreign_git_above(&path) || !git.owns_folder(&path) {
                let denial = Denial {
                    rule: clawfs_policy::rule::PROTECTED,
                    kind: clawfs_policy::DenyKind::Permission,
                    reason: format!("{path}: a .git that is not a folder (a symlink, or a gitdir file in a folder you do not own) would send git to a repository of its choosing, whose config and hooks the git guard does not see; agents make repositories as .git folders (git init)"),
                };
                self.refuse(caller, op, &path, denial)?;
            }
        }
        Ok(Creating {
            place,
            dir,
            who,
            path,
            generation,
            _turn: turn,
        })
    }

    /// Caches the path of the node `ino` that `made` just created: a new inode has that one
    /// name, and its first open or change then needs no readlink.
    fn created(&self, made: &Creating<'_>, ino: u64) {
        if let Some(node) = self.inodes.get(ino) {
            self.paths.insert(made.generation, &node.handle, &made.path);
        }
    }

    /// May something named `name` of kind `kind` be created in `parent`? Returns its place.
    fn check_create(&self, parent: &Node, name: &OsStr, kind: FileKind) -> FsResult<Place> {
        if crate::generated_files::child_of_place(parent.place, name).is_some()
            || is_private(parent.place, name)
        {
            return Err(FsError::Managed(name.to_string_lossy().into_owned()));
        }
        match parent.place {
            Place::MountRoot => return Err(FsError::FixedRoot),
            p if p.is_read_only() => return Err(read_only(p)),
            Place::AreaRoot(area @ (Area::Workspaces | Area::Agents)) => {
                if kind != FileKind::Dir {
                    return Err(FsError::NotADirectoryArea(area));
                }
                if area == Area::Workspaces {
                    names::check_workspace_name(name)?;
                } else {
                    names::check_system_name(name)?;
                }
            }
            p if p.is_managed_child(name) => {
                return Err(FsError::Managed(name.to_string_lossy().into_owned()))
            }
            _ => {}
        }
        parent.place.child(name).ok_or_else(not_found)
    }

    /// May `name` in `parent` be removed, renamed or replaced?
    fn check_remove(&self, parent: &Node, name: &OsStr) -> FsResult<()> {
        if is_private(parent.place, name) {
            return Err(not_found());
        }
        match parent.place {
            Place::MountRoot => Err(FsError::FixedRoot),
            p if p.is_read_only() => Err(read_only(p)),
            p if p.is_managed_child(name) => {
                Err(FsError::Managed(name.to_string_lossy().into_owned()))
            }
            _ => Ok(()),
        }
    }

    /// May the node itself be changed (setattr, xattrs)?
    fn check_modify(&self, node: &Node) -> FsResult<()> {
        match node.place {
            Place::MountRoot => Err(FsError::FixedRoot),
            p if p.is_read_only() => Err(read_only(p)),
            Place::AreaRoot(Area::Vault) => Err(FsError::Managed("vault/".into())),
            _ => Ok(()),
        }
    }
}

/// ClawFS's private directory inside a workspace (tool trash and backups), hidden from the mount
/// like the store's own private area.
fn is_private(place: Place, name: &OsStr) -> bool {
    place == Place::WorkspaceRoot && name == clawfs_store::layout::PRIVATE_DIR
}

/// The refusal of a change at a read-only `place`.
pub(crate) fn read_only(place: Place) -> FsError {
    match place {
        Place::SnapshotsDir | Place::Snapshot => FsError::SnapshotReadOnly,
        p => FsError::ReadOnly(p.area()),
    }
}

/// A node about to be made, decided and counted ([`ClawFs::begin_create`]).
struct Creating<'a> {
    /// Where it will sit.
    place: Place,
    /// Its folder.
    dir: Arc<OwnedFd>,
    /// Who makes it, for the audit trail and the quota.
    who: Identity,
    /// Its namespace path.
    path: NsPath,
    /// The path cache's generation before `path` was computed.
    generation: u64,
    /// The git guard's turn.
    _turn: git_guard::Turn<'a>,
}
