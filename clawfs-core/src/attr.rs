//! File attributes as the core reports them (the adapter converts to FUSE's).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The type of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
}

impl FileKind {
    /// The kind encoded in a `st_mode`.
    pub fn from_mode(mode: u32) -> FileKind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => FileKind::File,
        }
    }

    /// The kind of a directory entry's `d_type`, if the backing filesystem reported one.
    pub fn from_dirent(t: rustix::fs::FileType) -> FileKind {
        use rustix::fs::FileType as T;
        match t {
            T::Directory => FileKind::Dir,
            T::Symlink => FileKind::Symlink,
            T::Fifo => FileKind::Fifo,
            T::Socket => FileKind::Socket,
            T::CharacterDevice => FileKind::CharDevice,
            T::BlockDevice => FileKind::BlockDevice,
            _ => FileKind::File,
        }
    }
}

/// Attributes of one node, with the inode number the mount shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number on the mount.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access.
    pub atime: SystemTime,
    /// Last modification.
    pub mtime: SystemTime,
    /// Last status change.
    pub ctime: SystemTime,
    /// Node type.
    pub kind: FileKind,
    /// Permission bits including setuid/setgid/sticky.
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u32,
    /// Preferred I/O size.
    pub blksize: u32,
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = Duration::from_nanos(nsec.clamp(0, 999_999_999) as u64);
    if sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(sec as u64) + nsec
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + nsec
    }
}

impl Attr {
    /// The attributes sent with a negative lookup entry (the kernel reads only the TTL).
    pub fn negative() -> Attr {
        Attr {
            ino: 0,
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            kind: FileKind::File,
            perm: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 0,
        }
    }

    /// Attributes of a backing `stat`, shown under inode number `ino`.
    pub fn from_stat(st: &rustix::fs::Stat, ino: u64) -> Attr {
        Attr {
            ino,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            atime: time(st.st_atime, st.st_atime_nsec as i64),
            mtime: time(st.st_mtime, st.st_mtime_nsec as i64),
            ctime: time(st.st_ctime, st.st_ctime_nsec as i64),
            kind: FileKind::from_mode(st.st_mode),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: encode_dev(st.st_rdev),
            blksize: st.st_blksize as u32,
        }
    }
}

/// A `dev_t` in the kernel's 32-bit "new" encoding, which FUSE uses for `rdev`.
pub fn encode_dev(dev: u64) -> u32 {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// The `dev_t` of a 32-bit "new" encoded device number from FUSE.
pub fn decode_dev(dev: u32) -> u64 {
    let major = (dev & 0xfff00) >> 8;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip() {
        for (ma, mi) in [(1, 3), (8, 1), (253, 300), (4095, 1_048_575)] {
            let dev = libc::makedev(ma, mi);
            assert_eq!(decode_dev(encode_dev(dev)), dev);
        }
    }
}
