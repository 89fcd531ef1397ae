//! Hosts that share one store: each runs its own daemon over its own mount of a distributed
//! POSIX file system (JuiceFS) that holds the store, so the store's files are the only thing
//! the hosts share. A store no host has joined is served by one daemon, as always.
//!
//! ```text
//! <store>/.clawfs/hosts/<name>/
//!   host.json     the host joined: when, and from which machine
//!   lock          flock()ed by the daemon serving as this host
//!   daemon.json   that daemon, with its lease (renewed while it serves)
//!   audit/        this host's own audit chain
//! ```
//!
//! Once one host has joined, every daemon must say which host it is (`clawfs mount --host`,
//! `CLAWFS_HOST`, or the name `clawfs host join` left in [`LOCAL_HOST_FILE`]); a host that has
//! not joined is refused. "Already served" is decided per host: by the host's lock while its
//! daemon lives, and by the lease its daemon renews, which another machine's claim outlives by
//! at most [`LEASE_TTL`].

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use clawfs_store::atomic::atomic_write;
use clawfs_store::layout::PRIVATE_DIR;

/// The folder of the private area holding one folder per joined host.
pub const HOSTS_DIR: &str = "hosts";
/// Where `clawfs host join` records which host this machine is, for later commands.
pub const LOCAL_HOST_FILE: &str = "/etc/clawfs/host";
/// The environment variable naming this machine's host (over [`LOCAL_HOST_FILE`]).
pub const HOST_ENV: &str = "CLAWFS_HOST";
/// How often a serving daemon renews its lease.
pub const LEASE_RENEW: Duration = Duration::from_secs(2);
/// How long a lease holds after its last renewal: a host whose daemon died (with its machine)
/// can be served from another machine after this.
pub const LEASE_TTL: Duration = Duration::from_secs(15);

/// A host's name: a DNS label (`[a-z0-9][a-z0-9-]*`, at most 63 bytes), so that it is a safe
/// file name and reads the same everywhere.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostName(String);

/// Why a name is not a host name.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a host name: use 1 to 63 of a-z, 0-9 and '-', not starting with '-'")]
pub struct BadHostName(pub String);

impl HostName {
    /// Checks `name`.
    pub fn new(name: &str) -> Result<Self, BadHostName> {
        match clawfs_store::names::is_host_name(name) {
            true => Ok(Self(name.to_string())),
            false => Err(BadHostName(name.to_string())),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for HostName {
    type Error = BadHostName;
    fn try_from(s: String) -> Result<Self, BadHostName> {
        Self::new(&s)
    }
}

impl From<HostName> for String {
    fn from(h: HostName) -> String {
        h.0
    }
}

impl std::fmt::Display for HostName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What `host.json` records.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Joined {
    /// The host.
    pub name: HostName,
    /// RFC 3339 time of the join.
    pub joined_at: String,
    /// The machine the join was made on (its `hostname`).
    pub joined_from: String,
}

/// The variable naming the folder where hosts keep their caches of a shared store
/// ([`cache_dir`]).
pub const CACHE_DIR_ENV: &str = "CLAWFS_CACHE_DIR";

/// This host's own folder on local disk for what it need not share of the store at
/// `store_root` (the search index it writes, the replicas it searches): a folder named for the
/// host and the store beneath `$CLAWFS_CACHE_DIR`, else `/var/cache/clawfs` for root, else
/// `$XDG_CACHE_HOME/clawfs` or `~/.cache/clawfs`. Created private; refused unless it and its
/// parent are real folders of this user that nobody else may write.
pub fn cache_dir(store_root: &Path, host: &HostName) -> io::Result<PathBuf> {
    let base = match std::env::var_os(CACHE_DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        // SAFETY: geteuid has no preconditions.
        None if unsafe { libc::geteuid() } == 0 => PathBuf::from("/var/cache/clawfs"),
        None => match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
            Some(xdg) => PathBuf::from(xdg).join("clawfs"),
            None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into()))
                .join(".cache/clawfs"),
        },
    };
    cache_dir_in(&base, store_root, host)
}

/// [`cache_dir`] beneath the folder `base`.
fn cache_dir_in(base: &Path, store_root: &Path, host: &HostName) -> io::Result<PathBuf> {
    use sha2::Digest;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(base)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let refuse = |d: &Path, why: &str| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{}: {why}", d.display()),
        )
    };
    let private = |d: &Path| -> io::Result<()> {
        let meta = fs::symlink_metadata(d)?;
        if meta.file_type().is_symlink() || !meta.is_dir() {
            return Err(refuse(d, "not a real folder (a symlink?)"));
        }
        if meta.uid() != me || meta.mode() & 0o022 != 0 {
            return Err(refuse(
                d,
                &format!("must be a folder of uid {me} that nobody else may write"),
            ));
        }
        Ok(())
    };
    private(base)?;
    // Every folder above it: root's or this user's, and writable by others only if sticky
    // (/tmp), so that nobody else can swap the cache folder for another.
    for above in fs::canonicalize(base)?.ancestors().skip(1) {
        let meta = fs::metadata(above)?;
        let shared = meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0;
        if (meta.uid() != 0 && meta.uid() != me) || shared {
            return Err(refuse(
                above,
                "a folder above the cache folder that another user may change",
            ));
        }
    }
    let store = fs::canonicalize(store_root)?;
    let digest = sha2::Sha256::digest(store.as_os_str().as_encoded_bytes());
    let dir = base.join(format!("{}-{}", host.as_str(), hex::encode(&digest[..8])));
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    private(&dir)?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// The most a `host.json` may be.
const HOST_FILE_MAX: u64 = 64 << 10;

/// The private area's folder of every host.
pub fn hosts_dir(store_root: &Path) -> PathBuf {
    store_root.join(PRIVATE_DIR).join(HOSTS_DIR)
}

/// The private folder of `host`.
pub fn host_dir(store_root: &Path, host: &HostName) -> PathBuf {
    hosts_dir(store_root).join(host.as_str())
}

/// The hosts that have joined the store at `store_root`, by name (none: the store is served
/// by one daemon, as a store of one machine).
pub fn joined(store_root: &Path) -> io::Result<Vec<Joined>> {
    joined_beneath(clawfs_store::beneath::open_root(store_root)?.as_fd())
}

/// [`joined`], of the store whose root is opened as `root`.
pub fn joined_beneath(root: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<Joined>> {
    use clawfs_store::beneath;
    // By descriptor beneath the store root, never through a symlink, each `host.json` a
    // regular file read up to a limit: any host's root can plant things in this folder, which
    // every command and daemon of every host lists.
    let dir = match beneath::open_dir(root, &Path::new(PRIVATE_DIR).join(HOSTS_DIR)) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut hosts = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let Some(name) = entry
            .file_name()
            .to_str()
            .ok()
            .and_then(|n| HostName::new(n).ok())
        else {
            continue;
        };
        let record = Path::new(name.as_str()).join("host.json");
        let Ok(Some(text)) = beneath::read(dir.as_fd(), &record, HOST_FILE_MAX) else {
            continue;
        };
        match serde_json::from_slice::<Joined>(&text) {
            Ok(j) if j.name == name => hosts.push(j),
            _ => continue,
        }
    }
    hosts.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(hosts)
}

/// Whether `host` has joined.
pub fn has_joined(store_root: &Path, host: &HostName) -> bool {
    joined(store_root).is_ok_and(|j| j.iter().any(|h| &h.name == host))
}

/// Records that `host` joins the store; `false` if it already had.
pub fn join(store_root: &Path, host: &HostName) -> io::Result<bool> {
    if has_joined(store_root, host) {
        return Ok(false);
    }
    let root = clawfs_store::beneath::open_root(store_root)?;
    let rel = Path::new(PRIVATE_DIR).join(HOSTS_DIR).join(host.as_str());
    let dir = clawfs_store::beneath::create_dir_all(root.as_fd(), &rel, 0o755, None)?;
    let record = Joined {
        name: host.clone(),
        joined_at: clawfs_store::clock::now_rfc3339(),
        joined_from: machine_name(),
    };
    let json = serde_json::to_vec_pretty(&record).expect("Joined serialises");
    clawfs_store::beneath::write_atomic(
        dir.as_fd(),
        "host.json",
        &json,
        clawfs_store::beneath::FileMode::mode(0o644),
    )?;
    Ok(true)
}

/// This machine's host, as named by `explicit` (`--host`), else [`HOST_ENV`], else
/// [`LOCAL_HOST_FILE`]; `None` when none names one.
pub fn local_host(explicit: Option<&str>) -> Result<Option<HostName>, BadHostName> {
    let named = match explicit {
        Some(n) => Some(n.to_string()),
        None => std::env::var(HOST_ENV)
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| {
                fs::read_to_string(LOCAL_HOST_FILE)
                    .ok()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
            }),
    };
    named.map(|n| HostName::new(&n)).transpose()
}

/// Records in [`LOCAL_HOST_FILE`] that this machine is `host`.
pub fn set_local_host(host: &HostName) -> io::Result<()> {
    let path = Path::new(LOCAL_HOST_FILE);
    let dir = path.parent().expect("an absolute file");
    fs::create_dir_all(dir)?;
    atomic_write(dir, "host", format!("{host}\n").as_bytes(), 0o644)
}

/// This machine's name (`uname -n`), for the records.
pub fn machine_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

/// This boot of this machine: a lease of the same boot whose daemon is gone (its lock is free)
/// is taken over at once; another boot's holds until it expires.
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

/// Seconds since the epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether a lease last renewed at `renewed_at` (seconds since the epoch) still holds at `now`.
pub fn lease_holds(renewed_at: u64, now: u64) -> bool {
    now.saturating_sub(renewed_at) < LEASE_TTL.as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_folder_someone_else_could_change_is_refused_with_its_reason() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        fs::create_dir(&store).unwrap();
        let a = HostName::new("a").unwrap();
        let good = cache_dir_in(&tmp.path().join("cache"), &store, &a).unwrap();
        assert!(good.starts_with(tmp.path().join("cache")));
        assert_eq!(
            cache_dir_in(&tmp.path().join("cache"), &store, &a).unwrap(),
            good
        );
        // A symlink to a folder elsewhere: refused, nothing made where it points.
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tmp.path().join("link")).unwrap();
        let e = cache_dir_in(&tmp.path().join("link"), &store, &a).unwrap_err();
        assert!(e.to_string().contains("not a real folder"), "{e}");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        // Writable by others, itself or a folder above it (without the sticky bit).
        let open = tmp.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = cache_dir_in(&open, &store, &a).unwrap_err();
        assert!(e.to_string().contains("nobody else may write"), "{e}");
        let e = cache_dir_in(&open.join("below"), &store, &a).unwrap_err();
        assert!(e.to_string().contains("another user may change"), "{e}");
    }

    #[test]
    fn host_names_are_dns_labels() {
        for good in ["a", "host-b", "h1", "0"] {
            HostName::new(good).unwrap();
        }
        let long = "x".repeat(64);
        for bad in ["", "-a", "A", "a/b", "..", "a.b", "a b", long.as_str()] {
            assert!(HostName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn joining_is_recorded_once_and_listed() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(PRIVATE_DIR)).unwrap();
        assert!(joined(dir.path()).unwrap().is_empty());
        let a = HostName::new("a").unwrap();
        assert!(join(dir.path(), &a).unwrap());
        assert!(!join(dir.path(), &a).unwrap());
        join(dir.path(), &HostName::new("b").unwrap()).unwrap();
        // A folder without its record, or whose record names another host, is no host.
        fs::create_dir_all(hosts_dir(dir.path()).join("c")).unwrap();
        fs::create_dir_all(hosts_dir(dir.path()).join("d")).unwrap();
        fs::copy(
            host_dir(dir.path(), &a).join("host.json"),
            hosts_dir(dir.path()).join("d/host.json"),
        )
        .unwrap();
        let names: Vec<_> = joined(dir.path())
            .unwrap()
            .into_iter()
            .map(|j| j.name.to_string())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_lease_holds_for_its_ttl() {
        let ttl = LEASE_TTL.as_secs();
        assert!(lease_holds(100, 100));
        assert!(lease_holds(100, 100 + ttl - 1));
        assert!(!lease_holds(100, 100 + ttl));
    }
}
