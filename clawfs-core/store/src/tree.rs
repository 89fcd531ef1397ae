//! Whole directory trees in the store, reached by descriptor: listed, removed and copied without
//! ever following a symlink or `..` (a name planted in a tree cannot lead outside it).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path below the tree's root, `/`-separated.
    pub rel: String,
    /// Directory, regular file, symlink (others are listed too; callers skip what they keep
    /// no copy of).
    pub kind: FileType,
}

/// The longest path below a root that is listed: every listed entry can then be opened by
/// its path (the kernel's limit is 4,096 bytes with the terminating NUL).
pub const MAX_PATH: usize = 4095;

/// A tree's entries, and what could not be listed.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every entry, each directory before what it holds, sorted by path.
    pub entries: Vec<Entry>,
    /// What was left out and why: names that are not UTF-8 (they cannot be named in an
    /// archive or a query) and folders whose paths are too long to open, with everything
    /// below them.
    pub unlisted: Vec<String>,
}

/// Every entry below `root` (not `root` itself); entries for which `skip(rel)` holds are left
/// out with everything below them.
pub fn walk(root: BorrowedFd<'_>, skip: &dyn Fn(&str) -> bool) -> io::Result<Listing> {
    let mut out = Listing::default();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = match crate::beneath::open_dir(
            root,
            Path::new(if rel.is_empty() { "." } else { &rel }),
        ) {
            Ok(d) => d,
            // Removed (or replaced) since it was listed.
            Err(e)
                if !rel.is_empty()
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                    ) =>
            {
                continue
            }
            Err(e) if !rel.is_empty() && e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                out.unlisted.push(format!(
                    "{rel}/: the path is too long to open (everything below it)"
                ));
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut entries = rustix::fs::Dir::read_from(dir.as_fd())?;
        while let Some(ent) = entries.read() {
            let ent = ent?;
            let Ok(name) = ent.file_name().to_str() else {
                let lossy = ent.file_name().to_string_lossy();
                let shown = match rel.is_empty() {
                    true => lossy.into_owned(),
                    false => format!("{rel}/{lossy}"),
                };
                out.unlisted.push(format!("{shown}: the name is not UTF-8"));
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let path = match rel.is_empty() {
                true => name.to_string(),
                false => format!("{rel}/{name}"),
            };
            if skip(&path) {
                continue;
            }
            if path.len() >= MAX_PATH {
                let start: String = rel.chars().take(100).collect();
                out.unlisted.push(format!(
                    "{start}…: the path is too long to open (everything below it)"
                ));
                continue;
            }
            let kind = match ent.file_type() {
                FileType::Unknown => rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode))?,
                k => k,
            };
            if kind == FileType::Directory {
                stack.push(path.clone());
            }
            out.entries.push(Entry { rel: path, kind });
        }
    }
    out.entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Removes `name` in `parent` and everything below it, by descriptor (names that are not
/// UTF-8 included).
pub fn remove_all(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let name = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))?;
    remove_entry(parent, &name)
}

fn remove_entry(parent: BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<()> {
    let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?);
    }
    let dir = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let names: Vec<std::ffi::CString> = {
        let mut it = rustix::fs::Dir::read_from(&dir)?;
        let mut v = Vec::new();
        while let Some(ent) = it.read() {
            let ent = ent?;
            let n = ent.file_name();
            if n.to_bytes() != b"." && n.to_bytes() != b".." {
                v.push(n.to_owned());
            }
        }
        v
    };
    for n in names {
        remove_entry(dir.as_fd(), &n)?;
    }
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// Creates the file `rel` below `root` (its folder must exist) with `O_EXCL`, never through a
/// symlink, for writing.
pub fn create_file(root: BorrowedFd<'_>, rel: &str, mode: u32) -> io::Result<OwnedFd> {
    let (dir, name) = parent_of(root, rel)?;
    Ok(rustix::fs::openat(
        &dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode & 0o7777),
    )?)
}

/// Creates the folder `rel` below `root` and opens it.
pub fn create_dir(root: BorrowedFd<'_>, rel: &str, mode: u32) -> io::Result<OwnedFd> {
    let (dir, name) = parent_of(root, rel)?;
    rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode & 0o7777))?;
    crate::beneath::open_dir(dir.as_fd(), Path::new(name))
}

/// Creates the symlink `rel` below `root`, pointing at `target` (never followed by ClawFS).
pub fn create_symlink(root: BorrowedFd<'_>, rel: &str, target: &str) -> io::Result<()> {
    let (dir, name) = parent_of(root, rel)?;
    Ok(rustix::fs::symlinkat(target, &dir, name)?)
}

/// The status of `rel` below `root`, reached without following any symlink (the last name
/// included).
pub fn stat(root: BorrowedFd<'_>, rel: &str) -> io::Result<rustix::fs::Stat> {
    let (dir, name) = parent_of(root, rel)?;
    Ok(rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
}

/// The target of the symlink `rel` below `root` (no symlink followed on the way); None when it
/// is not UTF-8.
pub fn read_link(root: BorrowedFd<'_>, rel: &str) -> io::Result<Option<String>> {
    let (dir, name) = parent_of(root, rel)?;
    Ok(rustix::fs::readlinkat(&dir, name, Vec::new())?
        .into_string()
        .ok())
}

/// Gives the symlink `rel` below `root` an owner and group (the link itself).
pub fn chown_link(root: BorrowedFd<'_>, rel: &str, uid: u32, gid: u32) -> io::Result<()> {
    let (dir, name) = parent_of(root, rel)?;
    Ok(rustix::fs::chownat(
        &dir,
        name,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// The folder holding `rel` below `root`, opened, and `rel`'s last name.
fn parent_of<'r>(root: BorrowedFd<'_>, rel: &'r str) -> io::Result<(OwnedFd, &'r str)> {
    let (parent, name) = match rel.rsplit_once('/') {
        Some((p, n)) => (p, n),
        None => (".", rel),
    };
    if name.is_empty() || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{rel:?} is not a name"),
        ));
    }
    Ok((crate::beneath::open_dir(root, Path::new(parent))?, name))
}

/// Copies the regular file `from` into the new file `to`: a reflink (shared blocks, copied
/// on write) where the filesystem offers one, else an in-kernel copy of its data ranges only,
/// so holes stay holes (a sparse file costs no more in the copy than in the original).
/// Returns whether it was a reflink.
pub fn copy_contents(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> io::Result<bool> {
    if rustix::fs::ioctl_ficlone(to, from).is_ok() {
        return Ok(true);
    }
    let size = rustix::fs::fstat(from)?.st_size as u64;
    let mut pos = 0u64;
    while pos < size {
        let start = match rustix::fs::seek(from, rustix::fs::SeekFrom::Data(pos)) {
            Ok(p) => p,
            // No data past pos: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let end = rustix::fs::seek(from, rustix::fs::SeekFrom::Hole(start))?.min(size);
        let (mut off_in, mut off_out) = (start, start);
        while off_in < end {
            let len = (end - off_in) as usize;
            let n =
                rustix::fs::copy_file_range(from, Some(&mut off_in), to, Some(&mut off_out), len)?;
            if n == 0 {
                break;
            }
        }
        pos = end;
    }
    // Trailing hole (or a file that was all hole).
    rustix::fs::ftruncate(to, size)?;
    Ok(false)
}

/// Gives the open `fd` the owner, mode and modification time of `st`.
pub fn set_status(
    fd: BorrowedFd<'_>,
    uid: u32,
    gid: u32,
    mode: u32,
    mtime_ns: i64,
) -> io::Result<()> {
    crate::beneath::chown_fd(fd, uid, gid)?;
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777))?;
    let t = rustix::fs::Timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000),
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000) as _,
    };
    rustix::fs::futimens(
        fd,
        &rustix::fs::Timestamps {
            last_access: t,
            last_modification: t,
        },
    )?;
    Ok(())
}
