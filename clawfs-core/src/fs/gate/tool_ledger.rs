//! What a tool call adds to and gives back from what owners hold. A tool writes the backing
//! store by descriptor, past the file operations that count ([`super::quota`]), so it tells a
//! [`ToolLedger`] of every inode it makes or removes and every file it rewrites; each is
//! measured as it happens, and counted when the call is done ([`ClawFs::count_tool_changes`]),
//! by the same rules: a new inode for its owner, a removed last name given back (or kept until
//! the last close of a file still open), a rewritten file's growth for whoever grew it.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::FileType;

use super::quota::Removal;
use super::*;
use crate::held::{Delta, Held};

/// The growth a call's meter promised, by agent: taken back once its changes are counted.
#[derive(Debug, Default, Clone)]
pub struct Promised(Arc<Mutex<HashMap<String, Held>>>);

/// One change, measured when it was made.
#[derive(Debug)]
enum Change {
    /// A new inode: its owner and cost.
    Made { uid: u32, cost: u64 },
    /// A last name gone (see [`Removal`]).
    Removed(Removal),
    /// A regular file rewritten in place, owned by `uid`, from `before` to `after`.
    Rewritten {
        ino: u64,
        uid: u32,
        before: u64,
        after: u64,
    },
    /// A folder owned by `uid` whose names changed, costing `before`, then `after`.
    Folder {
        ino: u64,
        uid: u32,
        before: u64,
        after: u64,
    },
}

/// Records a call's changes (see the module).
#[derive(Clone)]
pub struct ToolLedger {
    changes: Arc<Mutex<Vec<Change>>>,
    /// The store's attributes past what backing inodes hold: counted, and carried to a
    /// replacement.
    spill: Arc<crate::xattr_spill::Spill>,
}

/// A folder's cost now, with its inode and owner.
fn folder_cost(dir: BorrowedFd<'_>) -> Option<(u64, u32, u64)> {
    let st = rustix::fs::fstat(dir).ok()?;
    Some((st.st_ino, st.st_uid, crate::held::cost_of(&st)))
}

impl ToolLedger {
    /// A ledger for one call on the store whose kept attributes are `spill`.
    pub(in crate::fs) fn new(spill: Arc<crate::xattr_spill::Spill>) -> Self {
        Self {
            changes: Default::default(),
            spill,
        }
    }

    fn push(&self, c: Change) {
        self.changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(c);
    }

    /// The folder `dir`, which cost `before`, changed.
    fn folder(&self, dir: BorrowedFd<'_>, before: Option<(u64, u32, u64)>) {
        if let (Some((ino, uid, before)), Some((_, _, after))) = (before, folder_cost(dir)) {
            self.push(Change::Folder {
                ino,
                uid,
                before,
                after,
            });
        }
    }

    fn take(&self) -> Vec<Change> {
        std::mem::take(&mut *self.changes.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl clawfs_agent_tools::Ledger for ToolLedger {
    fn making(&self, dir: BorrowedFd<'_>) -> clawfs_agent_tools::Made {
        let before = folder_cost(dir);
        let (this, dir) = (self.clone(), rustix::io::dup(dir).ok());
        Box::new(move |name| {
            let Some(dir) = dir else { return };
            match crate::held::cost_at(dir.as_fd(), name, &this.spill) {
                Ok((st, cost)) => this.push(Change::Made {
                    uid: st.st_uid,
                    cost,
                }),
                Err(e) => tracing::warn!(error = %e, "a file a tool made could not be counted"),
            }
            this.folder(dir.as_fd(), before);
        })
    }

    fn removing(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Box<dyn FnOnce() + Send> {
        let removal = Removal::measure(dir, name, &self.spill);
        let before = folder_cost(dir);
        let (this, dir) = (self.clone(), rustix::io::dup(dir).ok());
        Box::new(move || {
            if let Some(r) = removal {
                this.push(Change::Removed(r));
            }
            if let Some(dir) = dir {
                this.folder(dir.as_fd(), before);
            }
        })
    }

    fn replacing(&self, from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> std::io::Result<()> {
        self.spill.copy(from, to)
    }

    fn renaming(&self, dir: BorrowedFd<'_>) -> Box<dyn FnOnce() + Send> {
        let before = folder_cost(dir);
        let (this, dir) = (self.clone(), rustix::io::dup(dir).ok());
        Box::new(move || {
            if let Some(dir) = dir {
                this.folder(dir.as_fd(), before);
            }
        })
    }

    fn rewriting(&self, file: BorrowedFd<'_>) -> Box<dyn FnOnce(BorrowedFd<'_>) + Send> {
        let before = rustix::fs::fstat(file).ok();
        let this = self.clone();
        Box::new(move |file| {
            let (Some(before), Ok(after)) = (before, rustix::fs::fstat(file)) else {
                return;
            };
            if FileType::from_raw_mode(after.st_mode) == FileType::RegularFile {
                this.push(Change::Rewritten {
                    ino: after.st_ino,
                    uid: after.st_uid,
                    before: crate::held::cost_of(&before),
                    after: crate::held::cost_of(&after),
                });
            }
        })
    }
}

impl ClawFs {
    /// The meter of a tool call by `agent` (fs uid `uid`): refuses every change once an
    /// emergency stop is in force, and growth past the quota of whoever will hold it — the
    /// owner of the file grown when that is an agent, else the caller — counting what it holds
    /// and what calls running at once were promised ([`crate::held::HeldUsage::reserve`]).
    pub(in crate::fs) fn tool_meter(
        &self,
        agent: &AgentName,
        uid: u32,
        promised: Promised,
    ) -> clawfs_agent_tools::Meter {
        let (held, policy) = (Arc::clone(&self.gate.held), self.policy());
        let stopped = self.estop_switch();
        let caller = agent.as_str().to_string();
        Arc::new(move |g: clawfs_agent_tools::Growth| {
            if stopped.load(std::sync::atomic::Ordering::Acquire) {
                return Err(ESTOP_REASON.to_string());
            }
            let holder = g
                .owner
                .filter(|&owner| owner != uid)
                .and_then(|owner| held.agent_of(owner))
                .unwrap_or_else(|| caller.clone());
            let limit = AgentName::new(&holder)
                .map(|name| policy.quota(&name))
                .unwrap_or(Quota::NONE);
            let add = Held {
                bytes: g.bytes,
                files: g.files,
            };
            let limit = Held {
                bytes: limit.bytes,
                files: limit.files,
            };
            if let Err(left) = held.reserve(&holder, limit, add) {
                let whose = match holder == caller {
                    true => format!("agent {holder}"),
                    false => format!("agent {holder}, who owns the file,"),
                };
                return Err(match add.bytes > left.bytes {
                    true => format!(
                        "{whose} has {} bytes of its quota left and this change adds {}; remove files (empty_trash gives deleted ones back) or ask an admin to raise quota.bytes",
                        left.bytes, add.bytes
                    ),
                    false => format!(
                        "{whose} has {} files of its quota left and this change makes {}; remove files (empty_trash gives deleted ones back) or ask an admin to raise quota.files",
                        left.files, add.files
                    ),
                });
            }
            let mut p = promised.0.lock().unwrap_or_else(PoisonError::into_inner);
            let mine = p.entry(holder).or_default();
            mine.bytes = mine.bytes.saturating_add(add.bytes);
            mine.files = mine.files.saturating_add(add.files);
            Ok(())
        })
    }

    /// Takes back what a call's meter promised: its changes are counted now.
    pub(in crate::fs) fn keep_promises(&self, promised: &Promised) {
        let all = std::mem::take(&mut *promised.0.lock().unwrap_or_else(PoisonError::into_inner));
        for (agent, p) in all {
            self.gate.held.unreserve(&agent, p);
        }
    }

    /// Counts what the call of `who` (fs uid `uid`) recorded in `ledger`.
    pub(in crate::fs) fn count_tool_changes(
        &self,
        ledger: &ToolLedger,
        (who, uid): (&Identity, u32),
    ) {
        // A folder changed several times in one call: from its first cost to its last.
        let mut folders: Vec<(u64, u32, u64, u64)> = Vec::new();
        for change in ledger.take() {
            match change {
                Change::Made { uid: owner, cost } => {
                    if let (Identity::Agent(agent), true) = (who, owner == uid) {
                        self.learn_agent_uid(owner, agent);
                    }
                    self.gate.held.apply(owner, Delta::created(cost));
                }
                Change::Removed(r) => self.held_removed(r),
                Change::Rewritten {
                    ino,
                    uid: owner,
                    before,
                    after,
                } => self.held_resized(ino, owner, (before, after), (who, uid)),
                Change::Folder {
                    ino,
                    uid: owner,
                    before,
                    after,
                } => match folders.iter_mut().find(|f| f.0 == ino) {
                    Some(f) => f.3 = after,
                    None => folders.push((ino, owner, before, after)),
                },
            }
        }
        for (ino, owner, before, after) in folders {
            self.held_resized(ino, owner, (before, after), (who, uid));
        }
    }

    /// Counts an inode of `owner` (backing `ino`) that went from costing `before` to `after`,
    /// changed by `who`: through its node's charge when the kernel knows it (which moves
    /// with the change), else as the difference.
    fn held_resized(
        &self,
        ino: u64,
        owner: u32,
        (before, after): (u64, u64),
        (who, uid): (&Identity, u32),
    ) {
        let d = match self.inodes.get(self.inodes.mount_ino(ino)) {
            Some(node) => {
                node.held.base(before);
                node.held.settle(after)
            }
            None => Delta::resized(before, after),
        };
        self.held_grew(d, Some((who, uid)), owner);
    }
}
