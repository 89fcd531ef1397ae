//! Extended attributes through the mount: get, list, set, remove.

use super::*;
use crate::generated_files::GeneratedNode;
use clawfs_policy::kernel_acl;

use clawfs_store::layout::SETTLE_XATTR as SETTLE;

impl ClawFs {
    /// The value of xattr `name`; only `user.*` attributes exist, and the access ACL the
    /// kernel checks where the policy grants per agent ([`ClawFs::kernel_acl`]), and root's
    /// [`SETTLE`] question.
    pub fn getxattr(&self, caller: &Caller, ino: u64, name: &OsStr) -> FsResult<Vec<u8>> {
        self.audited(|| self.getxattr_decided(caller, ino, name))
    }

    fn getxattr_decided(&self, caller: &Caller, ino: u64, name: &OsStr) -> FsResult<Vec<u8>> {
        if name == kernel_acl::POSIX_ACL_ACCESS {
            return self.kernel_acl(ino)?.ok_or_else(|| errno(libc::ENODATA));
        }
        if name == SETTLE && ino == crate::inodes::ROOT_INO && caller.uid == 0 {
            // The kernel lets only CAP_SYS_ADMIN ask for a trusted.* name.
            let settled = self.settle_activity();
            return Ok(if settled { b"settled" } else { b"timeout" }.to_vec());
        }
        let name = name.to_str().filter(|n| xattrs::is_user(n));
        let generated = matches!(self.route(ino)?, Route::Generated(_));
        let Some(name) = name.filter(|_| !generated) else {
            return Err(errno(libc::ENODATA));
        };
        let node = self.node(ino)?;
        let fd = self.decided_fd(caller, "getxattr", clawfs_policy::Access::Read, &node)?;
        let path = OsStr::from_bytes(proc_fd_path(&fd).as_bytes()).to_owned();
        // Asked of the backing file as the caller, so the kernel decides whether the caller
        // may read the file's attributes, wherever this one is kept.
        let stored = {
            let _as = AsCaller::enter(caller)?;
            xattr::get_deref(path, name)?
        };
        match self.spill.get(fd.as_fd(), name)? {
            Some(kept) => Ok(kept),
            None => stored.ok_or_else(|| errno(libc::ENODATA)),
        }
    }

    /// The names of the `user.*` xattrs of `ino`, NUL-terminated and concatenated.
    pub fn listxattr(&self, caller: &Caller, ino: u64) -> FsResult<Vec<u8>> {
        self.audited(|| self.listxattr_decided(caller, ino))
    }

    fn listxattr_decided(&self, caller: &Caller, ino: u64) -> FsResult<Vec<u8>> {
        if let Route::Generated(_) = self.route(ino)? {
            return Ok(Vec::new());
        }
        let node = self.node(ino)?;
        let fd = self.decided_fd(caller, "listxattr", clawfs_policy::Access::Read, &node)?;
        let mut names = {
            let _as = AsCaller::enter(caller)?;
            user_names(&fd)?
        };
        for kept in self.spill.names(fd.as_fd())? {
            if !names.contains(&kept) {
                names.push(kept);
            }
        }
        let mut out = Vec::new();
        for name in names {
            out.extend_from_slice(name.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    /// Sets a `user.*` xattr; `user.clawfs.*` values are validated and take effect.
    pub fn setxattr(
        &self,
        caller: &Caller,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        self.audited(|| self.setxattr_decided(caller, ino, name, value, flags))
    }

    fn setxattr_decided(
        &self,
        caller: &Caller,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        let node = self.node_for(caller, "setxattr", ino)?;
        self.check_modify(&node)
            .map_err(|e| self.rule_refusal(caller, "setxattr", &node, None, e))?;
        let refused = |e| self.rule_refusal(caller, "setxattr", &node, None, e);
        let name = self.user_xattr_name(name).map_err(refused)?;
        let effect = if name.starts_with(xattrs::CLAWFS_PREFIX) {
            Some(xattrs::parse_clawfs(node.place, name, value).map_err(refused)?)
        } else {
            None
        };
        let fd = self.decided_fd(caller, "setxattr", clawfs_policy::Access::Write, &node)?;
        // What the attribute adds to what the file's owner holds (see `crate::held`), read by
        // the daemon: the caller may lack read access.
        let path = proc_fd_path(&fd);
        let kept = self.spill.get(fd.as_fd(), name)?;
        let old = match kept {
            Some(_) => kept.clone(),
            None => xattr::get_deref(OsStr::from_bytes(path.as_bytes()), name)?,
        };
        let flags = XattrFlags::from_bits_retain(flags as u32);
        if flags.contains(XattrFlags::CREATE) && old.is_some() {
            return Err(errno(libc::EEXIST));
        }
        if flags.contains(XattrFlags::REPLACE) && old.is_none() {
            return Err(errno(libc::ENODATA));
        }
        let grows = (name.len() + value.len()) as i64
            - old.as_ref().map_or(0, |v| (name.len() + v.len()) as i64);
        let st = rustix::fs::fstat(&*fd)?;
        // A file whose last name is gone stays charged what it held then, until its last
        // close: its attributes change nothing counted from then on, and none is kept beside
        // it (nothing would forget it).
        let gone = st.st_nlink == 0;
        let who = self.identify(caller);
        let payer = self.payer(Some((&who, caller.uid)), st.st_uid);
        if grows > 0 && !gone {
            let ns = self.ns_path(&fd)?;
            self.decide_growth(caller, &who, "setxattr", &ns, grows as u64, st.st_uid)?;
        }
        // A ClawFS attribute, decided and validated, is the daemon's to write (the caller may
        // not be the owner of a sticky workspace root); any other as the caller.
        let mut _as = match effect {
            Some(_) => None,
            None => Some(AsCaller::enter(caller)?),
        };
        // A ClawFS attribute takes effect in metadata.json: prepared (and validated) first, so
        // that a refusal leaves the attribute unset.
        let metadata = match effect {
            Some(ClawfsAttr::VectorDimension(dim)) => Some(self.metadata_with_dimension(&fd, dim)?),
            None => None,
        };
        let previous = match metadata {
            Some(_) => old,
            None => None,
        };
        let keep = match kept {
            Some(_) => Some(Keep::Asking),
            None => match rustix::fs::setxattr(path.as_c_str(), name, value, flags) {
                // More than the backing inode holds: kept beside it (ClawFS's own attributes
                // are few and small, and read from the backing file).
                Err(rustix::io::Errno::NOSPC | rustix::io::Errno::TOOBIG)
                    if effect.is_none() && !gone =>
                {
                    Some(Keep::NoRoom)
                }
                r => r.map(|()| None)?,
            },
        };
        if let Some(keep) = keep {
            drop(_as.take());
            self.keep_xattr(caller, &fd, name, value, keep)?;
        }
        if !gone {
            self.held_changed(payer, grows);
        }
        if let Some((bytes, mode)) = metadata {
            let dir = rustix::fs::openat(&*fd, ".", rustix::fs::OFlags::RDONLY, Mode::empty())?;
            let written = clawfs_store::beneath::write_atomic(
                dir.as_fd(),
                "metadata.json",
                &bytes,
                clawfs_store::beneath::FileMode::mode(mode),
            );
            if let Err(e) = written {
                let _ = match previous {
                    Some(old) => {
                        rustix::fs::setxattr(path.as_c_str(), name, &old, XattrFlags::empty())
                    }
                    None => rustix::fs::removexattr(path.as_c_str(), name),
                };
                return Err(e.into());
            }
            drop(_as);
            // The kernel keeps no entry of a workspace's metadata.json (`entry_ttl`): the next
            // path walk looks the new file up. (An invalidation could not reach it now: the
            // kernel holds the workspace folder for this request.)
            self.index_reconfigured(&self.ns_path(&fd)?);
        } else {
            // Its change time moved (and its tags may have): index it again.
            self.index_file(&self.ns_path(&fd)?);
        }
        Ok(())
    }

    /// Removes a `user.*` xattr. ClawFS's own attributes are set, never removed.
    pub fn removexattr(&self, caller: &Caller, ino: u64, name: &OsStr) -> FsResult<()> {
        self.audited(|| self.removexattr_decided(caller, ino, name))
    }

    fn removexattr_decided(&self, caller: &Caller, ino: u64, name: &OsStr) -> FsResult<()> {
        let node = self.node_for(caller, "removexattr", ino)?;
        self.check_modify(&node)
            .map_err(|e| self.rule_refusal(caller, "removexattr", &node, None, e))?;
        let refused = |e| self.rule_refusal(caller, "removexattr", &node, None, e);
        let name = self.user_xattr_name(name).map_err(refused)?;
        if name.starts_with(xattrs::CLAWFS_PREFIX) {
            return Err(refused(FsError::InvalidXattr {
                name: name.into(),
                reason: "ClawFS attributes cannot be removed; set a new value".into(),
            }));
        }
        let fd = self.decided_fd(caller, "removexattr", clawfs_policy::Access::Write, &node)?;
        let path = proc_fd_path(&fd);
        let old = xattr::get_deref(OsStr::from_bytes(path.as_bytes()), name)
            .ok()
            .flatten();
        let kept = self.spill.get(fd.as_fd(), name)?;
        let st = rustix::fs::fstat(&*fd)?;
        let payer = self.payer(Some((&self.identify(caller), caller.uid)), st.st_uid);
        let old = kept.clone().or(old);
        let _as = AsCaller::enter(caller)?;
        match rustix::fs::removexattr(path.as_c_str(), name) {
            // Asked as the caller of the backing file, where it is not: the kernel's answer
            // says whether the caller may remove the file's attributes.
            Err(rustix::io::Errno::NODATA) if kept.is_some() => {}
            r => r?,
        }
        drop(_as);
        if kept.is_some() {
            self.spill.remove(fd.as_fd(), name)?;
        }
        // A file whose last name is gone gives back what it held then at its last close.
        if let Some(v) = old.filter(|_| st.st_nlink > 0) {
            self.held_changed(payer, -((name.len() + v.len()) as i64));
        }
        self.index_file(&self.ns_path(&fd)?);
        Ok(())
    }

    /// The access ACL of `ino` when the policy decides who may use it per agent (an agent's
    /// folder, a workspace, the secrets): see [`clawfs_policy::kernel_acl`]. Asked by the
    /// kernel for its own permission check, whoever's call it checks: nothing is decided or
    /// audited here, and the answer is the same for every caller.
    fn kernel_acl(&self, ino: u64) -> FsResult<Option<Vec<u8>>> {
        use kernel_acl::Governed;
        let acl = |place: Governed<'_>, uid: u32, perm: u16| {
            let named = self
                .policy()
                .kernel_grants(place, uid, &self.agent_uids_seen());
            kernel_acl::acl_xattr(u32::from(perm), &named)
        };
        if let Route::Generated(node) = self.route(ino)? {
            let place = match &node {
                GeneratedNode::SecretsDir => Governed::SecretsDir,
                GeneratedNode::Secret(name) => Governed::Secret(name),
                _ => return Ok(None),
            };
            let uid = self.attr_of_generated(&node).uid;
            return Ok(Some(acl(place, uid, node.perm())));
        }
        let node = self.node(ino)?;
        if !matches!(node.place, Place::AgentRoot | Place::WorkspaceRoot) {
            return Ok(None);
        }
        let fd = self.open_path(&node)?;
        let path = self.ns_path(&fd)?;
        let Some(name) = path.get(1) else {
            return Ok(None);
        };
        let place = match node.place {
            Place::AgentRoot => Governed::AgentDir(name),
            _ => Governed::Workspace(name),
        };
        let stored = self.stored_attr(&*fd)?;
        Ok(Some(acl(place, stored.uid, stored.perm)))
    }

    /// Drops the ACLs the kernel holds of the places the policy governs, so that its next
    /// check asks again: after a policy reload.
    pub(super) fn policy_acls_changed(&self) {
        if self.invalidations.is_none() {
            return;
        }
        let mut inos = self
            .inodes
            .inos_at(|p| matches!(p, Place::AgentRoot | Place::WorkspaceRoot));
        inos.extend(
            self.generated.inodes.inos_matching(|n| {
                matches!(n, GeneratedNode::SecretsDir | GeneratedNode::Secret(_))
            }),
        );
        self.invalidate(
            inos.into_iter()
                .map(|ino| Invalidation::Inode { ino })
                .collect(),
        );
    }

    /// An `O_PATH` descriptor of `node`, once the policy allows `access` to it for `op`.
    pub(super) fn decided_fd(
        &self,
        caller: &Caller,
        op: &'static str,
        access: clawfs_policy::Access,
        node: &Node,
    ) -> FsResult<Arc<OwnedFd>> {
        let fd = self.open_path(node)?;
        self.decide(caller, op, access, &self.node_path(node, &*fd)?)?;
        Ok(fd)
    }

    /// Keeps `name` = `value` beside the backing file `fd` ([`crate::xattr_spill`]) for
    /// `caller`: the backing file had no room for it, so the caller may set its attributes,
    /// or that is asked of the kernel now. Refused with ENOSPC when the file's names would no
    /// longer fit one `listxattr` answer.
    fn keep_xattr(
        &self,
        caller: &Caller,
        fd: &OwnedFd,
        name: &str,
        value: &[u8],
        keep: Keep,
    ) -> FsResult<()> {
        let path = proc_fd_path(fd);
        let listed = {
            let _as = AsCaller::enter(caller)?;
            if keep == Keep::Asking {
                // Removing it from the backing file, where it is not, is refused as setting
                // it would be if the caller may not; a copy a crash left there goes.
                match rustix::fs::removexattr(path.as_c_str(), name) {
                    Ok(()) | Err(rustix::io::Errno::NODATA) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            user_names(fd)?
        };
        let listed: usize = listed
            .into_iter()
            .chain(self.spill.names(fd.as_fd())?)
            .filter(|n| n != name)
            .map(|n| n.len() + 1)
            .sum();
        if listed + name.len() + 1 > crate::xattr_spill::LIST_MAX {
            return Err(errno(libc::ENOSPC));
        }
        // Kept by the daemon: the table is in the store's private area.
        self.spill.put(fd.as_fd(), name, value)?;
        // A value grown past what the backing inode holds leaves the smaller one there.
        match rustix::fs::removexattr(path.as_c_str(), name) {
            Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Forgets the kept attributes of inodes that are gone (a crash between a removal and its
    /// forgetting, files replaced behind the daemon's back): at mount and at each recount.
    pub(in crate::fs) fn sweep_spilled_xattrs(&self) {
        if self.spill.unused() {
            return;
        }
        match self.spill.sweep(self.store.root_fd()) {
            Ok(0) => {}
            Ok(n) => tracing::info!(n, "attributes of removed files forgotten"),
            Err(e) => tracing::warn!(error = %e, "kept attributes could not be swept"),
        }
    }

    pub(super) fn user_xattr_name<'a>(&self, name: &'a OsStr) -> FsResult<&'a str> {
        name.to_str()
            .filter(|n| xattrs::is_user(n))
            .ok_or_else(|| FsError::XattrNamespace(name.to_string_lossy().into_owned()))
    }

    /// The workspace's metadata.json with a new vector dimension, and its mode: refused when
    /// the file is not a JSON object (nothing is changed then).
    pub(super) fn metadata_with_dimension(
        &self,
        ws: &OwnedFd,
        dim: u32,
    ) -> FsResult<(Vec<u8>, u32)> {
        let corrupt = |reason: String| FsError::Corrupt {
            path: "metadata.json".into(),
            reason,
        };
        let file = clawfs_store::beneath::open_file(
            ws.as_fd(),
            std::path::Path::new("metadata.json"),
            rustix::fs::OFlags::RDONLY,
        )?;
        let mode = rustix::fs::fstat(&file)?.st_mode & 0o7777;
        let mut meta: serde_json::Value =
            serde_json::from_reader(std::io::Read::take(File::from(file), 1 << 20))
                .map_err(|e| corrupt(format!("not valid JSON: {e}")))?;
        let obj = meta
            .as_object_mut()
            .ok_or_else(|| corrupt("not a JSON object".into()))?;
        obj.insert("vector_dimension".into(), dim.into());
        obj.insert(
            "updated_at".into(),
            clawfs_store::clock::now_rfc3339().into(),
        );
        let mut bytes = serde_json::to_vec_pretty(&meta).expect("a Value serialises");
        bytes.push(b'\n');
        Ok((bytes, mode))
    }
}

/// The `user.*` attribute names on the backing file `fd`, as the credentials in force see them.
fn user_names(fd: &OwnedFd) -> FsResult<Vec<String>> {
    let path = OsStr::from_bytes(proc_fd_path(fd).as_bytes()).to_owned();
    Ok(xattr::list_deref(path)?
        .filter_map(|n| n.into_string().ok())
        .filter(|n| xattrs::is_user(n))
        .collect())
}

/// Why an attribute is kept beside its backing file.
#[derive(PartialEq, Eq)]
enum Keep {
    /// The backing inode had no room for it.
    NoRoom,
    /// It is kept there already; whether the caller may set it is still to be asked.
    Asking,
}
