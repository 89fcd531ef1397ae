//! An agent makes git's config file the way git does, by renaming a finished file onto it
//! (`config.lock` → `config`), and only so (the policy refuses opening it for writing). Before
//! such a rename the daemon reads the file and refuses settings that run commands or send git
//! elsewhere ([`crate::gitconfig`]); so that what it read is what lands, the source inode is
//! sealed first — refused if anything has it open for writing, and no agent may open it for
//! writing after — and stays sealed once it is the config.

use std::io::Read;
use std::os::fd::AsFd;

use rustix::fs::{AtFlags, FileType, OFlags};

use super::{ClawFs, RenameMode};
use crate::creds::Caller;
use crate::error::{FsError, FsResult};
use crate::inodes::Node;
use crate::policy::{rule, Denial, DenyKind, NsPath};

/// The largest git config file an agent may put in place.
pub const MAX_GIT_CONFIG: u64 = 1 << 20;

impl ClawFs {
    /// For a rename by an agent of `name` in `dir` (`from`) onto `newname` in `newdir` (`to`):
    /// refuses a folder moving into, out of or within a `.git` folder; if `to` is a git config,
    /// seals the source and checks its settings, refusing (and recording) what may not land.
    /// Returns the sealed source node, to unseal if the rename then fails.
    pub(super) fn check_git_config_rename(
        &self,
        caller: &Caller,
        (dir, name): (impl AsFd, &std::ffi::OsStr),
        (newdir, newname): (impl AsFd, &std::ffi::OsStr),
        (from, to): (&NsPath, &NsPath),
        mode: RenameMode,
    ) -> FsResult<Option<Node>> {
        let policy = self.policy();
        let refuse = |reason: String| {
            let denial = Denial {
                rule: rule::PROTECTED,
                kind: DenyKind::ReadOnly,
                reason,
            };
            match self.refuse(caller, "rename", to, denial) {
                Err(e) => e,
                Ok(()) => FsError::Io(std::io::Error::from_raw_os_error(libc::EPERM)),
            }
        };
        if mode.exchange && (policy.is_git_config(from) || policy.is_git_config(to)) {
            return Err(refuse(format!(
                "{to}: git's config may not be exchanged with another file; rename a finished file onto it, as git does"
            )));
        }
        // Folders do not move into, out of or within a `.git` folder: one prepared elsewhere
        // would bring its `config`, `hooks/` and `HEAD` in past the guard, and one built inside
        // would take a `HEAD` out and make a repository under another name. (git renames files
        // there, lock files onto their targets, never folders.)
        if policy.is_in_git_dir(from) || policy.is_in_git_dir(to) {
            let is_dir = |d: &dyn AsFd, n: &std::ffi::OsStr| {
                rustix::fs::statat(d, n, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
            };
            if is_dir(&dir, name) || (mode.exchange && is_dir(&newdir, newname)) {
                return Err(refuse(format!(
                    "agents may not move a folder into, out of or within a .git folder ({from} → {to}): it would carry git config, hooks or a HEAD past the guard"
                )));
            }
        }
        if !policy.is_git_config(to) {
            return Ok(None);
        }
        let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refuse(format!(
                "{from} is not a regular file; only a file can become git's config {to}"
            )));
        }
        let Some(node) = self.inodes.get(self.inodes.mount_ino(st.st_ino)) else {
            return Err(FsError::Refused {
                errno: libc::EBUSY,
                why: "the file renamed onto git's config is not a node the daemon knows",
            });
        };
        if !node.io.seal() {
            return Err(refuse(format!(
                "{from} is open for writing; close it before renaming it onto git's config {to}, whose settings are checked at the rename"
            )));
        }
        let text = match read_regular(&dir, name) {
            Ok(t) => t,
            Err(e) => {
                node.io.unseal();
                return Err(e);
            }
        };
        let text = String::from_utf8_lossy(&text);
        let todo = to
            .components()
            .last()
            .is_some_and(|c| c.eq_ignore_ascii_case(crate::policy::GIT_REBASE_TODO));
        if todo {
            let refused = crate::gitconfig::refused_todo_lines(&text);
            if !refused.is_empty() {
                node.io.unseal();
                return Err(refuse(format!(
                    "{from} would leave commands in a rebase's todo list {to} ({}); whoever continues the rebase would run them, so agents may not",
                    refused.join("; ")
                )));
            }
            return Ok(Some(node));
        }
        let refused = crate::gitconfig::refused_settings(&text);
        if !refused.is_empty() {
            node.io.unseal();
            return Err(refuse(format!(
                "{from} sets {} in git's config {to}; agents may set only settings that run no command and send git nowhere but its remotes (see policy/README.md), so ask an admin for the others",
                refused.join(", ")
            )));
        }
        Ok(Some(node))
    }
}

/// The content of the regular file `name` in `dir` (reached as every daemon read of an agent's
/// file is: no symlink, no blocking on a FIFO), refused past [`MAX_GIT_CONFIG`] bytes rather
/// than checked in part.
fn read_regular(dir: impl AsFd, name: &std::ffi::OsStr) -> FsResult<Vec<u8>> {
    let fd = crate::beneath::open_file(dir.as_fd(), std::path::Path::new(name), OFlags::RDONLY)?;
    if rustix::fs::fstat(&fd)?.st_size as u64 > MAX_GIT_CONFIG {
        return Err(FsError::Refused {
            errno: libc::EFBIG,
            why: "a git config file larger than 1 MiB",
        });
    }
    let mut out = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_GIT_CONFIG)
        .read_to_end(&mut out)?;
    Ok(out)
}
