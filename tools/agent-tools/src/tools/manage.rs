//! Managing tools: move, delete (into the trash), restore, list_trash, empty_trash,
//! create_folder, get_file_info.
//!
//! Trash layout: `<trash_dir>/<trash_id>/item` is the deleted entry itself (renamed, so a delete is
//! atomic and cheap) and `<trash_dir>/<trash_id>/meta.json` records where it came from. A trash id
//! is `YYYYmmdd-HHMMSS-<hex>`: sortable by time, and only `[0-9A-Za-z-]`, so it can never name a
//! path outside the trash.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::read::PathArgs;
use super::walk::{walk, Step};
use super::EntryType;
use crate::access::Access;
use crate::beneath::{self, DIR_PATH, FILE_READ};
use crate::error::{ToolError, ToolResult};
use crate::fsops::{drop_backups, remove_tree, rfc3339, show_store_path, stamp};
use crate::limits::{MAX_WALK_ENTRIES, TRASH_LIST_MAX};
use crate::paths::{show, Lookup, Slot};
use crate::ToolRoot;

/// The folder holding an existing entry, opened beneath the root.
fn slot_of(root: &ToolRoot, rel: &str) -> ToolResult<Slot> {
    root.slot(rel, false)?.ok_or_else(|| {
        ToolError::NotFound(format!(
            "'{}' was removed while being used; nothing was done.",
            show(rel)
        ))
    })
}

/// The folder for a new entry, opened (and created if missing) beneath the root.
fn new_slot(root: &ToolRoot, rel: &str) -> ToolResult<Slot> {
    root.slot(rel, true)?.ok_or_else(|| {
        ToolError::NotFound(format!("the folder for '{}' does not exist.", show(rel)))
    })
}

/// `move` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveArgs {
    /// Workspace-relative path of the file or folder to move. Also accepted as source.
    #[serde(alias = "source")]
    pub from: String,
    /// Its new full workspace-relative path (not just the destination folder). Also accepted
    /// as destination.
    #[serde(alias = "destination")]
    pub to: String,
}

/// `move` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MoveResult {
    /// The resolved source path.
    pub from: String,
    /// The new path.
    pub to: String,
    /// What was moved.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// Set when existing names that differ only in case were used for the ones asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

pub(crate) fn move_entry(root: &ToolRoot, a: MoveArgs) -> ToolResult<MoveResult> {
    let src = root.existing(&a.from, Access::Write, Lookup::ENTRY)?;
    if src.rel.is_empty() {
        return Err(ToolError::InvalidArgs(
            "the workspace root cannot be moved.".into(),
        ));
    }
    let crate::paths::Target {
        rel: to_rel,
        abs: to_abs,
        meta: to_meta,
        reused,
    } = root.target(&a.to, Access::Write)?;
    if to_rel == src.rel {
        return Err(ToolError::InvalidArgs(format!(
            "from and to are the same path '{to_rel}'."
        )));
    }
    if to_rel.starts_with(&format!("{}/", src.rel)) {
        return Err(ToolError::InvalidArgs(format!(
            "cannot move the folder '{}' into itself ('{to_rel}').",
            src.rel
        )));
    }
    if let Some(m) = to_meta {
        let hint = if m.is_dir() {
            format!(
                " To move into that folder, use to: \"{to_rel}/{}\".",
                src.rel.rsplit('/').next().unwrap_or("")
            )
        } else {
            " Delete it first or choose another name.".into()
        };
        return Err(ToolError::Exists(format!(
            "'{to_rel}' already exists; move never overwrites.{hint}"
        )));
    }
    let _guard = root.locks.lock(&[&src.abs, &to_abs]);
    let from = slot_of(root, &src.rel)?;
    let to = new_slot(root, &to_rel)?;
    root.carry((&from.dir, &from.name), (&to.dir, &to_rel), || {
        root.charge(0, 0)?;
        root.renaming((&from.dir, &to.dir), || {
            beneath::rename_noreplace(&from.dir, &from.name, &to.dir, &to.name)
        })
        .map_err(|e| ToolError::io(format!("moving '{}' to '{to_rel}'", src.rel), e))
    })?;
    root.changed(&src.abs);
    root.changed(&to_abs);
    let _ = to.dir.sync_all();
    let _ = from.dir.sync_all();
    Ok(MoveResult {
        from: src.rel,
        to: to_rel,
        kind: EntryType::of(&src.meta),
        note: reused,
    })
}

/// What `meta.json` in a trash entry records.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TrashItem {
    /// The id to pass to restore.
    pub trash_id: String,
    /// The workspace-relative path it was deleted from.
    pub path: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// When it was deleted, RFC 3339 UTC.
    pub deleted: String,
    /// Its size in bytes (files; 0 for folders).
    pub size: u64,
}

/// `delete` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeleteResult {
    /// The path deleted.
    pub path: String,
    /// What was deleted.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// The id to pass to restore.
    pub trash_id: String,
    /// Where it now is.
    pub trash_path: String,
}

static TRASH_COUNTER: AtomicU64 = AtomicU64::new(0);

fn new_trash_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let n = TRASH_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tag = (u64::from(nanos) ^ (u64::from(std::process::id()) << 32)).wrapping_add(n << 20);
    format!("{}-{:08x}{:x}", stamp(), tag as u32, n)
}

pub(crate) fn delete(root: &ToolRoot, a: PathArgs) -> ToolResult<DeleteResult> {
    let src = root.existing(&a.path, Access::Write, Lookup::ENTRY)?;
    if src.rel.is_empty() {
        return Err(ToolError::InvalidArgs(
            "the workspace root cannot be deleted.".into(),
        ));
    }
    let _guard = root.locks.lock(&[&src.abs]);
    let kind = EntryType::of(&src.meta);
    let ctx = |e| ToolError::io(format!("moving '{}' to the trash", src.rel), e);
    let from = slot_of(root, &src.rel)?;
    let id = new_trash_id();
    let item = TrashItem {
        trash_id: id.clone(),
        path: src.rel.clone(),
        kind,
        deleted: rfc3339(std::time::SystemTime::now()),
        size: if src.meta.is_file() {
            src.meta.len()
        } else {
            0
        },
    };
    let meta = serde_json::to_vec_pretty(&item).unwrap_or_default();
    // The entry's folder and its meta.json; the item keeps what it held.
    root.charge(crate::FOLDER_BYTES + meta.len() as u64, 2)?;
    let trash = root.store_dir(&root.trash_dir, Some(0o777)).map_err(ctx)?;
    // Private to whoever deleted the item. An id is unique by its counter.
    root.mkdir(&trash, &id, 0o700).map_err(ctx)?;
    let res = beneath::open(&trash, &id, DIR_PATH).and_then(|entry| {
        let made = root.making(&entry);
        let written = beneath::create(&entry, "meta.json", 0o600)?.write_all(&meta);
        made.done("meta.json");
        written?;
        beneath::rename(&from.dir, &from.name, &entry, "item")
    });
    if let Err(e) = res {
        remove_trash_entry(root, &trash, &id);
        return Err(ctx(e));
    }
    root.changed(&src.abs);
    let _ = from.dir.sync_all();
    let item_path = root.trash_dir.join(&id).join("item");
    Ok(DeleteResult {
        path: src.rel,
        kind,
        trash_path: show_store_path(root, &root.trash_dir, &item_path, "trash"),
        trash_id: id,
    })
}

/// `restore` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreArgs {
    /// The trash_id from delete or list_trash.
    pub trash_id: String,
    /// Restore to this workspace-relative path instead of the original one.
    #[serde(default)]
    pub to: Option<String>,
}

/// `restore` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RestoreResult {
    /// The trash id restored.
    pub trash_id: String,
    /// Where it now is.
    pub path: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// Set when existing names that differ only in case were used for the ones asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Removes a trash entry's folder once its item is gone (restored, or never moved in).
fn remove_trash_entry(root: &ToolRoot, trash: &File, id: &str) {
    if let Ok(entry) = beneath::open(trash, id, DIR_PATH) {
        let _ = root.removing(&entry, "meta.json", || beneath::unlink(&entry, "meta.json"));
    }
    let _ = root.removing(trash, id, || beneath::rmdir(trash, id));
}

/// Opens the trash folder, `None` when there is none yet.
fn open_trash(root: &ToolRoot) -> ToolResult<Option<File>> {
    match root.store_dir(&root.trash_dir, None) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ToolError::io("opening the trash", e)),
    }
}

/// Refuses anything but a trash id, which can only name an entry of the trash folder.
fn check_trash_id(id: &str) -> ToolResult<()> {
    let valid = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !valid {
        return Err(ToolError::InvalidArgs(format!(
            "'{}' is not a trash id; ids look like \"20240126-143022-1a2b3c4d0\" (see list_trash).",
            crate::text::cut(id, 64)
        )));
    }
    Ok(())
}

fn no_trash_entry(id: &str) -> ToolError {
    ToolError::NotFound(format!(
        "no trash entry '{id}'. Call list_trash for the ids."
    ))
}

/// The `meta.json` of trash entry `id` (a checked id).
fn read_trash_item(trash: &File, id: &str) -> ToolResult<TrashItem> {
    let mut bytes = Vec::new();
    beneath::open(trash, &format!("{id}/meta.json"), FILE_READ)
        .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes))
        .map_err(|_| no_trash_entry(id))?;
    serde_json::from_slice(&bytes).map_err(|e| ToolError::Io {
        context: format!("reading trash entry '{id}'"),
        source: std::io::Error::other(e),
    })
}

pub(crate) fn restore(root: &ToolRoot, a: RestoreArgs) -> ToolResult<RestoreResult> {
    check_trash_id(&a.trash_id)?;
    let trash = open_trash(root)?.ok_or_else(|| no_trash_entry(&a.trash_id))?;
    let item = read_trash_item(&trash, &a.trash_id)?;
    // The caller must be allowed to see the original, even when restoring elsewhere.
    root.check(&item.path, Access::Read)?;
    let dest = a.to.clone().unwrap_or_else(|| item.path.clone());
    let crate::paths::Target {
        rel,
        abs,
        meta,
        reused,
    } = root.target(&dest, Access::Write)?;
    if meta.is_some() {
        return Err(ToolError::Exists(format!(
            "'{rel}' exists now; restore with \"to\": another path, or move the existing one away first."
        )));
    }
    let _guard = root.locks.lock(&[&abs, &root.trash_dir.join(&a.trash_id)]);
    let to = new_slot(root, &rel)?;
    let entry = beneath::open(&trash, &a.trash_id, DIR_PATH)
        .map_err(|e| ToolError::io(format!("restoring '{rel}' from the trash"), e))?;
    root.carry((&entry, "item"), (&to.dir, &rel), || {
        root.charge(0, 0)?;
        root.renaming((&entry, &to.dir), || {
            beneath::rename_noreplace(&entry, "item", &to.dir, &to.name)
        })
        .map_err(|e| ToolError::io(format!("restoring '{rel}' from the trash"), e))
    })?;
    root.changed(&abs);
    remove_trash_entry(root, &trash, &a.trash_id);
    Ok(RestoreResult {
        trash_id: a.trash_id,
        path: rel,
        kind: item.kind,
        note: reused,
    })
}

/// `list_trash` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTrashArgs {
    /// Most entries to return (default and at most 200).
    #[serde(default)]
    pub max_results: Option<usize>,
}

/// `list_trash` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListTrashResult {
    /// Trash entries, newest first.
    pub items: Vec<TrashItem>,
    /// Entries in the trash visible to you.
    pub total: usize,
    /// Whether entries were left out.
    pub truncated: bool,
}

pub(crate) fn list_trash(root: &ToolRoot, a: ListTrashArgs) -> ToolResult<ListTrashResult> {
    let max = a.max_results.unwrap_or(TRASH_LIST_MAX).min(TRASH_LIST_MAX);
    let Some(trash) = open_trash(root)? else {
        return Ok(ListTrashResult {
            items: vec![],
            total: 0,
            truncated: false,
        });
    };
    let ids = beneath::list(&trash).map_err(|e| ToolError::io("listing the trash", e))?;
    let mut items: Vec<TrashItem> = ids
        .into_iter()
        .take(MAX_WALK_ENTRIES)
        .filter(|id| check_trash_id(id).is_ok())
        .filter_map(|id| {
            read_trash_item(&trash, &id).ok().or_else(|| {
                // Someone else's entry holding the caller's own file: the caller's to see.
                root.elevated(|up| {
                    up.then(|| callers_own_entry(root, &trash, &id))
                        .flatten()
                        .and_then(|_| read_trash_item(&trash, &id).ok())
                })
            })
        })
        .filter(|it| root.check(&it.path, Access::Read).is_ok())
        .collect();
    items.sort_by(|a, b| b.trash_id.cmp(&a.trash_id));
    let total = items.len();
    items.truncate(max);
    Ok(ListTrashResult {
        truncated: total > items.len(),
        items,
        total,
    })
}

/// `empty_trash` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyTrashArgs {
    /// Remove only this entry (from delete or list_trash); else every entry you deleted. The
    /// backups of what it held go with it, unless something is at its path again.
    #[serde(default)]
    pub trash_id: Option<String>,
}

/// `empty_trash` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EmptyTrashResult {
    /// The entries removed for good.
    pub removed: Vec<String>,
    /// Files, folders and links of the items removed.
    pub entries: u64,
    /// Bytes of the items' file data given back (their backups and the entries' records
    /// besides).
    pub bytes: u64,
    /// Entries that could not be removed, with why (what was removed of them stays removed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<EmptyTrashFailure>,
}

/// An entry `empty_trash` could not remove.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EmptyTrashFailure {
    /// The entry.
    pub trash_id: String,
    /// Why.
    pub message: String,
}

pub(crate) fn empty_trash(root: &ToolRoot, a: EmptyTrashArgs) -> ToolResult<EmptyTrashResult> {
    if let Some(id) = &a.trash_id {
        check_trash_id(id)?;
    }
    let mut out = EmptyTrashResult {
        removed: vec![],
        entries: 0,
        bytes: 0,
        failed: vec![],
    };
    let Some(trash) = open_trash(root)? else {
        return match a.trash_id {
            Some(id) => Err(no_trash_entry(&id)),
            None => Ok(out),
        };
    };
    let one = a.trash_id.is_some();
    let ids = match a.trash_id {
        Some(id) => vec![id],
        None => beneath::list(&trash)
            .map_err(|e| ToolError::io("listing the trash", e))?
            .into_iter()
            .filter(|id| check_trash_id(id).is_ok())
            .collect(),
    };
    for id in ids {
        // Each entry is private to whoever deleted it; an entry holding only the caller's own
        // files (deleted by someone else) is the caller's to remove too, and from any other the
        // caller's own files, with the daemon's rights: they are the caller's bytes.
        let caller = root.caller.as_ref().map(|c| c.uid);
        let (entry, how) =
            match beneath::open(&trash, &id, DIR_PATH).and_then(|e| beneath::list(&e).map(|_| e)) {
                Ok(e) => (e, Emptying::Whole),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    let up = root.elevated(|up| {
                        up.then(|| match callers_own_entry(root, &trash, &id) {
                            Some(entry) => Some((entry, Emptying::WholeAsDaemon)),
                            None => beneath::open(&trash, &id, DIR_PATH)
                                .ok()
                                .map(|entry| (entry, Emptying::CallersFiles)),
                        })
                        .flatten()
                    });
                    match (up, caller) {
                        (Some(found), Some(_)) => found,
                        _ if one => {
                            return Err(ToolError::io(format!("opening trash entry '{id}'"), e))
                        }
                        _ => continue,
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(no_trash_entry(&id));
                }
                Err(e) => return Err(ToolError::io(format!("opening trash entry '{id}'"), e)),
            };
        root.charge(0, 0)?;
        let item = read_trash_item(&trash, &id)
            .ok()
            .or_else(|| root.elevated(|_| read_trash_item(&trash, &id).ok()));
        let (entries, bytes) = (&mut out.entries, &mut out.bytes);
        let counted = &mut |st: &rustix::fs::Stat| {
            *entries += 1;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
                && st.st_nlink <= 1
            {
                *bytes += st.st_size as u64;
            }
        };
        let others = |st: &rustix::fs::Stat| Some(st.st_uid) != caller;
        let gone = match how {
            Emptying::Whole => empty_entry(root, &trash, &id, &entry, &|_| false, counted),
            Emptying::WholeAsDaemon => {
                root.elevated(|_| empty_entry(root, &trash, &id, &entry, &|_| false, counted))
            }
            Emptying::CallersFiles => {
                root.elevated(|_| empty_entry(root, &trash, &id, &entry, &others, counted))
            }
        };
        match gone {
            Ok(true) => {
                if let Some(it) = &item {
                    if let Err(e) = drop_backups(root, &it.path, it.kind == EntryType::Folder) {
                        out.failed.push(EmptyTrashFailure {
                            trash_id: id.clone(),
                            message: format!("removed, but not its backups: {e}"),
                        });
                    }
                }
                out.removed.push(id);
            }
            // Only the caller's files went: the entry stays its deleter's.
            Ok(false) => {}
            Err(e) => out.failed.push(EmptyTrashFailure {
                trash_id: id,
                message: format!(
                    "could not remove all of it (what was removed stays removed; the entry stays): {e}"
                ),
            }),
        }
    }
    Ok(out)
}

/// How much of a trash entry `empty_trash` removes.
enum Emptying {
    /// The caller's own entry, as the caller.
    Whole,
    /// An entry holding only the caller's files, with the daemon's rights.
    WholeAsDaemon,
    /// The caller's files in someone else's entry, with the daemon's rights.
    CallersFiles,
}

/// Removes trash entry `id` (`entry`): its item first, then its record and folder, so an item
/// that cannot be removed whole stays listed. What `keep` keeps stays (then the entry does
/// too). Whether the entry is gone.
fn empty_entry(
    root: &ToolRoot,
    trash: &File,
    id: &str,
    entry: &File,
    keep: &dyn Fn(&rustix::fs::Stat) -> bool,
    counted: &mut dyn FnMut(&rustix::fs::Stat),
) -> std::io::Result<bool> {
    let item = std::ffi::OsStr::new("item");
    match rustix::fs::statat(entry, item, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
        Ok(st)
            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                == rustix::fs::FileType::Directory =>
        {
            let dir = beneath::open_subdir(entry, item)?;
            if !remove_tree(root, &dir, keep, counted)? || keep(&st) {
                return Ok(false);
            }
            root.removing(entry, item, || beneath::rmdir(entry, "item"))?;
            counted(&st);
        }
        Ok(st) if keep(&st) => return Ok(false),
        Ok(st) => {
            root.removing(entry, item, || beneath::unlink(entry, "item"))?;
            counted(&st);
        }
    }
    match rustix::fs::statat(entry, "meta.json", rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        // Someone else's entry: its record and folder are theirs.
        Ok(st) if keep(&st) => return Ok(false),
        Ok(_) => root.removing(entry, "meta.json", || beneath::unlink(entry, "meta.json"))?,
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    root.removing(trash, id, || beneath::rmdir(trash, id))?;
    Ok(true)
}

/// The trash entry `id`, opened, if what it holds is all the caller's (a file of the caller's
/// that someone else deleted): the caller holds its bytes and may give them back. Call with
/// the daemon's credentials.
fn callers_own_entry(root: &ToolRoot, trash: &File, id: &str) -> Option<File> {
    let uid = root.caller.as_ref()?.uid;
    let entry = beneath::open(trash, id, DIR_PATH).ok()?;
    let item = beneath::lstat(&entry, "item").ok()?;
    if item.uid() != uid {
        return None;
    }
    if item.is_dir() {
        let dir = beneath::open(&entry, "item", beneath::DIR_READ).ok()?;
        if !owned_by(&dir, uid).ok()? {
            return None;
        }
    }
    Some(entry)
}

/// Whether everything below the folder `dir` belongs to `uid`.
fn owned_by(dir: &File, uid: u32) -> std::io::Result<bool> {
    let mut stack = vec![beneath::open(dir, "", beneath::DIR_READ)?];
    while let Some(d) = stack.pop() {
        for e in rustix::fs::Dir::read_from(&d)? {
            let e = e?;
            let name = e.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            let st = rustix::fs::statat(&d, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
            if st.st_uid != uid {
                return Ok(false);
            }
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
                let name = std::ffi::OsStr::from_bytes(name.to_bytes());
                stack.push(beneath::open_subdir(&d, name)?);
            }
        }
    }
    Ok(true)
}

/// `create_folder` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CreateFolderResult {
    /// The folder's path.
    pub path: String,
    /// false if it already existed.
    pub created: bool,
    /// Set when an existing folder whose name differs only in case was taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

pub(crate) fn create_folder(root: &ToolRoot, a: PathArgs) -> ToolResult<CreateFolderResult> {
    let crate::paths::Target {
        mut rel,
        mut meta,
        mut reused,
        ..
    } = root.target(&a.path, Access::Write)?;
    if meta.is_none() {
        // The folder itself may exist in another case too.
        if let crate::paths::Walk::Found { rel: real, meta: m } =
            root.walk(&a.path, Lookup::READ)?
        {
            if m.is_dir() && real.to_lowercase() == rel.to_lowercase() {
                reused = Some(format!(
                    "'{}' is '{real}': names that exist in another case are used, not duplicated",
                    a.path.trim_matches('/')
                ));
                (rel, meta) = (real, Some(m));
            }
        }
    }
    match meta {
        Some(m) if m.is_dir() => Ok(CreateFolderResult {
            path: rel,
            created: false,
            note: reused,
        }),
        Some(_) => Err(ToolError::Exists(format!(
            "'{rel}' already exists and is a file, not a folder."
        ))),
        None => {
            root.create_dirs(&rel, &rel)?;
            Ok(CreateFolderResult {
                path: rel,
                created: true,
                note: reused,
            })
        }
    }
}

/// `get_file_info` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileInfoResult {
    /// The resolved path.
    pub path: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// Bytes (for a folder, the total of the files below it).
    pub size: u64,
    /// For files the editing tools take (at most max_text_file_bytes): the sha256 of the
    /// content, the base_sha256 for apply_patch and edit_exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Creation time, RFC 3339 UTC, when the filesystem records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Modification time, RFC 3339 UTC.
    pub modified: String,
    /// Last access time, RFC 3339 UTC (as the filesystem keeps it: often relatime).
    pub accessed: String,
    /// Permission bits, octal (e.g. `"0644"`).
    pub permissions: String,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// For folders: entries directly inside.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<usize>,
    /// For folders: whether size stopped counting at the walk limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_incomplete: Option<bool>,
}

pub(crate) fn get_file_info(root: &ToolRoot, a: PathArgs) -> ToolResult<FileInfoResult> {
    let f = root.existing(&a.path, Access::Read, Lookup::READ)?;
    let kind = EntryType::of(&f.meta);
    let (size, children, incomplete) = if f.meta.is_dir() {
        let (mut size, mut children) = (0u64, 0usize);
        let stats = walk(root, &f, usize::MAX, |e| {
            if e.depth == 1 {
                children += 1;
            }
            if e.meta.is_file() {
                size += e.meta.len();
            }
            Step::Continue
        })?;
        (size, Some(children), Some(stats.capped))
    } else {
        (f.meta.len(), None, None)
    };
    // Kept across tool edits in an attribute, read from the file itself when the caller may.
    let (created, sha256) = match f.meta.is_file() {
        true => {
            let file = beneath::open(&root.root_fd, &f.rel, beneath::FILE_READ).ok();
            let file = file.as_ref();
            (
                file.and_then(|file| crate::fsops::created_time(file, &f.meta)),
                file.and_then(|file| {
                    crate::fsops::sha256_of(file, root.limits().max_text_file_bytes)
                }),
            )
        }
        false => (f.meta.created().ok(), None),
    };
    Ok(FileInfoResult {
        path: show(&f.rel),
        kind,
        size,
        sha256,
        created: created.map(rfc3339),
        modified: rfc3339(f.meta.modified().unwrap_or(std::time::UNIX_EPOCH)),
        accessed: rfc3339(f.meta.accessed().unwrap_or(std::time::UNIX_EPOCH)),
        permissions: format!("{:04o}", f.meta.mode() & 0o7777),
        uid: f.meta.uid(),
        gid: f.meta.gid(),
        children,
        size_incomplete: incomplete,
    })
}
