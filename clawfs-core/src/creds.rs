//! Who is calling, and acting as them. Mutating calls run with the caller's fsuid, fsgid and
//! supplementary groups on the worker thread, so the backing filesystem applies exactly the
//! POSIX rules it applies natively (ownership of new files, setgid directories, sticky bits,
//! chmod/chown permissions) and files are created as the caller, atomically.

use std::collections::HashMap;
use std::io;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The cache's lock; a panic while it was held left only a cache behind.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process behind a request, as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Effective (fs) uid of the calling thread.
    pub uid: u32,
    /// Effective (fs) gid of the calling thread.
    pub gid: u32,
    /// Id of the calling thread (FUSE reports the thread, not its thread group); 0 for requests
    /// the kernel makes on its own.
    pub pid: u32,
}

impl Caller {
    /// The daemon itself (used by init and internal writes).
    pub const ROOT: Caller = Caller {
        uid: 0,
        gid: 0,
        pid: 0,
    };
}

/// What a caller acts with beyond its uid and gid: its supplementary groups and umask, read
/// from `/proc/<pid>/status` (the kernel does not pass them with the request). Read while the
/// caller waits in its call, so its pid cannot belong to another process yet; a call that runs
/// later (a tool call run at the first read of its descriptor) keeps these, never reads them
/// again by a pid that may have been reused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The caller.
    pub caller: Caller,
    /// Supplementary groups; none for a vanished process.
    pub groups: Vec<libc::gid_t>,
    /// Permission bits cleared from what it creates; 022 when unknown.
    pub umask: u32,
}

/// How long a thread's groups and umask, once read, are used again for its requests. Reading
/// `/proc/<pid>/status` costs more than many a request it serves (about 15 µs); an agent's
/// untar asks for them twice per file. Keyed like the identity cache (pid, uid and gid), with
/// its residual risk: a pid reused within this time by a process of the same uid and gid, or a
/// thread that changed its groups or umask within it, acts with what was read. Both can only
/// narrow what the kernel already allowed: the mount checks permissions itself
/// (`default_permissions`) with the caller's live credentials before the request reaches us,
/// and these serve the backing filesystem's second check and the owner of what is created.
const CREDENTIALS_TTL: Duration = Duration::from_secs(1);
/// Threads remembered at most; past it, expired entries go (all, if none has).
const CREDENTIALS_CACHED: usize = 4096;

type CredentialsKey = (u32, u32, u32);

fn credentials_cache() -> &'static Mutex<HashMap<CredentialsKey, (Instant, Credentials)>> {
    static CACHE: OnceLock<Mutex<HashMap<CredentialsKey, (Instant, Credentials)>>> =
        OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

impl Credentials {
    /// The credentials of `caller` now (as read within [`CREDENTIALS_TTL`]), for a call the
    /// kernel has checked with the caller's live credentials already.
    pub fn of(caller: &Caller) -> Credentials {
        Self::as_of(caller, CREDENTIALS_TTL)
    }

    /// The credentials of `caller` read from `/proc` now, never from the cache: for what the
    /// daemon carries out as the caller with no permission check of the kernel's before it (a
    /// tool call, a search), where the backing filesystem's check is the only one. A pid reused
    /// within [`CREDENTIALS_TTL`] by a process of the same uid and gid but fewer groups would
    /// otherwise act with the groups of the process before it.
    pub fn fresh(caller: &Caller) -> Credentials {
        Self::as_of(caller, Duration::ZERO)
    }

    /// The credentials of `caller`, from the cache if read within `ttl`.
    fn as_of(caller: &Caller, ttl: Duration) -> Credentials {
        if caller.pid == 0 {
            return Self::read(caller);
        }
        let key = (caller.pid, caller.uid, caller.gid);
        let now = Instant::now();
        let cache = credentials_cache();
        // A fresh read (no time to live) has nothing to look up, as `identify_as_of`.
        if !ttl.is_zero() {
            if let Some((at, creds)) = lock(cache).get(&key) {
                if now.duration_since(*at) < ttl {
                    return creds.clone();
                }
            }
        }
        // Read outside the lock: other threads' requests do not wait for this one's /proc.
        let creds = Self::read(caller);
        let mut cached = lock(cache);
        if cached.len() >= CREDENTIALS_CACHED {
            cached.retain(|_, (at, _)| now.duration_since(*at) < CREDENTIALS_TTL);
            if cached.len() >= CREDENTIALS_CACHED {
                cached.clear();
            }
        }
        cached.insert(key, (now, creds.clone()));
        creds
    }

    /// The credentials of `caller`, read from `/proc` now.
    fn read(caller: &Caller) -> Credentials {
        let status = match caller.pid {
            0 => None,
            pid => std::fs::read_to_string(format!("/proc/{pid}/status")).ok(),
        };
        let field = |name: &str| {
            status
                .as_deref()
                .and_then(|s| s.lines().find_map(|l| l.strip_prefix(name)).map(str::trim))
        };
        Credentials {
            caller: *caller,
            groups: field("Groups:")
                .map(|g| {
                    g.split_whitespace()
                        .filter_map(|n| n.parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
            umask: field("Umask:")
                .and_then(|v| u32::from_str_radix(v, 8).ok())
                .unwrap_or(0o022),
        }
    }
}

/// While alive, the current thread's filesystem credentials are the caller's. Dropping it
/// restores the daemon's. Not `Send`: credentials are per thread.
pub struct AsCaller {
    switched: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

fn daemon_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

thread_local! {
    /// The supplementary groups this thread holds, when this module set them last. A thread
    /// keeps the last caller's groups between calls: with fsuid 0 again the daemon acts by its
    /// file capabilities (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, …), which groups add nothing to, and
    /// what it creates takes its fsgid, not its groups. So the next call of the same caller
    /// (nearly every call a queue thread serves) switches only its fsuid and fsgid: the groups'
    /// two commits were a third of the credential switch.
    static THREAD_GROUPS: std::cell::RefCell<Option<Vec<libc::gid_t>>> =
        const { std::cell::RefCell::new(None) };
}

fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    THREAD_GROUPS.with_borrow_mut(|held| {
        if held.as_deref() == Some(groups) {
            return Ok(());
        }
        // Unknown until the call succeeds: a failed setgroups leaves the kernel's choice.
        *held = None;
        // The raw syscall changes only this thread; glibc's setgroups() would change every
        // thread.
        // SAFETY: the pointer and length describe a valid slice of gid_t.
        let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        *held = Some(groups.to_vec());
        Ok(())
    })
}

impl AsCaller {
    /// Switches to `caller`'s credentials. A root caller with gid 0, or a daemon that is not
    /// root (a user mount, where every file belongs to the user anyway), switches nothing.
    pub fn enter(caller: &Caller) -> io::Result<Self> {
        if (caller.uid == 0 && caller.gid == 0) || !daemon_is_root() {
            return Ok(Self::noop());
        }
        Self::enter_with(&Credentials::of(caller))
    }

    fn noop() -> Self {
        Self {
            switched: false,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Switches to credentials read earlier (see [`Credentials`]).
    pub fn enter_with(creds: &Credentials) -> io::Result<Self> {
        let caller = &creds.caller;
        if (caller.uid == 0 && caller.gid == 0) || !daemon_is_root() {
            return Ok(Self::noop());
        }
        set_thread_groups(&creds.groups)?;
        // SAFETY: setfsgid/setfsuid have no memory-safety preconditions; they affect only this
        // thread's credentials, which `Drop` restores.
        unsafe {
            libc::setfsgid(caller.gid);
            libc::setfsuid(caller.uid);
        }
        Ok(Self {
            switched: true,
            _not_send: std::marker::PhantomData,
        })
    }
}

/// Inside an [`AsCaller`] scope, while alive, the current thread acts with the daemon's own
/// filesystem credentials again; dropping it returns to the caller's. For the few steps the
/// daemon takes itself on a caller's behalf (a backup given the file's own owner).
pub struct AsDaemon<'a> {
    caller: Option<&'a Credentials>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl<'a> AsDaemon<'a> {
    /// Switches back to the daemon's credentials from `creds`' (as [`AsCaller::enter_with`]
    /// set them).
    pub fn enter(creds: &'a Credentials) -> io::Result<Self> {
        let c = &creds.caller;
        if (c.uid == 0 && c.gid == 0) || !daemon_is_root() {
            return Ok(Self {
                caller: None,
                _not_send: std::marker::PhantomData,
            });
        }
        // SAFETY: as in `AsCaller`: per-thread credentials, restored by `Drop`.
        unsafe {
            libc::setfsuid(0);
            libc::setfsgid(0);
        }
        set_thread_groups(&[0])?;
        Ok(Self {
            caller: Some(creds),
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for AsDaemon<'_> {
    fn drop(&mut self) {
        let Some(creds) = self.caller else { return };
        // Back to the caller's: the rest of the call must not keep the daemon's rights.
        if let Err(e) = set_thread_groups(&creds.groups) {
            tracing::error!(error = %e, "could not return to the caller's groups");
            // Fail closed: no groups rather than root's.
            let _ = set_thread_groups(&[]);
        }
        // SAFETY: see `AsCaller::enter_with`.
        unsafe {
            libc::setfsgid(creds.caller.gid);
            libc::setfsuid(creds.caller.uid);
        }
    }
}

/// Runs `f` with the daemon's own filesystem uid and gid, whatever caller's the thread has
/// taken on, then returns to those: for the daemon's private files (the store's tables) that a
/// caller's call reads or writes.
pub fn with_daemon_ids<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: per-thread filesystem ids, as in `AsCaller`; each call returns the previous id,
    // which is restored below. Back to fsuid 0 also restores the filesystem capabilities.
    let (uid, gid) = unsafe { (libc::setfsuid(0), libc::setfsgid(0)) };
    let out = f();
    // SAFETY: as above.
    unsafe {
        libc::setfsgid(gid as libc::gid_t);
        libc::setfsuid(uid as libc::uid_t);
    }
    out
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if !self.switched {
            return;
        }
        // SAFETY: see `enter`; restoring root fs credentials also restores the fs capabilities.
        // The caller's groups stay (see `THREAD_GROUPS`).
        unsafe {
            libc::setfsuid(0);
            libc::setfsgid(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// This thread's filesystem uid and groups, as the kernel reports them.
    fn thread_ids() -> (u32, Vec<u32>) {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap()
                .split_whitespace()
                .map(|n| n.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        };
        (field("Uid:")[3], field("Groups:"))
    }

    fn creds(uid: u32, groups: &[u32]) -> Credentials {
        Credentials {
            caller: Caller {
                uid,
                gid: uid,
                pid: 0,
            },
            groups: groups.to_vec(),
            umask: 0o022,
        }
    }

    #[test]
    fn fresh_credentials_are_read_now_whatever_was_cached() {
        if !daemon_is_root() {
            assert!(std::env::var_os("CI").is_none(), "needs root under CI");
            return;
        }
        // A thread of its own, whose groups change between two reads under the same pid, as a
        // reused pid's would.
        std::thread::spawn(|| {
            let caller = Caller {
                uid: 0,
                gid: 0,
                pid: rustix::thread::gettid().as_raw_nonzero().get() as u32,
            };
            set_thread_groups(&[4711]).unwrap();
            assert_eq!(Credentials::of(&caller).groups, [4711]);
            set_thread_groups(&[]).unwrap();
            // Within the time-to-live the cache answers; a fresh read does not.
            assert_eq!(Credentials::of(&caller).groups, [4711]);
            assert!(Credentials::fresh(&caller).groups.is_empty());
            // And the fresh read is what the cache holds now.
            assert!(Credentials::of(&caller).groups.is_empty());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn each_caller_acts_with_its_own_groups_and_the_daemon_with_its_capabilities() {
        if !daemon_is_root() {
            assert!(std::env::var_os("CI").is_none(), "needs root under CI");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // Open to all, so that only the file's own mode refuses the callers.
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let private = dir.path().join("private");
        std::fs::write(&private, "root's").unwrap();
        std::os::unix::fs::chown(&private, Some(4242), Some(4242)).unwrap();
        std::fs::set_permissions(&private, PermissionsExt::from_mode(0o600)).unwrap();
        let shared = dir.path().join("shared");
        std::fs::write(&shared, "group 5555's").unwrap();
        std::os::unix::fs::chown(&shared, Some(4242), Some(5555)).unwrap();
        std::fs::set_permissions(&shared, PermissionsExt::from_mode(0o640)).unwrap();
        // A thread of its own: credentials are per thread.
        std::thread::spawn(move || {
            for (uid, groups) in [
                (1001, vec![5555]),
                (1001, vec![5555]),
                (1002, vec![6666, 7777]),
                (1003, vec![]),
            ] {
                let c = creds(uid, &groups);
                {
                    let _as = AsCaller::enter_with(&c).unwrap();
                    assert_eq!(thread_ids(), (uid, groups.clone()));
                    let denied = std::fs::read(&private).unwrap_err();
                    assert_eq!(denied.raw_os_error(), Some(libc::EACCES));
                    assert_eq!(std::fs::read(&shared).is_ok(), groups.contains(&5555));
                    {
                        let _daemon = AsDaemon::enter(&c).unwrap();
                        assert_eq!(thread_ids(), (0, vec![0]));
                    }
                    assert_eq!(thread_ids(), (uid, groups.clone()));
                }
                // The caller's groups may stay, but the daemon's capabilities are back.
                assert_eq!(thread_ids().0, 0);
                assert_eq!(std::fs::read(&private).unwrap(), b"root's");
            }
        })
        .join()
        .unwrap();
    }
}
