//! The tamper-evident audit trail (core layer): a hash-chained, optionally HMAC-signed JSON Lines
//! log of every operation and decision, written off the hot path, with per-agent views, replay
//! verification and search.
//!
//! # Format
//! `<store>/.clawfs/audit/audit-YYYY-MM-DD[.N].jsonl`, one [`AuditRecord`] per line (field order and
//! hashing in [`record`]). `seq` counts records across all files from 1; `prev` chains each record to
//! the exact bytes of the one before it, so an edited, deleted or reordered record breaks the chain
//! at a place [`verify`] can name. While an HMAC key is set (the vault is unlocked) every record also
//! carries an HMAC, so that someone who can write the files but lacks the key cannot rebuild the
//! chain after an edit. The log writes records about itself with agent [`SYSTEM_AGENT`]:
//! - `audit:hmac-on` (reason `hmac key <fingerprint>`): from here every record is signed with that key;
//! - `audit:hmac-off`: from the next record on, records are unsigned (written when the key is
//!   cleared or changed, and when the log is closed);
//! - `audit:hmac-interrupted`: unsigned; the previous run stopped while signing without closing the
//!   log (a crash), so the signed stretch ends here;
//! - `audit:checkpoint-mismatch`: when the key was set, the checkpoint left by an earlier run did
//!   not match the trail (it was cut or rewritten while no daemon wrote it);
//! - `audit:recovered`: the previous run left a torn last line (a crash mid-write), which was cut.
//!
//! # Checkpoint
//! While a key is set the writer keeps `checkpoint.json` in the audit directory at the last synced
//! record, signed with the key ([`Checkpoint`]). Since the record's hash pins every record before
//! it, [`verify`] with the key can tell that the trail was cut at its end, or rebuilt without its
//! signatures, up to that record; without the checkpoint (deleted) verification with a key fails.
//!
//! # Limits
//! Without the key, a chain cannot show that records were removed from its *end* or that it was
//! rebuilt. With the key, records after the checkpoint (written while no key was set, or in the
//! last second before a crash) are protected only by their own HMACs, if any. Removing whole files
//! from the start shows as a trail that does not begin at seq 1 ([`VerifyReport::head_missing`]).

mod checkpoint;
mod files;
mod follow;
mod record;
mod search;
mod verify;
mod writer;

use std::io;
use std::path::{Path, PathBuf};

pub use checkpoint::{
    checkpoint_path, Checkpoint, CheckpointStatus, InvalidCheckpoint, CHECKPOINT_FILE,
};
pub use files::{list as list_files, AuditFile};
pub use follow::Follow;
pub use record::{
    check_line_hmac, is_agent_name, key_fingerprint, line_hash, AuditEvent, AuditRecord, Outcome,
    GENESIS, SYSTEM_AGENT,
};
pub use search::{parse_since, search, tail, Filter, Search};
pub use verify::{verify, verify_with, BreakKind, BrokenRecord, VerifyOptions, VerifyReport};
pub use writer::{AuditConfig, AuditLog};

/// Operation of the record that starts a signed stretch (reason `hmac key <fingerprint>`).
pub const OP_HMAC_ON: &str = "audit:hmac-on";
/// Operation of the signed record that ends a signed stretch.
pub const OP_HMAC_OFF: &str = "audit:hmac-off";
/// Operation of the unsigned record that ends a signed stretch left open by a crashed run.
pub const OP_HMAC_INTERRUPTED: &str = "audit:hmac-interrupted";
/// Operation of the record by which the writer reports that the trail no longer matched the
/// checkpoint an earlier run left.
pub const OP_CHECKPOINT_MISMATCH: &str = "audit:checkpoint-mismatch";

/// Directory of the audit trail inside the store's private area.
pub const AUDIT_DIR: &str = ".clawfs/audit";

/// The audit directory of the store at `store_root`.
pub fn audit_dir(store_root: &Path) -> PathBuf {
    store_root.join(AUDIT_DIR)
}

/// Why an audit operation failed. A broken chain is not an error: [`verify`] reports it in
/// [`VerifyReport::broken`].
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Another process holds the trail's writer lock.
    #[error("the audit trail in {} is being written by another process", .0.display())]
    Locked(PathBuf),
    /// The newest file ends with no readable record, so the chain cannot be continued.
    #[error("cannot continue the audit chain: {} ends with no readable record", .0.display())]
    Unresumable(PathBuf),
    /// A line of an audit file is not a record.
    #[error("{}:{line}: not an audit record: {source}", file.display())]
    Parse {
        /// The file.
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// A `--since` value that is neither RFC 3339, a date, nor a relative age like `10m`.
    #[error("invalid time {0:?}: use RFC 3339 (2024-02-24T12:00:00Z), a date (2024-02-24) or an age (30s, 10m, 2h, 1d, 1w)")]
    BadTime(String),
    /// The writer thread is gone (it panicked or the log was shut down).
    #[error("the audit writer has stopped")]
    Stopped,
}

impl AuditError {
    fn io(path: &Path, source: io::Error) -> AuditError {
        AuditError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[cfg(test)]
mod tests;
