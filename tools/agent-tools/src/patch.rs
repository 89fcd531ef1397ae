//! A strict unified-diff parser and applier for `apply_patch`: every hunk's context and removed
//! lines must match the file exactly (CR of CRLF aside), or nothing is applied.
//!
//! Like `patch` with fuzz 0: a hunk is tried at its stated line (shifted by the previous hunks'
//! offset) and, if the text is not there, at the nearest place where it matches exactly. Header
//! line counts are checked against the body only loosely, because models often miscount them;
//! the body decides what is matched and written. Input is untrusted: the parser never panics.

use std::fmt::Write as _;

/// One line of a hunk body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone)]
pub(crate) struct Hunk {
    /// `a`: 1-based first old line (for `b == 0`, the line after which to insert).
    pub old_start: usize,
    pub lines: Vec<HunkLine>,
    /// The header text, for messages.
    pub header: String,
    /// `b`: the old-side line count the header states (models often miscount it).
    pub stated_old: usize,
    /// Trailing context lines that came from empty patch lines, kept because the header counted
    /// them: a match may drop them, since an over-counted header makes the patch's own final
    /// newlines look like context.
    pub loose_tail: usize,
}

impl Hunk {
    /// The old-side lines (context and removed).
    fn old(&self) -> Vec<&str> {
        old_of(&self.lines)
    }

    /// What the header says that the body does not: a miscounted old-side count.
    fn miscount(&self) -> Option<String> {
        let body = self.old().len();
        (self.stated_old != body).then(|| {
            let kind = if self.stated_old > body { "over" } else { "under" };
            format!(
                "its header is {kind}-counted: it states {} old lines but the body has {body} (the body is what is matched)",
                self.stated_old
            )
        })
    }
}

/// A parsed patch for one file.
#[derive(Debug, Clone)]
pub(crate) struct Patch {
    pub hunks: Vec<Hunk>,
    /// A `\ No newline at end of file` marker after an old-side line.
    pub old_no_eol: bool,
    /// A `\ No newline at end of file` marker after a new-side line.
    pub new_no_eol: bool,
}

/// Where a hunk went.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct AppliedHunk {
    /// 1-based hunk number in the patch.
    pub hunk: usize,
    /// 1-based line of the file where the hunk's old text started.
    pub line: usize,
    /// How far that is from the line the header stated (0 when exact).
    pub offset: i64,
}

fn parse_header(l: &str) -> Option<(usize, usize)> {
    // "@@ -a[,b] +c[,d] @@ optional section"
    let rest = l.strip_prefix("@@ -")?;
    let end = rest.find(" @@")?;
    let ranges = &rest[..end];
    let (old, new) = ranges.split_once(" +")?;
    let num = |s: &str| -> Option<(usize, usize)> {
        match s.split_once(',') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => Some((s.parse().ok()?, 1)),
        }
    };
    let (a, b) = num(old)?;
    num(new)?;
    Some((a, b))
}

/// Parses a unified diff for a single file. Errors are messages for the caller.
pub(crate) fn parse(patch: &str) -> Result<Patch, String> {
    let raw: Vec<&str> = patch
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let is_file_header = |i: usize| {
        raw[i].starts_with("--- ") && raw.get(i + 1).is_some_and(|n| n.starts_with("+++ "))
    };
    let mut out = Patch {
        hunks: Vec::new(),
        old_no_eol: false,
        new_no_eol: false,
    };
    let mut files = 0;
    let mut i = 0;
    while i < raw.len() {
        if is_file_header(i) {
            files += 1;
            if files > 1 {
                return Err("the patch changes more than one file; send one apply_patch call per file, with that file's hunks only.".into());
            }
            i += 2;
            continue;
        }
        let l = raw[i];
        if !l.starts_with("@@") {
            i += 1;
            continue;
        }
        let (old_start, old_len) = parse_header(l).ok_or_else(|| {
            format!(
                "patch line {}: malformed hunk header '{}'; expected '@@ -start,count +start,count @@'.",
                i + 1,
                crate::text::cut(l, 80)
            )
        })?;
        let header = l.to_string();
        i += 1;
        let mut body: Vec<HunkLine> = Vec::new();
        // Whether each body line came from an empty raw line (a context line whose space was lost).
        let mut from_empty: Vec<bool> = Vec::new();
        while i < raw.len() {
            let l = raw[i];
            if l.starts_with("@@") || is_file_header(i) {
                break;
            }
            if let Some(t) = l.strip_prefix(' ') {
                body.push(HunkLine::Context(t.into()));
                from_empty.push(false);
            } else if let Some(t) = l.strip_prefix('-') {
                body.push(HunkLine::Remove(t.into()));
                from_empty.push(false);
            } else if let Some(t) = l.strip_prefix('+') {
                body.push(HunkLine::Add(t.into()));
                from_empty.push(false);
            } else if l.starts_with('\\') {
                match body.last() {
                    Some(HunkLine::Remove(_)) => out.old_no_eol = true,
                    Some(HunkLine::Add(_)) => out.new_no_eol = true,
                    Some(HunkLine::Context(_)) => {
                        out.old_no_eol = true;
                        out.new_no_eol = true;
                    }
                    None => {}
                }
            } else if l.is_empty() {
                body.push(HunkLine::Context(String::new()));
                from_empty.push(true);
            } else {
                break;
            }
            i += 1;
        }
        // Empty raw lines at the end of a hunk beyond its stated old count are the patch's own
        // trailing newlines, not context.
        let old_count =
            |b: &[HunkLine]| b.iter().filter(|h| !matches!(h, HunkLine::Add(_))).count();
        while from_empty.last() == Some(&true) && old_count(&body) > old_len {
            body.pop();
            from_empty.pop();
        }
        if body.is_empty() {
            return Err(format!(
                "hunk '{header}' has no lines; each hunk needs context (' '), removed ('-') or added ('+') lines."
            ));
        }
        let loose_tail = from_empty
            .iter()
            .rev()
            .take_while(|&&e| e)
            .count()
            .min(body.len().saturating_sub(1));
        if out.hunks.len() == MAX_HUNKS {
            return Err(format!(
                "the patch has more than {MAX_HUNKS} hunks; send it in parts, or write the file whole with write_file."
            ));
        }
        out.hunks.push(Hunk {
            old_start,
            lines: body,
            header,
            stated_old: old_len,
            loose_tail,
        });
    }
    if out.hunks.is_empty() {
        return Err("the patch has no hunks; send a unified diff with '@@ -start,count +start,count @@' hunks (the '---'/'+++' header lines are optional).".into());
    }
    Ok(out)
}

fn same(a: &str, b: &str) -> bool {
    a.strip_suffix('\r').unwrap_or(a) == b.strip_suffix('\r').unwrap_or(b)
}

fn matches_at(src: &[&str], at: usize, old: &[&str]) -> bool {
    at + old.len() <= src.len()
        && src[at..at + old.len()]
            .iter()
            .zip(old)
            .all(|(a, b)| same(a, b))
}

/// Why a hunk does not apply at `at`: the first differing line.
fn explain(src: &[&str], at: usize, old: &[&str]) -> String {
    for (j, want) in old.iter().enumerate() {
        match src.get(at + j) {
            None => {
                return format!(
                    "the file has only {} lines, but the hunk expects '{}' at line {}",
                    src.len(),
                    crate::text::show_line(want),
                    at + j + 1
                )
            }
            Some(got) if !same(got, want) => {
                return format!(
                    "line {} is '{}' but the hunk expects '{}'",
                    at + j + 1,
                    crate::text::show_line(got),
                    crate::text::show_line(want)
                )
            }
            Some(_) => {}
        }
    }
    "the text matches here but overlaps an earlier hunk".into()
}

/// The old-side lines (context and removed) of hunk lines.
fn old_of(lines: &[HunkLine]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|l| match l {
            HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_str()),
            HunkLine::Add(_) => None,
        })
        .collect()
}

/// Where `old` occurs at or after `pos`, nearest to `expected` (an empty `old` is at `expected`).
fn locate(src: &[&str], pos: usize, expected: usize, old: &[&str]) -> Option<usize> {
    if old.is_empty() {
        return Some(expected);
    }
    if src.len() < old.len() {
        return None;
    }
    let last = src.len() - old.len();
    let span = expected
        .saturating_sub(pos)
        .max(last.saturating_sub(expected));
    (0..=span).find_map(|d| {
        let down = expected
            .checked_sub(d)
            .filter(|&p| p >= pos && p <= last && matches_at(src, p, old));
        let up = expected
            .checked_add(d)
            .filter(|&p| d > 0 && p >= pos && p <= last && matches_at(src, p, old));
        down.or(up)
    })
}

/// The patch undone: added lines become removed ones and the other way round.
fn reversed(patch: &Patch) -> Patch {
    let mut r = patch.clone();
    for h in &mut r.hunks {
        for l in &mut h.lines {
            *l = match std::mem::replace(l, HunkLine::Context(String::new())) {
                HunkLine::Add(t) => HunkLine::Remove(t),
                HunkLine::Remove(t) => HunkLine::Add(t),
                c => c,
            };
        }
        h.stated_old = old_of(&h.lines).len();
    }
    std::mem::swap(&mut r.old_no_eol, &mut r.new_no_eol);
    r
}

/// Whether `text` holds what `patch` makes of it: the patch's reverse applies, and the patch
/// changes something (a patch of context alone proves nothing). It means "already applied" once
/// the patch itself did not apply.
pub(crate) fn holds_result(text: &str, patch: &Patch) -> bool {
    let changes = patch
        .hunks
        .iter()
        .any(|h| h.lines.iter().any(|l| !matches!(l, HunkLine::Context(_))));
    changes && apply(text, &reversed(patch)).is_ok()
}

/// Failing hunks reported, at most.
const MAX_FAILURES_SHOWN: usize = 20;
/// Hunks in one patch, at most.
pub(crate) const MAX_HUNKS: usize = 1000;

/// Applies `patch` to `text`, all hunks or none. On failure returns one message per failing hunk.
pub(crate) fn apply(text: &str, patch: &Patch) -> Result<(String, Vec<AppliedHunk>), Vec<String>> {
    let src = crate::text::lines(text);
    let eol_cr = crate::text::eol_of(text) == "\r\n";
    let trailing_nl = text.is_empty() || text.ends_with('\n');
    let mut out: Vec<String> = Vec::with_capacity(src.len() + 16);
    let mut pos = 0usize;
    let mut offset: i64 = 0;
    let mut applied = Vec::new();
    let mut failures = Vec::new();
    for (k, h) in patch.hunks.iter().enumerate() {
        // All or none: past a few failures, the rest only adds to the answer and the work.
        if failures.len() >= MAX_FAILURES_SHOWN {
            failures.push(format!(
                "(hunks after #{k} were not tried: the patch fails already)"
            ));
            break;
        }
        let old = h.old();
        let stated = if old.is_empty() {
            h.old_start
        } else {
            h.old_start.saturating_sub(1)
        };
        let expected = (stated as i64 + offset).clamp(pos as i64, src.len() as i64) as usize;
        // The whole body first; then without the empty lines an over-counted header kept.
        let found = (0..=h.loose_tail).find_map(|cut| {
            let body = &h.lines[..h.lines.len() - cut];
            locate(&src, pos, expected, &old_of(body)).map(|at| (at, body))
        });
        let Some((at, body)) = found else {
            let miscount = h
                .miscount()
                .map(|m| format!(" Also, {m}."))
                .unwrap_or_default();
            failures.push(format!(
                "hunk #{} ({}) does not apply: at line {}, {}; and its lines occur nowhere else after line {}.{miscount}",
                k + 1,
                h.header,
                expected + 1,
                explain(&src, expected, &old),
                pos
            ));
            continue;
        };
        out.extend(src[pos..at].iter().map(|s| s.to_string()));
        let mut cursor = at;
        for l in body {
            match l {
                HunkLine::Context(_) => {
                    out.push(src[cursor].to_string());
                    cursor += 1;
                }
                HunkLine::Remove(_) => cursor += 1,
                HunkLine::Add(t) => {
                    let mut s = t.clone();
                    if eol_cr && !s.ends_with('\r') {
                        s.push('\r');
                    }
                    out.push(s);
                }
            }
        }
        pos = cursor;
        offset = at as i64 - stated as i64;
        applied.push(AppliedHunk {
            hunk: k + 1,
            line: at + 1,
            offset: at as i64 - stated as i64,
        });
    }
    if !failures.is_empty() {
        return Err(failures);
    }
    out.extend(src[pos..].iter().map(|s| s.to_string()));
    let mut result = String::with_capacity(text.len() + 64);
    for (i, l) in out.iter().enumerate() {
        if i > 0 {
            result.push('\n');
        }
        let _ = result.write_str(l);
    }
    let end_nl = if patch.new_no_eol {
        false
    } else if patch.old_no_eol {
        true
    } else {
        trailing_nl
    };
    if end_nl && !out.is_empty() {
        if eol_cr && !result.ends_with('\r') {
            result.push('\r');
        }
        result.push('\n');
    }
    Ok((result, applied))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, p: &str) -> Result<String, Vec<String>> {
        let p = parse(p).map_err(|e| vec![e])?;
        apply(text, &p).map(|(t, _)| t)
    }

    #[test]
    fn applies_exact_hunk() {
        let t = "a\nb\nc\n";
        let p = "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n";
        assert_eq!(run(t, p).unwrap(), "a\nB\nc\n");
    }

    #[test]
    fn applies_with_offset_and_multiple_hunks() {
        let t: String = (1..=20).map(|i| format!("l{i}\n")).collect();
        let p = "@@ -3,1 +3,1 @@\n-l5\n+L5\n@@ -15,2 +15,3 @@\n l16\n-l17\n+L17\n+new\n";
        let out = run(&t, p).unwrap();
        assert!(out.contains("\nL5\n"));
        assert!(out.contains("l16\nL17\nnew\nl18\n"));
    }

    #[test]
    fn context_mismatch_fails_all() {
        let t = "a\nb\nc\n";
        let p = "@@ -1,1 +1,1 @@\n-a\n+A\n@@ -3,1 +3,1 @@\n-zzz\n+Z\n";
        let e = run(t, p).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("hunk #2"), "{e:?}");
    }

    #[test]
    fn tolerates_lost_space_on_empty_context_and_trailing_newline() {
        let t = "a\n\nb\n";
        let p = "@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n\n";
        assert_eq!(run(t, p).unwrap(), "a\n\nB\n");
    }

    #[test]
    fn insert_into_empty_file_and_no_newline_marker() {
        assert_eq!(run("", "@@ -0,0 +1,2 @@\n+x\n+y\n").unwrap(), "x\ny\n");
        let p = "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n";
        assert_eq!(run("a", p).unwrap(), "b\n");
    }

    #[test]
    fn crlf_files_keep_crlf() {
        let t = "a\r\nb\r\n";
        let p = "@@ -1,2 +1,2 @@\n a\n-b\n+c\n";
        assert_eq!(run(t, p).unwrap(), "a\r\nc\r\n");
    }

    #[test]
    fn malformed_patches_are_errors_not_panics() {
        for p in [
            "",
            "hello",
            "@@ garbage @@\n",
            "@@ -1,1 +1,1 @@\n",
            "@@ -99999999999999999999,1 +1 @@\n-a\n",
            "--- a\n+++ b\n@@ -1 +1 @@\n-a\n+b\n--- c\n+++ d\n@@ -1 +1 @@\n-a\n+b\n",
        ] {
            assert!(run("a\n", p).is_err(), "{p:?}");
        }
        // A huge stated start is clamped, not an overflow.
        assert!(run("a\n", &format!("@@ -{} +1 @@\n-a\n+b\n", usize::MAX)).is_ok());
    }
}
