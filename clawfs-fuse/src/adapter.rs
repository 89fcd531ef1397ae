//! The thin fuser adapter. Every callback has one shape: a span, decode the arguments, identify
//! the caller, one call into [`ClawFs`], reply or map the error. Passthrough registration is the
//! only FUSE-specific state, and it lives in the core's per-file attachment slot.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use clawfs_core::attr::{Attr, FileKind};
use clawfs_core::creds::Caller;
use clawfs_core::fs::{Entry, Opened, RenameMode, SetAttr, SetTime, ToolStep};
use clawfs_core::generated_files::GeneratedInodes;
use clawfs_core::open_files::OpenFile;
use clawfs_core::{ClawFs, FsError};
use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle,
    FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tracing::{debug, info, warn};

use crate::errno::{is_refusal, to_errno};

/// Adapter settings (how long the kernel may cache entries is the filesystem's:
/// `ClawFsBuilder::cache_ttl`).
#[derive(Clone, Copy, Debug)]
pub struct AdapterConfig {
    /// Ask the kernel for FUSE passthrough of regular-file I/O.
    pub passthrough: bool,
}

/// `fuser::Filesystem` over a [`ClawFs`].
pub struct Adapter {
    fs: std::sync::Arc<ClawFs>,
    config: AdapterConfig,
    /// Whether the kernel granted passthrough at init (cleared if registering a file fails).
    passthrough: AtomicBool,
}

/// Open flags for backing files: the daemon buffers nothing, so `close` need not wait for a
/// FLUSH round trip.
const FILE_OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_NOFLUSH;

/// Open flags for a backing file the kernel serves by passthrough, opened with `flags`. One
/// opened for reading and writing may be written through a shared mapping, which changes the
/// backing file's times behind the kernel's attribute cache: its FLUSH, which `close` (and a
/// writer's exit) waits for, is where the daemon tells the kernel (`ClawFs::flush`).
fn passthrough_open_flags(flags: i32) -> FopenFlags {
    match flags & libc::O_ACCMODE == libc::O_RDWR {
        true => FopenFlags::empty(),
        false => FILE_OPEN_FLAGS,
    }
}

/// Open flags for a file served through the page cache; without `keep_cache` the kernel drops
/// the pages it has (they may predate a passthrough write).
fn cached_open_flags(keep_cache: bool) -> FopenFlags {
    match keep_cache {
        true => FILE_OPEN_FLAGS | FopenFlags::FOPEN_KEEP_CACHE,
        false => FILE_OPEN_FLAGS,
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: SystemTime::UNIX_EPOCH,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime> {
    t.map(|t| match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(t),
    })
}

/// Maps a core error to an errno, logging ClawFS refusals with their reason, and counting it.
fn fail(op: &'static str, e: FsError) -> Errno {
    let errno = to_errno(&e);
    clawfs_metrics::error(op, crate::errno::name(errno.code()));
    if is_refusal(&e) {
        info!(op, errno = errno.code(), reason = %e, "refused");
    } else {
        debug!(op, errno = errno.code(), error = %e, "failed");
    }
    errno
}

impl Adapter {
    /// An adapter serving `fs`.
    pub fn new(fs: std::sync::Arc<ClawFs>, config: AdapterConfig) -> Self {
        Self {
            fs,
            config,
            passthrough: AtomicBool::new(false),
        }
    }

    fn reply_entry(&self, op: &'static str, r: Result<Entry, FsError>, reply: ReplyEntry) {
        match r {
            Ok(e) => reply.entry(
                &self.fs.ttl(e.attr.ino),
                &file_attr(&e.attr),
                Generation(e.generation),
            ),
            Err(e) => reply.error(fail(op, e)),
        }
    }

    fn reply_empty(op: &'static str, r: Result<(), FsError>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(op, e)),
        }
    }

    fn reply_attr(&self, op: &'static str, r: Result<Attr, FsError>, reply: ReplyAttr) {
        match r {
            Ok(a) => reply.attr(&self.fs.ttl(a.ino), &file_attr(&a)),
            Err(e) => reply.error(fail(op, e)),
        }
    }

    fn reply_data(op: &'static str, r: Result<Vec<u8>, FsError>, reply: ReplyData) {
        match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(fail(op, e)),
        }
    }

    fn reply_xattr(op: &'static str, r: Result<Vec<u8>, FsError>, size: u32, reply: ReplyXattr) {
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(fail(op, e)),
        }
    }

    /// How the kernel is to serve `file`: `Ok` with the passthrough backing id of its backing
    /// descriptor, registered with the kernel on its first open (all opens of an inode share
    /// it), or `Err` with the open flags for serving it through the page cache (chosen by the
    /// core for a small file read, or without passthrough). If registering fails, passthrough
    /// is turned off for good and I/O is served through the daemon.
    fn serving<'a, F>(
        &self,
        file: &'a OpenFile,
        open_backing: F,
    ) -> Result<&'a BackingId, FopenFlags>
    where
        F: FnOnce(&std::fs::File) -> std::io::Result<BackingId>,
    {
        if let Some(keep_cache) = file.cached() {
            return Err(cached_open_flags(keep_cache));
        }
        self.backing(file, open_backing)
            .ok_or(cached_open_flags(true))
    }

    /// The passthrough backing id of `file`, registered on first use; `None` without passthrough.
    fn backing<'a, F>(&self, file: &'a OpenFile, open_backing: F) -> Option<&'a BackingId>
    where
        F: FnOnce(&std::fs::File) -> std::io::Result<BackingId>,
    {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let slot = &file.backing.attachment;
        if slot.get().is_none() {
            match open_backing(&file.backing.file) {
                // A racing open may have registered first; its id is used, ours dropped.
                Ok(id) => drop(slot.set(Box::new(id))),
                Err(e) => {
                    warn!(error = %e, "passthrough registration failed; serving I/O through the daemon");
                    self.passthrough.store(false, Ordering::Relaxed);
                    self.fs.set_passthrough(false);
                    return None;
                }
            }
        }
        slot.get()?.downcast_ref::<BackingId>()
    }
}

impl Filesystem for Adapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // HANDLE_KILLPRIV_V2: the backing filesystem clears setuid/setgid bits itself, so the
        // kernel need not ask for security.capability before every write. ATOMIC_O_TRUNC:
        // O_TRUNC arrives with the open, so a staged (validated) write never truncates first.
        // AUTO_INVAL_DATA: cached pages of small files go when the attributes show a new mtime
        // or size (a change made in the store behind the daemon's back).
        let wanted = InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_EXPORT_SUPPORT
            // The kernel's own checks must see what the policy grants per agent
            // (`clawfs_policy::kernel_acl`).
            | InitFlags::FUSE_POSIX_ACL;
        let _ = config.add_capabilities(wanted & config.capabilities());
        if !config.capabilities().contains(InitFlags::FUSE_POSIX_ACL) {
            warn!("the kernel does not offer FUSE POSIX ACLs: its own checks (an inotify watch) see only the mode bits of agent folders, workspaces and secrets");
        }
        if self.config.passthrough {
            if config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH) {
                let _ = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH);
                // The store is on a plain filesystem (stack depth 0); ClawFS itself may be stacked.
                let _ = config.set_max_stack_depth(1);
                self.passthrough.store(true, Ordering::Relaxed);
                self.fs.set_passthrough(true);
            } else {
                warn!("the kernel does not offer FUSE passthrough; serving I/O through the daemon");
            }
        }
        let _ = config.set_max_write(1 << 20);
        info!(
            passthrough = self.passthrough.load(Ordering::Relaxed),
            "ClawFS session started"
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _s = tracing::debug_span!("lookup", parent = parent.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("lookup");
        match self.fs.lookup_entry(&caller(req), parent.0, name) {
            Ok(Some(e)) => reply.entry(
                &self.fs.entry_ttl(parent.0, name, e.attr.ino),
                &file_attr(&e.attr),
                Generation(e.generation),
            ),
            // A negative entry: node id 0, kept by the kernel for the ttl of names in the parent.
            Ok(None) => {
                let mut negative = file_attr(&clawfs_core::attr::Attr::negative());
                negative.ino = INodeNo(0);
                reply.entry(&self.fs.ttl_in(parent.0), &negative, Generation(0));
            }
            Err(e) => reply.error(fail("lookup", e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _s = tracing::trace_span!("forget", ino = ino.0, nlookup).entered();
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let _s = tracing::debug_span!("getattr", ino = ino.0).entered();
        let _t = clawfs_metrics::Timed::start("getattr");
        self.reply_attr(
            "getattr",
            self.fs.getattr(&caller(req), ino.0, fh.map(|f| f.0)),
            reply,
        );
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _s = tracing::debug_span!("setattr", ino = ino.0).entered();
        let _t = clawfs_metrics::Timed::start("setattr");
        let change = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        let r = self
            .fs
            .setattr(&caller(req), ino.0, fh.map(|f| f.0), change);
        self.reply_attr("setattr", r, reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _s = tracing::debug_span!("readlink", ino = ino.0).entered();
        let _t = clawfs_metrics::Timed::start("readlink");
        Self::reply_data("readlink", self.fs.readlink(ino.0), reply);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _s = tracing::debug_span!("mknod", parent = parent.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("mknod");
        let r = self.fs.mknod(&caller(req), parent.0, name, mode, rdev);
        self.reply_entry("mknod", r, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let _s = tracing::debug_span!("mkdir", parent = parent.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("mkdir");
        let r = self.fs.mkdir(&caller(req), parent.0, name, mode);
        self.reply_entry("mkdir", r, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = tracing::debug_span!("unlink", parent = parent.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("unlink");
        Self::reply_empty(
            "unlink",
            self.fs.unlink(&caller(req), parent.0, name),
            reply,
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = tracing::debug_span!("rmdir", parent = parent.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("rmdir");
        Self::reply_empty("rmdir", self.fs.rmdir(&caller(req), parent.0, name), reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _s = tracing::debug_span!("symlink", parent = parent.0, ?link_name).entered();
        let _t = clawfs_metrics::Timed::start("symlink");
        let r = self
            .fs
            .symlink(&caller(req), parent.0, link_name, target.as_os_str());
        self.reply_entry("symlink", r, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!(
            "rename",
            parent = parent.0,
            ?name,
            newparent = newparent.0,
            ?newname
        )
        .entered();
        let _t = clawfs_metrics::Timed::start("rename");
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::from_i32(libc::EINVAL));
            return;
        }
        let mode = RenameMode {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        let caller = caller(req);
        let after = match self
            .fs
            .rename(&caller, parent.0, name, newparent.0, newname, mode)
        {
            Ok(Some(after)) => after,
            r => return Self::reply_empty("rename", r.map(|_| ()), reply),
        };
        // Put off until a writer's release comes: waited for on a thread of its own, so that
        // the wait holds up no thread serving requests (the release among them).
        let fs = std::sync::Arc::clone(&self.fs);
        let (name, newname) = (name.to_owned(), newname.to_owned());
        let job = move || {
            let r = fs.rename_after_release(
                &caller,
                (parent.0, &name),
                (newparent.0, &newname),
                mode,
                after,
            );
            Self::reply_empty("rename", r, reply);
        };
        // Taken by the thread, or run here if no thread can start: decided and audited either
        // way.
        let job = std::sync::Arc::new(std::sync::Mutex::new(Some(job)));
        let theirs = std::sync::Arc::clone(&job);
        let take = |job: &std::sync::Mutex<Option<_>>| {
            job.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        };
        let spawned = std::thread::Builder::new()
            .name("rename-wait".into())
            .spawn(move || take(&theirs).map(|job| job()));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread for a rename put off: it waits here");
            if let Some(job) = take(&job) {
                job();
            }
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _s =
            tracing::debug_span!("link", ino = ino.0, newparent = newparent.0, ?newname).entered();
        let _t = clawfs_metrics::Timed::start("link");
        let r = self.fs.link(&caller(req), ino.0, newparent.0, newname);
        self.reply_entry("link", r, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _s = tracing::debug_span!("open", ino = ino.0, flags = flags.0).entered();
        let _t = clawfs_metrics::Timed::start("open");
        if GeneratedInodes::is_generated(ino.0) {
            // Generated content: every read and write reaches the daemon. Some opens take long
            // (a copy of an index), and are served on the tool threads.
            let (who, ino, flags) = (caller(req), ino.0, flags.0);
            return self.fs.serve_then(
                &who,
                (ino, 0, ToolStep::Open),
                move |fs| fs.open(&who, ino, flags),
                |r| match r {
                    Ok(Opened::Generated(fh)) => {
                        clawfs_metrics::opened("daemon");
                        reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
                    }
                    Ok(Opened::Backing(..)) => reply.error(Errno::from_i32(libc::EIO)),
                    Err(e) => reply.error(fail("open", e)),
                },
            );
        }
        match self.fs.open(&caller(req), ino.0, flags.0) {
            // A staged identity write: served by the daemon, committed at close (FLUSH).
            Ok(Opened::Backing(fh, file)) if file.staged.is_some() => {
                clawfs_metrics::opened("daemon");
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }
            Ok(Opened::Backing(fh, file)) => match self.serving(&file, |f| reply.open_backing(f)) {
                Ok(id) => {
                    clawfs_metrics::opened("passthrough");
                    reply.opened_passthrough(FileHandle(fh), passthrough_open_flags(flags.0), id)
                }
                Err(flags) => {
                    clawfs_metrics::opened("daemon");
                    reply.opened(FileHandle(fh), flags)
                }
            },
            Ok(Opened::Generated(_)) => reply.error(Errno::from_i32(libc::EIO)),
            Err(e) => reply.error(fail("open", e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _s = tracing::debug_span!("create", parent = parent.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("create");
        match self.fs.create(&caller(req), parent.0, name, mode, flags) {
            Ok((entry, Opened::Generated(fh))) => {
                clawfs_metrics::opened("daemon");
                reply.created(
                    &Duration::ZERO,
                    &file_attr(&entry.attr),
                    Generation(entry.generation),
                    FileHandle(fh),
                    FopenFlags::FOPEN_DIRECT_IO,
                )
            }
            Ok((entry, Opened::Backing(fh, file))) => {
                let attr = file_attr(&entry.attr);
                let generation = Generation(entry.generation);
                let ttl = self.fs.ttl(entry.attr.ino);
                match self.serving(&file, |f| reply.open_backing(f)) {
                    Ok(id) => {
                        clawfs_metrics::opened("passthrough");
                        reply.created_passthrough(
                            &ttl,
                            &attr,
                            generation,
                            FileHandle(fh),
                            passthrough_open_flags(flags),
                            id,
                        )
                    }
                    Err(flags) => {
                        clawfs_metrics::opened("daemon");
                        reply.created(&ttl, &attr, generation, FileHandle(fh), flags)
                    }
                }
            }
            Err(e) => reply.error(fail("create", e)),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _s = tracing::debug_span!("read", fh = fh.0, offset, size).entered();
        let _t = clawfs_metrics::Timed::start("read");
        let (ino, fh) = (ino.0, fh.0);
        self.fs.serve_then(
            &caller(req),
            (ino, fh, ToolStep::Read),
            move |fs| fs.read(ino, fh, offset, size),
            |r| {
                if let Ok(data) = &r {
                    clawfs_metrics::bytes("read", data.len());
                }
                Self::reply_data("read", r, reply);
            },
        );
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _s = tracing::debug_span!("write", fh = fh.0, offset, len = data.len()).entered();
        let _t = clawfs_metrics::Timed::start("write");
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.fs.write(ino.0, fh.0, offset, data, kill) {
            Ok(n) => {
                clawfs_metrics::bytes("write", n as usize);
                reply.written(n)
            }
            Err(e) => reply.error(fail("write", e)),
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("flush", fh = fh.0).entered();
        let _t = clawfs_metrics::Timed::start("flush");
        // Backing files are opened with FOPEN_NOFLUSH (nothing is buffered) but for passthrough
        // opens for reading and writing (see `passthrough_open_flags`); generated files get
        // here too, where closing a tool request runs it.
        let (who, ino, fh) = (caller(req), ino.0, fh.0);
        self.fs.serve_then(
            &who,
            (ino, fh, ToolStep::Flush),
            move |fs| fs.flush(&who, ino, fh),
            |r| Self::reply_empty("flush", r, reply),
        );
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("release", fh = fh.0).entered();
        let _t = clawfs_metrics::Timed::start("release");
        clawfs_metrics::released();
        Self::reply_empty("release", self.fs.release(ino.0, fh.0), reply);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("fsync", fh = fh.0).entered();
        let _t = clawfs_metrics::Timed::start("fsync");
        Self::reply_empty("fsync", self.fs.fsync(ino.0, fh.0, datasync), reply);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _s = tracing::debug_span!("opendir", ino = ino.0).entered();
        let _t = clawfs_metrics::Timed::start("opendir");
        match self.fs.opendir(&caller(req), ino.0) {
            // Listings of real directories are cached by the kernel until the directory
            // changes; generated ones depend on the caller.
            Ok(fh) if !GeneratedInodes::is_generated(ino.0) => {
                clawfs_metrics::opened_dir();
                reply.opened(
                    FileHandle(fh),
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
                )
            }
            Ok(fh) => {
                clawfs_metrics::opened_dir();
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(fail("opendir", e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let _s = tracing::debug_span!("readdir", fh = fh.0, offset).entered();
        let _t = clawfs_metrics::Timed::start("readdir");
        let entries = match self.fs.readdir(fh.0, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(fail("readdir", e)),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.ino), (i + 1) as u64, file_type(e.kind), &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let _s = tracing::debug_span!("readdirplus", fh = fh.0, offset).entered();
        let _t = clawfs_metrics::Timed::start("readdirplus");
        let r = self.fs.readdirplus(&caller(req), ino.0, fh.0, offset, |e| {
            let attr = file_attr(&e.attr);
            reply.add(
                INodeNo(e.ino),
                e.next,
                e.name,
                &e.ttl,
                &attr,
                Generation(e.generation),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail("readdirplus", e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("releasedir", fh = fh.0).entered();
        let _t = clawfs_metrics::Timed::start("releasedir");
        clawfs_metrics::released();
        Self::reply_empty("releasedir", self.fs.releasedir(fh.0), reply);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("fsyncdir", ino = ino.0).entered();
        let _t = clawfs_metrics::Timed::start("fsyncdir");
        Self::reply_empty("fsyncdir", self.fs.fsyncdir(ino.0), reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _s = tracing::debug_span!("statfs").entered();
        let _t = clawfs_metrics::Timed::start("statfs");
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(fail("statfs", e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("setxattr", ino = ino.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("setxattr");
        let r = self.fs.setxattr(&caller(req), ino.0, name, value, flags);
        Self::reply_empty("setxattr", r, reply);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _s = tracing::debug_span!("getxattr", ino = ino.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("getxattr");
        Self::reply_xattr(
            "getxattr",
            self.fs.getxattr(&caller(req), ino.0, name),
            size,
            reply,
        );
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _s = tracing::debug_span!("listxattr", ino = ino.0).entered();
        let _t = clawfs_metrics::Timed::start("listxattr");
        Self::reply_xattr(
            "listxattr",
            self.fs.listxattr(&caller(req), ino.0),
            size,
            reply,
        );
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = tracing::debug_span!("removexattr", ino = ino.0, ?name).entered();
        let _t = clawfs_metrics::Timed::start("removexattr");
        let r = self.fs.removexattr(&caller(req), ino.0, name);
        Self::reply_empty("removexattr", r, reply);
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let _s = tracing::debug_span!("access", ino = ino.0, mask = mask.bits()).entered();
        let _t = clawfs_metrics::Timed::start("access");
        Self::reply_empty("access", self.fs.access(ino.0, mask.bits()), reply);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("fallocate", fh = fh.0, offset, length, mode).entered();
        let _t = clawfs_metrics::Timed::start("fallocate");
        let kill_suidgid = req.uid() != 0;
        Self::reply_empty(
            "fallocate",
            self.fs
                .fallocate((ino.0, fh.0), offset, length, mode, kill_suidgid),
            reply,
        );
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let _s = tracing::debug_span!("lseek", fh = fh.0, offset, whence).entered();
        let _t = clawfs_metrics::Timed::start("lseek");
        match self.fs.lseek(ino.0, fh.0, offset, whence) {
            Ok(off) => reply.offset(off),
            Err(e) => reply.error(fail("lseek", e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _s = tracing::debug_span!(
            "copy_file_range",
            fh_in = fh_in.0,
            offset_in,
            fh_out = fh_out.0,
            offset_out,
            len
        )
        .entered();
        let _t = clawfs_metrics::Timed::start("copy_file_range");
        match self.fs.copy_file_range(
            (ino_in.0, fh_in.0, offset_in),
            (ino_out.0, fh_out.0, offset_out),
            len,
        ) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(fail("copy_file_range", e)),
        }
    }

    // ---- explicitly unsupported -----------------------------------------------------------

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // No ClawFS ioctls; ENOTTY is what a file without ioctls answers.
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn bmap(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _blocksize: u32,
        _idx: u64,
        reply: fuser::ReplyBmap,
    ) {
        // Not a block-device filesystem: there is no block map to give.
        reply.error(Errno::from_i32(libc::ENOSYS));
    }
}
