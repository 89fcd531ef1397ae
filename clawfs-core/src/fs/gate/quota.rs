//! Agents' byte and file quotas count what each agent holds now, by owner, as `quota(1)` does
//! ([`crate::held`]): a new name, a write, a truncation, an xattr, a removal or a chown changes
//! what the owner of the inode holds. Growth is checked against the acting agent's quota before
//! it happens; what is held is saved across restarts and recomputed after a crash.

use rustix::fs::{AtFlags, FileType};

use super::*;
use crate::held::{Delta, Held};
use crate::shared_usage;
use clawfs_store::backing::BackingHandle;

// A recount asked of a running daemon (`clawfs quota rescan`): removed when done.
use crate::shared_usage::RESCAN_FILE as QUOTA_RESCAN_FILE;

impl ClawFs {
    /// Checks that `who` may add `adding` (files, bytes) to what it holds. Only growth is
    /// checked, so an agent over its quota (after the policy lowered it) can still delete and
    /// shrink. The change itself is counted when it is made.
    pub(in crate::fs) fn decide_quota(
        &self,
        caller: &Caller,
        who: &Identity,
        op: &'static str,
        path: &NsPath,
        adding: Quota,
    ) -> FsResult<()> {
        let Identity::Agent(agent) = who else {
            return Ok(());
        };
        let verdict = self.policy().check_quota(who, self.usage(agent), adding);
        self.conclude_refusal(caller, who, op, path, None, verdict)
    }

    /// Whether `who` is an agent with a byte quota, whose writes are checked one by one.
    pub(in crate::fs) fn metered(&self, who: &Identity) -> bool {
        match who {
            Identity::Agent(agent) => self.policy().quota(agent).bytes != Quota::UNLIMITED,
            _ => false,
        }
    }

    /// Checks the growth of a write ending at `end` (what it adds past the file's current
    /// size) for the metered writer `w`; see [`Self::charge`].
    pub(in crate::fs) fn charge_growth(
        &self,
        w: &crate::open_files::WriteHandle,
        op: &'static str,
        end: u64,
        file: &crate::open_files::OpenFile,
    ) -> FsResult<()> {
        let st = rustix::fs::fstat(&file.backing.file)?;
        self.charge(w, op, end.saturating_sub(st.st_size as u64), st.st_uid)
    }

    /// Checks that the metered writer `w` may add `bytes` to a file `owner` owns; refused with
    /// EDQUOT (audited, and in the agent's denials file) when it would cross the quota of
    /// whoever will hold them ([`Self::payer`]). They are counted when the write is settled
    /// ([`Self::settle_write`]).
    pub(in crate::fs) fn charge(
        &self,
        w: &crate::open_files::WriteHandle,
        op: &'static str,
        bytes: u64,
        owner: u32,
    ) -> FsResult<()> {
        let caller = Caller {
            uid: 0,
            gid: 0,
            pid: w.pid,
        };
        self.decide_growth(&caller, &w.who, op, &w.path, bytes, owner)
    }

    /// Checks that `who` may add `bytes` to an inode `owner` owns: against the quota of
    /// whoever will hold them — the owner when that is an agent, else `who` (see
    /// [`Self::payer`]); refused with EDQUOT, audited as `who`'s. Admins are never refused.
    pub(in crate::fs) fn decide_growth(
        &self,
        caller: &Caller,
        who: &Identity,
        op: &'static str,
        path: &NsPath,
        bytes: u64,
        owner: u32,
    ) -> FsResult<()> {
        // Only agents are limited, whoever grows what they hold (as `quota(1)` refuses a user
        // growing another's file past the owner's quota); admins grow what they may.
        if bytes == 0 || matches!(who, Identity::Admin) {
            return Ok(());
        }
        let adding = Quota { bytes, files: 0 };
        let holder = match self.gate.held.agent_of(owner).map(|a| AgentName::new(&a)) {
            Some(Ok(agent)) => Identity::Agent(agent),
            _ => who.clone(),
        };
        let verdict = match &holder {
            Identity::Agent(agent) => self
                .policy()
                .check_quota(&holder, self.usage(agent), adding),
            _ => Ok(()),
        };
        self.conclude_refusal(caller, who, op, path, None, verdict)
    }

    /// Who holds what `writer` adds to a file `owner` owns: the owner, as `quota(1)` counts;
    /// but an agent that grows a file of root's or of a user's (who have no quota) holds that
    /// growth itself until a recount gives it to the owner, or writing to such files would
    /// fill the disk past any quota.
    pub(in crate::fs) fn payer(&self, writer: Option<(&Identity, u32)>, owner: u32) -> u32 {
        match writer {
            Some((Identity::Agent(_), uid)) if self.gate.held.agent_of(owner).is_none() => uid,
            _ => owner,
        }
    }

    /// Counts the data `file` holds now (a write, a close).
    pub(in crate::fs) fn settle_write(&self, file: &crate::open_files::OpenFile) {
        let writer = file.writer.as_ref().map(|w| (&w.who, w.uid));
        self.settle(&file.held, file.backing.file.as_fd(), writer);
    }

    /// Counts the data of the regular file at `fd`, whose charge is `held`, for its owner, or
    /// for the agent `writer` (who, uid) that grew it ([`Self::payer`]).
    pub(in crate::fs) fn settle(
        &self,
        held: &crate::held::HeldSize,
        fd: BorrowedFd<'_>,
        writer: Option<(&Identity, u32)>,
    ) {
        if let Ok(st) = rustix::fs::fstat(fd) {
            if matches!(
                FileType::from_raw_mode(st.st_mode),
                FileType::RegularFile | FileType::Directory
            ) {
                self.held_grew(held.settle(crate::held::cost_of(&st)), writer, st.st_uid);
            }
        }
    }

    /// Counts `d`, a change in what an inode of `owner` costs made by `writer`: growth for
    /// whoever pays it ([`Self::payer`]), the rest for the owner.
    pub(in crate::fs) fn held_grew(&self, d: Delta, writer: Option<(&Identity, u32)>, owner: u32) {
        let to = match d.bytes > 0 {
            true => self.payer(writer, owner),
            false => owner,
        };
        self.gate.held.apply(to, d);
    }

    /// Counts a new name in the folder `parent` (reached by `dir`), which may have grown, for
    /// `who` (fs uid `uid`) who added it ([`Self::payer`]).
    pub(in crate::fs) fn held_named(
        &self,
        (who, uid): (&Identity, u32),
        parent: u64,
        dir: BorrowedFd<'_>,
    ) {
        if let Ok(node) = self.node(parent) {
            self.settle(&node.held, dir, Some((who, uid)));
        }
    }

    /// Counts a new inode `name` in the folder `parent` (reached by `dir`), made by `who` (fs
    /// uid `uid`; its owner, normally), and the folder's growth. A new inode has no `user.*`
    /// xattrs yet.
    pub(in crate::fs) fn held_made(
        &self,
        (who, uid): (&Identity, u32),
        parent: u64,
        dir: BorrowedFd<'_>,
        name: &OsStr,
    ) {
        self.held_named((who, uid), parent, dir);
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let cost = crate::held::cost_of(&st);
                if let Identity::Agent(agent) = who {
                    self.learn_agent_uid(st.st_uid, agent);
                }
                self.gate.held.apply(st.st_uid, Delta::created(cost));
            }
            Err(e) => tracing::warn!(error = %e, "a new file could not be counted"),
        }
    }

    /// What removing `name` from `dir` gives back, measured before it is removed: its owner and
    /// the cost of its inode, if this is its last name. Pass it to [`Self::held_removed`] once
    /// the removal succeeded.
    pub(in crate::fs) fn held_cost(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Option<Removal> {
        Removal::measure(dir, name, &self.spill)
    }

    /// Gives back what a removed last name held (see [`Self::held_cost`]); a file that is still
    /// open stays charged until its last close.
    pub(in crate::fs) fn held_removed(&self, r: Removal) {
        if let Some(handle) = &r.handle {
            self.spill.forget(handle);
        }
        let node = self.inodes.get(self.inodes.mount_ino(r.ino));
        let kept = node
            .as_ref()
            .and_then(|n| n.held.unlinked(r.uid, r.data, r.cost - r.data));
        match kept {
            Some(settled) => self.gate.held.apply(r.uid, settled),
            None => self.gate.held.apply(r.uid, Delta::removed(r.cost)),
        }
    }

    /// A descriptor of a file whose charge is `held` was closed: the last one of a removed
    /// file gives back what it held.
    pub(in crate::fs) fn held_closed(&self, held: &crate::held::HeldSize) {
        if let Some((uid, d)) = held.closed() {
            self.gate.held.apply(uid, d);
        }
    }

    /// Counts a change of `delta` bytes (an xattr set or removed) for the owner `uid`.
    pub(in crate::fs) fn held_changed(&self, uid: u32, bytes: i64) {
        self.gate.held.apply(uid, Delta { bytes, files: 0 });
    }

    /// Moves what the inode at `fd` costs from `from` to its owner now (a chown).
    pub(in crate::fs) fn held_chowned(&self, node: &Node, fd: BorrowedFd<'_>, from: u32) {
        let Ok(st) = rustix::fs::fstat(fd) else {
            return;
        };
        if st.st_uid == from {
            return;
        }
        let mut cost = crate::held::cost_of(&st);
        if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
            // Its data is counted from now on for the new owner, as settled so far.
            cost = node.held.base(cost);
        }
        if matches!(
            FileType::from_raw_mode(st.st_mode),
            FileType::RegularFile | FileType::Directory
        ) {
            cost += crate::held::user_xattr_bytes(&crate::held::fd_path(fd)) + self.spill.bytes(fd);
        }
        self.gate.held.transfer(from, st.st_uid, cost);
    }

    /// What `agent` holds.
    pub(in crate::fs) fn usage(&self, agent: &AgentName) -> Quota {
        let Held { bytes, files } = self.gate.held.of_agent(agent.as_str());
        Quota { bytes, files }
    }

    /// What each owner holds and which agent each uid is, as saved now.
    pub fn held_usage(&self) -> crate::held::Saved {
        self.gate.held.snapshot(false)
    }

    /// Loads the usage saved by a previous daemon; recomputes it from the store when there is
    /// none, when it is of another format, or when that daemon did not stop cleanly.
    pub(in crate::fs) fn load_usage(&self) {
        // A stop recorded before this daemon started is in force from its first request.
        self.set_estop(self.read_estop());
        if self.store.is_shared() {
            self.load_shared_usage();
        } else {
            self.load_own_usage();
        }
        self.learn_policy_uids();
        // Until it stops cleanly, the saved usage says it may be stale.
        self.write_usage(false);
    }

    /// [`Self::load_usage`] in a store of one host.
    fn load_own_usage(&self) {
        let path = self.store.host_rel().join(QUOTA_USAGE_FILE);
        let saved = clawfs_store::beneath::read(self.store.root_fd(), &path, 64 << 20)
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_slice::<crate::held::Saved>(&t).ok());
        match saved {
            Some(s) if s.version == crate::held::FORMAT && s.clean => {
                self.gate.held.replace(s.by_uid, s.agents);
            }
            other => {
                if let Some(s) = other.filter(|s| s.version == crate::held::FORMAT) {
                    self.gate.held.replace(HashMap::new(), s.agents);
                }
                self.recount_at_start();
            }
        }
    }

    fn recount_at_start(&self) {
        tracing::info!("counting what each owner holds in the store");
        if let Err(e) = self.rescan_usage(&mut |_| {}) {
            tracing::warn!(error = %e, "could not count what owners hold; starting from zero");
        }
    }

    /// [`Self::load_usage`] in a store that hosts share ([`crate::shared_usage`]): the
    /// store's count plus every host's changes since it. A host whose daemon did not stop
    /// cleanly lost its last changes, so it counts the store again (a new epoch).
    fn load_shared_usage(&self) {
        let view = match shared_usage::read_view(
            &self.store,
            self.store.host(),
            &self.agents_of_the_policy(),
        ) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "reading the hosts' quota usage");
                None
            }
        };
        let Some(view) = view else {
            return self.recount_at_start();
        };
        let own = match &view.own {
            Some(o) if o.epoch == view.epoch && !o.clean => return self.recount_at_start(),
            Some(o) if o.epoch == view.epoch => o.changes.clone(),
            // Made before the count, which holds them.
            _ => HashMap::new(),
        };
        self.gate
            .held
            .share(view.epoch, Some(own), view.across, view.agents);
    }

    /// Whether `name` is an agent of the policy in force (of other hosts' uid → agent pairs,
    /// only those are taken).
    fn agents_of_the_policy(&self) -> impl Fn(&str) -> bool {
        let policy = self.policy();
        move |name| policy.agents().any(|a| a.name.as_str() == name)
    }

    /// Reads the other hosts' changes again, in a store that hosts share (every 2 s).
    fn refresh_shared_usage(&self) {
        match shared_usage::read_view(&self.store, self.store.host(), &self.agents_of_the_policy())
        {
            Ok(Some(view)) => self
                .gate
                .held
                .share(view.epoch, None, view.across, view.agents),
            // No count any more: ours stands until the next recount.
            Ok(None) => {}
            // Said once, not every 2 s: the totals stand as last read until a recount.
            Err(e) => {
                if !self
                    .gate
                    .usage_unreadable
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(error = %e, "reading the hosts' quota usage");
                }
                return;
            }
        }
        self.gate
            .usage_unreadable
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// An agent announces itself as the caller's uid (a `clawfs run --user` uid, say): refused,
    /// audited, when that uid is another agent's and owns files or runs processes other than
    /// the caller; else learned.
    pub(in crate::fs) fn claim_agent_uid(
        &self,
        caller: &Caller,
        agent: &AgentName,
        path: &NsPath,
    ) -> FsResult<()> {
        let in_use = uid_runs_elsewhere(caller.uid, caller.pid);
        match self.gate.held.claim(caller.uid, agent.as_str(), in_use) {
            Ok(news) => {
                if news {
                    self.policy_acls_changed();
                }
                Ok(())
            }
            Err(held) => {
                let who = Identity::Agent(agent.clone());
                let verdict = self
                    .policy()
                    .check_uid_claim(&who, caller.uid, Some(&held.agent));
                self.conclude_refusal(caller, &who, "announce", path, None, verdict)
            }
        }
    }

    /// Records that `uid` acts as `agent` (a `clawfs run --user` uid, say): it is counted as
    /// the agent's, and named in the ACLs the kernel checks (see `kernel_acl`), which the kernel
    /// then asks for again.
    pub(in crate::fs) fn learn_agent_uid(&self, uid: u32, agent: &AgentName) {
        if self.gate.held.learn(uid, agent.as_str()) {
            self.policy_acls_changed();
        }
    }

    /// Every uid seen acting as an agent, with the agent.
    pub(in crate::fs) fn agent_uids_seen(&self) -> Vec<(u32, String)> {
        self.gate.held.agent_uids()
    }

    /// The uids the policy gives agents are theirs, before they make anything.
    pub(in crate::fs) fn learn_policy_uids(&self) {
        for spec in self.policy().agents() {
            if let Some(uid) = spec.uid {
                self.gate.held.learn(uid, spec.name.as_str());
            }
        }
    }

    /// Recomputes what every owner holds from the store ([`crate::held::rescan`]), replacing
    /// the counts (changes made while it runs may be counted or not).
    pub fn rescan_usage(&self, progress: crate::held::Progress<'_>) -> std::io::Result<()> {
        self.sweep_spilled_xattrs();
        let by_uid = crate::held::rescan(self.store.root_fd(), &self.spill, progress)?;
        if self.store.is_shared() {
            // The next count of the store, which every host's changes follow from now on.
            let agents = self.gate.held.agent_uids().into_iter().collect();
            let epoch = shared_usage::write_count(&self.store, by_uid.clone(), agents)?;
            let across = crate::held::Across {
                base: by_uid,
                others: HashMap::new(),
            };
            self.gate
                .held
                .share(epoch, Some(HashMap::new()), across, HashMap::new());
        } else {
            self.gate.held.replace(by_uid, HashMap::new());
        }
        self.write_usage(false);
        Ok(())
    }

    /// Runs a recomputation `clawfs quota rescan` asked for, if one is pending.
    pub fn rescan_if_asked(&self) {
        let dir = &self.store.host_rel();
        let Ok(Some(_)) =
            clawfs_store::beneath::read(self.store.root_fd(), &dir.join(QUOTA_RESCAN_FILE), 4096)
        else {
            return;
        };
        if let Err(e) = self.rescan_usage(&mut |_| {}) {
            tracing::warn!(error = %e, "quota rescan");
        }
        if let Ok(d) = clawfs_store::beneath::open_dir(self.store.root_fd(), dir) {
            let _ = rustix::fs::unlinkat(&d, QUOTA_RESCAN_FILE, AtFlags::empty());
        }
    }

    /// Saves the usage if it changed (atomically), so it survives a restart; in a store that
    /// hosts share, then reads the other hosts' changes.
    pub fn save_usage(&self) {
        if self.gate.held.dirty() {
            self.write_usage(false);
        }
        if self.store.is_shared() {
            self.refresh_shared_usage();
        }
    }

    /// Saves the usage as left by a clean stop: the next daemon trusts it.
    pub fn save_usage_at_stop(&self) {
        self.write_usage(true);
    }

    fn write_usage(&self, clean: bool) {
        let snapshot = self.gate.held.snapshot(clean);
        let json = serde_json::to_vec(&snapshot).expect("usage serialises");
        let dir = &self.store.host_rel();
        let how = clawfs_store::beneath::FileMode::mode(0o600);
        if let Err(e) = self.store.write_beneath(dir, QUOTA_USAGE_FILE, &json, how) {
            tracing::warn!(error = %e, "could not save quota usage");
        }
    }
}

/// What a removal gives back: see [`ClawFs::held_cost`].
#[derive(Debug)]
pub(in crate::fs) struct Removal {
    uid: u32,
    /// The data part of `cost` (a regular file's).
    data: u64,
    cost: u64,
    ino: u64,
    folder: bool,
    handle: Option<BackingHandle>,
}

impl Removal {
    /// What removing `name` from `dir` would give back, measured now: `None` unless it is the
    /// inode's last name.
    pub(in crate::fs) fn measure(
        dir: BorrowedFd<'_>,
        name: &OsStr,
        spill: &crate::xattr_spill::Spill,
    ) -> Option<Removal> {
        let (st, cost) = crate::held::cost_at(dir, name, spill).ok()?;
        let folder = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        (folder || st.st_nlink <= 1).then_some(Removal {
            uid: st.st_uid,
            data: match folder {
                true => 0,
                false => crate::held::cost_of(&st),
            },
            cost,
            ino: st.st_ino,
            folder,
            // Its attributes kept beside it go with it.
            handle: match spill.unused() {
                true => None,
                false => BackingHandle::at(dir, name).ok(),
            },
        })
    }

    /// The backing inode number of the file whose last name this removes (none for a folder).
    pub(in crate::fs) fn last_file(&self) -> Option<u64> {
        (!self.folder).then_some(self.ino)
    }
}

/// Whether a process other than `pid` runs with `uid` as its real or effective uid.
fn uid_runs_elsewhere(uid: u32, pid: u32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.filter_map(Result::ok).any(|e| {
        let Some(other) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            return false;
        };
        if other == pid {
            return false;
        }
        std::fs::read_to_string(e.path().join("status")).is_ok_and(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .is_some_and(|ids| ids.split_whitespace().take(2).any(|v| v == uid.to_string()))
        })
    })
}
