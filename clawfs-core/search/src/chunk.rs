//! Cutting a file into the pieces the index holds. Each chunk keeps its line range, so a hit
//! leads straight to a `read_range` of exactly those lines.
//!
//! - Markdown (`.md`, `.markdown`, `.mdx`): one chunk per paragraph under a heading, short
//!   paragraphs of one section merged up to [`TARGET_CHARS`]; a heading starts a new chunk and its
//!   title is kept with every chunk under it (`heading`), so a paragraph is found by its section.
//! - Other text: windows of [`LINES_PER_CHUNK`] lines, cut earlier at [`TARGET_CHARS`].
//! - Not indexed: files over [`MAX_FILE_BYTES`], binary files (a NUL byte in the first 8 KiB, or
//!   not UTF-8), empty files. A line longer than [`MAX_CHUNK_CHARS`] is cut.

/// The largest file indexed; larger ones are skipped (and say so in `clawfs index status`).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// The size a chunk grows to before a new one starts.
pub const TARGET_CHARS: usize = 1_500;
/// The most text one chunk holds.
pub const MAX_CHUNK_CHARS: usize = 4_000;
/// Lines per chunk of a text file that is not Markdown.
pub const LINES_PER_CHUNK: usize = 40;

/// One piece of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// First line, 1-based.
    pub line_start: u32,
    /// Last line, inclusive.
    pub line_end: u32,
    /// The headings above it (Markdown), outermost first, joined with " > ".
    pub heading: String,
    /// The text.
    pub text: String,
}

/// Why a file is not indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Larger than [`MAX_FILE_BYTES`].
    TooLarge,
    /// Holds a NUL byte or is not UTF-8.
    Binary,
}

/// The chunks of a file named `name` (for its extension) with content `bytes`.
pub fn chunk_file(name: &str, bytes: &[u8]) -> Result<Vec<Chunk>, Skip> {
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Skip::TooLarge);
    }
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Err(Skip::Binary);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Skip::Binary)?;
    let lower = name.to_ascii_lowercase();
    let markdown = [".md", ".markdown", ".mdx"]
        .iter()
        .any(|e| lower.ends_with(e));
    Ok(match markdown {
        true => markdown_chunks(text),
        false => line_chunks(text),
    })
}

/// Collects lines into chunks.
struct Builder {
    out: Vec<Chunk>,
    start: u32,
    end: u32,
    text: String,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            out: Vec::new(),
            start: 0,
            end: 0,
            text: String::new(),
        }
    }

    fn push_line(&mut self, n: u32, line: &str) {
        if self.text.is_empty() {
            self.start = n;
        }
        let room = MAX_CHUNK_CHARS.saturating_sub(self.text.len());
        let mut cut = line.len().min(room);
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&line[..cut]);
        self.text.push('\n');
        self.end = n;
    }

    fn finish(&mut self, heading: &str) {
        let text = std::mem::take(&mut self.text);
        if text.trim().is_empty() {
            return;
        }
        self.out.push(Chunk {
            line_start: self.start,
            line_end: self.end,
            heading: heading.to_string(),
            text: text.trim_end().to_string(),
        });
    }
}

fn line_chunks(text: &str) -> Vec<Chunk> {
    let mut b = Builder::new();
    let mut lines_in = 0;
    for (i, line) in text.lines().enumerate() {
        b.push_line(i as u32 + 1, line);
        lines_in += 1;
        if lines_in >= LINES_PER_CHUNK || b.text.len() >= TARGET_CHARS {
            b.finish("");
            lines_in = 0;
        }
    }
    b.finish("");
    b.out
}

/// The level and title of an ATX heading line (`## Title`).
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|&c| c == b'#').count();
    let rest = &line[level..];
    ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with(' ')))
        .then(|| (level, rest.trim().trim_end_matches('#').trim_end()))
}

fn markdown_chunks(text: &str) -> Vec<Chunk> {
    let mut b = Builder::new();
    let mut titles: Vec<(usize, String)> = Vec::new();
    let mut path = String::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        let n = i as u32 + 1;
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
        }
        if let Some((level, title)) = heading(line).filter(|_| !fenced) {
            b.finish(&path);
            titles.retain(|(l, _)| *l < level);
            titles.push((level, title.to_string()));
            path = titles
                .iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(" > ");
            b.push_line(n, line);
            continue;
        }
        // A blank line ends a paragraph; the chunk ends there once it is big enough.
        if line.trim().is_empty() && !fenced {
            if b.text.len() >= TARGET_CHARS {
                b.finish(&path);
            }
            if !b.text.is_empty() {
                b.push_line(n, "");
            }
            continue;
        }
        if b.text.len() >= MAX_CHUNK_CHARS {
            b.finish(&path);
        }
        b.push_line(n, line);
    }
    b.finish(&path);
    b.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_chunks_by_heading_with_line_ranges() {
        let doc = "# Title\nintro\n\n## Setup\nstep one\nstep two\n\n## Use\nrun it\n";
        let c = chunk_file("a.md", doc.as_bytes()).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].line_start, c[0].line_end), (1, 3));
        assert_eq!(c[1].heading, "Title > Setup");
        assert_eq!((c[1].line_start, c[1].line_end), (4, 7));
        assert!(c[1].text.contains("step two"));
        assert_eq!(c[2].heading, "Title > Use");
        assert_eq!((c[2].line_start, c[2].line_end), (8, 9));
    }

    #[test]
    fn headings_inside_code_fences_do_not_split() {
        let doc = "# A\n```sh\n# not a heading\n```\n";
        let c = chunk_file("a.md", doc.as_bytes()).unwrap();
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn text_is_cut_into_line_windows() {
        let doc: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let c = chunk_file("a.txt", doc.as_bytes()).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].line_start, c[0].line_end), (1, 40));
        assert_eq!((c[2].line_start, c[2].line_end), (81, 100));
    }

    #[test]
    fn binary_and_huge_files_are_skipped() {
        assert_eq!(chunk_file("a.bin", b"ab\0cd"), Err(Skip::Binary));
        assert_eq!(chunk_file("a.txt", &[0xff, 0xfe]), Err(Skip::Binary));
        let big = vec![b'a'; MAX_FILE_BYTES as usize + 1];
        assert_eq!(chunk_file("a.txt", &big), Err(Skip::TooLarge));
        assert!(chunk_file("a.txt", b"").unwrap().is_empty());
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let line = "é".repeat(MAX_CHUNK_CHARS);
        let c = chunk_file("a.txt", line.as_bytes()).unwrap();
        assert!(c[0].text.len() <= MAX_CHUNK_CHARS + 1);
    }
}
