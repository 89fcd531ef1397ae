//! Managing tools: move, delete (into the trash), restore, list_trash, create_folder,
//! get_file_info.
//!
//! Trash layout: `<trash_dir>/<trash_id>/item` is the deleted entry itself (renamed, so a delete is
//! atomic and cheap) and `<trash_dir>/<trash_id>/meta.json` records where it came from. A trash id
//! is `YYYYmmdd-HHMMSS-<hex>`: sortable by time, and only `[0-9A-Za-z-]`, so it can never name a
//! path outside the trash.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::read::PathArgs;
use super::walk::{walk, Step};
use super::EntryType;
use crate::error::{ToolError, ToolResult};
use crate::fsops::{rfc3339, show_store_path, stamp, sync_dir};
use crate::limits::{MAX_WALK_ENTRIES, TRASH_LIST_MAX};
use crate::paths::{show, Lookup};
use crate::policy::Access;
use crate::ToolRoot;

/// Renames without ever replacing an existing destination (`renameat2(RENAME_NOREPLACE)`, with a
/// check-then-rename fallback on filesystems that lack it).
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    let f = CString::new(from.as_os_str().as_bytes())?;
    let t = CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call; AT_FDCWD
    // makes the paths absolute-or-cwd-relative as usual; the call does not retain them.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(std::io::ErrorKind::AlreadyExists.into());
            }
            std::fs::rename(from, to)
        }
        _ => Err(e),
    }
}

/// `move` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveArgs {
    /// Workspace-relative path of the file or folder to move.
    pub from: String,
    /// Its new full workspace-relative path (not just the destination folder).
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
}

pub(crate) fn move_entry(root: &ToolRoot, a: MoveArgs) -> ToolResult<MoveResult> {
    let src = root.existing(&a.from, Access::Write, Lookup::ENTRY)?;
    if src.rel.is_empty() {
        return Err(ToolError::InvalidArgs(
            "the workspace root cannot be moved.".into(),
        ));
    }
    let (to_rel, to_abs, to_meta) = root.target(&a.to, Access::Write)?;
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
    crate::fsops::create_parents(root, &to_abs, &to_rel)?;
    rename_noreplace(&src.abs, &to_abs)
        .map_err(|e| ToolError::io(format!("moving '{}' to '{to_rel}'", src.rel), e))?;
    root.changed(&src.abs);
    root.changed(&to_abs);
    if let Some(p) = to_abs.parent() {
        let _ = sync_dir(p);
    }
    Ok(MoveResult {
        from: src.rel,
        to: to_rel,
        kind: EntryType::of(&src.meta),
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
    std::fs::create_dir_all(&root.trash_dir).map_err(ctx)?;
    let (id, dir) = loop {
        let id = new_trash_id();
        let dir = root.trash_dir.join(&id);
        // Private to whoever deleted the item.
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break (id, dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(ctx(e)),
        }
    };
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
    let res = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join("meta.json"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, &meta))
        .and_then(|_| std::fs::rename(&src.abs, dir.join("item")));
    if let Err(e) = res {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(ctx(e));
    }
    root.changed(&src.abs);
    if let Some(p) = src.abs.parent() {
        let _ = sync_dir(p);
    }
    Ok(DeleteResult {
        path: src.rel,
        kind,
        trash_path: show_store_path(root, &root.trash_dir, &dir.join("item"), "trash"),
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
}

fn read_trash_item(root: &ToolRoot, id: &str) -> ToolResult<TrashItem> {
    let valid = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !valid {
        return Err(ToolError::InvalidArgs(format!(
            "'{}' is not a trash id; ids look like \"20240126-143022-1a2b3c4d0\" (see list_trash).",
            crate::text::cut(id, 64)
        )));
    }
    let bytes = std::fs::read(root.trash_dir.join(id).join("meta.json")).map_err(|_| {
        ToolError::NotFound(format!(
            "no trash entry '{id}'. Call list_trash for the ids."
        ))
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ToolError::Io {
        context: format!("reading trash entry '{id}'"),
        source: std::io::Error::other(e.to_string()),
    })
}

pub(crate) fn restore(root: &ToolRoot, a: RestoreArgs) -> ToolResult<RestoreResult> {
    let item = read_trash_item(root, &a.trash_id)?;
    // The caller must be allowed to see the original, even when restoring elsewhere.
    root.check(&item.path, Access::Read)?;
    let dest = a.to.clone().unwrap_or_else(|| item.path.clone());
    let (rel, abs, meta) = root.target(&dest, Access::Write)?;
    if meta.is_some() {
        return Err(ToolError::Exists(format!(
            "'{rel}' exists now; restore with \"to\": another path, or move the existing one away first."
        )));
    }
    let dir = root.trash_dir.join(&a.trash_id);
    let _guard = root.locks.lock(&[&abs, &dir]);
    crate::fsops::create_parents(root, &abs, &rel)?;
    rename_noreplace(&dir.join("item"), &abs)
        .map_err(|e| ToolError::io(format!("restoring '{rel}' from the trash"), e))?;
    root.changed(&abs);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(RestoreResult {
        trash_id: a.trash_id,
        path: rel,
        kind: item.kind,
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
    let rd = match std::fs::read_dir(&root.trash_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ListTrashResult {
                items: vec![],
                total: 0,
                truncated: false,
            })
        }
        Err(e) => return Err(ToolError::io("listing the trash", e)),
    };
    let mut items: Vec<TrashItem> = rd
        .filter_map(|e| e.ok())
        .take(MAX_WALK_ENTRIES)
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|id| read_trash_item(root, &id).ok())
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

/// `create_folder` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CreateFolderResult {
    /// The folder's path.
    pub path: String,
    /// false if it already existed.
    pub created: bool,
}

pub(crate) fn create_folder(root: &ToolRoot, a: PathArgs) -> ToolResult<CreateFolderResult> {
    let (rel, abs, meta) = root.target(&a.path, Access::Write)?;
    match meta {
        Some(m) if m.is_dir() => Ok(CreateFolderResult {
            path: rel,
            created: false,
        }),
        Some(_) => Err(ToolError::Exists(format!(
            "'{rel}' already exists and is a file, not a folder."
        ))),
        None => {
            crate::fsops::create_dirs(root, &abs, &rel)?;
            Ok(CreateFolderResult {
                path: rel,
                created: true,
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
    /// Creation time, RFC 3339 UTC, when the filesystem records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Modification time, RFC 3339 UTC.
    pub modified: String,
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
        let stats = walk(root, &f.rel, usize::MAX, |e| {
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
    Ok(FileInfoResult {
        path: show(&f.rel),
        kind,
        size,
        created: f.meta.created().ok().map(rfc3339),
        modified: rfc3339(f.meta.modified().unwrap_or(std::time::UNIX_EPOCH)),
        children,
        size_incomplete: incomplete,
    })
}
