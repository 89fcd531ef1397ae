//! File operations under the tools: bounded reads, streaming hashes, atomic replacement
//! (temp + fsync + rename + directory fsync), timestamped backups, and time formatting. All of
//! them work on descriptors opened beneath the root (see `beneath.rs`), never on path strings.

use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::beneath;
use crate::error::{ToolError, ToolResult};
use crate::paths::{show, Slot};
use crate::ToolRoot;

/// Reads the whole of the opened file `f` (at `rel`), at most `max` bytes.
pub(crate) fn read_limited(f: &File, rel: &str, max: u64) -> ToolResult<Vec<u8>> {
    let meta = f
        .metadata()
        .map_err(|e| ToolError::io(format!("reading '{}'", show(rel)), e))?;
    if !meta.is_file() {
        return Err(ToolError::NotAFile(format!(
            "'{}' is not a regular file.",
            show(rel)
        )));
    }
    let len = meta.len();
    if len > max {
        return Err(ToolError::TooLarge(format!(
            "'{}' is {len} bytes; text tools load at most {max} bytes. Use info, then outline/search with read_range on a smaller file, or split the file.",
            show(rel)
        )));
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| ToolError::io(format!("reading '{}'", show(rel)), e))?;
    if buf.len() as u64 > max {
        return Err(ToolError::TooLarge(format!(
            "'{}' grew beyond {max} bytes while being read.",
            show(rel)
        )));
    }
    Ok(buf)
}

/// Lowercase hex sha256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The SHA-256 (hex) of the opened file `f`, read by offset (its position stays where it was),
/// if it is at most `limit` bytes: the hash a later edit of it is checked against, for files
/// the editing tools take.
pub(crate) fn sha256_of(f: &File, limit: u64) -> Option<String> {
    use std::os::unix::fs::FileExt;
    if f.metadata().ok()?.len() > limit {
        return None;
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut at = 0u64;
    loop {
        match f.read_at(&mut buf, at) {
            Ok(0) => break,
            Ok(n) => {
                h.update(&buf[..n]);
                at += n as u64;
                if at > limit {
                    return None;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    Some(hex::encode(h.finalize()))
}

/// Streams the opened file `f` once: `(bytes, lines, sha256)`. Lines count like an editor: a
/// last line without a trailing newline counts.
pub(crate) fn stream_info(mut f: &File, rel: &str) -> ToolResult<(u64, u64, String)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let (mut bytes, mut newlines, mut last) = (0u64, 0u64, b'\n');
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ToolError::io(format!("reading '{}'", show(rel)), e)),
        };
        h.update(&buf[..n]);
        bytes += n as u64;
        newlines += crate::stream::count_newlines(&buf[..n]) as u64;
        last = buf[n - 1];
    }
    let lines = newlines + u64::from(bytes > 0 && last != b'\n');
    Ok((bytes, lines, hex::encode(h.finalize())))
}

/// The extended attribute keeping a file's creation time across the replacements of tool
/// edits (nanoseconds since the epoch, decimal): each edit makes a new file, which keeps the
/// old one's attributes.
pub(crate) const CREATED_XATTR: &str = "user.clawfs.created";

/// Replaces (or creates) `slot` (the path `rel`, `abs`) with `bytes` atomically: a reader sees
/// the old or the new content, never a mix, and after return the new content is durable. The
/// temporary file has an unpredictable name and is created exclusively, so nobody can plant a
/// file or link under it. A replaced file (`old`: its status, and the file opened for reading
/// when the caller may) keeps its owner, group, mode, extended attributes, ACL and creation
/// time.
pub(crate) fn atomic_write(
    root: &ToolRoot,
    slot: &Slot,
    rel: &str,
    abs: &Path,
    bytes: &[u8],
    old: Option<(&Metadata, Option<&File>)>,
) -> ToolResult<()> {
    root.charge_growth(write_growth(bytes, old.map(|(m, _)| m)))?;
    write_charged(root, slot, rel, abs, bytes, old)
}

/// What writing `bytes` over a file of status `old` (or a new one) adds, and for whom: the
/// growth of an existing file is its owner's.
pub(crate) fn write_growth(bytes: &[u8], old: Option<&Metadata>) -> crate::Growth {
    use std::os::unix::fs::MetadataExt;
    crate::Growth {
        bytes: (bytes.len() as u64).saturating_sub(old.map_or(0, |m| m.len())),
        files: u64::from(old.is_none()),
        owner: old.map(|m| m.uid()),
    }
}

/// [`atomic_write`] once its growth was charged ([`write_growth`]), before a backup is kept.
pub(crate) fn write_charged(
    root: &ToolRoot,
    slot: &Slot,
    rel: &str,
    abs: &Path,
    bytes: &[u8],
    old: Option<(&Metadata, Option<&File>)>,
) -> ToolResult<()> {
    let action = format!("writing '{}'", show(rel));
    let ctx = |e| ToolError::io(action.clone(), e);
    let denied_by = |e, file| write_refused(root, slot, rel, e, file);
    match old {
        // A new file takes a free name only: one made meanwhile (by someone else, through the
        // mount) is never replaced unseen.
        None => {
            let made = root.making(&slot.dir);
            beneath::write_new(
                &slot.dir,
                &slot.name,
                bytes,
                beneath::FileMode::mode(root.file_mode()),
            )
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => ToolError::Exists(format!(
                    "'{}' was made by someone else while this call ran; nothing was written. Read it, then write again.",
                    show(rel)
                )),
                _ => denied_by(e, None),
            })?;
            made.done(&slot.name);
        }
        // A file with other names (hard links) is rewritten in place: a replacement would
        // leave the other names on the old content.
        Some((m, _)) if std::os::unix::fs::MetadataExt::nlink(m) > 1 => {
            write_in_place(root, slot, bytes).map_err(|e| denied_by(e, Some(m)))?
        }
        Some((m, Some(f))) if owned_by_caller(&slot.dir, m).map_err(ctx)? => {
            let mode = std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777;
            let made = root.making(&slot.dir);
            root.removing(&slot.dir, &slot.name, || {
                beneath::write_atomic_with(
                    &slot.dir,
                    &slot.name,
                    bytes,
                    beneath::FileMode::mode(mode),
                    |new| carry_attributes(f, m, new).and_then(|()| root.replacing(f, new)),
                )
            })
            .map_err(ctx)?;
            made.done(&slot.name);
        }
        // A replacement would belong to the caller: a file someone else owns (or whose group
        // differs), or one whose attributes the caller cannot read to copy, is rewritten in
        // place instead, which needs write permission on the file itself and keeps everything
        // about it, as an editor saving it would.
        Some((m, _)) => write_in_place(root, slot, bytes).map_err(|e| denied_by(e, Some(m)))?,
    }
    root.changed(abs);
    Ok(())
}

/// The error for writing `rel` (in `slot`), refused with `e`: when by the permissions of the
/// file itself (`file`, rewritten in place) or of its folder (a new file), it says whose they
/// are and what would allow the write.
fn write_refused(
    root: &ToolRoot,
    slot: &Slot,
    rel: &str,
    e: std::io::Error,
    file: Option<&Metadata>,
) -> ToolError {
    let action = format!("writing '{}'", show(rel));
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return ToolError::io(action, e);
    }
    let Ok(folder) = slot.dir.metadata() else {
        return ToolError::io(action, e);
    };
    let like = Some(std::os::unix::fs::MetadataExt::gid(&folder));
    match file {
        Some(m) => root.refused_by_mode(&action, ("the file", &root.shown_path(rel)), m, like),
        None => {
            let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
            root.refused_by_mode(
                &action,
                ("its folder", &root.shown_path(dir)),
                &folder,
                like,
            )
        }
    }
}

/// Refuses, before anything is written (a backup first of all), an edit of the existing file
/// `rel` (status `m`) that [`atomic_write`] would be refused: the caller may write neither the
/// file itself nor, owning it, a replacement in its folder.
pub(crate) fn may_rewrite(root: &ToolRoot, slot: &Slot, rel: &str, m: &Metadata) -> ToolResult<()> {
    use rustix::fs::{Access, AtFlags};
    let may = |at: &str, how| {
        rustix::fs::accessat(
            &slot.dir,
            at,
            how,
            AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok()
    };
    if may(&slot.name, Access::WRITE_OK)
        || (may(".", Access::WRITE_OK | Access::EXEC_OK)
            && std::os::unix::fs::MetadataExt::nlink(m) <= 1
            && owned_by_caller(&slot.dir, m).unwrap_or(false))
    {
        return Ok(());
    }
    Err(write_refused(
        root,
        slot,
        rel,
        std::io::ErrorKind::PermissionDenied.into(),
        Some(m),
    ))
}

/// Copies to `new` what a replacement must keep of `old` (status `m`): its `user.` attributes
/// and ACL, and its creation time (in [`CREATED_XATTR`], unless it has one already).
fn carry_attributes(old: &File, m: &Metadata, new: &File) -> std::io::Result<()> {
    use xattr::FileExt;
    let unsupported = |e: &std::io::Error| e.raw_os_error() == Some(libc_enotsup());
    let names = match old.list_xattr() {
        Ok(names) => names.collect::<Vec<_>>(),
        Err(e) if unsupported(&e) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut had_created = false;
    for name in names {
        let text = name.to_string_lossy();
        if !(text.starts_with("user.") || text == "system.posix_acl_access") {
            continue;
        }
        had_created |= text == CREATED_XATTR;
        if let Some(value) = old.get_xattr(&name)? {
            new.set_xattr(&name, &value)?;
        }
    }
    if !had_created {
        if let Ok(born) = m.created() {
            let ns = born
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            match new.set_xattr(CREATED_XATTR, ns.to_string().as_bytes()) {
                Err(e) if unsupported(&e) => {}
                r => r?,
            }
        }
    }
    Ok(())
}

fn libc_enotsup() -> i32 {
    rustix::io::Errno::NOTSUP.raw_os_error()
}

/// When the file `f` (status `m`) was created: kept across tool edits in [`CREATED_XATTR`],
/// else the filesystem's birth time.
pub(crate) fn created_time(f: &File, m: &Metadata) -> Option<SystemTime> {
    use xattr::FileExt;
    f.get_xattr(CREATED_XATTR)
        .ok()
        .flatten()
        .and_then(|v| String::from_utf8(v).ok()?.trim().parse::<u128>().ok())
        .and_then(|ns| {
            let d = std::time::Duration::new(
                u64::try_from(ns / 1_000_000_000).ok()?,
                (ns % 1_000_000_000) as u32,
            );
            SystemTime::UNIX_EPOCH.checked_add(d)
        })
        .or_else(|| m.created().ok())
}

/// Whether a file the caller creates in `dir` gets the owner and group of `m` (a replacement
/// would not change them). Learned from the caller's own new file: the credentials in force.
fn owned_by_caller(dir: &File, m: &Metadata) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (name, probe) = match beneath::create_temp(dir, 0o600) {
        Ok(created) => created,
        // A folder the caller may not add to: a replacement is impossible anyway.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(false),
        Err(e) => return Err(e),
    };
    let st = probe.metadata();
    let _ = beneath::unlink(dir, &name);
    let st = st?;
    Ok(st.uid() == m.uid() && st.gid() == m.gid())
}

/// Rewrites the existing file of `slot` through a descriptor opened for writing as the caller
/// (refused when it may not write the file), then fsyncs it.
fn write_in_place(root: &ToolRoot, slot: &Slot, bytes: &[u8]) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        &slot.dir,
        slot.name.as_str(),
        rustix::fs::OFlags::WRONLY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let f = File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(rustix::io::Errno::INVAL.into());
    }
    root.rewriting(&f, || {
        let mut w = &f;
        w.set_len(0)?;
        w.write_all(bytes)?;
        w.sync_all()
    })
}

/// `YYYYmmdd-HHMMSS` in UTC, for backup and trash names.
pub(crate) fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string()
}

/// RFC 3339 UTC of a system time.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// Shows a path under the backup or trash directory: workspace-relative when inside the root
/// (then under a protected name), else relative to its own directory with a label.
pub(crate) fn show_store_path(root: &ToolRoot, base: &Path, p: &Path, label: &str) -> String {
    if let Ok(r) = p.strip_prefix(root.root()) {
        return r.to_string_lossy().into_owned();
    }
    match p.strip_prefix(base) {
        Ok(r) => format!("<{label}>/{}", r.to_string_lossy()),
        Err(_) => p.to_string_lossy().into_owned(),
    }
}

/// Writes a timestamped copy of `bytes` (the content of the file `rel`, whose status is
/// `like`, before an edit) into the backup directory, mirroring the file's workspace path.
/// Returns the backup's shown path.
///
/// With an elevation (the daemon), the backup belongs to the caller (who is charged for it)
/// with the file's group and mode, and each folder it makes is the caller's too (charged),
/// with the group and mode of the file's folder at that place: whoever could read the file can
/// read its backup, and every folder backups pin is someone's quota. Without,
/// it is the caller's, 0600 in 0700 folders. At most the limits' `backups_kept` are kept per
/// file, none older than `backup_max_age_days` but the newest.
pub(crate) fn backup(
    root: &ToolRoot,
    rel: &str,
    bytes: &[u8],
    like: &Metadata,
) -> ToolResult<String> {
    let ctx = |e| ToolError::io(format!("writing the backup of '{}'", show(rel)), e);
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let name = comps.pop().unwrap_or("file");
    // A backup is bytes the caller makes the store keep: charged like a write, with the
    // folders it needs.
    let folders = match root.store_dir(&root.backup_dir, None) {
        Ok(dir) => beneath::missing_dirs(&dir, &comps).map_err(ctx)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => comps.len() + 1,
        Err(e) => return Err(ctx(e)),
    } as u64;
    root.charge(
        bytes.len() as u64 + folders * crate::FOLDER_BYTES,
        1 + folders,
    )?;
    let cand = root
        .elevated(|mirror| write_backup(root, &comps, name, bytes, mirror.then_some(like)))
        .map_err(ctx)?;
    let shown = root.backup_dir.join(comps.join("/")).join(cand);
    Ok(show_store_path(root, &root.backup_dir, &shown, "backups"))
}

/// [`backup`]'s writing: the folders, then a new file under a free timestamped name. `like`
/// (mirroring) gives the file's status; its folders' are read beneath the root.
fn write_backup(
    root: &ToolRoot,
    comps: &[&str],
    name: &str,
    bytes: &[u8],
    like: Option<&Metadata>,
) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let private = 0o700;
    let mut dir = root.store_dir(&root.backup_dir, Some(private))?;
    for (i, c) in comps.iter().enumerate() {
        let making = root.making(&dir);
        let made = match beneath::mkdir(&dir, c, private) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e),
        };
        let next = beneath::open(&dir, c, beneath::DIR_READ)?;
        if let (true, Some(m)) = (made, like) {
            // The group and mode of the file's folder at this place, and the editor's whose
            // backup made it, who is charged for it: backups cannot pin folders nobody pays
            // for (a deep path's backup, its file moved away, would otherwise hold them).
            let orig = beneath::open(&root.root_fd, &comps[..=i].join("/"), beneath::DIR_PATH)?
                .metadata()?;
            let owner = root.caller.as_ref().map_or(m.uid(), |c| c.uid);
            take_status(&next, owner, orig.gid(), orig.mode())?;
        }
        if made {
            making.done(c);
        }
        dir = next;
    }
    let stamped = backup_name(name, &stamp());
    // After the newest of this second: a name freed by pruning must not be taken again, or
    // the newest backup would sort (and be pruned) as the oldest.
    let mut n = backups_of(&dir, name)
        .iter()
        .filter_map(|b| match b.strip_prefix(&stamped)? {
            "" => Some(1),
            tail => tail.strip_prefix('-')?.parse::<u32>().ok(),
        })
        .max()
        .map_or(1, |last| last + 1);
    let made = root.making(&dir);
    loop {
        let cand = if n == 1 {
            stamped.clone()
        } else {
            format!("{stamped}-{n}")
        };
        match beneath::create(&dir, &cand, 0o600) {
            Ok(mut f) => {
                f.write_all(bytes)?;
                if let Some(m) = like {
                    // The caller's, who keeps it and is charged for it; the file's group
                    // and mode, so those who could read the file can read it.
                    let owner = root.caller.as_ref().map_or(m.uid(), |c| c.uid);
                    take_status(&f, owner, m.gid(), m.mode())?;
                }
                f.sync_all()?;
                made.done(&cand);
                prune_backups(root, &dir, name, &cand);
                return Ok(cand);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => n += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Removes the backups of the file `name` in the backup folder `dir` past the newest
/// `backups_kept`, and those older than `backup_max_age_days` (the workspace's limits; the
/// newest, `written`, always stays): an edit loop keeps a bounded history, not one copy per
/// edit for ever. Each editor's own: the count is of the backups owned as `written` is, so
/// another editor's edits never push one's history out.
fn prune_backups(root: &ToolRoot, dir: &File, name: &str, written: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(owner) = beneath::lstat(dir, written).map(|m| m.uid()) else {
        return;
    };
    let ours: Vec<String> = backups_of(dir, name)
        .into_iter()
        .filter(|b| beneath::lstat(dir, b).is_ok_and(|m| m.uid() == owner))
        .collect();
    prune_owned(root, dir, &ours, true);
}

/// Removes, of one editor's backups `ours` of one file (oldest first) in `dir`, those past the
/// newest `backups_kept` and those older than `backup_max_age_days`, but the newest while
/// `keep_newest` (the file is still there). Returns how many are left.
fn prune_owned(root: &ToolRoot, dir: &File, ours: &[String], keep_newest: bool) -> usize {
    let limits = root.limits();
    let surplus = ours.len().saturating_sub(limits.backups_kept.max(1));
    let days = i64::try_from(limits.backup_max_age_days).unwrap_or(i64::MAX);
    let cutoff = chrono::Duration::try_days(days)
        .and_then(|age| chrono::Utc::now().checked_sub_signed(age))
        .map(|t| t.format("%Y%m%d-%H%M%S").to_string());
    let newest = ours.len().saturating_sub(1);
    let mut left = 0;
    for (i, old) in ours.iter().enumerate() {
        let aged = cutoff.as_deref().is_some_and(|c| {
            (i < newest || !keep_newest) && backup_parts(old).is_some_and(|(_, s, _)| s < c)
        });
        let gone = (i < surplus || aged)
            && root
                .removing(dir, old, || beneath::unlink(dir, old))
                .is_ok();
        if !gone {
            left += 1;
        }
    }
    left
}

/// How deep the backup folders are walked: as deep as a workspace path can go.
const SWEEP_DEPTH: usize = 2048;

/// A mirror folder left empty is removed only once this old: a backup being written may have
/// just made it.
const SWEEP_FOLDER_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Ages out the workspace's backups, all files' at once: past the newest `backups_kept` of
/// each file and editor, and older than `backup_max_age_days`. The newest of a file still
/// there stays; a file that is gone (removed with `rm` through the mount, moved away) keeps
/// its history only until it ages out, then gives it back, so that nobody is charged for
/// copies of a file that no edit will ever prune again. Mirror folders left empty go too.
/// With the daemon's credentials where backups are written so.
pub fn sweep_backups(root: &ToolRoot) -> std::io::Result<()> {
    root.elevated(|_| {
        let backups = match root.store_dir(&root.backup_dir, None) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let live = beneath::open(&root.root_fd, "", beneath::DIR_READ).ok();
        sweep_folder(root, &backups, live.as_ref(), 0).map(|_| ())
    })
}

/// [`sweep_backups`] in the backup folder `dir`, whose files' folder in the workspace is
/// `live` (none if it is gone). Returns whether `dir` holds nothing any more.
fn sweep_folder(
    root: &ToolRoot,
    dir: &File,
    live: Option<&File>,
    depth: usize,
) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    // Each file's backups by editor, oldest first.
    let mut groups: std::collections::BTreeMap<(String, u32), Vec<Stamped>> = Default::default();
    let mut left = 0;
    for name in names_in(dir)? {
        let Some(name) = name.to_str().map(str::to_string) else {
            left += 1;
            continue;
        };
        let Ok(meta) = beneath::lstat(dir, &name) else {
            continue;
        };
        if meta.is_dir() && depth < SWEEP_DEPTH {
            let sub = beneath::open(dir, &name, beneath::DIR_READ)?;
            let live_sub = live.and_then(|d| beneath::open(d, &name, beneath::DIR_READ).ok());
            let settled = meta
                .modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= SWEEP_FOLDER_AGE);
            let emptied = sweep_folder(root, &sub, live_sub.as_ref(), depth + 1)?
                && settled
                && root
                    .removing(dir, &name, || beneath::rmdir(dir, &name))
                    .is_ok();
            if !emptied {
                left += 1;
            }
            continue;
        }
        match backup_parts(&name).filter(|_| meta.is_file()) {
            Some((head, stamp, n)) => groups
                .entry((head.to_string(), meta.uid()))
                .or_default()
                .push((stamp.to_string(), n, name.clone())),
            None => left += 1,
        }
    }
    if groups.is_empty() {
        return Ok(left == 0);
    }
    // The backup names' heads (`<name>.bak.`) of the regular files there now: read only where
    // there are backups to judge.
    let heads: std::collections::HashSet<String> = live
        .and_then(|d| beneath::list(d).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| live.is_some_and(|d| beneath::lstat(d, n).is_ok_and(|m| m.is_file())))
        .map(|n| backup_name(&n, ""))
        .collect();
    for ((head, _), mut group) in groups {
        group.sort();
        let ours: Vec<String> = group.into_iter().map(|(_, _, b)| b).collect();
        left += prune_owned(root, dir, &ours, heads.contains(&head));
    }
    Ok(left == 0)
}

/// A backup by its stamp and number within that second (the order it was made in), and its
/// name.
type Stamped = (String, u32, String);

/// A backup's name taken apart: its head (`<name>.bak.`, or a cut name's `.lbak.`), its
/// stamp (`YYYYmmdd-HHMMSS`), and its number within that second.
fn backup_parts(backup: &str) -> Option<(&str, &str, u32)> {
    if let Some((head, stamp)) = split_stamp(backup) {
        return Some((head, stamp, 1));
    }
    let (rest, n) = backup.rsplit_once('-')?;
    let n = n
        .parse()
        .ok()
        .filter(|_| n.bytes().all(|b| b.is_ascii_digit()))?;
    let (head, stamp) = split_stamp(rest)?;
    Some((head, stamp, n))
}

/// `<head><stamp>` taken apart, when `head` ends as a backup's does.
fn split_stamp(s: &str) -> Option<(&str, &str)> {
    let at = s.len().checked_sub(15)?;
    let (head, stamp) = (s.get(..at)?, s.get(at..)?);
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let stamped = stamp.as_bytes()[8] == b'-' && digits(&stamp[..8]) && digits(&stamp[9..]);
    let backup = head.ends_with(".bak.") || head.ends_with(".lbak.");
    (stamped && backup).then_some((head, stamp))
}

/// The stamp (`YYYYmmdd-HHMMSS`) of the backup `backup` of the file `name`.
pub(crate) fn backup_stamp<'a>(backup: &'a str, name: &str) -> Option<&'a str> {
    backup_parts(backup)
        .filter(|(head, _, _)| *head == backup_name(name, ""))
        .map(|(_, stamp, _)| stamp)
}

/// The backups of the file `name` in the backup folder `dir`, oldest first: regular files
/// only (a folder of that name is the mirror of a folder someone made, not a backup).
pub(crate) fn backups_of(dir: &File, name: &str) -> Vec<String> {
    let head = backup_name(name, "");
    let Ok(entries) = beneath::list(dir) else {
        return vec![];
    };
    // By stamp, then by number.
    let mut ours: Vec<Stamped> = entries
        .into_iter()
        .filter_map(|e| {
            let (h, stamp, n) = backup_parts(&e)?;
            (h == head).then(|| (stamp.to_string(), n, e.clone()))
        })
        .filter(|(_, _, e)| beneath::lstat(dir, e).is_ok_and(|m| m.file_type().is_file()))
        .collect();
    ours.sort();
    ours.into_iter().map(|(_, _, e)| e).collect()
}

/// Removes the caller's backups of `rel` (a file's, or those kept under a folder) once nothing
/// is at `rel` any more: emptying a deleted item from the trash gives its history back too.
/// Backups other editors keep are theirs (and at most `backups_kept` per file). With the
/// daemon's credentials where backups are written so; the caller could remove the item.
pub(crate) fn drop_backups(root: &ToolRoot, rel: &str, folder: bool) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match beneath::open(&root.root_fd, rel, beneath::ENTRY) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        // There, or not known to be gone.
        _ => return Ok(()),
    }
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let Some(name) = comps.pop() else {
        return Ok(());
    };
    let caller = root.caller.as_ref().map(|c| c.uid);
    let theirs = |uid: u32| caller.is_some_and(|c| c != uid);
    root.elevated(|_| {
        let backups = match root.store_dir(&root.backup_dir, None) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let dir = match beneath::open(&backups, &comps.join("/"), beneath::DIR_READ) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if !folder {
            for old in backups_of(&dir, name) {
                if beneath::lstat(&dir, &old).is_ok_and(|m| !theirs(m.uid())) {
                    root.removing(&dir, &old, || beneath::unlink(&dir, &old))?;
                }
            }
            drop_empty_mirrors(root, &backups, &comps);
            return Ok(());
        }
        let mirror = match beneath::open(&dir, name, beneath::DIR_READ) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        // The folders go once empty; others' backups keep theirs.
        let keep = |st: &rustix::fs::Stat| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
                && theirs(st.st_uid)
        };
        if remove_tree(root, &mirror, &keep, &mut |_| {})? {
            root.removing(&dir, name, || beneath::rmdir(&dir, name))?;
        }
        Ok(())
    })
}

/// Removes the mirror folders of `comps` under the backup folder `backups` that hold nothing
/// any more, deepest first, stopping at the first that still holds something: a history
/// given back leaves no folders behind, which no one is charged for.
fn drop_empty_mirrors(root: &ToolRoot, backups: &File, comps: &[&str]) {
    for depth in (1..=comps.len()).rev() {
        let Ok(parent) = beneath::open(backups, &comps[..depth - 1].join("/"), beneath::DIR_READ)
        else {
            return;
        };
        let name = comps[depth - 1];
        if root
            .removing(&parent, name, || beneath::rmdir(&parent, name))
            .is_err()
        {
            return;
        }
    }
}

/// The names in the folder `dir`, whatever their bytes (without `.` and `..`).
fn names_in(dir: &File) -> std::io::Result<Vec<OsString>> {
    let fd = beneath::open(dir, "", beneath::DIR_READ)?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&fd)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsString::from_vec(name.to_vec()));
        }
    }
    Ok(out)
}

/// Removes what is in the folder `top`, depth first, by descriptor (a symlink is removed,
/// never followed; any name, UTF-8 or not), except what `keep` keeps and the folders left
/// holding it; tells the ledger of each removal and `removed` of each inode's status.
/// Returns whether `top` is empty now.
pub(crate) fn remove_tree(
    root: &ToolRoot,
    top: &File,
    keep: &dyn Fn(&rustix::fs::Stat) -> bool,
    removed: &mut dyn FnMut(&rustix::fs::Stat),
) -> std::io::Result<bool> {
    use rustix::fs::{AtFlags, FileType};
    struct Level {
        dir: File,
        names: Vec<OsString>,
        /// Its name in the level above, and status (none for `top`).
        name: OsString,
        st: Option<rustix::fs::Stat>,
        /// Something in it stays.
        kept: bool,
    }
    let mut stack = vec![Level {
        names: names_in(top)?,
        dir: beneath::open(top, "", beneath::DIR_READ)?,
        name: OsString::new(),
        st: None,
        kept: false,
    }];
    loop {
        let level = stack.last_mut().expect("the top stays until the end");
        let Some(name) = level.names.pop() else {
            let done = stack.pop().expect("a level");
            let Some(parent) = stack.last_mut() else {
                return Ok(!done.kept);
            };
            match (done.kept, done.st) {
                (false, Some(st)) if !keep(&st) => {
                    let d = &parent.dir;
                    root.removing(d, &done.name, || {
                        Ok(rustix::fs::unlinkat(d, &done.name, AtFlags::REMOVEDIR)?)
                    })?;
                    removed(&st);
                }
                _ => parent.kept = true,
            }
            continue;
        };
        let st = rustix::fs::statat(&level.dir, &name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let dir = beneath::open_subdir(&level.dir, &name)?;
            stack.push(Level {
                names: names_in(&dir)?,
                dir,
                name,
                st: Some(st),
                kept: false,
            });
        } else if keep(&st) {
            level.kept = true;
        } else {
            let d = &level.dir;
            root.removing(d, &name, || {
                Ok(rustix::fs::unlinkat(d, &name, AtFlags::empty())?)
            })?;
            removed(&st);
        }
    }
}

/// `<name>.bak.<stamp>`, within the filesystem's 255 bytes: a longer name is cut (on a
/// character boundary), told apart by a hash of the whole name, and marked `.lbak.`, which
/// no backup of a short name has (a short name `N` gives `N.bak.`, so a file named like a
/// cut name never shares its backups).
fn backup_name(name: &str, stamp: &str) -> String {
    const ROOM: usize = 255 - ".lbak.".len() - "YYYYmmdd-HHMMSS-NNNNN".len();
    if name.len() <= ROOM {
        return format!("{name}.bak.{stamp}");
    }
    let mut cut = ROOM - 9;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let hash = &sha256_hex(name.as_bytes())[..8];
    format!("{}~{hash}.lbak.{stamp}", &name[..cut])
}

/// Gives the open `f` an owner, group and permission bits (set-id bits dropped).
fn take_status(f: &File, uid: u32, gid: u32, mode: u32) -> std::io::Result<()> {
    rustix::fs::fchown(
        f,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    )?;
    rustix::fs::fchmod(f, rustix::fs::Mode::from_raw_mode(mode & 0o1777))?;
    Ok(())
}
