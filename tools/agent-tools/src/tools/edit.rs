//! Writing tools: apply_patch, edit_exact, edit_file, write_file. Each holds the file's lock from
//! reading the current content to the atomic rename, so concurrent edits serialize and a stale
//! base hash is always detected; each keeps a backup of the content it replaces.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::access::Access;
use crate::beneath::{self, FILE_READ};
use crate::error::{ToolError, ToolResult};
use crate::fsops::{
    atomic_write, backup, may_rewrite, read_limited, sha256_hex, write_charged, write_growth,
};
use crate::limits::{MAX_CANDIDATES, MAX_DIFF_CHARS};
use crate::patch::{self, AppliedHunk};
use crate::paths::{show, Found};
use crate::text::{as_in_file, decode, eol_of, lines, nearest_line, show_line};
use crate::{PathGuard, ToolRoot};

/// `apply_patch` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchArgs {
    /// Workspace-relative path of the file to patch.
    pub path: String,
    /// The sha256 of the file the patch was made against (from info or a previous edit).
    pub base_sha256: String,
    /// A unified diff for this one file: optional ---/+++ lines, then @@ -a,b +c,d @@ hunks.
    pub patch: String,
    /// Check that the patch applies and return the new hash without writing. Default false.
    #[serde(default)]
    pub dry_run: bool,
}

/// `apply_patch` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ApplyPatchResult {
    /// The resolved path.
    pub path: String,
    /// sha256 of the new content: the base_sha256 for the next edit.
    pub sha256: String,
    /// Where the previous content was saved (absent on dry_run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// Where each hunk applied.
    pub hunks: Vec<AppliedHunk>,
    /// Lines after the edit.
    pub lines: usize,
    /// Bytes after the edit.
    pub bytes: usize,
    /// Whether nothing was written.
    pub dry_run: bool,
}

pub(super) fn check_hash(rel: &str, expected: &str, actual: &str) -> ToolResult<()> {
    let e = expected.trim();
    if e.len() != 64 || !e.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ToolError::InvalidArgs(
            "base_sha256 must be the 64 hex digits of sha256 returned by info (or by your last edit)."
                .into(),
        ));
    }
    if !e.eq_ignore_ascii_case(actual) {
        return Err(ToolError::HashMismatch {
            path: rel.to_string(),
            expected: e.to_ascii_lowercase(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

/// A locked, loaded file: resolved, checked for write access, read.
pub(super) struct Loaded {
    pub(super) f: Found,
    bytes: Vec<u8>,
    pub(super) sha256: String,
}

/// How long a host waits for its view of a file to show what another host's last edit left
/// (the shared volume's caches), before it takes the file as it sees it.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// Reads the file `guard` locks. In a store that hosts share, until it shows what the last
/// edit on any host left (for [`SETTLE`] at most: a file changed since by plain writes never
/// will), opening it again each time, as another host's rename reaches this host's view late.
pub(super) fn load(root: &ToolRoot, guard: &PathGuard<'_>, mut f: Found) -> ToolResult<Loaded> {
    let max = root.limits().max_text_file_bytes;
    let mut bytes = read_limited(&f.file, &f.rel, max)?;
    let mut sha256 = sha256_hex(&bytes);
    if let Some(last) = guard.shared.as_ref().and_then(|s| s.last_sha256()) {
        let deadline = std::time::Instant::now() + SETTLE;
        while sha256 != last && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            f = root.open_file(f.rel)?;
            bytes = read_limited(&f.file, &f.rel, max)?;
            sha256 = sha256_hex(&bytes);
        }
    }
    Ok(Loaded { f, bytes, sha256 })
}

/// Backs up the old content and replaces the file with `new` (recording its hash for other
/// hosts' editors). Returns the backup path.
pub(super) fn commit(
    root: &ToolRoot,
    guard: &mut PathGuard<'_>,
    l: &Loaded,
    new: &[u8],
) -> ToolResult<String> {
    let rel = &l.f.rel;
    let slot = root.slot(rel, false)?.ok_or_else(|| {
        ToolError::NotFound(format!(
            "the folder of '{}' was removed while it was being edited; nothing was written.",
            show(rel)
        ))
    })?;
    may_rewrite(root, &slot, rel, &l.f.meta)?;
    // The write is charged before the backup: a write over quota keeps no backup either.
    root.charge_growth(write_growth(new, Some(&l.f.meta)))?;
    let b = backup(root, rel, &l.bytes, &l.f.meta)?;
    write_charged(
        root,
        &slot,
        rel,
        &l.f.abs,
        new,
        Some((&l.f.meta, Some(&l.f.file))),
    )?;
    if let Some(shared) = guard.shared.as_mut() {
        // The file is written: a failure here only costs the next editor on another host a
        // wait, which it then ends by taking the file as it sees it.
        let _ = shared.record(&sha256_hex(new));
    }
    Ok(b)
}

pub(crate) fn apply_patch(root: &ToolRoot, a: ApplyPatchArgs) -> ToolResult<ApplyPatchResult> {
    let (mut guard, f) = root.locked_file(&a.path, Access::Write)?;
    let l = load(root, &guard, f)?;
    let p = patch::parse(&a.patch).map_err(|m| ToolError::PatchFailed {
        message: format!("the patch could not be read: {m} The file is unchanged."),
        details: vec![m],
    })?;
    let text = decode(&l.bytes, &l.f.rel);
    // A re-sent patch is recognised before its stale base hash is: the hash answers "changed
    // since you read it", which sends the caller to rebuild an edit that is already made.
    let already = || {
        ToolError::AlreadyApplied(format!(
            "'{}' already contains this patch's changes (its added lines are there and its removed lines are not), so nothing was written. Call info for the current sha256 before the next edit.",
            show(&l.f.rel)
        ))
    };
    if let Err(e) = check_hash(&l.f.rel, &a.base_sha256, &l.sha256) {
        let stale = matches!(e, ToolError::HashMismatch { .. });
        let applied = |t: &&str| patch::apply(t, &p).is_err() && patch::holds_result(t, &p);
        if stale && text.as_ref().is_ok_and(applied) {
            return Err(already());
        }
        return Err(e);
    }
    let text = text?;
    let (new, hunks) = match patch::apply(text, &p) {
        Ok(done) => done,
        Err(_) if patch::holds_result(text, &p) => return Err(already()),
        Err(details) => {
            return Err(ToolError::PatchFailed {
                message: format!(
                    "the patch does not apply to '{}'; the file is unchanged. {} Re-read those lines with read_range and rebuild the hunk from the exact current text.",
                    show(&l.f.rel),
                    details.join(" ")
                ),
                details,
            })
        }
    };
    let sha256 = sha256_hex(new.as_bytes());
    let backup = if a.dry_run {
        None
    } else {
        Some(commit(root, &mut guard, &l, new.as_bytes())?)
    };
    Ok(ApplyPatchResult {
        path: l.f.rel.clone(),
        sha256,
        backup,
        hunks,
        lines: lines(&new).len(),
        bytes: new.len(),
        dry_run: a.dry_run,
    })
}

/// `edit_exact` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditExactArgs {
    /// Workspace-relative path.
    pub path: String,
    /// The exact text to replace (whitespace and line breaks matter).
    pub old: String,
    /// The replacement text.
    pub new: String,
    /// Most occurrences allowed; all of them are replaced (default 1).
    #[serde(default)]
    pub count: Option<usize>,
    /// If given, the file's sha256 must still be this.
    #[serde(default)]
    pub base_sha256: Option<String>,
}

/// `edit_exact` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EditExactResult {
    /// The resolved path.
    pub path: String,
    /// Occurrences replaced.
    pub replacements: usize,
    /// sha256 of the new content.
    pub sha256: String,
    /// Where the previous content was saved.
    pub backup: String,
    /// How the text was matched when not as given (line endings, pasted line numbers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The 1-based line numbers and lines where `needle` starts in `text`.
fn occurrences(text: &str, needle: &str) -> Vec<serde_json::Value> {
    let ls = lines(text);
    text.match_indices(needle)
        .take(MAX_CANDIDATES)
        .map(|(i, _)| {
            let line = text[..i].matches('\n').count() + 1;
            json!({"line": line, "text": ls.get(line - 1).map(|l| show_line(l)).unwrap_or_default()})
        })
        .collect()
}

/// " The closest line is N: `…`." for a text that was not found, or nothing.
fn nearest(text: &str, wanted: &str) -> String {
    match nearest_line(text, wanted) {
        Some((n, line)) => format!(" The closest line is {n}: {line:?}."),
        None => String::new(),
    }
}

/// The refusal of an edit whose `old` text is not in the file. When the file holds its `new`
/// text instead, it changed since the caller read it (an edit like this one, made by someone
/// else first): that, not a near line, is what the caller must hear.
fn not_there(rel: &str, what: &str, text: &str, old: &str, new: &str) -> String {
    if !new.is_empty() && text.contains(new) {
        return format!(
            "{what} does not occur in '{}', and its new text already does: the file changed since you read it (another edit made this change first?); nothing changed. Read it again before editing (info or read_file give its sha256; pass it as base_sha256 to be told of such changes for sure).",
            show(rel)
        );
    }
    format!(
        "{what} does not occur in '{}'; nothing changed.{} Copy it exactly from read_file or search (whitespace matters; line endings and pasted line numbers are taken care of). If the file may have changed since you read it, read it again.",
        show(rel),
        nearest(text, old)
    )
}

pub(crate) fn edit_exact(root: &ToolRoot, a: EditExactArgs) -> ToolResult<EditExactResult> {
    if a.old.is_empty() {
        return Err(ToolError::InvalidArgs(
            "old is empty; give the exact text to replace (to add text, use edit_file with insert)."
                .into(),
        ));
    }
    let count = a.count.unwrap_or(1);
    if count == 0 {
        return Err(ToolError::InvalidArgs("count must be at least 1.".into()));
    }
    let (mut guard, f) = root.locked_file(&a.path, Access::Write)?;
    let l = load(root, &guard, f)?;
    if let Some(base) = &a.base_sha256 {
        check_hash(&l.f.rel, base, &l.sha256)?;
    }
    let text = decode(&l.bytes, &l.f.rel)?;
    let (old, replacement, note) = as_in_file(text, &a.old, &a.new);
    let n = text.matches(old.as_str()).count();
    if n == 0 {
        return Err(ToolError::NotFound(not_there(
            &l.f.rel,
            "the text of old",
            text,
            &a.old,
            &replacement,
        )));
    }
    if n > count {
        return Err(ToolError::MultipleMatches {
            message: format!(
                "the text of old occurs {n} times in '{}', more than count={count}; nothing changed. Include more surrounding text to make it unique, or set count to {n} to replace all.",
                show(&l.f.rel)
            ),
            candidates: occurrences(text, &old),
        });
    }
    let new = text.replace(old.as_str(), &replacement);
    let sha256 = sha256_hex(new.as_bytes());
    let backup = commit(root, &mut guard, &l, new.as_bytes())?;
    Ok(EditExactResult {
        path: l.f.rel.clone(),
        replacements: n,
        sha256,
        backup,
        notes: note.map(str::to_string).into_iter().collect(),
    })
}

/// One search/replace edit.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Replace {
    /// The exact text to find. Also accepted as oldText.
    #[serde(alias = "oldText")]
    pub old: String,
    /// Its replacement. Also accepted as newText.
    #[serde(alias = "newText")]
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one. Default false.
    #[serde(default)]
    pub replace_all: bool,
}

/// A line-based insertion.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Insert {
    /// Insert after this line (1-based); 0 inserts at the top; the line count appends at the end.
    pub line: usize,
    /// The text to insert (a newline is added at its end if missing).
    pub text: String,
}

/// `edit_file` arguments: `edits`, `insert`, or both (the insert applies first, at the original
/// line numbers).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// Workspace-relative path.
    pub path: String,
    /// Search/replace edits, applied in order.
    #[serde(default)]
    pub edits: Vec<Replace>,
    /// A line-based insertion.
    #[serde(default)]
    pub insert: Option<Insert>,
    /// Return the diff without writing. Default false. Also accepted as dryRun.
    #[serde(default, alias = "dryRun")]
    pub dry_run: bool,
    /// If given, the file's sha256 must still be this.
    #[serde(default)]
    pub base_sha256: Option<String>,
}

/// `edit_file` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EditFileResult {
    /// The resolved path.
    pub path: String,
    /// Unified diff of the change (cut at 20000 characters).
    pub diff: String,
    /// Whether the diff was cut.
    pub diff_truncated: bool,
    /// Whether the content changed.
    pub changed: bool,
    /// sha256 of the new content (of the would-be content on dry_run).
    pub sha256: String,
    /// Where the previous content was saved (absent on dry_run or when unchanged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// How edits were matched when not as given (line endings, pasted line numbers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A unified diff of two texts, cut to [`MAX_DIFF_CHARS`].
pub(crate) fn unified_diff(rel: &str, old: &str, new: &str) -> (String, bool) {
    let d = similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{rel}"), &format!("b/{rel}"))
        .to_string();
    match d.char_indices().nth(MAX_DIFF_CHARS) {
        None => (d, false),
        Some((i, _)) => (d[..i].to_string(), true),
    }
}

fn insert_at(text: &str, ins: &Insert, rel: &str) -> ToolResult<String> {
    let ls = lines(text);
    if ins.line > ls.len() {
        return Err(ToolError::InvalidArgs(format!(
            "insert.line is {} but '{}' has {} lines; use 0 for the top or {} for the end.",
            ins.line,
            show(rel),
            ls.len(),
            ls.len()
        )));
    }
    let eol = eol_of(text);
    let mut piece = ins.text.replace("\r\n", "\n");
    if !piece.ends_with('\n') {
        piece.push('\n');
    }
    if eol == "\r\n" {
        piece = piece.replace('\n', "\r\n");
    }
    // Byte offset of the start of line ins.line + 1.
    let mut at = 0;
    for _ in 0..ins.line {
        at = match text[at..].find('\n') {
            Some(i) => at + i + 1,
            None => text.len(),
        };
    }
    let mut out = String::with_capacity(text.len() + piece.len() + 2);
    out.push_str(&text[..at]);
    if at == text.len() && !text.is_empty() && !text.ends_with('\n') {
        out.push_str(eol);
    }
    out.push_str(&piece);
    out.push_str(&text[at..]);
    Ok(out)
}

pub(crate) fn edit_file(root: &ToolRoot, a: EditFileArgs) -> ToolResult<EditFileResult> {
    if a.edits.is_empty() && a.insert.is_none() {
        return Err(ToolError::InvalidArgs(
            "nothing to do: give edits [{\"old\": ..., \"new\": ...}] and/or insert {\"line\": N, \"text\": ...}.".into(),
        ));
    }
    let (mut guard, f) = root.locked_file(&a.path, Access::Write)?;
    let l = load(root, &guard, f)?;
    if let Some(base) = &a.base_sha256 {
        check_hash(&l.f.rel, base, &l.sha256)?;
    }
    let rel = l.f.rel.clone();
    let old = decode(&l.bytes, &rel)?;
    let mut text = match &a.insert {
        Some(ins) => insert_at(old, ins, &rel)?,
        None => old.to_string(),
    };
    let mut notes = Vec::new();
    for (k, e) in a.edits.iter().enumerate() {
        if e.old.is_empty() {
            return Err(ToolError::InvalidArgs(format!(
                "edits[{k}].old is empty; give the exact text to replace."
            )));
        }
        let (find, replacement, note) = as_in_file(&text, &e.old, &e.new);
        if let Some(note) = note {
            notes.push(format!("edits[{k}]: {note}"));
        }
        let n = text.matches(find.as_str()).count();
        if n == 0 {
            return Err(ToolError::NotFound(not_there(
                &rel,
                &format!("edits[{k}].old (after the earlier edits)"),
                &text,
                &e.old,
                &replacement,
            )));
        }
        if n > 1 && !e.replace_all {
            return Err(ToolError::MultipleMatches {
                message: format!(
                    "edits[{k}].old occurs {n} times in '{}'; nothing changed. Add surrounding text to make it unique, or set replace_all=true.",
                    show(&rel)
                ),
                candidates: occurrences(&text, &find),
            });
        }
        text = text.replace(find.as_str(), &replacement);
    }
    let (diff, diff_truncated) = unified_diff(&rel, old, &text);
    let changed = text != old;
    let sha256 = sha256_hex(text.as_bytes());
    let backup = if a.dry_run || !changed {
        None
    } else {
        Some(commit(root, &mut guard, &l, text.as_bytes())?)
    };
    Ok(EditFileResult {
        path: rel,
        diff,
        diff_truncated,
        changed,
        sha256,
        backup,
        dry_run: a.dry_run,
        notes,
    })
}

/// `write_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Workspace-relative path of the file to create or overwrite.
    pub path: String,
    /// The complete new content.
    pub content: String,
    /// Create missing parent folders (default true).
    #[serde(default)]
    pub create_parents: Option<bool>,
    /// Allow replacing an existing file (default true).
    #[serde(default)]
    pub overwrite: Option<bool>,
}

/// `write_file` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WriteFileResult {
    /// The path written.
    pub path: String,
    /// Bytes written.
    pub bytes: usize,
    /// Whether the file is new.
    pub created: bool,
    /// sha256 of the content.
    pub sha256: String,
    /// Where the overwritten content was saved, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// Set when existing names that differ only in case were used for the ones asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

pub(crate) fn write_file(root: &ToolRoot, a: WriteFileArgs) -> ToolResult<WriteFileResult> {
    let crate::paths::Target {
        rel, abs, reused, ..
    } = root.target(&a.path, Access::Write)?;
    let _guard = root.locks.lock(&[&abs]);
    let Some(slot) = root.slot(&rel, a.create_parents != Some(false))? else {
        return Err(ToolError::NotFound(format!(
            "the folder for '{}' does not exist and create_parents=false. Create it with create_folder or set create_parents=true.",
            show(&rel)
        )));
    };
    // What is there now, under the lock, seen through the opened folder.
    let meta = match beneath::lstat(&slot.dir, &slot.name) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(ToolError::io(format!("looking up '{}'", show(&rel)), e)),
    };
    let mut backup_path = None;
    match &meta {
        Some(m) if m.is_dir() => {
            return Err(ToolError::NotAFile(format!(
                "'{}' is a folder; choose a file name inside it.",
                show(&rel)
            )))
        }
        Some(m) if !m.is_file() => {
            return Err(ToolError::NotAFile(format!(
                "'{}' exists and is not a regular file.",
                show(&rel)
            )))
        }
        Some(_) if a.overwrite == Some(false) => {
            return Err(ToolError::Exists(format!(
                "'{}' already exists and overwrite=false. Choose another path, or edit it with edit_file.",
                show(&rel)
            )))
        }
        _ => {}
    }
    // The file replaced, opened for its content (backed up unless over the text-file limit)
    // and its attributes (kept).
    let old = match &meta {
        Some(m) => {
            let max = root.limits().max_text_file_bytes;
            let f = match (
                beneath::open(&slot.dir, &slot.name, FILE_READ),
                m.len() <= max,
            ) {
                (Ok(f), true) => {
                    may_rewrite(root, &slot, &rel, m)?;
                    let bytes = read_limited(&f, &rel, max)?;
                    root.charge_growth(write_growth(a.content.as_bytes(), Some(m)))?;
                    backup_path = Some(backup(root, &rel, &bytes, m)?);
                    Some(f)
                }
                (Err(e), true) => {
                    return Err(ToolError::io(format!("opening '{}'", show(&rel)), e))
                }
                (f, false) => f.ok(),
            };
            Some((m, f))
        }
        None => None,
    };
    // Charged already when a backup was kept.
    let write = match backup_path {
        Some(_) => write_charged,
        None => atomic_write,
    };
    write(
        root,
        &slot,
        &rel,
        &abs,
        a.content.as_bytes(),
        old.as_ref().map(|(m, f)| (*m, f.as_ref())),
    )?;
    Ok(WriteFileResult {
        path: rel,
        bytes: a.content.len(),
        created: meta.is_none(),
        sha256: sha256_hex(a.content.as_bytes()),
        backup: backup_path,
        note: reused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts() {
        let ins = |line, text: &str| Insert {
            line,
            text: text.into(),
        };
        assert_eq!(insert_at("a\nb\n", &ins(0, "x"), "f").unwrap(), "x\na\nb\n");
        assert_eq!(insert_at("a\nb\n", &ins(1, "x"), "f").unwrap(), "a\nx\nb\n");
        assert_eq!(
            insert_at("a\nb\n", &ins(2, "x\n"), "f").unwrap(),
            "a\nb\nx\n"
        );
        assert_eq!(insert_at("a\nb", &ins(2, "x"), "f").unwrap(), "a\nb\nx\n");
        assert_eq!(insert_at("", &ins(0, "x"), "f").unwrap(), "x\n");
        assert_eq!(insert_at("a\r\n", &ins(1, "x"), "f").unwrap(), "a\r\nx\r\n");
        assert!(insert_at("a\n", &ins(5, "x"), "f").is_err());
    }
}
