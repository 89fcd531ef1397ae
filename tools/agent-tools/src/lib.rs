//! ClawFS agent tools: the read/search/patch/edit/trash tool set as a library, JSON in and JSON out.
//!
//! This crate knows nothing of FUSE. The daemon serves `/clawfs/tools/call/<tool>` and the
//! `requests/`→`responses/` pair by calling [`call`] (or [`call_request`] when the tool name is in the
//! request), and `registry.json` / `definitions/tool-<name>.json` from [`registry`] and
//! [`definition`]. Every call acts on one workspace directory through a [`ToolRoot`], which resolves
//! paths itself (no `..`, symlink or absolute path leaves the root), refuses protected names, and
//! asks the daemon's [`AccessCheck`] before every read and write. The checked path is then opened
//! beneath a descriptor of the root, never looked up again as a string, so renames and symlink
//! swaps racing with a call cannot take it outside the root.
//!
//! Responses are `{"ok": true, ...fields}` or `{"ok": false, "error": "<code>", "message": "..."}`;
//! the codes are listed in [`ERROR_CODES`]. No input makes a call panic.
#![warn(missing_docs)]

pub mod access;
pub mod beneath;
mod budget;
pub mod error;
mod fsops;
pub mod interrupt;
pub mod limits;
mod patch;
pub mod paths;
pub mod perms;
mod registry;
mod schema;
pub mod semantic;
mod stream;
mod text;
mod tools;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use serde_json::Value;

pub use access::{Access, AccessCheck, Allowed, OpenAccess};
pub use error::{ToolError, ToolResult, ERROR_CODES};
pub use fsops::sweep_backups;
pub use interrupt::Interrupt;
pub use limits::Limits;
pub use perms::{CallerIds, FilePermissions, Id, IdNames};
pub use registry::{definition, registry};
pub use semantic::{SemanticAnswer, SemanticHit, SemanticIndex};
pub use tools::{LEAN_TOOLS, TOOL_NAMES};

/// One workspace as the tools see it: the directory on disk, where soft-deleted items and backups
/// go, and the caller's policy. Cheap to share between threads (`&ToolRoot` is `Sync`); build one per
/// (workspace, caller) pair, or one per workspace and swap the policy per caller.
pub struct ToolRoot {
    /// The workspace directory, canonical (no symlinks), so prefix checks on real paths hold.
    root: PathBuf,
    /// The workspace directory, opened once (`O_PATH`, so reading it still needs the caller's
    /// permission): every path is opened beneath it (see `beneath.rs`).
    root_fd: File,
    /// Soft-deleted items: `<trash_dir>/<trash_id>/item` plus `<trash_id>/meta.json`.
    trash_dir: PathBuf,
    /// Backups before edits: `<backup_dir>/<rel dir>/<name>.bak.<YYYYmmdd-HHMMSS>[-n]`.
    backup_dir: PathBuf,
    /// Absolute prefixes that also denote the workspace root (e.g. its path under the mount).
    aliases: Vec<String>,
    policy: Arc<dyn AccessCheck>,
    limits: Limits,
    /// The process-wide lock table, so roots built per call still serialize edits of one file.
    locks: &'static PathLocks,
    /// Permission bits cleared from new files and folders (the caller's umask).
    umask: u32,
    /// Told the absolute path of every entry a call creates, replaces, moves or removes.
    observer: Option<Observer>,
    /// Asked before each change, with what it adds; an error refuses the change.
    meter: Option<Meter>,
    /// Told of every inode a call makes or removes and every file it rewrites.
    ledger: Option<Arc<dyn Ledger>>,
    /// Stops the call once its caller is gone (see [`ToolRoot::with_interrupt`]).
    interrupt: Option<Interrupt>,
    /// The workspace's index, for `semantic_search`.
    semantic: Option<Arc<dyn SemanticIndex>>,
    /// Runs a closure with the daemon's own credentials (see [`ToolRoot::with_elevation`]).
    elevation: Option<Elevation>,
    /// Where the tools are served (the mount), for messages that name its files.
    mount: Option<PathBuf>,
    /// Who the call runs as, to explain refusals by file permissions.
    caller: Option<CallerIds>,
    /// Names uids and gids in those explanations.
    id_names: Option<IdNames>,
    /// Serializes edits with the daemons of other hosts that share the store.
    shared_edits: Option<Arc<dyn SharedEdits>>,
}

/// Edits of one file by the daemons of other hosts that share the store, which the
/// process-wide lock table does not reach (see [`ToolRoot::with_shared_edits`]).
pub trait SharedEdits: Send + Sync {
    /// Waits for the lock of the workspace file `rel` among hosts, held while the answer lives.
    fn lock(&self, rel: &str) -> std::io::Result<Box<dyn SharedEdit>>;
}

/// One file's lock among hosts, held.
pub trait SharedEdit: Send {
    /// The sha256 the file's last hash-checked edit on any host left it with, if recorded.
    fn last_sha256(&self) -> Option<String>;
    /// Records the sha256 an edit leaves the file with, for the next editor on any host.
    fn record(&mut self, sha256: &str) -> std::io::Result<()>;
}

/// Runs the closure it is given with the daemon's own credentials, then returns to the
/// caller's (see [`ToolRoot::with_elevation`]).
pub type Elevation = Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

/// A callback asked before each change with what it adds (see [`ToolRoot::with_meter`]).
pub type Meter = Arc<dyn Fn(Growth) -> Result<(), String> + Send + Sync>;

/// What one change adds, at most: bytes past a file's old size (or a new file's, a backup's,
/// a folder's or trash entry's), and new inodes (files, folders, trash entries), held by the
/// owner of the file grown (`owner`) or, for what the call makes, by the caller.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Growth {
    /// Bytes added.
    pub bytes: u64,
    /// Inodes added.
    pub files: u64,
    /// The owner of the existing file that grows; `None` for what the caller makes.
    pub owner: Option<u32>,
}

/// What one new folder costs at least, in [`Growth`]: one block.
pub const FOLDER_BYTES: u64 = 4096;

/// Told the name a [`Ledger::making`] made, once it is made.
pub type Made = Box<dyn FnOnce(&OsStr) + Send>;

/// Told, as a call changes the store, of every inode it makes or removes and every file it
/// rewrites in place, with descriptors to measure them by before and after: the daemon keeps
/// what each owner holds counted this way (its quotas), as its own file operations do. Each
/// method is called as the caller, or with the daemon's credentials where the call is
/// elevated (backups).
pub trait Ledger: Send + Sync {
    /// A name is about to be made in `dir` (a file, a folder). The returned closure is called
    /// with it once it is made, with its final owner and content; never if making failed.
    fn making(&self, dir: BorrowedFd<'_>) -> Made;
    /// `name` in `dir` is about to lose that name (removed, or replaced by a rename onto it).
    /// The returned closure is called once it has; never if the removal failed.
    fn removing(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Box<dyn FnOnce() + Send>;
    /// The regular file `file` is about to be rewritten in place; the returned closure is
    /// called with it once it has been.
    fn rewriting(&self, file: BorrowedFd<'_>) -> Box<dyn FnOnce(BorrowedFd<'_>) + Send>;
    /// The names in the folder `dir` are about to change (an entry moved in or out); the
    /// returned closure is called once they have.
    fn renaming(&self, dir: BorrowedFd<'_>) -> Box<dyn FnOnce() + Send>;
    /// The new file `to` is about to replace `from` under its name: what the store keeps of
    /// `from` beside its inode (attributes it had no room for) is given to `to`, as its
    /// attributes are.
    fn replacing(&self, from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> std::io::Result<()> {
        let _ = (from, to);
        Ok(())
    }
}

/// A name about to be made, told to the ledger once it is ([`ToolRoot::making`]).
pub(crate) struct Making(Option<Made>);

impl Making {
    /// The name was made (with its final owner and content).
    pub(crate) fn done(self, name: impl AsRef<OsStr>) {
        if let Some(f) = self.0 {
            f(name.as_ref());
        }
    }
}

/// A callback told of every changed path (see [`ToolRoot::with_observer`]).
pub type Observer = Arc<dyn Fn(&Path) + Send + Sync>;

impl std::fmt::Debug for ToolRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRoot")
            .field("root", &self.root)
            .field("trash_dir", &self.trash_dir)
            .field("backup_dir", &self.backup_dir)
            .field("aliases", &self.aliases)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ToolRoot {
    /// A root over `root` (which must exist and be a directory), with the trash in
    /// `<root>/.clawfs/trash`, backups in `<root>/.clawfs/backups` (both protected names, so tools
    /// never see them), the [`OpenAccess`] and default [`Limits`].
    pub fn new(root: impl AsRef<Path>) -> std::io::Result<ToolRoot> {
        let root = std::fs::canonicalize(root.as_ref())?;
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "workspace root is not a directory",
            ));
        }
        let root_fd = rustix::fs::open(
            &root,
            beneath::DIR_PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(ToolRoot {
            root_fd: File::from(root_fd),
            trash_dir: root.join(".clawfs").join("trash"),
            backup_dir: root.join(".clawfs").join("backups"),
            root,
            aliases: Vec::new(),
            policy: Arc::new(OpenAccess::default()),
            limits: Limits::default(),
            locks: &PATH_LOCKS,
            umask: 0o022,
            observer: None,
            meter: None,
            ledger: None,
            interrupt: None,
            semantic: None,
            elevation: None,
            mount: None,
            caller: None,
            id_names: None,
            shared_edits: None,
        })
    }

    /// Hosts share the store: hash-checked edits also take `edits`' lock of the file, and
    /// wait (a few seconds at most) until this host's view of the file shows what the last
    /// edit on any host left, so a stale view never passes the hash check.
    pub fn with_shared_edits(mut self, edits: Arc<dyn SharedEdits>) -> ToolRoot {
        self.shared_edits = Some(edits);
        self
    }

    /// Who the call runs as (the credentials the filesystem checks): `list_allowed` reports
    /// them, and a write refused by a file's mode is explained against them.
    pub fn with_caller(mut self, caller: CallerIds) -> ToolRoot {
        self.caller = Some(caller);
        self
    }

    /// Names uids and gids in messages (else they are shown as numbers).
    pub fn with_id_names(mut self, names: IdNames) -> ToolRoot {
        self.id_names = Some(names);
        self
    }

    /// `rel` as the caller reaches it: under the last alias given (the daemon's is the
    /// workspace under the mount), else workspace-relative.
    pub(crate) fn shown_path(&self, rel: &str) -> String {
        match self.aliases.last() {
            Some(a) if rel.is_empty() => a.clone(),
            Some(a) => format!("{a}/{rel}"),
            None => crate::paths::show(rel),
        }
    }

    /// The mount the tools are served under: messages name its files (`<mount>/tools/…`).
    pub fn with_mount(mut self, mount: impl Into<PathBuf>) -> ToolRoot {
        self.mount = Some(mount.into());
        self
    }

    /// Where the registry is, for messages: under the mount when it is known.
    pub(crate) fn registry_path(&self) -> String {
        match &self.mount {
            Some(m) => m.join("tools/registry.json").display().to_string(),
            None => "tools/registry.json at the root of the ClawFS mount".into(),
        }
    }

    /// Soft-deleted items go here. Must be on the same filesystem as the root (items are renamed).
    pub fn with_trash_dir(mut self, dir: impl Into<PathBuf>) -> ToolRoot {
        self.trash_dir = dir.into();
        self
    }

    /// Backups before edits go here.
    pub fn with_backup_dir(mut self, dir: impl Into<PathBuf>) -> ToolRoot {
        self.backup_dir = dir.into();
        self
    }

    /// Backups are written through `elevation`, with the daemon's own credentials, so that each
    /// takes the owner, group and mode of the file it keeps and its folders those of the file's
    /// folders: readable by exactly who could read the file, in a workspace several users
    /// share. Without it, backups belong to the caller and are private to it.
    pub fn with_elevation(mut self, elevation: Elevation) -> ToolRoot {
        self.elevation = Some(elevation);
        self
    }

    /// Whether the entry of `meta` is the caller's (everything is, when the caller is not
    /// known: the library used without a daemon).
    pub(crate) fn owns(&self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.caller.as_ref().is_none_or(|c| c.uid == meta.uid())
    }

    /// Runs `f` with the daemon's credentials when an elevation was given; else as the caller.
    /// Returns whether it was elevated, and `f`'s result.
    pub(crate) fn elevated<T>(&self, f: impl FnOnce(bool) -> T) -> T {
        let Some(elevate) = &self.elevation else {
            return f(false);
        };
        let mut f = Some(f);
        let mut out = None;
        elevate(&mut || {
            if let Some(f) = f.take() {
                out = Some(f(true));
            }
        });
        match out {
            Some(out) => out,
            // An elevation that did not call back: run as the caller rather than not at all.
            None => f.take().map(|f| f(false)).expect("not called yet"),
        }
    }

    /// The workspace's index, queried by `semantic_search`.
    pub fn with_semantic(mut self, index: Arc<dyn SemanticIndex>) -> ToolRoot {
        self.semantic = Some(index);
        self
    }

    /// The workspace's index, if one was given.
    pub(crate) fn semantic(&self) -> Option<&Arc<dyn SemanticIndex>> {
        self.semantic.as_ref()
    }

    /// The caller's policy, asked before every read and write.
    pub fn with_access(mut self, policy: Arc<dyn AccessCheck>) -> ToolRoot {
        self.policy = policy;
        self
    }

    /// The caller's umask: new files get `0666 & !umask`, new folders `0777 & !umask`
    /// (default 022). Trash entries are private to the caller (0600/0700), and so are backups
    /// unless an elevation is given.
    pub fn with_umask(mut self, umask: u32) -> ToolRoot {
        self.umask = umask & 0o777;
        self
    }

    /// Asks `meter` right before each change a call makes (a write, with the bytes it adds
    /// past the file's old size; a new file, folder, backup or trash entry, with the inodes it
    /// adds; a move, removal or restore, with nothing); an error refuses the change with its
    /// message (the daemon checks an agent's quota this way, and refuses every change once an
    /// emergency stop is in force).
    pub fn with_meter(mut self, meter: Meter) -> ToolRoot {
        self.meter = Some(meter);
        self
    }

    /// Tells `ledger` of every inode a call makes or removes and every file it rewrites (see
    /// [`Ledger`]).
    pub fn with_ledger(mut self, ledger: Arc<dyn Ledger>) -> ToolRoot {
        self.ledger = Some(ledger);
        self
    }

    /// Asks the meter whether a change adding `bytes` and `files` for the caller may be made
    /// now; refused as `denied`. Called right before the change, after whatever the call
    /// computed: a caller stopped meanwhile changes nothing.
    pub(crate) fn charge(&self, bytes: u64, files: u64) -> ToolResult<()> {
        self.charge_growth(Growth {
            bytes,
            files,
            owner: None,
        })
    }

    /// [`Self::charge`] for any growth (of a file someone else may own).
    pub(crate) fn charge_growth(&self, g: Growth) -> ToolResult<()> {
        match &self.meter {
            Some(m) => m(g).map_err(ToolError::Denied),
            None => Ok(()),
        }
    }

    /// A name is about to be made in `dir`: call [`Making::done`] once it is.
    pub(crate) fn making(&self, dir: &impl AsFd) -> Making {
        Making(self.ledger.as_ref().map(|l| l.making(dir.as_fd())))
    }

    /// Removes `name` from `dir` with `remove`, telling the ledger.
    pub(crate) fn removing<T>(
        &self,
        dir: impl AsFd,
        name: impl AsRef<OsStr>,
        remove: impl FnOnce() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let done = self
            .ledger
            .as_ref()
            .map(|l| l.removing(dir.as_fd(), name.as_ref()));
        let out = remove()?;
        if let Some(done) = done {
            done();
        }
        Ok(out)
    }

    /// Moves `from` (in its folder) to `to` (in its) with `rename`, telling the ledger how both
    /// folders changed.
    pub(crate) fn renaming<T>(
        &self,
        (from, to): (&File, &File),
        rename: impl FnOnce() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let done = self
            .ledger
            .as_ref()
            .map(|l| (l.renaming(from.as_fd()), l.renaming(to.as_fd())));
        let out = rename()?;
        if let Some((a, b)) = done {
            a();
            b();
        }
        Ok(out)
    }

    /// Makes the folder `name` in `dir`, telling the ledger.
    pub(crate) fn mkdir(&self, dir: &File, name: &str, mode: u32) -> std::io::Result<()> {
        let made = self.making(dir);
        beneath::mkdir(dir, name, mode)?;
        made.done(name);
        Ok(())
    }

    /// Gives the new file `to`, about to replace `from`, what the ledger's store keeps of it.
    pub(crate) fn replacing(&self, from: &impl AsFd, to: &impl AsFd) -> std::io::Result<()> {
        match &self.ledger {
            Some(l) => l.replacing(from.as_fd(), to.as_fd()),
            None => Ok(()),
        }
    }

    /// Rewrites the open regular file `file` with `rewrite`, telling the ledger.
    pub(crate) fn rewriting<T>(
        &self,
        file: &File,
        rewrite: impl FnOnce() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let done = self.ledger.as_ref().map(|l| l.rewriting(file.as_fd()));
        let out = rewrite();
        // A rewrite that failed half way changed the file too.
        if let Some(done) = done {
            done(file.as_fd());
        }
        out
    }

    /// Calls `observer` with the absolute path of every entry a call creates, replaces, moves
    /// or removes, after the change (the daemon uses it to refresh the kernel's caches).
    pub fn with_observer(mut self, observer: Observer) -> ToolRoot {
        self.observer = Some(observer);
        self
    }

    pub(crate) fn changed(&self, abs: &Path) {
        if let Some(o) = &self.observer {
            o(abs);
        }
    }

    pub(crate) fn file_mode(&self) -> u32 {
        0o666 & !self.umask
    }

    pub(crate) fn dir_mode(&self) -> u32 {
        0o777 & !self.umask
    }

    /// Stops long work (walks, reads of large files) once `interrupt` says the caller is gone:
    /// the call answers `interrupted` instead.
    pub fn with_interrupt(mut self, interrupt: Interrupt) -> ToolRoot {
        self.interrupt = Some(interrupt);
        self
    }

    /// `Err(interrupted)` once the call should stop (see [`ToolRoot::with_interrupt`]).
    pub(crate) fn check_interrupt(&self) -> ToolResult<()> {
        self.interrupt.as_ref().map_or(Ok(()), Interrupt::check)
    }

    /// The interrupt of the call, for work that outlives a borrow of the root.
    pub(crate) fn interrupt(&self) -> Option<Interrupt> {
        self.interrupt.clone()
    }

    /// Limits on request and file sizes.
    pub fn with_limits(mut self, limits: Limits) -> ToolRoot {
        self.limits = limits;
        self
    }

    /// An absolute path that also means the workspace root in requests, e.g. the workspace's path
    /// under the mount (`/mnt/clawfs/ws/alice`). Absolute request paths starting with an alias have
    /// it stripped; any other absolute path is taken relative to the workspace root.
    pub fn with_alias(mut self, alias: impl Into<String>) -> ToolRoot {
        let a: String = alias.into();
        let a = a.trim_end_matches('/').to_string();
        if !a.is_empty() {
            self.aliases.push(a);
        }
        self
    }

    /// The canonical workspace directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The caller's policy.
    pub fn policy(&self) -> &dyn AccessCheck {
        self.policy.as_ref()
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Opens the trash or backup directory `dir`, creating it (with `mode`) when `create` is
    /// given. One inside the workspace (the default) is opened beneath the root like any path, so
    /// a symlink swapped in for it is refused; one elsewhere is the daemon's own configuration and
    /// is opened by its path.
    pub(crate) fn store_dir(&self, dir: &Path, create: Option<u32>) -> std::io::Result<File> {
        let flags = beneath::DIR_PATH;
        if let Ok(rel) = dir.strip_prefix(&self.root) {
            let rel = rel.to_str().ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a UTF-8 path")
            })?;
            return match create {
                Some(mode) => {
                    let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
                    let mkdir = &mut |dir: &File, name: &str, mode| self.mkdir(dir, name, mode);
                    Ok(beneath::mkdirs(&self.root_fd, &comps, mode, flags, mkdir)?.0)
                }
                None => beneath::open(&self.root_fd, rel, flags),
            };
        }
        if let Some(mode) = create {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)?;
        }
        let fd = rustix::fs::open(
            dir,
            flags | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(File::from(fd))
    }
}

/// Runs `tool` with the JSON `request` (the tool's arguments as one object) and returns the JSON
/// response bytes. Never panics; every failure is an `{"ok": false, ...}` response.
pub fn call(root: &ToolRoot, tool: &str, request: &[u8]) -> Vec<u8> {
    render(run(root, Some(tool), request))
}

/// Runs a call and returns its typed result, for a caller that needs to know how it ended
/// (the daemon's audit trail) without parsing the response: `tool` names the tool (one
/// descriptor), or `None` takes it from the request's `"tool"` (two files). [`render`] gives
/// the response [`call`] and [`call_request`] return.
pub fn run(root: &ToolRoot, tool: Option<&str>, request: &[u8]) -> ToolResult<Value> {
    match tool {
        Some(tool) => {
            parse_request(root, request).and_then(|v| guarded(|| tools::dispatch(root, tool, v)))
        }
        None => run_request(root, request),
    }
}

/// The two-file interface: the request object names its tool in `"tool"`. Same response as
/// [`call`].
pub fn call_request(root: &ToolRoot, request: &[u8]) -> Vec<u8> {
    render(run_request(root, request))
}

fn run_request(root: &ToolRoot, request: &[u8]) -> ToolResult<Value> {
    parse_request(root, request).and_then(|v| {
        let tool = match v.get("tool") {
            Some(Value::String(t)) => t.clone(),
            Some(_) => {
                return Err(ToolError::InvalidArgs(
                    "\"tool\" must be a string naming the tool, e.g. {\"tool\": \"info\", \"path\": \"notes.md\"}.".into(),
                ))
            }
            None => {
                return Err(ToolError::InvalidArgs(
                    "the request has no \"tool\" field: add \"tool\": \"<name>\" next to the arguments, e.g. {\"tool\": \"info\", \"path\": \"notes.md\"}.".into(),
                ))
            }
        };
        guarded(|| tools::dispatch(root, &tool, v))
    })
}

/// Like [`call`], on an already parsed request, returning the response as a JSON value.
pub fn call_value(root: &ToolRoot, tool: &str, request: Value) -> Value {
    match guarded(|| tools::dispatch(root, tool, request)) {
        Ok(Value::Object(mut m)) => {
            let mut out = serde_json::Map::new();
            out.insert("ok".into(), Value::Bool(true));
            out.append(&mut m);
            Value::Object(out)
        }
        Ok(other) => serde_json::json!({"ok": true, "result": other}),
        Err(e) => e.to_json(),
    }
}

fn parse_request(root: &ToolRoot, request: &[u8]) -> ToolResult<Value> {
    if request.len() > root.limits.max_request_bytes {
        return Err(ToolError::TooLarge(format!(
            "the request is {} bytes; the limit is {} bytes. Split the work into smaller calls (e.g. several edits, or apply_patch with a smaller diff).",
            request.len(),
            root.limits.max_request_bytes
        )));
    }
    let text = std::str::from_utf8(request).map_err(|e| {
        ToolError::InvalidJson(format!(
            "the request is not UTF-8 (invalid byte at offset {}). Send a UTF-8 JSON object.",
            e.valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| {
        ToolError::InvalidJson(format!(
            "the request is not valid JSON ({e}). Send one JSON object of the tool's arguments."
        ))
    })?;
    if !v.is_object() {
        return Err(ToolError::InvalidJson(
            "the request must be a JSON object of the tool's arguments, e.g. {\"path\": \"notes.md\"}.".into(),
        ));
    }
    Ok(v)
}

/// Runs `f`, turning a panic (a bug, never expected) into an `io_error` response.
fn guarded(f: impl FnOnce() -> ToolResult<Value>) -> ToolResult<Value> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => Err(ToolError::Io {
            context: "internal error in the tool".into(),
            source: std::io::Error::other("the tool panicked; the call was abandoned"),
        }),
    }
}

/// Serializes a result with `"ok"` first, then the tool's fields.
pub fn render(r: ToolResult<Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    match r {
        Ok(Value::Object(m)) => {
            out.extend_from_slice(b"{\"ok\":true");
            for (k, v) in m {
                out.push(b',');
                // Serializing a String and a Value cannot fail.
                out.extend(serde_json::to_vec(&k).unwrap_or_default());
                out.push(b':');
                out.extend(serde_json::to_vec(&v).unwrap_or_default());
            }
            out.push(b'}');
        }
        Ok(other) => {
            out = serde_json::to_vec(&serde_json::json!({"ok": true, "result": other}))
                .unwrap_or_default();
        }
        Err(e) => out = serde_json::to_vec(&e.to_json()).unwrap_or_default(),
    }
    out.push(b'\n');
    out
}

/// Per-path write locks, so two mutating calls on one file run one after the other (the second
/// sees the first's result, e.g. a new hash). Keys are real absolute paths. One table for the
/// process: the daemon may build a `ToolRoot` per call.
struct PathLocks {
    held: Mutex<BTreeSet<PathBuf>>,
    freed: Condvar,
}

static PATH_LOCKS: PathLocks = PathLocks {
    held: Mutex::new(BTreeSet::new()),
    freed: Condvar::new(),
};

/// Holds the locks on a set of paths until dropped (and, in a store that hosts share, the
/// file's lock among hosts).
pub(crate) struct PathGuard<'a> {
    locks: &'a PathLocks,
    paths: Vec<PathBuf>,
    shared: Option<Box<dyn SharedEdit>>,
}

impl PathLocks {
    /// Waits until none of `paths` is held, then holds them all (all at once, so two callers
    /// locking overlapping sets cannot deadlock).
    fn lock(&self, paths: &[&Path]) -> PathGuard<'_> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while paths.iter().any(|p| held.contains(*p)) {
            held = self.freed.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        let paths: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
        for p in &paths {
            held.insert(p.clone());
        }
        PathGuard {
            locks: self,
            paths,
            shared: None,
        }
    }
}

impl Drop for PathGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.locks.held.lock().unwrap_or_else(|e| e.into_inner());
        for p in &self.paths {
            held.remove(p);
        }
        self.locks.freed.notify_all();
    }
}
