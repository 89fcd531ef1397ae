//! A bounded, policy-aware walk of a folder tree for the listing and search tools: never follows
//! symlinks, skips protected names and what the caller may not read, stops after a fixed number of
//! entries and says so.
//!
//! Each folder is opened from its parent's descriptor by its one name with symlinks refused
//! (`beneath::open`), and listed and stat'ed through that descriptor, so a folder swapped for a
//! symlink mid-walk is skipped instead of followed, and a folder costs the same at any depth.
//! The walk goes at most [`MAX_WALK_DEPTH`] levels down, holding one descriptor per level.

use std::fs::{File, Metadata};

use globset::{GlobBuilder, GlobMatcher};

use crate::access::{protected_component, Access};
use crate::beneath::{self, DIR_PATH};
use crate::error::{ToolError, ToolResult};
use crate::limits::{MAX_WALK_DEPTH, MAX_WALK_ENTRIES};
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
    /// Whether entries were left unseen: the walk stopped at [`MAX_WALK_ENTRIES`], or did not
    /// go below [`MAX_WALK_DEPTH`] levels.
    pub capped: bool,
}

/// Walks the folder `start` (existing, readable) depth-first in name order, to `max_depth`
/// levels (at most [`MAX_WALK_DEPTH`]), calling `visit` for each readable, unprotected entry:
/// all the entries of a folder first, then each subfolder in turn.
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
    let failed = |e| ToolError::io(format!("listing '{}'", crate::paths::show(&start.rel)), e);
    let dir = beneath::open(&start.file, "", DIR_PATH).map_err(failed)?;
    let mut w = Walk {
        root,
        max_depth: max_depth.min(MAX_WALK_DEPTH),
        stats: &mut stats,
        visit: &mut visit,
        interrupted: None,
    };
    let at = Folder {
        rel: &start.rel,
        sub: "",
        depth: 1,
    };
    // Stopping early is not an error: the stats say what was seen. Being stopped is.
    let _stopped: Go = w.folder(&dir, at).map_err(failed)?;
    match w.interrupted.take() {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// A folder being walked: its workspace-relative path, its path below the start, and the
/// depth of its children.
#[derive(Clone, Copy)]
struct Folder<'a> {
    rel: &'a str,
    sub: &'a str,
    depth: usize,
}

/// The state of one walk. Each folder is opened from its parent's descriptor, one name at a
/// time, so a folder costs the same at any depth; at most [`MAX_WALK_DEPTH`] descriptors are
/// open at once.
struct Walk<'w, V> {
    root: &'w ToolRoot,
    max_depth: usize,
    stats: &'w mut WalkStats,
    visit: &'w mut V,
    /// Set when the call was stopped (its caller is gone).
    interrupted: Option<ToolError>,
}

/// Whether to go on after a folder.
type Go = std::ops::ControlFlow<()>;

impl<V: FnMut(&Entry) -> Step> Walk<'_, V> {
    /// Visits the entries of `dir`, then walks its subfolders. An error listing `dir` itself is
    /// returned (it matters only for the start); subfolders that cannot be listed are skipped.
    fn folder(&mut self, dir: &File, at: Folder) -> std::io::Result<Go> {
        let mut names = beneath::list(dir)?;
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            if protected_component(&name).is_some() {
                continue;
            }
            let erel = join_rel(at.rel, &name);
            if self.root.policy().check(&erel, Access::Read).is_err() {
                continue;
            }
            if let Err(e) = self.root.check_interrupt() {
                self.interrupted = Some(e);
                return Ok(Go::Break(()));
            }
            self.stats.visited += 1;
            if self.stats.visited > MAX_WALK_ENTRIES {
                self.stats.capped = true;
                return Ok(Go::Break(()));
            }
            let Ok(meta) = beneath::lstat(dir, &name) else {
                continue;
            };
            let entry = Entry {
                sub: join_rel(at.sub, &name),
                rel: erel,
                name,
                meta,
                depth: at.depth,
                dir,
            };
            match (self.visit)(&entry) {
                Step::Stop => return Ok(Go::Break(())),
                Step::Prune => {}
                Step::Continue if entry.meta.is_dir() => {
                    if at.depth < self.max_depth {
                        subdirs.push((entry.name, entry.rel, entry.sub));
                    } else if at.depth == MAX_WALK_DEPTH {
                        self.stats.capped = true;
                    }
                }
                Step::Continue => {}
            }
        }
        for (name, rel, sub) in subdirs {
            // A folder swapped for a symlink since it was listed is refused here, and skipped.
            let Ok(child) = beneath::open(dir, &name, DIR_PATH) else {
                continue;
            };
            let below = Folder {
                rel: &rel,
                sub: &sub,
                depth: at.depth + 1,
            };
            if let Ok(Go::Break(())) = self.folder(&child, below) {
                return Ok(Go::Break(()));
            }
        }
        Ok(Go::Continue(()))
    }
}

/// A case-insensitive glob. A glob without `/` matches entry names at any depth; one with `/`
/// matches the path relative to the listed folder.
pub(crate) struct Glob {
    m: GlobMatcher,
    by_name: bool,
}

impl Glob {
    pub(crate) fn new(pattern: &str) -> ToolResult<Glob> {
        // Longer globs compile to regular expressions the matcher cannot hold (and no name is
        // longer than 255 bytes a level).
        const LONGEST: usize = 1024;
        if pattern.len() > LONGEST {
            return Err(ToolError::InvalidArgs(format!(
                "a glob is at most {LONGEST} bytes; this one is {}. Examples: \"*.md\", \"projects/**/*.md\".",
                pattern.len()
            )));
        }
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
