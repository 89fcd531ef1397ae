//! What a tool call adds to and gives back from what owners hold. A tool writes the backing
//! store by descriptor, past the file operations that count ([`super::quota`]), so it tells a
//! [`ToolLedger`] of every inode it makes or removes and every file it rewrites; each is
//! measured as it happens, and counted when the call is done ([`ClawFs::count_tool_changes`]),
//! by the same rules: a new inode for its owner, a removed last name given back (or kept until
//! the last close of a file still open), a rewritten file's growth for whoever grew it.

use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::FileType;

use super::quota::Removal;
use super::*;
use crate::held::Delta;

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
    /// A folder owned by `uid` whose names changed, costing `cost` now.
    Folder { ino: u64, uid: u32, cost: u64 },
}

/// Records a call's changes (see the module).
#[derive(Debug, Default, Clone)]
pub struct ToolLedger(Arc<Mutex<Vec<Change>>>);

impl ToolLedger {
    fn push(&self, c: Change) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(c);
    }

    fn folder(&self, dir: BorrowedFd<'_>) {
        if let Ok(st) = rustix::fs::fstat(dir) {
            self.push(Change::Folder {
                ino: st.st_ino,
                uid: st.st_uid,
                cost: crate::held::cost_of(&st),
            });
        }
    }

    fn take(&self) -> Vec<Change> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl clawfs_agent_tools::Ledger for ToolLedger {
    fn made(&self, dir: BorrowedFd<'_>, name: &str) {
        match crate::held::cost_at(dir, name.as_ref()) {
            Ok((st, cost)) => self.push(Change::Made {
                uid: st.st_uid,
                cost,
            }),
            Err(e) => tracing::warn!(error = %e, "a file a tool made could not be counted"),
        }
        self.folder(dir);
    }

    fn removing(&self, dir: BorrowedFd<'_>, name: &str) -> Box<dyn FnOnce() + Send> {
        let removal = Removal::measure(dir, name.as_ref());
        let (this, dir) = (self.clone(), rustix::io::dup(dir).ok());
        Box::new(move || {
            if let Some(r) = removal {
                this.push(Change::Removed(r));
            }
            if let Some(dir) = dir {
                this.folder(dir.as_fd());
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
    /// Counts what the call of `who` (fs uid `uid`) recorded in `ledger`.
    pub(in crate::fs) fn count_tool_changes(
        &self,
        ledger: &ToolLedger,
        (who, uid): (&Identity, u32),
    ) {
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
                } => {
                    let d = match self.inodes.get(self.inodes.mount_ino(ino)) {
                        // The file's charge as the daemon settled it moves with the rewrite.
                        Some(node) => {
                            node.held.base(before);
                            node.held.settle(after)
                        }
                        None => Delta::resized(before, after),
                    };
                    self.held_grew(d, Some((who, uid)), owner);
                }
                // Counted as the file operations count a folder: through its node's charge,
                // when the kernel knows it.
                Change::Folder {
                    ino,
                    uid: owner,
                    cost,
                } => {
                    if let Some(node) = self.inodes.get(self.inodes.mount_ino(ino)) {
                        self.held_grew(node.held.settle(cost), Some((who, uid)), owner);
                    }
                }
            }
        }
    }
}
