//! Text files read line by line with bounded memory, so the reading tools (`read_file`,
//! `read_range`, `head`, `tail`, `search`, `outline`) work on files of any size: only the lines
//! a call returns are kept, and a line longer than [`LONGEST_LINE`] is cut.

use std::fs::File;
use std::io::{BufRead, BufReader};

use crate::error::{ToolError, ToolResult};
use crate::limits::BINARY_SNIFF_BYTES;
use crate::paths::show;

/// The error of a failed read of `rel`.
fn read_failed(rel: &str) -> impl Fn(std::io::Error) -> ToolError + '_ {
    move |e| ToolError::io(format!("reading '{}'", show(rel)), e)
}

/// Bytes of one line kept; the rest of a longer line is skipped.
pub(crate) const LONGEST_LINE: usize = 1 << 20;

/// A text file's lines, in order, numbered from 1.
pub(crate) struct Lines {
    reader: BufReader<File>,
    rel: String,
    number: usize,
    line: Vec<u8>,
    /// Asked every [`CHECK_BYTES`] read: a read of a large file stops once its caller is gone.
    interrupt: Option<crate::Interrupt>,
    unchecked: usize,
}

/// Bytes read between two questions to the call's [`crate::Interrupt`].
const CHECK_BYTES: usize = 1 << 20;

impl Lines {
    /// Reads `file` (at `rel`) from its start; refuses a binary file.
    pub(crate) fn new(file: File, rel: String) -> ToolResult<Lines> {
        let mut reader = BufReader::with_capacity(256 * 1024, file);
        let head = reader.fill_buf().map_err(read_failed(&rel))?;
        if head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
            return Err(ToolError::NotText(format!(
                "'{}' is a binary file; text tools cannot show or edit it: {}.",
                show(&rel),
                crate::text::NOT_TEXT_HINT
            )));
        }
        Ok(Lines {
            reader,
            rel,
            number: 0,
            line: Vec::new(),
            interrupt: None,
            unchecked: 0,
        })
    }

    /// Stops reading (`interrupted`) once `interrupt` says so.
    fn with_interrupt(mut self, interrupt: Option<crate::Interrupt>) -> Lines {
        self.interrupt = interrupt;
        self
    }

    /// Counts `n` bytes read, and asks the interrupt every [`CHECK_BYTES`].
    fn consume(&mut self, n: usize) -> ToolResult<()> {
        self.reader.consume(n);
        self.unchecked += n;
        if self.unchecked >= CHECK_BYTES {
            self.unchecked = 0;
            if let Some(i) = &self.interrupt {
                i.check()?;
            }
        }
        Ok(())
    }

    /// The file's path.
    pub(crate) fn rel(&self) -> &str {
        &self.rel
    }

    /// The whole file's SHA-256, if it is at most `limit` bytes (see [`crate::fsops::sha256_of`]).
    pub(crate) fn sha256(&self, limit: u64) -> Option<String> {
        crate::fsops::sha256_of(self.reader.get_ref(), limit)
    }

    /// The next line without its `\n` (a `\r` before it is kept), with its number; `None` at
    /// the end. A last line without `\n` counts.
    pub(crate) fn next_line(&mut self) -> ToolResult<Option<(usize, &str)>> {
        self.line.clear();
        let mut any = false;
        loop {
            let buf = self.reader.fill_buf().map_err(read_failed(&self.rel))?;
            if buf.is_empty() {
                break;
            }
            any = true;
            let (take, done) = match memchr(buf) {
                Some(i) => (i, i + 1),
                None => (buf.len(), buf.len()),
            };
            let room = LONGEST_LINE.saturating_sub(self.line.len());
            self.line.extend_from_slice(&buf[..take.min(room)]);
            let found = done > take;
            self.consume(done)?;
            if found {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.number += 1;
        let text = match std::str::from_utf8(&self.line) {
            Ok(t) => t,
            // Cut inside a character at LONGEST_LINE: keep the whole characters.
            Err(e) if e.error_len().is_none() && self.line.len() >= LONGEST_LINE => {
                std::str::from_utf8(&self.line[..e.valid_up_to()]).expect("valid prefix")
            }
            Err(e) => {
                return Err(ToolError::NotText(format!(
                    "'{}' is not UTF-8 text (invalid byte in line {}, at column {}; another encoding, such as Latin-1?); text tools cannot work on it: {}.",
                    show(&self.rel),
                    self.number,
                    e.valid_up_to() + 1,
                    crate::text::NOT_TEXT_HINT
                )))
            }
        };
        Ok(Some((self.number, text)))
    }

    /// Counts the lines left (fast: no decoding), and returns the file's total.
    pub(crate) fn count_rest(mut self) -> ToolResult<usize> {
        let mut open_line = false;
        loop {
            let buf = self.reader.fill_buf().map_err(read_failed(&self.rel))?;
            if buf.is_empty() {
                break;
            }
            let n = buf.len();
            self.number += count_newlines(buf);
            open_line = buf[n - 1] != b'\n';
            self.consume(n)?;
        }
        Ok(self.number + usize::from(open_line))
    }
}

fn memchr(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// The `\n` bytes in `buf`.
pub(crate) fn count_newlines(buf: &[u8]) -> usize {
    // Summing booleans over fixed chunks lets the compiler vectorize the count.
    buf.chunks(4096)
        .map(|c| {
            c.iter()
                .map(|&b| u16::from(b == b'\n'))
                .fold(0u16, u16::wrapping_add) as usize
        })
        .sum()
}

/// Opens the text file at `path` for reading by lines, as the caller may.
pub(crate) fn open(root: &crate::ToolRoot, path: &str) -> ToolResult<Lines> {
    let f = root.existing_file(path, crate::access::Access::Read)?;
    Ok(Lines::new(f.file, f.rel)?.with_interrupt(root.interrupt()))
}

impl Lines {
    /// Counts every line (from the start), and returns this file ready to read again.
    pub(crate) fn counted(self) -> ToolResult<(usize, Lines)> {
        use std::io::Seek;
        let rel = self.rel.clone();
        let interrupt = self.interrupt.clone();
        let mut file = self
            .reader
            .get_ref()
            .try_clone()
            .map_err(read_failed(&rel))?;
        let total = self.count_rest()?;
        file.rewind().map_err(read_failed(&rel))?;
        Ok((total, Lines::new(file, rel)?.with_interrupt(interrupt)))
    }
}

/// Lines `start..=end` of a file, as the reading tools return them.
pub(crate) struct Window {
    /// The file's path.
    pub rel: String,
    /// The lines, each ending with `\n` (numbered when asked), within the character budget.
    pub text: String,
    /// Last line returned (`start - 1` when none fit or the file is empty).
    pub end: usize,
    /// Lines in the file.
    pub total: usize,
}

/// Reads lines `start..=end` (1-based; `end` clamped to the file's last line) of `lines` into
/// at most `max_chars` characters of whole lines (a first line longer than that is cut), then
/// counts the rest.
pub(crate) fn window(
    mut lines: Lines,
    start: usize,
    end: usize,
    numbers: bool,
    max_chars: usize,
) -> ToolResult<Window> {
    let mut text = String::new();
    let mut chars = 0usize;
    let mut last = start.saturating_sub(1);
    while let Some((n, line)) = lines.next_line()? {
        if n < start {
            continue;
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let piece = match numbers {
            true => format!("{n:>6}\t{line}\n"),
            false => format!("{line}\n"),
        };
        let len = piece.chars().count();
        if chars + len > max_chars {
            if text.is_empty() {
                text = crate::text::cut(&piece, max_chars);
                text.push('\n');
                last = n;
            }
            break;
        }
        chars += len;
        text.push_str(&piece);
        last = n;
        if n >= end {
            break;
        }
    }
    let rel = lines.rel().to_string();
    let total = lines.count_rest()?;
    Ok(Window {
        rel,
        text,
        end: last,
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_bytes(text: &[u8]) -> ToolResult<Lines> {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, text).unwrap();
        std::io::Seek::rewind(&mut f).unwrap();
        Lines::new(f, "t.md".into())
    }

    fn lines_of(text: &[u8]) -> Lines {
        open_bytes(text).unwrap()
    }

    #[test]
    fn a_read_stops_once_its_caller_is_gone() {
        let text = "line of text\n".repeat((3 * CHECK_BYTES) / 13);
        let gone = crate::Interrupt::new(|| true);
        let mut l = lines_of(text.as_bytes()).with_interrupt(Some(gone.clone()));
        let mut read = 0;
        let stopped = loop {
            match l.next_line() {
                Ok(Some(_)) => read += 1,
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        assert_eq!(stopped.map(|e| e.code()), Some("interrupted"));
        assert!(read <= CHECK_BYTES / 13 + 1, "{read} lines read");
        let l = lines_of(text.as_bytes()).with_interrupt(Some(gone));
        assert_eq!(l.count_rest().unwrap_err().code(), "interrupted");
    }

    #[test]
    fn lines_count_like_an_editor() {
        for (t, n) in [
            ("", 0),
            ("a", 1),
            ("a\n", 1),
            ("a\n\n", 2),
            ("a\nb", 2),
            ("\n", 1),
        ] {
            assert_eq!(lines_of(t.as_bytes()).count_rest().unwrap(), n, "{t:?}");
            let mut l = lines_of(t.as_bytes());
            let mut seen = 0;
            while l.next_line().unwrap().is_some() {
                seen += 1;
            }
            assert_eq!(seen, n, "{t:?}");
        }
    }

    #[test]
    fn a_window_keeps_its_character_budget() {
        let w = window(lines_of(b"one\ntwo\nthree\n"), 1, 3, false, 100).unwrap();
        assert_eq!(
            (w.text.as_str(), w.end, w.total),
            ("one\ntwo\nthree\n", 3, 3)
        );
        let w = window(lines_of(b"one\ntwo\nthree\n"), 2, 3, false, 5).unwrap();
        assert_eq!((w.text.as_str(), w.end), ("two\n", 2));
        let w = window(lines_of(b"one\ntwo\nthree\n"), 3, 3, false, 2).unwrap();
        assert!(w.text.starts_with("th") && w.end == 3);
        let w = window(lines_of(b"one\r\n"), 1, 1, true, 100).unwrap();
        assert_eq!(w.text, "     1\tone\n");
    }

    #[test]
    fn long_lines_are_cut_and_bad_text_refused() {
        let mut big = vec![b'x'; LONGEST_LINE + 10];
        big.extend_from_slice("é\nnext\n".as_bytes());
        let mut l = lines_of(&big);
        assert_eq!(l.next_line().unwrap().unwrap().1.len(), LONGEST_LINE);
        assert_eq!(l.next_line().unwrap().unwrap().1, "next");
        assert_eq!(open_bytes(b"a\0b").err().unwrap().code(), "not_text");
        let mut bad = lines_of(b"ok\n\xff\n");
        bad.next_line().unwrap();
        assert_eq!(bad.next_line().unwrap_err().code(), "not_text");
    }
}
