//! Lookups of missing names answered without asking the store.
//!
//! A LOOKUP of a name that does not exist costs the store's file system a directory search and a
//! negative dentry (about 3 µs on ext4 here: most of what a miss costs over the FUSE round trip).
//! Tools look missing names up all the time (`git status`, include paths, `PATH` searches,
//! editors' backup names), most of them new to the store. For a folder where misses keep coming,
//! the daemon reads the folder's names once and keeps them as a set of keyed hashes: a name not
//! in the set is missing, as long as the folder has not changed since.
//!
//! "Not changed since" is the folder's change time. Every name added, removed or renamed — through
//! the mount or behind the daemon's back — sets the folder's ctime, which no caller can set, to
//! the current time. A listing is kept only when the folder's ctime, the same before and after
//! the reading, lies at least [`SETTLED`] in the past: a change after the reading then stamps a
//! later time even where the file system's clock ticks coarsely. Where the store's file system
//! stamps every change made after a ctime was read with a later one (multigrain timestamps,
//! probed at start: [`fine_change_times`]), no settling is needed and a folder just made is
//! listed as soon as its misses pay for it. Each answer compares the folder's ctime (an `fstat`
//! of the open folder) with the listing's first.
//!
//! Only folders whose names are plain bytes that change only with the ctime are listed: on ext4,
//! tmpfs and btrfs, and neither case-folding (names compare case-insensitively) nor encrypted
//! (adding or removing the key changes every name, and not the ctime). A name in the set, and
//! any folder not listed, is looked up in the store as before.
//!
//! Reading names is paid for by misses: each miss the store answers earns the reading of
//! [`NAMES_PER_MISS`] names (about what the miss cost), and a folder is read only with the names
//! earned. However lookups are arranged — folders evicted and read again, folders too large to
//! keep — reading never costs more than the misses it was meant to save.

use std::ffi::OsStr;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Misses in one folder before its names are read: a folder looked up once or twice is never
/// listed.
const MISSES_BEFORE_LISTING: u32 = 8;
/// Names read per miss answered by the store: reading one name (`getdents64` and a keyed hash)
/// costs about a thirtieth of a store miss.
const NAMES_PER_MISS: usize = 32;
/// Most names that may be read at once after a quiet spell.
const CREDIT_CAP: usize = 2 * MAX_NAMES;
/// How far in the past a folder's last change must lie for its listing to be kept. Far more than
/// any file system's clock tick; a folder being changed is simply not listed until it settles.
const SETTLED: Duration = Duration::from_secs(2);
/// The largest folder listed.
const MAX_NAMES: usize = 65_536;
/// Names kept over all folders (8 bytes each).
const NAMES_BUDGET: usize = 1 << 20;
/// Folders whose misses are counted or whose names are kept.
const FOLDERS: NonZeroUsize = NonZeroUsize::new(4096).unwrap();

/// `f_type` of the file systems whose names compare byte for byte (`linux/magic.h`).
const EXT4_SUPER_MAGIC: i64 = 0xEF53;
const TMPFS_MAGIC: i64 = 0x0102_1994;
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;
/// `FS_CASEFOLD_FL` (`linux/fs.h`): the folder's names compare case-insensitively.
const FS_CASEFOLD_FL: u32 = 0x4000_0000;
/// `FS_ENCRYPT_FL` (`linux/fs.h`): the folder's names depend on whether its key is present.
const FS_ENCRYPT_FL: u32 = 0x0000_0800;

/// What says a folder has not changed: its inode and its change and modification times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl Stamp {
    fn of(dir: BorrowedFd<'_>) -> io::Result<Self> {
        let st = rustix::fs::fstat(dir)?;
        Ok(Self {
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        })
    }

    /// Whether the folder last changed at least `settled` before `now`.
    fn settled_by(&self, now: SystemTime, settled: Duration) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let (Ok(secs), Ok(nanos)) = (u64::try_from(self.ctime.0), u32::try_from(self.ctime.1))
        else {
            return false; // a change time before 1970: trust nothing
        };
        Duration::new(secs, nanos.min(999_999_999)) + settled <= now
    }
}

/// The names of one folder, as sorted keyed hashes, and the stamp they were read under.
#[derive(Debug)]
struct Listing {
    stamp: Stamp,
    hashes: Box<[u64]>,
}

/// What the daemon knows of one folder.
#[derive(Debug)]
enum Folder {
    /// Misses counted since the folder was last listed or seen to change; `need` grows with the
    /// folder's size, so that reading a large folder again costs no more than the misses it
    /// would answer.
    Counting { misses: u32, need: u32 },
    /// Its names.
    Listed(Arc<Listing>),
}

struct State {
    folders: lru::LruCache<u64, Folder>,
    /// Hashes kept over all listings.
    names: usize,
    /// Names that may be read (earned by misses, [`NAMES_PER_MISS`] each).
    credits: usize,
    /// Names read since start.
    #[cfg(test)]
    read: usize,
}

impl State {
    /// Sets what is known of folder `ino`, keeping the count of names right for whatever the
    /// cache gives back (the folder's old entry, or the least recently used one it evicts).
    fn put(&mut self, ino: u64, folder: Folder) {
        if let Folder::Listed(l) = &folder {
            self.names += l.hashes.len();
        }
        let out = self.folders.push(ino, folder);
        self.count_out(out.map(|(_, f)| f));
    }

    /// Counts out the names of a folder taken out of the cache.
    fn count_out(&mut self, folder: Option<Folder>) {
        if let Some(Folder::Listed(l)) = folder {
            self.names -= l.hashes.len();
        }
    }
}

/// The kept listings of store folders by mount inode (one leaf lock: no system call under it).
pub struct Listings {
    hasher: RandomState,
    settled: Duration,
    /// The device of the store's file system when it stamps each change made after a folder's
    /// change time was read with a later time ([`fine_change_times`]): its folders need not
    /// have settled to be listed.
    fine: Option<u64>,
    state: Mutex<State>,
}

/// Why a folder was not listed.
enum NotListed {
    /// Changed too recently or while being read: count misses again.
    Unsettled,
    /// More names than the misses have paid for yet: wait for misses in proportion.
    Unpaid,
    /// Not to be listed (file system, case folding, encryption, size): stop counting.
    Never,
}

impl Default for Listings {
    fn default() -> Self {
        Self::with_settled(SETTLED)
    }
}

impl Listings {
    /// Listings for the store whose private folder is `private`: folders on its file system
    /// are listed as soon as misses come when it stamps changes finely enough
    /// ([`fine_change_times`]), others once settled.
    pub fn for_store(private: &std::path::Path) -> Self {
        let fine = std::fs::File::open(private).ok().and_then(|dir| {
            let dev = rustix::fs::fstat(&dir).ok()?.st_dev;
            fine_change_times(dir.as_fd()).then_some(dev)
        });
        tracing::debug!(fine_change_times = fine.is_some(), "missing-name listings");
        Self {
            fine,
            ..Self::default()
        }
    }

    /// Listings kept only for folders unchanged for `settled`.
    pub fn with_settled(settled: Duration) -> Self {
        Self {
            hasher: RandomState::new(),
            settled,
            fine: None,
            state: Mutex::new(State {
                folders: lru::LruCache::new(FOLDERS),
                names: 0,
                credits: 0,
                #[cfg(test)]
                read: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hash(&self, name: &OsStr) -> u64 {
        self.hasher.hash_one(name.as_bytes())
    }

    /// Whether `name` is surely not in folder `ino`, open as `dir`: the folder is listed, the
    /// name is not in the listing, and the folder has not changed since it was read.
    pub fn surely_missing(&self, ino: u64, dir: BorrowedFd<'_>, name: &OsStr) -> bool {
        if name == "." || name == ".." {
            return false;
        }
        let listing = match self.lock().folders.get(&ino) {
            Some(Folder::Listed(l)) => Arc::clone(l),
            _ => return false,
        };
        listing.hashes.binary_search(&self.hash(name)).is_err()
            && self.still_current(ino, dir, &listing)
    }

    /// Whether folder `ino`, open as `dir`, is as it was when `listing` was read; if not, the
    /// listing is dropped.
    fn still_current(&self, ino: u64, dir: BorrowedFd<'_>, listing: &Arc<Listing>) -> bool {
        let current = Stamp::of(dir).ok() == Some(listing.stamp);
        if !current {
            self.drop_listing(ino, listing);
        }
        current
    }

    /// Records that the store has no `name` in folder `ino`, open as `dir`. After enough misses
    /// the folder's names are read (here, once per so many misses).
    pub fn missed(&self, ino: u64, dir: BorrowedFd<'_>) {
        let due = {
            let mut state = self.lock();
            state.credits = (state.credits + NAMES_PER_MISS).min(CREDIT_CAP);
            if !state.folders.contains(&ino) && state.folders.len() == state.folders.cap().get() {
                // Make room here, so that an evicted listing's names are counted out.
                let evicted = state.folders.pop_lru().map(|(_, f)| f);
                state.count_out(evicted);
            }
            let folder = state.folders.get_or_insert_mut(ino, || Folder::Counting {
                misses: 0,
                need: MISSES_BEFORE_LISTING,
            });
            match folder {
                Folder::Counting { misses, need } => {
                    *misses = misses.saturating_add(1);
                    match *misses >= *need {
                        true => {
                            *misses = 0;
                            // The names this reading may cost, taken now; what it does not
                            // read is given back.
                            let allowance = state.credits.min(MAX_NAMES);
                            state.credits -= allowance;
                            Ok(Some(allowance))
                        }
                        false => Ok(None),
                    }
                }
                // A listed name the store no longer has: the folder changed (or two names share
                // a hash); the stamp says which.
                Folder::Listed(l) => Err(Arc::clone(l)),
            }
        };
        match due {
            Ok(None) => {}
            Ok(Some(allowance)) => self.list(ino, dir, allowance),
            Err(listing) => {
                self.still_current(ino, dir, &listing);
            }
        }
    }

    /// Forgets folder `ino` (the kernel forgot the inode).
    pub fn forget(&self, ino: u64) {
        let mut state = self.lock();
        let forgotten = state.folders.pop(&ino);
        state.count_out(forgotten);
    }

    /// Replaces the listing of `ino`, if it is still `listing`, by a count that makes reading
    /// the folder again wait for misses in proportion to its size.
    fn drop_listing(&self, ino: u64, listing: &Arc<Listing>) {
        let mut state = self.lock();
        let Some(folder) = state.folders.peek_mut(&ino) else {
            return;
        };
        if matches!(folder, Folder::Listed(l) if Arc::ptr_eq(l, listing)) {
            *folder = Folder::Counting {
                misses: 0,
                need: need_for(listing.hashes.len()),
            };
            state.names -= listing.hashes.len();
        }
    }

    /// Reads the names of folder `ino`, at most `allowance` of them, and keeps them if they
    /// are all.
    fn list(&self, ino: u64, dir: BorrowedFd<'_>, allowance: usize) {
        let (outcome, read) = self.read(dir, allowance);
        let mut state = self.lock();
        state.credits = (state.credits + allowance - read).min(CREDIT_CAP);
        #[cfg(test)]
        {
            state.read += read;
        }
        let need = match outcome {
            Ok(listing) => {
                state.put(ino, Folder::Listed(Arc::new(listing)));
                while state.names > NAMES_BUDGET {
                    let Some((_, evicted)) = state.folders.pop_lru() else {
                        break;
                    };
                    state.count_out(Some(evicted));
                }
                return;
            }
            Err(NotListed::Unsettled) => return,
            // Twice the names read: the next try has paid for twice as many, so a folder of n
            // names is listed after misses worth about 2n names at most.
            Err(NotListed::Unpaid) => need_for(2 * read),
            Err(NotListed::Never) => u32::MAX,
        };
        state.put(ino, Folder::Counting { misses: 0, need });
    }

    /// Reads the names of `dir`, if it may be listed and has at most `allowance`; returns how
    /// many names were read either way.
    fn read(&self, dir: BorrowedFd<'_>, allowance: usize) -> (Result<Listing, NotListed>, usize) {
        let mut hashes = Vec::new();
        let outcome = self.read_into(dir, allowance, &mut hashes);
        let read = hashes.len();
        let listing = outcome.map(|stamp| {
            hashes.sort_unstable();
            hashes.dedup();
            Listing {
                stamp,
                hashes: hashes.into_boxed_slice(),
            }
        });
        (listing, read)
    }

    /// Reads the names of `dir` into `hashes`, if it may be listed and has at most `allowance`;
    /// returns the stamp they were read under.
    fn read_into(
        &self,
        dir: BorrowedFd<'_>,
        allowance: usize,
        hashes: &mut Vec<u64>,
    ) -> Result<Stamp, NotListed> {
        let fs = rustix::fs::fstatfs(dir).map_err(|_| NotListed::Never)?;
        if ![EXT4_SUPER_MAGIC, TMPFS_MAGIC, BTRFS_SUPER_MAGIC].contains(&(fs.f_type as i64)) {
            return Err(NotListed::Never);
        }
        let now = SystemTime::now();
        let before = Stamp::of(dir).map_err(|_| NotListed::Unsettled)?;
        let settled = match self.fine == Some(before.dev) {
            // Read just now, the change time is bumped by any later change.
            true => Duration::ZERO,
            false => self.settled,
        };
        if !before.settled_by(now, settled) {
            return Err(NotListed::Unsettled);
        }
        // The daemon's own read: nobody listed the folder, its access time stays.
        let open = clawfs_store::beneath::open_dir_noatime(dir, ".".as_ref())
            .map_err(|_| NotListed::Unsettled)?;
        match rustix::fs::ioctl_getflags(&open) {
            Ok(flags) if flags.bits() & (FS_CASEFOLD_FL | FS_ENCRYPT_FL) != 0 => {
                return Err(NotListed::Never)
            }
            Ok(_) => {}
            // File systems without inode flags have neither case folding nor encryption.
            Err(rustix::io::Errno::NOTTY | rustix::io::Errno::INVAL) => {}
            Err(_) => return Err(NotListed::Never),
        }
        let mut entries = rustix::fs::Dir::read_from(&open).map_err(|_| NotListed::Unsettled)?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|_| NotListed::Unsettled)?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            if hashes.len() == allowance {
                return Err(match allowance {
                    MAX_NAMES => NotListed::Never,
                    _ => NotListed::Unpaid,
                });
            }
            hashes.push(self.hash(name));
        }
        if Stamp::of(open.as_fd()).ok() != Some(before) {
            return Err(NotListed::Unsettled);
        }
        Ok(before)
    }

    /// How many folders are listed now.
    #[cfg(test)]
    fn listed(&self) -> usize {
        self.lock()
            .folders
            .iter()
            .filter(|(_, f)| matches!(f, Folder::Listed(_)))
            .count()
    }
}

/// Whether the file system of `dir` stamps every change made after a folder's change time was
/// read with a strictly later change time, however soon after (multigrain timestamps: Linux
/// 6.13 and later on ext4, tmpfs, btrfs and xfs). Then a listing read while the folder's change
/// time stayed the same holds from the moment it was read: a later change cannot share that
/// time, and no wait for the clock to tick past it is needed. Probed, not assumed: a folder
/// made in `dir` gets a name and loses it again and again, its change time read between, far
/// faster than a coarse clock ticks; every change must show.
fn fine_change_times(dir: BorrowedFd<'_>) -> bool {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let ctime = |fd: BorrowedFd<'_>| {
        rustix::fs::fstat(fd)
            .ok()
            .map(|st| (st.st_ctime, st.st_ctime_nsec))
    };
    let name = format!(
        ".ctime-probe.{:016x}",
        RandomState::new().hash_one(std::process::id())
    );
    if rustix::fs::mkdirat(dir, name.as_str(), Mode::RWXU).is_err() {
        return false;
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fine = rustix::fs::openat(dir, name.as_str(), flags, Mode::empty()).is_ok_and(|probe| {
        let fine = (0..64).all(|_| {
            let before = ctime(probe.as_fd());
            let made = rustix::fs::openat(
                &probe,
                "p",
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::RUSR,
            );
            let after = ctime(probe.as_fd());
            let gone = rustix::fs::unlinkat(&probe, "p", AtFlags::empty());
            let last = ctime(probe.as_fd());
            made.is_ok() && gone.is_ok() && before < after && after < last && before.is_some()
        });
        let _ = rustix::fs::unlinkat(&probe, "p", AtFlags::empty());
        fine
    });
    let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::REMOVEDIR);
    fine
}

/// Misses in a folder to wait for before reading again a folder of `names` names: as many as
/// pay for reading them.
fn need_for(names: usize) -> u32 {
    u32::try_from(names / NAMES_PER_MISS)
        .unwrap_or(u32::MAX)
        .max(MISSES_BEFORE_LISTING)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File};

    const QUICK: Duration = Duration::from_millis(200);

    /// A folder of three files, left to settle for [`QUICK`].
    fn settled_folder() -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        for n in ["a", "b", "c"] {
            fs::write(dir.path().join(n), n).unwrap();
        }
        std::thread::sleep(QUICK + Duration::from_millis(50));
        let fd = File::open(dir.path()).unwrap();
        (dir, fd)
    }

    fn miss(l: &Listings, fd: &File, times: u32) {
        for _ in 0..times {
            l.missed(1, fd.as_fd());
        }
    }

    #[test]
    fn a_settled_folder_is_listed_after_enough_misses() {
        let (_dir, fd) = settled_folder();
        let l = Listings::with_settled(QUICK);
        miss(&l, &fd, MISSES_BEFORE_LISTING - 1);
        assert!(!l.surely_missing(1, fd.as_fd(), OsStr::new("zzz")));
        miss(&l, &fd, 1);
        assert_eq!(l.listed(), 1);
        assert!(l.surely_missing(1, fd.as_fd(), OsStr::new("zzz")));
        for present in ["a", "b", "c", ".", ".."] {
            assert!(!l.surely_missing(1, fd.as_fd(), OsStr::new(present)));
        }
        // Another folder's inode number knows nothing.
        assert!(!l.surely_missing(2, fd.as_fd(), OsStr::new("zzz")));
    }

    #[test]
    fn a_change_behind_the_listing_is_seen_at_once() {
        for change in ["create", "rename", "link", "mkdir"] {
            let (dir, fd) = settled_folder();
            let l = Listings::with_settled(QUICK);
            miss(&l, &fd, MISSES_BEFORE_LISTING);
            assert!(l.surely_missing(1, fd.as_fd(), OsStr::new("new")));
            let new = dir.path().join("new");
            match change {
                "create" => fs::write(&new, "x").unwrap(),
                "rename" => fs::rename(dir.path().join("a"), &new).unwrap(),
                "link" => fs::hard_link(dir.path().join("a"), &new).unwrap(),
                _ => fs::create_dir(&new).unwrap(),
            }
            assert!(
                !l.surely_missing(1, fd.as_fd(), OsStr::new("new")),
                "{change}"
            );
            assert_eq!(l.listed(), 0, "{change}: the stale listing is dropped");
        }
    }

    /// On a file system that stamps changes finely (ext4 and tmpfs on this kernel: the probe
    /// says so), a folder just made is listed at its misses, and every change made right after,
    /// within any clock tick, is still seen.
    #[test]
    fn a_fresh_folder_on_a_finely_stamping_file_system_is_listed_and_kept_right() {
        let store = tempfile::tempdir().unwrap();
        assert!(
            fine_change_times(File::open(store.path()).unwrap().as_fd()),
            "this kernel's file system stamps changes finely (multigrain timestamps)"
        );
        assert_eq!(
            fs::read_dir(store.path()).unwrap().count(),
            0,
            "the probe cleans up"
        );
        let l = Listings::for_store(store.path());
        for change in ["create", "rename", "link", "mkdir"] {
            let dir = store.path().join(change);
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join("a"), "a").unwrap();
            let fd = File::open(&dir).unwrap();
            miss(&l, &fd, MISSES_BEFORE_LISTING);
            assert!(
                l.surely_missing(1, fd.as_fd(), OsStr::new("new")),
                "{change}"
            );
            let new = dir.join("new");
            match change {
                "create" => fs::write(&new, "x").unwrap(),
                "rename" => fs::rename(dir.join("a"), &new).unwrap(),
                "link" => fs::hard_link(dir.join("a"), &new).unwrap(),
                _ => fs::create_dir(&new).unwrap(),
            }
            assert!(
                !l.surely_missing(1, fd.as_fd(), OsStr::new("new")),
                "{change}"
            );
            l.forget(1);
        }
    }

    #[test]
    fn a_folder_changed_lately_is_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let fd = File::open(dir.path()).unwrap();
        let l = Listings::with_settled(Duration::from_secs(60));
        miss(&l, &fd, MISSES_BEFORE_LISTING * 3);
        assert_eq!(l.listed(), 0);
        assert!(!l.surely_missing(1, fd.as_fd(), OsStr::new("zzz")));
    }

    #[test]
    fn a_removed_listed_name_drops_the_listing_when_missed() {
        let (dir, fd) = settled_folder();
        let l = Listings::with_settled(QUICK);
        miss(&l, &fd, MISSES_BEFORE_LISTING);
        fs::remove_file(dir.path().join("a")).unwrap();
        // "a" is in the listing, so it is looked up; the store misses it.
        assert!(!l.surely_missing(1, fd.as_fd(), OsStr::new("a")));
        l.missed(1, fd.as_fd());
        assert_eq!(l.listed(), 0);
    }

    #[test]
    fn folders_of_other_file_systems_are_never_listed() {
        let fd = File::open("/proc/self").unwrap();
        let l = Listings::with_settled(Duration::ZERO);
        miss(&l, &fd, MISSES_BEFORE_LISTING * 2);
        assert_eq!(l.listed(), 0);
    }

    /// However folders are evicted and missed again, the names read stay paid for by misses.
    #[test]
    fn reading_names_never_outruns_the_misses() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..1000 {
            fs::write(dir.path().join(format!("name-{i}")), "").unwrap();
        }
        std::thread::sleep(QUICK + Duration::from_millis(50));
        let fd = File::open(dir.path()).unwrap();
        let l = Listings::with_settled(QUICK);
        let mut misses = 0;
        for round in 0..20 {
            // Miss until listed, then lose the listing (as an eviction would) and start over.
            while l.listed() == 0 {
                miss(&l, &fd, 1);
                misses += 1;
                let read = l.lock().read;
                assert!(
                    read <= misses * NAMES_PER_MISS,
                    "round {round}: {read} names read for {misses} misses"
                );
            }
            assert!(l.surely_missing(1, fd.as_fd(), OsStr::new("zzz")));
            l.forget(1);
        }
        // 1000 names need 32 misses' worth: the first listing waited for them.
        assert!(misses >= 20 * 1000 / NAMES_PER_MISS, "{misses}");
    }

    /// A listing replaced by a count (two readers of one folder, the second finding it too
    /// large) gives its names back to the budget.
    #[test]
    fn a_replaced_listing_counts_its_names_out() {
        let (_dir, fd) = settled_folder();
        let l = Listings::with_settled(QUICK);
        miss(&l, &fd, MISSES_BEFORE_LISTING);
        assert_eq!(l.lock().names, 3);
        let never = Folder::Counting {
            misses: 0,
            need: u32::MAX,
        };
        l.lock().put(1, never);
        assert_eq!((l.listed(), l.lock().names), (0, 0));
    }

    #[test]
    fn forgetting_a_folder_frees_its_names() {
        let (_dir, fd) = settled_folder();
        let l = Listings::with_settled(QUICK);
        miss(&l, &fd, MISSES_BEFORE_LISTING);
        assert_eq!(l.lock().names, 3);
        l.forget(1);
        assert_eq!((l.listed(), l.lock().names), (0, 0));
    }
}
