//! The files ClawFS generates instead of storing (`agents/self`, `tools/call/<tool>`,
//! `tools/requests/`, `tools/responses/`, `vault/secrets/`; see [`crate::generated_files`]): their
//! state, and [`Route`], the one place that tells a generated inode from a stored one.

mod index_view;
pub(super) use index_view::VIEWS_DIR;
mod search_dir;
mod serve;
mod tool_calls;
mod tool_requests;
pub use tool_requests::ToolStep;
mod tool_threads;
pub(crate) use tool_threads::ToolThreads;
mod wasm_calls;
pub(crate) use wasm_calls::WasmTools;

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use super::ClawFs;
use crate::attr::Attr;
use crate::error::{FsError, FsResult};
use crate::generated_files::{
    GeneratedHandle, GeneratedInodes, GeneratedNode, MAX_RESPONSES_PER_CALLER,
    MAX_RESPONSE_BYTES_PER_CALLER,
};
use crate::open_files::HandleTable;

/// What an inode number names. Every call that serves both kinds matches on it, so a new kind
/// of generated file is one more arm where it matters and nothing elsewhere.
pub(super) enum Route {
    /// A file, folder or link of the store: served from its backing node.
    Stored,
    /// A generated node: served from [`Generated`] and the daemon's own state.
    Generated(GeneratedNode),
}

impl ClawFs {
    /// Where the calls on `ino` go.
    pub(super) fn route(&self, ino: u64) -> FsResult<Route> {
        match GeneratedInodes::is_generated(ino) {
            true => Ok(Route::Generated(self.generated.node(ino)?)),
            false => Ok(Route::Stored),
        }
    }
}

/// Kept tool responses by owner, oldest first.
type ResponsesByOwner = HashMap<String, VecDeque<Kept>>;

/// A tool response kept for `tools/responses/<id>.json`.
struct Kept {
    id: String,
    response: Vec<u8>,
    /// The asker's uid and gid: the file is theirs, so they may delete it from the sticky
    /// folder.
    uid: u32,
    gid: u32,
}

/// Request bytes one uid may hold in its open call files at once: each holds at most
/// [`crate::generated_files::MAX_CALL_REQUEST`], and a caller keeping many open must not grow
/// the daemon without bound. A write past it fails with `EFBIG`, as an oversized request does.
pub(super) const BUFFERED_PER_CALLER: u64 = 64 << 20;

/// The generated files' own state. Every lock here is a leaf: nothing else is taken while one
/// is held.
pub(super) struct Generated {
    /// Generated nodes ↔ their inode numbers.
    pub(super) inodes: GeneratedInodes,
    /// Open generated files by handle.
    pub(super) handles: HandleTable<GeneratedHandle>,
    /// Answers of the two-file tool interface, per caller, oldest first.
    responses: Mutex<ResponsesByOwner>,
    /// Request bytes held in open call files, per opener uid (see [`BUFFERED_PER_CALLER`]).
    pub(super) buffered: crate::per_caller::Ledger,
    /// Answer bytes held in open call files, per opener uid
    /// ([`crate::generated_files::MAX_ANSWER_BYTES_PER_CALLER`]).
    pub(super) answers: crate::per_caller::Ledger,
    /// When the daemon started: the times of generated nodes.
    started: SystemTime,
}

impl Generated {
    pub(super) fn new() -> Generated {
        Generated {
            inodes: GeneratedInodes::default(),
            handles: HandleTable::numbered_from(crate::open_files::GENERATED_HANDLES_FROM),
            responses: Mutex::default(),
            buffered: Default::default(),
            answers: Default::default(),
            started: SystemTime::now(),
        }
    }

    /// The node of a generated inode number.
    fn node(&self, ino: u64) -> FsResult<GeneratedNode> {
        self.inodes.node(ino).ok_or(FsError::UnknownInode(ino))
    }

    /// The kernel forgot the generated inode `ino`.
    pub(super) fn forget(&self, ino: u64) {
        self.inodes.forget(ino);
    }

    /// The inode number of `node` (allocated on first use).
    pub(super) fn ino(&self, node: &GeneratedNode) -> u64 {
        self.inodes.ino(node)
    }

    fn responses(&self) -> std::sync::MutexGuard<'_, ResponsesByOwner> {
        self.responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept response `id` of `owner`.
    fn response(&self, owner: &str, id: &str) -> Option<Vec<u8>> {
        self.kept(owner, id, |k| k.response.clone())
    }

    /// `what` of the kept response `id` of `owner`.
    fn kept<T>(&self, owner: &str, id: &str, what: impl FnOnce(&Kept) -> T) -> Option<T> {
        self.responses()
            .get(owner)?
            .iter()
            .find(|k| k.id == id)
            .map(what)
    }

    /// The ids of `owner`'s kept responses, oldest first.
    fn response_ids(&self, owner: &str) -> Vec<String> {
        self.responses()
            .get(owner)
            .map(|mine| mine.iter().map(|k| k.id.clone()).collect())
            .unwrap_or_default()
    }

    /// Keeps `response` as `owner`'s `id` (replacing one of that id), as a file of `asker`'s;
    /// beyond [`MAX_RESPONSES_PER_CALLER`] the oldest goes, and the log says so.
    pub(super) fn keep_response(
        &self,
        owner: String,
        id: String,
        response: Vec<u8>,
        asker: &crate::creds::Caller,
    ) {
        let mut all = self.responses();
        let mine = all.entry(owner).or_default();
        mine.retain(|k| k.id != id);
        mine.push_back(Kept {
            id,
            response,
            uid: asker.uid,
            gid: asker.gid,
        });
        let mut bytes: usize = mine.iter().map(|k| k.response.len()).sum();
        while mine.len() > MAX_RESPONSES_PER_CALLER
            || (bytes > MAX_RESPONSE_BYTES_PER_CALLER && mine.len() > 1)
        {
            if let Some(old) = mine.pop_front() {
                bytes -= old.response.len();
                tracing::info!(
                    uid = asker.uid,
                    dropped = old.id,
                    "{MAX_RESPONSES_PER_CALLER} tool responses or {MAX_RESPONSE_BYTES_PER_CALLER} bytes of them kept: the oldest is forgotten"
                );
            }
        }
    }

    /// Forgets `owner`'s response `id`; false if there was none.
    fn forget_response(&self, owner: &str, id: &str) -> bool {
        let mut all = self.responses();
        let Some(mine) = all.get_mut(owner) else {
            return false;
        };
        let before = mine.len();
        mine.retain(|k| k.id != id);
        mine.len() != before
    }

    /// The attributes of `node`.
    fn attr(&self, node: &GeneratedNode) -> Attr {
        let (size, uid, gid) = match node {
            GeneratedNode::Response { owner, id } => self
                .kept(owner, id, |k| (k.response.len() as u64, k.uid, k.gid))
                .unwrap_or((0, 0, 0)),
            GeneratedNode::SearchHit { target, .. } => (target.len() as u64, 0, 0),
            GeneratedNode::Secret(_) => (0, 0, crate::seed::agents_group().unwrap_or(0)),
            _ => (0, 0, 0),
        };
        Attr {
            ino: self.ino(node),
            // Other content depends on the caller and the request: reads go to the daemon
            // (direct I/O), which serves whatever length there is.
            size,
            blocks: 0,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            kind: node.kind(),
            perm: match node {
                // They carry a kernel ACL: their group bits show its mask.
                GeneratedNode::SecretsDir | GeneratedNode::Secret(_) => {
                    clawfs_policy::kernel_acl::presented_perm(node.perm())
                }
                _ => node.perm(),
            },
            nlink: if node.is_dir() { 2 } else { 1 },
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_responses_are_held_to_a_byte_budget_keeping_the_newest() {
        let g = Generated::new();
        let asker = crate::creds::Caller {
            uid: 1000,
            gid: 1000,
            pid: 1,
        };
        let eleven_mb = vec![b'x'; 11 << 20];
        for i in 0..8 {
            g.keep_response(
                "uid:1000".into(),
                format!("r{i}"),
                eleven_mb.clone(),
                &asker,
            );
        }
        let ids = g.response_ids("uid:1000");
        assert_eq!(ids, ["r3", "r4", "r5", "r6", "r7"]);
        // One answer larger than the budget is still kept, alone.
        g.keep_response("uid:1000".into(), "huge".into(), vec![0; 70 << 20], &asker);
        assert_eq!(g.response_ids("uid:1000"), ["huge"]);
    }
}
