//! The index folders on the shared volume, as the leases reach them: by descriptor beneath
//! the store root, never following a symlink or `..` at any step, regular files only, opened
//! without blocking, and read up to a limit. Root on another host can plant anything there (a
//! symlink to this host's own disk, a FIFO, a sparse terabyte); none of it may redirect, stall
//! or exhaust this host's daemon.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clawfs_store::beneath;
use clawfs_store::layout::PRIVATE_DIR;
use rustix::fs::{AtFlags, OFlags};

/// The folder of every workspace's index, in the private area.
const INDEX_DIR: &str = "index";
/// The folder of the hosts that joined, in the private area.
const HOSTS_DIR: &str = "hosts";

/// The store's `.clawfs/index/`, reached beneath the store root.
pub(super) struct Volume {
    root: OwnedFd,
}

/// What a workspace's index folder lists: a name and its change time.
pub(super) struct Entry {
    pub name: String,
    pub modified: SystemTime,
}

impl Volume {
    /// The index folders of the store at `store_root`.
    pub fn open(store_root: &Path) -> io::Result<Volume> {
        Ok(Volume {
            root: beneath::open_root(store_root)?,
        })
    }

    fn rel(workspace: &str) -> io::Result<PathBuf> {
        beneath::check_name(OsStr::new(workspace))?;
        Ok(Path::new(PRIVATE_DIR).join(INDEX_DIR).join(workspace))
    }

    /// `workspace`'s index folder, made (the daemon's alone) where missing.
    pub fn dir(&self, workspace: &str) -> io::Result<OwnedFd> {
        beneath::create_dir_all(self.root.as_fd(), &Self::rel(workspace)?, 0o700, None)
    }

    /// `workspace`'s index folder if it exists.
    fn existing_dir(&self, workspace: &str) -> io::Result<OwnedFd> {
        beneath::open_dir(self.root.as_fd(), &Self::rel(workspace)?)
    }

    /// Opens (creating) the regular file `name` in `workspace`'s folder for writing: the
    /// lease's lock file.
    pub fn lock_file(&self, workspace: &str, name: &str) -> io::Result<File> {
        let dir = self.dir(workspace)?;
        let fd = beneath::open_file_mode(
            dir.as_fd(),
            Path::new(name),
            OFlags::RDWR | OFlags::CREATE,
            0o600,
        )?;
        Ok(File::from(fd))
    }

    /// The entries of `workspace`'s folder whose names start with `prefix`, with their
    /// change times (not followed if symlinks). None if there is no folder.
    pub fn entries(&self, workspace: &str, prefix: &str) -> Vec<Entry> {
        let Ok(dir) = self.existing_dir(workspace) else {
            return Vec::new();
        };
        let Ok(list) = rustix::fs::Dir::read_from(&dir) else {
            return Vec::new();
        };
        list.flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str().ok()?.to_string();
                if !name.starts_with(prefix) {
                    return None;
                }
                let st = rustix::fs::statat(&dir, &*name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
                let modified = SystemTime::UNIX_EPOCH
                    + std::time::Duration::new(
                        st.st_mtime.max(0) as u64,
                        st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
                    );
                Some(Entry { name, modified })
            })
            .collect()
    }

    /// The change time of the regular file `name` in `workspace`'s folder, if there is one.
    pub fn modified(&self, workspace: &str, name: &str) -> Option<SystemTime> {
        let file = self.open_regular(workspace, name).ok()??;
        file.metadata().and_then(|m| m.modified()).ok()
    }

    /// The regular file `name` in `workspace`'s folder, opened for reading; `None` if missing.
    /// A symlink, a FIFO, a device or a folder there is an error.
    pub fn open_regular(&self, workspace: &str, name: &str) -> io::Result<Option<File>> {
        let dir = match self.existing_dir(workspace) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match beneath::open_file(dir.as_fd(), Path::new(name), OFlags::RDONLY) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The bytes of the regular file `name` in `workspace`'s folder, at most `max` (a larger
    /// file is an error); `None` if missing.
    pub fn read(&self, workspace: &str, name: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let Some(file) = self.open_regular(workspace, name)? else {
            return Ok(None);
        };
        if file.metadata()?.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name} is larger than {max} bytes"),
            ));
        }
        let mut bytes = Vec::new();
        file.take(max).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// Replaces `name` in `workspace`'s folder with `bytes`, atomically.
    pub fn write(&self, workspace: &str, name: &str, bytes: &[u8]) -> io::Result<()> {
        let dir = self.dir(workspace)?;
        beneath::write_atomic(dir.as_fd(), name, bytes, beneath::FileMode::mode(0o600))
    }

    /// Replaces `name` in `workspace`'s folder with the whole of `from`: written to a new file
    /// of an unpredictable name beside it, synced, renamed over.
    pub fn replace_from(&self, workspace: &str, name: &str, from: &mut File) -> io::Result<()> {
        let dir = self.dir(workspace)?;
        let tmp = format!("{TMP_PREFIX}{}", crate::snapshot::random_hex());
        let fd = beneath::open(
            dir.as_fd(),
            Path::new(&tmp),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            0o600,
        )?;
        let mut to = File::from(fd);
        let done = io::copy(from, &mut to)
            .and_then(|_| to.sync_all())
            .and_then(|()| Ok(rustix::fs::renameat(&dir, &*tmp, &dir, name)?));
        if done.is_err() {
            let _ = rustix::fs::unlinkat(&dir, &*tmp, AtFlags::empty());
        }
        done
    }

    /// Removes what a holder that died left of its copies in `workspace`'s folder.
    pub fn remove_unfinished(&self, workspace: &str) {
        let Ok(dir) = self.existing_dir(workspace) else {
            return;
        };
        for e in self.entries(workspace, TMP_PREFIX) {
            let _ = rustix::fs::unlinkat(&dir, &*e.name, AtFlags::empty());
        }
    }

    /// The hosts that joined the store (a folder with a `host.json` each).
    pub fn joined(&self) -> Vec<String> {
        let rel = Path::new(PRIVATE_DIR).join(HOSTS_DIR);
        let Ok(dir) = beneath::open_dir(self.root.as_fd(), &rel) else {
            return Vec::new();
        };
        let Ok(list) = rustix::fs::Dir::read_from(&dir) else {
            return Vec::new();
        };
        list.flatten()
            .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
            .filter(|h| h != "." && h != "..")
            .filter(|h| {
                beneath::open_file(dir.as_fd(), &Path::new(h).join("host.json"), OFlags::RDONLY)
                    .is_ok()
            })
            .collect()
    }
}

/// The start of the names of unfinished copies.
const TMP_PREFIX: &str = ".publish-";
