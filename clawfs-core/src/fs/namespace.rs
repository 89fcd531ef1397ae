//! Making and removing names: mknod, mkdir, symlink, link, unlink, rmdir, rename.

use super::git_guard::{AfterRelease, Attempt, GitRename};
use super::*;

impl ClawFs {
    /// Creates a special or regular file node.
    pub fn mknod(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> FsResult<Entry> {
        self.audited(|| self.mknod_decided(caller, parent, name, mode, rdev))
    }

    fn mknod_decided(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> FsResult<Entry> {
        let made = self.begin_create(
            caller,
            "mknod",
            parent,
            name,
            (FileKind::from_mode(mode), 0),
        )?;
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::mknodat(
                &made.dir,
                name,
                rustix::fs::FileType::from_raw_mode(mode),
                Mode::from_raw_mode(mode & 0o7777),
                decode_dev(rdev),
            )?;
        }
        self.made_entry(caller, parent, name, &made)
    }

    /// Counts the node `made` just made as `name` in `parent` and answers its entry.
    fn made_entry(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        made: &Creating<'_>,
    ) -> FsResult<Entry> {
        self.held_made((&made.who, caller.uid), parent, made.dir.as_fd(), name);
        let entry = self.entry_at(parent, made.dir.as_fd(), name, made.place)?;
        self.created(made, entry.attr.ino);
        Ok(entry)
    }

    /// Creates a directory; in `workspaces/` that is a new workspace with its metadata.
    pub fn mkdir(&self, caller: &Caller, parent: u64, name: &OsStr, mode: u32) -> FsResult<Entry> {
        self.audited(|| self.mkdir_decided(caller, parent, name, mode))
    }

    fn mkdir_decided(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
    ) -> FsResult<Entry> {
        let made = self.begin_create(
            caller,
            "mkdir",
            parent,
            name,
            (FileKind::Dir, crate::held::DIR_BYTES),
        )?;
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::mkdirat(&made.dir, name, Mode::from_raw_mode(mode & 0o7777))?;
            if made.place == Place::WorkspaceRoot {
                self.lay_out_workspace(caller, made.dir.as_fd(), name, mode)?;
            }
        }
        self.made_entry(caller, parent, name, &made)
    }

    /// Gives a new workspace directory its `metadata.json` and `snapshots/`. Runs as the
    /// creator, so both belong to them.
    pub(super) fn lay_out_workspace(
        &self,
        caller: &Caller,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
    ) -> FsResult<()> {
        let ws = clawfs_store::beneath::open_dir(parent, std::path::Path::new(name))?;
        // Sticky, like /tmp: whoever may add to it moves or removes only what is theirs.
        let made = rustix::fs::fstat(&ws)?.st_mode;
        rustix::fs::fchmod(&ws, Mode::from_raw_mode((made & 0o7777) | 0o1000))?;
        rustix::fs::mkdirat(&ws, "snapshots", Mode::from_raw_mode(mode & 0o7777))?;
        let owner = clawfs_store::accounts::user_name(caller.uid);
        let meta = seed::workspace_metadata(
            &name.to_string_lossy(),
            &owner,
            &clawfs_store::clock::now_rfc3339(),
        );
        clawfs_store::beneath::write_atomic(
            ws.as_fd(),
            "metadata.json",
            &meta,
            clawfs_store::beneath::FileMode::mode(mode & 0o666),
        )?;
        Ok(())
    }

    /// Removes a non-directory.
    pub fn unlink(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        self.audited(|| self.unlink_decided(caller, parent, name))
    }

    fn unlink_decided(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        self.remove(caller, parent, name, AtFlags::empty())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        self.audited(|| self.rmdir_decided(caller, parent, name))
    }

    fn rmdir_decided(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        self.remove(caller, parent, name, AtFlags::REMOVEDIR)
    }

    pub(super) fn remove(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        flags: AtFlags,
    ) -> FsResult<()> {
        let op = if flags.contains(AtFlags::REMOVEDIR) {
            "rmdir"
        } else {
            "unlink"
        };
        if let Route::Generated(dir) = self.route(parent)? {
            return self.generated_call(caller, op, &dir.clone(), || {
                self.remove_generated(caller, dir, name)
            });
        }
        let pnode = self.node(parent)?;
        self.check_remove(&pnode, name)
            .map_err(|e| self.rule_refusal(caller, op, &pnode, Some(name), e))?;
        let dir = self.open_path(&pnode)?;
        let path = self.node_path(&pnode, &*dir)?.join(name)?;
        self.decide(caller, op, clawfs_policy::Access::Delete, &path)?;
        let removal = self.held_cost(dir.as_fd(), name);
        if removal.is_none() && !flags.contains(AtFlags::REMOVEDIR) {
            // A file keeping other names: the path cached for it may be this one.
            if let Ok(handle) = BackingHandle::at(dir.as_fd(), name) {
                self.paths.forget(&handle);
            }
        }
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::unlinkat(&dir, name, flags)?;
        }
        let freed = removal.as_ref().and_then(|r| r.last_file());
        if let Some(r) = removal {
            self.held_removed(r);
        }
        match flags.contains(AtFlags::REMOVEDIR) {
            true => self.index_tree_gone(&path),
            false => self.index_file(&path),
        }
        if let Some(ino) = freed {
            self.release_space(self.inodes.mount_ino(ino));
        }
        Ok(())
    }

    /// A file's last name is gone: its kept descriptor goes too, so its space is freed now
    /// (as on a native filesystem), not when the kernel forgets the inode.
    pub(super) fn release_space(&self, ino: u64) {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop(&ino);
    }

    /// Creates a symbolic link `name` → `target`.
    pub fn symlink(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        target: &OsStr,
    ) -> FsResult<Entry> {
        self.audited(|| self.symlink_decided(caller, parent, name, target))
    }

    fn symlink_decided(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        target: &OsStr,
    ) -> FsResult<Entry> {
        let made = self.begin_create(
            caller,
            "symlink",
            parent,
            name,
            (FileKind::Symlink, target.len() as u64),
        )?;
        self.refuse_symlink_in_foreign_git(caller, &made.who, "symlink", &made.path)?;
        self.refuse_escaping_symlink(
            caller,
            &made.who,
            ("symlink", &made.path),
            &made.dir,
            target.as_bytes(),
        )?;
        {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::symlinkat(target, &made.dir, name)?;
        }
        self.made_entry(caller, parent, name, &made)
    }

    /// Refuses an agent a symlink at `path` (made by `op`) inside the `.git` folder of a
    /// repository someone else owns: git makes none there, and one would send its owner's git
    /// to a folder of the agent's choosing (a submodule's git dir, a rebase's state, hooks).
    fn refuse_symlink_in_foreign_git(
        &self,
        caller: &Caller,
        who: &Identity,
        op: &'static str,
        path: &clawfs_policy::NsPath,
    ) -> FsResult<()> {
        let repos = self.repos(caller);
        if !matches!(who, Identity::Agent(_))
            || !self.policy().is_in_git_dir(path, &repos)
            || !clawfs_policy::GitRepos::foreign_git_above(&repos, path)
        {
            return Ok(());
        }
        let denial = Denial {
            rule: clawfs_policy::rule::PROTECTED,
            kind: clawfs_policy::DenyKind::ReadOnly,
            reason: format!("{path} would be a symlink in the .git folder of a repository you do not own, sending its owner's git wherever it points; agents may not make symlinks there"),
        };
        self.refuse(caller, op, path, denial)
    }

    /// Refuses an agent a symlink to `target` at `path` (in `dir`, made by `op`: `symlink`, or
    /// `link` giving one a second name) in a repository someone else owns that leads out of the
    /// workspace, into a `.git` or through a symlink ([`super::git_guard::symlink_escape`]).
    fn refuse_escaping_symlink(
        &self,
        caller: &Caller,
        who: &Identity,
        (op, path): (&'static str, &clawfs_policy::NsPath),
        dir: &dyn AsFd,
        target: &[u8],
    ) -> FsResult<()> {
        if !matches!(who, Identity::Agent(_))
            || !self.policy().guards_git()
            || !clawfs_policy::GitRepos::foreign_git_above(&self.repos(caller), path)
        {
            return Ok(());
        }
        let Some(why) = super::git_guard::symlink_escape(path, dir, target) else {
            return Ok(());
        };
        let what = match op {
            "link" => "a second name of a symlink",
            _ => "a symlink",
        };
        let denial = Denial {
            rule: clawfs_policy::rule::PROTECTED,
            kind: clawfs_policy::DenyKind::Permission,
            reason: format!(
                "{path} would be {what} to '{}' in a repository you do not own, and {why}; its owner's git could be made to write where it leads, so agents' symlinks there lead within the workspace, to no .git and through no symlink",
                String::from_utf8_lossy(target)
            ),
        };
        self.refuse(caller, op, path, denial)
    }

    /// Creates a hard link to `ino` as `newparent/newname`.
    pub fn link(
        &self,
        caller: &Caller,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> FsResult<Entry> {
        self.audited(|| self.link_decided(caller, ino, newparent, newname))
    }

    fn link_decided(
        &self,
        caller: &Caller,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> FsResult<Entry> {
        // Names are made in the git guard's order (`git_guard.rs`).
        let _turn = self.git_moves.shared();
        let node = self.node_for(caller, "link", ino)?;
        if node.io.is_sealed() {
            // Git's config, checked at its rename, keeps the one name it was checked under:
            // another would be written where the guard does not look (by the tools).
            let e = FsError::Refused {
                errno: libc::EPERM,
                why: "a second name for a git config checked at its rename",
            };
            return Err(self.rule_refusal(caller, "link", &node, None, e));
        }
        let pnode = self.node_for(caller, "link", newparent)?;
        let (from, to) = (node.place.area(), pnode.place.area());
        if from != to {
            let e = FsError::CrossArea { from, to };
            return Err(self.rule_refusal(caller, "link", &pnode, Some(newname), e));
        }
        if node.place.is_read_only() {
            // A second name outside snapshots/ would be a writable way into a snapshot.
            let e = super::read_only(node.place);
            return Err(self.rule_refusal(caller, "link", &node, None, e));
        }
        let place = self
            .check_create(&pnode, newname, FileKind::File)
            .map_err(|e| self.rule_refusal(caller, "link", &pnode, Some(newname), e))?;
        let src = self.open_path(&node)?;
        let dir = self.open_path(&pnode)?;
        let (from, to) = (self.ns_path(&src)?, self.ns_child(&dir, newname)?);
        // A second name of a symlink is judged where it lands, as a symlink made there.
        if rustix::fs::fstat(&*src).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK) {
            let target = rustix::fs::readlinkat(&*src, "", Vec::new())?;
            let who = self.identify(caller);
            self.refuse_escaping_symlink(caller, &who, ("link", &to), &*dir, target.as_bytes())?;
        }
        if staged::identity_file_agent(&from).is_some() {
            // A second name would let writes through it skip the staged, validated commit.
            let e = FsError::Managed("identity.json (it has one name)".into());
            return Err(self.rule_refusal(caller, "link", &node, None, e));
        }
        let who = self.decide_move(caller, "link", &from, &to, false)?;
        let is_symlink = rustix::fs::fstat(&*src)
            .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink());
        if is_symlink {
            self.refuse_symlink_in_foreign_git(caller, &who, "link", &to)?;
        }
        {
            let _as = AsCaller::enter(caller)?;
            // linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the /proc magic link does not.
            rustix::fs::linkat(
                rustix::fs::CWD,
                proc_fd_path(&src).as_c_str(),
                &dir,
                newname,
                AtFlags::SYMLINK_FOLLOW,
            )?;
        }
        // A name is no inode, but it grows its folder: an agent at its quota adds none. Checked
        // once the link is made, so a link the kernel refuses (another's file) costs nothing.
        let name = clawfs_policy::Quota {
            bytes: newname.len() as u64,
            files: 0,
        };
        if let Err(e) = self.decide_quota(caller, &who, "link", &to, name) {
            let _as = AsCaller::enter(caller)?;
            rustix::fs::unlinkat(&dir, newname, AtFlags::empty())?;
            return Err(e);
        }
        self.held_named((&who, caller.uid), newparent, dir.as_fd());
        self.entry_at(newparent, dir.as_fd(), newname, place)
    }

    /// Renames `parent/name` to `newparent/newname` as `caller`; or, when the rename would
    /// seal a file still counted open for writing (a writer's release may be on its way: git
    /// closes its `config.lock` and renames it at once), puts it off: nothing is done or
    /// recorded, and the caller waits for [`ClawFs::rename_after_release`], run on a thread
    /// that may wait.
    pub fn rename(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        mode: RenameMode,
    ) -> FsResult<Option<AfterRelease>> {
        self.audited(|| {
            self.rename_decided(caller, (parent, name), (newparent, newname), mode, false)
        })
    }

    /// The rename [`ClawFs::rename`] put off, decided again once `after`'s releases have
    /// come or [`super::git_guard::RELEASE_WAIT`] has passed: a file it would seal that is still
    /// counted open for writing is then refused.
    pub fn rename_after_release(
        &self,
        caller: &Caller,
        (parent, name): (u64, &OsStr),
        (newparent, newname): (u64, &OsStr),
        mode: RenameMode,
        after: AfterRelease,
    ) -> FsResult<()> {
        after.wait();
        drop(after);
        self.audited(|| {
            self.rename_decided(caller, (parent, name), (newparent, newname), mode, true)
                .map(|_| ())
        })
    }

    /// Decides and makes the rename in a shared turn of the git guard's order, or, when it
    /// carries a folder under someone else's repository, in a sole one, deciding again there.
    /// A file it would seal that is still counted open for writing puts it off
    /// ([`AfterRelease`]) unless `waited` (or too many are put off already: then it is
    /// decided at once).
    fn rename_decided(
        &self,
        caller: &Caller,
        (parent, name): (u64, &OsStr),
        (newparent, newname): (u64, &OsStr),
        mode: RenameMode,
        mut waited: bool,
    ) -> FsResult<Option<AfterRelease>> {
        let mut sole = false;
        loop {
            let turn = match sole {
                true => self.git_moves.sole(),
                false => self.git_moves.shared(),
            };
            let attempt = Attempt { turn, waited };
            let again =
                self.rename_in_turn(caller, (parent, name), (newparent, newname), mode, &attempt)?;
            drop(attempt);
            match again {
                None => return Ok(None),
                Some(GitRename::NeedsSoleTurn) if !sole => sole = true,
                Some(GitRename::Writing(node)) if !waited => {
                    // Put off only within one folder, as git renames its lock files: across
                    // folders the kernel holds the whole mount's rename lock meanwhile.
                    let after = (parent == newparent)
                        .then(|| AfterRelease::take(&self.git_moves, node, caller.uid))
                        .flatten();
                    if let Some(after) = after {
                        // Put off: what was decided so far is decided again after the wait.
                        super::gate::decide_again();
                        return Ok(Some(after));
                    }
                    waited = true;
                }
                Some(_) => {
                    return Err(FsError::Refused {
                        errno: libc::EAGAIN,
                        why: "a rename decided again in the turn it asked for",
                    })
                }
            }
            super::gate::decide_again();
        }
    }

    /// The rename, in `attempt`'s turn; what it must wait for to be decided again, if it
    /// must (nothing done).
    fn rename_in_turn(
        &self,
        caller: &Caller,
        (parent, name): (u64, &OsStr),
        (newparent, newname): (u64, &OsStr),
        mode: RenameMode,
        attempt: &Attempt<'_>,
    ) -> FsResult<Option<GitRename>> {
        let pnode = self.node_for(caller, "rename", parent)?;
        let npnode = self.node_for(caller, "rename", newparent)?;
        self.check_remove(&pnode, name)
            .map_err(|e| self.rule_refusal(caller, "rename", &pnode, Some(name), e))?;
        self.check_remove(&npnode, newname)
            .map_err(|e| self.rule_refusal(caller, "rename", &npnode, Some(newname), e))?;
        let (from, to) = (pnode.place.area(), npnode.place.area());
        if from != to {
            let e = FsError::CrossArea { from, to };
            return Err(self.rule_refusal(caller, "rename", &pnode, Some(name), e));
        }
        for (p, n) in [(&pnode, name), (&npnode, newname)] {
            if let Place::AreaRoot(area) = p.place {
                // Workspace and agent directories are named once, at creation.
                let e = FsError::Managed(format!("{area}{}", n.to_string_lossy()));
                return Err(self.rule_refusal(caller, "rename", p, Some(n), e));
            }
        }
        let flags = match (mode.noreplace, mode.exchange) {
            (_, true) => RenameFlags::EXCHANGE,
            (true, false) => RenameFlags::NOREPLACE,
            (false, false) => RenameFlags::empty(),
        };
        let dir = self.open_path(&pnode)?;
        let newdir = self.open_path(&npnode)?;
        let from = self.node_path(&pnode, &*dir)?.join(name)?;
        let to = self.node_path(&npnode, &*newdir)?.join(newname)?;
        let who = self.decide_move(caller, "rename", &from, &to, mode.exchange)?;
        let sealed = match matches!(who, Identity::Agent(_)) {
            true => match self.check_git_rename(
                caller,
                (&*dir, name),
                (&*newdir, newname),
                (&from, &to),
                (mode, attempt),
            )? {
                GitRename::Allowed(sealed) => sealed,
                again => return Ok(Some(again)),
            },
            false => None,
        };
        let mut sealed = sealed.into_iter().collect::<Vec<_>>();
        let unseal = |sealed: &[crate::inodes::Node]| sealed.iter().for_each(|n| n.io.unseal());
        let mut hooks = vec![((&*dir, name), (&from, &to))];
        if mode.exchange {
            hooks.push(((&*newdir, newname), (&to, &from)));
        }
        for (source, moved) in hooks {
            match self.seal_new_hook(caller, source, moved, attempt) {
                Ok(GitRename::Allowed(node)) => sealed.extend(node),
                Ok(again) => {
                    unseal(&sealed);
                    return Ok(Some(again));
                }
                Err(e) => {
                    unseal(&sealed);
                    return Err(e);
                }
            }
        }
        // What a replaced target's last name gives back (an exchange or a no-replace rename
        // replaces nothing).
        let removal = match mode.exchange || mode.noreplace {
            true => None,
            false => self.held_cost(newdir.as_fd(), newname),
        };
        let freed = removal.as_ref().and_then(|r| r.last_file());
        let renamed: FsResult<()> =
            AsCaller::enter(caller)
                .map_err(FsError::from)
                .and_then(|_as| {
                    Ok(rustix::fs::renameat_with(
                        &dir, name, &newdir, newname, flags,
                    )?)
                });
        if renamed.is_err() {
            unseal(&sealed);
        }
        renamed?;
        if let Some(r) = removal {
            self.held_removed(r);
        }
        self.held_named((&who, caller.uid), newparent, newdir.as_fd());
        self.paths_changed();
        // Where a file handle finds them again.
        let mut moved = vec![(newparent, &newdir, newname)];
        if mode.exchange {
            moved.push((parent, &dir, name));
        }
        for (p, d, n) in moved {
            if let Ok(st) = rustix::fs::statat(&**d, n, AtFlags::SYMLINK_NOFOLLOW) {
                self.inodes.relink(self.inodes.mount_ino(st.st_ino), p, n);
            }
        }
        let is_folder = |dir: &OwnedFd, name: &OsStr| {
            rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
        };
        self.index_moved(&from, &to, || is_folder(&newdir, newname));
        if mode.exchange {
            // What was at `to` is now at `from`.
            self.index_moved(&to, &from, || is_folder(&dir, name));
        }
        if let Some(ino) = freed {
            self.release_space(self.inodes.mount_ino(ino));
        }
        Ok(None)
    }
}
