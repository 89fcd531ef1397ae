//! Path resolution for tool requests: from the caller's string to a real path inside the root.
//!
//! Resolution is done component by component from the canonical root: `..` is lexical and may
//! never climb above the root; each symlink met is read and its target spliced into the walk (a
//! target outside the root is refused); a missing component may be matched case-insensitively
//! (read tools, for speech-to-text callers). The result is the real, symlink-free
//! workspace-relative path, which is what protection and policy are checked against.
//!
//! Known limit: the walk and the later open are separate system calls, so a caller racing to swap a
//! checked folder for a symlink between the two could redirect one operation. Final components
//! are opened with `O_NOFOLLOW`; full protection needs `openat2(RESOLVE_BENEATH)` (see README).

use std::collections::VecDeque;
use std::fs::Metadata;
use std::path::{Path, PathBuf};

use crate::error::{ToolError, ToolResult};
use crate::limits::{MAX_CANDIDATES, MAX_SYMLINK_HOPS};
use crate::policy::{check_protected, Access};
use crate::ToolRoot;

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

/// An existing path inside the root.
#[derive(Debug)]
pub(crate) struct Found {
    /// Real workspace-relative path, `/`-separated, `""` for the root.
    pub rel: String,
    /// `root/rel`.
    pub abs: PathBuf,
    /// Metadata of the entry (of the link itself when the last symlink is not followed).
    pub meta: Metadata,
}

/// The result of a walk: found, or missing from some component on.
#[derive(Debug)]
pub(crate) enum Walk {
    Found(Found),
    /// `rel` is the real prefix that exists plus the requested rest; `abs` = `root/rel`.
    Missing {
        rel: String,
        abs: PathBuf,
    },
}

/// Shows a workspace-relative path to a caller: the root is `/`.
pub(crate) fn show(rel: &str) -> String {
    if rel.is_empty() {
        "/".to_string()
    } else {
        rel.to_string()
    }
}

impl ToolRoot {
    /// Lexical normalization of a request path into components. Refuses NUL bytes and `..` above
    /// the root; strips aliases of the root and a leading `/`.
    pub(crate) fn normalize(&self, input: &str) -> ToolResult<Vec<String>> {
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
        let mut out: Vec<String> = Vec::new();
        for c in s.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    if out.pop().is_none() {
                        return Err(ToolError::Denied(format!(
                            "'{input}' climbs above the workspace root with '..'. Paths are relative to the workspace root; use one inside it."
                        )));
                    }
                }
                other => out.push(other.to_string()),
            }
        }
        Ok(out)
    }

    /// Walks `input` from the root as described in the module doc.
    pub(crate) fn walk(&self, input: &str, how: Lookup) -> ToolResult<Walk> {
        let mut queue: VecDeque<String> = self.normalize(input)?.into();
        // The request itself must not name a protected folder, whatever case it exists in.
        check_protected(&queue.iter().cloned().collect::<Vec<_>>().join("/"))?;
        let mut stack: Vec<String> = Vec::new();
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
                    continue;
                }
                _ => {}
            }
            let dir = self.abs_of(&stack);
            let cand = dir.join(&c);
            let last = queue.is_empty();
            match std::fs::symlink_metadata(&cand) {
                Ok(m) if m.file_type().is_symlink() && (!last || how.follow_final) => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(ToolError::InvalidArgs(format!(
                            "'{input}' goes through more than {MAX_SYMLINK_HOPS} symlinks (a loop?)."
                        )));
                    }
                    let target = std::fs::read_link(&cand)
                        .map_err(|e| ToolError::io(format!("reading symlink '{input}'"), e))?;
                    let comps = self.link_target_components(&target, input)?;
                    if target.is_absolute() {
                        stack.clear();
                    }
                    for t in comps.into_iter().rev() {
                        queue.push_front(t);
                    }
                }
                Ok(m) => {
                    if !last && !m.is_dir() {
                        return Err(ToolError::NotADirectory(format!(
                            "'{}' in '{input}' is a file, not a folder.",
                            show(&join(&stack, &c))
                        )));
                    }
                    stack.push(c);
                    if last {
                        let rel = stack.join("/");
                        let abs = self.abs_of(&stack);
                        return Ok(Walk::Found(Found { rel, abs, meta: m }));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if how.case_insensitive {
                        if let Some(name) = self.case_match(&dir, &stack, &c)? {
                            queue.push_front(name);
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
                    let rel = stack.join("/");
                    let abs = self.abs_of(&stack);
                    return Ok(Walk::Missing { rel, abs });
                }
                Err(e) => return Err(ToolError::io(format!("looking up '{input}'"), e)),
            }
        }
        // Empty path: the root itself.
        let meta = std::fs::metadata(&self.root)
            .map_err(|e| ToolError::io("reading the workspace root", e))?;
        Ok(Walk::Found(Found {
            rel: String::new(),
            abs: self.root.clone(),
            meta,
        }))
    }

    /// An existing path the caller may access as `access`.
    pub(crate) fn existing(&self, input: &str, access: Access, how: Lookup) -> ToolResult<Found> {
        match self.walk(input, how)? {
            Walk::Found(f) => {
                self.check(&f.rel, access)?;
                Ok(f)
            }
            Walk::Missing { rel, .. } => {
                self.check(&rel, access)?;
                Err(ToolError::NotFound(format!(
                    "'{}' does not exist. Check the spelling, or find it with list_files, search_files or resolve {{\"title\": ...}}.",
                    input.trim_start_matches('/')
                )))
            }
        }
    }

    /// An existing regular file the caller may access as `access`.
    pub(crate) fn existing_file(&self, input: &str, access: Access) -> ToolResult<Found> {
        let f = self.existing(input, access, Lookup::READ)?;
        if f.meta.is_dir() {
            return Err(ToolError::NotAFile(format!(
                "'{}' is a folder, not a file. List it with list_files {{\"path\": \"{}\"}}.",
                show(&f.rel),
                f.rel
            )));
        }
        if !f.meta.is_file() {
            return Err(ToolError::NotAFile(format!(
                "'{}' is not a regular file.",
                show(&f.rel)
            )));
        }
        Ok(f)
    }

    /// An existing folder the caller may read.
    pub(crate) fn existing_dir(&self, input: &str) -> ToolResult<Found> {
        let f = self.existing(input, Access::Read, Lookup::READ)?;
        if !f.meta.is_dir() {
            return Err(ToolError::NotADirectory(format!(
                "'{}' is a file, not a folder. Read it with read_file.",
                show(&f.rel)
            )));
        }
        Ok(f)
    }

    /// A path to create or overwrite: `(rel, abs, existing metadata)`. Names are matched exactly.
    pub(crate) fn target(
        &self,
        input: &str,
        access: Access,
    ) -> ToolResult<(String, PathBuf, Option<Metadata>)> {
        let (rel, abs, meta) = match self.walk(input, Lookup::EXACT)? {
            Walk::Found(f) => (f.rel, f.abs, Some(f.meta)),
            Walk::Missing { rel, abs } => (rel, abs, None),
        };
        if rel.is_empty() {
            return Err(ToolError::InvalidArgs(
                "the workspace root itself cannot be the target; name a file or folder inside it."
                    .into(),
            ));
        }
        self.check(&rel, access)?;
        Ok((rel, abs, meta))
    }

    /// Protected names, then the caller's policy.
    pub(crate) fn check(&self, rel: &str, access: Access) -> ToolResult<()> {
        check_protected(rel)?;
        self.policy.check(rel, access)
    }

    /// `root/stack...`
    pub(crate) fn abs_of(&self, stack: &[String]) -> PathBuf {
        let mut p = self.root.clone();
        for c in stack {
            p.push(c);
        }
        p
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

    /// The single entry of `dir` equal to `name` ignoring case, if any.
    fn case_match(&self, dir: &Path, stack: &[String], name: &str) -> ToolResult<Option<String>> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(_) => return Ok(None),
        };
        let want = name.to_lowercase();
        let mut hits: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
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
