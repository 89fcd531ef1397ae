//! Discovery tools: search_files, list_files, directory_tree, list_allowed. They walk folders
//! with the bounded, policy-aware walker and report when a cap was reached.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::read::{context_of, matcher};
use super::walk::{globs, walk, Glob, Step};
use super::EntryType;
use crate::access::Allowed;
use crate::beneath::FILE_READ;
use crate::error::{ToolError, ToolResult};
use crate::fsops::rfc3339;
use crate::limits::*;
use crate::paths::show;
use crate::text::{lines, looks_binary, show_line};
use crate::ToolRoot;

/// One glob or a list of globs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Globs {
    /// A single glob.
    One(String),
    /// Several globs; any may match.
    Many(Vec<String>),
}

impl Globs {
    fn list(g: &Option<Globs>) -> Vec<String> {
        match g {
            None => vec![],
            Some(Globs::One(s)) => vec![s.clone()],
            Some(Globs::Many(v)) => v.clone(),
        }
    }
}

/// `search_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// The text to find: literal, like search, unless regex=true.
    pub pattern: String,
    /// Folder to search below (default: the whole workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Treat pattern as a regular expression (Rust regex syntax). Default false.
    #[serde(default)]
    pub regex: bool,
    /// Ignore case in pattern (default false).
    #[serde(default)]
    pub case_insensitive: bool,
    /// Only files matching one of these globs, e.g. "*.md" or "projects/**" (case-insensitive).
    #[serde(default)]
    pub include: Option<Globs>,
    /// Skip files and folders matching one of these globs. Also accepted as excludePatterns.
    #[serde(default, alias = "excludePatterns")]
    pub exclude: Option<Globs>,
    /// Lines of context before and after each hit (default 0, at most 10).
    #[serde(default)]
    pub context: Option<usize>,
    /// Most matching lines to return (default 50, at most 500).
    #[serde(default)]
    pub max_results: Option<usize>,
}

/// One hit of `search_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileMatch {
    /// Workspace-relative path of the file.
    pub path: String,
    /// 1-based line number.
    pub line: usize,
    /// The line (cut at 500 characters).
    pub text: String,
    /// Lines before it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context_before: Vec<String>,
    /// Lines after it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context_after: Vec<String>,
}

/// `search_files` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchFilesResult {
    /// Hits, file by file (folders in name order), in line order.
    pub matches: Vec<FileMatch>,
    /// Files searched.
    pub files_scanned: usize,
    /// Files with at least one hit (among those scanned before the limit).
    pub files_matched: usize,
    /// Files skipped as binary, not UTF-8, or over 8 MiB.
    pub files_skipped: usize,
    /// Whether the search stopped early (max_results or the walk limit); narrow path/include or
    /// raise max_results.
    pub truncated: bool,
    /// What was capped or adjusted, and how to get the rest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// When no line matched a pattern that reads as a glob of names ("*.md", "**/Atlas*"),
    /// the files and folders whose names match it, as find_files would give them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<ListEntry>>,
}

/// Whether `pattern` reads as a glob of names rather than text to find: wildcards, and
/// nothing a name glob would not hold (spaces).
fn is_name_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?']) && !pattern.contains(char::is_whitespace)
}

fn any_match(gs: &[Glob], e: &super::walk::Entry) -> bool {
    gs.iter().any(|g| g.matches(e))
}

pub(crate) fn search_files(root: &ToolRoot, a: SearchFilesArgs) -> ToolResult<SearchFilesResult> {
    let re = matcher(&a.pattern, a.regex, a.case_insensitive)?;
    let include = globs(&Globs::list(&a.include))?;
    let exclude = globs(&Globs::list(&a.exclude))?;
    let asked = a.context.unwrap_or(0);
    let ctx = asked.min(MAX_CONTEXT);
    let max = a
        .max_results
        .unwrap_or(SEARCH_FILES_DEFAULT)
        .clamp(1, SEARCH_FILES_MAX);
    let dir = root.existing_dir(a.path.as_deref().unwrap_or(""))?;
    let mut out = SearchFilesResult {
        matches: vec![],
        files_scanned: 0,
        files_matched: 0,
        files_skipped: 0,
        truncated: false,
        notes: Vec::new(),
        names: None,
    };
    if asked > ctx {
        out.notes.push(format!(
            "context is at most {MAX_CONTEXT} lines; {asked} was asked (read the lines around a hit with read_range)"
        ));
    }
    let stats = walk(root, &dir, usize::MAX, |e| {
        if any_match(&exclude, e) {
            return Step::Prune;
        }
        if !e.meta.is_file() || (!include.is_empty() && !any_match(&include, e)) {
            return Step::Continue;
        }
        if e.meta.len() > SEARCH_FILES_MAX_FILE_BYTES {
            out.files_skipped += 1;
            return Step::Continue;
        }
        let bytes = e
            .open(FILE_READ)
            .ok()
            .and_then(|f| crate::fsops::read_limited(&f, &e.rel, SEARCH_FILES_MAX_FILE_BYTES).ok());
        let Some(bytes) = bytes else {
            out.files_skipped += 1;
            return Step::Continue;
        };
        let text = match std::str::from_utf8(&bytes) {
            Ok(t) if !looks_binary(&bytes) => t,
            _ => {
                out.files_skipped += 1;
                return Step::Continue;
            }
        };
        out.files_scanned += 1;
        if !re.is_match(text) {
            return Step::Continue;
        }
        out.files_matched += 1;
        let ls = lines(text);
        for (i, l) in ls.iter().enumerate() {
            if re.is_match(l.strip_suffix('\r').unwrap_or(l)) {
                if out.matches.len() >= max {
                    out.truncated = true;
                    return Step::Stop;
                }
                let (context_before, context_after) = context_of(&ls, i, ctx);
                out.matches.push(FileMatch {
                    path: e.rel.clone(),
                    line: i + 1,
                    text: show_line(l),
                    context_before,
                    context_after,
                });
            }
        }
        Step::Continue
    })?;
    if out.truncated {
        out.notes.push(format!(
            "stopped after {} matching lines; narrow path or include, or raise max_results (at most {SEARCH_FILES_MAX})",
            out.matches.len()
        ));
    }
    if stats.capped {
        out.truncated = true;
        out.notes.push(format!(
            "not every file was searched: a walk stops after {MAX_WALK_ENTRIES} entries and {MAX_WALK_DEPTH} levels down; search a folder further down with path"
        ));
    }
    if out.matches.is_empty() && !a.regex && is_name_glob(&a.pattern) {
        // What a client of the reference filesystem server means by it: a name search.
        let found = find_files(
            root,
            FindFilesArgs {
                pattern: a.pattern.clone(),
                path: a.path.clone(),
                exclude: a.exclude.clone(),
                max_results: None,
            },
        )?;
        out.notes.push(format!(
            "no line contains the text {:?}; it reads as a glob of names, and {} files and folders have names matching it{} (in names). search_files searches file contents; find_files finds files by name.",
            a.pattern,
            found.entries.len(),
            if found.truncated { " (the first shown)" } else { "" }
        ));
        out.names = Some(found.entries);
    }
    Ok(out)
}

/// `find_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindFilesArgs {
    /// The names to find: a glob when it holds * or ? ("*.md", "**/notes/*.txt"), else plain
    /// text that matches every name containing it. Case-insensitive.
    pub pattern: String,
    /// Folder to search below (default: the whole workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Skip files and folders matching one of these globs (and everything below a skipped
    /// folder). Also accepted as excludePatterns.
    #[serde(default, alias = "excludePatterns")]
    pub exclude: Option<Globs>,
    /// Most entries to return (default 200, at most 2000).
    #[serde(default)]
    pub max_results: Option<usize>,
}

/// `find_files` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FindFilesResult {
    /// Matching files and folders, in path order.
    pub entries: Vec<ListEntry>,
    /// Whether entries were left out (raise max_results, narrow path or the pattern).
    pub truncated: bool,
}

pub(crate) fn find_files(root: &ToolRoot, a: FindFilesArgs) -> ToolResult<FindFilesResult> {
    let pattern = a.pattern.trim();
    if pattern.is_empty() {
        return Err(ToolError::InvalidArgs(
            "pattern is empty; give a glob such as \"*.md\" or part of a name.".into(),
        ));
    }
    let glob = if pattern.contains(['*', '?']) {
        Glob::new(pattern)?
    } else {
        Glob::new(&format!("*{}*", globset::escape(pattern)))?
    };
    let exclude = globs(&Globs::list(&a.exclude))?;
    let max = a.max_results.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX);
    let dir = root.existing_dir(a.path.as_deref().unwrap_or(""))?;
    let mut out = FindFilesResult {
        entries: Vec::new(),
        truncated: false,
    };
    let stats = walk(root, &dir, usize::MAX, |e| {
        if any_match(&exclude, e) {
            return Step::Prune;
        }
        if glob.matches(e) {
            if out.entries.len() >= max {
                out.truncated = true;
                return Step::Stop;
            }
            out.entries.push(list_entry(e).1);
        }
        Step::Continue
    })?;
    out.truncated |= stats.capped;
    out.entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// `list_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Folder to list (default: the workspace root; matched case-insensitively).
    #[serde(default)]
    pub path: Option<String>,
    /// Only entries matching this glob (case-insensitive). Without '/', it matches names at any
    /// depth ("*.md"); with '/', the path below the folder ("projects/**/*.md").
    #[serde(default)]
    pub glob: Option<String>,
    /// Look below subfolders too (default: true with a glob, false without).
    #[serde(default)]
    pub recursive: Option<bool>,
    /// Most entries to return (default 200, at most 2000).
    #[serde(default)]
    pub max_results: Option<usize>,
    /// Order: "modified" (newest first, the default), "name", or "size" (largest first). Also
    /// accepted as sortBy.
    #[serde(default, alias = "sortBy")]
    pub sort_by: Option<SortBy>,
}

/// How `list_files` orders its entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SortBy {
    /// Most recently modified first.
    #[default]
    Modified,
    /// By path, in byte order.
    Name,
    /// Largest first.
    Size,
}

/// One listed entry.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListEntry {
    /// Workspace-relative path.
    pub path: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// Bytes; for a folder, the total of the files below it.
    pub size: u64,
    /// Modification time, RFC 3339 UTC.
    pub modified: String,
}

/// `list_files` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListFilesResult {
    /// The folder listed.
    pub path: String,
    /// Entries, in the order sort_by asks (most recently modified first by default).
    pub entries: Vec<ListEntry>,
    /// Entries that matched.
    pub total: usize,
    /// Whether entries were left out (raise max_results or narrow the glob).
    pub truncated: bool,
    /// Whether folder sizes count only part of what is below them (the walk stopped at its
    /// limit of 100000 entries).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sizes_incomplete: bool,
}

/// A walked entry as listed (a folder's size starts at 0), with its modification time.
fn list_entry(e: &super::walk::Entry) -> (std::time::SystemTime, ListEntry) {
    let m = e.meta.modified().unwrap_or(std::time::UNIX_EPOCH);
    let entry = ListEntry {
        path: e.rel.clone(),
        kind: EntryType::of(&e.meta),
        size: if e.meta.is_file() { e.meta.len() } else { 0 },
        modified: rfc3339(m),
    };
    (m, entry)
}

pub(crate) fn list_files(root: &ToolRoot, a: ListFilesArgs) -> ToolResult<ListFilesResult> {
    let dir = root.existing_dir(a.path.as_deref().unwrap_or(""))?;
    let glob = a.glob.as_deref().map(Glob::new).transpose()?;
    let depth = if a.recursive.unwrap_or(glob.is_some()) {
        usize::MAX
    } else {
        1
    };
    let max = a.max_results.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX);
    // Every entry within depth that the glob keeps, and the bytes of the files below each
    // listed folder: the walk goes below the listed depth to total them.
    let mut all: Vec<(std::time::SystemTime, ListEntry)> = Vec::new();
    let mut folders: HashMap<String, usize> = HashMap::new();
    let mut first_level = 0usize;
    let stats = walk(root, &dir, usize::MAX, |e| {
        first_level += usize::from(e.depth == 1);
        if e.meta.is_file() {
            let mut sub = e.sub.as_str();
            while let Some(i) = sub.rfind('/') {
                sub = &sub[..i];
                if let Some(&k) = folders.get(sub) {
                    all[k].1.size += e.meta.len();
                }
            }
        }
        if e.depth <= depth && glob.as_ref().is_none_or(|g| g.matches(e)) {
            if e.meta.is_dir() {
                folders.insert(e.sub.clone(), all.len());
            }
            all.push(list_entry(e));
        }
        Step::Continue
    })?;
    match a.sort_by.unwrap_or_default() {
        SortBy::Modified => all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.path.cmp(&b.1.path))),
        SortBy::Name => all.sort_by(|a, b| a.1.path.cmp(&b.1.path)),
        SortBy::Size => all.sort_by(|a, b| {
            b.1.size
                .cmp(&a.1.size)
                .then_with(|| a.1.path.cmp(&b.1.path))
        }),
    }
    let total = all.len();
    let entries: Vec<ListEntry> = all.into_iter().take(max).map(|(_, e)| e).collect();
    Ok(ListFilesResult {
        path: show(&dir.rel),
        // The walk meets every first-level entry before going deeper, so a listing of one
        // level misses entries only when that level alone reached the walk's limit.
        truncated: total > entries.len()
            || (stats.capped && (depth == usize::MAX || first_level >= MAX_WALK_ENTRIES)),
        sizes_incomplete: stats.capped,
        entries,
        total,
    })
}

/// `directory_tree` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TreeArgs {
    /// Folder at the top (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
    /// Levels below it to show (default 3, at most 10).
    #[serde(default)]
    pub depth: Option<usize>,
    /// Include files, not only folders (default true).
    #[serde(default)]
    pub include_files: Option<bool>,
    /// Leave out files and folders matching one of these globs (and everything below a left-out
    /// folder). Also accepted as excludePatterns.
    #[serde(default, alias = "excludePatterns")]
    pub exclude: Option<Globs>,
}

/// One node of the tree.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TreeNode {
    /// The entry's name.
    pub name: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// Bytes, for files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Entries inside, for folders within the depth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<TreeNode>>,
}

/// `directory_tree` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TreeResult {
    /// The top folder.
    pub path: String,
    /// Its tree; folders below the depth have no children field.
    pub tree: TreeNode,
    /// Entries shown.
    pub entries: usize,
    /// Whether entries were left out (at most 1000 are shown).
    pub truncated: bool,
}

pub(crate) fn directory_tree(root: &ToolRoot, a: TreeArgs) -> ToolResult<TreeResult> {
    let dir = root.existing_dir(a.path.as_deref().unwrap_or(""))?;
    let depth = a
        .depth
        .unwrap_or(TREE_DEFAULT_DEPTH)
        .clamp(1, TREE_MAX_DEPTH);
    let files = a.include_files.unwrap_or(true);
    let exclude = globs(&Globs::list(&a.exclude))?;
    // Entries grouped by their parent's path below the top folder ("" for the top).
    let mut kids: HashMap<String, Vec<(String, TreeNode)>> = HashMap::new();
    let mut count = 0usize;
    let mut chars = 0usize;
    let mut truncated = false;
    walk(root, &dir, depth, |e| {
        if any_match(&exclude, e) {
            return Step::Prune;
        }
        let is_dir = e.meta.is_dir();
        if !is_dir && !files {
            return Step::Continue;
        }
        // Each entry costs about its name and 60 characters of JSON: past the answer's
        // budget the walk stops, as it does at the entry limit.
        chars += e.name.len() + 60;
        if count >= TREE_MAX_ENTRIES || chars > crate::limits::READ_FILE_DEFAULT_CHARS {
            truncated = true;
            return Step::Stop;
        }
        count += 1;
        let parent = match e.sub.rfind('/') {
            Some(i) => e.sub[..i].to_string(),
            None => String::new(),
        };
        kids.entry(parent).or_default().push((
            e.sub.clone(),
            TreeNode {
                name: e.name.clone(),
                kind: EntryType::of(&e.meta),
                size: e.meta.is_file().then_some(e.meta.len()),
                children: (is_dir && e.depth < depth).then(Vec::new),
            },
        ));
        Step::Continue
    })?;
    fn build(sub: &str, kids: &mut HashMap<String, Vec<(String, TreeNode)>>) -> Vec<TreeNode> {
        let mut list = kids.remove(sub).unwrap_or_default();
        list.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        list.into_iter()
            .map(|(s, mut n)| {
                if n.children.is_some() {
                    n.children = Some(build(&s, kids));
                }
                n
            })
            .collect()
    }
    let tree = TreeNode {
        name: if dir.rel.is_empty() {
            "/".into()
        } else {
            dir.rel.rsplit('/').next().unwrap_or("").to_string()
        },
        kind: EntryType::Folder,
        size: None,
        children: Some(build("", &mut kids)),
    };
    Ok(TreeResult {
        path: show(&dir.rel),
        tree,
        entries: count,
        truncated,
    })
}

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// `list_allowed` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AllowedResult {
    /// What you may read and write, and the protected names.
    #[serde(flatten)]
    pub allowed: Allowed,
    /// The tools you can call.
    pub tools: Vec<String>,
    /// Request and file size limits in bytes.
    pub max_request_bytes: usize,
    /// Largest file text tools load.
    pub max_text_file_bytes: u64,
    /// File permissions apply as well as `read` and `write`: who you are to them.
    pub file_permissions: crate::perms::FilePermissions,
}

pub(crate) fn list_allowed(root: &ToolRoot, _a: NoArgs) -> ToolResult<AllowedResult> {
    let mut allowed = root.policy().describe();
    allowed.protected = crate::access::protected_list();
    Ok(AllowedResult {
        allowed,
        tools: crate::TOOL_NAMES.iter().map(|s| s.to_string()).collect(),
        max_request_bytes: root.limits().max_request_bytes,
        max_text_file_bytes: root.limits().max_text_file_bytes,
        file_permissions: root.file_permissions(),
    })
}
