//! Open files: open, create, read, write, flush, release, fsync, fallocate, lseek, copy_file_range.

use super::*;

impl ClawFs {
    /// Opens `ino` with `flags` (the caller's open flags).
    pub fn open(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
        self.audited(|| self.open_decided(caller, ino, flags))
    }

    fn open_decided(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
        if let Route::Generated(node) = self.route(ino)? {
            return self
                .generated_call(caller, "open", &node.clone(), || {
                    self.open_generated(caller, node, flags)
                })
                .map(Opened::Generated);
        }
        let node = self.node(ino)?;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if flags & libc::O_ACCMODE == libc::O_RDONLY
            && flags & libc::O_TRUNC != 0
            && node.io.is_executing()
        {
            // The kernel checks ETXTBSY for a read-only O_TRUNC open only after the daemon has
            // opened (and, with atomic O_TRUNC, truncated) the file: refuse before truncating
            // a running program. Write opens are refused by the kernel before they get here.
            return Err(errno(libc::ETXTBSY));
        }
        if writes && node.place.is_read_only() {
            let e = super::read_only(node.place);
            return Err(self.rule_refusal(caller, "open", &node, None, e));
        }
        // With passthrough the inode's shared descriptor (open already, or opened now) also
        // names it; the O_PATH descriptor is needed only without.
        let shared =
            if self.passthrough() {
                Some(self.shared.get_or_try_insert(ino, || {
                    self.passthrough_file(&node).map(BackingFile::new)
                })?)
            } else {
                None
            };
        let mut opath = None;
        let path = match &shared {
            Some(b) => self.node_path(&node, &b.file)?,
            None => self.node_path(&node, opath.insert(self.open_path(&node)?))?,
        };
        let access = if writes {
            clawfs_policy::Access::Write
        } else {
            clawfs_policy::Access::Read
        };
        let who = self.decide(caller, "open", access, &path)?;
        if writes {
            self.refuse_rewriting_an_index(caller, &who, ("open", &path), &node)?;
        }
        let charge = self.charge_descriptor(caller, "open", &path)?;
        // An open for writing adds nothing yet (each write, fallocate or truncation up is
        // checked against the quota as it comes): an agent over its quota may still open a
        // file to truncate or shrink it.
        if writes {
            if let Some(agent) = staged::identity_file_agent(&path) {
                let opath = match opath {
                    Some(fd) => fd,
                    None => self.open_path(&node)?,
                };
                let truncate = flags & libc::O_TRUNC != 0;
                let (fh, file) = self.open_staged(ino, &opath, agent, truncate, charge)?;
                return Ok(Opened::Backing(fh, file));
            }
        }
        if flags & libc::O_TRUNC != 0 {
            // What the file holds before the truncation is what the truncation gives back: its
            // charge is settled from there (a file not yet settled since the daemon met it
            // would otherwise start from its truncated size).
            let st = match (&shared, &opath) {
                (Some(b), _) => rustix::fs::fstat(&b.file)?,
                (None, Some(fd)) => rustix::fs::fstat(&**fd)?,
                (None, None) => rustix::fs::fstat(&*self.open_path(&node)?)?,
            };
            node.held.base(crate::held::cost_of(&st));
        }
        let backing = if let Some(shared) = shared {
            shared
        } else {
            // O_DIRECT is the kernel's business on the mount side; the daemon's own buffers
            // are not aligned for it.
            let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_DIRECT);
            let fd = node
                .handle
                .open(self.mount_fd(), flags | self.atime_flag(false))?;
            Arc::new(BackingFile::new(File::from(fd)))
        };
        // Signed files are served from the copy that was checked, through the daemon.
        let verified = match matches!(node.place.area(), Area::Specs | Area::Tools) && !writes {
            true => match self.verified_copy(&backing.file) {
                Ok(copy) => copy,
                // A refusal is recorded as one; a failure to copy (EFBIG, EIO) as a failure.
                Err(e @ FsError::Tampered(_)) => {
                    return Err(self.rule_refusal(caller, "open", &node, None, e))
                }
                Err(e) => return Err(e),
            },
            false => None,
        };
        let (backing, verified) = match verified {
            Some(copy) => (Arc::new(BackingFile::new(copy)), true),
            None => (backing, false),
        };
        if self.passthrough() && flags & libc::O_TRUNC != 0 {
            // The kernel passes O_TRUNC with the open (atomic O_TRUNC); the shared descriptor
            // was not opened with it.
            backing.file.set_len(0)?;
        }
        if flags & libc::O_TRUNC != 0 && caller.uid != 0 {
            // Truncated by the daemon (root): clear what a truncation by the caller clears.
            self.kill_suidgid(ino, &backing.file)?;
        }
        let writer = match writes {
            true => {
                let st = rustix::fs::fstat(&backing.file)?;
                let size_at_open = st.st_size as u64;
                node.held.base(crate::held::cost_of(&st));
                Some(WriteHandle {
                    metered: self.metered(&who),
                    who,
                    pid: caller.pid,
                    uid: caller.uid,
                    path,
                    size_at_open,
                })
            }
            false => None,
        };
        let prefer_cached = self.passthrough()
            && !writes
            && flags & libc::O_DIRECT == 0
            && backing.file.metadata()?.len() <= CACHED_MAX_SIZE;
        // Writes that the daemon must see: charged to a byte quota, or clearing setuid/setgid
        // bits (a passthrough write runs with the daemon's rights and would keep them).
        let through_daemon = writer.as_ref().is_some_and(|w| w.metered)
            || (writes && caller.uid != 0 && has_suidgid(&backing.file)?)
            || verified;
        let io = match through_daemon {
            true => self.count_daemon_open(&node)?,
            false => self.count_open(&node, prefer_cached, writes),
        };
        let writing = match &writer {
            None => None,
            Some(w) => {
                if !node.io.write_open(matches!(w.who, Identity::Agent(_))) {
                    if let Some((choice, mode)) = &io {
                        mode.close(*choice);
                    }
                    let denial = Denial {
                        rule: clawfs_policy::rule::PROTECTED,
                        kind: clawfs_policy::DenyKind::ReadOnly,
                        reason: format!("{} is sealed: git's config or index, checked when renamed into place, or a hook made of someone else's file; agents may not open it for writing", w.path),
                    };
                    self.refuse(caller, "open", &w.path, denial)?;
                }
                Some(Arc::clone(&node.io))
            }
        };
        let exec = (flags & FMODE_EXEC != 0).then(|| {
            node.io.exec_open();
            Arc::clone(&node.io)
        });
        node.held.opened();
        let (fh, file) = self.files.insert(OpenFile {
            ino,
            held: Arc::clone(&node.held),
            backing,
            writer,
            staged: None,
            io,
            exec,
            writing,
            charge,
        });
        Ok(Opened::Backing(fh, file))
    }

    /// How a new open of `node` is served, counted in the node's I/O mode; `None` without
    /// passthrough, where every open is served through the daemon.
    pub(super) fn count_open(
        &self,
        node: &Node,
        prefer_cached: bool,
        writes: bool,
    ) -> Option<(IoChoice, Arc<IoMode>)> {
        self.passthrough()
            .then(|| (node.io.open(prefer_cached, writes), Arc::clone(&node.io)))
    }

    /// How an open whose writes the daemon must see is served: through the daemon (never
    /// passthrough). Refused (EBUSY) while the file is open for passthrough elsewhere: the
    /// kernel cannot serve one inode both ways.
    pub(super) fn count_daemon_open(
        &self,
        node: &Node,
    ) -> FsResult<Option<(IoChoice, Arc<IoMode>)>> {
        if !self.passthrough() {
            return Ok(None);
        }
        let choice = node.io.open_cached().ok_or(FsError::Refused {
            errno: libc::EBUSY,
            why: "the file is open for passthrough elsewhere, and this open must go through the daemon (the kernel cannot serve one inode both ways)",
        })?;
        Ok(Some((choice, Arc::clone(&node.io))))
    }

    /// A read-write descriptor of `ino` for kernel passthrough, shared by every open of the
    /// inode. It carries no `O_APPEND`/`O_DIRECT`: the kernel applies each opener's own flags
    /// per request. Read-only areas, and files that cannot be opened for writing, get a
    /// read-only one.
    pub(super) fn passthrough_file(&self, node: &Node) -> FsResult<File> {
        let rw = if node.place.is_read_only() {
            Err(errno(libc::EROFS))
        } else {
            node.handle
                .open(self.mount_fd(), libc::O_RDWR | self.atime_flag(false))
                .map_err(FsError::from)
        };
        let fd = match rw {
            Ok(fd) => fd,
            Err(_) => node
                .handle
                .open(self.mount_fd(), libc::O_RDONLY | self.atime_flag(false))?,
        };
        Ok(File::from(fd))
    }

    /// Creates and opens a regular file.
    pub fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> FsResult<(Entry, Opened)> {
        self.audited(|| self.create_decided(caller, parent, name, mode, flags))
    }

    fn create_decided(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> FsResult<(Entry, Opened)> {
        if let Route::Generated(dir) = self.route(parent)? {
            return self.generated_call(caller, "create", &dir.clone(), || {
                self.create_generated(caller, dir, name)
            });
        }
        let made = self.begin_create(caller, "create", parent, name, (FileKind::File, 0))?;
        let charge = self.charge_descriptor(caller, "create", &made.path)?;
        let fd = {
            let _as = AsCaller::enter(caller)?;
            let flags = (flags & !libc::O_NOCTTY) | libc::O_CREAT | libc::O_CLOEXEC;
            // With passthrough the descriptor is the inode's shared backing file: read-write,
            // without the opener's append/direct flags (the kernel applies those per request).
            let shared =
                (flags & !(libc::O_ACCMODE | libc::O_APPEND | libc::O_DIRECT)) | libc::O_RDWR;
            let open = |flags: i32| {
                rustix::fs::openat(
                    &made.dir,
                    name,
                    rustix::fs::OFlags::from_bits_retain(flags as u32),
                    Mode::from_raw_mode(mode & 0o7777),
                )
            };
            // O_NOATIME is the owner's to ask: a racing creator's file is opened without.
            let noatime = self.atime_flag(false);
            match self.passthrough() {
                // An existing file (a racing creator) may not be writable by the caller.
                true => open(shared | noatime).or_else(|_| open(flags))?,
                false => open((flags & !libc::O_DIRECT) | noatime)
                    .or_else(|_| open(flags & !libc::O_DIRECT))?,
            }
        };
        let entry = self.entry_of_fd(fd.as_fd(), made.place, (parent, name))?;
        let ino = entry.attr.ino;
        self.created(&made, ino);
        let backing = match self.passthrough() {
            true => self.shared.get_or_try_insert(ino, || {
                let rw = rustix::fs::fcntl_getfl(&fd)?.contains(rustix::fs::OFlags::RDWR);
                match rw {
                    true => Ok::<_, FsError>(BackingFile::new(File::from(fd))),
                    false => Ok(BackingFile::new(self.passthrough_file(&self.node(ino)?)?)),
                }
            })?,
            false => Arc::new(BackingFile::new(File::from(fd))),
        };
        let node = self.node(ino)?;
        let Creating { dir, who, path, .. } = made;
        self.held_made((&who, caller.uid), parent, dir.as_fd(), name);
        node.held.base(0);
        let writer = WriteHandle {
            metered: self.metered(&who),
            who,
            pid: caller.pid,
            uid: caller.uid,
            path,
            size_at_open: 0,
        };
        let io = match writer.metered {
            true => self.count_daemon_open(&node)?,
            false => self.count_open(&node, false, true),
        };
        let writer = Some(writer);
        // A new inode: never sealed.
        node.io.write_open(false);
        node.held.opened();
        let (fh, file) = self.files.insert(OpenFile {
            ino,
            held: Arc::clone(&node.held),
            backing,
            writer,
            staged: None,
            io,
            exec: None,
            writing: Some(Arc::clone(&node.io)),
            charge,
        });
        Ok((entry, Opened::Backing(fh, file)))
    }

    /// The open file `fh` of the inode `ino`. The kernel names both, and a handle is good
    /// only for the inode it was opened on: a number that names no open file of `ino` (a
    /// generated file's handle, another file's) is refused, never taken for another file
    /// that someone else opened.
    pub(super) fn open_file(&self, ino: u64, fh: u64) -> FsResult<Arc<OpenFile>> {
        let file = self.files.get(fh)?;
        if file.ino != ino {
            return Err(FsError::UnknownHandle(fh));
        }
        Ok(file)
    }

    /// Refuses `op` on a generated file, which has no store file behind it (EOPNOTSUPP: the
    /// kernel then copies through reads and writes, which the generated file serves).
    fn not_generated(&self, ino: u64) -> FsResult<()> {
        match self.route(ino)? {
            Route::Generated(_) => Err(errno(libc::EOPNOTSUPP)),
            _ => Ok(()),
        }
    }

    /// Reads up to `size` bytes at `offset` (fewer only at end of file).
    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        if let Route::Generated(_) = self.route(ino)? {
            self.estop_tool_call(fh);
            return self.read_generated(fh, offset, size);
        }
        let file = self.open_file(ino, fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file
                .backing
                .file
                .read_at(&mut buf[done..], offset + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// Writes `data` at `offset` (appends when the file was opened `O_APPEND`).
    /// `kill_suidgid`: the kernel says the writer lacks `CAP_FSETID`, so a setuid/setgid file
    /// loses those bits (the daemon's own write, as root, would keep them).
    pub fn write(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
    ) -> FsResult<u32> {
        if let Route::Generated(_) = self.route(ino)? {
            return self.write_generated(fh, offset, data);
        }
        let file = self.open_file(ino, fh)?;
        // The write's right is the opener's: an agent's descriptor (handed to anyone) writes
        // nothing the daemon serves once a stop is in force.
        self.estop_check_opener(&file, "write")?;
        if let Some(w) = file.writer.as_ref().filter(|w| w.metered) {
            let end = offset.saturating_add(data.len() as u64);
            self.charge_growth(w, "write", end, &file)?;
        }
        if kill_suidgid {
            self.kill_suidgid(ino, &file.backing.file)?;
        }
        let n = file.backing.file.write_at(data, offset)?;
        if file.writer.as_ref().is_some_and(|w| w.metered) {
            self.settle_write(&file);
        }
        if let Some(staged) = &file.staged {
            staged.changed();
        }
        Ok(n as u32)
    }

    /// Flushes buffered state of `fh` to the store.
    pub fn fsync(&self, ino: u64, fh: u64, datasync: bool) -> FsResult<()> {
        if let Route::Generated(_) = self.route(ino)? {
            return Ok(());
        }
        let file = self.open_file(ino, fh)?;
        if datasync {
            file.backing.file.sync_data()?;
        } else {
            file.backing.file.sync_all()?;
        }
        Ok(())
    }

    /// A `close()` of a descriptor of `ino` (FLUSH): runs a two-file tool request, or
    /// validates and commits a staged identity file (its error is `close()`'s).
    pub fn flush(&self, caller: &Caller, ino: u64, fh: u64) -> FsResult<()> {
        self.audited(|| self.flush_decided(caller, ino, fh))
    }

    fn flush_decided(&self, caller: &Caller, ino: u64, fh: u64) -> FsResult<()> {
        if let Route::Generated(_) = self.route(ino)? {
            self.estop_tool_call(fh);
            return self.flush_generated(fh);
        }
        let file = self.open_file(ino, fh)?;
        if file.writer.is_some() && matches!(file.io, Some((IoChoice::Passthrough, _))) {
            // Writes through a mapping changed the backing file's times (and maybe its size)
            // without a word to the kernel, which may hold the attributes from before for the
            // attribute timeout: `make` deciding from a stale mtime builds wrong. Told before
            // the flush is answered, so before `close` (or the writer's exit) returns; the
            // release comes later, in the background.
            self.attributes_changed(file.ino);
        }
        self.commit_staged(caller, &file)
    }

    /// Closes `fh`.
    pub fn release(&self, ino: u64, fh: u64) -> FsResult<()> {
        if let Route::Generated(_) = self.route(ino)? {
            self.estop_tool_call(fh);
            return self.release_generated(fh);
        }
        self.open_file(ino, fh)?;
        let file = self.files.remove(fh).ok_or(FsError::UnknownHandle(fh))?;
        if let Some((choice, mode)) = &file.io {
            mode.close(*choice);
        }
        if let Some(mode) = &file.exec {
            mode.exec_close();
        }
        if let Some(mode) = &file.writing {
            mode.write_close();
        }
        if let Some(w) = &file.writer {
            let now = file.backing.file.metadata()?.len();
            let bytes = now.saturating_sub(w.size_at_open);
            self.record(
                clawfs_audit::AuditEvent::new(
                    audit_name(&w.who),
                    w.pid,
                    "close",
                    w.path.to_string(),
                )
                .bytes(bytes),
            );
            // Writes the daemon did not see (passthrough) are counted now.
            self.settle_write(&file);
            self.index_file(&w.path);
        }
        self.held_closed(&file.held);
        // Not in a store that hosts share: a descriptor kept open there keeps the network file
        // system's view of the file as it was (JuiceFS refreshes a file's length and data at
        // open, close-to-open), so another host's later writes would never show here.
        if self.passthrough() && file.staged.is_none() && !self.store.is_shared() {
            let mut recent = self
                .recent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            recent.put(file.ino, Arc::clone(&file.backing));
        }
        Ok(())
    }

    /// Clears the setuid bit of the backing `file` of `ino`, and its setgid bit where the group
    /// may execute, as a write by a caller without `CAP_FSETID` does; the kernel, which holds
    /// the mode from before and is not told by the write, is told.
    fn kill_suidgid(&self, ino: u64, file: &File) -> FsResult<()> {
        if drop_suidgid(file)? {
            self.attributes_changed(ino);
        }
        Ok(())
    }

    /// Allocates or punches space in `fh`. `kill_suidgid`: the caller is not root, so a
    /// setuid/setgid file loses those bits, as a local filesystem's `fallocate` (any mode) does
    /// for a caller without `CAP_FSETID` (FUSE does not say whether the caller has it; the daemon
    /// itself, as root, would keep them).
    pub fn fallocate(
        &self,
        (ino, fh): (u64, u64),
        offset: u64,
        len: u64,
        mode: i32,
        kill_suidgid: bool,
    ) -> FsResult<()> {
        self.not_generated(ino)?;
        let file = self.open_file(ino, fh)?;
        if let Some(w) = file.writer.as_ref().filter(|w| w.metered) {
            if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                // Frees space.
            } else if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
                // Space past the size, which a later write would otherwise fill for free.
                let owner = rustix::fs::fstat(&file.backing.file)?.st_uid;
                self.charge(w, "fallocate", len, owner)?;
            } else {
                self.charge_growth(w, "fallocate", offset.saturating_add(len), &file)?;
            }
        }
        if kill_suidgid {
            self.kill_suidgid(file.ino, &file.backing.file)?;
        }
        rustix::fs::fallocate(
            &file.backing.file,
            rustix::fs::FallocateFlags::from_bits_retain(mode as u32),
            offset,
            len,
        )?;
        if let Some(staged) = &file.staged {
            staged.changed();
        }
        if file.writer.is_some() {
            self.settle_write(&file);
        }
        Ok(())
    }

    /// Finds data or holes (`SEEK_DATA`/`SEEK_HOLE`), or computes a plain seek. A negative
    /// offset is EINVAL for a plain seek and ENXIO (no data or hole there) for the others, as on
    /// a local filesystem.
    pub fn lseek(&self, ino: u64, fh: u64, offset: i64, whence: i32) -> FsResult<i64> {
        self.not_generated(ino)?;
        let file = self.open_file(ino, fh)?;
        let off = |negative| u64::try_from(offset).map_err(|_| errno(negative));
        let pos = match whence {
            libc::SEEK_SET => rustix::fs::SeekFrom::Start(off(libc::EINVAL)?),
            libc::SEEK_END => rustix::fs::SeekFrom::End(offset),
            libc::SEEK_DATA => rustix::fs::SeekFrom::Data(off(libc::ENXIO)?),
            libc::SEEK_HOLE => rustix::fs::SeekFrom::Hole(off(libc::ENXIO)?),
            _ => return Err(errno(libc::EINVAL)),
        };
        Ok(rustix::fs::seek(&file.backing.file, pos)? as i64)
    }

    /// Copies a range between two open files inside the store.
    pub fn copy_file_range(
        &self,
        (ino_in, fh_in, offset_in): (u64, u64, u64),
        (ino_out, fh_out, offset_out): (u64, u64, u64),
        len: u64,
    ) -> FsResult<u32> {
        self.not_generated(ino_in)?;
        self.not_generated(ino_out)?;
        let (src, dst) = (
            self.open_file(ino_in, fh_in)?,
            self.open_file(ino_out, fh_out)?,
        );
        if let Some(w) = dst.writer.as_ref().filter(|w| w.metered) {
            self.charge_growth(w, "copy_file_range", offset_out.saturating_add(len), &dst)?;
        }
        let (mut oi, mut oo) = (offset_in, offset_out);
        let n = rustix::fs::copy_file_range(
            &src.backing.file,
            Some(&mut oi),
            &dst.backing.file,
            Some(&mut oo),
            len.min(u32::MAX as u64) as usize,
        )?;
        if let Some(staged) = &dst.staged {
            staged.changed();
        }
        if dst.writer.is_some() {
            self.settle_write(&dst);
        }
        Ok(n as u32)
    }
}

/// Whether a file has bits a write by someone without `CAP_FSETID` clears.
pub(super) fn has_suidgid(file: &File) -> FsResult<bool> {
    let mode = rustix::fs::fstat(file)?.st_mode;
    Ok(mode & libc::S_ISUID != 0
        || mode & (libc::S_ISGID | libc::S_IXGRP) == (libc::S_ISGID | libc::S_IXGRP))
}

/// Clears setuid, and setgid on a group-executable file, as the kernel does when someone
/// without `CAP_FSETID` writes or truncates a file.
pub(super) fn drop_suidgid(file: &File) -> FsResult<bool> {
    let mode = rustix::fs::fstat(file)?.st_mode & 0o7777;
    let mut kept = mode & !libc::S_ISUID;
    if mode & libc::S_IXGRP != 0 {
        kept &= !libc::S_ISGID;
    }
    if kept != mode {
        rustix::fs::fchmod(file, Mode::from_raw_mode(kept))?;
    }
    Ok(kept != mode)
}
