//! Path resolution for tool requests: from the caller's string to a real path inside the root,
//! then to an opened descriptor.
//!
//! Resolution is done component by component from the root's descriptor: `..` is lexical and may
//! never climb above the root; each symlink met is read and its target spliced into the walk (a
//! target outside the root is refused); a missing component may be matched case-insensitively
//! (read tools, for speech-to-text callers). Every lookup is made in a folder opened beneath the
//! root, never through a path string. The result is the real, symlink-free workspace-relative
//! path, which is what protection and policy are checked against.
//!
//! After the check, the object is opened beneath the root by that path with symlinks refused (see
//! `beneath.rs`), and the tool works on the descriptor. Changes are made through the parent folder
//! opened the same way plus one name ([`Slot`]). A folder swapped for a symlink between the check
//! and the open fails the call; nothing outside the root is ever reached.

use std::collections::VecDeque;
use std::fs::{File, Metadata};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::access::{check_protected, Access};
use crate::beneath::{self, DIR_PATH, DIR_READ, ENTRY, FILE_READ};
use crate::error::{ToolError, ToolResult};
use crate::limits::{MAX_CANDIDATES, MAX_SYMLINK_HOPS};
use crate::{PathGuard, ToolRoot};

/// The longest path a tool takes, bytes (`PATH_MAX`): the kernel takes no longer one, and
/// every step of a call is linear in it.
pub(crate) const MAX_PATH_BYTES: usize = 4096;
/// How to look a path up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lookup {
    /// Match missing components case-insensitively (one match is taken, several are an error).
    pub case_insensitive: bool,
    /// Follow a symlink in the last component (false for delete/move of the link itself).
    pub follow_final: bool,
}

impl Lookup {
    /// Read tools: case-insensitive fallback, follow symlinks.
    pub const READ: Lookup = Lookup {
        case_insensitive: true,
        follow_final: true,
    };
    /// Creating tools: exact names, follow symlinks (inside the root).
    pub const EXACT: Lookup = Lookup {
        case_insensitive: false,
        follow_final: true,
    };
    /// Moving or deleting the entry itself: case-insensitive fallback, never follow the last link.
    pub const ENTRY: Lookup = Lookup {
        case_insensitive: true,
        follow_final: false,
    };
}

/// An existing path inside the root, opened beneath it.
#[derive(Debug)]
pub(crate) struct Found {
    /// Real workspace-relative path, `/`-separated, `""` for the root.
    pub rel: String,
    /// `root/rel`: a name for locks and the observer, never opened.
    pub abs: PathBuf,
    /// Metadata of the opened entry (of the link itself when the last symlink is not followed).
    pub meta: Metadata,
    /// The entry: readable for files ([`ToolRoot::existing_file`]), `O_PATH` otherwise.
    pub file: File,
}

/// The result of a walk: found, or missing from some component on.
#[derive(Debug)]
pub(crate) enum Walk {
    /// `meta` is the entry's `lstat` at the time of the walk.
    Found { rel: String, meta: Metadata },
    /// `rel` is the real prefix that exists plus the requested rest.
    Missing { rel: String },
}

/// Where a creating tool writes (see [`ToolRoot::target`]).
#[derive(Debug)]
pub(crate) struct Target {
    /// The real workspace-relative path.
    pub rel: String,
    /// `root/rel`, for locks and the observer.
    pub abs: PathBuf,
    /// The entry there now, if any.
    pub meta: Option<Metadata>,
    /// Set when existing names differing in case were used for the ones asked.
    pub reused: Option<String>,
}

/// A folder opened beneath the root and one name in it: where entries are created, replaced,
/// moved and removed.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The folder, opened for reading (so it can be fsynced).
    pub dir: File,
    /// The entry's name in it.
    pub name: String,
}

/// Shows a workspace-relative path to a caller: the root is `/`.
pub(crate) fn show(rel: &str) -> String {
    if rel.is_empty() {
        "/".to_string()
    } else {
        rel.to_string()
    }
}

/// The components of a `/`-separated path once `.` and empty ones are dropped and each `..`
/// takes back the one before it; `None` when a `..` climbs above the start. The one lexical
/// reading of a tool path, shared by the tools and by the daemon's audit of their calls.
pub fn lexical_components(path: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            other => out.push(other),
        }
    }
    Some(out)
}

impl ToolRoot {
    /// Lexical normalization of a request path into components. Refuses NUL bytes and `..` above
    /// the root; strips aliases of the root and a leading `/`.
    pub(crate) fn normalize(&self, input: &str) -> ToolResult<Vec<String>> {
        if input.len() > MAX_PATH_BYTES {
            return Err(ToolError::InvalidArgs(format!(
                "the path is {} bytes long; a path has at most {MAX_PATH_BYTES} bytes.",
                input.len()
            )));
        }
        if input.contains('\0') {
            return Err(ToolError::InvalidArgs(
                "the path contains a NUL byte; send a plain workspace-relative path such as \"notes/plan.md\".".into(),
            ));
        }
        let mut s = input;
        let root_str = self.root.to_str().unwrap_or("");
        for alias in self.aliases.iter().map(String::as_str).chain([root_str]) {
            if alias.is_empty() {
                continue;
            }
            if let Some(rest) = s.strip_prefix(alias) {
                if rest.is_empty() || rest.starts_with('/') {
                    s = rest;
                    break;
                }
            }
        }
        let parts = lexical_components(s).ok_or_else(|| {
            ToolError::Denied(format!(
                "'{input}' climbs above the workspace root with '..'. Paths are relative to the workspace root; use one inside it."
            ))
        })?;
        Ok(parts.into_iter().map(String::from).collect())
    }

    /// Walks `input` from the root as described in the module doc.
    pub(crate) fn walk(&self, input: &str, how: Lookup) -> ToolResult<Walk> {
        let mut queue: VecDeque<String> = self.normalize(input)?.into();
        // The request itself must not name a protected folder, whatever case it exists in.
        check_protected(&queue.iter().cloned().collect::<Vec<_>>().join("/"))?;
        let lookup_err = |e| ToolError::io(format!("looking up '{input}'"), e);
        let mut stack: Vec<String> = Vec::new();
        // The folder at `stack`, when it is open; reopened from the root after a jump.
        let mut dir: Option<File> = None;
        let mut hops = 0usize;
        while let Some(c) = queue.pop_front() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    if stack.pop().is_none() {
                        return Err(ToolError::Denied(format!(
                            "'{input}' leads through a symlink above the workspace root. Only paths inside the workspace are allowed."
                        )));
                    }
                    dir = None;
                    continue;
                }
                _ => {}
            }
            let d = match dir.take() {
                Some(d) => d,
                None => {
                    beneath::open(&self.root_fd, &stack.join("/"), DIR_PATH).map_err(lookup_err)?
                }
            };
            let last = queue.is_empty();
            let entry = beneath::open(&d, &c, ENTRY).and_then(|e| Ok((e.metadata()?, e)));
            match entry {
                Ok((m, link)) if m.file_type().is_symlink() && (!last || how.follow_final) => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(ToolError::InvalidArgs(format!(
                            "'{input}' goes through more than {MAX_SYMLINK_HOPS} symlinks (a loop?)."
                        )));
                    }
                    let target = beneath::readlink(&link)
                        .map_err(|e| ToolError::io(format!("reading symlink '{input}'"), e))?;
                    let comps = self.link_target_components(&target, input)?;
                    if target.is_absolute() {
                        stack.clear();
                    } else {
                        dir = Some(d);
                    }
                    for t in comps.into_iter().rev() {
                        queue.push_front(t);
                    }
                }
                Ok((m, opened)) => {
                    if !last && !m.is_dir() {
                        return Err(ToolError::NotADirectory(format!(
                            "'{}' in '{input}' is a file, not a folder.",
                            show(&join(&stack, &c))
                        )));
                    }
                    if last {
                        stack.push(c);
                        return Ok(Walk::Found {
                            rel: stack.join("/"),
                            meta: m,
                        });
                    }
                    // The folder just stat'ed is the one descended into: no second lookup.
                    dir = Some(opened);
                    stack.push(c);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if how.case_insensitive {
                        if let Some(name) = self.case_match(&d, &stack, &c)? {
                            queue.push_front(name);
                            dir = Some(d);
                            continue;
                        }
                    }
                    stack.push(c);
                    if queue.iter().any(|q| q == ".." || q == ".") {
                        return Err(ToolError::NotFound(format!(
                            "'{input}' does not exist (a symlink on the way points to a missing folder)."
                        )));
                    }
                    stack.extend(queue);
                    return Ok(Walk::Missing {
                        rel: stack.join("/"),
                    });
                }
                Err(e) => return Err(lookup_err(e)),
            }
        }
        // Empty path: the root itself.
        let meta = self
            .root_fd
            .metadata()
            .map_err(|e| ToolError::io("reading the workspace root", e))?;
        Ok(Walk::Found {
            rel: String::new(),
            meta,
        })
    }

    /// The real path of an existing entry the caller may access as `access`, with its `lstat`.
    fn existing_rel(
        &self,
        input: &str,
        access: Access,
        how: Lookup,
    ) -> ToolResult<(String, Metadata)> {
        match self.walk(input, how)? {
            Walk::Found { rel, meta } => {
                self.check(&rel, access)?;
                Ok((rel, meta))
            }
            Walk::Missing { rel } => {
                self.check(&rel, access)?;
                Err(ToolError::NotFound(format!(
                    "'{}' does not exist. Check the spelling, or find it with list_files, search_files or resolve {{\"title\": ...}}.",
                    input.trim_start_matches('/')
                )))
            }
        }
    }

    /// An existing path the caller may access as `access`, opened `O_PATH` (the link itself
    /// when `how` does not follow a final symlink).
    pub(crate) fn existing(&self, input: &str, access: Access, how: Lookup) -> ToolResult<Found> {
        let (rel, _) = self.existing_rel(input, access, how)?;
        let flags = if how.follow_final {
            rustix::fs::OFlags::PATH
        } else {
            ENTRY
        };
        self.open_found(rel, flags)
    }

    /// The real path of an existing regular file the caller may access as `access`.
    fn file_rel(&self, input: &str, access: Access) -> ToolResult<String> {
        let (rel, meta) = self.existing_rel(input, access, Lookup::READ)?;
        if meta.is_dir() {
            return Err(ToolError::NotAFile(format!(
                "'{}' is a folder, not a file. List it with list_files {{\"path\": \"{}\"}}.",
                show(&rel),
                rel
            )));
        }
        if !meta.is_file() {
            return Err(not_regular(&rel));
        }
        Ok(rel)
    }

    /// Opens the regular file at `rel` for reading.
    pub(crate) fn open_file(&self, rel: String) -> ToolResult<Found> {
        let f = self.open_found(rel, FILE_READ)?;
        if !f.meta.is_file() {
            return Err(not_regular(&f.rel));
        }
        Ok(f)
    }

    /// An existing regular file the caller may access as `access`, opened for reading.
    pub(crate) fn existing_file(&self, input: &str, access: Access) -> ToolResult<Found> {
        let rel = self.file_rel(input, access)?;
        self.open_file(rel)
    }

    /// Like [`ToolRoot::existing_file`], holding the file's write lock from before it is opened,
    /// so the content read is the latest and stays so until the guard is dropped.
    pub(crate) fn locked_file(
        &self,
        input: &str,
        access: Access,
    ) -> ToolResult<(PathGuard<'_>, Found)> {
        let rel = self.file_rel(input, access)?;
        let mut guard = self.locks.lock(&[&self.abs_of(&rel)]);
        if let Some(edits) = &self.shared_edits {
            // The locks are the daemon's, in the store's private area.
            let lock = self.elevated(|_| edits.lock(&rel)).map_err(|e| {
                ToolError::io(
                    format!("waiting for other hosts' edits of '{}'", show(&rel)),
                    e,
                )
            })?;
            guard.shared = Some(lock);
        }
        Ok((guard, self.open_file(rel)?))
    }

    /// An existing folder the caller may read, opened `O_PATH`.
    pub(crate) fn existing_dir(&self, input: &str) -> ToolResult<Found> {
        let (rel, meta) = self.existing_rel(input, Access::Read, Lookup::READ)?;
        if !meta.is_dir() {
            return Err(ToolError::NotADirectory(format!(
                "'{}' is a file, not a folder. Read it with read_file.",
                show(&rel)
            )));
        }
        self.open_found(rel, DIR_PATH)
    }

    /// Opens `rel` (real, already checked) beneath the root.
    pub(crate) fn open_found(&self, rel: String, flags: rustix::fs::OFlags) -> ToolResult<Found> {
        let ctx = |e| ToolError::io(format!("opening '{}'", show(&rel)), e);
        let file = beneath::open(&self.root_fd, &rel, flags).map_err(ctx)?;
        let meta = file.metadata().map_err(ctx)?;
        Ok(Found {
            abs: self.abs_of(&rel),
            rel,
            meta,
            file,
        })
    }

    /// A path to create or overwrite. Its folders are matched ignoring case when the exact
    /// names do not exist, so a write never makes a second folder beside one that differs only
    /// in case; the final name is matched exactly (a case-only rename stays possible). Act on
    /// it through [`ToolRoot::slot`].
    pub(crate) fn target(&self, input: &str, access: Access) -> ToolResult<Target> {
        let (rel, meta) = match self.walk(input, Lookup::EXACT)? {
            Walk::Found { rel, meta } => (rel, Some(meta)),
            Walk::Missing { rel } => {
                let comps = self.normalize(input)?;
                match comps.split_last() {
                    Some((name, parents)) if !parents.is_empty() => {
                        match self.walk(&parents.join("/"), Lookup::READ)? {
                            Walk::Found { rel: dir, .. } => {
                                match self.walk(&join_rel(&dir, name), Lookup::EXACT)? {
                                    Walk::Found { rel, meta } => (rel, Some(meta)),
                                    Walk::Missing { rel } => (rel, None),
                                }
                            }
                            Walk::Missing { rel: dirs } => (join_rel(&dirs, name), None),
                        }
                    }
                    _ => (rel, None),
                }
            }
        };
        if rel.is_empty() {
            return Err(ToolError::InvalidArgs(
                "the workspace root itself cannot be the target; name a file or folder inside it."
                    .into(),
            ));
        }
        self.check(&rel, access)?;
        let asked = self.normalize(input)?.join("/");
        let reused = (asked != rel && asked.to_lowercase() == rel.to_lowercase()).then(|| {
            format!(
                "'{asked}' is '{rel}': names that exist in another case are used, not duplicated"
            )
        });
        Ok(Target {
            abs: self.abs_of(&rel),
            rel,
            meta,
            reused,
        })
    }

    /// The folder holding `rel` (real, already checked, not the root), opened beneath the root,
    /// and `rel`'s last name. A missing folder is created with its parents when `create`, else
    /// the answer is `None`.
    pub(crate) fn slot(&self, rel: &str, create: bool) -> ToolResult<Option<Slot>> {
        let (parent, name) = match rel.rsplit_once('/') {
            Some((p, n)) => (p, n),
            None => ("", rel),
        };
        let dir = match beneath::open(&self.root_fd, parent, DIR_READ) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                self.create_dirs(parent, rel)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(ToolError::io(
                    format!("opening the folder of '{}'", show(rel)),
                    e,
                ))
            }
        };
        self.policy.writing_in(dir.as_fd(), name, rel)?;
        Ok(Some(Slot {
            dir,
            name: name.to_string(),
        }))
    }

    /// Creates the folder `rel` and its missing parents beneath the root with the caller's
    /// folder mode, one name at a time, reports the topmost one created, and returns it opened
    /// for reading. `for_rel` names the path the folders are for, in errors.
    pub(crate) fn create_dirs(&self, rel: &str, for_rel: &str) -> ToolResult<File> {
        let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
        // Each folder made is charged (a deep path makes many).
        let missing = beneath::missing_dirs(&self.root_fd, &comps).map_err(|e| {
            ToolError::io(format!("creating the folders for '{}'", show(for_rel)), e)
        })? as u64;
        self.charge(missing * crate::FOLDER_BYTES, missing)?;
        let mkdir = &mut |dir: &File, name: &str, mode| self.mkdir(dir, name, mode);
        let (dir, first_new) =
            beneath::mkdirs(&self.root_fd, &comps, self.dir_mode(), DIR_READ, mkdir).map_err(
                |e| ToolError::io(format!("creating the folders for '{}'", show(for_rel)), e),
            )?;
        if let Some(i) = first_new {
            self.changed(&self.abs_of(&comps[..=i].join("/")));
        }
        Ok(dir)
    }

    /// Whether the calling process may read `rel` by its permissions (and search every folder
    /// on the way), without following a symlink at the end.
    pub(crate) fn caller_may_read(&self, rel: &str) -> bool {
        beneath::may_read(&self.root_fd, rel)
    }

    /// The tags of `rel`: the comma-separated values of its `user.xdg.tags` (the
    /// freedesktop.org convention) and `user.tags` attributes, trimmed and lower-cased. None for
    /// a file that cannot be opened (or is not a regular file).
    pub(crate) fn tags_of(&self, rel: &str) -> Option<Vec<String>> {
        let file = crate::beneath::open(
            &self.root_fd,
            rel,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
        )
        .ok()?;
        let mut tags = Vec::new();
        for attr in ["user.xdg.tags", "user.tags"] {
            let mut buf = vec![0u8; 4096];
            if let Ok(n) = rustix::fs::fgetxattr(&file, attr, &mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                tags.extend(
                    text.split(',')
                        .map(|t| t.trim().to_lowercase())
                        .filter(|t| !t.is_empty()),
                );
            }
        }
        Some(tags)
    }

    /// Protected names, then the caller's policy.
    pub(crate) fn check(&self, rel: &str, access: Access) -> ToolResult<()> {
        check_protected(rel)?;
        self.policy.check(rel, access)
    }

    /// Runs `rename` of the entry `name` of `dir` into `to_dir` as `to`, if the caller's
    /// policy lets it carry the entry there ([`AccessCheck::carry`]).
    pub(crate) fn carry(
        &self,
        (dir, name): (&File, &str),
        (to_dir, to): (&File, &str),
        rename: impl FnOnce() -> ToolResult<()>,
    ) -> ToolResult<()> {
        use std::os::fd::AsFd;
        let mut rename = Some(rename);
        self.policy.carry(
            (dir.as_fd(), name),
            (to_dir.as_fd(), to),
            &mut || match rename.take() {
                Some(f) => f(),
                None => Ok(()),
            },
        )
    }

    /// `root/rel`, as a name only (for locks, the observer and messages).
    pub(crate) fn abs_of(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// The components of a symlink target, relative to the root for absolute targets.
    fn link_target_components(&self, target: &Path, input: &str) -> ToolResult<Vec<String>> {
        let rel: &Path = if target.is_absolute() {
            target.strip_prefix(&self.root).map_err(|_| {
                ToolError::Denied(format!(
                    "'{input}' is or goes through a symlink that points outside the workspace; it cannot be used."
                ))
            })?
        } else {
            target
        };
        rel.components()
            .map(|c| match c {
                std::path::Component::Normal(s) => {
                    s.to_str().map(str::to_string).ok_or_else(|| {
                        ToolError::InvalidArgs(format!(
                            "'{input}' goes through a symlink whose target is not UTF-8."
                        ))
                    })
                }
                std::path::Component::ParentDir => Ok("..".to_string()),
                std::path::Component::CurDir
                | std::path::Component::RootDir
                | std::path::Component::Prefix(_) => Ok(".".to_string()),
            })
            .collect()
    }

    /// The single entry of folder `dir` (at `stack`) equal to `name` ignoring case, if any.
    fn case_match(&self, dir: &File, stack: &[String], name: &str) -> ToolResult<Option<String>> {
        let Ok(names) = beneath::list(dir) else {
            return Ok(None);
        };
        let want = name.to_lowercase();
        let mut hits: Vec<String> = names
            .into_iter()
            .filter(|n| n.to_lowercase() == want)
            .collect();
        hits.sort();
        match hits.len() {
            0 => Ok(None),
            1 => Ok(hits.pop()),
            _ => Err(ToolError::MultipleMatches {
                message: format!(
                    "'{name}' matches several entries that differ only in case; use the exact name."
                ),
                candidates: hits
                    .iter()
                    .take(MAX_CANDIDATES)
                    .map(|h| serde_json::Value::String(join(stack, h)))
                    .collect(),
            }),
        }
    }
}

fn not_regular(rel: &str) -> ToolError {
    ToolError::NotAFile(format!("'{}' is not a regular file.", show(rel)))
}

/// `stack/name` as a workspace-relative path.
pub(crate) fn join(stack: &[String], name: &str) -> String {
    if stack.is_empty() {
        name.to_string()
    } else {
        format!("{}/{}", stack.join("/"), name)
    }
}

/// `rel/name` for workspace-relative strings.
pub(crate) fn join_rel(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}
