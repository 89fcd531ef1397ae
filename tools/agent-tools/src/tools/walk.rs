//! A bounded, policy-aware walk of a folder tree for the listing and search tools: never follows
//! symlinks, skips protected names and what the caller may not read, stops after a fixed number of
//! entries and says so.
//!
//! Each folder is opened beneath the walk's start folder by its path below it with symlinks refused
//! (`beneath::open`), and listed and stat'ed through that descriptor, so a folder swapped for a
//! symlink mid-walk is skipped instead of followed. Only two descriptors are open at a time, however
//! deep the tree.

use std::fs::{File, Metadata};

use globset::{GlobBuilder, GlobMatcher};

use crate::access::{protected_component, Access};
use crate::beneath::{self, DIR_PATH};
use crate::error::{ToolError, ToolResult};
use crate::limits::MAX_WALK_ENTRIES;
use crate::paths::{join_rel, Found};
use crate::ToolRoot;

/// One entry met by the walk.
pub(crate) struct Entry<'a> {
    /// Workspace-relative path.
    pub rel: String,
    /// Path relative to the walk's start folder.
    pub sub: String,
    /// The entry's name.
    pub name: String,
    /// `lstat` metadata.
    pub meta: Metadata,
    /// 1 for the start folder's children.
    pub depth: usize,
    /// The folder holding the entry.
    dir: &'a File,
}

impl Entry<'_> {
    /// Opens the entry through its folder's descriptor (symlinks refused).
    pub(crate) fn open(&self, flags: rustix::fs::OFlags) -> std::io::Result<File> {
        beneath::open(self.dir, &self.name, flags)
    }
}

/// What the visitor wants next.
pub(crate) enum Step {
    /// Go on (and into this entry if it is a folder within depth).
    Continue,
    /// Do not descend into this folder.
    Prune,
    /// Stop the whole walk.
    Stop,
}

/// Outcome of a walk.
pub(crate) struct WalkStats {
    /// Entries visited.
    pub visited: usize,
    /// Whether the walk stopped at [`MAX_WALK_ENTRIES`].
    pub capped: bool,
}

/// Walks the folder `start` (existing, readable) depth-first in name order, to `max_depth`
/// levels, calling `visit` for each readable, unprotected entry.
pub(crate) fn walk(
    root: &ToolRoot,
    start: &Found,
    max_depth: usize,
    mut visit: impl FnMut(&Entry) -> Step,
) -> ToolResult<WalkStats> {
    let mut stats = WalkStats {
        visited: 0,
        capped: false,
    };
    // Stack of folders still to read: (workspace rel, sub rel, depth of their children).
    let mut stack: Vec<(String, String, usize)> = vec![(start.rel.clone(), String::new(), 1)];
    while let Some((rel, sub, depth)) = stack.pop() {
        let listed = beneath::open(&start.file, &sub, DIR_PATH)
            .and_then(|dir| Ok((beneath::list(&dir)?, dir)));
        let (mut names, dir) = match listed {
            Ok(l) => l,
            Err(e) if sub.is_empty() => {
                return Err(ToolError::io(
                    format!("listing '{}'", crate::paths::show(&rel)),
                    e,
                ))
            }
            Err(_) => continue,
        };
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            if protected_component(&name).is_some() {
                continue;
            }
            let erel = join_rel(&rel, &name);
            if root.policy().check(&erel, Access::Read).is_err() {
                continue;
            }
            stats.visited += 1;
            if stats.visited > MAX_WALK_ENTRIES {
                stats.capped = true;
                return Ok(stats);
            }
            let Ok(meta) = beneath::lstat(&dir, &name) else {
                continue;
            };
            let entry = Entry {
                sub: join_rel(&sub, &name),
                rel: erel,
                name,
                meta,
                depth,
                dir: &dir,
            };
            match visit(&entry) {
                Step::Stop => return Ok(stats),
                Step::Prune => {}
                Step::Continue => {
                    if entry.meta.is_dir() && depth < max_depth {
                        subdirs.push((entry.rel, entry.sub, depth + 1));
                    }
                }
            }
        }
        // Reverse so the stack pops them in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(stats)
}

/// A case-insensitive glob. A glob without `/` matches entry names at any depth; one with `/`
/// matches the path relative to the listed folder.
pub(crate) struct Glob {
    m: GlobMatcher,
    by_name: bool,
}

impl Glob {
    pub(crate) fn new(pattern: &str) -> ToolResult<Glob> {
        let p = pattern.trim_start_matches("./").trim_start_matches('/');
        let g = GlobBuilder::new(p)
            .case_insensitive(true)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| {
                ToolError::InvalidArgs(format!(
                    "'{pattern}' is not a valid glob ({e}). Examples: \"*.md\", \"projects/**/*.md\", \"**/notes*\"."
                ))
            })?;
        Ok(Glob {
            m: g.compile_matcher(),
            by_name: !p.contains('/'),
        })
    }

    /// Whether a workspace-relative path matches (by its last name for a glob without `/`).
    pub(crate) fn matches_path(&self, rel: &str) -> bool {
        match self.by_name {
            true => self.m.is_match(rel.rsplit('/').next().unwrap_or(rel)),
            false => self.m.is_match(rel),
        }
    }

    pub(crate) fn matches(&self, e: &Entry) -> bool {
        if self.by_name {
            self.m.is_match(&e.name)
        } else {
            self.m.is_match(&e.sub)
        }
    }
}

/// Parses a list of globs.
pub(crate) fn globs(patterns: &[String]) -> ToolResult<Vec<Glob>> {
    patterns.iter().map(|p| Glob::new(p)).collect()
}
