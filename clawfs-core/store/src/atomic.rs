//! The one atomic write of ClawFS (the daemon's files in the store and the tools' edits), and
//! the single-name `*at` steps it is made of: every step acts on one name in a directory
//! opened by descriptor, never on a path, and a new file never follows or reuses an entry.

use std::fs::File;
use std::io;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

/// Creates the new file `name` in `dir` for writing; never follows or reuses an existing entry.
pub fn create(dir: impl AsFd, name: &str, mode: u32) -> io::Result<File> {
    single(name)?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::from_bits_truncate(mode))?;
    Ok(File::from(fd))
}

/// Creates a new temporary file in `dir` under an unpredictable name: `(name, file)`.
pub fn create_temp(dir: impl AsFd, mode: u32) -> io::Result<(String, File)> {
    loop {
        let name = format!(".clawfs-tmp-{}", random_hex(16)?);
        match create(&dir, &name, mode) {
            Ok(f) => return Ok((name, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Who owns a file written by [`write_atomic`], and its permission bits.
#[derive(Clone, Copy, Debug)]
pub struct FileMode {
    /// Permission bits, applied exactly (no umask).
    pub mode: u32,
    /// Owner and group; `None` keeps the writer's.
    pub owner: Option<(u32, u32)>,
}

impl FileMode {
    /// `mode`, owned by the writer.
    pub const fn mode(mode: u32) -> Self {
        Self { mode, owner: None }
    }
}

/// Replaces `name` in `dir` with `bytes` so that a reader or a crash sees the old or the new
/// content, never a mix: a temp file with an unpredictable name ([`create_temp`]), its mode and
/// owner set on the descriptor, fsync, `renameat`, fsync of `dir`. On failure (a full disk) the
/// temp file is removed and the old content stays. The one atomic write of ClawFS: the daemon's
/// files in the store and the tools' edits both go through it.
pub fn write_atomic(dir: impl AsFd, name: &str, bytes: &[u8], how: FileMode) -> io::Result<()> {
    write_atomic_with(dir, name, bytes, how, |_| Ok(()))
}

/// [`write_atomic`], with `prepare` run on the new file before it takes the name (to give it
/// the attributes of the file it replaces).
pub fn write_atomic_with(
    dir: impl AsFd,
    name: &str,
    bytes: &[u8],
    how: FileMode,
    prepare: impl FnOnce(&File) -> io::Result<()>,
) -> io::Result<()> {
    replace(dir, name, bytes, how, prepare, true)
}

/// [`write_atomic`] of a new file: refused with `AlreadyExists` (and nothing changed) when
/// something took the name meanwhile, instead of replacing it.
pub fn write_new(dir: impl AsFd, name: &str, bytes: &[u8], how: FileMode) -> io::Result<()> {
    write_to(dir, name, bytes, how, |_| Ok(()), (true, false))
}

/// [`write_atomic`] without its two fsyncs, for a writer that makes a whole batch durable at
/// once (`syncfs`) before anything records it: a crash may lose the new file, never mix it.
pub fn write_atomic_unsynced(
    dir: impl AsFd,
    name: &str,
    bytes: &[u8],
    how: FileMode,
) -> io::Result<()> {
    replace(dir, name, bytes, how, |_| Ok(()), false)
}

fn replace(
    dir: impl AsFd,
    name: &str,
    bytes: &[u8],
    how: FileMode,
    prepare: impl FnOnce(&File) -> io::Result<()>,
    synced: bool,
) -> io::Result<()> {
    write_to(dir, name, bytes, how, prepare, (synced, true))
}

/// Writes `bytes` to a new temporary file and gives it the name `name`: `(synced, replacing)`
/// say whether it is made durable, and whether it may replace what has the name.
fn write_to(
    dir: impl AsFd,
    name: &str,
    bytes: &[u8],
    how: FileMode,
    prepare: impl FnOnce(&File) -> io::Result<()>,
    (synced, replacing): (bool, bool),
) -> io::Result<()> {
    single(name)?;
    let (tmp, mut f) = create_temp(&dir, how.mode & 0o600)?;
    let written = (|| {
        prepare(&f)?;
        rustix::fs::fchmod(&f, Mode::from_raw_mode(how.mode))?;
        if let Some((uid, gid)) = how.owner {
            rustix::fs::fchown(
                &f,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )?;
        }
        f.write_all(bytes)?;
        if synced {
            f.sync_all()?;
        }
        match replacing {
            true => rename(&dir, &tmp, &dir, name)?,
            false => rustix::fs::renameat_with(
                &dir,
                tmp.as_str(),
                &dir,
                name,
                rustix::fs::RenameFlags::NOREPLACE,
            )?,
        }
        match synced {
            true => sync_dir(&dir),
            false => Ok(()),
        }
    })();
    if written.is_err() {
        let _ = unlink(&dir, &tmp);
    }
    written
}

/// fsyncs a folder, also through an `O_PATH` descriptor (which cannot be synced itself).
pub fn sync_dir(dir: impl AsFd) -> io::Result<()> {
    match rustix::fs::fsync(&dir) {
        Err(Errno::BADF) => {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let real = rustix::fs::openat(&dir, ".", flags, Mode::empty())?;
            Ok(rustix::fs::fsync(&real)?)
        }
        other => Ok(other?),
    }
}

/// `n` random bytes as lowercase hex.
fn random_hex(n: usize) -> io::Result<String> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| io::Error::other(format!("no random bytes: {e}")))?;
    Ok(hex::encode(b))
}

/// Renames `from` in `from_dir` to `to` in `to_dir`, replacing `to`.
pub fn rename(from_dir: impl AsFd, from: &str, to_dir: impl AsFd, to: &str) -> io::Result<()> {
    single(from)?;
    single(to)?;
    Ok(rustix::fs::renameat(from_dir, from, to_dir, to)?)
}

/// Removes the file (or symlink) `name` from `dir`.
pub fn unlink(dir: impl AsFd, name: &str) -> io::Result<()> {
    single(name)?;
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
}

/// The `*at` helpers act on one name, never a path: refuse anything else.
pub fn single(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{name}' is not a single file name"),
        ));
    }
    Ok(())
}

/// [`write_atomic`] of `name` in the directory `dir`, opened `O_NOFOLLOW`, with `mode`: for
/// directories only root can write (the store's private area, `system/`).
pub fn atomic_write(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::open(dir, flags, Mode::empty())?;
    write_atomic(dir.as_fd(), name, bytes, FileMode::mode(mode))
}
