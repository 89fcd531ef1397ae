//! What the tools may touch for their caller: may this caller read or write this workspace-relative path?
//!
//! The daemon implements [`AccessCheck`] with the caller's real policy, so a tool call gets exactly
//! the access the agent has by direct file access. Protected names are refused by [`crate::ToolRoot`]
//! whatever the policy says, so no policy can open the trash, backups or `.git` to a tool.
//!
//! `.git` stays wholly refused to tools, although agents may use git by direct file access
//! (the mount's git guard keeps only `.git/hooks/`, `.git/config` and `.gitmodules` read-only):
//! no tool needs git's internals, edits there belong to git itself, and a tool reading or
//! writing objects, refs or the index by hand could only corrupt a repository. A `.gitmodules`
//! file is ordinary to tools' reads and refused to their writes only by the mount.

use crate::error::{ToolError, ToolResult};

/// What a tool wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read contents, metadata, or list a folder.
    Read,
    /// Create, modify, move, or delete.
    Write,
}

/// A summary of what a caller may access, returned by `list_allowed`.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct Allowed {
    /// Workspace-relative globs the caller's policy lets it read ("**" is everything); file
    /// permissions apply as well.
    pub read: Vec<String>,
    /// Workspace-relative globs the caller's policy lets it write; each file's owner, group
    /// and mode apply as well (`file_permissions`).
    pub write: Vec<String>,
    /// Names refused everywhere, whatever the policy (matched case-insensitively, any depth).
    pub protected: Vec<String>,
}

/// The daemon's answer to "may this caller do this?". `rel` is a normalized workspace-relative path
/// with `/` separators and no `.`/`..` components; `""` is the workspace root. It is the real path
/// after case-insensitive lookup and symlink resolution, never the raw request string.
pub trait AccessCheck: Send + Sync {
    /// `Ok(())` to allow; `Err(ToolError::Denied | ToolError::Protected)` to refuse, with a message
    /// the model can act on.
    fn check(&self, rel: &str, access: Access) -> ToolResult<()>;
    /// What this caller may read and write, for `list_allowed`.
    fn describe(&self) -> Allowed;
    /// Whether the caller may write, make or remove the entry `name` of the folder `dir`
    /// (`rel`, workspace-relative, already allowed by [`Self::check`]): asked again on the
    /// descriptor the write goes through, where what the folders around it are (a git
    /// repository under a name of its own) can be looked at without a second lookup by name.
    fn writing_in(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        name: &str,
        rel: &str,
    ) -> ToolResult<()> {
        let _ = (dir, name, rel);
        Ok(())
    }
    /// Runs `rename`, which moves (or restores) the entry `name` of the folder `dir` into the
    /// folder `to_dir` as `to` (workspace-relative), both already allowed by [`Self::check`],
    /// if the caller may carry it there. Asked on the descriptors the rename uses, which it
    /// runs inside, so that nothing changes between the answer and the move. Runs it unless the
    /// implementation says otherwise (ClawFS refuses an agent to carry a repository of its own
    /// under one it does not own, as it does through the mount).
    fn carry(
        &self,
        (dir, name): (std::os::fd::BorrowedFd<'_>, &str),
        (to_dir, to): (std::os::fd::BorrowedFd<'_>, &str),
        rename: &mut dyn FnMut() -> ToolResult<()>,
    ) -> ToolResult<()> {
        let _ = (dir, name, to_dir, to);
        rename()
    }
}

/// Folder names refused to every tool. Compared case-insensitively with each path component.
pub const PROTECTED_NAMES: &[&str] = &[".git", ".obsidian", ".smarthole"];

/// Any path component starting with this (case-insensitively) is protected: ClawFS's own files.
pub const PROTECTED_PREFIX: &str = ".clawfs";

/// The protected component of `rel`, if any. `rel` is `/`-separated.
pub fn protected_component(rel: &str) -> Option<&str> {
    rel.split('/').find(|c| {
        PROTECTED_NAMES.iter().any(|p| c.eq_ignore_ascii_case(p))
            || (c.len() >= PROTECTED_PREFIX.len()
                && c.as_bytes()[..PROTECTED_PREFIX.len()]
                    .eq_ignore_ascii_case(PROTECTED_PREFIX.as_bytes()))
    })
}

/// Refuses protected paths with the `protected` code.
pub fn check_protected(rel: &str) -> ToolResult<()> {
    match protected_component(rel) {
        Some(c) => Err(ToolError::Protected(format!(
            "'{rel}' is inside the protected folder '{c}' (system folders .git, .obsidian, .smarthole and .clawfs* are never accessible to tools). Choose a path outside it."
        ))),
        None => Ok(()),
    }
}

/// Access without a daemon behind it (the library on its own, tests): everything outside the
/// protected names may be read; written too unless `read_only`.
#[derive(Debug, Clone, Default)]
pub struct OpenAccess {
    /// Refuse every write with `denied`.
    pub read_only: bool,
}

impl AccessCheck for OpenAccess {
    fn check(&self, rel: &str, access: Access) -> ToolResult<()> {
        check_protected(rel)?;
        if self.read_only && access == Access::Write {
            return Err(ToolError::Denied(format!(
                "writing '{rel}' is denied: this workspace is read-only for you. Use list_allowed to see what you may write."
            )));
        }
        Ok(())
    }

    fn describe(&self) -> Allowed {
        Allowed {
            read: vec!["**".into()],
            write: if self.read_only {
                vec![]
            } else {
                vec!["**".into()]
            },
            protected: protected_list(),
        }
    }
}

/// The protected names as shown to callers.
pub fn protected_list() -> Vec<String> {
    PROTECTED_NAMES
        .iter()
        .map(|n| format!("{n}/"))
        .chain(std::iter::once(format!("{PROTECTED_PREFIX}*")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_names_any_case_any_depth() {
        for p in [
            ".git",
            ".GIT/config",
            "a/.Obsidian/x",
            ".SmartHole",
            ".clawfs",
            "x/.ClawFS-trash/y",
            ".clawfsfoo",
        ] {
            assert!(protected_component(p).is_some(), "{p}");
        }
        for p in [
            "",
            "a.git",
            ".gitignore",
            "notes/.github/x",
            "clawfs",
            "a/b.md",
        ] {
            assert!(protected_component(p).is_none(), "{p}");
        }
    }

    #[test]
    fn read_only_policy_refuses_writes() {
        let p = OpenAccess { read_only: true };
        assert!(p.check("a.md", Access::Read).is_ok());
        assert_eq!(p.check("a.md", Access::Write).unwrap_err().code(), "denied");
        assert_eq!(
            p.check(".git/x", Access::Read).unwrap_err().code(),
            "protected"
        );
    }
}
