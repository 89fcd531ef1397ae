//! Looking names up, and the attributes of nodes (getattr, setattr, readlink).

use super::*;

impl ClawFs {
    /// Looks up `name` in `parent`.
    pub fn lookup(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<Entry> {
        #[cfg(feature = "fault-injection")]
        if let Some((slow, delay)) = &self.faults.slow_lookup {
            if slow == name {
                std::thread::sleep(*delay);
            }
        }
        // From a file handle: the node itself, or a directory's parent.
        if name == "." {
            return self.lookup_self(parent);
        }
        if name == ".." {
            return self.lookup_parent(parent);
        }
        if let Route::Generated(dir) = self.route(parent)? {
            return self.lookup_generated(caller, dir, name);
        }
        let pnode = self.node(parent)?;
        if let Some(child) = crate::generated_files::child_of_place(pnode.place, name) {
            return Ok(self.entry_of_generated(&child));
        }
        if pnode.place == Place::WorkspaceRoot
            && crate::generated_files::is_workspace_child(name)
            && self.indexer().is_some()
        {
            let ws = self.workspace_of(&pnode)?;
            if let Some(child) = crate::generated_files::child_of_workspace(&ws, name) {
                return Ok(self.entry_of_generated(&child));
            }
        }
        if is_private(pnode.place, name) {
            return Err(not_found());
        }
        let place = pnode.place.child(name).ok_or_else(not_found)?;
        let dir = self.open_path(&pnode)?;
        if self.listings.surely_missing(parent, dir.as_fd(), name) {
            return Err(not_found());
        }
        let found = self.entry_at(parent, dir.as_fd(), name, place);
        if found.as_ref().is_err_and(FsError::is_missing) {
            self.listings.missed(parent, dir.as_fd());
        }
        found
    }

    /// The name of the workspace whose root `node` is.
    pub(super) fn workspace_of(&self, node: &Node) -> FsResult<String> {
        let ns = self.ns_path(self.open_path(node)?.as_fd())?;
        let ws = ns.components().nth(1).ok_or_else(not_found)?.to_string();
        Ok(ws)
    }

    /// Drops `n` kernel references to `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if GeneratedInodes::is_generated(ino) {
            self.generated.forget(ino);
            return;
        }
        let node = self.inodes.get(ino);
        if self.inodes.forget(ino, n) {
            self.listings.forget(ino);
            if let Some(node) = node {
                self.path_fds
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .pop(&node.handle);
            }
            self.recent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop(&ino);
        }
    }

    /// Attributes of `ino`, through the open file `fh` when given (works after unlink).
    pub fn getattr(&self, caller: &Caller, ino: u64, fh: Option<u64>) -> FsResult<Attr> {
        if let Route::Generated(node) = self.route(ino)? {
            return Ok(self.attr_of_open_generated(caller, &node, fh));
        }
        if let Some(file) = fh.and_then(|fh| self.open_file(ino, fh).ok()) {
            return self.attr_of(&file.backing.file);
        }
        // An open (or recently closed) file's descriptor saves opening the inode again.
        if let Some(backing) = self.shared.get(ino) {
            return self.attr_of(&backing.file);
        }
        let found = self.node(ino).and_then(|node| self.open_path(&node));
        match found {
            Ok(fd) => self.attr_of(&fd),
            // A directory removed while open (`fstat` after `rmdir`): its open descriptor
            // still names it.
            Err(e) => {
                let open = self.dirs.matching(|d| d.ino == ino && d.fd.is_some());
                match open.first().and_then(|(_, dir)| dir.fd.as_ref()) {
                    Some(fd) => self.attr_of(fd),
                    None => Err(e),
                }
            }
        }
    }

    /// Changes attributes of `ino` as `caller`.
    pub fn setattr(
        &self,
        caller: &Caller,
        ino: u64,
        fh: Option<u64>,
        change: SetAttr,
    ) -> FsResult<Attr> {
        self.audited(|| self.setattr_decided(caller, ino, fh, change))
    }

    fn setattr_decided(
        &self,
        caller: &Caller,
        ino: u64,
        fh: Option<u64>,
        change: SetAttr,
    ) -> FsResult<Attr> {
        if let Route::Generated(node) = self.route(ino)? {
            return self.generated_call(caller, "setattr", &node, || {
                self.generated_setattr(&node, fh, change)
            });
        }
        let node = self.node(ino)?;
        self.check_modify(&node)
            .map_err(|e| self.rule_refusal(caller, "setattr", &node, None, e))?;
        let fd = self.open_path(&node)?;
        let ns = self.node_path(&node, &*fd)?;
        let who = self.decide(caller, "setattr", clawfs_policy::Access::Write, &ns)?;
        if change.size.is_some() {
            self.refuse_rewriting_an_index(caller, &who, ("setattr", &ns), &node)?;
        }
        if change.size.is_some() && fh.is_none() && staged::identity_file_agent(&ns).is_some() {
            // Identity files change whole, validated at close: open and write them.
            let e = FsError::Managed("identity.json (write it whole)".into());
            return Err(self.rule_refusal(caller, "setattr", &node, None, e));
        }
        let before = rustix::fs::fstat(&*fd)?;
        if let Some(size) = change.size {
            // Extending a file makes it cost its new size (see `crate::held`), held by its
            // owner (or by an agent growing root's or a user's file).
            let growth = size.saturating_sub(crate::held::cost_of(&before));
            self.decide_growth(caller, &who, "setattr", &ns, growth, before.st_uid)?;
        }
        let path = proc_fd_path(&fd);
        let open = fh.and_then(|fh| self.open_file(ino, fh).ok());
        if let (Some(file), Some(_)) = (&open, change.size) {
            // A truncation through a descriptor is the opener's (see `estop_check_opener`).
            self.estop_check_opener(file, "setattr")?;
        }
        {
            let _as = AsCaller::enter(caller)?;
            // Owner before mode: chown clears setuid/setgid, which must not undo a chmod.
            if change.uid.is_some() || change.gid.is_some() {
                rustix::fs::chownat(
                    &fd,
                    "",
                    change.uid.map(rustix::fs::Uid::from_raw),
                    change.gid.map(rustix::fs::Gid::from_raw),
                    AtFlags::EMPTY_PATH,
                )?;
            }
            if let Some(mode) = change.mode {
                rustix::fs::chmod(path.as_c_str(), Mode::from_raw_mode(mode))?;
            }
            if let Some(size) = change.size {
                match &open {
                    Some(f) => {
                        f.backing.file.set_len(size)?;
                        if let Some(staged) = &f.staged {
                            // An identity file's private copy, truncated: validated and
                            // committed at close, as a write is.
                            staged.changed();
                        }
                    }
                    None => {
                        // SAFETY: `path` is a valid NUL-terminated string.
                        if unsafe { libc::truncate(path.as_ptr(), size as libc::off_t) } != 0 {
                            return Err(FsError::last_os_error());
                        }
                    }
                }
            }
            if change.atime.is_some() || change.mtime.is_some() {
                let times = Timestamps {
                    last_access: timespec(change.atime),
                    last_modification: timespec(change.mtime),
                };
                rustix::fs::utimensat(rustix::fs::CWD, path.as_c_str(), &times, AtFlags::empty())?;
            }
        }
        if change.size.is_some() {
            node.held.base(crate::held::cost_of(&before));
            self.settle(&node.held, fd.as_fd(), Some((&who, caller.uid)));
        }
        if change.uid.is_some() {
            self.held_chowned(&node, fd.as_fd(), before.st_uid);
        }
        // Any change of status changes the file's change time, which the index checks (a hit
        // is shown only for the file it was made from): index it again.
        self.index_file(&ns);
        self.attr_of(&fd)
    }

    /// The target of a symlink.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        if let Route::Generated(node) = self.route(ino)? {
            return match node {
                crate::generated_files::GeneratedNode::SearchHit { target, .. } => {
                    Ok(target.into_bytes())
                }
                _ => Err(errno(libc::EINVAL)),
            };
        }
        let node = self.node(ino)?;
        let fd = self.open_path(&node)?;
        Ok(rustix::fs::readlinkat(&fd, "", Vec::new())?.into_bytes())
    }

    /// A document of `specs/` or a file of `tools/` (the registry, definitions and binaries:
    /// anything else there is refused) open as `fd` is served from a sealed in-memory copy
    /// whose bytes are the ones checked: a change made in the store after the check (or while
    /// the file is open) never reaches the reader. Refused (EIO) if the copy does not match its
    /// signature or is not this build's. `None` for every other file.
    pub(super) fn verified_copy(&self, fd: impl AsFd) -> FsResult<Option<File>> {
        let ns = self.ns_path(fd.as_fd())?;
        // The file must sit where the opener reached it: one renamed between the lookup and
        // the open (a superseded version moved in and out of a current name) would otherwise
        // be checked against the signature of where it went, and served under the name asked.
        if !matches!(self.ns_path_by_links(fd.as_fd()), Ok(reached) if reached == ns) {
            return Err(FsError::Tampered(
                clawfs_integrity::IntegrityError::Mismatch(format!(
                    "{ns} was moved while it was opened: not served"
                )),
            ));
        }
        let mut parts = ns.components();
        let area = parts.next();
        let rel = parts.collect::<Vec<_>>().join("/");
        let specs = area == Some(Area::Specs.dir_name());
        let tools = area == Some(Area::Tools.dir_name());
        if !specs && !tools {
            return Ok(None);
        }
        let (copy, sha256) = clawfs_integrity::sealed_copy(fd.as_fd())?;
        let verdict = match specs {
            true => self.specs.check(self.store.root_fd(), &rel, &sha256),
            false => self.tool_files.check(self.store.root_fd(), &rel, &sha256),
        };
        verdict.map_err(FsError::Tampered)?;
        Ok(Some(copy))
    }
}
