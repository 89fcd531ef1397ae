//! The audit writer (core layer): [`AuditLog`] hands events to one background thread through a
//! bounded channel; the thread numbers and chains them, batches the writes, rotates files, keeps
//! the per-agent views and syncs about once a second.
//!
//! Recording costs a channel send: under load the writer takes events in batches about once a
//! millisecond, so a sender rarely has to wake it. When the channel is full (the disk cannot keep up) `record`
//! blocks until there is room: the trail is never silently shortened.
//!
//! While an HMAC key is set the writer also keeps the signed checkpoint
//! ([`checkpoint`](super::checkpoint)) at the last record it synced: after every `fdatasync`, and
//! when the key is set, changed or cleared (those switches are written and synced at once). A
//! checkpoint that cannot be written (full disk) is logged and retried at the next sync; the trail
//! goes on.

use std::collections::HashMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use rustix::fs::{FlockOperation, Mode, OFlags};

use super::checkpoint::{
    self, checkpoint_path, Checkpoint, CheckpointStatus, Loaded, CHECKPOINT_FILE,
};
use super::files::{self, AuditFile};
use super::record::{is_agent_name, key_fingerprint, line_hash, AuditEvent, AuditRecord};
use super::{
    AuditError, Outcome, GENESIS, OP_CHECKPOINT_MISMATCH, OP_HMAC_INTERRUPTED, OP_HMAC_OFF,
    OP_HMAC_ON, SYSTEM_AGENT,
};
use clawfs_store::beneath::{self, FileMode};

/// How an [`AuditLog`] is set up. [`AuditConfig::new`] gives the defaults; the `with_*` methods
/// change one setting each; [`AuditConfig::open`] starts the log.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    dir: PathBuf,
    agents_dir: Option<PathBuf>,
    max_file_bytes: u64,
    capacity: usize,
    write_delay: Duration,
    sync_interval: Duration,
}

impl AuditConfig {
    /// Defaults for a trail in `dir`: 64 MiB files, 65,536 queued events, writes coalesced for up
    /// to 20 ms, `fdatasync` at most once a second, no per-agent views.
    pub fn new(dir: impl Into<PathBuf>) -> AuditConfig {
        AuditConfig {
            dir: dir.into(),
            agents_dir: None,
            max_file_bytes: 64 << 20,
            capacity: 65_536,
            write_delay: Duration::from_millis(20),
            sync_interval: Duration::from_secs(1),
        }
    }

    /// Also appends every record of an agent to `agents_dir/<agent>/logs/agent-YYYY-MM-DD.log`
    /// (`agents_dir` is the backing directory of `/agents`). Agents whose directory does not exist
    /// are skipped; `logs/` is created when missing.
    pub fn with_agent_logs(mut self, agents_dir: impl Into<PathBuf>) -> AuditConfig {
        self.agents_dir = Some(agents_dir.into());
        self
    }

    /// Starts a new file once the current one reaches this size.
    pub fn with_max_file_bytes(mut self, bytes: u64) -> AuditConfig {
        self.max_file_bytes = bytes.max(1);
        self
    }

    /// How many events may wait for the writer before `record` blocks.
    pub fn with_capacity(mut self, events: usize) -> AuditConfig {
        self.capacity = events.max(1);
        self
    }

    /// How long written records may sit in memory before they are handed to the kernel.
    pub fn with_write_delay(mut self, delay: Duration) -> AuditConfig {
        self.write_delay = delay;
        self
    }

    /// The longest time between a write and its `fdatasync`.
    pub fn with_sync_interval(mut self, interval: Duration) -> AuditConfig {
        self.sync_interval = interval;
        self
    }

    /// Opens the trail (creating `dir`, mode 0700), continues its chain and starts the writer.
    pub fn open(self) -> Result<AuditLog, AuditError> {
        AuditLog::start(self)
    }
}

enum Msg {
    Event(AuditEvent),
    Key(Option<[u8; 32]>),
    Flush(mpsc::Sender<Result<(), AuditError>>),
    Close(mpsc::Sender<Result<(), AuditError>>),
}

/// The audit trail being written. Share it (`Arc<AuditLog>`) between the FUSE worker threads;
/// every method takes `&self`. Dropping it writes and syncs everything recorded.
pub struct AuditLog {
    tx: Option<SyncSender<Msg>>,
    thread: Option<JoinHandle<()>>,
    lost: AtomicU64,
    /// Events queued, and those the writer has handed to the kernel since ([`AuditLog::lag`]).
    queued: AtomicU64,
    written: Arc<AtomicU64>,
    dir: PathBuf,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("dir", &self.dir).finish()
    }
}

impl AuditLog {
    /// Opens the trail in `dir` with the default settings ([`AuditConfig::new`]).
    pub fn open(dir: &Path) -> Result<AuditLog, AuditError> {
        AuditConfig::new(dir).open()
    }

    /// Settings for a trail in `dir`, to adjust before [`AuditConfig::open`].
    pub fn builder(dir: impl Into<PathBuf>) -> AuditConfig {
        AuditConfig::new(dir)
    }

    fn start(cfg: AuditConfig) -> Result<AuditLog, AuditError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cfg.dir)
            .map_err(|e| AuditError::io(&cfg.dir, e))?;
        // Root appends records (with text callers chose) here: never into a folder a symlink
        // points to, nor through a symlinked file (`O_NOFOLLOW` below).
        if fs::symlink_metadata(&cfg.dir)
            .map_err(|e| AuditError::io(&cfg.dir, e))?
            .is_symlink()
        {
            return Err(AuditError::io(
                &cfg.dir,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the trail's folder is a symlink",
                ),
            ));
        }
        let lock_path = cfg.dir.join(".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(|e| AuditError::io(&lock_path, e))?;
        rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive)
            .map_err(|_| AuditError::Locked(cfg.dir.clone()))?;

        let dir_fd = rustix::fs::open(
            &cfg.dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| AuditError::io(&cfg.dir, e.into()))?;
        remove_checkpoint_temps(&cfg.dir);

        let resume = resume(&cfg.dir)?;
        let prior = prior_checkpoint(&cfg.dir, &resume)?;
        let last = resume.last_file.as_ref().map(|file| Mark {
            seq: resume.seq,
            hash: resume.prev.clone(),
            file: file.clone(),
            signing: resume.ended_signed,
        });
        let current = match resume.file {
            Some(info) => {
                let file = OpenOptions::new()
                    .append(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&info.path)
                    .map_err(|e| AuditError::io(&info.path, e))?;
                Some(Current {
                    file,
                    info,
                    size: resume.len,
                })
            }
            None => None,
        };
        let (tx, rx) = mpsc::sync_channel(cfg.capacity);
        let written = Arc::new(AtomicU64::new(0));
        let mut writer = Writer {
            pending_events: 0,
            written_events: Arc::clone(&written),
            dir: cfg.dir.clone(),
            max_file_bytes: cfg.max_file_bytes,
            write_delay: cfg.write_delay,
            sync_interval: cfg.sync_interval,
            current,
            pending: Vec::with_capacity(256 * 1024),
            pending_since: None,
            unsynced_since: None,
            seq: resume.seq,
            prev: resume.prev,
            key: None,
            line: Vec::with_capacity(1024),
            agents: cfg.agents_dir.map(AgentLogs::new),
            error: None,
            dir_fd,
            appended: None,
            written: last.clone(),
            synced: last,
            checkpointed: None,
            checkpoint_failing: false,
            prior,
            _lock: lock,
        };
        if resume.ended_signed {
            // The previous run stopped (crashed) while signing, without its closing
            // `audit:hmac-off`: end the signed stretch so that the unsigned records of this run
            // until the key is set again are not taken for stripped ones.
            writer.append(
                AuditEvent::new(SYSTEM_AGENT, std::process::id(), OP_HMAC_INTERRUPTED, "/").reason(
                    "the previous run stopped while signing, without closing the log; \
                         records are unsigned until the key is set again",
                ),
            );
        }
        if let Some((name, bytes)) = resume.torn {
            writer.append(
                AuditEvent::new(SYSTEM_AGENT, std::process::id(), "audit:recovered", "/")
                    .bytes(bytes)
                    .reason(format!(
                        "cut a record torn by a crash ({bytes} bytes) from the end of {name}"
                    )),
            );
        }
        let thread = std::thread::Builder::new()
            .name("clawfs-audit".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| AuditError::io(&cfg.dir, e))?;
        Ok(AuditLog {
            tx: Some(tx),
            thread: Some(thread),
            lost: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            written,
            dir: cfg.dir,
        })
    }

    /// Queues one event. Costs a channel send; blocks only while the queue is full.
    pub fn record(&self, ev: AuditEvent) {
        match self.send(Msg::Event(ev)) {
            Ok(()) => {
                self.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) if self.lost.fetch_add(1, Ordering::Relaxed) == 0 => {
                tracing::error!(dir = %self.dir.display(), "audit writer has stopped; records are being lost");
            }
            Err(_) => {}
        }
    }

    /// Events queued and not yet handed to the kernel: the writer's lag, in records (it grows
    /// while the disk is full or slow).
    pub fn lag(&self) -> u64 {
        let written = self.written.load(Ordering::Relaxed);
        self.queued.load(Ordering::Relaxed).saturating_sub(written)
    }

    /// Sets or clears the HMAC key (the vault was unlocked or locked). Takes effect for the records
    /// queued after this call; writes an `audit:hmac-on` / `audit:hmac-off` record when it changes.
    pub fn set_hmac_key(&self, key: Option<[u8; 32]>) {
        if self.send(Msg::Key(key)).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until every event queued before this call is written and synced to disk. Reports the
    /// first write error since the previous flush.
    pub fn flush(&self) -> Result<(), AuditError> {
        let (tx, rx) = mpsc::channel();
        self.send(Msg::Flush(tx)).map_err(|_| AuditError::Stopped)?;
        rx.recv().map_err(|_| AuditError::Stopped)?
    }

    /// Ends the signed stretch, if any, with an `audit:hmac-off` ("the log was closed") and its
    /// checkpoint, then flushes like [`flush`](AuditLog::flush). Call it when the daemon stops (the
    /// same happens when the log is dropped): a trail whose last signed record is not an
    /// `audit:hmac-off` is taken for a crash when it is reopened. Records queued afterwards are
    /// still written, unsigned, unless the key is set again.
    pub fn close(&self) -> Result<(), AuditError> {
        let (tx, rx) = mpsc::channel();
        self.send(Msg::Close(tx)).map_err(|_| AuditError::Stopped)?;
        rx.recv().map_err(|_| AuditError::Stopped)?
    }

    /// How many events were lost because the writer had stopped (0 in normal operation).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// The trail's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn send(&self, msg: Msg) -> Result<(), ()> {
        match &self.tx {
            Some(tx) => tx.send(msg).map_err(|_| ()),
            None => Err(()),
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        // Closing the channel makes the writer drain what is queued, sync and exit.
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where the chain stands when the log is opened.
struct Resume {
    file: Option<AuditFile>,
    len: u64,
    seq: u64,
    prev: String,
    torn: Option<(String, u64)>,
    /// Name of the file holding the last record.
    last_file: Option<String>,
    /// The last record is signed and is not `audit:hmac-off`: the run that wrote it was signing
    /// when it stopped.
    ended_signed: bool,
}

/// Finds the last record, cutting a torn tail of the newest file.
fn resume(dir: &Path) -> Result<Resume, AuditError> {
    let all = files::list(dir)?;
    let mut out = Resume {
        file: all.last().cloned(),
        len: 0,
        seq: 0,
        prev: GENESIS.to_string(),
        torn: None,
        last_file: None,
        ended_signed: false,
    };
    for (i, f) in all.iter().enumerate().rev() {
        let (lines, good_len) = files::last_lines(&f.path, 16)?;
        let len = fs::metadata(&f.path)
            .map_err(|e| AuditError::io(&f.path, e))?
            .len();
        if i + 1 == all.len() {
            if len > good_len {
                let file = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&f.path)
                    .map_err(|e| AuditError::io(&f.path, e))?;
                file.set_len(good_len)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| AuditError::io(&f.path, e))?;
                out.torn = Some((f.name(), len - good_len));
            }
            out.len = good_len;
        }
        let Some(last) = lines.last() else { continue };
        out.prev = line_hash(last);
        // Lines that do not parse stay in place for `verify` to name; the numbering continues as
        // if they were records.
        let parsed = lines
            .iter()
            .enumerate()
            .rev()
            .find_map(|(j, l)| AuditRecord::parse(l).ok().map(|r| (j, r)));
        match parsed {
            Some((j, r)) => {
                out.seq = r.seq + (lines.len() - 1 - j) as u64;
                out.ended_signed =
                    j + 1 == lines.len() && r.hmac.is_some() && r.event.operation != OP_HMAC_OFF;
            }
            None => return Err(AuditError::Unresumable(f.path.clone())),
        }
        out.last_file = Some(f.name());
        break;
    }
    Ok(out)
}

/// The checkpoint found when the log was opened, and how the trail compared with it then. Its
/// HMAC can be checked only once a key is set; then a mismatch becomes an
/// `audit:checkpoint-mismatch` record, signed, so that a trail cut or rewritten while the daemon
/// was stopped is not silently covered by the new checkpoints.
struct Prior {
    found: Result<Checkpoint, String>,
    /// What does not match, when the trail no longer holds the record it names.
    problem: Option<String>,
}

fn prior_checkpoint(dir: &Path, resume: &Resume) -> Result<Option<Prior>, AuditError> {
    let cp = match checkpoint::load(&checkpoint_path(dir))? {
        Loaded::Missing => return Ok(None),
        Loaded::Invalid(why) => {
            return Ok(Some(Prior {
                found: Err(why),
                problem: None,
            }))
        }
        Loaded::Found(cp) => cp,
    };
    let problem = if cp.seq > resume.seq {
        Some(format!(
            "the trail ended at seq {} although the checkpoint of {} signed record seq {}: \
             records seq {}..={} were cut from its end",
            resume.seq,
            cp.time,
            cp.seq,
            resume.seq + 1,
            cp.seq
        ))
    } else {
        match checkpoint::find_line(&dir.join(&cp.file), cp.seq)? {
            None => Some(format!(
                "record seq {}, signed by the checkpoint of {}, is not in {}",
                cp.seq, cp.time, cp.file
            )),
            Some(line) if line_hash(&line) != cp.hash => Some(format!(
                "record seq {} in {} is not the one the checkpoint of {} signed: the trail was \
                 rewritten up to it",
                cp.seq, cp.file, cp.time
            )),
            Some(_) => None,
        }
    };
    Ok(Some(Prior {
        found: Ok(cp),
        problem,
    }))
}

/// Removes temp files left by a checkpoint write that a crash interrupted.
fn remove_checkpoint_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{CHECKPOINT_FILE}.");
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// A record's place, as a checkpoint names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mark {
    seq: u64,
    hash: String,
    file: String,
    /// Whether the records after it are signed.
    signing: bool,
}

/// `reason` of the `audit:hmac-off` written when the log is closed.
const CLOSED: &str = "the log was closed; records after this one are not signed";

struct Current {
    file: File,
    info: AuditFile,
    /// Bytes in the file (written, maybe not yet synced).
    size: u64,
}

struct Writer {
    /// Queued events appended to `pending` since it was last written, and the count of those
    /// written, shared with the [`AuditLog`].
    pending_events: u64,
    written_events: Arc<AtomicU64>,
    dir: PathBuf,
    max_file_bytes: u64,
    write_delay: Duration,
    sync_interval: Duration,
    current: Option<Current>,
    /// Complete lines for `current`, not yet written.
    pending: Vec<u8>,
    pending_since: Option<Instant>,
    unsynced_since: Option<Instant>,
    seq: u64,
    prev: String,
    key: Option<[u8; 32]>,
    line: Vec<u8>,
    agents: Option<AgentLogs>,
    /// First write error since the last flush.
    error: Option<AuditError>,
    /// The audit directory, where the checkpoint is replaced.
    dir_fd: OwnedFd,
    /// The last record appended: seq, line hash, whether records after it are signed.
    appended: Option<(u64, String, bool)>,
    /// The last record handed to the kernel.
    written: Option<Mark>,
    /// The last record known to be on disk.
    synced: Option<Mark>,
    /// What the checkpoint file holds (written by this run), and the key that signed it.
    checkpointed: Option<(Mark, [u8; 32])>,
    /// The last checkpoint write failed (warned once until one succeeds).
    checkpoint_failing: bool,
    /// The checkpoint found at open, checked when the first key is set.
    prior: Option<Prior>,
    _lock: File,
}

/// Events taken from the channel before the batch is written.
const BATCH: usize = 4096;
/// How long the writer sleeps after a batch before taking the next one (see [`Writer::run`]).
const POLL: Duration = Duration::from_millis(10);
/// Pending bytes that force a write before the delay is up.
const WRITE_AT: usize = 256 * 1024;

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        let mut replies = Vec::new();
        loop {
            let first = match self.deadline() {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            let mut closed = false;
            let received = first.is_ok();
            match first {
                Ok(msg) => {
                    self.handle(msg, &mut replies);
                    for _ in 1..BATCH {
                        match rx.try_recv() {
                            Ok(msg) => self.handle(msg, &mut replies),
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Disconnected) => {
                                closed = true;
                                break;
                            }
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => closed = true,
            }
            if closed {
                self.end_signing(CLOSED);
            }
            let now = Instant::now();
            let must_sync = closed || !replies.is_empty();
            if must_sync
                || self.pending.len() >= WRITE_AT
                || self
                    .pending_since
                    .is_some_and(|t| now >= t + self.write_delay)
            {
                self.write_pending();
                if let Some(a) = &mut self.agents {
                    a.flush();
                }
            }
            if must_sync
                || self
                    .unsynced_since
                    .is_some_and(|t| now >= t + self.sync_interval)
            {
                self.sync();
            }
            for r in replies.drain(..) {
                let _ = r.send(match self.error.take() {
                    Some(e) => Err(e),
                    None => Ok(()),
                });
            }
            if closed {
                if let Some(e) = self.error.take() {
                    tracing::error!(error = %e, "audit trail: last write failed");
                }
                return;
            }
            if received {
                // While the writer sleeps (not parked in recv) a sender's `send` is a plain queue
                // push with no wake-up system call; events arriving meanwhile are taken in one
                // batch. Only the first event after an idle spell pays for waking the writer.
                std::thread::sleep(POLL);
            }
        }
    }

    /// When the writer must wake up even if nothing arrives.
    fn deadline(&self) -> Option<Instant> {
        let w = self.pending_since.map(|t| t + self.write_delay);
        let s = self.unsynced_since.map(|t| t + self.sync_interval);
        match (w, s) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle(&mut self, msg: Msg, replies: &mut Vec<mpsc::Sender<Result<(), AuditError>>>) {
        match msg {
            Msg::Event(ev) => {
                self.append(ev);
                self.pending_events += 1;
            }
            Msg::Key(key) => self.set_key(key),
            Msg::Flush(reply) => replies.push(reply),
            Msg::Close(reply) => {
                self.end_signing(CLOSED);
                replies.push(reply);
            }
        }
    }

    /// Switches signing on, off, or to another key. Each switch is a signed record that is written,
    /// synced and checkpointed before the next record is taken.
    fn set_key(&mut self, key: Option<[u8; 32]>) {
        if key == self.key {
            return;
        }
        match key {
            None => self.end_signing("records after this one are not signed"),
            Some(k) => {
                self.end_signing(
                    "the key changed; records after this one are signed with the key of the \
                     next audit:hmac-on",
                );
                self.key = Some(k);
                let fp = key_fingerprint(&k);
                self.append(
                    AuditEvent::new(SYSTEM_AGENT, std::process::id(), OP_HMAC_ON, "/")
                        .reason(format!("hmac key {fp}")),
                );
                self.check_prior(&k);
                self.persist();
            }
        }
    }

    /// Writes a signed `audit:hmac-off` with `reason`, persists it with a checkpoint under the
    /// key, then clears the key. Nothing to do when no key is set.
    fn end_signing(&mut self, reason: &str) {
        if self.key.is_none() {
            return;
        }
        self.append(
            AuditEvent::new(SYSTEM_AGENT, std::process::id(), OP_HMAC_OFF, "/").reason(reason),
        );
        self.persist();
        self.key = None;
    }

    /// The first time a key is set in this run: checks the checkpoint found at open with it. A
    /// checkpoint this key signed that the trail no longer matches (the trail was cut or
    /// rewritten while no daemon was writing it), or one naming this key with a wrong HMAC, is
    /// recorded as `audit:checkpoint-mismatch`, which `verify` reports as tampering. A checkpoint
    /// of another key (the vault's key was rotated) cannot be checked and is replaced.
    fn check_prior(&mut self, key: &[u8; 32]) {
        let Some(prior) = self.prior.take() else {
            return;
        };
        let finding = match prior.found {
            Err(why) => Some(format!(
                "the checkpoint left by the previous run is not one ({why})"
            )),
            Ok(cp) => match cp.check(key) {
                CheckpointStatus::OtherKey => None,
                CheckpointStatus::Forged => Some(format!(
                    "the checkpoint left by the previous run (seq {}, {}) names this key but its \
                     HMAC does not match: it was forged or altered",
                    cp.seq, cp.time
                )),
                CheckpointStatus::Valid => prior.problem,
            },
        };
        if let Some(reason) = finding {
            tracing::error!(dir = %self.dir.display(), %reason, "audit trail: tampering found");
            let mut ev = AuditEvent::new(
                SYSTEM_AGENT,
                std::process::id(),
                OP_CHECKPOINT_MISMATCH,
                "/",
            )
            .reason(reason);
            ev.result = Outcome::Error;
            self.append(ev);
        }
    }

    /// Writes and syncs everything appended, then checkpoints it.
    fn persist(&mut self) {
        self.write_pending();
        self.sync();
        self.checkpoint();
    }

    /// Replaces the checkpoint with one of the last synced record, signed with the key, if a key
    /// is set and that record is not checkpointed yet. A failure (full disk) is logged, not
    /// reported: the trail goes on and the next sync tries again.
    fn checkpoint(&mut self) {
        let (Some(key), Some(mark)) = (self.key, &self.synced) else {
            return;
        };
        if self
            .checkpointed
            .as_ref()
            .is_some_and(|(m, k)| m == mark && *k == key)
        {
            return;
        }
        let cp = Checkpoint::sign(mark.seq, &mark.hash, &mark.file, mark.signing, &key);
        let written = beneath::write_atomic(
            self.dir_fd.as_fd(),
            CHECKPOINT_FILE,
            &cp.to_json(),
            FileMode::mode(0o600),
        );
        match written {
            Ok(()) => {
                if self.checkpoint_failing {
                    tracing::info!(dir = %self.dir.display(), seq = mark.seq, "audit checkpoint written again");
                    self.checkpoint_failing = false;
                }
                self.checkpointed = Some((mark.clone(), key));
            }
            Err(e) => {
                if !self.checkpoint_failing {
                    tracing::warn!(
                        dir = %self.dir.display(),
                        error = %e,
                        "cannot write the audit checkpoint; the trail goes on, and the checkpoint \
                         is retried at the next sync"
                    );
                }
                self.checkpoint_failing = true;
            }
        }
    }

    /// Numbers, chains and queues one record.
    fn append(&mut self, event: AuditEvent) {
        let date = event.time.date_naive();
        self.rotate_if_needed(date);
        self.seq += 1;
        let rec = AuditRecord {
            seq: self.seq,
            event,
            prev: std::mem::take(&mut self.prev),
            hmac: None,
        };
        rec.encode_into(self.key.as_ref(), &mut self.line);
        self.prev = line_hash(&self.line);
        let signing = self.key.is_some() && rec.event.operation != OP_HMAC_OFF;
        self.appended = Some((self.seq, self.prev.clone(), signing));
        self.pending.extend_from_slice(&self.line);
        self.pending.push(b'\n');
        self.pending_since.get_or_insert_with(Instant::now);
        if let Some(a) = &mut self.agents {
            if rec.event.is_agent() {
                a.append(&rec.event.agent, date, &self.line);
            }
        }
    }

    /// Moves to a new file for a new UTC day or when the current one is full. A record dated
    /// before the current file (the clock went back) stays in the current file, so file order is
    /// record order.
    fn rotate_if_needed(&mut self, date: NaiveDate) {
        let next = match &self.current {
            None => Some(self.free_file(date, 0)),
            Some(c) if date > c.info.date => Some(self.free_file(date, 0)),
            Some(c) if c.size + self.pending.len() as u64 >= self.max_file_bytes => {
                Some(self.free_file(c.info.date, c.info.index + 1))
            }
            Some(_) => None,
        };
        let Some(info) = next else { return };
        if self.current.is_some() {
            self.write_pending();
            if !self.pending.is_empty() {
                return; // cannot write the old file; keep appending to it
            }
            self.sync();
        }
        let opened = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&info.path)
            .and_then(|f| {
                // The new name must survive a crash as surely as the records in it.
                File::open(&self.dir).and_then(|d| d.sync_all())?;
                Ok(f)
            });
        match opened {
            Ok(file) => {
                let size = file.metadata().map(|m| m.len()).unwrap_or(0);
                self.current = Some(Current { file, info, size });
            }
            Err(e) => {
                let e = AuditError::io(&info.path, e);
                tracing::error!(error = %e, "audit trail: cannot start a new file");
                self.error.get_or_insert(e);
            }
        }
    }

    /// The first file name at or after (`date`, `index`) that does not exist yet.
    fn free_file(&self, date: NaiveDate, mut index: u32) -> AuditFile {
        loop {
            let f = AuditFile::new(&self.dir, date, index);
            if !f.path.exists() {
                return f;
            }
            index += 1;
        }
    }

    /// Hands pending lines to the kernel. On failure the file is cut back to its last complete
    /// line and the lines stay pending, to be retried.
    fn write_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let Some(c) = &mut self.current else {
            // No file could be opened; the next record retries. Back off rather than spin.
            self.pending_since = Some(Instant::now());
            return;
        };
        let mut done = 0;
        let result = loop {
            match c.file.write(&self.pending[done..]) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) if done + n == self.pending.len() => break Ok(()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        match result {
            Ok(()) => {
                c.size += self.pending.len() as u64;
                self.pending.clear();
                self.written_events
                    .fetch_add(std::mem::take(&mut self.pending_events), Ordering::Relaxed);
                self.pending_since = None;
                self.unsynced_since.get_or_insert_with(Instant::now);
                if let Some((seq, hash, signing)) = &self.appended {
                    self.written = Some(Mark {
                        seq: *seq,
                        hash: hash.clone(),
                        file: c.info.name(),
                        signing: *signing,
                    });
                }
            }
            Err(e) => {
                // Keep the complete records that fit (a full disk takes what it has room for),
                // cut the torn one, and keep the rest pending.
                let kept = self.pending[..done]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                let _ = c.file.set_len(c.size + kept as u64);
                c.size += kept as u64;
                self.pending.drain(..kept);
                let e = AuditError::io(&c.info.path, e);
                tracing::error!(error = %e, "audit trail: write failed; will retry");
                self.error.get_or_insert(e);
                // Retry in about a second rather than every write delay: a full disk is not
                // freed that fast, and rewriting a large batch again and again only churns it.
                self.pending_since = Some(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    fn sync(&mut self) {
        if self.unsynced_since.is_none() {
            return;
        }
        let Some(c) = &self.current else { return };
        match c.file.sync_data() {
            Ok(()) => {
                self.unsynced_since = None;
                self.synced.clone_from(&self.written);
                self.checkpoint();
            }
            Err(e) => {
                let e = AuditError::io(&c.info.path, e);
                tracing::error!(error = %e, "audit trail: fdatasync failed");
                self.error.get_or_insert(e);
                // Retry after the next interval rather than spin.
                self.unsynced_since = Some(Instant::now());
            }
        }
    }
}

/// The per-agent views: `agents_dir/<agent>/logs/agent-YYYY-MM-DD.log`. Best effort: the trail
/// in `.clawfs/audit` is the record; failures here are logged, not reported.
struct AgentLogs {
    dir: PathBuf,
    open: HashMap<String, (NaiveDate, BufWriter<File>)>,
    /// Agents with no directory, and when that was seen (re-checked after [`RECHECK`]).
    missing: HashMap<String, Instant>,
}

/// How long an agent without a directory is skipped before looking again.
const RECHECK: Duration = Duration::from_secs(10);
/// Open per-agent files kept at most.
const MAX_OPEN: usize = 256;

impl AgentLogs {
    fn new(dir: PathBuf) -> AgentLogs {
        AgentLogs {
            dir,
            open: HashMap::new(),
            missing: HashMap::new(),
        }
    }

    fn append(&mut self, agent: &str, date: NaiveDate, line: &[u8]) {
        debug_assert!(is_agent_name(agent));
        if let Some(t) = self.missing.get(agent) {
            if t.elapsed() < RECHECK {
                return;
            }
            self.missing.remove(agent);
        }
        let current = matches!(self.open.get(agent), Some((d, _)) if *d == date);
        if !current {
            if let Some((_, mut w)) = self.open.remove(agent) {
                let _ = w.flush();
            }
            if self.open.len() >= MAX_OPEN {
                self.flush();
                self.open.clear();
            }
            match self.open_file(agent, date) {
                Ok(Some(f)) => {
                    self.open.insert(
                        agent.to_string(),
                        (date, BufWriter::with_capacity(16 * 1024, f)),
                    );
                }
                Ok(None) => {
                    self.missing.insert(agent.to_string(), Instant::now());
                    return;
                }
                Err(e) => {
                    tracing::warn!(agent, error = %e, "cannot open the agent's audit view");
                    self.missing.insert(agent.to_string(), Instant::now());
                    return;
                }
            }
        }
        if let Some((_, w)) = self.open.get_mut(agent) {
            if let Err(e) = w.write_all(line).and_then(|()| w.write_all(b"\n")) {
                tracing::warn!(agent, error = %e, "cannot write the agent's audit view");
            }
        }
    }

    /// Opens (creating) today's file without following symlinks at any step, so that an agent
    /// cannot point its `logs` at someone else's file. `None` when the agent has no directory.
    fn open_file(&self, agent: &str, date: NaiveDate) -> io::Result<Option<File>> {
        let dir_flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
        let agents = rustix::fs::open(&self.dir, dir_flags, Mode::empty())?;
        let agent_dir = match rustix::fs::openat(&agents, agent, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let logs = match rustix::fs::openat(&agent_dir, "logs", dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(&agent_dir, "logs", Mode::from_raw_mode(0o750)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::openat(&agent_dir, "logs", dir_flags, Mode::empty())?
            }
            Err(e) => return Err(e.into()),
        };
        let name = format!("agent-{}.log", date.format("%Y-%m-%d"));
        let fd = rustix::fs::openat(
            logs.as_fd(),
            name.as_str(),
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o640),
        )?;
        Ok(Some(File::from(fd)))
    }

    fn flush(&mut self) {
        for (agent, (_, w)) in &mut self.open {
            if let Err(e) = w.flush() {
                tracing::warn!(agent = agent.as_str(), error = %e, "cannot write the agent's audit view");
            }
        }
    }
}
