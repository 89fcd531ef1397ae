//! What each owner holds in the store: bytes and files, counted as `quota(1)` counts them — by
//! the owner of each inode — kept up to date by the daemon as names and sizes change, saved
//! across restarts, and recomputed from the store by [`rescan`].
//!
//! An inode's cost is, for a regular file, its size, or the space allocated to it when that is
//! [`PREALLOC_SLACK`] or more past its size (space preallocated with `fallocate`; a sparse file
//! costs its size); its target's length for a symlink; its size for a directory (which grows
//! with its names: hard links add names, not inodes), at least [`DIR_BYTES`]; nothing for a
//! device, FIFO or socket; plus the name and value lengths of its `user.*` extended attributes. Each inode is one file, whatever its number of
//! hard links. Only `workspaces/` and `agents/` are counted: the rest of the store is ClawFS's.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, PoisonError};

use crate::xattr_spill::Spill;
use rustix::fs::{AtFlags, FileType};
use serde::{Deserialize, Serialize};

/// The least a directory costs, whatever the backing filesystem makes of it: one block.
pub const DIR_BYTES: u64 = 4096;
/// How far a regular file's allocated space must exceed its size to be what it costs: two
/// blocks, so that the rounding of its last block and an external xattr block (counted apart,
/// by its xattrs' lengths) never count.
pub const PREALLOC_SLACK: u64 = 8192;
/// The areas of the store whose inodes are counted.
pub const COUNTED_AREAS: &[&str] = &["workspaces", "agents"];

/// Bytes and files held by one owner. Signed while changes are summed; never negative once
/// applied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Bytes: sizes, symlink targets, directories, `user.*` xattrs.
    pub bytes: u64,
    /// Inodes.
    pub files: u64,
}

/// A change to what an owner holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// Bytes added (negative: given back).
    pub bytes: i64,
    /// Files added (negative: removed).
    pub files: i64,
}

impl Delta {
    /// `cost` of a new inode.
    pub fn created(cost: u64) -> Delta {
        Delta {
            bytes: cost as i64,
            files: 1,
        }
    }

    /// `cost` of an inode whose last name is gone.
    pub fn removed(cost: u64) -> Delta {
        Delta {
            bytes: -(cost as i64),
            files: -1,
        }
    }

    /// A size that went from `old` to `new`.
    pub fn resized(old: u64, new: u64) -> Delta {
        Delta {
            bytes: new as i64 - old as i64,
            files: 0,
        }
    }

    /// Adds `d` to this change.
    pub fn add(&mut self, d: Delta) {
        self.bytes = self.bytes.saturating_add(d.bytes);
        self.files = self.files.saturating_add(d.files);
    }
}

impl Held {
    fn apply(&mut self, d: Delta) {
        self.bytes = self.bytes.saturating_add_signed(d.bytes);
        self.files = self.files.saturating_add_signed(d.files);
    }
}

/// The held usage of a store: per owner uid, and which agent each uid belongs to (learned as
/// agents make files; an agent runs as one uid that no other agent uses). Its two locks are
/// leaves, never held together.
#[derive(Debug, Default)]
pub struct HeldUsage {
    state: Mutex<Saved>,
    /// Growth promised to tool calls still running, by agent (see [`Self::reserve`]).
    reserved: Mutex<HashMap<String, Held>>,
}

/// What is saved in `.clawfs/quota-usage.json`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Saved {
    /// Format version: [`FORMAT`].
    pub version: u32,
    /// False while a daemon serves the store: a file found so after a start was left by a
    /// daemon that did not stop cleanly, and is recomputed.
    pub clean: bool,
    /// Held usage by owner uid.
    pub by_uid: HashMap<u32, Held>,
    /// The agent each uid belongs to.
    pub agents: HashMap<u32, String>,
    /// In a store that hosts share: the epoch of the store's count ([`Across`]) that
    /// `changes` follow; 0 in a store of one host.
    #[serde(default)]
    pub epoch: u64,
    /// In a store that hosts share: what this host's daemon changed since that count, by
    /// owner uid. `by_uid` is then the whole store's usage as this host sees it.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub changes: HashMap<u32, Delta>,
    /// Changed since saved (not saved).
    #[serde(skip)]
    pub dirty: bool,
    /// In a store that hosts share: the count and the other hosts' changes `by_uid` sums.
    #[serde(skip)]
    pub across: Across,
}

/// The parts of a shared store's usage that come from elsewhere: the store's count at an
/// epoch, and the changes other hosts saved since it. What an owner holds is the count plus
/// every host's changes.
#[derive(Debug, Default, Clone)]
pub struct Across {
    /// The count, by owner uid.
    pub base: HashMap<u32, Held>,
    /// The other hosts' changes since the count, summed, by owner uid.
    pub others: HashMap<u32, Delta>,
}

impl Across {
    /// What each owner holds: the count plus `own` and the other hosts' changes.
    pub fn totals(&self, own: &HashMap<u32, Delta>) -> HashMap<u32, Held> {
        let mut sum: HashMap<u32, Delta> = HashMap::new();
        for (uid, h) in &self.base {
            sum.entry(*uid).or_default().add(Delta {
                bytes: h.bytes.min(i64::MAX as u64) as i64,
                files: h.files.min(i64::MAX as u64) as i64,
            });
        }
        for (uid, d) in own.iter().chain(&self.others) {
            sum.entry(*uid).or_default().add(*d);
        }
        sum.into_iter()
            .map(|(uid, d)| {
                let mut held = Held::default();
                held.apply(d);
                (uid, held)
            })
            .collect()
    }
}

/// The format of [`Saved`].
pub const FORMAT: u32 = 2;

/// A uid another agent holds (its files are counted for it, or its processes run), so it
/// cannot act as a second agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("uid held by agent {agent}")]
pub struct UidHeld {
    /// The agent that holds it.
    pub agent: String,
}

impl HeldUsage {
    fn lock(&self) -> std::sync::MutexGuard<'_, Saved> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `d` to what `uid` holds.
    pub fn apply(&self, uid: u32, d: Delta) {
        if d == Delta::default() {
            return;
        }
        let mut s = self.lock();
        s.by_uid.entry(uid).or_default().apply(d);
        if s.epoch != 0 {
            s.changes.entry(uid).or_default().add(d);
        }
        s.dirty = true;
    }

    /// Moves `cost` of one inode from `from` to `to` (a chown).
    pub fn transfer(&self, from: u32, to: u32, cost: u64) {
        if from == to {
            return;
        }
        self.apply(from, Delta::removed(cost));
        self.apply(to, Delta::created(cost));
    }

    /// Records that `uid` is `agent`'s (root never is); whether that is news.
    pub fn learn(&self, uid: u32, agent: &str) -> bool {
        if uid == 0 {
            return false;
        }
        let mut s = self.lock();
        if s.agents.get(&uid).map(String::as_str) != Some(agent) {
            s.agents.insert(uid, agent.to_string());
            s.dirty = true;
            return true;
        }
        false
    }

    /// Every uid seen acting as an agent, with the agent.
    pub fn agent_uids(&self) -> Vec<(u32, String)> {
        let s = self.lock();
        s.agents.iter().map(|(&u, a)| (u, a.clone())).collect()
    }

    /// Promises `add` to a running tool call of `agent`, if what the agent holds, what other
    /// running calls were promised and `add` stay within `limit` (bytes, files: each only
    /// checked when it grows); else answers what is left. Calls made at once so cannot
    /// together pass the quota; [`Self::unreserve`] once the call's changes are counted.
    pub fn reserve(&self, agent: &str, limit: Held, add: Held) -> Result<(), Held> {
        let held = self.of_agent(agent);
        let mut r = self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        let promised = r.entry(agent.to_string()).or_default();
        let used = Held {
            bytes: held.bytes.saturating_add(promised.bytes),
            files: held.files.saturating_add(promised.files),
        };
        let over = |used: u64, add: u64, limit: u64| add > 0 && used.saturating_add(add) > limit;
        if over(used.bytes, add.bytes, limit.bytes) || over(used.files, add.files, limit.files) {
            return Err(Held {
                bytes: limit.bytes.saturating_sub(used.bytes),
                files: limit.files.saturating_sub(used.files),
            });
        }
        promised.bytes = promised.bytes.saturating_add(add.bytes);
        promised.files = promised.files.saturating_add(add.files);
        Ok(())
    }

    /// Takes back what [`Self::reserve`] promised a call of `agent`.
    pub fn unreserve(&self, agent: &str, promised: Held) {
        let mut r = self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = r.get_mut(agent) {
            p.bytes = p.bytes.saturating_sub(promised.bytes);
            p.files = p.files.saturating_sub(promised.files);
            if *p == Held::default() {
                r.remove(agent);
            }
        }
    }

    /// Records that `uid` acts as `agent`, unless it is another agent's and `in_use` (its
    /// processes run) or it owns files: then that agent is answered. Checked and recorded
    /// under one lock, so two agents announcing one uid at once cannot both have it.
    pub fn claim(&self, uid: u32, agent: &str, in_use: bool) -> Result<bool, UidHeld> {
        if uid == 0 {
            return Ok(false);
        }
        let mut s = self.lock();
        match s.agents.get(&uid) {
            Some(a) if a == agent => Ok(false),
            Some(other) => {
                let holds = s.by_uid.get(&uid).is_some_and(|h| *h != Held::default());
                if holds || in_use {
                    return Err(UidHeld {
                        agent: other.clone(),
                    });
                }
                s.agents.insert(uid, agent.to_string());
                s.dirty = true;
                Ok(true)
            }
            None => {
                s.agents.insert(uid, agent.to_string());
                s.dirty = true;
                Ok(true)
            }
        }
    }

    /// The agent `uid` belongs to, if any.
    pub fn agent_of(&self, uid: u32) -> Option<String> {
        self.lock().agents.get(&uid).cloned()
    }

    /// What `agent` holds: the sum over its uids.
    pub fn of_agent(&self, agent: &str) -> Held {
        let s = self.lock();
        let mut total = Held::default();
        for (uid, a) in &s.agents {
            if a == agent {
                let h = s.by_uid.get(uid).copied().unwrap_or_default();
                total.bytes = total.bytes.saturating_add(h.bytes);
                total.files = total.files.saturating_add(h.files);
            }
        }
        total
    }

    /// A copy of everything, to save or show; `clean` as given.
    pub fn snapshot(&self, clean: bool) -> Saved {
        let mut s = self.lock();
        s.dirty = false;
        Saved {
            version: FORMAT,
            clean,
            by_uid: s.by_uid.clone(),
            agents: s.agents.clone(),
            epoch: s.epoch,
            changes: s.changes.clone(),
            dirty: false,
            across: Across::default(),
        }
    }

    /// Counts, in a store that hosts share, the store's count of `epoch` plus this host's
    /// `own` changes since it plus the other hosts' (`across`), learning the agents of
    /// `agents`. A new epoch (a recount, here or on another host) drops `own`: the count
    /// holds them. Growth checked from now on sees the other hosts' as last saved.
    pub fn share(
        &self,
        epoch: u64,
        own: Option<HashMap<u32, Delta>>,
        across: Across,
        agents: HashMap<u32, String>,
    ) {
        let mut s = self.lock();
        if s.epoch != epoch {
            s.epoch = epoch;
            s.changes.clear();
            s.dirty = true;
        }
        if let Some(own) = own {
            s.changes = own;
        }
        let totals = across.totals(&s.changes);
        // Saved when the view moves, so the host's file shows what it checks against.
        s.dirty |= totals != s.by_uid;
        s.by_uid = totals;
        s.across = across;
        for (uid, agent) in agents {
            if uid != 0 {
                s.agents.entry(uid).or_insert(agent);
            }
        }
    }

    /// The epoch of the store's count these usages follow (0: a store of one host).
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Whether anything changed since the last [`Self::snapshot`].
    pub fn dirty(&self) -> bool {
        self.lock().dirty
    }

    /// Replaces the usage by owner (a load or a rescan), keeping the agents known now and
    /// adding `agents`.
    pub fn replace(&self, by_uid: HashMap<u32, Held>, agents: HashMap<u32, String>) {
        let mut s = self.lock();
        s.by_uid = by_uid;
        // Root is nobody's agent, whatever a saved file says.
        s.agents
            .extend(agents.into_iter().filter(|(uid, _)| *uid != 0));
        s.dirty = true;
    }
}

/// The name and value lengths of the `user.*` extended attributes of `path` (not followed if
/// a symlink).
pub fn user_xattr_bytes(path: &std::path::Path) -> u64 {
    let Ok(names) = xattr::list(path) else {
        return 0;
    };
    names
        .filter(|n| n.as_bytes().starts_with(b"user."))
        .map(|n| {
            let value = xattr::get(path, &n).ok().flatten().map_or(0, |v| v.len());
            (n.len() + value) as u64
        })
        .sum()
}

/// The `/proc/self/fd/N` path of `fd`, for the xattr calls that take paths.
pub fn fd_path(fd: impl AsFd) -> std::path::PathBuf {
    let path = clawfs_store::backing::proc_fd_path(&fd);
    std::path::PathBuf::from(OsStr::from_bytes(path.as_bytes()))
}

/// What an inode described by `st` costs, without its xattrs.
pub fn cost_of(st: &rustix::fs::Stat) -> u64 {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            let (size, allocated) = (st.st_size as u64, st.st_blocks as u64 * 512);
            match allocated >= size.saturating_add(PREALLOC_SLACK) {
                true => allocated,
                false => size,
            }
        }
        FileType::Symlink => st.st_size as u64,
        FileType::Directory => (st.st_size as u64).max(DIR_BYTES),
        _ => 0,
    }
}

/// The full cost of `name` in `dir` as it is now (with its `user.*` xattrs, those kept in
/// `spill` too), with its stat.
pub fn cost_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    spill: &Spill,
) -> io::Result<(rustix::fs::Stat, u64)> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let mut cost = cost_of(&st);
    if matches!(
        FileType::from_raw_mode(st.st_mode),
        FileType::RegularFile | FileType::Directory
    ) {
        cost += user_xattr_bytes(&fd_path(dir).join(name)) + spill.bytes_at(dir, name);
    }
    Ok((st, cost))
}

/// Progress of a [`rescan`]: called with the inodes counted so far.
pub type Progress<'a> = &'a mut dyn FnMut(u64);

/// Recomputes what each owner holds under [`COUNTED_AREAS`] of the store at `store` (whose
/// attributes past what backing inodes hold are in `spill`): every folder reached by
/// descriptor, no symlink followed, each inode counted once.
pub fn rescan(
    store: BorrowedFd<'_>,
    spill: &Spill,
    progress: Progress<'_>,
) -> io::Result<HashMap<u32, Held>> {
    let mut by_uid: HashMap<u32, Held> = HashMap::new();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut counted = 0u64;
    let open_dir = |d: BorrowedFd<'_>, n: &OsStr| -> io::Result<OwnedFd> {
        // A recount reads folders without touching their access times.
        clawfs_store::beneath::open_dir_noatime(d, n)
    };
    let mut stack = Vec::new();
    for area in COUNTED_AREAS {
        match open_dir(store, OsStr::new(area)) {
            Ok(fd) => stack.push(fd),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    while let Some(dir) = stack.pop() {
        let mut entries = rustix::fs::Dir::read_from(&dir)?;
        for entry in entries.by_ref() {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let (st, cost) = match cost_at(dir.as_fd(), name, spill) {
                Ok(c) => c,
                // Gone since it was listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                match open_dir(dir.as_fd(), name) {
                    Ok(fd) => stack.push(fd),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
            }
            if !seen.insert((st.st_dev, st.st_ino)) {
                continue;
            }
            by_uid
                .entry(st.st_uid)
                .or_default()
                .apply(Delta::created(cost));
            counted += 1;
            if counted.is_multiple_of(1024) {
                progress(counted);
            }
        }
    }
    progress(counted);
    Ok(by_uid)
}

/// The charge of one regular file's data ([`cost_of`]: size, or space allocated), as the daemon
/// last settled it: what its owner was charged for; and how many descriptors have it open, so
/// that a file whose last name is gone stays charged until its last close (its space is held
/// until then). One per inode, as long-lived as the kernel's inode.
#[derive(Debug, Default)]
pub struct HeldSize(Mutex<SizeCharge>);

#[derive(Debug, Default)]
struct SizeCharge {
    state: SizeState,
    opens: u32,
}

#[derive(Debug, Default, Clone, Copy)]
enum SizeState {
    /// Not settled since the daemon met the inode: its size is as counted (a rescan, or every
    /// change before it went through a settle).
    #[default]
    Unknown,
    /// Charged for this much data.
    Size(u64),
    /// Its last name is gone but descriptors keep it: still charged to `uid`, for `size` of
    /// data and `rest` (its xattrs and the file itself), until its last close.
    Orphan { size: u64, uid: u32, rest: u64 },
    /// Its last name and last descriptor are gone, its charge given back.
    Gone,
}

impl HeldSize {
    fn lock(&self) -> std::sync::MutexGuard<'_, SizeCharge> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The data charged now, if known; `now` (its current cost) becomes it if not.
    pub fn base(&self, now: u64) -> u64 {
        let mut c = self.lock();
        match c.state {
            SizeState::Size(n) | SizeState::Orphan { size: n, .. } => n,
            SizeState::Gone => now,
            SizeState::Unknown => {
                c.state = SizeState::Size(now);
                now
            }
        }
    }

    /// The data now costs `now`: the change from what was charged, which `now` replaces.
    pub fn settle(&self, now: u64) -> Delta {
        let mut c = self.lock();
        match c.state {
            SizeState::Size(old) => {
                c.state = SizeState::Size(now);
                Delta::resized(old, now)
            }
            SizeState::Orphan { size, uid, rest } => {
                c.state = SizeState::Orphan {
                    size: now,
                    uid,
                    rest,
                };
                Delta::resized(size, now)
            }
            SizeState::Unknown => {
                c.state = SizeState::Size(now);
                Delta::default()
            }
            SizeState::Gone => Delta::default(),
        }
    }

    /// A descriptor of the file was opened.
    pub fn opened(&self) {
        self.lock().opens += 1;
    }

    /// A descriptor was closed: what to give back, and to whom, if it was the last of a file
    /// whose names are all gone.
    pub fn closed(&self) -> Option<(u32, Delta)> {
        let mut c = self.lock();
        c.opens = c.opens.saturating_sub(1);
        match c.state {
            SizeState::Orphan { size, uid, rest } if c.opens == 0 => {
                c.state = SizeState::Gone;
                Some((uid, Delta::removed(size + rest)))
            }
            _ => None,
        }
    }

    /// Its last name is gone, owned by `uid`, costing `data` (charged now) and `rest`. If
    /// descriptors keep it, it stays charged until the last closes ([`Self::closed`]) and the
    /// change of its data since it was last settled is returned; else `None`: give `data +
    /// rest` back now.
    pub fn unlinked(&self, uid: u32, data: u64, rest: u64) -> Option<Delta> {
        let mut c = self.lock();
        if c.opens == 0 {
            c.state = SizeState::Gone;
            return None;
        }
        let settled = match c.state {
            SizeState::Size(old) | SizeState::Orphan { size: old, .. } => Delta::resized(old, data),
            // Counted as it was at the last recount, or never charged here.
            SizeState::Unknown | SizeState::Gone => Delta::default(),
        };
        c.state = SizeState::Orphan {
            size: data,
            uid,
            rest,
        };
        Some(settled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::chown;

    fn held(bytes: u64, files: u64) -> Held {
        Held { bytes, files }
    }

    #[test]
    fn a_shared_count_adds_every_hosts_changes_and_a_new_epoch_drops_this_ones() {
        let usage = HeldUsage::default();
        usage.learn(1000, "a1");
        let across = |others: i64| Across {
            base: HashMap::from([(1000, held(100, 2))]),
            others: HashMap::from([(
                1000,
                Delta {
                    bytes: others,
                    files: 0,
                },
            )]),
        };
        usage.share(1, Some(HashMap::new()), across(50), HashMap::new());
        assert_eq!(usage.of_agent("a1"), held(150, 2));
        // This host's change is its own, and in the total.
        usage.apply(1000, Delta::created(30));
        assert_eq!(usage.of_agent("a1"), held(180, 3));
        assert_eq!(usage.snapshot(false).changes[&1000], Delta::created(30));
        // The other hosts saved more: read again, the total follows; this host's stay.
        usage.share(
            1,
            None,
            across(-150),
            HashMap::from([(2000, "a2".to_string())]),
        );
        assert_eq!(usage.of_agent("a1"), held(0, 3), "never below zero");
        assert_eq!(usage.agent_of(2000).as_deref(), Some("a2"));
        // A recount elsewhere (epoch 2) holds this host's changes: they are dropped.
        usage.share(2, None, across(0), HashMap::new());
        assert_eq!(usage.of_agent("a1"), held(100, 2));
        assert!(usage.snapshot(false).changes.is_empty());
        assert_eq!(usage.epoch(), 2);
    }

    #[test]
    fn a_rescan_counts_each_inode_once_by_owner() {
        let store = tempfile::tempdir().unwrap();
        let root = store.path();
        std::fs::create_dir_all(root.join("workspaces/w/d")).unwrap();
        std::fs::create_dir_all(root.join("agents/a")).unwrap();
        std::fs::create_dir_all(root.join("system")).unwrap();
        std::fs::write(root.join("workspaces/w/d/f"), vec![1u8; 8192]).unwrap();
        std::fs::hard_link(root.join("workspaces/w/d/f"), root.join("agents/a/link")).unwrap();
        std::os::unix::fs::symlink("x".repeat(300), root.join("agents/a/s")).unwrap();
        xattr::set(root.join("workspaces/w/d"), "user.topic", &[1u8; 50]).unwrap();
        std::fs::write(root.join("system/not-counted"), vec![0u8; 5000]).unwrap();
        for p in ["workspaces/w/d", "workspaces/w/d/f"] {
            chown(root.join(p), Some(61006), None).unwrap();
        }
        std::os::unix::fs::lchown(root.join("agents/a/s"), Some(61006), None).unwrap();
        let fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let mut last = 0;
        let spill = Spill::new(&root.join(".clawfs"));
        let by_uid = rescan(fd.as_fd(), &spill, &mut |n| last = n).unwrap();
        // d (4096 + "user.topic" + 50), f (8192, counted once), s (300).
        assert_eq!(
            by_uid[&61006],
            Held {
                bytes: DIR_BYTES + 10 + 50 + 8192 + 300,
                files: 3
            }
        );
        // workspaces, workspaces/w, agents, agents/a are root's here; the areas themselves
        // are not listed, only what is in them.
        assert_eq!(by_uid[&0].files, 2);
        assert_eq!(last, 5);
    }

    #[test]
    fn promises_share_one_quota_and_a_uid_is_one_agents() {
        let u = HeldUsage::default();
        u.learn(61006, "fs-engine");
        u.apply(61006, Delta::created(600));
        let limit = Held {
            bytes: 1000,
            files: 10,
        };
        let add = |bytes| Held { bytes, files: 0 };
        assert_eq!(u.reserve("fs-engine", limit, add(300)), Ok(()));
        // A second call at once: 600 held + 300 promised leaves 100.
        assert_eq!(
            u.reserve("fs-engine", limit, add(300)),
            Err(Held {
                bytes: 100,
                files: 9
            })
        );
        u.unreserve("fs-engine", add(300));
        assert_eq!(u.reserve("fs-engine", limit, add(300)), Ok(()));
        // A uid holding files, or running, stays its agent's.
        assert_eq!(
            u.claim(61006, "kernel-engine", false),
            Err(UidHeld {
                agent: "fs-engine".into()
            })
        );
        assert_eq!(u.claim(62000, "fs-engine", false), Ok(true));
        assert_eq!(
            u.claim(62000, "kernel-engine", true),
            Err(UidHeld {
                agent: "fs-engine".into()
            })
        );
        assert_eq!(u.claim(62000, "kernel-engine", false), Ok(true));
        assert_eq!(u.agent_of(62000).as_deref(), Some("kernel-engine"));
        assert_eq!(u.claim(0, "fs-engine", false), Ok(false));
    }

    #[test]
    fn a_size_is_settled_once_and_not_after_its_file_is_gone() {
        let h = HeldSize::default();
        assert_eq!(h.base(10), 10);
        assert_eq!(h.settle(25), Delta::resized(10, 25));
        assert_eq!(h.settle(5), Delta::resized(25, 5));
        // Removed while open: charged until the last close.
        h.opened();
        h.opened();
        assert_eq!(h.unlinked(7, 9, 3), Some(Delta::resized(5, 9)));
        assert_eq!(h.settle(100), Delta::resized(9, 100));
        assert_eq!(h.closed(), None);
        assert_eq!(h.closed(), Some((7, Delta::removed(103))));
        assert_eq!(h.settle(200), Delta::default());
        let closed = HeldSize::default();
        assert_eq!(closed.unlinked(7, 9, 3), None);
        let u = HeldUsage::default();
        u.learn(61006, "fs-engine");
        u.apply(61006, Delta::created(100));
        u.apply(61007, Delta::created(7));
        u.apply(61006, Delta::removed(40));
        assert_eq!(
            u.of_agent("fs-engine"),
            Held {
                bytes: 60,
                files: 0
            }
        );
    }
}
