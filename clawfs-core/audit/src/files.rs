//! Audit file names, their order, and line-level reading (core layer).
//!
//! Files are `audit-YYYY-MM-DD.jsonl` (the first of a UTC day) and `audit-YYYY-MM-DD.N.jsonl`
//! (N = 1, 2, … when the day's file reached the size limit). The trail is their concatenation in
//! (date, N) order.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use chrono::NaiveDate;

use super::AuditError;

/// One audit file and its place in the trail.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditFile {
    /// The UTC day its records were written.
    pub date: NaiveDate,
    /// 0 for the day's first file, N for `audit-DATE.N.jsonl`.
    pub index: u32,
    /// Full path.
    pub path: PathBuf,
}

impl AuditFile {
    /// The file for `date`/`index` in `dir`.
    pub fn new(dir: &Path, date: NaiveDate, index: u32) -> AuditFile {
        let name = if index == 0 {
            format!("audit-{}.jsonl", date.format("%Y-%m-%d"))
        } else {
            format!("audit-{}.{index}.jsonl", date.format("%Y-%m-%d"))
        };
        AuditFile {
            date,
            index,
            path: dir.join(name),
        }
    }

    /// Parses a file name; `None` for anything that is not an audit file.
    pub fn parse_name(dir: &Path, name: &str) -> Option<AuditFile> {
        let rest = name.strip_prefix("audit-")?.strip_suffix(".jsonl")?;
        let (date, index) = match rest.split_once('.') {
            Some((d, n)) => {
                let n: u32 = n.parse().ok()?;
                if n == 0 || n.to_string() != rest[d.len() + 1..] {
                    return None;
                }
                (d, n)
            }
            None => (rest, 0),
        };
        if date.len() != 10 {
            return None;
        }
        let date = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
        Some(AuditFile::new(dir, date, index))
    }

    /// The file name, for messages.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// The most one record's line may be: longer is a damaged file, not a record to hold in memory.
const MAX_LINE: u64 = 1 << 20;

/// Opens the audit file `path` for reading: never through a symlink, only a regular file, and
/// without blocking (in a store that hosts share, another host's root writes these folders).
pub fn open_file(path: &Path) -> Result<File, AuditError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| AuditError::io(path, e))?;
    match file
        .metadata()
        .map_err(|e| AuditError::io(path, e))?
        .is_file()
    {
        true => Ok(file),
        false => Err(AuditError::io(
            path,
            io::Error::new(io::ErrorKind::InvalidData, "not a regular file"),
        )),
    }
}

/// The audit files of `dir`, oldest first. A missing directory holds no files; a symlink in
/// its place is refused.
pub fn list(dir: &Path) -> Result<Vec<AuditFile>, AuditError> {
    if fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(AuditError::io(
            dir,
            io::Error::new(io::ErrorKind::InvalidData, "not a real folder (a symlink?)"),
        ));
    }
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(AuditError::io(dir, e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| AuditError::io(dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            if let Some(f) = AuditFile::parse_name(dir, name) {
                files.push(f);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// One line of an audit file.
#[derive(Debug)]
pub struct Line {
    /// 1-based line number in its file.
    pub number: usize,
    /// The bytes, without the newline.
    pub bytes: Vec<u8>,
    /// Whether a newline ended it (false only for a torn or in-progress last line).
    pub terminated: bool,
}

/// Reads the lines of one file, in order.
pub struct Lines {
    reader: BufReader<File>,
    path: PathBuf,
    number: usize,
}

impl Lines {
    /// Opens `path` for reading.
    pub fn open(path: &Path) -> Result<Lines, AuditError> {
        let file = open_file(path)?;
        Ok(Lines {
            reader: BufReader::with_capacity(256 * 1024, file),
            path: path.to_path_buf(),
            number: 0,
        })
    }
}

impl Iterator for Lines {
    type Item = Result<Line, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut buf = Vec::new();
        match (&mut self.reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) => None,
            Ok(n) if n as u64 == MAX_LINE && buf.last() != Some(&b'\n') => {
                Some(Err(AuditError::io(
                    &self.path,
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("line {} is longer than {MAX_LINE} bytes", self.number + 1),
                    ),
                )))
            }
            Ok(_) => {
                self.number += 1;
                let terminated = buf.last() == Some(&b'\n');
                if terminated {
                    buf.pop();
                }
                Some(Ok(Line {
                    number: self.number,
                    bytes: buf,
                    terminated,
                }))
            }
            Err(e) => Some(Err(AuditError::io(&self.path, e))),
        }
    }
}

/// The last `n` complete (newline-terminated) lines of `file`, oldest first, and the length of the
/// file up to the end of the last complete line (anything after it is a torn tail). Reads backwards
/// in blocks, so the cost is proportional to the lines asked for, not the file size.
pub fn last_lines(path: &Path, n: usize) -> Result<(Vec<Vec<u8>>, u64), AuditError> {
    let mut file = open_file(path)?;
    let len = file
        .seek(SeekFrom::End(0))
        .map_err(|e| AuditError::io(path, e))?;
    const BLOCK: u64 = 64 * 1024;
    let mut tail: Vec<u8> = Vec::new();
    let mut start = len;
    loop {
        let newlines = tail.iter().filter(|&&b| b == b'\n').count();
        // n lines need n+1 newlines to be sure the first is whole (or the start of file).
        if newlines > n || start == 0 {
            break;
        }
        let from = start.saturating_sub(BLOCK);
        let mut block = vec![0u8; (start - from) as usize];
        file.seek(SeekFrom::Start(from))
            .map_err(|e| AuditError::io(path, e))?;
        file.read_exact(&mut block)
            .map_err(|e| AuditError::io(path, e))?;
        block.extend_from_slice(&tail);
        tail = block;
        start = from;
    }
    // Cut the torn tail, if any.
    let complete = match tail.iter().rposition(|&b| b == b'\n') {
        Some(i) => i + 1,
        None => 0,
    };
    let good_len = start + complete as u64;
    let body = &tail[..complete];
    let mut lines: Vec<Vec<u8>> = body.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    lines.pop(); // empty piece after the final newline
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // may be partial: it began before the bytes we read
    }
    let skip = lines.len().saturating_sub(n);
    Ok((lines.split_off(skip), good_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_date_then_index() {
        let dir = Path::new("/x");
        let mut v: Vec<AuditFile> = [
            "audit-2024-02-25.jsonl",
            "audit-2024-02-24.10.jsonl",
            "audit-2024-02-24.2.jsonl",
            "audit-2024-02-24.jsonl",
        ]
        .iter()
        .map(|n| AuditFile::parse_name(dir, n).unwrap())
        .collect();
        v.sort();
        let names: Vec<String> = v.iter().map(AuditFile::name).collect();
        assert_eq!(
            names,
            [
                "audit-2024-02-24.jsonl",
                "audit-2024-02-24.2.jsonl",
                "audit-2024-02-24.10.jsonl",
                "audit-2024-02-25.jsonl"
            ]
        );
        for bad in [
            "audit-2024-02-24.0.jsonl",
            "audit-2024-02-24.01.jsonl",
            "audit-2024-2-24.jsonl",
            "audit-2024-02-24.jsonl.tmp",
            "other.jsonl",
        ] {
            assert!(AuditFile::parse_name(dir, bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn last_lines_reads_backwards_and_cuts_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("line {i}\n"));
        }
        let good = text.len() as u64;
        text.push_str("torn");
        fs::write(&p, &text).unwrap();
        let (lines, len) = last_lines(&p, 3).unwrap();
        assert_eq!(len, good);
        assert_eq!(
            lines,
            [
                b"line 19997".to_vec(),
                b"line 19998".to_vec(),
                b"line 19999".to_vec()
            ]
        );
        let (all, _) = last_lines(&p, 100_000).unwrap();
        assert_eq!(all.len(), 20_000);
        assert_eq!(all[0], b"line 0");
        fs::write(&p, "only torn").unwrap();
        assert_eq!(last_lines(&p, 1).unwrap(), (vec![], 0));
    }
}
