//! Directories (opendir, readdir, releasedir, fsyncdir) and the filesystem's statistics.

use super::*;

impl ClawFs {
    /// Opens the directory `ino`.
    pub fn opendir(&self, caller: &Caller, ino: u64) -> FsResult<u64> {
        self.audited(|| self.opendir_decided(caller, ino))
    }

    fn opendir_decided(&self, caller: &Caller, ino: u64) -> FsResult<u64> {
        let mut held = None;
        let mut charge = None;
        if let Route::Generated(node) = self.route(ino)? {
            if !node.is_dir() {
                return Err(errno(libc::ENOTDIR));
            }
        } else {
            let node = self.node(ino)?;
            // Opening now reports a vanished or unreadable directory at opendir, not later.
            let fd = node.handle.open(
                self.mount_fd(),
                libc::O_RDONLY | libc::O_DIRECTORY | self.atime_flag(true),
            )?;
            let path = self.node_path(&node, &fd)?;
            self.decide(caller, "opendir", clawfs_policy::Access::List, &path)?;
            charge = Some(self.charge_descriptor(caller, "opendir", &path)?);
            held = Some(fd);
        }
        Ok(self
            .dirs
            .insert(OpenDir {
                ino,
                caller: *caller,
                entries: Default::default(),
                fd: held,
                charge,
            })
            .0)
    }

    /// The entries of the open directory `fh`, read afresh when `offset` is 0 (a new pass or
    /// a rewind) or when this handle has none yet, else the snapshot being served. A handle's
    /// first request may come at any offset: the kernel serves the start of a listing from
    /// its cache of the folder, and asks for the rest when that cache is dropped midway
    /// (memory pressure, an invalidation); the offsets of a fresh reading of an unchanged
    /// folder are those of the one cached.
    pub fn readdir(&self, fh: u64, offset: u64) -> FsResult<Arc<Vec<DirEntry>>> {
        let dir = self.dirs.get(fh)?;
        let mut entries = dir
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if offset == 0 || entries.is_none() {
            *entries = Some(Arc::new(self.list_dir(&dir.caller, dir.ino)?));
        }
        Ok(entries.as_ref().map(Arc::clone).unwrap_or_default())
    }

    pub(super) fn list_dir(&self, caller: &Caller, ino: u64) -> FsResult<Vec<DirEntry>> {
        if let Route::Generated(dir) = self.route(ino)? {
            return self.list_generated_dir(caller, dir);
        }
        let node = self.node(ino)?;
        let fd = node.handle.open(
            self.mount_fd(),
            libc::O_RDONLY | libc::O_DIRECTORY | self.atime_flag(true),
        )?;
        let parent_ino = if ino == ROOT_INO {
            ROOT_INO
        } else {
            let st = rustix::fs::statat(&fd, "..", AtFlags::empty())?;
            self.inodes.mount_ino(st.st_ino)
        };
        let mut out = DirEntry::dots(ino, parent_ino);
        // A workspace's generated names shadow stored ones, as its lookups do.
        let workspace = match node.place == Place::WorkspaceRoot && self.indexer().is_some() {
            true => Some(self.workspace_of(&node)?),
            false => None,
        };
        let mut dir = rustix::fs::Dir::read_from(&fd)?;
        while let Some(ent) = dir.read() {
            let ent = ent?;
            let name = OsStr::from_bytes(ent.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            if node.place == Place::MountRoot && Area::from_dir_name(name).is_none() {
                continue; // the private area and strays are not part of the namespace
            }
            if is_private(node.place, name)
                || crate::generated_files::child_of_place(node.place, name).is_some()
                || (workspace.is_some() && crate::generated_files::is_workspace_child(name))
            {
                continue; // hidden, or shadowed by a generated file
            }
            let kind = match ent.file_type() {
                rustix::fs::FileType::Unknown => {
                    let st = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
                    FileKind::from_mode(st.st_mode)
                }
                t => FileKind::from_dirent(t),
            };
            out.push(DirEntry {
                ino: self.inodes.mount_ino(ent.ino()),
                kind,
                name: OsString::from(name),
            });
        }
        for name in crate::generated_files::children_of_place(node.place) {
            let v = crate::generated_files::child_of_place(node.place, OsStr::new(name))
                .expect("listed generated children exist");
            out.push(DirEntry {
                ino: self.generated.ino(&v),
                kind: if v.is_dir() {
                    FileKind::Dir
                } else {
                    FileKind::File
                },
                name: OsString::from(name),
            });
        }
        if let Some(ws) = workspace {
            out.push(DirEntry {
                ino: self
                    .generated
                    .ino(&crate::generated_files::GeneratedNode::IndexView(ws)),
                kind: FileKind::File,
                name: OsString::from(clawfs_store::area::INDEX_VIEW),
            });
        }
        Ok(out)
    }

    /// Closes the directory handle `fh`.
    pub fn releasedir(&self, fh: u64) -> FsResult<()> {
        self.dirs.remove(fh).ok_or(FsError::UnknownHandle(fh))?;
        Ok(())
    }

    /// Syncs the directory `ino`.
    pub fn fsyncdir(&self, ino: u64) -> FsResult<()> {
        let node = self.node(ino)?;
        let fd = node
            .handle
            .open(self.mount_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?;
        rustix::fs::fsync(&fd)?;
        Ok(())
    }

    /// Statistics of the backing filesystem.
    pub fn statfs(&self) -> FsResult<StatFs> {
        let s = rustix::fs::fstatvfs(self.mount_fd())?;
        Ok(StatFs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: s.f_namemax as u32,
            frsize: s.f_frsize as u32,
        })
    }

    /// `access(2)`: mode bits are the kernel's (`default_permissions`); ClawFS adds EROFS for
    /// write access to read-only areas.
    pub fn access(&self, ino: u64, mask: i32) -> FsResult<()> {
        let node = self.node(ino)?;
        if mask & libc::W_OK != 0 && node.place.is_read_only() {
            return Err(FsError::ReadOnly(node.place.area()));
        }
        Ok(())
    }
}
