//! How the kernel serves the data of each open regular file: passthrough to the backing file,
//! or through the mount's page cache.
//!
//! Passthrough is best for large files and for writers. Small files opened for reading do
//! better cached: the kernel asks the daemon for their pages once and then serves every later
//! open from its cache, while a passthrough read marks the cached atime stale, so the next
//! `fstat` of the file costs a round trip (`grep -r` pays it for every file).
//!
//! The kernel refuses to mix the two on one inode (an open in the other mode fails with
//! `ETXTBSY`), so each inode counts its open files per mode and a new open joins the mode that
//! is live. The kernel drops its own count before it sends RELEASE, so these counts can only lag
//! behind in the safe direction.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// Read-only opens of files up to this size are served through the page cache.
pub const CACHED_MAX_SIZE: u64 = 256 * 1024;

/// How one open file is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoChoice {
    /// Kernel passthrough to the inode's shared backing file.
    Passthrough,
    /// Through the page cache; `keep_cache`: the pages cached by earlier opens are still good.
    Cached {
        /// Whether the kernel may keep the pages it has.
        keep_cache: bool,
    },
}

#[derive(Debug, Default)]
struct State {
    passthrough: u32,
    cached: u32,
    /// A passthrough writer may have changed the file behind the page cache.
    stale: bool,
    /// Opens for writing not yet released (served either way).
    writers: u32,
    /// Agents may not open the inode for writing (see [`IoMode::seal`]).
    sealed: bool,
}

/// The open files of one inode, by mode. Lives as long as the kernel's inode (its page cache
/// goes with it), so a fresh one has no stale pages to worry about.
#[derive(Debug, Default)]
pub struct IoMode {
    state: Mutex<State>,
    /// Signalled when the last writer is released.
    released: Condvar,
    /// Opens by `execve` (the kernel marks them `FMODE_EXEC`) not yet released.
    executing: std::sync::atomic::AtomicU32,
}

/// The kernel's `__FMODE_EXEC` bit in a FUSE open's flags: the open of a program being run.
pub const FMODE_EXEC: i32 = 0x20;

impl IoMode {
    /// Chooses how a new open is served and counts it. `prefer_cached`: the opener only reads
    /// a small file; `writes`: it may write.
    pub fn open(&self, prefer_cached: bool, writes: bool) -> IoChoice {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let cached = match (s.passthrough, s.cached) {
            (0, 0) => prefer_cached,
            (0, _) => true,
            _ => false,
        };
        if cached {
            // With other cached opens live the pages are current: every change went through
            // the cache.
            let keep_cache = s.cached > 0 || !s.stale;
            s.cached += 1;
            s.stale = false;
            IoChoice::Cached { keep_cache }
        } else {
            s.passthrough += 1;
            s.stale |= writes;
            IoChoice::Passthrough
        }
    }

    /// Counts an open that must be served through the page cache (a writer whose every write
    /// the daemon must see); `None` while passthrough opens are live, which the kernel would
    /// refuse to mix with it.
    pub fn open_cached(&self) -> Option<IoChoice> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.passthrough > 0 {
            return None;
        }
        let keep_cache = s.cached > 0 || !s.stale;
        s.cached += 1;
        s.stale = false;
        Some(IoChoice::Cached { keep_cache })
    }

    /// Counts an open for `execve`.
    pub fn exec_open(&self) {
        self.executing
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Counts the release of an open for `execve`.
    pub fn exec_close(&self) {
        let _ = self.executing.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |n| n.checked_sub(1),
        );
    }

    /// Whether a program is running from this inode (as far as releases have arrived).
    pub fn is_executing(&self) -> bool {
        self.executing.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// Counts an open for writing; `false` (nothing counted) if an agent asks while the inode is
    /// sealed.
    pub fn write_open(&self, agent: bool) -> bool {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if agent && s.sealed {
            return false;
        }
        s.writers += 1;
        true
    }

    /// Counts the release of an open for writing.
    pub fn write_close(&self) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.writers = s.writers.saturating_sub(1);
        if s.writers == 0 {
            self.released.notify_all();
        }
    }

    /// Waits up to `bound` until no open for writing is counted; `true` if none is. A writer's
    /// `close` returns before the kernel's RELEASE of it reaches the daemon (on another
    /// thread, behind other requests), so whatever the writer does next (git renaming its
    /// `config.lock` into place) can find it still counted.
    pub fn wait_writers_released(&self, bound: Duration) -> bool {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (s, _) = self
            .released
            .wait_timeout_while(s, bound, |s| s.writers > 0)
            .unwrap_or_else(PoisonError::into_inner);
        s.writers == 0
    }

    /// Seals the inode if nothing has it open for writing: from then on agents may not open it
    /// for writing, so its content stays what was checked (a git config renamed into place).
    /// `false`: an open for writing is live.
    pub fn seal(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.writers > 0 {
            return false;
        }
        s.sealed = true;
        true
    }

    /// Whether the inode is sealed ([`IoMode::seal`]).
    pub fn is_sealed(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sealed
    }

    /// Lifts [`IoMode::seal`] (the rename it guarded was refused).
    pub fn unseal(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sealed = false;
    }

    /// Counts the release of an open served as `choice`.
    pub fn close(&self, choice: IoChoice) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match choice {
            IoChoice::Passthrough => s.passthrough = s.passthrough.saturating_sub(1),
            IoChoice::Cached { .. } => s.cached = s.cached.saturating_sub(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_readers_are_cached_and_keep_their_pages() {
        let m = IoMode::default();
        let a = m.open(true, false);
        assert_eq!(a, IoChoice::Cached { keep_cache: true });
        m.close(a);
        assert_eq!(m.open(true, false), IoChoice::Cached { keep_cache: true });
    }

    #[test]
    fn a_live_mode_is_joined_whatever_the_opener_prefers() {
        let m = IoMode::default();
        let reader = m.open(true, false);
        assert_eq!(m.open(false, true), IoChoice::Cached { keep_cache: true });
        m.close(reader);
        let m = IoMode::default();
        let writer = m.open(false, true);
        assert_eq!(m.open(true, false), IoChoice::Passthrough);
        m.close(writer);
    }

    #[test]
    fn pages_are_dropped_after_a_passthrough_writer() {
        let m = IoMode::default();
        m.close(m.open(true, false));
        let w = m.open(false, true);
        m.close(w);
        let r = m.open(true, false);
        assert_eq!(r, IoChoice::Cached { keep_cache: false });
        m.close(r);
        // The cache was refilled by that open: good again.
        assert_eq!(m.open(true, false), IoChoice::Cached { keep_cache: true });
    }

    #[test]
    fn metered_writers_never_join_passthrough() {
        let m = IoMode::default();
        let p = m.open(false, true);
        assert_eq!(m.open_cached(), None);
        m.close(p);
        assert!(matches!(m.open_cached(), Some(IoChoice::Cached { .. })));
        assert_eq!(m.open(false, true), IoChoice::Cached { keep_cache: true });
    }

    #[test]
    fn a_sealed_inode_takes_no_agent_writer_and_seals_only_without_writers() {
        let m = IoMode::default();
        assert!(m.write_open(true));
        assert!(!m.seal(), "a writer is live");
        m.write_close();
        assert!(m.seal());
        assert!(!m.write_open(true), "an agent may not write a sealed inode");
        assert!(m.write_open(false), "an admin may");
        m.write_close();
        m.unseal();
        assert!(m.write_open(true));
    }

    #[test]
    fn a_release_on_its_way_is_waited_for_and_a_live_writer_is_not_forever() {
        let m = std::sync::Arc::new(IoMode::default());
        assert!(m.write_open(true));
        let bound = Duration::from_millis(50);
        assert!(!m.wait_writers_released(bound), "the writer is live");
        let later = std::sync::Arc::clone(&m);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            later.write_close();
        });
        assert!(m.wait_writers_released(Duration::from_secs(60)));
        release.join().unwrap();
        assert!(m.seal());
    }

    #[test]
    fn passthrough_readers_leave_the_cache_alone() {
        let m = IoMode::default();
        m.close(m.open(false, false));
        assert_eq!(m.open(true, false), IoChoice::Cached { keep_cache: true });
    }
}
