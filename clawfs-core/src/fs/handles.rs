//! File handles that survive (`FUSE_EXPORT_SUPPORT`): the kernel turns a handle from
//! `name_to_handle_at` (or an NFS re-export's) back into an inode with a LOOKUP of "." in the
//! node it names, and finds a directory's parent with a LOOKUP of "..". A node the kernel has
//! forgotten is reached again through the backing handle the inode table kept for it
//! ([`crate::inodes::InodeTable::forgotten`]); the table is saved at a clean stop, so handles
//! also survive a remount. A node whose backing inode is gone is stale (ESTALE), as on a local
//! filesystem. Only callers with `CAP_DAC_READ_SEARCH` may open by handle.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::*;
use crate::inodes::Forgotten;

/// Where the forgotten nodes are saved at a clean stop, in the store's private area.
pub const HANDLES_FILE: &str = "handles.json";

/// One saved node: its inode number, backing handle and last link, hex-encoded.
#[derive(Serialize, Deserialize)]
struct Saved {
    ino: u64,
    handle: String,
    parent: Option<u64>,
    name: Option<String>,
}

fn stale() -> FsError {
    FsError::Io(std::io::Error::from_raw_os_error(libc::ESTALE))
}

/// `name` in the folder `dir` if it still leads to the inode `ino`; else another name of it
/// there (renamed, or a hard link whose first name was removed), as the kernel's own export
/// code looks for one; else stale.
fn name_in(dir: BorrowedFd<'_>, name: &OsStr, ino: u64) -> FsResult<OsString> {
    let same =
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| st.st_ino == ino);
    match same {
        true => Ok(name.to_owned()),
        false => name_of(dir, ino)?.ok_or_else(stale),
    }
}

/// A name of the inode `ino` in the folder `dir`, if it has one there.
fn name_of(dir: BorrowedFd<'_>, ino: u64) -> FsResult<Option<OsString>> {
    let fd = clawfs_store::beneath::open_dir_noatime(dir, OsStr::new("."))?;
    for e in rustix::fs::Dir::read_from(&fd)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if e.ino() == ino && name != b"." && name != b".." {
            return Ok(Some(
                <OsString as std::os::unix::ffi::OsStringExt>::from_vec(name.to_vec()),
            ));
        }
    }
    Ok(None)
}

impl ClawFs {
    /// The entry of `ino` itself (a LOOKUP of "."): the node the kernel knows, or one it
    /// forgot, reached again by its backing handle.
    pub(super) fn lookup_self(&self, ino: u64) -> FsResult<Entry> {
        if GeneratedInodes::is_generated(ino) {
            return Err(stale());
        }
        let (handle, link) = match self.inodes.get(ino) {
            Some(node) => ((*node.handle).clone(), node.link.as_deref().cloned()),
            None => {
                let f = self.inodes.forgotten(ino).ok_or_else(stale)?;
                (f.handle, f.link)
            }
        };
        let fd = handle.open_path(self.mount_fd())?;
        self.entry_of_reached(ino, &handle, fd.as_fd(), link)
    }

    /// The entry of the directory `ino`'s parent (a LOOKUP of ".."); the mount root is its own.
    pub(super) fn lookup_parent(&self, ino: u64) -> FsResult<Entry> {
        if ino == crate::inodes::ROOT_INO {
            return self.lookup_self(ino);
        }
        let node = self.node(ino)?;
        let dir = self.open_path(&node)?;
        let up = rustix::fs::openat(
            &*dir,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&up)?;
        let parent = self.inodes.mount_ino(st.st_ino);
        let handle = BackingHandle::of_fd(up.as_fd())?;
        let link = self
            .inodes
            .get(parent)
            .and_then(|n| n.link.as_deref().cloned());
        self.entry_of_reached(parent, &handle, up.as_fd(), link)
    }

    /// Records the kernel's new reference to `ino`, reached again as `fd` (its backing inode,
    /// by `handle`), and answers its entry. It must still be the inode the number names, and
    /// sit where the mount serves it.
    fn entry_of_reached(
        &self,
        ino: u64,
        handle: &BackingHandle,
        fd: BorrowedFd<'_>,
        link: Option<(u64, OsString)>,
    ) -> FsResult<Entry> {
        let st = rustix::fs::fstat(fd)?;
        if self.inodes.mount_ino(st.st_ino) != ino {
            return Err(stale());
        }
        let (path, link) = self.reached_path(fd, link.as_ref())?;
        let mut place = Place::MountRoot;
        for c in path.components() {
            place = place.child(c.as_ref()).ok_or_else(stale)?;
        }
        if let Some((parent, name)) = &link {
            if let Some(pplace) = self.inodes.place_of(*parent) {
                if super::is_private(pplace, name) {
                    return Err(stale());
                }
            }
        }
        self.inodes.remember(
            ino,
            handle.clone(),
            place,
            link.as_ref().map(|(p, n)| (*p, n.as_os_str())),
        );
        Ok(Entry {
            attr: self.presented(Attr::from_stat(&st, ino), Some(place)),
            generation: handle.generation(),
        })
    }

    /// The namespace path of a node reached by handle: its descriptor's, or, for a file the
    /// backing filesystem reached without its folder (a disconnected name), its last folder's
    /// path and a name of it there ([`name_in`]); with the folder and name it is reached by.
    fn reached_path(
        &self,
        fd: BorrowedFd<'_>,
        link: Option<&(u64, OsString)>,
    ) -> FsResult<(NsPath, Option<(u64, OsString)>)> {
        let err = match self.ns_path(fd) {
            Ok(path) => return Ok((path, link.cloned())),
            Err(e) => e,
        };
        let Some((parent, name)) = link else {
            return Err(err);
        };
        let dir = self.parent_fd(*parent)?;
        let name = name_in(dir.as_fd(), name, rustix::fs::fstat(fd)?.st_ino)?;
        let path = self.ns_path(dir.as_fd())?.join(&name)?;
        Ok((path, Some((*parent, name))))
    }

    /// A descriptor of the directory `ino`, known or forgotten (a directory reached by handle
    /// always has its path).
    pub(super) fn parent_fd(&self, ino: u64) -> FsResult<std::sync::Arc<OwnedFd>> {
        match self.inodes.get(ino) {
            Some(node) => self.open_path(&node),
            None => {
                let f = self.inodes.forgotten(ino).ok_or_else(stale)?;
                Ok(std::sync::Arc::new(f.handle.open_path(self.mount_fd())?))
            }
        }
    }

    /// Saves the way back to every node, known or forgotten, for the next daemon: the kernel
    /// keeps no inode across an unmount, but file handles outlive it.
    pub fn save_handles_at_stop(&self) {
        let mut all = self.inodes.all_forgotten();
        all.extend(self.inodes.live_nodes());
        let saved: Vec<Saved> = all
            .into_iter()
            .filter(|(ino, _)| *ino != crate::inodes::ROOT_INO)
            .map(|(ino, f)| Saved {
                ino,
                handle: hex::encode(f.handle.to_bytes()),
                parent: f.link.as_ref().map(|(p, _)| *p),
                name: f.link.as_ref().map(|(_, n)| {
                    hex::encode(std::os::unix::ffi::OsStrExt::as_bytes(n.as_os_str()))
                }),
            })
            .collect();
        let json = serde_json::to_vec(&saved).expect("handles serialise");
        let dir = &self.store.host_rel();
        let how = clawfs_store::beneath::FileMode::mode(0o600);
        if let Err(e) = self.store.write_beneath(dir, HANDLES_FILE, &json, how) {
            tracing::warn!(error = %e, "could not save the file handles' nodes");
        }
    }

    /// Takes back the nodes an earlier daemon saved (see [`Self::save_handles_at_stop`]); a
    /// damaged entry is skipped.
    pub(super) fn load_handles(&self) {
        let path = self.store.host_rel().join(HANDLES_FILE);
        let Some(text) = clawfs_store::beneath::read(self.store.root_fd(), &path, 256 << 20)
            .ok()
            .flatten()
        else {
            return;
        };
        let Ok(saved) = serde_json::from_slice::<Vec<Saved>>(&text) else {
            tracing::warn!(
                "{} is damaged: file handles from before this mount are stale",
                path.display()
            );
            return;
        };
        for s in saved.into_iter().take(crate::inodes::FORGOTTEN) {
            let Some(handle) = hex::decode(&s.handle)
                .ok()
                .and_then(|b| BackingHandle::from_bytes(&b))
            else {
                continue;
            };
            let name = s
                .name
                .and_then(|n| hex::decode(n).ok())
                .map(<OsString as std::os::unix::ffi::OsStringExt>::from_vec);
            let link = s.parent.zip(name);
            self.inodes
                .keep_forgotten(s.ino, Forgotten { handle, link });
        }
    }
}
