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
//! - `audit:hmac-off`: from the next record on, records are unsigned;
//! - `audit:recovered`: the previous run left a torn last line (a crash mid-write), which was cut.
//!
//! # Limits
//! A chain cannot show that records were removed from its *end*; an HMAC does not change that.
//! Removing whole files from the start shows as a trail that does not begin at seq 1
//! ([`VerifyReport::head_missing`]).

mod files;
mod record;
mod search;
mod verify;
mod writer;

use std::io;
use std::path::{Path, PathBuf};

pub use files::{list as list_files, AuditFile};
pub use record::{
    check_line_hmac, is_agent_name, key_fingerprint, line_hash, AuditEvent, AuditRecord, Outcome,
    GENESIS, SYSTEM_AGENT,
};
pub use search::{parse_since, search, tail, Filter, Search};
pub use verify::{verify, BreakKind, BrokenRecord, VerifyReport};
pub use writer::{AuditConfig, AuditLog};

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

impl From<AuditError> for io::Error {
    fn from(e: AuditError) -> io::Error {
        match e {
            AuditError::Io { source, .. } => source,
            AuditError::Locked(_) => io::Error::new(io::ErrorKind::WouldBlock, e.to_string()),
            other => io::Error::other(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
