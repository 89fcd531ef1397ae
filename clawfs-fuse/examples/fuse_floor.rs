//! The FUSE round-trip floor: a file system that does no work at all.
//!
//! `fuse_floor MOUNTPOINT` serves one directory holding one 4 KiB file `f`, from memory, with the
//! transport settings ClawFS uses (fuser, `default_permissions`, cloned descriptors, 4 worker
//! threads, one of which polls for 100 µs as `clawfs mount` does by default;
//! `FLOOR_BUSY_POLL_US=N` sets that as `--busy-poll N` does). Every other name is answered
//! ENOENT without caching, so a `stat` of a missing name costs exactly one round trip.
//! `bench/floor.sh` times such calls here and on native ext4: no FUSE file system can answer
//! faster on this machine, which bounds what per-call goals can ask.

use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyEntry, ReplyOpen, Request,
    SessionACL,
};

const ROOT: u64 = 1;
const FILE: u64 = 2;
const SIZE: usize = 4096;
const TTL: Duration = Duration::from_secs(10);

struct Floor {
    data: Vec<u8>,
}

fn attr(ino: u64) -> FileAttr {
    let (kind, perm, size, nlink) = if ino == ROOT {
        (FileType::Directory, 0o755, 0, 2)
    } else {
        (FileType::RegularFile, 0o644, SIZE as u64, 1)
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind,
        perm,
        nlink,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for Floor {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT && name == "f" {
            reply.entry(&TTL, &attr(FILE), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            ROOT | FILE => reply.attr(&TTL, &attr(ino.0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let start = (offset as usize).min(SIZE);
        let end = start.saturating_add(size as usize).min(SIZE);
        reply.data(&self.data[start..end]);
    }
}

fn main() -> anyhow::Result<()> {
    let Some(mountpoint) = std::env::args_os().nth(1) else {
        eprintln!("usage: fuse_floor MOUNTPOINT   (serves until unmounted)");
        std::process::exit(2);
    };
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("fuse-floor".into()),
        MountOption::DefaultPermissions,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(4);
    // One worker polls for 100 µs, as `clawfs mount` does by default; FLOOR_BUSY_POLL_US=N
    // changes that, 0 turns it off, as `--busy-poll N` does.
    let poll_us = std::env::var("FLOOR_BUSY_POLL_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    config.busy_poll = (poll_us > 0).then(|| Duration::from_micros(poll_us));
    config.clone_fd = true;
    let fs = Floor {
        data: vec![b'x'; SIZE],
    };
    fuser::Session::new(fs, std::path::Path::new(&mountpoint), &config)?.run()?;
    Ok(())
}
