//! Where each document goes: a file of the workspace (`clawfs import pg`), or only a path in a
//! database of its own (`migrate-pg-to-sqlite --sqlite-path`).
//!
//! Files are written beneath the workspace by descriptor (no symlink or `..` is followed), each
//! through a temp file with an unpredictable name, and synced once per batch, before the batch's
//! transaction records them.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use clawfs_search::import::{Document, Placed};
use clawfs_search::index::FileStamp;
use clawfs_store::beneath::FileMode;
use rustix::fs::AtFlags;
use sha2::{Digest, Sha256};

use crate::MigrateError;

/// Places documents.
pub trait Placement {
    /// Refuses a fresh import whose folder is already taken.
    fn check_fresh(&self) -> Result<(), MigrateError>;
    /// Places one document: its path in the workspace, and the file as written.
    fn place(&mut self, doc: &Document) -> Result<Placed, MigrateError>;
    /// Makes everything placed so far durable.
    fn sync(&mut self) -> Result<(), MigrateError>;
    /// The folder documents go into (`--into`).
    fn folder(&self) -> &str;
}

/// The file name of document `id`: the id itself when it is a plain name, else `%` and a hash
/// of it (`%` is never in a plain name, so the two kinds cannot collide).
pub fn file_name(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    match plain {
        true => format!("{id}.md"),
        false => format!("%{}.md", hex::encode(&Sha256::digest(id.as_bytes())[..16])),
    }
}

/// Checks `--into`: a relative path of plain names, outside the folders ClawFS keeps for
/// itself (which are never indexed).
pub fn check_into(into: &str) -> Result<(), MigrateError> {
    let ok = !into.is_empty()
        && !into.starts_with('/')
        && into.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && !part.starts_with(".clawfs")
                && !part.chars().any(char::is_control)
                && !clawfs_search::workspace::is_managed(part)
        });
    match ok {
        true => Ok(()),
        false => Err(MigrateError::Refused(format!(
            "--into {into:?}: expected a relative folder of plain names"
        ))),
    }
}

/// Paths only: a database of its own, with no workspace beside it.
pub struct PathsOnly {
    /// The folder the paths name.
    pub into: String,
}

impl Placement for PathsOnly {
    fn check_fresh(&self) -> Result<(), MigrateError> {
        Ok(())
    }

    fn folder(&self) -> &str {
        &self.into
    }

    fn place(&mut self, doc: &Document) -> Result<Placed, MigrateError> {
        Ok(Placed {
            path: format!("{}/{}", self.into, file_name(&doc.source_id)),
            stamp: FileStamp {
                size: doc.content.len() as u64,
                mtime_ns: 0,
                ino: 0,
                ctime_ns: 0,
            },
        })
    }

    fn sync(&mut self) -> Result<(), MigrateError> {
        Ok(())
    }
}

/// Files in a workspace folder, owned like the workspace, with its permission bits.
pub struct WorkspaceFiles {
    workspace: OwnedFd,
    into: String,
    dir: Option<OwnedFd>,
    owner: (u32, u32),
    mode: u32,
}

impl WorkspaceFiles {
    /// Files under `into` in the workspace folder `workspace`.
    pub fn new(workspace: OwnedFd, into: &str) -> Result<WorkspaceFiles, MigrateError> {
        check_into(into)?;
        let st = rustix::fs::fstat(&workspace).map_err(|e| io("the workspace folder")(e.into()))?;
        Ok(WorkspaceFiles {
            workspace,
            into: into.to_string(),
            dir: None,
            owner: (st.st_uid, st.st_gid),
            mode: st.st_mode & 0o777,
        })
    }

    fn dir(&mut self) -> Result<&OwnedFd, MigrateError> {
        if self.dir.is_none() {
            let dir = clawfs_store::beneath::create_dir_all(
                self.workspace.as_fd(),
                Path::new(&self.into),
                self.mode,
                Some(self.owner),
            )
            .map_err(io(&self.into))?;
            self.dir = Some(dir);
        }
        Ok(self.dir.as_ref().expect("opened above"))
    }
}

impl Placement for WorkspaceFiles {
    fn folder(&self) -> &str {
        &self.into
    }

    fn check_fresh(&self) -> Result<(), MigrateError> {
        match clawfs_store::beneath::open(
            self.workspace.as_fd(),
            Path::new(&self.into),
            rustix::fs::OFlags::PATH,
            0,
        ) {
            Ok(_) => Err(MigrateError::Refused(format!(
                "{}/ already exists in the workspace: choose another folder with --into",
                self.into
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&self.into)(e)),
        }
    }

    fn place(&mut self, doc: &Document) -> Result<Placed, MigrateError> {
        let name = file_name(&doc.source_id);
        let (owner, mode) = (self.owner, self.mode & 0o666);
        let dir = self.dir()?;
        let how = FileMode {
            mode,
            owner: Some(owner),
        };
        clawfs_store::beneath::write_atomic_unsynced(dir, &name, doc.content.as_bytes(), how)
            .map_err(io(&name))?;
        let st = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io(&name)(e.into()))?;
        Ok(Placed {
            path: format!("{}/{name}", self.into),
            stamp: FileStamp::of(&st),
        })
    }

    fn sync(&mut self) -> Result<(), MigrateError> {
        if let Some(dir) = &self.dir {
            rustix::fs::syncfs(dir).map_err(|e| io(&self.into)(e.into()))?;
        }
        Ok(())
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> MigrateError + '_ {
    move |e| MigrateError::Target(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{check_into, file_name};

    #[test]
    fn plain_ids_name_their_file_and_others_are_hashed() {
        assert_eq!(file_name("42"), "42.md");
        assert_eq!(file_name("note-7.v2"), "note-7.v2.md");
        for odd in ["../x", "a/b", ".hidden", "", "é", "a b"] {
            let n = file_name(odd);
            assert!(n.starts_with('%') && !n.contains('/'), "{odd}: {n}");
        }
        assert_ne!(file_name("a/b"), file_name("a/c"));
    }

    #[test]
    fn into_is_a_plain_relative_folder() {
        assert!(check_into("imported").is_ok());
        assert!(check_into("memory/pg").is_ok());
        for bad in [
            "",
            "/abs",
            "a/../b",
            ".",
            "a//b",
            ".clawfs",
            "x/.clawfs-tmp",
            "snapshots/x",
            ".git",
            // Managed names below the top, and names that would rewrite the terminal.
            "notes/.git",
            "a/.search/b",
            "a\nb",
            "a\u{1b}[2Kb",
        ] {
            assert!(check_into(bad).is_err(), "{bad}");
        }
    }
}
