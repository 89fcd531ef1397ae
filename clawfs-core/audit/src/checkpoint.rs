//! The signed checkpoint of the audit trail (core layer).
//!
//! `checkpoint.json`, beside the trail files in the audit directory, names the last record the
//! writer had synced to disk while an HMAC key was set: its `seq`, the SHA-256 of its line, its
//! file, and whether the records after it are signed. An HMAC under the audit key covers these
//! fields. Because every record's `prev` is the hash of the line before it, the hash of one record
//! pins every record before it: a trail that still holds that record with that hash, linked by an
//! intact chain, is the trail as written up to there, whether or not its records carry an `hmac`.
//! Someone who can write the disk but lacks the key can rebuild the chain, strip signatures or cut
//! the end, but cannot sign a checkpoint that matches the result. The file is rewritten (atomically)
//! whenever the writer syncs while a key is set, and when the key is set or cleared.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use chrono::{SecondsFormat, Utc};
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::files::{AuditFile, Lines};
use super::record::{hmac_hex, hmac_matches, key_fingerprint};
use super::AuditError;

/// The checkpoint's file name in the audit directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// The only format written and read.
const FORMAT: u32 = 1;

/// What the checkpoint's HMAC is computed over comes after this label, so it can never be mistaken
/// for a record line (those start with `{`).
const MAC_LABEL: &[u8] = b"clawfs-audit-checkpoint/v1\0";

/// A checkpoint is a few hundred bytes; anything far larger is not one.
const MAX_LEN: u64 = 64 * 1024;

/// The checkpoint file of the trail in `dir`.
pub fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join(CHECKPOINT_FILE)
}

/// A signed statement by the writer: "record `seq`, in `file`, has the line hash `hash`; after it
/// records are (not) signed". See the module documentation of `audit::checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Format of the file: 1.
    pub format: u32,
    /// Seq of the record it names.
    pub seq: u64,
    /// Hex SHA-256 of that record's line (what the next record's `prev` holds).
    pub hash: String,
    /// Name of the audit file holding the record.
    pub file: String,
    /// When the checkpoint was written (RFC 3339 UTC, milliseconds).
    pub time: String,
    /// Whether the records after it are signed (false when the record is `audit:hmac-off`).
    pub signing: bool,
    /// Fingerprint of the key that signed the checkpoint ([`key_fingerprint`]).
    pub key: String,
    /// Hex HMAC-SHA256 under that key of the fields above (see [`Checkpoint::mac_input`]).
    pub hmac: String,
}

/// How a checkpoint relates to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointStatus {
    /// Signed with this key.
    Valid,
    /// Signed with another key (the fingerprint differs): cannot be checked with this one.
    OtherKey,
    /// Names this key but its HMAC does not match: forged or altered.
    Forged,
}

impl Checkpoint {
    /// A checkpoint of record `seq` (line hash `hash`, in `file`), written now, signed with `key`.
    pub fn sign(seq: u64, hash: &str, file: &str, signing: bool, key: &[u8; 32]) -> Checkpoint {
        let mut cp = Checkpoint {
            format: FORMAT,
            seq,
            hash: hash.to_string(),
            file: file.to_string(),
            time: Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
            signing,
            key: key_fingerprint(key),
            hmac: String::new(),
        };
        cp.hmac = hmac_hex(key, &cp.mac_input());
        cp
    }

    /// The signed bytes: `clawfs-audit-checkpoint/v1\0` then format, seq, hash, file, time,
    /// signing (`1`/`0`) and key, separated by NUL bytes (none of them can hold one: [`parse`]
    /// refuses a checkpoint whose fields are malformed).
    ///
    /// [`parse`]: Checkpoint::parse
    pub fn mac_input(&self) -> Vec<u8> {
        let mut m = MAC_LABEL.to_vec();
        let fields = [
            self.format.to_string(),
            self.seq.to_string(),
            self.hash.clone(),
            self.file.clone(),
            self.time.clone(),
            if self.signing { "1" } else { "0" }.to_string(),
            self.key.clone(),
        ];
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                m.push(0);
            }
            m.extend_from_slice(f.as_bytes());
        }
        m
    }

    /// Whether it was signed with `key`.
    pub fn check(&self, key: &[u8; 32]) -> CheckpointStatus {
        if self.key != key_fingerprint(key) {
            return CheckpointStatus::OtherKey;
        }
        if hmac_matches(key, &self.mac_input(), &self.hmac) {
            CheckpointStatus::Valid
        } else {
            CheckpointStatus::Forged
        }
    }

    /// The file's content: one JSON object and a newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(self).expect("serialising to a Vec cannot fail");
        out.push(b'\n');
        out
    }

    /// Parses and checks the shape of a checkpoint file's content (not its HMAC).
    pub fn parse(bytes: &[u8]) -> Result<Checkpoint, InvalidCheckpoint> {
        let cp: Checkpoint = serde_json::from_slice(bytes)?;
        let hex_of = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if cp.format != FORMAT {
            return Err(InvalidCheckpoint::Format(cp.format));
        }
        if !hex_of(&cp.hash, 64) || !hex_of(&cp.hmac, 64) || !hex_of(&cp.key, 16) {
            return Err(InvalidCheckpoint::Hex);
        }
        if AuditFile::parse_name(Path::new(""), &cp.file).is_none() {
            return Err(InvalidCheckpoint::FileName(cp.file));
        }
        if cp.time.is_empty() || cp.time.len() > 64 || cp.time.chars().any(char::is_control) {
            return Err(InvalidCheckpoint::Time);
        }
        Ok(cp)
    }
}

/// Why a checkpoint file is not a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum InvalidCheckpoint {
    /// Not the JSON of a checkpoint.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A format this build does not know.
    #[error("unknown format {0}")]
    Format(u32),
    /// A hash, HMAC or key that is not lowercase hex of its length.
    #[error("hash, hmac or key is not lowercase hex of the right length")]
    Hex,
    /// The file it names is no audit file.
    #[error("{0:?} is not an audit file name")]
    FileName(String),
    /// A time that cannot be one.
    #[error("malformed time")]
    Time,
}

/// What is found where a checkpoint should be.
#[derive(Debug)]
pub(super) enum Loaded {
    /// No file.
    Missing,
    /// Something that is not a checkpoint (why).
    Invalid(String),
    /// A well-formed checkpoint (its HMAC not yet checked).
    Found(Checkpoint),
}

/// Reads the checkpoint at `path` without following a symlink.
pub(super) fn load(path: &Path) -> Result<Loaded, AuditError> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Loaded::Missing),
        Err(rustix::io::Errno::LOOP) => return Ok(Loaded::Invalid("it is a symlink".into())),
        Err(e) => return Err(AuditError::io(path, e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| AuditError::io(path, e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Ok(Loaded::Invalid("it is not a regular file".into()));
    }
    let mut bytes = Vec::new();
    File::from(fd)
        .take(MAX_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| AuditError::io(path, e))?;
    if bytes.len() as u64 > MAX_LEN {
        return Ok(Loaded::Invalid("it is far too large".into()));
    }
    Ok(match Checkpoint::parse(&bytes) {
        Ok(cp) => Loaded::Found(cp),
        Err(e) => Loaded::Invalid(e.to_string()),
    })
}

/// The seq of a record line, read from its `{"seq":N,` prefix without parsing the rest.
pub(super) fn line_seq(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    if end == 0 || end > 20 || rest[end] != b',' {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// The first line of the audit file `path` whose seq is `seq`; `None` if there is none (or the
/// file is gone).
pub(super) fn find_line(path: &Path, seq: u64) -> Result<Option<Vec<u8>>, AuditError> {
    let lines = match Lines::open(path) {
        Ok(l) => l,
        Err(AuditError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    for line in lines {
        let line = line?;
        if !line.terminated {
            break;
        }
        match line_seq(&line.bytes) {
            Some(s) if s == seq => return Ok(Some(line.bytes)),
            _ => {}
        }
    }
    Ok(None)
}
