//! Read tools: resolve, info, outline, search, read_range, head, tail, read_file,
//! read_multiple_files. None of them writes; all resolve paths case-insensitively.

use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::walk::{walk, Step};
use super::EntryType;
use crate::access::Access;
use crate::beneath::DIR_PATH;
use crate::error::{ToolError, ToolResult};
use crate::fsops::{rfc3339, stream_info, unix_secs};
use crate::limits::*;
use crate::paths::{show, Lookup, Walk};
use crate::stream::{self, Lines};
use crate::text::show_line;
use crate::ToolRoot;

/// Arguments naming one path.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    /// Workspace-relative path, e.g. "Projects/Plan.md" ("/" prefix allowed; matched
    /// case-insensitively if the exact path does not exist).
    pub path: String,
}

/// `resolve` arguments: exactly one of `path` and `title`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveArgs {
    /// Workspace-relative path to check.
    #[serde(default)]
    pub path: Option<String>,
    /// A file name to find anywhere in the workspace, e.g. "Project Plan" or "Project Plan.md".
    #[serde(default)]
    pub title: Option<String>,
}

/// `resolve` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ResolveResult {
    /// The path to use in other tool calls.
    pub resolved_path: String,
    /// What the path is.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// How it was found: "exact", "case_insensitive" or "title".
    pub matched_by: String,
}

pub(crate) fn resolve(root: &ToolRoot, a: ResolveArgs) -> ToolResult<ResolveResult> {
    match (a.path, a.title) {
        (Some(p), None) => {
            let exact = matches!(root.walk(&p, Lookup::EXACT)?, Walk::Found { .. });
            let f = root.existing(&p, Access::Read, Lookup::READ)?;
            Ok(ResolveResult {
                resolved_path: show(&f.rel),
                kind: EntryType::of(&f.meta),
                matched_by: if exact { "exact" } else { "case_insensitive" }.into(),
            })
        }
        (None, Some(t)) => resolve_title(root, t.trim()),
        _ => Err(ToolError::InvalidArgs(
            "resolve needs exactly one of \"path\" or \"title\", e.g. {\"title\": \"Project Plan\"}.".into(),
        )),
    }
}

fn resolve_title(root: &ToolRoot, title: &str) -> ToolResult<ResolveResult> {
    if title.is_empty() || title.contains('/') || title.contains('\0') {
        return Err(ToolError::InvalidArgs(
            "title must be a file name without folders, e.g. \"Project Plan\"; use path for paths."
                .into(),
        ));
    }
    let names = [title.to_string(), format!("{title}.md")];
    let lower: Vec<String> = names.iter().map(|n| n.to_lowercase()).collect();
    let (mut exact, mut loose) = (Vec::new(), Vec::new());
    let top = root.open_found(String::new(), DIR_PATH)?;
    walk(root, &top, usize::MAX, |e| {
        if e.meta.is_file() {
            if names.contains(&e.name) {
                exact.push(e.rel.clone());
            } else if lower.contains(&e.name.to_lowercase()) {
                loose.push(e.rel.clone());
            }
        }
        Step::Continue
    })?;
    // Every file the title names in any case: one that matches case exactly does not make the
    // others go away, and the caller must hear of them.
    let exactly = exact.len() == 1;
    let mut hits = exact;
    hits.extend(loose);
    match hits.len() {
        0 => Err(ToolError::NotFound(format!(
            "no file named '{title}' or '{title}.md' in the workspace. Try search_files or list_files with a glob such as \"*{title}*\"."
        ))),
        1 => Ok(ResolveResult {
            resolved_path: hits[0].clone(),
            kind: EntryType::File,
            matched_by: "title".into(),
        }),
        n => Err(ToolError::MultipleMatches {
            message: match exactly {
                true => format!(
                    "{n} files are named '{title}' ignoring case ('{}' matches its case exactly); pick one of the candidates and call again with its path.",
                    hits[0]
                ),
                false => format!(
                    "{n} files are named '{title}'; pick one of the candidates and call again with its path."
                ),
            },
            candidates: hits
                .into_iter()
                .take(MAX_CANDIDATES)
                .map(Value::String)
                .collect(),
        }),
    }
}

/// `info` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InfoResult {
    /// The resolved path.
    pub path: String,
    /// Number of lines (a last line without newline counts).
    pub lines: u64,
    /// Size in bytes (as get_file_info's size).
    pub size: u64,
    /// The same as size, under its earlier name (kept for callers that read it).
    pub bytes: u64,
    /// Lowercase hex sha256 of the content: the base_sha256 for apply_patch.
    pub sha256: String,
    /// Modification time, seconds since the Unix epoch.
    pub mtime: i64,
    /// Modification time, RFC 3339 UTC.
    pub modified: String,
}

pub(crate) fn info(root: &ToolRoot, a: PathArgs) -> ToolResult<InfoResult> {
    let f = root.existing_file(&a.path, Access::Read)?;
    let (bytes, lines, sha256) = stream_info(&f.file, &f.rel)?;
    let m = f.meta.modified().unwrap_or(std::time::UNIX_EPOCH);
    Ok(InfoResult {
        path: f.rel,
        lines,
        size: bytes,
        bytes,
        sha256,
        mtime: unix_secs(m),
        modified: rfc3339(m),
    })
}

/// `outline` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutlineArgs {
    /// Workspace-relative path of a Markdown file.
    pub path: String,
    /// Most headings to return (default 200, at most 2000).
    #[serde(default)]
    pub max_headings: Option<usize>,
}

/// One Markdown heading.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Heading {
    /// 1-based line number.
    pub line: usize,
    /// 1 for "#", 6 for "######".
    pub level: usize,
    /// The heading text without the "#" marks.
    pub text: String,
}

/// `outline` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OutlineResult {
    /// The resolved path.
    pub path: String,
    /// Headings in file order.
    pub headings: Vec<Heading>,
    /// Headings in the whole file.
    pub total: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// Whether headings were left out (raise max_headings).
    pub truncated: bool,
}

fn heading(line: &str) -> Option<(usize, String)> {
    let l = line.strip_suffix('\r').unwrap_or(line);
    let indent = l.len() - l.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let l = &l[indent..];
    let level = l.len() - l.trim_start_matches('#').len();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &l[level..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    let t = rest.trim();
    // A closing run of '#' preceded by a space is not part of the text.
    let t = match t.trim_end_matches('#') {
        s if s.len() < t.len() && (s.is_empty() || s.ends_with(' ')) => s.trim_end(),
        _ => t,
    };
    Some((level, t.to_string()))
}

/// Headings found so far by [`outline`], outside code fences.
struct Outliner {
    headings: Vec<Heading>,
    total: usize,
    max: usize,
    fence: Option<&'static str>,
}

impl Outliner {
    fn visit(&mut self, n: usize, l: &str) {
        let t = l.trim_start_matches(' ');
        if let Some(f) = self.fence {
            if t.starts_with(f) {
                self.fence = None;
            }
        } else if t.starts_with("```") {
            self.fence = Some("```");
        } else if t.starts_with("~~~") {
            self.fence = Some("~~~");
        } else if let Some((level, text)) = heading(l) {
            self.total += 1;
            if self.headings.len() < self.max {
                self.headings.push(Heading {
                    line: n,
                    level,
                    text: crate::text::cut(&text, MAX_LINE_CHARS),
                });
            }
        }
    }
}

/// Lines of YAML front matter held back while looking for its end; a longer "front matter"
/// is taken as ordinary lines.
const FRONT_MATTER_LINES: usize = 1_000;

pub(crate) fn outline(root: &ToolRoot, a: OutlineArgs) -> ToolResult<OutlineResult> {
    let max = a.max_headings.unwrap_or(OUTLINE_DEFAULT).min(OUTLINE_MAX);
    let mut lines = stream::open(root, &a.path)?;
    let mut o = Outliner {
        headings: Vec::new(),
        total: 0,
        max,
        fence: None,
    };
    // YAML front matter (`---` on the first line, up to `---` or `...`): its '#' lines are
    // comments, not headings. Held back until its end is seen.
    let mut front: Option<Vec<(usize, String)>> = None;
    while let Some((n, l)) = lines.next_line()? {
        if n == 1 && l.trim_end() == "---" {
            front = Some(vec![(n, l.to_string())]);
            continue;
        }
        if let Some(held) = &mut front {
            let t = l.trim_end();
            if t == "---" || t == "..." {
                front = None;
                continue;
            }
            held.push((n, l.to_string()));
            if held.len() <= FRONT_MATTER_LINES {
                continue;
            }
            for (hn, hl) in front.take().unwrap_or_default() {
                o.visit(hn, &hl);
            }
            continue;
        }
        o.visit(n, l);
    }
    // Never closed: not front matter after all.
    for (hn, hl) in front.take().unwrap_or_default() {
        o.visit(hn, &hl);
    }
    let rel = lines.rel().to_string();
    let total_lines = lines.count_rest()?;
    Ok(OutlineResult {
        path: rel,
        truncated: o.total > o.headings.len(),
        headings: o.headings,
        total: o.total,
        total_lines,
    })
}

/// `search` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Workspace-relative path of the file to search.
    pub path: String,
    /// The text to find (a regular expression if regex is true).
    pub pattern: String,
    /// Treat pattern as a regular expression (Rust regex syntax). Default false.
    #[serde(default)]
    pub regex: bool,
    /// Ignore case. Default false.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Lines of context before and after each hit (default 0, at most 10; more is capped,
    /// and the answer says so).
    #[serde(default)]
    pub context: Option<usize>,
    /// Most hits to return (default 20, at most 500).
    #[serde(default)]
    pub max_hits: Option<usize>,
    /// Most characters of hits and context to return (default 20000, at most 100000).
    #[serde(default)]
    pub max_chars: Option<usize>,
}

/// One matching line.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LineMatch {
    /// 1-based line number.
    pub line: usize,
    /// The line (cut at 500 characters).
    pub text: String,
    /// Lines before it, oldest first.
    pub context_before: Vec<String>,
    /// Lines after it.
    pub context_after: Vec<String>,
}

/// `search` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResult {
    /// The resolved path.
    pub path: String,
    /// The first max_hits matching lines.
    pub matches: Vec<LineMatch>,
    /// Matching lines in the whole file.
    pub total_hits: usize,
    /// Whether hits were left out (raise max_hits or narrow the pattern).
    pub truncated: bool,
    /// What was capped, and how to get the rest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Builds the matcher for a search pattern, bounded in size.
pub(crate) fn matcher(pattern: &str, regex: bool, ci: bool) -> ToolResult<Regex> {
    if pattern.is_empty() {
        return Err(ToolError::InvalidArgs(
            "pattern is empty; give the text to search for.".into(),
        ));
    }
    let src = if regex {
        pattern.to_string()
    } else {
        regex::escape(pattern)
    };
    RegexBuilder::new(&src)
        .case_insensitive(ci)
        .size_limit(4 << 20)
        .dfa_size_limit(8 << 20)
        .build()
        .map_err(|e| {
            ToolError::InvalidArgs(format!(
                "pattern is not a valid regular expression: {e}. Set regex=false to search for the literal text."
            ))
        })
}

/// The `context` lines around index `i` of `ls`.
pub(crate) fn context_of(ls: &[&str], i: usize, ctx: usize) -> (Vec<String>, Vec<String>) {
    let before = ls[i.saturating_sub(ctx)..i]
        .iter()
        .map(|l| show_line(l))
        .collect();
    let after = ls[(i + 1).min(ls.len())..(i + 1 + ctx).min(ls.len())]
        .iter()
        .map(|l| show_line(l))
        .collect();
    (before, after)
}

pub(crate) fn search(root: &ToolRoot, a: SearchArgs) -> ToolResult<SearchResult> {
    let re = matcher(&a.pattern, a.regex, a.case_insensitive)?;
    let asked = a.context.unwrap_or(0);
    let ctx = asked.min(MAX_CONTEXT);
    let max = a
        .max_hits
        .unwrap_or(SEARCH_DEFAULT_HITS)
        .min(SEARCH_MAX_HITS);
    let max_chars = budget(a.max_chars);
    let mut notes = Vec::new();
    if asked > ctx {
        notes.push(format!(
            "context is at most {MAX_CONTEXT} lines; {asked} was asked (read the lines around a hit with read_range)"
        ));
    }
    let mut lines = stream::open(root, &a.path)?;
    let mut matches: Vec<LineMatch> = Vec::new();
    // The lines before the current one, and the hits still taking lines after them.
    let mut before: std::collections::VecDeque<String> = Default::default();
    let mut after: Vec<(usize, usize)> = Vec::new();
    let (mut total, mut chars, mut cut) = (0usize, 0usize, false);
    while let Some((n, l)) = lines.next_line()? {
        let shown = show_line(l);
        for (i, left) in after.iter_mut() {
            matches[*i].context_after.push(shown.clone());
            chars += shown.chars().count();
            *left -= 1;
        }
        after.retain(|(_, left)| *left > 0);
        if re.is_match(l.strip_suffix('\r').unwrap_or(l)) {
            total += 1;
            let size: usize =
                shown.chars().count() + before.iter().map(|b| b.chars().count()).sum::<usize>();
            if matches.len() < max && !cut && chars + size <= max_chars {
                chars += size;
                matches.push(LineMatch {
                    line: n,
                    text: shown.clone(),
                    context_before: before.iter().cloned().collect(),
                    context_after: Vec::new(),
                });
                if ctx > 0 {
                    after.push((matches.len() - 1, ctx));
                }
            } else if matches.len() < max {
                cut = true;
            }
        }
        if ctx > 0 {
            before.push_back(shown);
            if before.len() > ctx {
                before.pop_front();
            }
        }
    }
    if cut {
        notes.push(format!(
            "hits after line {} were left out to keep the answer under {max_chars} characters; search again from there with read_range, lower context, or raise max_chars",
            matches.last().map_or(0, |m| m.line)
        ));
    }
    Ok(SearchResult {
        path: lines.rel().to_string(),
        truncated: total > matches.len(),
        matches,
        total_hits: total,
        notes,
    })
}

/// `read_range` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RangeArgs {
    /// Workspace-relative path.
    pub path: String,
    /// First line, 1-based. Also accepted as start_line.
    #[serde(alias = "start_line")]
    pub start: usize,
    /// Last line, inclusive (default: start + 1999; clamped to the file's end). Also accepted
    /// as end_line.
    #[serde(default, alias = "end_line")]
    pub end: Option<usize>,
    /// Prefix each line with its number and a tab. Default false.
    #[serde(default)]
    pub line_numbers: bool,
    /// Most characters to return (default 20000, at most 100000); the cut falls on a line boundary.
    #[serde(default)]
    pub max_chars: Option<usize>,
}

/// `head` / `tail` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeadArgs {
    /// Workspace-relative path.
    pub path: String,
    /// How many lines (default 50, at most 2000).
    #[serde(default)]
    pub lines: Option<usize>,
    /// Prefix each line with its number and a tab. Default false.
    #[serde(default)]
    pub line_numbers: bool,
    /// Most characters to return (default 20000, at most 100000); the cut falls on a line boundary.
    #[serde(default)]
    pub max_chars: Option<usize>,
}

/// A range of lines.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RangeResult {
    /// The resolved path.
    pub path: String,
    /// First line returned (1-based).
    pub start: usize,
    /// Last line returned (0 when none).
    pub end: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// The lines, each ending with a newline (as read_file's content).
    pub content: String,
    /// The whole file's sha256, the base_sha256 for apply_patch and edit_exact (for files the
    /// editing tools take: at most max_text_file_bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Whether fewer lines than asked were returned because of the size caps.
    pub truncated: bool,
    /// Where to continue reading, when lines remain after end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start: Option<usize>,
    /// How to read on, when the character budget cut the range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The character budget of a call: `max_chars`, default [`READ_FILE_DEFAULT_CHARS`], at
/// most [`READ_MAX_CHARS`].
fn budget(max_chars: Option<usize>) -> usize {
    max_chars
        .unwrap_or(READ_FILE_DEFAULT_CHARS)
        .clamp(1, READ_MAX_CHARS)
}

/// Lines `start..=end` of `lines` within `max_chars`, after the checks every reading tool
/// makes: `start` is 1-based, not past the end, and `end` not before it. `None` for an empty
/// file.
fn checked_window(
    lines: Lines,
    start: usize,
    end: usize,
    numbers: bool,
    max_chars: usize,
) -> ToolResult<Option<stream::Window>> {
    if start == 0 {
        return Err(ToolError::InvalidArgs(
            "start is 1-based: the first line is 1.".into(),
        ));
    }
    if end < start {
        return Err(ToolError::InvalidArgs(format!(
            "end ({end}) is before start ({start})."
        )));
    }
    let w = stream::window(lines, start, end, numbers, max_chars)?;
    if w.total == 0 {
        return Ok(None);
    }
    if start > w.total {
        return Err(ToolError::InvalidArgs(format!(
            "start ({start}) is past the end: '{}' has {} lines.",
            show(&w.rel),
            w.total
        )));
    }
    Ok(Some(w))
}

/// Lines `start..=want_end` of `lines` (at most [`READ_MAX_LINES`]) as a [`RangeResult`].
fn range(
    root: &ToolRoot,
    lines: Lines,
    start: usize,
    want_end: usize,
    numbers: bool,
    max_chars: usize,
) -> ToolResult<RangeResult> {
    let rel = lines.rel().to_string();
    let sha256 = lines.sha256(root.limits().max_text_file_bytes);
    let capped_end = want_end.min(start.saturating_add(READ_MAX_LINES - 1));
    let Some(w) = checked_window(lines, start, capped_end, numbers, max_chars)? else {
        return Ok(RangeResult {
            sha256,
            ..empty_range(rel)
        });
    };
    let wanted = want_end.min(w.total);
    let cut = w.end < capped_end.min(w.total);
    let note = cut.then(|| {
        format!(
            "cut at {max_chars} characters after line {}; read on with read_range {{\"path\": \"{}\", \"start\": {}}} (or raise max_chars)",
            w.end,
            w.rel,
            w.end + 1
        )
    });
    Ok(RangeResult {
        path: w.rel,
        start,
        end: w.end,
        total_lines: w.total,
        content: w.text,
        sha256,
        truncated: w.end < wanted,
        next_start: (w.end < w.total).then_some(w.end + 1),
        note,
    })
}

pub(crate) fn read_range(root: &ToolRoot, a: RangeArgs) -> ToolResult<RangeResult> {
    let lines = stream::open(root, &a.path)?;
    let end = a.end.unwrap_or(a.start.saturating_add(READ_MAX_LINES - 1));
    range(
        root,
        lines,
        a.start,
        end,
        a.line_numbers,
        budget(a.max_chars),
    )
}

fn empty_range(rel: String) -> RangeResult {
    RangeResult {
        path: rel,
        start: 1,
        end: 0,
        total_lines: 0,
        content: String::new(),
        sha256: None,
        truncated: false,
        next_start: None,
        note: None,
    }
}

pub(crate) fn head(root: &ToolRoot, a: HeadArgs) -> ToolResult<RangeResult> {
    let lines = stream::open(root, &a.path)?;
    let n = a
        .lines
        .unwrap_or(HEAD_DEFAULT_LINES)
        .clamp(1, READ_MAX_LINES);
    range(root, lines, 1, n, a.line_numbers, budget(a.max_chars))
}

/// The first and last line numbers of a file's last `n` lines (`1..=1` for an empty file), and
/// the file ready to read from its start.
fn last_lines(lines: Lines, n: usize) -> ToolResult<(usize, usize, Lines)> {
    let (total, lines) = lines.counted()?;
    Ok((total.saturating_sub(n) + 1, total.max(1), lines))
}

pub(crate) fn tail(root: &ToolRoot, a: HeadArgs) -> ToolResult<RangeResult> {
    let n = a
        .lines
        .unwrap_or(HEAD_DEFAULT_LINES)
        .clamp(1, READ_MAX_LINES);
    let (start, end, lines) = last_lines(stream::open(root, &a.path)?, n)?;
    range(root, lines, start, end, a.line_numbers, budget(a.max_chars))
}

/// `read_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Workspace-relative path.
    pub path: String,
    /// First line to read, 1-based (default 1). Also accepted as start_line.
    #[serde(default, alias = "start_line")]
    pub start: Option<usize>,
    /// Last line to read, inclusive (default: the end of the file). Also accepted as end_line.
    #[serde(default, alias = "end_line")]
    pub end: Option<usize>,
    /// Only the first this many lines (instead of start/end).
    #[serde(default)]
    pub head: Option<usize>,
    /// Only the last this many lines (instead of start/end).
    #[serde(default)]
    pub tail: Option<usize>,
    /// Prefix each line with its number and a tab (default false, as every reading tool).
    #[serde(default)]
    pub line_numbers: Option<bool>,
    /// Most characters to return (default 20000, at most 100000); the cut falls on a line boundary.
    #[serde(default)]
    pub max_chars: Option<usize>,
}

/// `read_file` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadFileResult {
    /// The resolved path.
    pub path: String,
    /// The text (with line numbers when line_numbers=true).
    pub content: String,
    /// The whole file's sha256, the base_sha256 for apply_patch and edit_exact (for files the
    /// editing tools take: at most max_text_file_bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// First line shown.
    pub start: usize,
    /// Last line shown (0 when none).
    pub end: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// Whether the requested lines did not all fit.
    pub truncated: bool,
    /// How to read on, when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

pub(crate) fn read_file_budget(
    root: &ToolRoot,
    a: &ReadFileArgs,
    max_chars: usize,
) -> ToolResult<ReadFileResult> {
    let numbers = a.line_numbers.unwrap_or(false);
    let lines = stream::open(root, &a.path)?;
    let rel = lines.rel().to_string();
    let sha256 = lines.sha256(root.limits().max_text_file_bytes);
    let (start, end, lines) = match (a.head, a.tail) {
        (Some(_), Some(_)) => {
            return Err(ToolError::InvalidArgs(
                "give head or tail, not both (or start and end for a range).".into(),
            ))
        }
        (Some(_), _) | (_, Some(_)) if a.start.is_some() || a.end.is_some() => {
            return Err(ToolError::InvalidArgs(
                "head and tail cannot be combined with start or end; use one way of choosing lines."
                    .into(),
            ))
        }
        (Some(0), _) | (_, Some(0)) => {
            return Err(ToolError::InvalidArgs(
                "head and tail count lines: give at least 1.".into(),
            ))
        }
        (Some(n), None) => (1, n, lines),
        (None, Some(n)) => last_lines(lines, n)?,
        (None, None) => (a.start.unwrap_or(1), a.end.unwrap_or(usize::MAX), lines),
    };
    let Some(w) = checked_window(lines, start, end, numbers, max_chars)? else {
        return Ok(ReadFileResult {
            path: rel,
            content: String::new(),
            sha256,
            start: 1,
            end: 0,
            total_lines: 0,
            truncated: false,
            note: Some("The file is empty.".into()),
        });
    };
    let (rel, total) = (w.rel, w.total);
    let want_end = end.min(total);
    let end = w.end;
    let truncated = end < want_end;
    let note = truncated.then(|| {
        format!(
            "Showing lines {start}-{end} of {total} (cut at {max_chars} characters). To read on, call read_file with {{\"path\": \"{rel}\", \"start\": {}}}.",
            end + 1
        )
    });
    Ok(ReadFileResult {
        path: rel,
        content: w.text,
        sha256,
        start,
        end,
        total_lines: total,
        truncated,
        note,
    })
}

pub(crate) fn read_file(root: &ToolRoot, a: ReadFileArgs) -> ToolResult<ReadFileResult> {
    read_file_budget(root, &a, budget(a.max_chars))
}

/// `read_multiple_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadMultipleArgs {
    /// Workspace-relative paths (at most 20).
    pub paths: Vec<String>,
    /// Total characters shared equally among the files (default 50000, at most 100000).
    #[serde(default)]
    pub max_chars: Option<usize>,
    /// Prefix each line with its number and a tab (default false).
    #[serde(default)]
    pub line_numbers: Option<bool>,
}

/// One file of `read_multiple_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MultiFile {
    /// The path as requested, or resolved when found.
    pub path: String,
    /// Whether this file was read.
    pub ok: bool,
    /// The text, when ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Lines in the file, when ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_lines: Option<usize>,
    /// Whether the content was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// How to read on, when cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The error code, when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error message, when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `read_multiple_files` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadMultipleResult {
    /// One entry per requested path, in order.
    pub files: Vec<MultiFile>,
}

pub(crate) fn read_multiple_files(
    root: &ToolRoot,
    a: ReadMultipleArgs,
) -> ToolResult<ReadMultipleResult> {
    if a.paths.is_empty() {
        return Err(ToolError::InvalidArgs(
            "paths is empty; list the files to read.".into(),
        ));
    }
    if a.paths.len() > MULTI_MAX_FILES {
        return Err(ToolError::TooLarge(format!(
            "{} paths given; read_multiple_files reads at most {MULTI_MAX_FILES} per call. Split the list.",
            a.paths.len()
        )));
    }
    let total = a
        .max_chars
        .unwrap_or(MULTI_DEFAULT_CHARS)
        .clamp(1, READ_MAX_CHARS);
    let each = (total / a.paths.len()).max(1);
    let files = a
        .paths
        .into_iter()
        .map(|p| {
            let args = ReadFileArgs {
                path: p.clone(),
                start: None,
                end: None,
                head: None,
                tail: None,
                line_numbers: a.line_numbers,
                max_chars: None,
            };
            match read_file_budget(root, &args, each) {
                Ok(r) => MultiFile {
                    path: r.path,
                    ok: true,
                    content: Some(r.content),
                    total_lines: Some(r.total_lines),
                    truncated: Some(r.truncated),
                    note: r.note,
                    error: None,
                    message: None,
                },
                Err(e) => MultiFile {
                    path: p,
                    ok: false,
                    content: None,
                    total_lines: None,
                    truncated: None,
                    note: None,
                    error: Some(e.code().into()),
                    message: Some(e.to_string()),
                },
            }
        })
        .collect();
    Ok(ReadMultipleResult { files })
}

#[cfg(test)]
mod tests {
    use super::heading;

    #[test]
    fn headings() {
        assert_eq!(heading("# Title"), Some((1, "Title".into())));
        assert_eq!(heading("### A ###"), Some((3, "A".into())));
        assert_eq!(heading("   ## x"), Some((2, "x".into())));
        assert_eq!(heading("#nospace"), None);
        assert_eq!(heading("####### seven"), None);
        assert_eq!(heading("    # code"), None);
        assert_eq!(heading("## C#"), Some((2, "C#".into())));
    }
}
