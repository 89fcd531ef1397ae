//! `list_backups` and `restore_backup`: the copies the editing tools keep of what they replace,
//! listed and put back. A restore is an edit like any other: hash-checked when asked, under the
//! file's lock, and it keeps a backup of what it replaces.
//!
//! Backups live in folders only the daemon may enter (see `fsops::backup`): they are reached
//! with its credentials, by descriptor beneath the backup folder, and a caller is shown and
//! given only its own (each backup belongs to the editor whose edit made it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::Access;
use crate::beneath::{self, DIR_READ, FILE_READ};
use crate::error::{ToolError, ToolResult};
use crate::fsops::{backup_stamp, backups_of, read_limited, sha256_hex};
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

pub(crate) fn list_backups(root: &ToolRoot, a: PathArgs) -> ToolResult<ListBackupsResult> {
    let f = root.existing_file(&a.path, Access::Read)?;
    let limits = root.limits();
    let mut out = ListBackupsResult {
        path: show(&f.rel),
        backups: Vec::new(),
        kept: limits.backups_kept,
        max_age_days: limits.backup_max_age_days,
    };
    out.backups = root.elevated(|_| -> ToolResult<Vec<BackupEntry>> {
        let Some((dir, name)) = backup_folder(root, &f.rel)? else {
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
    /// Where the content it replaced was saved.
    pub backup: String,
}

pub(crate) fn restore_backup(
    root: &ToolRoot,
    a: RestoreBackupArgs,
) -> ToolResult<RestoreBackupResult> {
    let (_guard, f) = root.locked_file(&a.path, Access::Write)?;
    let l = load(root, f)?;
    if let Some(base) = &a.base_sha256 {
        check_hash(&l.f.rel, base, &l.sha256)?;
    }
    let unknown = || {
        ToolError::NotFound(format!(
            "'{}' has no backup {:?}; list_backups names those it has.",
            show(&l.f.rel),
            a.backup
        ))
    };
    let bytes = root.elevated(|_| -> ToolResult<Vec<u8>> {
        let Some((dir, name)) = backup_folder(root, &l.f.rel)? else {
            return Err(unknown());
        };
        // Only a name of the list: nothing else in the backup folder, nothing outside it.
        if !backups_of(&dir, &name).contains(&a.backup) {
            return Err(unknown());
        }
        let file = beneath::open(&dir, &a.backup, FILE_READ)
            .map_err(|e| ToolError::io(format!("opening the backup {:?}", a.backup), e))?;
        // The caller's own, checked on the descriptor read.
        let meta = file
            .metadata()
            .map_err(|e| ToolError::io(format!("opening the backup {:?}", a.backup), e))?;
        if !root.owns(&meta) {
            return Err(unknown());
        }
        read_limited(&file, &a.backup, root.limits().max_text_file_bytes)
    })?;
    let sha256 = sha256_hex(&bytes);
    let backup = commit(root, &l, &bytes)?;
    Ok(RestoreBackupResult {
        path: show(&l.f.rel),
        restored: a.backup,
        sha256,
        backup,
    })
}
