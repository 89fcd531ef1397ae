//! The backing store: a directory of real files (the six areas) plus a private `.clawfs/`
//! area for ClawFS's own bookkeeping, which the mount never shows.
//!
//! ```text
//! <store>/
//!   .clawfs/format       store format version ("1")
//!   .clawfs/lock         flock()ed by the daemon serving the store
//!   .clawfs/daemon.json  who serves it, while mounted
//!   .clawfs/daemon.log   stderr of a background daemon
//!   .clawfs/hosts/       hosts sharing the store, each with its own lock, daemon.json and
//!                        audit chain (see [`crate::hosts`])
//!   system/ agents/ tools/ workspaces/ vault/ specs/
//! ```

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::hosts::{self, BadHostName, HostName};
use crate::seed;
use clawfs_store::atomic::atomic_write;
use clawfs_store::beneath::FileMode;
use clawfs_store::layout::{DEFAULT_MOUNT, PRIVATE_DIR};

/// The store format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Why a store could not be created, opened or locked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No `.clawfs/format` in the directory.
    #[error("{0} is not a ClawFS store (run `clawfs init --store {0}`)")]
    NotInitialised(PathBuf),
    /// Written by a newer ClawFS.
    #[error("{path} has store format {found}; this clawfs ({version}) reads format {supported}: upgrade clawfs")]
    NewerFormat {
        /// Store path.
        path: PathBuf,
        /// Format found.
        found: u32,
        /// Format supported.
        supported: u32,
        /// This build.
        version: &'static str,
    },
    /// `.clawfs/format` holds something else than a number (not shown: it may not be the
    /// store's own file).
    #[error("{}: unreadable store format (not a format number)", .path.display())]
    BadFormat {
        /// The format file.
        path: PathBuf,
    },
    /// Another daemon serves this store (or this host of it).
    #[error("{} is already served{}", .host.as_ref().map_or_else(|| format!("store {}", path.display()), |h| format!("host {h} of store {}", path.display())), .by.as_deref().map(DaemonInfo::describe).unwrap_or_default())]
    Locked {
        /// Store path.
        path: PathBuf,
        /// The host, for a store that hosts share.
        host: Option<HostName>,
        /// The daemon holding it, if it said.
        by: Option<Box<DaemonInfo>>,
    },
    /// The store is shared by hosts and this daemon did not say which it is.
    #[error("store {} is shared by hosts {}: say which this is (clawfs mount --host NAME, {}, or {})", .path.display(), .joined.join(", "), hosts::HOST_ENV, hosts::LOCAL_HOST_FILE)]
    HostUnnamed {
        /// Store path.
        path: PathBuf,
        /// The hosts that have joined.
        joined: Vec<String>,
    },
    /// The host named has not joined the store.
    #[error("host {host} has not joined store {}{}; an admin joins it with `clawfs host join {host} --store {}`", .path.display(), if .joined.is_empty() { String::new() } else { format!(" (joined: {})", .joined.join(", ")) }, .path.display())]
    HostNotJoined {
        /// Store path.
        path: PathBuf,
        /// The host named.
        host: HostName,
        /// The hosts that have joined.
        joined: Vec<String>,
    },
    /// A host name that is not one.
    #[error(transparent)]
    BadHost(#[from] BadHostName),
    /// The system manifest could not be recorded.
    #[error("recording the system manifest: {0}")]
    Integrity(#[from] clawfs_integrity::IntegrityError),
    /// An I/O error on a store path.
    #[error("{}: {source}", .path.display())]
    Io {
        /// Path involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a running daemon records about itself in `.clawfs/daemon.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DaemonInfo {
    /// Daemon pid.
    pub pid: u32,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// ClawFS version.
    pub version: String,
    /// RFC 3339 start time.
    pub started_at: String,
    /// Whether kernel passthrough is in use.
    pub passthrough: bool,
    /// The host it serves as, in a store that hosts share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostName>,
    /// The machine it runs on (`uname -n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// That machine's boot (`/proc/sys/kernel/random/boot_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// When its lease was last renewed (seconds since the epoch), in a store hosts share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_at: Option<u64>,
}

impl DaemonInfo {
    /// " by pid N at MOUNT[ on MACHINE, lease renewed Ks ago]", for messages.
    fn describe(&self) -> String {
        let mut s = format!(" by pid {} at {}", self.pid, self.mountpoint.display());
        if let (Some(machine), Some(at)) = (&self.machine, self.renewed_at) {
            let ago = hosts::unix_now().saturating_sub(at);
            s.push_str(&format!(" on {machine}, lease renewed {ago}s ago"));
        }
        s
    }
}

/// An opened, initialised store.
pub struct Store {
    root: PathBuf,
    root_dir: File,
    /// Which host this is, in a store that hosts share.
    host: Option<HostName>,
    /// Whether any host has joined the store.
    shared: bool,
    /// In a store that hosts share: this host's folder, opened beneath the root.
    host_dir: Option<std::os::fd::OwnedFd>,
}

/// Held while a daemon serves the store; dropping it releases the lock.
pub struct StoreLock {
    _file: File,
}

/// Whether `init` created the store or found it.
#[derive(Debug, PartialEq, Eq)]
pub enum InitOutcome {
    /// The store was laid out now.
    Created,
    /// It was already initialised; nothing was changed.
    AlreadyInitialised,
}

impl Store {
    /// The default store: `/var/lib/clawfs` for root, else `$XDG_DATA_HOME/clawfs` or
    /// `~/.local/share/clawfs`.
    pub fn default_path() -> PathBuf {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return PathBuf::from("/var/lib/clawfs");
        }
        if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
            return PathBuf::from(xdg).join("clawfs");
        }
        let home = std::env::var_os("HOME").unwrap_or_else(|| "/".into());
        PathBuf::from(home).join(".local/share/clawfs")
    }

    /// Lays out a new store at `path` (creating the directory), or leaves an initialised one
    /// alone. An interrupted init is completed: the format file is written last.
    pub fn init(path: &Path) -> Result<InitOutcome, StoreError> {
        let format = path.join(PRIVATE_DIR).join("format");
        if format.exists() {
            Self::open(path)?;
            return Ok(InitOutcome::AlreadyInitialised);
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(ROOT_MODE)
            .create(path.join(PRIVATE_DIR))
            .map_err(io_err(path))?;
        fs::set_permissions(
            path.join(PRIVATE_DIR),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(io_err(path))?;
        seed::lay_out(path).map_err(io_err(path))?;
        // The manifest of system/ is recorded from what init just wrote.
        let root = rustix::fs::open(
            path,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| io_err(path)(e.into()))?;
        // Written again for the real mount at every mount.
        seed::write_tool_registry(path, Path::new(DEFAULT_MOUNT))?;
        clawfs_integrity::system::record_all(root.as_fd(), &clawfs_store::clock::now_rfc3339())?;
        atomic_write(
            &path.join(PRIVATE_DIR),
            "format",
            format!("{FORMAT_VERSION}\n").as_bytes(),
            0o644,
        )
        .map_err(io_err(&format))?;
        Ok(InitOutcome::Created)
    }

    /// Opens an initialised store.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let format = path.join(PRIVATE_DIR).join("format");
        let root = fs::canonicalize(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => StoreError::NotInitialised(path.to_path_buf()),
            _ => io_err(path)(e),
        })?;
        let root_dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&root)
            .map_err(io_err(&root))?;
        // Beneath the root, a regular file, a few bytes: in a store that hosts share, another
        // host's root could plant a symlink to this machine's files, a FIFO or an endless file.
        let rel = Path::new(PRIVATE_DIR).join("format");
        let content = match clawfs_store::beneath::read(root_dir.as_fd(), &rel, 64) {
            Ok(Some(c)) => c,
            Ok(None) => return Err(StoreError::NotInitialised(path.to_path_buf())),
            Err(e) => return Err(io_err(&format)(e)),
        };
        let found: u32 = std::str::from_utf8(&content)
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .ok_or_else(|| StoreError::BadFormat {
                path: format.clone(),
            })?;
        if found > FORMAT_VERSION {
            return Err(StoreError::NewerFormat {
                path: path.to_path_buf(),
                found,
                supported: FORMAT_VERSION,
                version: crate::VERSION,
            });
        }
        let joined =
            hosts::joined_beneath(root_dir.as_fd()).map_err(io_err(&hosts::hosts_dir(&root)))?;
        let shared = !joined.is_empty();
        // The machine's own name for itself applies to the stores it shares only.
        let host = match shared {
            true => hosts::local_host(None)?,
            false => None,
        };
        let mut store = Store {
            root,
            root_dir,
            host,
            shared,
            host_dir: None,
        };
        store.pin_host_dir()?;
        Ok(store)
    }

    /// In a store that hosts share, opens this host's folder beneath the root, refusing a
    /// symlink at any step, and keeps it: [`Self::host_dir`] names the folder by that
    /// descriptor, so a symlink another host's root puts in its way later redirects nothing.
    fn pin_host_dir(&mut self) -> Result<(), StoreError> {
        self.host_dir = None;
        if !self.shared || self.host.is_none() {
            return Ok(());
        }
        let rel = self.host_rel();
        match clawfs_store::beneath::open_dir(self.root_fd(), &rel) {
            Ok(fd) => self.host_dir = Some(fd),
            // Not joined (yet): refused where it matters ([`Self::lock`]).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io_err(&self.root.join(&rel))(io::Error::new(
                    e.kind(),
                    format!("this host's folder is not a real folder of the store: {e}"),
                )))
            }
        }
        Ok(())
    }

    /// Serves or reads the store as `host` (`clawfs mount --host`), whether or not it has
    /// joined: serving checks that it has ([`Self::lock`]).
    pub fn as_host(mut self, host: &str) -> Result<Store, StoreError> {
        self.host = Some(HostName::new(host)?);
        self.pin_host_dir()?;
        Ok(self)
    }

    /// The host this is, in a store that hosts share.
    pub fn host(&self) -> Option<&HostName> {
        self.host.as_ref()
    }

    /// Whether hosts share the store.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Where this host's own files are (its lock, `daemon.json`, audit chain, saved counts and
    /// handles, acknowledgements): its folder in a store that hosts share, else the private
    /// area.
    pub fn host_dir(&self) -> PathBuf {
        match &self.host_dir {
            // The folder opened beneath the root, by its descriptor (see `pin_host_dir`).
            // `/.`: the descriptor's link is crossed, never the last step, so a `O_NOFOLLOW`
            // open of the folder itself still works.
            Some(fd) => PathBuf::from(format!("/proc/self/fd/{}/.", fd.as_raw_fd())),
            None => self.root.join(self.host_rel()),
        }
    }

    /// [`Self::host_dir`] as people read it: its path in the store.
    pub fn host_dir_shown(&self) -> PathBuf {
        self.root.join(self.host_rel())
    }

    /// [`Self::host_dir`], relative to the store root.
    pub fn host_rel(&self) -> PathBuf {
        match &self.host {
            Some(h) if self.shared => Path::new(PRIVATE_DIR)
                .join(hosts::HOSTS_DIR)
                .join(h.as_str()),
            _ => PathBuf::from(PRIVATE_DIR),
        }
    }

    /// How this host opens the store's vault: as itself when hosts share the store (its own
    /// grant of the master key and keyring, and a host key file on its own disk rather than
    /// in the store, which every host reads: `clawfs_vault::hosts`).
    pub fn vault_config(&self) -> clawfs_vault::VaultConfig {
        let host = self
            .host
            .as_ref()
            .filter(|_| self.shared)
            .map(HostName::as_str);
        clawfs_vault::VaultConfig {
            host: host.map(str::to_string),
            host_key_path: host.map(clawfs_vault::hosts::local_key_file),
            shared: self.shared,
            ..Default::default()
        }
    }

    /// This host's audit chain.
    pub fn audit_dir(&self) -> PathBuf {
        // In a store of one host this is `clawfs_audit::audit_dir`, the private area's.
        self.host_dir().join("audit")
    }

    /// Checks that this daemon may serve the store: as a host that has joined when hosts
    /// share it, as none otherwise.
    fn check_host(&self) -> Result<(), StoreError> {
        let joined = || -> Result<Vec<String>, StoreError> {
            Ok(hosts::joined(&self.root)
                .map_err(io_err(&hosts::hosts_dir(&self.root)))?
                .into_iter()
                .map(|j| j.name.to_string())
                .collect())
        };
        match &self.host {
            None if self.shared => Err(StoreError::HostUnnamed {
                path: self.root.clone(),
                joined: joined()?,
            }),
            None => Ok(()),
            Some(h) if self.shared && hosts::has_joined(&self.root, h) => Ok(()),
            Some(h) => Err(StoreError::HostNotJoined {
                path: self.root.clone(),
                host: h.clone(),
                joined: joined()?,
            }),
        }
    }

    /// Makes the store root and its private area root's alone (0700), as a store made by an
    /// older ClawFS or by hand may not be; returns what changed, for the caller to say so. The
    /// areas keep the modes the mount shows: nobody but root can reach them in the store.
    pub fn close_to_others(&self) -> Result<ModeRepair, StoreError> {
        let mut repair = ModeRepair::default();
        let private = clawfs_store::beneath::open_dir(self.root_fd(), Path::new(PRIVATE_DIR))
            .map_err(io_err(&self.private_dir()))?;
        for (fd, path) in [
            (self.root_fd(), self.root.clone()),
            (private.as_fd(), self.private_dir()),
        ] {
            let st = rustix::fs::fstat(fd).map_err(|e| io_err(&path)(e.into()))?;
            let old = st.st_mode & 0o7777;
            if old != ROOT_MODE {
                rustix::fs::fchmod(fd, rustix::fs::Mode::from_raw_mode(ROOT_MODE))
                    .map_err(|e| io_err(&path)(e.into()))?;
                repair.changed.push((path, old, ROOT_MODE));
            }
        }
        Ok(repair)
    }

    /// Replaces `rel_dir/name` (relative to the store root) atomically, reached by descriptor
    /// with no symlink or `..` at any step: the way to write in a directory an agent or a user
    /// can write through the mount.
    pub fn write_beneath(
        &self,
        rel_dir: &Path,
        name: &str,
        bytes: &[u8],
        how: FileMode,
    ) -> io::Result<()> {
        clawfs_store::beneath::write_atomic_beneath(self.root_fd(), rel_dir, name, bytes, how)
    }

    /// Opens the store at `path`, initialising it first if it has never been (the embedded
    /// default store of `clawfs mount`).
    pub fn open_or_init(path: &Path) -> Result<Store, StoreError> {
        match Self::open(path) {
            Err(StoreError::NotInitialised(_)) => {
                Self::init(path)?;
                Self::open(path)
            }
            other => other,
        }
    }

    /// The store directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A descriptor of the store directory (the mount root's backing directory).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_dir.as_fd()
    }

    /// The private area.
    pub fn private_dir(&self) -> PathBuf {
        self.root.join(PRIVATE_DIR)
    }

    /// Takes the serving lock, failing at once if another daemon holds it. In a store that
    /// hosts share, the lock is this host's, and a lease another machine renewed within
    /// [`hosts::LEASE_TTL`] holds too (that machine's daemon may live while its lock is out of
    /// reach).
    pub fn lock(&self) -> Result<StoreLock, StoreError> {
        self.check_host()?;
        let path = self.host_dir().join("lock");
        // Beneath the store root, never through a symlink at any step: in a store that hosts
        // share, another host's root could otherwise have this one create a file anywhere on
        // its own disk. The host's folder, its audit trail and its log are all reached through
        // this folder, so one that is not a real folder stops the daemon here.
        let file = clawfs_store::beneath::open_file_mode(
            self.root_fd(),
            &self.host_rel().join("lock"),
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE,
            0o600,
        )
        .map(fs::File::from)
        .map_err(io_err(&path))?;
        let locked = || StoreError::Locked {
            path: self.root.clone(),
            host: self.host.clone().filter(|_| self.shared),
            by: self.daemon_info().map(Box::new),
        };
        let exiting_until = std::time::Instant::now() + EXITING_HOLDER_WAIT;
        // SAFETY: flock on a descriptor we own.
        while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_err(&path)(e));
            }
            // A killed daemon is a zombie before it lets go of its descriptors: its other
            // threads (a queue's io_uring, torn down at exit) still hold the lock for a moment.
            if !self.holder_is_exiting() || std::time::Instant::now() >= exiting_until {
                return Err(locked());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if self.shared {
            let held_elsewhere = self.daemon_info().is_some_and(|d| {
                d.boot_id.as_deref() != Some(hosts::boot_id().as_str())
                    && d.renewed_at
                        .is_some_and(|at| hosts::lease_holds(at, hosts::unix_now()))
            });
            if held_elsewhere {
                return Err(locked());
            }
        }
        Ok(StoreLock { _file: file })
    }

    /// Whether the daemon recorded as serving this store is a process of this machine that has
    /// exited but not yet let go of its files (its main thread a zombie).
    fn holder_is_exiting(&self) -> bool {
        let Some(d) = self.daemon_info() else {
            return false;
        };
        if d.boot_id.as_ref().is_some_and(|b| *b != hosts::boot_id()) {
            return false;
        }
        let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", d.pid)) else {
            return false;
        };
        // The state follows the command name, which may itself hold parentheses.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        matches!(state, Some('Z' | 'X'))
    }

    /// The daemon serving this store here, as it recorded itself, once checked to be one: a
    /// process of this machine (its boot) running a ClawFS binary and holding this store's
    /// serving lock. What a command may signal: `daemon.json` is a file of the
    /// store, which in a store that hosts share another host's root can write, so its pid
    /// alone could name any process of this machine.
    pub fn serving_daemon(&self) -> Option<DaemonInfo> {
        let d = self.daemon_info()?;
        if d.boot_id.as_ref().is_some_and(|b| *b != hosts::boot_id()) {
            return None;
        }
        if self.shared && d.boot_id.is_none() {
            return None;
        }
        let exe = fs::read_link(format!("/proc/{}/exe", d.pid)).ok()?;
        let ours = std::env::current_exe().ok();
        let named_clawfs = exe
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "clawfs" || n.starts_with("clawfs "));
        if !named_clawfs && ours.as_deref() != Some(exe.as_path()) {
            return None;
        }
        // It holds this store's serving lock (this host's).
        let lock = self.root.join(self.host_rel()).join("lock");
        let fds = fs::read_dir(format!("/proc/{}/fd", d.pid)).ok()?;
        fds.flatten()
            .any(|fd| fs::read_link(fd.path()).is_ok_and(|to| to == lock))
            .then_some(d)
    }

    /// Reads `name` in this host's folder: a regular file, not followed if a symlink, at most
    /// `max` bytes; `None` if missing or not such a file.
    pub fn read_host_file(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        clawfs_store::beneath::read(self.root_fd(), &self.host_rel().join(name), max)
            .ok()
            .flatten()
    }

    /// What the serving daemon (this host's) recorded, if any.
    pub fn daemon_info(&self) -> Option<DaemonInfo> {
        if self.shared && self.host.is_none() {
            return None;
        }
        // Beneath the store root, a regular file, a bounded read: another host's root cannot
        // make this one read its own disk, a FIFO or an endless file here.
        let rel = self.host_rel().join("daemon.json");
        let text = clawfs_store::beneath::read(self.root_fd(), &rel, 1 << 20).ok()??;
        serde_json::from_slice(&text).ok()
    }

    /// Records the serving daemon (atomically); in a store that hosts share, with its host,
    /// machine and a renewed lease.
    pub fn write_daemon_info(&self, info: &DaemonInfo) -> Result<(), StoreError> {
        let mut info = info.clone();
        if self.shared {
            info.host = self.host.clone();
            info.machine = Some(hosts::machine_name());
            info.boot_id = Some(hosts::boot_id());
            info.renewed_at = Some(hosts::unix_now());
        }
        let json = serde_json::to_vec_pretty(&info).expect("DaemonInfo serialises");
        let dir = self.host_dir();
        atomic_write(&dir, "daemon.json", &json, 0o644).map_err(io_err(&dir))
    }

    /// Forgets the serving daemon.
    pub fn clear_daemon_info(&self) {
        let _ = fs::remove_file(self.host_dir().join("daemon.json"));
    }
}

/// The modes that close the store to everyone but root: agents and users reach its data only
/// through the mount, where the policy and the audit see them.
const ROOT_MODE: u32 = 0o700;
/// How long taking the serving lock waits for a daemon that has exited but still holds it.
const EXITING_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What [`Store::close_to_others`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ModeRepair {
    /// Paths whose mode was tightened, with the old and new modes.
    pub changed: Vec<(PathBuf, u32, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_open_and_newer_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        assert!(matches!(
            Store::open(&path),
            Err(StoreError::NotInitialised(_))
        ));
        assert_eq!(Store::init(&path).unwrap(), InitOutcome::Created);
        assert_eq!(Store::init(&path).unwrap(), InitOutcome::AlreadyInitialised);
        let store = Store::open(&path).unwrap();
        for area in clawfs_store::area::Area::ALL {
            assert!(store.root().join(area.dir_name()).is_dir(), "{area}");
        }
        let lock = store.lock().unwrap();
        assert!(matches!(store.lock(), Err(StoreError::Locked { .. })));
        drop(lock);
        store.lock().unwrap();

        fs::write(path.join(".clawfs/format"), "2\n").unwrap();
        let err = Store::open(&path).err().unwrap();
        assert!(
            matches!(err, StoreError::NewerFormat { found: 2, .. }),
            "{err}"
        );
        fs::write(path.join(".clawfs/format"), "two\n").unwrap();
        assert!(matches!(
            Store::open(&path),
            Err(StoreError::BadFormat { .. })
        ));
    }

    fn record_daemon(store: &Store, pid: u32) {
        store
            .write_daemon_info(&DaemonInfo {
                pid,
                mountpoint: "/clawfs".into(),
                version: "test".into(),
                started_at: "2026-12-02T00:00:00Z".into(),
                passthrough: false,
                host: None,
                machine: None,
                boot_id: None,
                renewed_at: None,
            })
            .unwrap();
    }

    #[test]
    fn the_serving_lock_waits_only_for_a_daemon_that_has_exited() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        Store::init(&path).unwrap();
        let store = Store::open(&path).unwrap();
        // The lock's holder: another open description of the lock file, as a daemon's exiting
        // threads hold theirs after its main thread died.
        let holder = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.join(".clawfs/lock"))
            .unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        // A live daemon on record: refused at once.
        record_daemon(&store, std::process::id());
        let started = std::time::Instant::now();
        assert!(matches!(store.lock(), Err(StoreError::Locked { .. })));
        assert!(started.elapsed() < EXITING_HOLDER_WAIT / 2);
        // A zombie on record: the lock is waited for, and taken once its holder lets go.
        let mut zombie = std::process::Command::new("true").spawn().unwrap();
        let zombie_stat = format!("/proc/{}/stat", zombie.id());
        while !fs::read_to_string(&zombie_stat).unwrap().contains(") Z ") {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        record_daemon(&store, zombie.id());
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(holder);
        });
        store
            .lock()
            .expect("taken once the exited daemon's holder let go");
        letting_go.join().unwrap();
        zombie.wait().unwrap();
    }
}
