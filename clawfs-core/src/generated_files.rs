//! Files the daemon generates instead of storing: `agents/self` (who ClawFS thinks the caller
//! is) and the tool-call interface `tools/call/<tool>`. They have inode numbers of their own
//! (top bit set, never a backing inode number), are never passthrough, and their content depends
//! on the caller, so the kernel is told not to cache them.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Mutex, PoisonError};

use clawfs_store::area::{Area, Place, INDEX_VIEW, SEARCH_DIR};

/// First inode number of generated nodes. Backing filesystems hand out far smaller numbers.
pub const GENERATED_INO_BASE: u64 = 1 << 63;

/// The largest request a tool call accepts through the mount; larger writes fail with EFBIG.
pub const MAX_CALL_REQUEST: usize = 4 << 20;

/// A generated node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GeneratedNode {
    /// `agents/self`: the caller's identity as JSON.
    SelfInfo,
    /// `tools/call/`: one file per tool.
    CallDir,
    /// `tools/call/<tool>`: write a JSON request, read the JSON response, on one descriptor.
    Call(String),
    /// `tools/requests/`: write `<id>.json` (the arguments plus `"tool"`); closing it runs the call.
    RequestsDir,
    /// `tools/responses/`: `<id>.json` holds the answer, visible to its caller only.
    ResponsesDir,
    /// A request being written by `owner`.
    Request {
        /// Whose request (see `ClawFs::owner_key`).
        owner: String,
        /// The id from the file name.
        id: String,
    },
    /// `vault/secrets/`: the secrets a caller may see.
    SecretsDir,
    /// `vault/secrets/<name>`: a secret's plaintext, decrypted for granted readers.
    Secret(String),
    /// A response kept for `owner`.
    Response {
        /// Whose response.
        owner: String,
        /// The id from the file name.
        id: String,
    },
    /// `workspaces/<ws>/.search/`: a query is looked up by name (nothing is listed).
    SearchDir(String),
    /// `workspaces/<ws>/.search/<query>/`: the best matches for the caller, ranked.
    SearchResults {
        /// The workspace.
        workspace: String,
        /// The query (the folder's name).
        query: String,
    },
    /// `workspaces/<ws>/workspace.db`: a copy of the workspace's search index holding only the
    /// files the caller may read, made when it is opened.
    IndexView(String),
    /// One match: `NN-<file name>`, a symlink to the file (`../../<path>`).
    SearchHit {
        /// The workspace.
        workspace: String,
        /// The query.
        query: String,
        /// Its name in the results folder.
        name: String,
        /// Where it points.
        target: String,
    },
}

/// Whether `name` is a generated child of every workspace folder (when the daemon indexes
/// workspaces). Tested before the workspace is named: naming it costs a system call, and
/// almost every name looked up in a workspace is a stored one.
pub fn is_workspace_child(name: &OsStr) -> bool {
    name == SEARCH_DIR || name == INDEX_VIEW
}

/// The generated child `name` of workspace `ws`'s folder, when the daemon indexes workspaces.
pub fn child_of_workspace(ws: &str, name: &OsStr) -> Option<GeneratedNode> {
    match name.to_str()? {
        SEARCH_DIR => Some(GeneratedNode::SearchDir(ws.to_string())),
        INDEX_VIEW => Some(GeneratedNode::IndexView(ws.to_string())),
        _ => None,
    }
}

/// The largest number of responses kept per caller; the oldest go first.
pub const MAX_RESPONSES_PER_CALLER: usize = 256;
/// Bytes of kept responses per caller; past it the oldest go first (the newest is always
/// kept). One answer can be large (`read_media_file`: about 12 MB), and they are held in the
/// daemon's memory, outside every agent's cgroup.
pub const MAX_RESPONSE_BYTES_PER_CALLER: usize = 64 << 20;
/// Bytes of answers one uid may hold in its open `tools/call/<tool>` files; an answer past it
/// is withheld (the caller reads an error instead) until some are closed.
pub const MAX_ANSWER_BYTES_PER_CALLER: usize = 64 << 20;

/// The id of a request or response file name: `<id>.json`, id of `[A-Za-z0-9._-]`, 1–128 bytes.
pub fn request_id(name: &OsStr) -> Option<&str> {
    let id = name.to_str()?.strip_suffix(".json")?;
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then_some(id)
}

impl GeneratedNode {
    /// Where the node sits in the namespace, as the audit trail names it (a generated file of
    /// a workspace or of the vault by its folder, names being the caller's own).
    pub fn audit_path(&self) -> String {
        match self {
            GeneratedNode::SelfInfo => "/agents/self".into(),
            GeneratedNode::CallDir => "/tools/call".into(),
            GeneratedNode::Call(tool) => format!("/tools/call/{tool}"),
            GeneratedNode::RequestsDir | GeneratedNode::Request { .. } => "/tools/requests".into(),
            GeneratedNode::ResponsesDir | GeneratedNode::Response { .. } => {
                "/tools/responses".into()
            }
            GeneratedNode::SecretsDir | GeneratedNode::Secret(_) => "/vault/secrets".into(),
            GeneratedNode::IndexView(ws) => format!("/workspaces/{ws}/{INDEX_VIEW}"),
            GeneratedNode::SearchDir(ws)
            | GeneratedNode::SearchResults { workspace: ws, .. }
            | GeneratedNode::SearchHit { workspace: ws, .. } => format!("/workspaces/{ws}"),
        }
    }

    /// Whether this node is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(
            self,
            GeneratedNode::CallDir
                | GeneratedNode::RequestsDir
                | GeneratedNode::ResponsesDir
                | GeneratedNode::SecretsDir
                | GeneratedNode::SearchDir(_)
                | GeneratedNode::SearchResults { .. }
        )
    }

    /// What kind of file it is.
    pub fn kind(&self) -> crate::attr::FileKind {
        match self {
            n if n.is_dir() => crate::attr::FileKind::Dir,
            GeneratedNode::SearchHit { .. } => crate::attr::FileKind::Symlink,
            _ => crate::attr::FileKind::File,
        }
    }

    /// The place of a generated directory, for its children's rules.
    pub fn place(&self) -> Place {
        match self {
            GeneratedNode::SelfInfo => Place::Inside(Area::Agents),
            GeneratedNode::SecretsDir | GeneratedNode::Secret(_) => Place::Inside(Area::Vault),
            GeneratedNode::SearchDir(_)
            | GeneratedNode::SearchResults { .. }
            | GeneratedNode::SearchHit { .. }
            | GeneratedNode::IndexView(_) => Place::Inside(Area::Workspaces),
            _ => Place::Inside(Area::Tools),
        }
    }

    /// Permission bits: the call files are writable by everyone (the call runs as the caller,
    /// with exactly the caller's access), `self` is read-only.
    pub fn perm(&self) -> u16 {
        match self {
            GeneratedNode::SelfInfo
            | GeneratedNode::Response { .. }
            | GeneratedNode::IndexView(_) => 0o444,
            GeneratedNode::CallDir
            | GeneratedNode::SearchDir(_)
            | GeneratedNode::SearchResults { .. } => 0o555,
            GeneratedNode::SearchHit { .. } => 0o777,
            // Reading a secret needs a grant, writing is the admin's; listing is the admin's
            // (the kernel decides a watch from these bits and the ACL: a watch here would name
            // every secret read). Agents find their secrets in `agents/self`.
            GeneratedNode::SecretsDir => 0o711,
            // Readable by mode only to root and the agents' group (the daemon still decides
            // each open by the policy): an ordinary user is refused by the kernel already.
            GeneratedNode::Secret(_) => 0o640,
            // Everyone may drop requests, by name: nobody but root may list or watch them (a
            // watch would name everyone's calls as they are made).
            GeneratedNode::RequestsDir => 0o1733,
            // Everyone may list (their own), read and delete their own responses.
            GeneratedNode::ResponsesDir => 0o1777,
            GeneratedNode::Call(_) | GeneratedNode::Request { .. } => 0o666,
        }
    }
}

/// The generated child `name` of a real directory at `place`, if there is one.
pub fn child_of_place(place: Place, name: &OsStr) -> Option<GeneratedNode> {
    match (place, name.to_str()?) {
        (Place::AreaRoot(Area::Agents), "self") => Some(GeneratedNode::SelfInfo),
        (Place::AreaRoot(Area::Tools), "call") => Some(GeneratedNode::CallDir),
        (Place::AreaRoot(Area::Tools), "requests") => Some(GeneratedNode::RequestsDir),
        (Place::AreaRoot(Area::Tools), "responses") => Some(GeneratedNode::ResponsesDir),
        (Place::AreaRoot(Area::Vault), "secrets") => Some(GeneratedNode::SecretsDir),
        _ => None,
    }
}

/// The generated names listed in a real directory at `place`.
pub fn children_of_place(place: Place) -> &'static [&'static str] {
    match place {
        Place::AreaRoot(Area::Agents) => &["self"],
        Place::AreaRoot(Area::Tools) => &["call", "requests", "responses"],
        Place::AreaRoot(Area::Vault) => &["secrets"],
        _ => &[],
    }
}

/// The child `name` of a generated directory whose children do not depend on the caller.
pub fn child_of_generated(dir: &GeneratedNode, name: &OsStr) -> Option<GeneratedNode> {
    match dir {
        GeneratedNode::CallDir => {
            let name = name.to_str()?;
            clawfs_agent_tools::TOOL_NAMES
                .contains(&name)
                .then(|| GeneratedNode::Call(name.to_string()))
        }
        _ => None,
    }
}

/// The children of a generated directory whose children do not depend on the caller.
pub fn children_of_generated(dir: &GeneratedNode) -> Vec<GeneratedNode> {
    match dir {
        GeneratedNode::CallDir => clawfs_agent_tools::TOOL_NAMES
            .iter()
            .map(|t| GeneratedNode::Call(t.to_string()))
            .collect(),
        _ => Vec::new(),
    }
}

/// Interns generated nodes: one stable inode number per node while the kernel knows it. Numbers
/// are never reused; search results (one node per query and hit, named by callers) are dropped
/// when the kernel forgets them, so they do not pile up.
#[derive(Default)]
pub struct GeneratedInodes {
    maps: Mutex<Interned>,
}

#[derive(Default)]
struct Interned {
    by_node: HashMap<GeneratedNode, u64>,
    by_ino: HashMap<u64, GeneratedNode>,
    allocated: u64,
}

impl GeneratedInodes {
    /// Whether `ino` is a generated inode number.
    pub fn is_generated(ino: u64) -> bool {
        ino >= GENERATED_INO_BASE
    }

    fn maps(&self) -> std::sync::MutexGuard<'_, Interned> {
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The inode numbers given so far to nodes `wanted` picks.
    pub fn inos_matching(&self, wanted: impl Fn(&GeneratedNode) -> bool) -> Vec<u64> {
        let maps = self.maps();
        maps.by_ino
            .iter()
            .filter(|(_, n)| wanted(n))
            .map(|(&ino, _)| ino)
            .collect()
    }

    /// The inode number of `node`.
    pub fn ino(&self, node: &GeneratedNode) -> u64 {
        let mut maps = self.maps();
        if let Some(&ino) = maps.by_node.get(node) {
            return ino;
        }
        maps.allocated += 1;
        let ino = GENERATED_INO_BASE + maps.allocated;
        maps.by_node.insert(node.clone(), ino);
        maps.by_ino.insert(ino, node.clone());
        ino
    }

    /// The node of a generated inode number.
    pub fn node(&self, ino: u64) -> Option<GeneratedNode> {
        self.maps().by_ino.get(&ino).cloned()
    }

    /// The kernel forgot `ino`: a search node is dropped (the fixed nodes stay).
    pub fn forget(&self, ino: u64) {
        let mut maps = self.maps();
        let transient = matches!(
            maps.by_ino.get(&ino),
            Some(GeneratedNode::SearchResults { .. } | GeneratedNode::SearchHit { .. })
        );
        if transient {
            if let Some(node) = maps.by_ino.remove(&ino) {
                maps.by_node.remove(&node);
            }
        }
    }
}

/// One open of a generated file: what the caller wrote and what it reads back.
#[derive(Debug)]
pub struct GeneratedHandle {
    /// The node opened.
    pub node: GeneratedNode,
    /// The opener.
    pub caller: crate::creds::Caller,
    /// Who the opener was and what it acted with, fixed at open: a call that runs later runs
    /// as them, whatever holds the descriptor or the pid by then.
    pub opener: (clawfs_policy::Identity, crate::creds::Credentials),
    /// State of the exchange.
    pub state: Mutex<Exchange>,
    /// A file served as it is, read at the caller's offsets (the index view).
    pub content: Option<std::fs::File>,
    /// This open, counted against the opener's open files until released (see
    /// [`crate::descriptors`]): each holds daemon memory, and the index view a descriptor.
    pub charge: crate::descriptors::Charge,
}

/// The request/response exchange of one open generated file.
#[derive(Debug, Default)]
pub struct Exchange {
    /// Bytes written so far (the request).
    pub request: Vec<u8>,
    /// The response, once produced.
    pub response: Option<Vec<u8>>,
    /// The file offset of the first read of the response: reads are relative to it, so a
    /// program reading at offset 0 and a shell reading on after its write both see the
    /// response from its start.
    pub read_base: Option<u64>,
    /// A write was refused part of the body: the request is answered `too_large` (a secret is
    /// not stored), never run on what was kept of it.
    pub cut: Option<Cut>,
    /// The call is running (on a copy of the request, without this exchange's lock held).
    pub running: bool,
    /// What the response of a call counts against its opener's answers
    /// ([`MAX_ANSWER_BYTES_PER_CALLER`]), while held.
    pub answer: Option<crate::per_caller::Taken>,
    /// What the request counts against its opener's request bytes, while held: as many as
    /// [`Exchange::request`] holds.
    pub buffered: Option<crate::per_caller::Taken>,
}

/// Why a write to a request was refused (`EFBIG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// It went past [`MAX_CALL_REQUEST`].
    TooLarge,
    /// The caller's open requests held all the request bytes a caller may hold.
    CallerShare,
}

impl Exchange {
    /// Appends or overwrites request bytes at `offset`; a write after a response starts a new
    /// call on the same descriptor.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<usize, i32> {
        self.restart_if_answered();
        let end = (offset as usize)
            .checked_add(data.len())
            .ok_or(libc::EFBIG)?;
        if end > MAX_CALL_REQUEST {
            self.refuse(Cut::TooLarge);
            return Err(libc::EFBIG);
        }
        if self.request.len() < end {
            self.request.resize(end, 0);
        }
        self.request[offset as usize..end].copy_from_slice(data);
        Ok(data.len())
    }

    /// A write after a response starts a new call on the same descriptor.
    fn restart_if_answered(&mut self) {
        if self.response.is_some() {
            *self = Exchange {
                buffered: self.buffered.take(),
                ..Exchange::default()
            };
        }
    }

    /// Whether anything was written to the request, kept or refused.
    pub fn written(&self) -> bool {
        !self.request.is_empty() || self.cut.is_some()
    }

    /// Marks the request as refused part of its body: whatever was kept of it never runs.
    pub fn refuse(&mut self, why: Cut) {
        self.restart_if_answered();
        self.cut.get_or_insert(why);
    }

    /// Why the request was cut, if it was: a write was refused, or the body
    /// reaches into the last (largest) FUSE write below the limit and ends in the middle of its
    /// JSON, its rest refused by a write the kernel delivered after the close. Either way it is
    /// answered `too_large` and never run, whatever order the writes and the close came in.
    pub fn cut(&self) -> Option<Cut> {
        const LARGEST_FUSE_WRITE: usize = 1 << 20;
        let reaches_the_limit = self.request.len() > MAX_CALL_REQUEST - LARGEST_FUSE_WRITE
            && serde_json::from_slice::<serde::de::IgnoredAny>(&self.request)
                .is_err_and(|e| e.is_eof());
        self.cut.or(reaches_the_limit.then_some(Cut::TooLarge))
    }

    /// The response bytes a read at `offset` of `size` returns.
    pub fn read(&mut self, offset: u64, size: usize) -> &[u8] {
        let base = *self.read_base.get_or_insert(offset);
        let response = self.response.as_deref().unwrap_or_default();
        let start = (offset.saturating_sub(base) as usize).min(response.len());
        let end = start.saturating_add(size).min(response.len());
        &response[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_cut_at_the_limit_is_too_large() {
        let mut cut = Exchange::default();
        let body = format!("{{\"content\": \"{}", "x".repeat(MAX_CALL_REQUEST - 100));
        cut.write(0, body.as_bytes()).unwrap();
        assert!(cut.cut().is_some(), "ends mid-JSON next to the limit");
        let mut bad = Exchange::default();
        bad.write(0, b"{\"content\": ").unwrap();
        assert!(
            bad.cut().is_none(),
            "short and broken: invalid_json, not too_large"
        );
        let mut whole = Exchange::default();
        let body = format!("{{\"c\": \"{}\"}}", "x".repeat(MAX_CALL_REQUEST - 100));
        whole.write(0, body.as_bytes()).unwrap();
        assert!(
            whole.cut().is_none(),
            "complete JSON just under the limit runs"
        );
    }

    #[test]
    fn request_ids() {
        assert_eq!(request_id(OsStr::new("job-1.json")), Some("job-1"));
        for bad in [
            ".json",
            "a",
            "a.txt",
            "../x.json",
            ".hidden.json",
            "a b.json",
        ] {
            assert_eq!(request_id(OsStr::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn inodes_are_stable_and_generated() {
        let v = GeneratedInodes::default();
        let a = v.ino(&GeneratedNode::SelfInfo);
        let b = v.ino(&GeneratedNode::Call("info".into()));
        assert_ne!(a, b);
        assert_eq!(a, v.ino(&GeneratedNode::SelfInfo));
        assert!(GeneratedInodes::is_generated(a) && GeneratedInodes::is_generated(b));
        assert_eq!(v.node(b), Some(GeneratedNode::Call("info".into())));
    }

    #[test]
    fn exchange_reads_relative_to_the_first_read() {
        let mut x = Exchange::default();
        assert_eq!(x.write(0, b"{\"a\":1}"), Ok(7));
        x.response = Some(b"RESPONSE".to_vec());
        // A shell reads on from where it wrote.
        assert_eq!(x.read(7, 4), b"RESP");
        assert_eq!(x.read(11, 100), b"ONSE");
        assert_eq!(x.read(15, 100), b"");
        // Writing again starts a new call.
        x.write(0, b"{}").unwrap();
        assert!(x.response.is_none());
        assert_eq!(x.write(0, &vec![0; MAX_CALL_REQUEST + 1]), Err(libc::EFBIG));
    }
}
