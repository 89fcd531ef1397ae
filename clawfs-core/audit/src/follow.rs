//! Following the trail as it grows (core layer): the records the writer appends from now on,
//! across the next day's file and the next file of a day, woken by inotify rather than by
//! polling. `clawfs audit tail --follow` and `clawfs top` read the trail so.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::{Inotify, WatchMask};

use super::files::{self, AuditFile};
use super::record::AuditRecord;
use super::AuditError;

/// A line longer than this is no record the writer makes: it is reported and skipped rather
/// than held in memory while it grows.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The trail's records from a point on, as they are appended.
pub struct Follow {
    dir: PathBuf,
    /// The file being read.
    current: Option<Reading>,
    inotify: Inotify,
    /// Whether the audit folder is watched (it may not exist yet).
    watching: bool,
}

struct Reading {
    file: AuditFile,
    /// None for a file removed (by retention) before it could be opened.
    handle: Option<File>,
    partial: Vec<u8>,
    /// The line being skipped is past [`MAX_LINE`].
    skipping: bool,
    line: usize,
    /// Bytes read from the file.
    pos: u64,
    /// The last record's `seq` yielded (0: none yet): none at or before it is yielded again.
    last_seq: u64,
    /// The file was read again from its start since the last record that followed on.
    reread: bool,
}

impl Follow {
    /// Follows the trail in `dir` from its end now: the next record yielded is the first one
    /// written after this returns (a line being written now included).
    pub fn from_end(dir: &Path) -> Result<Follow, AuditError> {
        let inotify = Inotify::init().map_err(|e| AuditError::io(dir, e))?;
        let mut follow = Follow {
            dir: dir.to_path_buf(),
            current: None,
            inotify,
            watching: false,
        };
        follow.watch()?;
        if let Some(file) = files::list(dir)?.pop() {
            let (last, complete) = files::last_lines(&file.path, 1)?;
            let last_seq = last
                .first()
                .and_then(|l| AuditRecord::parse(l).ok())
                .map_or(0, |r| r.seq);
            let mut handle = crate::files::open_file(&file.path)?;
            handle
                .seek(SeekFrom::Start(complete))
                .map_err(|e| AuditError::io(&file.path, e))?;
            let mut reading = Reading::new(file, Some(handle));
            reading.pos = complete;
            reading.last_seq = last_seq;
            follow.current = Some(reading);
        }
        Ok(follow)
    }

    /// Watches the audit folder, if it exists yet (a store never served has none).
    fn watch(&mut self) -> Result<(), AuditError> {
        if self.watching {
            return Ok(());
        }
        let mask = WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO;
        match self.inotify.watches().add(&self.dir, mask) {
            Ok(_) => {
                self.watching = true;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(AuditError::io(&self.dir, e)),
        }
    }

    /// The records appended since the last call, oldest first, waiting up to `wait` for the
    /// first of them (none if none came). A line that is not a record is an error in its place.
    pub fn next_batch(
        &mut self,
        wait: Duration,
    ) -> Result<Vec<Result<AuditRecord, AuditError>>, AuditError> {
        let mut out = Vec::new();
        self.drain(&mut out)?;
        if out.is_empty() {
            self.wait(wait)?;
            self.drain(&mut out)?;
        }
        Ok(out)
    }

    /// Sleeps until the audit folder changes or `wait` passes, and forgets what changed (the
    /// files are read to their ends next whatever it was).
    fn wait(&mut self, wait: Duration) -> Result<(), AuditError> {
        self.watch()?;
        if !self.watching {
            std::thread::sleep(wait.min(Duration::from_secs(1)));
            return Ok(());
        }
        let ts = rustix::time::Timespec {
            tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let fd = self.inotify.as_fd();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(AuditError::io(&self.dir, e.into())),
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.inotify.read_events(&mut buf) {
                Ok(mut events) => {
                    if events.next().is_none() {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(AuditError::io(&self.dir, e)),
            }
        }
    }

    /// Reads every file to its end, moving on to a later file once one exists (the writer
    /// never goes back to an earlier one).
    fn drain(&mut self, out: &mut Vec<Result<AuditRecord, AuditError>>) -> Result<(), AuditError> {
        loop {
            if let Some(r) = &mut self.current {
                r.read_to_end(out)?;
            }
            let later = files::list(&self.dir)?
                .into_iter()
                .find(|f| self.current.as_ref().is_none_or(|r| *f > r.file));
            let Some(next) = later else {
                return Ok(());
            };
            if let Some(r) = &mut self.current {
                // Written before the next file was made: read after seeing it.
                r.read_to_end(out)?;
                r.torn(out);
            }
            let handle = match File::open(&next.path) {
                Ok(h) => Some(h),
                // Removed (retention) since it was listed: on to the one after it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(AuditError::io(&next.path, e)),
            };
            let last_seq = self.current.as_ref().map_or(0, |r| r.last_seq);
            let mut reading = Reading::new(next, handle);
            reading.last_seq = last_seq;
            self.current = Some(reading);
        }
    }
}

impl Reading {
    fn new(file: AuditFile, handle: Option<File>) -> Reading {
        Reading {
            file,
            handle,
            partial: Vec::new(),
            skipping: false,
            line: 0,
            pos: 0,
            last_seq: 0,
            reread: false,
        }
    }

    /// Reads the file again from its start: what was read no longer holds (the file was cut
    /// back and written again, as the trail's recovery after a crash does). Records already
    /// yielded are known by their `seq`.
    fn reread(&mut self) -> Result<(), AuditError> {
        if let Some(h) = &mut self.handle {
            h.seek(SeekFrom::Start(0))
                .map_err(|e| AuditError::io(&self.file.path, e))?;
        }
        self.pos = 0;
        self.line = 0;
        self.partial.clear();
        self.skipping = false;
        self.reread = true;
        Ok(())
    }

    /// Parses every line ended since the last read.
    fn read_to_end(
        &mut self,
        out: &mut Vec<Result<AuditRecord, AuditError>>,
    ) -> Result<(), AuditError> {
        let Some(handle) = &mut self.handle else {
            return Ok(());
        };
        // Cut back below what was read: read again.
        let size = handle
            .metadata()
            .map_err(|e| AuditError::io(&self.file.path, e))?
            .len();
        if size < self.pos {
            self.reread()?;
        }
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let read = self.handle.as_mut().map_or(Ok(0), |h| h.read(&mut buf));
            let n = match read {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(AuditError::io(&self.file.path, e)),
            };
            self.pos += n as u64;
            let mut stale = false;
            let mut rest = &buf[..n];
            while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                self.line += 1;
                if !self.skipping {
                    self.partial.extend_from_slice(&rest[..end]);
                    if !self.take_line(out)? {
                        // Read again from the start: this buffer is stale.
                        stale = true;
                        break;
                    }
                }
                self.partial.clear();
                self.skipping = false;
                rest = &rest[end + 1..];
            }
            if stale {
                continue;
            }
            if !self.skipping {
                self.partial.extend_from_slice(rest);
                if self.partial.len() > MAX_LINE {
                    self.partial = Vec::new();
                    self.skipping = true;
                    out.push(Err(self.not_a_record("a line longer than 16 MiB")));
                }
            }
        }
    }

    /// Takes the line in `partial`: a record that follows the last one on is yielded, one
    /// already yielded is skipped. A line that is not a record, or a record that does not
    /// follow on, means what was read no longer holds (a crash's torn tail cut and written
    /// over): the file is read again from its start, once; `false` then. Read again, what is
    /// still wrong is reported (not a record) or yielded (a trail with a gap).
    fn take_line(
        &mut self,
        out: &mut Vec<Result<AuditRecord, AuditError>>,
    ) -> Result<bool, AuditError> {
        let parsed = self.parse();
        let follows = |seq: u64| self.last_seq == 0 || seq == self.last_seq + 1;
        match parsed {
            Ok(rec) if self.last_seq != 0 && rec.seq <= self.last_seq => Ok(true),
            Ok(rec) if follows(rec.seq) || self.reread => {
                self.last_seq = rec.seq;
                self.reread = false;
                out.push(Ok(rec));
                Ok(true)
            }
            Err(e) if self.reread || self.last_seq == 0 => {
                out.push(Err(e));
                Ok(true)
            }
            _ => {
                self.reread()?;
                Ok(false)
            }
        }
    }

    /// The line in `partial` as a record.
    fn parse(&self) -> Result<AuditRecord, AuditError> {
        AuditRecord::parse(&self.partial).map_err(|source| AuditError::Parse {
            file: self.file.path.clone(),
            line: self.line,
            source,
        })
    }

    /// The file ends (a later one exists) in a line never ended: a torn write.
    fn torn(&mut self, out: &mut Vec<Result<AuditRecord, AuditError>>) {
        if !self.partial.is_empty() {
            self.line += 1;
            out.push(Err(self.not_a_record("a torn last line")));
            self.partial.clear();
        }
    }

    fn not_a_record(&self, what: &str) -> AuditError {
        AuditError::io(
            &self.file.path,
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line {}: {what}, not a record", self.line + 1),
            ),
        )
    }
}
