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
    /// The file being read, read up to `pos`, and the bytes of a line not yet ended.
    current: Option<Reading>,
    inotify: Inotify,
}

struct Reading {
    file: AuditFile,
    /// None for a file removed (by retention) before it could be opened.
    handle: Option<File>,
    partial: Vec<u8>,
    /// The line being skipped is past [`MAX_LINE`].
    skipping: bool,
    line: usize,
}

impl Follow {
    /// Follows the trail in `dir` from its end now: the next record yielded is the first one
    /// written after this returns (a line being written now included).
    pub fn from_end(dir: &Path) -> Result<Follow, AuditError> {
        let inotify = Inotify::init().map_err(|e| AuditError::io(dir, e))?;
        inotify
            .watches()
            .add(
                dir,
                WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO,
            )
            .map_err(|e| AuditError::io(dir, e))?;
        let current = match files::list(dir)?.pop() {
            Some(file) => {
                let (_, complete) = files::last_lines(&file.path, 0)?;
                let mut handle =
                    File::open(&file.path).map_err(|e| AuditError::io(&file.path, e))?;
                handle
                    .seek(SeekFrom::Start(complete))
                    .map_err(|e| AuditError::io(&file.path, e))?;
                Some(Reading::new(file, Some(handle)))
            }
            None => None,
        };
        Ok(Follow {
            dir: dir.to_path_buf(),
            current,
            inotify,
        })
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
            self.current = Some(Reading::new(next, handle));
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
        }
    }

    /// Parses every line ended since the last read.
    fn read_to_end(
        &mut self,
        out: &mut Vec<Result<AuditRecord, AuditError>>,
    ) -> Result<(), AuditError> {
        if self.handle.is_none() {
            return Ok(());
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
            let mut rest = &buf[..n];
            while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                self.line += 1;
                if !self.skipping {
                    self.partial.extend_from_slice(&rest[..end]);
                    out.push(self.parse());
                }
                self.partial.clear();
                self.skipping = false;
                rest = &rest[end + 1..];
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
