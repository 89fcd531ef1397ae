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

use crate::area::{Area, Place};
use crate::attr::{decode_dev, Attr, FileKind};
use crate::backing::{proc_fd_path, BackingHandle};
use crate::creds::{AsCaller, Caller};
use crate::error::{FsError, FsResult};
use crate::inodes::{InodeTable, Node, ROOT_INO};
use crate::io_mode::{IoChoice, IoMode, CACHED_MAX_SIZE, FMODE_EXEC};
use crate::names;
use crate::open_files::{
    BackingFile, DirEntry, HandleTable, OpenDir, OpenFile, SharedByInode, WriteHandle,
};
use crate::path_cache::PathCache;
use crate::policy::{Denial, Identity, NsPath};
use crate::seed;
use crate::store::Store;
use crate::virtual_files::{VirtualHandle, VirtualInodes};
use crate::xattrs::{self, ClawfsAttr};

mod gate;
mod git_config;
mod kernel_cache;
mod secrets;
mod staged;
mod virtuals;

pub use gate::{audit_name, POLICY_FILE};
pub use kernel_cache::{PlusEntry, READDIRPLUS_BATCH};
pub use staged::{
    identity_file_agent, validate as validate_identity, StagedTarget, MAX_IDENTITY_BYTES,
};

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
    /// Generated nodes ↔ their inode numbers (leaf lock).
    virtuals: VirtualInodes,
    vfiles: HandleTable<VirtualHandle>,
    /// Where the store is mounted, for tool requests that use absolute paths.
    mountpoint: std::sync::OnceLock<std::path::PathBuf>,
    /// When the daemon started: the times of virtual nodes.
    started: SystemTime,
    /// Answers of the two-file tool interface, per caller, oldest first (leaf lock).
    responses: std::sync::Mutex<ResponsesByOwner>,
    specs: crate::spec_integrity::SpecChecker,
    /// Whether the kernel does file I/O itself (passthrough): then every open of an inode
    /// shares one read-write backing descriptor.
    passthrough: std::sync::atomic::AtomicBool,
    /// How long the kernel may cache stored nodes' entries and attributes, in nanoseconds
    /// (`kernel_cache.rs`).
    cache_ttl_ns: std::sync::atomic::AtomicU64,
    /// The shared backing descriptor of each open inode (lock: see `# Locks`).
    shared: SharedByInode<BackingFile>,
    gate: gate::Gate,
    invalidator: std::sync::OnceLock<Invalidator>,
    vault: std::sync::OnceLock<crate::vault::Vault>,
    /// Backing descriptors of recently closed files, kept (with their passthrough
    /// registration) so that reopening a file costs no open and no registration. An entry goes
    /// when the kernel forgets the inode, so an unlinked file's space is not held (leaf lock).
    recent: std::sync::Mutex<lru::LruCache<u64, Arc<BackingFile>>>,
    /// The HMAC key the audit trail is signed with now (the vault's, while unlocked; leaf).
    audit_key: std::sync::Mutex<Option<[u8; 32]>>,
    /// Recently used `O_PATH` descriptors by backing handle (leaf lock: opened outside it).
    path_fds: std::sync::Mutex<lru::LruCache<Arc<BackingHandle>, Arc<OwnedFd>>>,
    /// Namespace paths of nodes in use, for policy decisions (leaf lock).
    paths: PathCache,
}

/// The permission bits the mount's root shows.
const MOUNT_ROOT_MODE: u16 = 0o755;

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
}

/// Delivers invalidations to the kernel and returns once they are done (or given up on).
pub type Invalidator = Box<dyn Fn(Vec<Invalidation>) + Send + Sync>;

/// Kept tool responses: owner → (id, response), oldest first.
type ResponsesByOwner =
    std::collections::HashMap<String, std::collections::VecDeque<(String, Vec<u8>)>>;

/// What `open` opened.
pub enum Opened {
    /// A backing file; the adapter may register it for passthrough.
    Backing(u64, Arc<OpenFile>),
    /// A generated file: never passthrough, never cached.
    Virtual(u64),
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
    /// Serves `store`.
    pub fn new(store: Store) -> io::Result<Self> {
        let root = BackingHandle::at(store.root_fd(), OsStr::new(""))?;
        let st = rustix::fs::fstat(store.root_fd())?;
        let policy = match crate::policy::Policy::load(&store.root().join(POLICY_FILE)) {
            Ok(p) => p,
            Err(crate::policy::PolicyLoadError::Io { source, .. })
                if source.kind() == io::ErrorKind::NotFound =>
            {
                tracing::warn!("{POLICY_FILE} is missing; using the default policy");
                crate::policy::Policy::default_policy()
            }
            Err(e) => return Err(io::Error::other(e.to_string())),
        };
        let fs = Self {
            gate: gate::Gate::new(policy, st.st_uid),
            #[cfg(feature = "fault-injection")]
            faults: Faults::from_env(),
            inodes: InodeTable::new(root, st.st_ino),
            store,
            files: HandleTable::default(),
            dirs: HandleTable::default(),
            virtuals: VirtualInodes::default(),
            vfiles: HandleTable::default(),
            mountpoint: Default::default(),
            started: SystemTime::now(),
            responses: Default::default(),
            specs: Default::default(),
            passthrough: Default::default(),
            cache_ttl_ns: std::sync::atomic::AtomicU64::new(1_000_000_000),
            shared: Default::default(),
            invalidator: Default::default(),
            vault: Default::default(),
            recent: std::sync::Mutex::new(lru::LruCache::new(RECENT_BACKINGS)),
            audit_key: Default::default(),
            path_fds: std::sync::Mutex::new(lru::LruCache::new(PATH_FDS)),
            paths: Default::default(),
        };
        fs.load_usage();
        Ok(fs)
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

    /// Sets how the kernel is told about changes made behind its back.
    pub fn set_invalidator(&self, invalidator: Invalidator) {
        let _ = self.invalidator.set(invalidator);
    }

    /// Tells the kernel that the backing entries at `paths` (absolute, inside the store) changed:
    /// their names and their directories' attributes and listings are dropped from its caches.
    pub(crate) fn invalidate_paths(&self, paths: &[std::path::PathBuf]) {
        self.paths_changed(); // a tool may have moved a directory
        let Some(invalidate) = self.invalidator.get() else {
            return;
        };
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
            invalidate(batch);
        }
    }

    /// Records where the store is mounted (tool requests may use absolute paths under it).
    pub fn set_mountpoint(&self, mountpoint: std::path::PathBuf) {
        let _ = self.mountpoint.set(mountpoint);
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
        if VirtualInodes::is_virtual(ino) {
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
        let st = rustix::fs::fstat(fd)?;
        let mut attr = Attr::from_stat(&st, self.inodes.mount_ino(st.st_ino));
        if attr.ino == ROOT_INO {
            // The store root is root's alone (0700); on the mount everyone may look in.
            attr.perm = MOUNT_ROOT_MODE;
        }
        Ok(attr)
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
        let ino = self.inodes.mount_ino(st.st_ino);
        let generation = handle.generation();
        self.inodes
            .remember(ino, handle, place, Some((parent, name)));
        Ok(Entry {
            attr: Attr::from_stat(&st, ino),
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
    /// naming and area rules, then the policy (each refusal audited). Returns the new entry's
    /// place, the parent's descriptor and who is creating what, for the audit trail.
    fn begin_create(
        &self,
        caller: &Caller,
        op: &'static str,
        parent: u64,
        name: &OsStr,
        kind: FileKind,
    ) -> FsResult<(Place, Arc<OwnedFd>, Identity, NsPath)> {
        let pnode = self.node(parent)?;
        let place = self
            .check_create(&pnode, name, kind)
            .map_err(|e| self.rule_refusal(caller, op, &pnode, Some(name), e))?;
        let dir = self.open_path(&pnode)?;
        let (who, path) = self.decide_create(caller, op, &pnode, &dir, name)?;
        if kind != FileKind::Dir
            && matches!(who, Identity::Agent(_))
            && self.policy().is_git_dir_name(&name.to_string_lossy())
        {
            let denial = Denial {
                rule: crate::policy::rule::PROTECTED,
                kind: crate::policy::DenyKind::Permission,
                reason: format!("{path}: a .git that is not a folder (a gitdir file, a symlink) would send git to a repository of its choosing, whose config and hooks the git guard does not see; agents make repositories as .git folders (git init)"),
            };
            self.refuse(caller, op, &path, denial)?;
        }
        Ok((place, dir, who, path))
    }

    /// May something named `name` of kind `kind` be created in `parent`? Returns its place.
    fn check_create(&self, parent: &Node, name: &OsStr, kind: FileKind) -> FsResult<Place> {
        if crate::virtual_files::child_of_place(parent.place, name).is_some()
            || is_private(parent.place, name)
        {
            return Err(FsError::Managed(name.to_string_lossy().into_owned()));
        }
        match parent.place {
            Place::MountRoot => return Err(FsError::FixedRoot),
            p if p.area().is_read_only() => return Err(FsError::ReadOnly(p.area())),
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
            Place::SnapshotsDir => {
                names::check_snapshot_name(name)?;
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
            p if p.area().is_read_only() => Err(FsError::ReadOnly(p.area())),
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
            p if p.area().is_read_only() => Err(FsError::ReadOnly(p.area())),
            Place::AreaRoot(Area::Vault) => Err(FsError::Managed("vault/".into())),
            _ => Ok(()),
        }
    }

    // ---- lookup and attributes ------------------------------------------------------------

    /// Looks up `name` in `parent`.
    pub fn lookup(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<Entry> {
        #[cfg(feature = "fault-injection")]
        if let Some((slow, delay)) = &self.faults.slow_lookup {
            if slow == name {
                std::thread::sleep(*delay);
            }
        }
        if let Some(entry) = self.lookup_virtual(caller, parent, name)? {
            return Ok(entry);
        }
        let pnode = self.node(parent)?;
        if is_private(pnode.place, name) {
            return Err(not_found());
        }
        let place = pnode.place.child(name).ok_or_else(not_found)?;
        let dir = self.open_path(&pnode)?;
        self.entry_at(parent, dir.as_fd(), name, place)
    }

    /// Drops `n` kernel references to `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        let node = self.inodes.get(ino);
        if self.inodes.forget(ino, n) {
            if let Some(node) = node {
                self.path_fds
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .pop(&node.handle);
            }
            self.recent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop(&ino);
        }
    }

    /// Attributes of `ino`, through the open file `fh` when given (works after unlink).
    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> FsResult<Attr> {
        if VirtualInodes::is_virtual(ino) {
            return self.virtual_attr(ino);
        }
        if let Some(file) = fh.and_then(|fh| self.files.get(fh).ok()) {
            return self.attr_of(&file.backing.file);
        }
        // An open (or recently closed) file's descriptor saves opening the inode again.
        if let Some(backing) = self.shared.get(ino) {
            return self.attr_of(&backing.file);
        }
        let node = self.node(ino)?;
        let fd = self.open_path(&node)?;
        self.attr_of(&fd)
    }

    /// Changes attributes of `ino` as `caller`.
    pub fn setattr(
        &self,
        caller: &Caller,
        ino: u64,
        fh: Option<u64>,
        change: SetAttr,
    ) -> FsResult<Attr> {
        if VirtualInodes::is_virtual(ino) {
            return self.virtual_setattr(ino, fh, change);
        }
        let node = self.node(ino)?;
        self.check_modify(&node)
            .map_err(|e| self.rule_refusal(caller, "setattr", &node, None, e))?;
        let fd = self.open_path(&node)?;
        let ns = self.ns_path(&fd)?;
        let who = self.decide(caller, "setattr", crate::policy::Access::Write, &ns)?;
        if change.size.is_some() && fh.is_none() && staged::identity_file_agent(&ns).is_some() {
            // Identity files change whole, validated at close: open and write them.
            return Err(FsError::Managed("identity.json (write it whole)".into()));
        }
        if let Some(size) = change.size.filter(|_| self.metered(&who)) {
            // Extending a file reserves its new bytes: they are charged now, so that writing
            // inside the new size later is not free.
            let growth = size.saturating_sub(rustix::fs::fstat(&*fd)?.st_size as u64);
            let adding = crate::policy::Quota {
                bytes: growth,
                files: 0,
            };
            self.decide_quota(caller, &who, "setattr", &ns, adding, true)?;
        }
        let path = proc_fd_path(&fd);
        let open = fh.and_then(|fh| self.files.get(fh).ok());
        {
            let _as = AsCaller::enter(caller)?;
            // Owner before mode: chown clears setuid/setgid, which must not undo a chmod.
            if change.uid.is_some() || change.gid.is_some() {
                rustix::fs::chownat(
                    &fd,
                    "",
                    change.uid.map(rustix::fs::Uid::from_raw),
                    change.gid.map(rustix::fs::Gid::from_raw),
                    AtFlags::EMPTY_PATH,
                )?;
            }
            if let Some(mode) = change.mode {
                rustix::fs::chmod(path.as_c_str(), Mode::from_raw_mode(mode))?;
            }
            if let Some(size) = change.size {
                match &open {
                    Some(f) => f.backing.file.set_len(size)?,
                    None => {
                        // SAFETY: `path` is a valid NUL-terminated string.
                        if unsafe { libc::truncate(path.as_ptr(), size as libc::off_t) } != 0 {
                            return Err(FsError::last_os_error());
                        }
                    }
                }
            }
            if change.atime.is_some() || change.mtime.is_some() {
                let times = Timestamps {
                    last_access: timespec(change.atime),
                    last_modification: timespec(change.mtime),
                };
                rustix::fs::utimensat(rustix::fs::CWD, path.as_c_str(), &times, AtFlags::empty())?;
            }
        }
        self.attr_of(&fd)
    }

    /// The target of a symlink.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let node = self.node(ino)?;
        let fd = self.open_path(&node)?;
        Ok(rustix::fs::readlinkat(&fd, "", Vec::new())?.into_bytes())
    }

    /// Refuses a document of `specs/` that does not match its signature.
    fn check_spec(&self, fd: impl AsFd) -> FsResult<()> {
        let real = std::fs::read_link(OsStr::from_bytes(proc_fd_path(&fd.as_fd()).as_bytes()))?;
        let specs = self.store.root().join(Area::Specs.dir_name());
        let Ok(rel) = real.strip_prefix(&specs) else {
            return Ok(());
        };
        let rel = rel.to_string_lossy();
        self.specs.check(&specs, &rel).map_err(FsError::Tampered)
    }

    // ---- creating and removing ------------------------------------------------------------

    /// Creates a special or regular file node.
    pub fn mknod(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> FsResult<Entry> {
        let (place, dir, ..) =
            self.begin_create(caller, "mknod", parent, name, FileKind::from_mode(mode))?;
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::mknodat(
                &dir,
                name,
                rustix::fs::FileType::from_raw_mode(mode),
                Mode::from_raw_mode(mode & 0o7777),
                decode_dev(rdev),
            )?;
        }
        self.entry_at(parent, dir.as_fd(), name, place)
    }

    /// Creates a directory; in `workspaces/` that is a new workspace with its metadata.
    pub fn mkdir(&self, caller: &Caller, parent: u64, name: &OsStr, mode: u32) -> FsResult<Entry> {
        let (place, dir, ..) = self.begin_create(caller, "mkdir", parent, name, FileKind::Dir)?;
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode & 0o7777))?;
            if place == Place::WorkspaceRoot {
                self.lay_out_workspace(caller, dir.as_fd(), name, mode)?;
            }
        }
        self.entry_at(parent, dir.as_fd(), name, place)
    }

    /// Gives a new workspace directory its `metadata.json` and `snapshots/`. Runs as the
    /// creator, so both belong to them.
    fn lay_out_workspace(
        &self,
        caller: &Caller,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
    ) -> FsResult<()> {
        let ws = crate::beneath::open_dir(parent, std::path::Path::new(name))?;
        rustix::fs::mkdirat(&ws, "snapshots", Mode::from_raw_mode(mode & 0o7777))?;
        let owner = seed::user_name(caller.uid);
        let meta = seed::workspace_metadata(&name.to_string_lossy(), &owner, &seed::now_rfc3339());
        crate::beneath::write_atomic(
            ws.as_fd(),
            "metadata.json",
            &meta,
            crate::beneath::FileMode::mode(mode & 0o666),
        )?;
        Ok(())
    }

    /// Removes a non-directory.
    pub fn unlink(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        self.remove(caller, parent, name, AtFlags::empty())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        self.remove(caller, parent, name, AtFlags::REMOVEDIR)
    }

    fn remove(&self, caller: &Caller, parent: u64, name: &OsStr, flags: AtFlags) -> FsResult<()> {
        if VirtualInodes::is_virtual(parent) {
            return self.remove_virtual(caller, parent, name);
        }
        let pnode = self.node(parent)?;
        let op = if flags.contains(AtFlags::REMOVEDIR) {
            "rmdir"
        } else {
            "unlink"
        };
        self.check_remove(&pnode, name)
            .map_err(|e| self.rule_refusal(caller, op, &pnode, Some(name), e))?;
        let dir = self.open_path(&pnode)?;
        self.decide(
            caller,
            op,
            crate::policy::Access::Delete,
            &self.ns_child(&dir, name)?,
        )?;
        let victim = rustix::fs::statat(&*dir, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::unlinkat(&dir, name, flags)?;
        }
        if let Some(st) = victim.filter(|st| st.st_nlink <= 1) {
            self.release_space(self.inodes.mount_ino(st.st_ino));
        }
        Ok(())
    }

    /// A file's last name is gone: its kept descriptor goes too, so its space is freed now
    /// (as on a native filesystem), not when the kernel forgets the inode.
    fn release_space(&self, ino: u64) {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop(&ino);
    }

    /// Creates a symbolic link `name` → `target`.
    pub fn symlink(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        target: &OsStr,
    ) -> FsResult<Entry> {
        let (place, dir, who, path) =
            self.begin_create(caller, "symlink", parent, name, FileKind::Symlink)?;
        if matches!(who, Identity::Agent(_)) && self.policy().is_git_hooks(&path) {
            let denial = Denial {
                rule: crate::policy::rule::PROTECTED,
                kind: crate::policy::DenyKind::ReadOnly,
                reason: format!("{path} would make git's hooks folder a symlink, pointing git's hooks anywhere; agents may create it only as a folder (git init does)"),
            };
            self.refuse(caller, "symlink", &path, denial)?;
        }
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::symlinkat(target, &dir, name)?;
        }
        self.entry_at(parent, dir.as_fd(), name, place)
    }

    /// Creates a hard link to `ino` as `newparent/newname`.
    pub fn link(
        &self,
        caller: &Caller,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> FsResult<Entry> {
        let node = self.node(ino)?;
        let pnode = self.node(newparent)?;
        let (from, to) = (node.place.area(), pnode.place.area());
        if from != to {
            let e = FsError::CrossArea { from, to };
            return Err(self.rule_refusal(caller, "link", &pnode, Some(newname), e));
        }
        let place = self
            .check_create(&pnode, newname, FileKind::File)
            .map_err(|e| self.rule_refusal(caller, "link", &pnode, Some(newname), e))?;
        let src = self.open_path(&node)?;
        let dir = self.open_path(&pnode)?;
        let (from, to) = (self.ns_path(&src)?, self.ns_child(&dir, newname)?);
        if staged::identity_file_agent(&from).is_some() {
            // A second name would let writes through it skip the staged, validated commit.
            let e = FsError::Managed("identity.json (it has one name)".into());
            return Err(self.rule_refusal(caller, "link", &node, None, e));
        }
        self.decide_move(caller, "link", &from, &to, false)?;
        {
            let _as = AsCaller::enter(caller)?;
            // linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the /proc magic link does not.
            rustix::fs::linkat(
                rustix::fs::CWD,
                proc_fd_path(&src).as_c_str(),
                &dir,
                newname,
                AtFlags::SYMLINK_FOLLOW,
            )?;
        }
        self.entry_at(newparent, dir.as_fd(), newname, place)
    }

    /// Renames `parent/name` to `newparent/newname`.
    pub fn rename(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        mode: RenameMode,
    ) -> FsResult<()> {
        let pnode = self.node(parent)?;
        let npnode = self.node(newparent)?;
        self.check_remove(&pnode, name)
            .map_err(|e| self.rule_refusal(caller, "rename", &pnode, Some(name), e))?;
        self.check_remove(&npnode, newname)
            .map_err(|e| self.rule_refusal(caller, "rename", &npnode, Some(newname), e))?;
        let (from, to) = (pnode.place.area(), npnode.place.area());
        if from != to {
            let e = FsError::CrossArea { from, to };
            return Err(self.rule_refusal(caller, "rename", &pnode, Some(name), e));
        }
        for (p, n) in [(&pnode, name), (&npnode, newname)] {
            if let Place::AreaRoot(area) = p.place {
                // Workspace and agent directories are named once, at creation.
                return Err(FsError::Managed(format!("{area}{}", n.to_string_lossy())));
            }
        }
        if npnode.place == Place::SnapshotsDir {
            names::check_snapshot_name(newname)?;
        }
        if mode.exchange && pnode.place == Place::SnapshotsDir {
            names::check_snapshot_name(name)?;
        }
        let flags = match (mode.noreplace, mode.exchange) {
            (_, true) => RenameFlags::EXCHANGE,
            (true, false) => RenameFlags::NOREPLACE,
            (false, false) => RenameFlags::empty(),
        };
        let dir = self.open_path(&pnode)?;
        let newdir = self.open_path(&npnode)?;
        let (from, to) = (self.ns_child(&dir, name)?, self.ns_child(&newdir, newname)?);
        let who = self.decide_move(caller, "rename", &from, &to, mode.exchange)?;
        let sealed = match matches!(who, Identity::Agent(_)) {
            true => self.check_git_config_rename(
                caller,
                (&*dir, name),
                (&*newdir, newname),
                (&from, &to),
                mode,
            )?,
            false => None,
        };
        let replaced = match mode.exchange {
            true => None,
            false => rustix::fs::statat(&*newdir, newname, AtFlags::SYMLINK_NOFOLLOW).ok(),
        };
        let renamed: FsResult<()> =
            AsCaller::enter(caller)
                .map_err(FsError::from)
                .and_then(|_as| {
                    Ok(rustix::fs::renameat_with(
                        &dir, name, &newdir, newname, flags,
                    )?)
                });
        if let (Err(_), Some(node)) = (&renamed, &sealed) {
            node.io.unseal();
        }
        renamed?;
        self.paths_changed();
        if let Some(st) = replaced.filter(|st| st.st_nlink <= 1) {
            self.release_space(self.inodes.mount_ino(st.st_ino));
        }
        Ok(())
    }

    // ---- files ----------------------------------------------------------------------------

    /// Opens `ino` with `flags` (the caller's open flags).
    pub fn open(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
        if VirtualInodes::is_virtual(ino) {
            return self.open_virtual(caller, ino, flags).map(Opened::Virtual);
        }
        let node = self.node(ino)?;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if flags & libc::O_ACCMODE == libc::O_RDONLY
            && flags & libc::O_TRUNC != 0
            && node.io.is_executing()
        {
            // The kernel checks ETXTBSY for a read-only O_TRUNC open only after the daemon has
            // opened (and, with atomic O_TRUNC, truncated) the file: refuse before truncating
            // a running program. Write opens are refused by the kernel before they get here.
            return Err(errno(libc::ETXTBSY));
        }
        if writes && node.place.area().is_read_only() {
            let e = FsError::ReadOnly(node.place.area());
            return Err(self.rule_refusal(caller, "open", &node, None, e));
        }
        // With passthrough the inode's shared descriptor (open already, or opened now) also
        // names it; the O_PATH descriptor is needed only without.
        let shared =
            if self.passthrough() {
                Some(self.shared.get_or_try_insert(ino, || {
                    self.passthrough_file(&node).map(BackingFile::new)
                })?)
            } else {
                None
            };
        let mut opath = None;
        let path = match &shared {
            Some(b) => self.node_path(&node, &b.file)?,
            None => self.node_path(&node, opath.insert(self.open_path(&node)?))?,
        };
        let access = if writes {
            crate::policy::Access::Write
        } else {
            crate::policy::Access::Read
        };
        let who = self.decide(caller, "open", access, &path)?;
        if writes {
            self.decide_quota(
                caller,
                &who,
                "open",
                &path,
                crate::policy::Quota { bytes: 1, files: 0 },
                false,
            )?;
            if let Some(agent) = staged::identity_file_agent(&path) {
                let opath = match opath {
                    Some(fd) => fd,
                    None => self.open_path(&node)?,
                };
                let (fh, file) =
                    self.open_staged(ino, &opath, agent, flags & libc::O_TRUNC != 0)?;
                return Ok(Opened::Backing(fh, file));
            }
        }
        let backing = if let Some(shared) = shared {
            shared
        } else {
            // O_DIRECT is the kernel's business on the mount side; the daemon's own buffers
            // are not aligned for it.
            let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_DIRECT);
            let fd = node.handle.open(self.mount_fd(), flags)?;
            Arc::new(BackingFile::new(File::from(fd)))
        };
        if node.place.area() == Area::Specs {
            self.check_spec(&backing.file)?;
        }
        if self.passthrough() && flags & libc::O_TRUNC != 0 {
            // The kernel passes O_TRUNC with the open (atomic O_TRUNC); the shared descriptor
            // was not opened with it.
            backing.file.set_len(0)?;
        }
        if flags & libc::O_TRUNC != 0 && caller.uid != 0 {
            // Truncated by the daemon (root): clear what a truncation by the caller clears.
            drop_suidgid(&backing.file)?;
        }
        let writer = match writes {
            true => Some(WriteHandle {
                metered: self.metered(&who),
                who,
                pid: caller.pid,
                path,
                size_at_open: backing.file.metadata()?.len(),
            }),
            false => None,
        };
        let prefer_cached = self.passthrough()
            && !writes
            && flags & libc::O_DIRECT == 0
            && backing.file.metadata()?.len() <= CACHED_MAX_SIZE;
        // Writes that the daemon must see: charged to a byte quota, or clearing setuid/setgid
        // bits (a passthrough write runs with the daemon's rights and would keep them).
        let through_daemon = writer.as_ref().is_some_and(|w| w.metered)
            || (writes && caller.uid != 0 && has_suidgid(&backing.file)?);
        let io = match through_daemon {
            true => self.count_daemon_open(&node)?,
            false => self.count_open(&node, prefer_cached, writes),
        };
        let writing = match &writer {
            None => None,
            Some(w) => {
                if !node.io.write_open(matches!(w.who, Identity::Agent(_))) {
                    if let Some((choice, mode)) = &io {
                        mode.close(*choice);
                    }
                    let denial = Denial {
                        rule: crate::policy::rule::PROTECTED,
                        kind: crate::policy::DenyKind::ReadOnly,
                        reason: format!("{} is being renamed onto git's config, whose settings were checked; it may not be opened for writing now", w.path),
                    };
                    self.refuse(caller, "open", &w.path, denial)?;
                }
                Some(Arc::clone(&node.io))
            }
        };
        let exec = (flags & FMODE_EXEC != 0).then(|| {
            node.io.exec_open();
            Arc::clone(&node.io)
        });
        let (fh, file) = self.files.insert(OpenFile {
            ino,
            backing,
            writer,
            staged: None,
            io,
            exec,
            writing,
        });
        Ok(Opened::Backing(fh, file))
    }

    /// How a new open of `node` is served, counted in the node's I/O mode; `None` without
    /// passthrough, where every open is served through the daemon.
    fn count_open(
        &self,
        node: &Node,
        prefer_cached: bool,
        writes: bool,
    ) -> Option<(IoChoice, Arc<IoMode>)> {
        self.passthrough()
            .then(|| (node.io.open(prefer_cached, writes), Arc::clone(&node.io)))
    }

    /// How an open whose writes the daemon must see is served: through the daemon (never
    /// passthrough). Refused (EBUSY) while the file is open for passthrough elsewhere: the
    /// kernel cannot serve one inode both ways.
    fn count_daemon_open(&self, node: &Node) -> FsResult<Option<(IoChoice, Arc<IoMode>)>> {
        if !self.passthrough() {
            return Ok(None);
        }
        let choice = node.io.open_cached().ok_or(FsError::Refused {
            errno: libc::EBUSY,
            why: "the file is open for passthrough elsewhere, and this open must go through the daemon (the kernel cannot serve one inode both ways)",
        })?;
        Ok(Some((choice, Arc::clone(&node.io))))
    }

    /// A read-write descriptor of `ino` for kernel passthrough, shared by every open of the
    /// inode. It carries no `O_APPEND`/`O_DIRECT`: the kernel applies each opener's own flags
    /// per request. Read-only areas, and files that cannot be opened for writing, get a
    /// read-only one.
    fn passthrough_file(&self, node: &Node) -> FsResult<File> {
        let rw = if node.place.area().is_read_only() {
            Err(errno(libc::EROFS))
        } else {
            node.handle
                .open(self.mount_fd(), libc::O_RDWR)
                .map_err(FsError::from)
        };
        let fd = match rw {
            Ok(fd) => fd,
            Err(_) => node.handle.open(self.mount_fd(), libc::O_RDONLY)?,
        };
        Ok(File::from(fd))
    }

    /// Creates and opens a regular file.
    pub fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> FsResult<(Entry, Opened)> {
        if VirtualInodes::is_virtual(parent) {
            return self.create_virtual(caller, parent, name);
        }
        let (place, dir, who, path) =
            self.begin_create(caller, "create", parent, name, FileKind::File)?;
        let fd = {
            let _as = AsCaller::enter(caller)?;
            let flags = (flags & !libc::O_NOCTTY) | libc::O_CREAT | libc::O_CLOEXEC;
            // With passthrough the descriptor is the inode's shared backing file: read-write,
            // without the opener's append/direct flags (the kernel applies those per request).
            let shared =
                (flags & !(libc::O_ACCMODE | libc::O_APPEND | libc::O_DIRECT)) | libc::O_RDWR;
            let open = |flags: i32| {
                rustix::fs::openat(
                    &dir,
                    name,
                    rustix::fs::OFlags::from_bits_retain(flags as u32),
                    Mode::from_raw_mode(mode & 0o7777),
                )
            };
            match self.passthrough() {
                // An existing file (a racing creator) may not be writable by the caller.
                true => open(shared).or_else(|_| open(flags))?,
                false => open(flags & !libc::O_DIRECT)?,
            }
        };
        let entry = self.entry_of_fd(fd.as_fd(), place, (parent, name))?;
        let ino = entry.attr.ino;
        let backing = match self.passthrough() {
            true => self.shared.get_or_try_insert(ino, || {
                let rw = rustix::fs::fcntl_getfl(&fd)?.contains(rustix::fs::OFlags::RDWR);
                match rw {
                    true => Ok::<_, FsError>(BackingFile::new(File::from(fd))),
                    false => Ok(BackingFile::new(self.passthrough_file(&self.node(ino)?)?)),
                }
            })?,
            false => Arc::new(BackingFile::new(File::from(fd))),
        };
        let writer = WriteHandle {
            metered: self.metered(&who),
            who,
            pid: caller.pid,
            path,
            size_at_open: 0,
        };
        let node = self.node(ino)?;
        let io = match writer.metered {
            true => self.count_daemon_open(&node)?,
            false => self.count_open(&node, false, true),
        };
        let writer = Some(writer);
        // A new inode: never sealed.
        node.io.write_open(false);
        let (fh, file) = self.files.insert(OpenFile {
            ino,
            backing,
            writer,
            staged: None,
            io,
            exec: None,
            writing: Some(Arc::clone(&node.io)),
        });
        Ok((entry, Opened::Backing(fh, file)))
    }

    /// The open file `fh`.
    pub fn file(&self, fh: u64) -> FsResult<Arc<OpenFile>> {
        self.files.get(fh)
    }

    /// Reads up to `size` bytes at `offset` (fewer only at end of file).
    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        if VirtualInodes::is_virtual(ino) {
            self.estop_tool_call(fh);
            return self.read_virtual(fh, offset, size);
        }
        let file = self.files.get(fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file
                .backing
                .file
                .read_at(&mut buf[done..], offset + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// Writes `data` at `offset` (appends when the file was opened `O_APPEND`).
    /// `kill_suidgid`: the kernel says the writer lacks `CAP_FSETID`, so a setuid/setgid file
    /// loses those bits (the daemon's own write, as root, would keep them).
    pub fn write(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
    ) -> FsResult<u32> {
        if VirtualInodes::is_virtual(ino) {
            return self.write_virtual(fh, offset, data);
        }
        let file = self.files.get(fh)?;
        if let Some(w) = file.writer.as_ref().filter(|w| w.metered) {
            let end = offset.saturating_add(data.len() as u64);
            self.charge_growth(w, "write", end, &file)?;
        }
        if kill_suidgid {
            drop_suidgid(&file.backing.file)?;
        }
        let n = file.backing.file.write_at(data, offset)?;
        if let Some(staged) = &file.staged {
            staged
                .dirty
                .store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(n as u32)
    }

    /// Flushes buffered state of `fh` to the store.
    pub fn fsync(&self, ino: u64, fh: u64, datasync: bool) -> FsResult<()> {
        if VirtualInodes::is_virtual(ino) {
            return Ok(());
        }
        let file = self.files.get(fh)?;
        if datasync {
            file.backing.file.sync_data()?;
        } else {
            file.backing.file.sync_all()?;
        }
        Ok(())
    }

    /// A `close()` of a descriptor of `ino` (FLUSH): runs a two-file tool request, or
    /// validates and commits a staged identity file (its error is `close()`'s).
    pub fn flush(&self, caller: &Caller, ino: u64, fh: u64) -> FsResult<()> {
        if VirtualInodes::is_virtual(ino) {
            self.estop_tool_call(fh);
            return self.flush_virtual(fh);
        }
        let file = self.files.get(fh)?;
        self.commit_staged(caller, &file)
    }

    /// Closes `fh`.
    pub fn release(&self, ino: u64, fh: u64) -> FsResult<()> {
        if VirtualInodes::is_virtual(ino) {
            self.estop_tool_call(fh);
            return self.release_virtual(fh);
        }
        let file = self.files.remove(fh).ok_or(FsError::UnknownHandle(fh))?;
        if let Some((choice, mode)) = &file.io {
            mode.close(*choice);
        }
        if let Some(mode) = &file.exec {
            mode.exec_close();
        }
        if let Some(mode) = &file.writing {
            mode.write_close();
        }
        if let Some(w) = &file.writer {
            let now = file.backing.file.metadata()?.len();
            let bytes = now.saturating_sub(w.size_at_open);
            self.record(
                crate::audit::AuditEvent::new(
                    audit_name(&w.who),
                    w.pid,
                    "close",
                    w.path.to_string(),
                )
                .bytes(bytes),
            );
            match &w.who {
                // A metered handle was charged write by write.
                Identity::Agent(agent) if !w.metered => {
                    self.add_usage(agent, crate::policy::Quota { bytes, files: 0 })
                }
                _ => {}
            }
        }
        if self.passthrough() && file.staged.is_none() {
            let mut recent = self
                .recent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            recent.put(file.ino, Arc::clone(&file.backing));
        }
        Ok(())
    }

    /// Allocates or punches space in `fh`.
    pub fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> FsResult<()> {
        let file = self.files.get(fh)?;
        if let Some(w) = file.writer.as_ref().filter(|w| w.metered) {
            if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                // Frees space.
            } else if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
                // Space past the size, which a later write would otherwise fill for free.
                self.charge(w, "fallocate", len)?;
            } else {
                self.charge_growth(w, "fallocate", offset.saturating_add(len), &file)?;
            }
        }
        rustix::fs::fallocate(
            &file.backing.file,
            rustix::fs::FallocateFlags::from_bits_retain(mode as u32),
            offset,
            len,
        )?;
        Ok(())
    }

    /// Finds data or holes (`SEEK_DATA`/`SEEK_HOLE`), or computes a plain seek.
    pub fn lseek(&self, fh: u64, offset: i64, whence: i32) -> FsResult<i64> {
        let file = self.files.get(fh)?;
        let off = u64::try_from(offset).map_err(|_| errno(libc::EINVAL));
        let pos = match whence {
            libc::SEEK_SET => rustix::fs::SeekFrom::Start(off?),
            libc::SEEK_END => rustix::fs::SeekFrom::End(offset),
            libc::SEEK_DATA => rustix::fs::SeekFrom::Data(off?),
            libc::SEEK_HOLE => rustix::fs::SeekFrom::Hole(off?),
            _ => return Err(errno(libc::EINVAL)),
        };
        Ok(rustix::fs::seek(&file.backing.file, pos)? as i64)
    }

    /// Copies a range between two open files inside the store.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range(
        &self,
        fh_in: u64,
        offset_in: u64,
        fh_out: u64,
        offset_out: u64,
        len: u64,
    ) -> FsResult<u32> {
        let (src, dst) = (self.files.get(fh_in)?, self.files.get(fh_out)?);
        if let Some(w) = dst.writer.as_ref().filter(|w| w.metered) {
            self.charge_growth(w, "copy_file_range", offset_out.saturating_add(len), &dst)?;
        }
        let (mut oi, mut oo) = (offset_in, offset_out);
        let n = rustix::fs::copy_file_range(
            &src.backing.file,
            Some(&mut oi),
            &dst.backing.file,
            Some(&mut oo),
            len.min(u32::MAX as u64) as usize,
        )?;
        Ok(n as u32)
    }

    // ---- directories ----------------------------------------------------------------------

    /// Opens the directory `ino`.
    pub fn opendir(&self, caller: &Caller, ino: u64) -> FsResult<u64> {
        if VirtualInodes::is_virtual(ino) {
            if !self.virtual_node(ino)?.is_dir() {
                return Err(errno(libc::ENOTDIR));
            }
        } else {
            let node = self.node(ino)?;
            // Opening now reports a vanished or unreadable directory at opendir, not later.
            let fd = node
                .handle
                .open(self.mount_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?;
            self.decide(
                caller,
                "opendir",
                crate::policy::Access::List,
                &self.node_path(&node, &fd)?,
            )?;
        }
        Ok(self
            .dirs
            .insert(OpenDir {
                ino,
                caller: *caller,
                entries: Default::default(),
            })
            .0)
    }

    /// The entries of the open directory `fh`, read afresh when `offset` is 0 (a new pass or
    /// a rewind), else the snapshot being served.
    pub fn readdir(&self, fh: u64, offset: u64) -> FsResult<Arc<Vec<DirEntry>>> {
        let dir = self.dirs.get(fh)?;
        let mut entries = dir
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if offset == 0 {
            *entries = Arc::new(self.list_dir(&dir.caller, dir.ino)?);
        }
        Ok(Arc::clone(&entries))
    }

    fn list_dir(&self, caller: &Caller, ino: u64) -> FsResult<Vec<DirEntry>> {
        if VirtualInodes::is_virtual(ino) {
            return self.list_virtual_dir(caller, ino);
        }
        let node = self.node(ino)?;
        let fd = node
            .handle
            .open(self.mount_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?;
        let parent_ino = if ino == ROOT_INO {
            ROOT_INO
        } else {
            let st = rustix::fs::statat(&fd, "..", AtFlags::empty())?;
            self.inodes.mount_ino(st.st_ino)
        };
        let mut out = DirEntry::dots(ino, parent_ino);
        let mut dir = rustix::fs::Dir::read_from(&fd)?;
        while let Some(ent) = dir.read() {
            let ent = ent?;
            let name = OsStr::from_bytes(ent.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            if node.place == Place::MountRoot && Area::from_dir_name(name).is_none() {
                continue; // the private area and strays are not part of the namespace
            }
            if is_private(node.place, name)
                || crate::virtual_files::child_of_place(node.place, name).is_some()
            {
                continue; // hidden, or shadowed by a generated file
            }
            let kind = match ent.file_type() {
                rustix::fs::FileType::Unknown => {
                    let st = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
                    FileKind::from_mode(st.st_mode)
                }
                t => FileKind::from_dirent(t),
            };
            out.push(DirEntry {
                ino: self.inodes.mount_ino(ent.ino()),
                kind,
                name: OsString::from(name),
            });
        }
        for name in crate::virtual_files::children_of_place(node.place) {
            let v = crate::virtual_files::child_of_place(node.place, OsStr::new(name))
                .expect("listed virtual children exist");
            out.push(DirEntry {
                ino: self.virtuals.ino(&v),
                kind: if v.is_dir() {
                    FileKind::Dir
                } else {
                    FileKind::File
                },
                name: OsString::from(name),
            });
        }
        Ok(out)
    }

    /// Closes the directory handle `fh`.
    pub fn releasedir(&self, fh: u64) -> FsResult<()> {
        self.dirs.remove(fh).ok_or(FsError::UnknownHandle(fh))?;
        Ok(())
    }

    /// Syncs the directory `ino`.
    pub fn fsyncdir(&self, ino: u64) -> FsResult<()> {
        let node = self.node(ino)?;
        let fd = node
            .handle
            .open(self.mount_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?;
        rustix::fs::fsync(&fd)?;
        Ok(())
    }

    // ---- filesystem -----------------------------------------------------------------------

    /// Statistics of the backing filesystem.
    pub fn statfs(&self) -> FsResult<StatFs> {
        let s = rustix::fs::fstatvfs(self.mount_fd())?;
        Ok(StatFs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: s.f_namemax as u32,
            frsize: s.f_frsize as u32,
        })
    }

    /// `access(2)`: mode bits are the kernel's (`default_permissions`); ClawFS adds EROFS for
    /// write access to read-only areas.
    pub fn access(&self, ino: u64, mask: i32) -> FsResult<()> {
        let node = self.node(ino)?;
        if mask & libc::W_OK != 0 && node.place.area().is_read_only() {
            return Err(FsError::ReadOnly(node.place.area()));
        }
        Ok(())
    }

    // ---- extended attributes --------------------------------------------------------------

    /// The value of xattr `name`; only `user.*` attributes exist.
    pub fn getxattr(&self, caller: &Caller, ino: u64, name: &OsStr) -> FsResult<Vec<u8>> {
        let name = name.to_str().filter(|n| xattrs::is_user(n));
        let Some(name) = name.filter(|_| !VirtualInodes::is_virtual(ino)) else {
            return Err(errno(libc::ENODATA));
        };
        let node = self.node(ino)?;
        let fd = self.decided_fd(caller, "getxattr", crate::policy::Access::Read, &node)?;
        let _as = AsCaller::enter(caller)?;
        let path = OsStr::from_bytes(proc_fd_path(&fd).as_bytes()).to_owned();
        xattr::get_deref(path, name)?.ok_or_else(|| errno(libc::ENODATA))
    }

    /// The names of the `user.*` xattrs of `ino`, NUL-terminated and concatenated.
    pub fn listxattr(&self, caller: &Caller, ino: u64) -> FsResult<Vec<u8>> {
        if VirtualInodes::is_virtual(ino) {
            return Ok(Vec::new());
        }
        let node = self.node(ino)?;
        let fd = self.decided_fd(caller, "listxattr", crate::policy::Access::Read, &node)?;
        let _as = AsCaller::enter(caller)?;
        let path = OsStr::from_bytes(proc_fd_path(&fd).as_bytes()).to_owned();
        let mut out = Vec::new();
        for name in xattr::list_deref(path)? {
            if name.to_str().is_some_and(xattrs::is_user) {
                out.extend_from_slice(name.as_bytes());
                out.push(0);
            }
        }
        Ok(out)
    }

    /// Sets a `user.*` xattr; `user.clawfs.*` values are validated and take effect.
    pub fn setxattr(
        &self,
        caller: &Caller,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        let node = self.node(ino)?;
        self.check_modify(&node)
            .map_err(|e| self.rule_refusal(caller, "setxattr", &node, None, e))?;
        let refused = |e| self.rule_refusal(caller, "setxattr", &node, None, e);
        let name = self.user_xattr_name(name).map_err(refused)?;
        let effect = if name.starts_with(xattrs::CLAWFS_PREFIX) {
            Some(xattrs::parse_clawfs(node.place, name, value).map_err(refused)?)
        } else {
            None
        };
        let fd = self.decided_fd(caller, "setxattr", crate::policy::Access::Write, &node)?;
        let _as = AsCaller::enter(caller)?;
        // A ClawFS attribute takes effect in metadata.json: prepared (and validated) first, so
        // that a refusal leaves the attribute unset.
        let metadata = match effect {
            Some(ClawfsAttr::VectorDimension(dim)) => Some(self.metadata_with_dimension(&fd, dim)?),
            None => None,
        };
        let path = proc_fd_path(&fd);
        let previous = match metadata {
            Some(_) => xattr::get_deref(OsStr::from_bytes(path.as_bytes()), name)?,
            None => None,
        };
        rustix::fs::setxattr(
            path.as_c_str(),
            name,
            value,
            XattrFlags::from_bits_retain(flags as u32),
        )?;
        if let Some((bytes, mode)) = metadata {
            let dir = rustix::fs::openat(&*fd, ".", rustix::fs::OFlags::RDONLY, Mode::empty())?;
            let written = crate::beneath::write_atomic(
                dir.as_fd(),
                "metadata.json",
                &bytes,
                crate::beneath::FileMode::mode(mode),
            );
            if let Err(e) = written {
                let _ = match previous {
                    Some(old) => {
                        rustix::fs::setxattr(path.as_c_str(), name, &old, XattrFlags::empty())
                    }
                    None => rustix::fs::removexattr(path.as_c_str(), name),
                };
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Removes a `user.*` xattr. ClawFS's own attributes are set, never removed.
    pub fn removexattr(&self, caller: &Caller, ino: u64, name: &OsStr) -> FsResult<()> {
        let node = self.node(ino)?;
        self.check_modify(&node)
            .map_err(|e| self.rule_refusal(caller, "removexattr", &node, None, e))?;
        let refused = |e| self.rule_refusal(caller, "removexattr", &node, None, e);
        let name = self.user_xattr_name(name).map_err(refused)?;
        if name.starts_with(xattrs::CLAWFS_PREFIX) {
            return Err(refused(FsError::InvalidXattr {
                name: name.into(),
                reason: "ClawFS attributes cannot be removed; set a new value".into(),
            }));
        }
        let fd = self.decided_fd(caller, "removexattr", crate::policy::Access::Write, &node)?;
        let _as = AsCaller::enter(caller)?;
        rustix::fs::removexattr(proc_fd_path(&fd).as_c_str(), name)?;
        Ok(())
    }

    /// An `O_PATH` descriptor of `node`, once the policy allows `access` to it for `op`.
    fn decided_fd(
        &self,
        caller: &Caller,
        op: &'static str,
        access: crate::policy::Access,
        node: &Node,
    ) -> FsResult<Arc<OwnedFd>> {
        let fd = self.open_path(node)?;
        self.decide(caller, op, access, &self.ns_path(&fd)?)?;
        Ok(fd)
    }

    fn user_xattr_name<'a>(&self, name: &'a OsStr) -> FsResult<&'a str> {
        name.to_str()
            .filter(|n| xattrs::is_user(n))
            .ok_or_else(|| FsError::XattrNamespace(name.to_string_lossy().into_owned()))
    }

    /// The workspace's metadata.json with a new vector dimension, and its mode: refused when
    /// the file is not a JSON object (nothing is changed then).
    fn metadata_with_dimension(&self, ws: &OwnedFd, dim: u32) -> FsResult<(Vec<u8>, u32)> {
        let corrupt = |reason: String| FsError::Corrupt {
            path: "metadata.json".into(),
            reason,
        };
        let file = crate::beneath::open_file(
            ws.as_fd(),
            std::path::Path::new("metadata.json"),
            rustix::fs::OFlags::RDONLY,
        )?;
        let mode = rustix::fs::fstat(&file)?.st_mode & 0o7777;
        let mut meta: serde_json::Value =
            serde_json::from_reader(std::io::Read::take(File::from(file), 1 << 20))
                .map_err(|e| corrupt(format!("not valid JSON: {e}")))?;
        let obj = meta
            .as_object_mut()
            .ok_or_else(|| corrupt("not a JSON object".into()))?;
        obj.insert("vector_dimension".into(), dim.into());
        obj.insert("updated_at".into(), seed::now_rfc3339().into());
        let mut bytes = serde_json::to_vec_pretty(&meta).expect("a Value serialises");
        bytes.push(b'\n');
        Ok((bytes, mode))
    }
}

/// Whether a file has bits a write by someone without `CAP_FSETID` clears.
fn has_suidgid(file: &File) -> FsResult<bool> {
    let mode = rustix::fs::fstat(file)?.st_mode;
    Ok(mode & libc::S_ISUID != 0
        || mode & (libc::S_ISGID | libc::S_IXGRP) == (libc::S_ISGID | libc::S_IXGRP))
}

/// Clears setuid, and setgid on a group-executable file, as the kernel does when someone
/// without `CAP_FSETID` writes or truncates a file.
fn drop_suidgid(file: &File) -> FsResult<()> {
    let mode = rustix::fs::fstat(file)?.st_mode & 0o7777;
    let mut kept = mode & !libc::S_ISUID;
    if mode & libc::S_IXGRP != 0 {
        kept &= !libc::S_ISGID;
    }
    if kept != mode {
        rustix::fs::fchmod(file, Mode::from_raw_mode(kept))?;
    }
    Ok(())
}

/// ClawFS's private directory inside a workspace (tool trash and backups), hidden from the mount
/// like the store's own private area.
fn is_private(place: Place, name: &OsStr) -> bool {
    place == Place::WorkspaceRoot && name == crate::store::PRIVATE_DIR
}
