//! Files the daemon (root) reads, creates or replaces on someone's behalf, reached only by
//! descriptor beneath a directory it trusts (the store root): every step refuses symlinks and
//! `..` (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), and replacements go through a
//! temp file with an unpredictable name created `O_EXCL | O_NOFOLLOW`. An agent that plants a
//! symlink or a temp name in a directory it may write therefore never redirects a root write.
//!
//! Atomic writes are [`crate::atomic`]'s (one implementation for the daemon and the tools);
//! this module adds how the daemon reaches its directories in the store.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};

pub use crate::atomic::{sync_dir, write_atomic, write_atomic_unsynced, FileMode};

/// How every step of a path beneath a trusted directory is resolved.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Opens the trusted directory `path` (a store root, given by an admin) as the `base` of the
/// calls below: `O_PATH`, following the path as given.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens `rel` beneath `base` with `flags`, refusing a symlink or `..` at any step (ELOOP,
/// EXDEV) and a path that climbs out. `rel` empty or `.` is `base` itself.
pub fn open(base: BorrowedFd<'_>, rel: &Path, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if rel.is_absolute() {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    // O_NONBLOCK: a FIFO planted where a file should be never blocks the daemon (it makes
    // no difference to a regular file; O_PATH takes no such flag).
    let nonblock = match flags.contains(OFlags::PATH) {
        true => OFlags::empty(),
        false => OFlags::NONBLOCK,
    };
    Ok(rustix::fs::openat2(
        base,
        rel,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW | nonblock,
        Mode::from_raw_mode(mode),
        RESOLVE,
    )?)
}

/// The directory `rel` beneath `base`, opened for `*at` calls, fsync and the daemon's own
/// listings, which leave its access time alone (`O_NOATIME` where allowed).
pub fn open_dir(base: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    match open(base, rel, flags | OFlags::NOATIME, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(base, rel, flags, 0),
        other => other,
    }
}

/// Opens the folder `name` in `dir` for listing, by one name, never following a symlink, with
/// `O_NOATIME` where allowed (the daemon's own reads leave access times alone; without
/// CAP_FOWNER, another owner's folder is opened plainly).
pub fn open_dir_noatime(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOATIME,
        rustix::fs::Mode::empty(),
    ) {
        Err(rustix::io::Errno::PERM) => Ok(rustix::fs::openat(
            dir,
            name,
            flags,
            rustix::fs::Mode::empty(),
        )?),
        other => Ok(other?),
    }
}

/// The directory `rel` beneath `base`, created (mode `mode`, then `owner`) step by step where
/// missing. An existing step that is not a real directory is refused.
pub fn create_dir_all(
    base: BorrowedFd<'_>,
    rel: &Path,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<OwnedFd> {
    let mut dir = open_dir(base, Path::new("."))?;
    for part in rel.components() {
        let name = part.as_os_str();
        if name == "." {
            continue;
        }
        check_name(name)?;
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {
                let child = open_dir(dir.as_fd(), Path::new(name))?;
                rustix::fs::fchmod(&child, Mode::from_raw_mode(mode))?;
                if let Some((uid, gid)) = owner {
                    chown_fd(&child, uid, gid)?;
                }
                dir = child;
            }
            Err(rustix::io::Errno::EXIST) => dir = open_dir(dir.as_fd(), Path::new(name))?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(dir)
}

/// Opens the regular file `rel` beneath `base` with `flags`; anything else (a FIFO, a device,
/// a directory) is refused with EINVAL.
pub fn open_file(base: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    open_file_mode(base, rel, flags, 0)
}

/// [`open_file`] with the mode a file it creates (`O_CREAT` in `flags`) gets.
pub fn open_file_mode(
    base: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: u32,
) -> io::Result<OwnedFd> {
    let fd = open(base, rel, flags, mode)?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(fd)
}

/// Reads the regular file `rel` beneath `base`, at most `max` bytes (`None` if it is missing).
pub fn read(base: BorrowedFd<'_>, rel: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let fd = match open_file(base, rel, OFlags::RDONLY) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    File::from(fd).take(max).read_to_end(&mut out)?;
    Ok(Some(out))
}

/// [`write_atomic`] of `rel_dir/name` beneath `base`.
pub fn write_atomic_beneath(
    base: BorrowedFd<'_>,
    rel_dir: &Path,
    name: &str,
    bytes: &[u8],
    how: FileMode,
) -> io::Result<()> {
    let dir = open_dir(base, rel_dir)?;
    write_atomic(dir.as_fd(), name, bytes, how)
}

/// Changes the owner of an open file.
pub fn chown_fd(fd: impl AsFd, uid: u32, gid: u32) -> io::Result<()> {
    rustix::fs::fchown(
        fd,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    )?;
    Ok(())
}

/// A single path component: not empty, `.`, `..`, and without `/`.
pub fn check_name(name: &OsStr) -> io::Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn base(dir: &Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn writes_atomically_with_mode() {
        let d = tempfile::tempdir().unwrap();
        let b = base(d.path());
        std::fs::create_dir(d.path().join("a")).unwrap();
        write_atomic_beneath(
            b.as_fd(),
            Path::new("a"),
            "f",
            b"one",
            FileMode::mode(0o640),
        )
        .unwrap();
        write_atomic_beneath(
            b.as_fd(),
            Path::new("a"),
            "f",
            b"two",
            FileMode::mode(0o640),
        )
        .unwrap();
        let p = d.path().join("a/f");
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o640);
        // No temp file is left behind.
        assert_eq!(std::fs::read_dir(d.path().join("a")).unwrap().count(), 1);
    }

    #[test]
    fn refuses_symlinks_at_every_step() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let b = base(d.path());
        std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();
        let e = write_atomic_beneath(
            b.as_fd(),
            Path::new("link"),
            "f",
            b"x",
            FileMode::mode(0o600),
        )
        .unwrap_err();
        // The final link is refused by O_NOFOLLOW (ENOTDIR for a directory), an inner one by
        // RESOLVE_NO_SYMLINKS (ELOOP).
        assert!(
            matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)),
            "{e}"
        );
        let e = open_dir(b.as_fd(), Path::new("../")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EXDEV));
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("f")).unwrap();
        assert!(read(b.as_fd(), Path::new("f"), 100).is_err());
        assert!(create_dir_all(b.as_fd(), Path::new("link/x"), 0o700, None).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_planted_target_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = tempfile::NamedTempFile::new().unwrap();
        std::fs::set_permissions(victim.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(victim.path(), d.path().join("denials")).unwrap();
        let b = base(d.path());
        write_atomic(b.as_fd(), "denials", b"new", FileMode::mode(0o640)).unwrap();
        assert_eq!(std::fs::read(victim.path()).unwrap(), b"");
        assert!(!std::fs::symlink_metadata(d.path().join("denials"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
