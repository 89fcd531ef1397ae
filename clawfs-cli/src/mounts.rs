//! Reading `/proc/self/mountinfo`: which ClawFS mounts exist and which stores they serve, and
//! from there the mount of a store and the store of a mount, for the commands that work through
//! the mount (`clawfs run`, `mcp`, `search`).

use std::io;
use std::path::{Path, PathBuf};

use clawfs_store::mountinfo::{clawfs_mounts, MountEntry};

/// Why a command could not find the mount it works through.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// No ClawFS mount serves the store.
    #[error("the store {store} is not mounted: mount it (clawfs mount DIR --store {store}) or name its mount with --mount")]
    NotMounted {
        /// The store.
        store: PathBuf,
    },
    /// `--mount` names a directory that is not a ClawFS mount.
    #[error("--mount {mount} is not a ClawFS mount; the store {store} {served}")]
    NotClawfs {
        /// The directory given.
        mount: PathBuf,
        /// The store the command works on.
        store: PathBuf,
        /// Where that store is served, as words.
        served: Served,
    },
    /// `--mount` names the mount of another store.
    #[error("--mount {mount} serves the store {serves}, not {store}; the store {store} {served}")]
    OtherStore {
        /// The directory given.
        mount: PathBuf,
        /// The store that mount serves.
        serves: String,
        /// The store the command works on.
        store: PathBuf,
        /// Where that store is served, as words.
        served: Served,
    },
    /// `--mount` without `--store` names a directory that is not a ClawFS mount.
    #[error("--mount {0} is not a ClawFS mount (and no --store names the store)")]
    NoStore(PathBuf),
    /// mountinfo could not be read.
    #[error("reading /proc/self/mountinfo: {0}")]
    Mountinfo(#[source] io::Error),
}

/// Where a store is served, for [`MountError`]'s messages.
#[derive(Debug)]
pub struct Served(Option<PathBuf>);

impl std::fmt::Display for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(m) => write!(
                f,
                "is mounted at {} (leave out --mount to use it)",
                m.display()
            ),
            None => write!(f, "is not mounted (clawfs mount DIR --store STORE)"),
        }
    }
}

fn read_mounts() -> Result<Vec<MountEntry>, MountError> {
    clawfs_mounts().map_err(MountError::Mountinfo)
}

/// Whether the mount `m` serves the store at `store` (a canonical path, as the daemon names
/// its store in the mount's source).
fn serves(m: &MountEntry, store: &Path) -> bool {
    Path::new(&m.source) == store
}

/// The mount of the store at `store` (its canonical root) the command works through:
/// `requested` (`--mount`) when it is a ClawFS mount of that very store, else an error naming
/// both; without `requested`, where the store's daemon says it is mounted (`daemon`, from
/// `.clawfs/daemon.json`) if mountinfo agrees, else any mount of the store.
pub fn mount_of_store(
    store: &Path,
    daemon: Option<&Path>,
    requested: Option<&Path>,
) -> Result<PathBuf, MountError> {
    let mounts = read_mounts()?;
    let ours: Vec<&MountEntry> = mounts.iter().filter(|m| serves(m, store)).collect();
    let found = daemon
        .and_then(|d| ours.iter().rev().find(|m| m.mount_point == d))
        .or(ours.last())
        .map(|m| m.mount_point.clone());
    let Some(requested) = requested else {
        return found.ok_or_else(|| MountError::NotMounted {
            store: store.to_path_buf(),
        });
    };
    // A directory that is not there is no mount of the store either.
    let canonical = std::fs::canonicalize(requested).unwrap_or_else(|_| requested.to_path_buf());
    match mounts.iter().rev().find(|m| m.mount_point == canonical) {
        Some(m) if serves(m, store) => Ok(canonical),
        Some(m) => Err(MountError::OtherStore {
            mount: requested.to_path_buf(),
            serves: m.source.clone(),
            store: store.to_path_buf(),
            served: Served(found),
        }),
        None => Err(MountError::NotClawfs {
            mount: requested.to_path_buf(),
            store: store.to_path_buf(),
            served: Served(found),
        }),
    }
}

/// The mount of the store `store` (`--store`, else the default store) the command works
/// through: see [`mount_of_store`]. Works for a caller who may not read the store: its
/// daemon's record then only goes unread.
pub fn served_mount(
    store: &Option<PathBuf>,
    requested: Option<&Path>,
) -> Result<PathBuf, MountError> {
    let path = store_path(store);
    let root = std::fs::canonicalize(&path).unwrap_or(path);
    let daemon = clawfs_core::store::Store::open(&root)
        .ok()
        .and_then(|s| s.daemon_info());
    mount_of_store(&root, daemon.map(|d| d.mountpoint).as_deref(), requested)
}

/// The store the ClawFS mount at `mount` serves.
pub fn store_of_mount(mount: &Path) -> Result<PathBuf, MountError> {
    let canonical = std::fs::canonicalize(mount).unwrap_or_else(|_| mount.to_path_buf());
    read_mounts()?
        .into_iter()
        .rev()
        .find(|m| m.mount_point == canonical)
        .map(|m| PathBuf::from(m.source))
        .ok_or_else(|| MountError::NoStore(mount.to_path_buf()))
}

/// The store path a command acts on.
pub fn store_path(arg: &Option<PathBuf>) -> PathBuf {
    arg.clone()
        .unwrap_or_else(clawfs_core::store::Store::default_path)
}

/// The store a command works on: `--store`; else, given only `--mount`, the store that mount
/// serves; else the default store.
pub fn store_for(store: &Option<PathBuf>, mount: Option<&Path>) -> Result<PathBuf, MountError> {
    match (store, mount) {
        (None, Some(m)) => store_of_mount(m),
        (s, _) => Ok(store_path(s)),
    }
}

/// Unmounts `mp`; `lazy` detaches it even while files are open.
pub fn unmount(mp: &Path, lazy: bool) -> io::Result<()> {
    let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
