//! Text model shared by the tools: UTF-8 checks, binary sniffing, and 1-based line slicing.
//!
//! A line is the text between `\n`s, without the `\n`; a final line without a newline counts, and
//! a file ending in `\n` has no empty last line. `\r` of CRLF files stays part of the line's bytes
//! and is stripped only when lines are compared or shown.

use crate::error::{ToolError, ToolResult};
use crate::limits::{BINARY_SNIFF_BYTES, MAX_LINE_CHARS};
use crate::paths::show;

/// What a `not_text` refusal tells the agent to do instead.
pub(crate) const NOT_TEXT_HINT: &str = "read_media_file returns its bytes (base64, with its MIME type); get_file_info gives its size and dates";

/// The file's bytes as text, or `not_text` for binary or non-UTF-8 content.
pub(crate) fn decode<'a>(bytes: &'a [u8], rel: &str) -> ToolResult<&'a str> {
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return Err(ToolError::NotText(format!(
            "'{}' is a binary file; text tools cannot show or edit it: {NOT_TEXT_HINT}.",
            show(rel)
        )));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        ToolError::NotText(format!(
            "'{}' is not UTF-8 text (invalid byte at offset {}; another encoding, such as Latin-1?); text tools cannot work on it: {NOT_TEXT_HINT}.",
            show(rel),
            e.valid_up_to()
        ))
    })
}

/// Whether bytes look binary (a NUL in the first few KiB).
pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// The lines of `text` (see the module doc), each without its `\n`.
pub(crate) fn lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let t = text.strip_suffix('\n').unwrap_or(text);
    t.split('\n').collect()
}

/// A line for display: no trailing `\r`, cut to [`MAX_LINE_CHARS`] characters.
pub(crate) fn show_line(line: &str) -> String {
    let l = line.strip_suffix('\r').unwrap_or(line);
    cut(l, MAX_LINE_CHARS)
}

/// `s` cut to at most `max` characters, marking the cut.
pub(crate) fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}… [line cut at {max} characters]", &s[..i]),
    }
}

/// The line ending the file mostly uses: `"\r\n"` if its first line ends so, else `"\n"`.
pub(crate) fn eol_of(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// `piece` with the line endings `eol` ("\n" or "\r\n").
pub(crate) fn with_eol(piece: &str, eol: &str) -> String {
    let lf = piece.replace("\r\n", "\n");
    match eol {
        "\r\n" => lf.replace('\n', "\r\n"),
        _ => lf,
    }
}

/// `piece` without the line-number prefixes `read_file` shows (`     12<TAB>`, as `cat -n`),
/// when every line has one: text pasted from a numbered read. None when some line has none.
pub(crate) fn without_line_numbers(piece: &str) -> Option<String> {
    let mut out = String::with_capacity(piece.len());
    for line in piece.split_inclusive('\n') {
        let rest = line.trim_start_matches(' ');
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let body = rest[digits..].strip_prefix('\t').filter(|_| digits > 0)?;
        out.push_str(body);
    }
    Some(out)
}

/// How the text an agent gave (`old`, to replace by `new`) occurs in `text`: as given; else in
/// the file's line endings (an agent writes `\n`, a CRLF file has `\r\n`); else without pasted
/// `read_file` line numbers. Returns what to find, what to put in its place (in the file's
/// line endings), and a note when it was not found as given.
pub(crate) fn as_in_file(
    text: &str,
    old: &str,
    new: &str,
) -> (String, String, Option<&'static str>) {
    let eol = eol_of(text);
    if text.contains(old) {
        let new = match old.contains('\n') || new.contains('\n') {
            true => with_eol(new, eol),
            false => new.to_string(),
        };
        return (old.to_string(), new, None);
    }
    let converted = with_eol(old, eol);
    if converted != old && text.contains(&converted) {
        return (
            converted,
            with_eol(new, eol),
            Some("matched in the file's own line endings"),
        );
    }
    if let Some(bare) = without_line_numbers(old).map(|o| with_eol(&o, eol)) {
        if !bare.is_empty() && text.contains(&bare) {
            let new = without_line_numbers(new).unwrap_or_else(|| new.to_string());
            return (
                bare,
                with_eol(&new, eol),
                Some("the line numbers pasted from read_file were left out"),
            );
        }
    }
    (old.to_string(), with_eol(new, eol), None)
}

/// The line of `text` most like the first non-blank line of `wanted`: `(line number, line)`,
/// for a "not found" answer. Files of more than 50,000 lines are not searched.
pub(crate) fn nearest_line(text: &str, wanted: &str) -> Option<(usize, String)> {
    // A hint, not a search: its first 200 characters against each line's first 400, and
    // no more than 100 ms in all (a comparison costs the product of the lengths).
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
    let cut = |s: &str, n: usize| {
        s.char_indices()
            .nth(n)
            .map_or(s, |(i, _)| &s[..i])
            .to_string()
    };
    let probe = wanted
        .lines()
        .take(1000)
        .map(|l| without_line_numbers(l).unwrap_or_else(|| l.to_string()))
        .find(|l| !l.trim().is_empty())?;
    let probe = cut(probe.trim(), 200);
    let ls = lines(text);
    if ls.len() > 50_000 {
        return None;
    }
    let mut best: Option<(f32, usize)> = None;
    for (i, l) in ls.iter().enumerate() {
        if std::time::Instant::now() >= deadline {
            break;
        }
        let l = cut(l.trim(), 400);
        if l.is_empty() {
            continue;
        }
        let r = similar::TextDiff::configure()
            .deadline(deadline)
            .diff_chars(probe.as_str(), l.as_str())
            .ratio();
        if r >= 0.5 && best.is_none_or(|(b, _)| r > b) {
            best = Some((r, i));
        }
    }
    best.map(|(_, i)| (i + 1, show_line(ls[i])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_model() {
        assert_eq!(lines(""), Vec::<&str>::new());
        assert_eq!(lines("a"), vec!["a"]);
        assert_eq!(lines("a\n"), vec!["a"]);
        assert_eq!(lines("a\n\n"), vec!["a", ""]);
        assert_eq!(lines("a\r\nb"), vec!["a\r", "b"]);
        assert_eq!(eol_of("a\r\nb"), "\r\n");
        assert_eq!(eol_of("a\nb"), "\n");
    }

    #[test]
    fn decode_refuses_binary_and_bad_utf8() {
        assert_eq!(decode(b"a\0b", "x").unwrap_err().code(), "not_text");
        assert_eq!(decode(b"a\xffb", "x").unwrap_err().code(), "not_text");
        assert_eq!(decode("héllo".as_bytes(), "x").unwrap(), "héllo");
    }
}
