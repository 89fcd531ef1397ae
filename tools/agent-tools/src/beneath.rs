//! Descriptor-relative file access, so no tool operation can be redirected out of the workspace.
//!
//! A tool first resolves the request to a real, symlink-free workspace-relative path (`paths.rs`)
//! and checks the policy on it. Acting on that path as a string would look it up a second time,
//! and a caller swapping a checked folder for a symlink in between could send the operation
//! anywhere. So every open of an existing object goes through [`open`]: `openat2` relative to a
//! directory descriptor (the workspace root, an opened parent, the trash or the backups) with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`. The lookup can't leave that
//! directory, and any symlink on the way fails it. Because the paths given are already
//! symlink-free, a symlink met here means something changed after the check; the call fails
//! with [`Changed`]. Creating, replacing, renaming and removing use `*at` calls on a single
//! name in an opened parent.

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use rustix::fs::{AtFlags, Dir, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;

pub use clawfs_store::atomic::{
    create, create_temp, rename, single, sync_dir, unlink, write_atomic, write_atomic_unsynced,
    write_atomic_with, write_new, FileMode,
};

/// A folder to look names up in and act on. `O_PATH` needs no read permission, and the caller's
/// permissions are still checked on every lookup through it.
pub(crate) const DIR_PATH: OFlags = OFlags::PATH.union(OFlags::DIRECTORY);
/// A folder to list or fsync.
pub(crate) const DIR_READ: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY);
/// A file to read. `O_NONBLOCK` so a FIFO swapped in cannot hang the call; `O_NOCTTY` so a
/// terminal never becomes the daemon's controlling terminal.
pub(crate) const FILE_READ: OFlags = OFlags::RDONLY.union(OFlags::NONBLOCK).union(OFlags::NOCTTY);
/// An entry itself, whatever it is (symlinks included), for its metadata. Opens nothing for I/O.
pub(crate) const ENTRY: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW);

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The error for a path that gained a symlink, or led out of its base, after it was checked.
#[derive(Debug)]
pub(crate) struct Changed;

impl std::fmt::Display for Changed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the path changed while being used (something on it was replaced by a symlink); try again",
        )
    }
}

impl std::error::Error for Changed {}

/// Whether `e` is a [`Changed`] error.
pub(crate) fn is_changed(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Changed>())
}

/// Opens `rel` (a `/`-separated path without symlinks or `..`; `""` is `dir` itself) beneath
/// `dir`. This is the only way the tools open an existing object.
pub(crate) fn open(dir: impl AsFd, rel: &str, flags: OFlags) -> io::Result<File> {
    let rel = if rel.is_empty() { "." } else { rel };
    match rustix::fs::openat2(dir, rel, flags | OFlags::CLOEXEC, Mode::empty(), RESOLVE) {
        Ok(fd) => Ok(File::from(fd)),
        // ELOOP: a symlink on the way (or at the end, unless ENTRY). EXDEV: the path left `dir`.
        Err(Errno::LOOP) | Err(Errno::XDEV) => Err(io::Error::other(Changed)),
        Err(Errno::NOSYS) => Err(io::Error::other(
            "openat2 is not available (Linux 5.6 or later is needed for the tools)",
        )),
        Err(e) => Err(e.into()),
    }
}

/// `lstat` of one name in `dir`.
pub(crate) fn lstat(dir: impl AsFd, name: &str) -> io::Result<Metadata> {
    single(name)?;
    open(dir, name, ENTRY)?.metadata()
}

/// The target of the symlink `link`, opened with [`ENTRY`]: the very link that was stat'ed,
/// not whatever has its name by now.
pub(crate) fn readlink(link: &File) -> io::Result<PathBuf> {
    let target = rustix::fs::readlinkat(link, "", Vec::new())?;
    Ok(PathBuf::from(std::ffi::OsString::from_vec(
        target.into_bytes(),
    )))
}

/// The UTF-8 names in folder `dir` (without `.` and `..`), unsorted; other names are skipped.
pub(crate) fn list(dir: impl AsFd) -> io::Result<Vec<String>> {
    let mut d = Dir::new(open(dir, "", DIR_READ)?)?;
    let mut names = Vec::new();
    while let Some(e) = d.read() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if let Ok(s) = std::str::from_utf8(name) {
            names.push(s.to_string());
        }
    }
    Ok(names)
}

/// Opens the folder `name` (any bytes, one name) in `dir` for listing, never following a
/// symlink.
pub(crate) fn open_subdir(dir: impl AsFd, name: &std::ffi::OsStr) -> io::Result<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// Whether the calling thread may read `rel` beneath `dir` by its permissions, and list every
/// folder on the way: a name in a folder the caller may enter but not list (0711) is one it
/// could open but not find, so results that name files (search hits) leave it out. A symlink
/// at the end is not followed.
pub fn may_read(dir: impl AsFd, rel: &str) -> bool {
    let readable = |path: &str| {
        rustix::fs::accessat(
            &dir,
            path,
            rustix::fs::Access::READ_OK,
            rustix::fs::AtFlags::EACCESS | rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok()
    };
    let folders = rel.match_indices('/').map(|(i, _)| &rel[..i]);
    readable(rel) && folders.filter(|f| !f.is_empty()).all(readable)
}

/// Creates folder `name` in `dir`.
pub(crate) fn mkdir(dir: impl AsFd, name: &str, mode: u32) -> io::Result<()> {
    single(name)?;
    Ok(rustix::fs::mkdirat(
        dir,
        name,
        Mode::from_bits_truncate(mode),
    )?)
}

/// Opens the folder `comps` below `base` with `flags`, creating the missing ones (with `mode`)
/// one name at a time with `mkdir` (its folder, name and mode). Also returns the index of the
/// first folder created, if any.
pub(crate) fn mkdirs(
    base: impl AsFd,
    comps: &[&str],
    mode: u32,
    flags: OFlags,
    mkdir: &mut dyn FnMut(&File, &str, u32) -> io::Result<()>,
) -> io::Result<(File, Option<usize>)> {
    let mut cur = open(base, "", DIR_PATH)?;
    let mut first_new = None;
    for (i, c) in comps.iter().enumerate() {
        cur = match open(&cur, c, DIR_PATH) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match mkdir(&cur, c, mode) {
                    Ok(()) => {
                        first_new.get_or_insert(i);
                    }
                    // Created meanwhile by someone else: use it.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                open(&cur, c, DIR_PATH)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok((open(&cur, "", flags)?, first_new))
}

/// How many of the folders `comps` below `base` are missing (all those from the first that
/// is), for a charge before [`mkdirs`] makes them.
pub(crate) fn missing_dirs(base: impl AsFd, comps: &[&str]) -> io::Result<usize> {
    let mut cur = open(base, "", DIR_PATH)?;
    for (i, c) in comps.iter().enumerate() {
        cur = match open(&cur, c, DIR_PATH) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(comps.len() - i),
            Err(e) => return Err(e),
        };
    }
    Ok(0)
}

/// Renames without ever replacing an existing `to` (`RENAME_NOREPLACE`, with a
/// check-then-rename fallback on filesystems that lack it).
pub(crate) fn rename_noreplace(
    from_dir: impl AsFd,
    from: &str,
    to_dir: impl AsFd,
    to: &str,
) -> io::Result<()> {
    single(from)?;
    single(to)?;
    match rustix::fs::renameat_with(&from_dir, from, &to_dir, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(Errno::INVAL) | Err(Errno::NOSYS) => {
            if lstat(&to_dir, to).is_ok() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            rename(from_dir, from, to_dir, to)
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes the empty folder `name` from `dir`.
pub(crate) fn rmdir(dir: impl AsFd, name: &str) -> io::Result<()> {
    single(name)?;
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn open_stays_beneath_and_refuses_symlinks() {
        let t = tempfile::TempDir::new().unwrap();
        let base = t.path().join("base");
        std::fs::create_dir_all(base.join("d")).unwrap();
        std::fs::write(base.join("d/f"), "in").unwrap();
        std::fs::write(t.path().join("secret"), "out").unwrap();
        symlink("d", base.join("ld")).unwrap();
        symlink("../secret", base.join("up")).unwrap();
        let root = rustix::fs::open(&base, DIR_PATH, Mode::empty()).unwrap();
        assert_eq!(
            std::io::read_to_string(open(&root, "d/f", FILE_READ).unwrap()).unwrap(),
            "in"
        );
        for rel in ["ld/f", "up", "../secret", "d/../../secret"] {
            let e = open(&root, rel, FILE_READ).unwrap_err();
            assert!(is_changed(&e), "{rel}: {e}");
        }
        // ENTRY opens the link itself.
        assert!(lstat(&root, "up").unwrap().file_type().is_symlink());
        let link = open(&root, "up", ENTRY).unwrap();
        assert_eq!(readlink(&link).unwrap(), PathBuf::from("../secret"));
        assert!(lstat(&root, "d/f").is_err(), "lstat takes one name only");
        let mut names = list(&root).unwrap();
        names.sort();
        assert_eq!(names, ["d", "ld", "up"]);
    }

    #[test]
    fn creating_and_renaming_act_on_names_in_a_folder() {
        let t = tempfile::TempDir::new().unwrap();
        let root = rustix::fs::open(t.path(), DIR_PATH, Mode::empty()).unwrap();
        let plain = &mut |d: &File, n: &str, m| mkdir(d, n, m);
        let (d, first) = mkdirs(&root, &["a", "b", "c"], 0o755, DIR_READ, plain).unwrap();
        assert_eq!(first, Some(0));
        let (_, first) = mkdirs(&root, &["a", "b", "c"], 0o755, DIR_READ, plain).unwrap();
        assert_eq!(first, None);
        let (tmp, f) = create_temp(&d, 0o644).unwrap();
        drop(f);
        assert!(tmp.starts_with(".clawfs-tmp-") && tmp.len() == ".clawfs-tmp-".len() + 32);
        assert!(create(&d, &tmp, 0o644).is_err(), "never reuses an entry");
        rename_noreplace(&d, &tmp, &root, "x").unwrap();
        std::fs::write(t.path().join("y"), "").unwrap();
        let e = rename_noreplace(&root, "x", &root, "y").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        unlink(&root, "x").unwrap();
        rmdir(&d, "").unwrap_err();
        let (b, _) = mkdirs(
            &root,
            &["a", "b"],
            0o755,
            DIR_PATH,
            &mut |d: &File, n: &str, m| mkdir(d, n, m),
        )
        .unwrap();
        rmdir(&b, "c").unwrap();
        symlink(t.path(), t.path().join("a/link")).unwrap();
        assert!(is_changed(
            &mkdirs(
                &root,
                &["a", "link", "z"],
                0o755,
                DIR_PATH,
                &mut |d: &File, n: &str, m| mkdir(d, n, m)
            )
            .unwrap_err()
        ));
        assert!(!t.path().join("z").exists());
    }
}
