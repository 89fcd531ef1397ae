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
//! With the key, the signed checkpoint ([`super::checkpoint`]) must be there and match:
//! - a trail **rebuilt** without its signatures, or with records removed and renumbered: the
//!   record at the checkpoint's seq no longer has the hash it signed;
//! - a trail **truncated** at its end: it stops before the checkpoint's seq;
//! - the checkpoint **missing**, or **bad** (forged, or signed with another key).
//!
//! A torn last line of the newest file is a write in progress (or a crash not yet recovered by the
//! writer) and is reported, not counted as tampering.

use std::fmt;
use std::io;
use std::iter::Peekable;
use std::path::{Path, PathBuf};

use super::checkpoint::{self, checkpoint_path, Checkpoint, CheckpointStatus, Loaded};
use super::files::{self, AuditFile, Line, Lines};
use super::record::{check_line_hmac, key_fingerprint, line_hash, AuditRecord};
use super::{
    AuditError, GENESIS, OP_CHECKPOINT_MISMATCH, OP_HMAC_INTERRUPTED, OP_HMAC_OFF, OP_HMAC_ON,
    SYSTEM_AGENT,
};

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
    /// Verifying with a key, but the trail has no checkpoint.
    CheckpointMissing,
    /// The checkpoint is not one, names another key, or its HMAC does not match.
    BadCheckpoint,
    /// The record at the checkpoint's seq is not the one it signed (or is not in the trail).
    CheckpointMismatch,
    /// The trail ends before the record the checkpoint signed.
    Truncated {
        /// First missing seq.
        first: u64,
        /// The checkpoint's seq.
        last: u64,
    },
    /// An `audit:checkpoint-mismatch` record: the writer found that the trail no longer matched
    /// the checkpoint an earlier run left.
    TamperReported,
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
            BreakKind::CheckpointMissing => f.write_str("checkpoint missing"),
            BreakKind::BadCheckpoint => f.write_str("bad checkpoint"),
            BreakKind::CheckpointMismatch => f.write_str("not what the checkpoint signed"),
            BreakKind::Truncated { first, last } if first == last => {
                write!(f, "truncated (seq {first} cut)")
            }
            BreakKind::Truncated { first, last } => {
                write!(f, "truncated (seq {first}..={last} cut)")
            }
            BreakKind::TamperReported => f.write_str("a tampering report"),
        }
    }
}

/// The first record where the trail is not what was written, or what is wrong with its
/// checkpoint (then `line` is 0 and `file` is the checkpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenRecord {
    /// The file holding it.
    pub file: PathBuf,
    /// Its 1-based line number in that file; 0 for a finding about the checkpoint or the trail's
    /// end.
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
        if self.line == 0 {
            return write!(f, "{}: {}", self.kind, self.detail);
        }
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
    /// The trail's checkpoint, when a key was given and it is signed with it.
    pub checkpoint: Option<Checkpoint>,
    /// Saved copies of earlier checkpoints ([`VerifyOptions::saved_checkpoints`]) that are signed
    /// with the key and whose record the trail holds.
    pub saved_checkpoints: usize,
    /// Good records after the checkpoint's: not covered by it.
    pub after_checkpoint: u64,
    /// Of those, the unsigned ones (written while no key was set): nothing shows whether they were
    /// changed, or cut from the end.
    pub unsigned_after_checkpoint: u64,
    /// Seqs of `audit:hmac-interrupted` records: a run stopped (crashed) while signing.
    pub interrupted: Vec<u64>,
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

/// What [`verify_with`] checks besides the chain.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifyOptions<'a> {
    /// The audit key: record HMACs are checked, and the trail's checkpoint must be signed with it
    /// and match.
    pub key: Option<&'a [u8; 32]>,
    /// Copies of earlier checkpoints kept elsewhere (e.g. off the host): each must be signed with
    /// `key` and its record must be in the trail unchanged. This catches an older checkpoint put
    /// back in place of the newest, with the trail cut back to it. Ignored without `key`.
    pub saved_checkpoints: &'a [PathBuf],
}

/// A checkpoint the trail must satisfy.
struct Expect {
    cp: Checkpoint,
    /// Where it was read, for messages.
    path: PathBuf,
    /// Its record was reached.
    seen: bool,
}

/// [`verify_with`] with only a key.
pub fn verify(dir: &Path, key: Option<&[u8; 32]>) -> Result<VerifyReport, AuditError> {
    verify_with(
        dir,
        &VerifyOptions {
            key,
            ..VerifyOptions::default()
        },
    )
}

/// Reads the checkpoint at `path` and checks it with `key`: the checkpoint, or why it cannot be
/// trusted.
fn expect(
    path: &Path,
    key: &[u8; 32],
    required: bool,
) -> Result<Result<Expect, BrokenRecord>, AuditError> {
    let bad = |kind, detail: String| {
        Ok(Err(BrokenRecord {
            file: path.to_path_buf(),
            line: 0,
            seq: None,
            kind,
            detail,
        }))
    };
    let cp = match checkpoint::load(path)? {
        Loaded::Found(cp) => cp,
        Loaded::Missing if required => {
            return bad(
                BreakKind::CheckpointMissing,
                format!(
                    "{} does not exist: it is written whenever records are signed, so it was \
                     deleted, or this trail was never signed",
                    path.display()
                ),
            )
        }
        Loaded::Missing => {
            return Err(AuditError::io(
                path,
                io::Error::from(io::ErrorKind::NotFound),
            ))
        }
        Loaded::Invalid(why) => {
            return bad(
                BreakKind::BadCheckpoint,
                format!("{} is not a checkpoint: {why}", path.display()),
            )
        }
    };
    match cp.check(key) {
        CheckpointStatus::Valid => Ok(Ok(Expect {
            cp,
            path: path.to_path_buf(),
            seen: false,
        })),
        CheckpointStatus::OtherKey => bad(
            BreakKind::BadCheckpoint,
            format!(
                "{} is signed with key {}, not with the key given ({}): give the audit key in \
                 force when it was written (the vault's current one)",
                path.display(),
                cp.key,
                key_fingerprint(key)
            ),
        ),
        CheckpointStatus::Forged => bad(
            BreakKind::BadCheckpoint,
            format!(
                "the HMAC of {} does not match the key: it was forged or altered",
                path.display()
            ),
        ),
    }
}

/// Replays every file of `dir` in order and checks each record: it parses, its seq follows the
/// previous one, its `prev` is the SHA-256 of the previous line, and — with a key — its HMAC, and
/// that the trail holds, unchanged, the record the checkpoint signed (and the saved ones').
/// I/O errors are errors; tampering is reported in [`VerifyReport::broken`].
pub fn verify_with(dir: &Path, opts: &VerifyOptions<'_>) -> Result<VerifyReport, AuditError> {
    let key = opts.key;
    // The checkpoints are read before the trail: the writer only moves the checkpoint forward
    // after syncing the records it names, so a trail read afterwards reaches at least as far.
    let mut expects: Vec<Expect> = Vec::new();
    let mut checkpoint_problem: Option<BrokenRecord> = None;
    if let Some(k) = key {
        let paths = std::iter::once((checkpoint_path(dir), true))
            .chain(opts.saved_checkpoints.iter().map(|p| (p.clone(), false)));
        for (path, required) in paths {
            match expect(&path, k, required)? {
                Ok(e) => expects.push(e),
                Err(b) => {
                    checkpoint_problem.get_or_insert(b);
                }
            }
        }
    }
    let files = files::list(dir)?;
    let mut report = VerifyReport {
        files: files.len(),
        ..VerifyReport::default()
    };
    if checkpoint_problem.is_none() {
        report.checkpoint = expects.first().map(|e| e.cp.clone());
    }
    let store_cp_seq = report.checkpoint.as_ref().map(|c| c.seq);
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
        if rec.event.operation == OP_HMAC_ON {
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
            (None, _)
                if signing.is_some()
                    && rec.event.operation == OP_HMAC_INTERRUPTED
                    && rec.event.agent == SYSTEM_AGENT =>
            {
                // A run crashed while signing; the next one ended the stretch.
                signing = None;
                report.interrupted.push(seq);
            }
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
        if rec.event.operation == OP_HMAC_OFF {
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

        // What the writer itself reported.
        if rec.event.operation == OP_CHECKPOINT_MISMATCH && rec.event.agent == SYSTEM_AGENT {
            report.broken = Some(broken(
                Some(seq),
                BreakKind::TamperReported,
                format!(
                    "when the key was set, the daemon found: {}",
                    rec.event.reason.as_deref().unwrap_or("(no reason given)")
                ),
            ));
            break;
        }

        // The checkpoints: the record each signed must be here, unchanged.
        let this_file = item
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut mismatch = None;
        for e in expects.iter_mut().filter(|e| !e.seen) {
            if seq < e.cp.seq {
                continue;
            }
            e.seen = true;
            let which = format!("the checkpoint of {} ({})", e.cp.time, e.path.display());
            if seq > e.cp.seq {
                mismatch = Some(format!(
                    "the trail starts after record seq {}, which {which} signed: the files \
                     holding it were removed",
                    e.cp.seq
                ));
            } else if line_hash(&item.line.bytes) != e.cp.hash {
                mismatch = Some(format!(
                    "its hash is not the one {which} signed: it, or the trail before it, was \
                     rewritten (records removed or renumbered, signatures stripped, the chain \
                     recomputed)"
                ));
            } else if this_file != e.cp.file {
                mismatch = Some(format!(
                    "{which} places it in {}: records were moved between files",
                    e.cp.file
                ));
            } else if e.cp.signing && signing.is_none() {
                // The records after it are signed, even if the trail no longer shows where the
                // signed stretch began (older files removed).
                signing = Some(e.cp.key.clone());
            }
            if mismatch.is_some() {
                break;
            }
        }
        if let Some(detail) = mismatch {
            report.broken = Some(broken(Some(seq), BreakKind::CheckpointMismatch, detail));
            break;
        }
        if store_cp_seq.is_some_and(|c| seq > c) {
            report.after_checkpoint += 1;
            if rec.hmac.is_none() {
                report.unsigned_after_checkpoint += 1;
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
    if report.broken.is_none() {
        report.broken = checkpoint_problem;
    }
    if report.broken.is_none() {
        if let Some(e) = expects.iter().find(|e| !e.seen) {
            let first = report.last_seq.map_or(1, |s| s + 1);
            let ends = match report.last_seq {
                Some(s) => format!("the trail ends at seq {s}"),
                None => "the trail holds no record".to_string(),
            };
            report.broken = Some(BrokenRecord {
                file: e.path.clone(),
                line: 0,
                seq: None,
                kind: BreakKind::Truncated {
                    first,
                    last: e.cp.seq,
                },
                detail: format!(
                    "{ends}, but the checkpoint of {} ({}) signed record seq {} in {}: records \
                     were cut from its end",
                    e.cp.time,
                    e.path.display(),
                    e.cp.seq,
                    e.cp.file
                ),
            });
        }
    }
    if report.broken.is_none() {
        report.saved_checkpoints = expects.len().saturating_sub(1);
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
