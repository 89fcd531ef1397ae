//! `list_backups` and `restore_backup`: the copies the editing tools keep of what they replace,
//! listed and put back. A restore is an edit like any other: hash-checked when asked, under the
//! file's lock, and it keeps a backup of what it replaces. A file that is gone (removed with
//! `rm`, moved away) keeps its history until it ages out, and a restore makes it again.
//!
//! Backups live in folders only the daemon may enter (see `fsops::backup`): they are reached
//! with its credentials, by descriptor beneath the backup folder, and a caller is shown and
//! given only its own (each backup belongs to the editor whose edit made it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::Access;
use crate::beneath::{self, DIR_READ, FILE_READ};
use crate::error::{ToolError, ToolResult};
use crate::fsops::{atomic_write, backup_stamp, backups_of, read_limited, sha256_hex};
use crate::paths::show;
use crate::ToolRoot;

use super::edit::{check_hash, commit, load};
use super::read::PathArgs;

/// One backup of a file.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BackupEntry {
    /// Its name: what restore_backup takes.
    pub backup: String,
    /// When it was made (the content it holds was replaced then), RFC 3339 UTC.
    pub created: String,
    /// Its size in bytes.
    pub size: u64,
}

/// `list_backups` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListBackupsResult {
    /// The file.
    pub path: String,
    /// Its backups you may read, newest first.
    pub backups: Vec<BackupEntry>,
    /// Backups kept per file in this workspace.
    pub kept: usize,
    /// Days a backup is kept at most (the newest always stays).
    pub max_age_days: u64,
}

/// The folder holding `rel`'s backups and the file's name, if any backup was ever made there.
/// Called with the daemon's credentials where backups are written so.
fn backup_folder(root: &ToolRoot, rel: &str) -> ToolResult<Option<(std::fs::File, String)>> {
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let name = comps.pop().unwrap_or_default().to_string();
    let ctx = |e| ToolError::io(format!("reading the backups of '{}'", show(rel)), e);
    let backups = match root.store_dir(&root.backup_dir, None) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ctx(e)),
    };
    match beneath::open(&backups, &comps.join("/"), DIR_READ) {
        Ok(dir) => Ok(Some((dir, name))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ctx(e)),
    }
}

/// "20261129-183000" as RFC 3339.
fn created(stamp: &str) -> String {
    chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%d-%H%M%S")
        .map(|t| {
            t.and_utc()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        })
        .unwrap_or_default()
}

/// The workspace path of the file `input` names: an existing file the caller may `access`, or
/// where one the caller may write is gone (its backups may remain).
fn backed_up(root: &ToolRoot, input: &str, access: Access) -> ToolResult<String> {
    match root.existing_file(input, access) {
        Ok(f) => Ok(f.rel),
        Err(ToolError::NotFound(msg)) => match root.target(input, Access::Write) {
            Ok(t) if t.meta.is_none() => Ok(t.rel),
            _ => Err(ToolError::NotFound(msg)),
        },
        Err(e) => Err(e),
    }
}

pub(crate) fn list_backups(root: &ToolRoot, a: PathArgs) -> ToolResult<ListBackupsResult> {
    let rel = backed_up(root, &a.path, Access::Read)?;
    let limits = root.limits();
    let mut out = ListBackupsResult {
        path: show(&rel),
        backups: Vec::new(),
        kept: limits.backups_kept,
        max_age_days: limits.backup_max_age_days,
    };
    out.backups = root.elevated(|_| -> ToolResult<Vec<BackupEntry>> {
        let Some((dir, name)) = backup_folder(root, &rel)? else {
            return Ok(Vec::new());
        };
        Ok(backups_of(&dir, &name)
            .into_iter()
            .rev()
            .filter_map(|b| {
                let meta = beneath::lstat(&dir, &b).ok()?;
                root.owns(&meta).then(|| BackupEntry {
                    created: created(backup_stamp(&b, &name).unwrap_or_default()),
                    size: meta.len(),
                    backup: b,
                })
            })
            .collect())
    })?;
    Ok(out)
}

/// `restore_backup` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreBackupArgs {
    /// The file to put an earlier content back into.
    pub path: String,
    /// The backup's name, as list_backups gives it.
    pub backup: String,
    /// The file's current sha256 (from read_file or info): refused with hash_mismatch if it
    /// changed since. Optional, but without it a change made meanwhile is replaced unseen.
    #[serde(default)]
    pub base_sha256: Option<String>,
}

/// `restore_backup` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RestoreBackupResult {
    /// The file.
    pub path: String,
    /// The backup put back.
    pub restored: String,
    /// sha256 of the content now: the base_sha256 for the next edit.
    pub sha256: String,
    /// Where the content it replaced was saved (none when the file was gone and is made
    /// again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
}

pub(crate) fn restore_backup(
    root: &ToolRoot,
    a: RestoreBackupArgs,
) -> ToolResult<RestoreBackupResult> {
    let (mut guard, f) = match root.locked_file(&a.path, Access::Write) {
        Ok(found) => found,
        Err(ToolError::NotFound(msg)) => return restore_gone(root, a, msg),
        Err(e) => return Err(e),
    };
    let l = load(root, &guard, f)?;
    if let Some(base) = &a.base_sha256 {
        check_hash(&l.f.rel, base, &l.sha256)?;
    }
    let bytes = read_backup(root, &l.f.rel, &a.backup)?;
    let sha256 = sha256_hex(&bytes);
    let backup = commit(root, &mut guard, &l, &bytes)?;
    Ok(RestoreBackupResult {
        path: show(&l.f.rel),
        restored: a.backup,
        sha256,
        backup: Some(backup),
    })
}

/// [`restore_backup`] of a file that is gone: made again, as `write_file` makes a new file,
/// from one of the caller's backups of it (`missing` is the message if it has none).
fn restore_gone(
    root: &ToolRoot,
    a: RestoreBackupArgs,
    missing: String,
) -> ToolResult<RestoreBackupResult> {
    let crate::paths::Target { rel, abs, meta, .. } = root.target(&a.path, Access::Write)?;
    if meta.is_some() {
        return Err(ToolError::NotFound(missing));
    }
    let _guard = root.locks.lock(&[&abs]);
    let bytes = read_backup(root, &rel, &a.backup)?;
    let Some(slot) = root.slot(&rel, true)? else {
        return Err(ToolError::NotFound(missing));
    };
    // A new file takes a free name only: one made there meanwhile is refused (`exists`).
    atomic_write(root, &slot, &rel, &abs, &bytes, None)?;
    Ok(RestoreBackupResult {
        path: show(&rel),
        restored: a.backup,
        sha256: sha256_hex(&bytes),
        backup: None,
    })
}

/// The content of the caller's backup `backup` of the file `rel`, read by descriptor with the
/// daemon's credentials: only a name list_backups gives the caller, nothing else in or out of
/// the backup folder.
fn read_backup(root: &ToolRoot, rel: &str, backup: &str) -> ToolResult<Vec<u8>> {
    let unknown = || {
        ToolError::NotFound(format!(
            "'{}' has no backup {backup:?}; list_backups names those it has.",
            show(rel)
        ))
    };
    root.elevated(|_| -> ToolResult<Vec<u8>> {
        let Some((dir, name)) = backup_folder(root, rel)? else {
            return Err(unknown());
        };
        if !backups_of(&dir, &name).iter().any(|b| b == backup) {
            return Err(unknown());
        }
        let ctx = |e| ToolError::io(format!("opening the backup {backup:?}"), e);
        let file = beneath::open(&dir, backup, FILE_READ).map_err(ctx)?;
        // The caller's own, checked on the descriptor read.
        if !root.owns(&file.metadata().map_err(ctx)?) {
            return Err(unknown());
        }
        read_limited(&file, backup, root.limits().max_text_file_bytes)
    })
}
