//! The inode table: which backing inode each kernel inode number stands for, and how many
//! lookups the kernel holds on it.
//!
//! Inode numbers are the backing inode numbers, so they are stable across remounts. The mount
//! root must be 1 for FUSE: the store root's number and 1 swap places, which keeps the mapping a
//! bijection.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex, PoisonError};

use crate::io_mode::IoMode;
use clawfs_store::area::Place;
use clawfs_store::backing::BackingHandle;

/// The inode number FUSE reserves for the mount root.
pub const ROOT_INO: u64 = 1;

/// What the daemon knows about one inode the kernel has looked up.
#[derive(Clone, Debug)]
pub struct Node {
    /// How to reach the backing inode.
    pub handle: Arc<BackingHandle>,
    /// Where it sits (for directories; files are `Inside(area)`).
    pub place: Place,
    /// Its open files by I/O mode; as long-lived as the kernel's inode.
    pub io: Arc<IoMode>,
    /// The size its owner is charged for (regular files), settled as it changes.
    pub held: Arc<crate::held::HeldSize>,
    /// The directory (mount inode) and name it was last reached by: how its namespace path is
    /// rebuilt when the kernel cannot name it (a path longer than a page).
    pub link: Option<Arc<(u64, OsString)>>,
}

struct Slot {
    node: Node,
    /// Kernel references: +1 per successful lookup-like reply, −n per forget.
    lookups: u64,
}

/// Inode number → node, with lookup counts.
///
/// Lock order: this table's locks are leaves; nothing else is locked while holding one, and
/// never both at once.
pub struct InodeTable {
    slots: Mutex<HashMap<u64, Slot>>,
    root_backing_ino: u64,
    /// The last [`FORGOTTEN`] nodes the kernel forgot: how to reach each again when a file
    /// handle names it (`open_by_handle_at`, an NFS re-export), and the directory and name it
    /// was last reached by.
    forgotten: Mutex<lru::LruCache<u64, Forgotten>>,
}

/// How many forgotten nodes the table keeps the way back to (about 100 bytes each).
pub const FORGOTTEN: usize = 1 << 18;

/// A node the kernel forgot, as [`InodeTable::forgotten`] keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forgotten {
    /// How to reach the backing inode.
    pub handle: BackingHandle,
    /// The directory (mount inode) and name it was last reached by.
    pub link: Option<(u64, OsString)>,
}

impl InodeTable {
    /// A table whose root (inode 1) is `root`, whose backing inode number is `root_backing_ino`.
    pub fn new(root: BackingHandle, root_backing_ino: u64) -> Self {
        let mut slots = HashMap::new();
        slots.insert(
            ROOT_INO,
            Slot {
                node: Node {
                    handle: Arc::new(root),
                    place: Place::MountRoot,
                    io: Default::default(),
                    held: Default::default(),
                    link: None,
                },
                // The root is never forgotten.
                lookups: u64::MAX / 2,
            },
        );
        Self {
            slots: Mutex::new(slots),
            root_backing_ino,
            forgotten: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(FORGOTTEN).expect("not zero"),
            )),
        }
    }

    /// How to reach `ino` again, if the kernel forgot it lately.
    pub fn forgotten(&self, ino: u64) -> Option<Forgotten> {
        let mut f = self
            .forgotten
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.get(&ino).cloned()
    }

    /// Every forgotten node kept, oldest first (saved at a clean stop).
    pub fn all_forgotten(&self) -> Vec<(u64, Forgotten)> {
        let f = self
            .forgotten
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.iter().rev().map(|(&ino, n)| (ino, n.clone())).collect()
    }

    /// `ino` was moved (renamed) to `name` in the directory `parent`: the link it is reached
    /// by again, known or forgotten.
    pub fn relink(&self, ino: u64, parent: u64, name: &OsStr) {
        {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(slot) = slots.get_mut(&ino) {
                slot.node.link = Some(Arc::new((parent, name.to_owned())));
                return;
            }
        }
        let mut f = self
            .forgotten
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = f.peek_mut(&ino) {
            node.link = Some((parent, name.to_owned()));
        }
    }

    /// Every node the kernel holds now, as it would be kept once forgotten.
    pub fn live_nodes(&self) -> Vec<(u64, Forgotten)> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots
            .iter()
            .map(|(&ino, s)| {
                let f = Forgotten {
                    handle: (*s.node.handle).clone(),
                    link: s.node.link.as_deref().cloned(),
                };
                (ino, f)
            })
            .collect()
    }

    /// Keeps the way back to `ino` (saved by an earlier daemon, or just forgotten).
    pub fn keep_forgotten(&self, ino: u64, node: Forgotten) {
        let mut f = self
            .forgotten
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.put(ino, node);
    }

    /// The inode number the mount shows for a backing inode number.
    pub fn mount_ino(&self, backing_ino: u64) -> u64 {
        if backing_ino == self.root_backing_ino {
            ROOT_INO
        } else if backing_ino == ROOT_INO {
            self.root_backing_ino
        } else {
            backing_ino
        }
    }

    /// Where the node behind an inode number is, if the kernel holds a lookup on it (no copy
    /// of the node, for the request path).
    pub fn place_of(&self, ino: u64) -> Option<Place> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.get(&ino).map(|s| s.node.place)
    }

    /// The inode numbers the kernel holds of nodes whose place is `wanted`.
    pub fn inos_at(&self, wanted: impl Fn(Place) -> bool) -> Vec<u64> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots
            .iter()
            .filter(|(_, s)| wanted(s.node.place))
            .map(|(&ino, _)| ino)
            .collect()
    }

    /// The node behind an inode number, if the kernel holds a lookup on it.
    pub fn get(&self, ino: u64) -> Option<Node> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.get(&ino).map(|s| s.node.clone())
    }

    /// Records one more kernel lookup of `ino`, reached as `name` in the directory `parent`
    /// when known. If the inode number was reused by another backing file, the new handle
    /// replaces the old one (the kernel sees a new generation).
    pub fn remember(
        &self,
        ino: u64,
        handle: BackingHandle,
        place: Place,
        link: Option<(u64, &OsStr)>,
    ) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = |handle| Node {
            handle: Arc::new(handle),
            place,
            io: Default::default(),
            held: Default::default(),
            link: link.map(|(p, n)| Arc::new((p, n.to_owned()))),
        };
        match slots.get_mut(&ino) {
            Some(slot) => {
                if *slot.node.handle != handle {
                    slot.node = fresh(handle);
                } else if let Some((p, n)) = link {
                    let same = slot
                        .node
                        .link
                        .as_deref()
                        .is_some_and(|(lp, ln)| *lp == p && ln == n);
                    if !same {
                        slot.node.link = Some(Arc::new((p, n.to_owned())));
                    }
                }
                slot.lookups = slot.lookups.saturating_add(1);
            }
            None => {
                slots.insert(
                    ino,
                    Slot {
                        node: fresh(handle),
                        lookups: 1,
                    },
                );
            }
        }
    }

    /// Drops `n` kernel lookups; the entry goes when none remain (then `true`). Decrement
    /// and removal happen under the same guard.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let gone = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get_mut(&ino) {
                Some(slot) => {
                    slot.lookups = slot.lookups.saturating_sub(n);
                    match slot.lookups {
                        0 => slots.remove(&ino).map(|s| s.node),
                        _ => None,
                    }
                }
                None => None,
            }
        };
        let Some(node) = gone else {
            return false;
        };
        self.keep_forgotten(
            ino,
            Forgotten {
                handle: (*node.handle).clone(),
                link: node.link.as_deref().cloned(),
            },
        );
        true
    }

    /// How many inodes the kernel currently holds (for status and leak tests).
    pub fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether only the root is known.
    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }
}
