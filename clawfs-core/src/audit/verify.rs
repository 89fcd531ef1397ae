//! Replaying the audit trail and naming its first broken record (core layer).
//!
//! How each kind of tampering shows:
//! - **edited** record R: the next record's `prev` no longer matches R's line (R is named); with an
//!   HMAC key, R's own HMAC fails first;
//! - **deleted** records: `seq` jumps forward and the skipped numbers never appear;
//! - **reordered** records: `seq` jumps forward and a skipped number appears later, or `seq` goes
//!   backwards;
//! - a line that is not a record: **unparsable**.
//!
//! A torn last line of the newest file is a write in progress (or a crash not yet recovered by the
//! writer) and is reported, not counted as tampering.

use std::fmt;
use std::iter::Peekable;
use std::path::{Path, PathBuf};

use super::files::{self, AuditFile, Line, Lines};
use super::record::{check_line_hmac, key_fingerprint, line_hash, AuditRecord};
use super::{AuditError, GENESIS};

/// How far `verify` reads ahead to tell a deletion from a reordering.
const LOOKAHEAD: usize = 100_000;

/// What is wrong with a broken record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakKind {
    /// Its bytes changed after it was written.
    Edited,
    /// Records `first..=last` are missing just before it.
    Deleted {
        /// First missing seq.
        first: u64,
        /// Last missing seq.
        last: u64,
    },
    /// It is out of order (moved, swapped or duplicated).
    Reordered,
    /// The line is not a record.
    Unparsable,
    /// Its HMAC does not match the key given.
    BadHmac,
    /// It carries no HMAC although it was written while a key was set.
    MissingHmac,
}

impl fmt::Display for BreakKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakKind::Edited => f.write_str("edited"),
            BreakKind::Deleted { first, last } if first == last => {
                write!(f, "deleted (seq {first})")
            }
            BreakKind::Deleted { first, last } => write!(f, "deleted (seq {first}..={last})"),
            BreakKind::Reordered => f.write_str("reordered"),
            BreakKind::Unparsable => f.write_str("unparsable"),
            BreakKind::BadHmac => f.write_str("bad hmac"),
            BreakKind::MissingHmac => f.write_str("missing hmac"),
        }
    }
}

/// The first record where the trail is not what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenRecord {
    /// The file holding it.
    pub file: PathBuf,
    /// Its 1-based line number in that file.
    pub line: usize,
    /// Its seq, when the line parses.
    pub seq: Option<u64>,
    /// What is wrong.
    pub kind: BreakKind,
    /// One sentence of detail.
    pub detail: String,
}

impl fmt::Display for BrokenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        match self.seq {
            Some(seq) => write!(f, "record seq {seq} ({name} line {})", self.line)?,
            None => write!(f, "{name} line {}", self.line)?,
        }
        write!(f, " is {}: {}", self.kind, self.detail)
    }
}

/// The outcome of replaying the trail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Audit files read.
    pub files: usize,
    /// Records that passed every check, up to the first broken one.
    pub records: u64,
    /// Seq of the first record.
    pub first_seq: Option<u64>,
    /// Seq of the last good record.
    pub last_seq: Option<u64>,
    /// The trail does not start at seq 1 (older files were removed).
    pub head_missing: bool,
    /// Records whose HMAC was checked against the key given.
    pub hmac_checked: u64,
    /// Records signed with a key other than the one given (or checked without a key).
    pub hmac_unchecked: u64,
    /// The newest file ends in a partial line (a write in progress, or a crash).
    pub torn_tail: bool,
    /// The first broken record; `None` when the trail is intact.
    pub broken: Option<BrokenRecord>,
}

impl VerifyReport {
    /// Whether every record passed.
    pub fn is_intact(&self) -> bool {
        self.broken.is_none()
    }
}

/// One line of the trail with where it is.
struct Item {
    file: PathBuf,
    line: Line,
    last_file: bool,
}

/// All lines of all files, in trail order.
struct Trail {
    files: std::vec::IntoIter<AuditFile>,
    remaining: usize,
    current: Option<(PathBuf, Lines)>,
}

impl Trail {
    fn new(files: Vec<AuditFile>) -> Trail {
        Trail {
            remaining: files.len(),
            files: files.into_iter(),
            current: None,
        }
    }
}

impl Iterator for Trail {
    type Item = Result<Item, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((path, lines)) = &mut self.current {
                match lines.next() {
                    Some(Ok(line)) => {
                        return Some(Ok(Item {
                            file: path.clone(),
                            line,
                            last_file: self.remaining == 0,
                        }))
                    }
                    Some(Err(e)) => return Some(Err(e)),
                    None => self.current = None,
                }
            }
            let f = self.files.next()?;
            self.remaining -= 1;
            match Lines::open(&f.path) {
                Ok(lines) => self.current = Some((f.path, lines)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The last good record: what the next one must link to.
struct Prev {
    seq: u64,
    hash: String,
    file: PathBuf,
    line: usize,
}

/// Replays every file of `dir` in order and checks each record: it parses, its seq follows the
/// previous one, its `prev` is the SHA-256 of the previous line, and — with `key` — its HMAC.
/// I/O errors are errors; tampering is reported in [`VerifyReport::broken`].
pub fn verify(dir: &Path, key: Option<&[u8; 32]>) -> Result<VerifyReport, AuditError> {
    let files = files::list(dir)?;
    let mut report = VerifyReport {
        files: files.len(),
        ..VerifyReport::default()
    };
    let key_fp = key.map(key_fingerprint);
    // Fingerprint of the key the writer signed with at this point of the trail.
    let mut signing: Option<String> = None;
    let mut prev: Option<Prev> = None;
    let mut trail = Trail::new(files).peekable();

    while let Some(item) = trail.next() {
        let item = item?;
        let broken = |seq, kind, detail: String| BrokenRecord {
            file: item.file.clone(),
            line: item.line.number,
            seq,
            kind,
            detail,
        };
        if !item.line.terminated {
            if item.last_file {
                report.torn_tail = true;
                break;
            }
            report.broken = Some(broken(
                None,
                BreakKind::Unparsable,
                "the file ends in the middle of a record although a newer file follows".into(),
            ));
            break;
        }
        let rec = match AuditRecord::parse(&item.line.bytes) {
            Ok(r) => r,
            Err(e) => {
                report.broken = Some(broken(None, BreakKind::Unparsable, e.to_string()));
                break;
            }
        };
        let seq = rec.seq;

        // The record's own signature: definitive for this record.
        if rec.event.operation == "audit:hmac-on" {
            signing = rec
                .event
                .reason
                .as_deref()
                .and_then(|r| r.strip_prefix("hmac key "))
                .map(str::to_string);
        }
        match (&rec.hmac, key) {
            (Some(_), Some(k)) => match check_line_hmac(&item.line.bytes, k) {
                Some(true) => report.hmac_checked += 1,
                _ if signing.is_some() && signing == key_fp => {
                    report.broken = Some(broken(
                        Some(seq),
                        BreakKind::BadHmac,
                        "its HMAC does not match the key: the record was changed".into(),
                    ));
                    break;
                }
                _ => report.hmac_unchecked += 1,
            },
            (Some(_), None) => report.hmac_unchecked += 1,
            (None, _) if signing.is_some() => {
                report.broken = Some(broken(
                    Some(seq),
                    BreakKind::MissingHmac,
                    "it was written while records were signed but carries no HMAC".into(),
                ));
                break;
            }
            (None, _) => {}
        }
        if rec.event.operation == "audit:hmac-off" {
            signing = None;
        }

        // Its place in the chain.
        match &prev {
            None => {
                report.first_seq = Some(seq);
                if seq == 1 && rec.prev != GENESIS {
                    report.broken = Some(broken(
                        Some(seq),
                        BreakKind::Edited,
                        "the first record does not link to the start of the chain".into(),
                    ));
                    break;
                }
                report.head_missing = seq != 1;
            }
            Some(p) => {
                let expected = p.seq + 1;
                if seq > expected {
                    let (kind, detail) = diagnose_jump(expected, seq, &mut trail);
                    report.broken = Some(broken(Some(seq), kind, detail));
                    break;
                }
                if seq < expected {
                    report.broken = Some(broken(
                        Some(seq),
                        BreakKind::Reordered,
                        format!("seq {seq} follows seq {}", p.seq),
                    ));
                    break;
                }
                if rec.prev != p.hash {
                    let this_hash = line_hash(&item.line.bytes);
                    let next_confirms_this = match trail.peek() {
                        Some(Ok(next)) => AuditRecord::parse(&next.line.bytes)
                            .map(|n| n.prev == this_hash)
                            .unwrap_or(true),
                        _ => true,
                    };
                    report.broken = Some(if next_confirms_this {
                        BrokenRecord {
                            file: p.file.clone(),
                            line: p.line,
                            seq: Some(p.seq),
                            kind: BreakKind::Edited,
                            detail: format!(
                                "its bytes no longer match the hash stored in record seq {seq}"
                            ),
                        }
                    } else {
                        broken(
                            Some(seq),
                            BreakKind::Edited,
                            "its link to the previous record was changed".into(),
                        )
                    });
                    break;
                }
            }
        }
        report.records += 1;
        report.last_seq = Some(seq);
        prev = Some(Prev {
            seq,
            hash: line_hash(&item.line.bytes),
            file: item.file,
            line: item.line.number,
        });
    }
    Ok(report)
}

/// Seq jumped from `expected - 1` to `found`: an edited seq, a reordering or a deletion.
fn diagnose_jump<I>(expected: u64, found: u64, rest: &mut Peekable<I>) -> (BreakKind, String)
where
    I: Iterator<Item = Result<Item, AuditError>>,
{
    for (i, item) in rest.take(LOOKAHEAD).enumerate() {
        let Ok(item) = item else { break };
        let Ok(rec) = AuditRecord::parse(&item.line.bytes) else {
            continue;
        };
        if i == 0 && rec.seq == expected + 1 {
            return (
                BreakKind::Edited,
                format!(
                    "its seq was changed from {expected}: the next record is {}",
                    rec.seq
                ),
            );
        }
        if (expected..found).contains(&rec.seq) {
            let name = item
                .file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            return (
                BreakKind::Reordered,
                format!(
                    "it stands where seq {expected} belongs; seq {} comes later ({name} line {})",
                    rec.seq, item.line.number
                ),
            );
        }
    }
    let detail = if found - 1 == expected {
        format!("record seq {expected} before it is missing")
    } else {
        format!(
            "records seq {expected}..={} before it are missing",
            found - 1
        )
    };
    (
        BreakKind::Deleted {
            first: expected,
            last: found - 1,
        },
        detail,
    )
}
