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
use crate::error::ToolResult;
use crate::fsops::rfc3339;
use crate::limits::*;
use crate::paths::show;
use crate::text::{lines, looks_binary, show_line};
use crate::ToolRoot;

/// One glob or a list of globs.
#[derive(Debug, Deserialize, JsonSchema)]
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
    /// What to find: a regular expression (Rust syntax) unless regex=false.
    pub pattern: String,
    /// Folder to search below (default: the whole workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Treat pattern as a regular expression (default true).
    #[serde(default)]
    pub regex: Option<bool>,
    /// Ignore case in pattern (default false).
    #[serde(default)]
    pub case_insensitive: bool,
    /// Only files matching one of these globs, e.g. "*.md" or "projects/**" (case-insensitive).
    #[serde(default)]
    pub include: Option<Globs>,
    /// Skip files and folders matching one of these globs.
    #[serde(default)]
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
}

fn any_match(gs: &[Glob], e: &super::walk::Entry) -> bool {
    gs.iter().any(|g| g.matches(e))
}

pub(crate) fn search_files(root: &ToolRoot, a: SearchFilesArgs) -> ToolResult<SearchFilesResult> {
    let re = matcher(&a.pattern, a.regex.unwrap_or(true), a.case_insensitive)?;
    let include = globs(&Globs::list(&a.include))?;
    let exclude = globs(&Globs::list(&a.exclude))?;
    let ctx = a.context.unwrap_or(0).min(MAX_CONTEXT);
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
    };
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
    out.truncated |= stats.capped;
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
}

/// One listed entry.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListEntry {
    /// Workspace-relative path.
    pub path: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// Bytes (0 for folders).
    pub size: u64,
    /// Modification time, RFC 3339 UTC.
    pub modified: String,
}

/// `list_files` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListFilesResult {
    /// The folder listed.
    pub path: String,
    /// Entries, most recently modified first.
    pub entries: Vec<ListEntry>,
    /// Entries that matched.
    pub total: usize,
    /// Whether entries were left out (raise max_results or narrow the glob).
    pub truncated: bool,
}

pub(crate) fn list_files(root: &ToolRoot, a: ListFilesArgs) -> ToolResult<ListFilesResult> {
    let dir = root.existing_dir(a.path.as_deref().unwrap_or(""))?;
    let glob = a.glob.as_deref().map(Glob::new).transpose()?;
    let recursive = a.recursive.unwrap_or(glob.is_some());
    let max = a.max_results.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX);
    let mut all: Vec<(std::time::SystemTime, ListEntry)> = Vec::new();
    let stats = walk(root, &dir, if recursive { usize::MAX } else { 1 }, |e| {
        if glob.as_ref().is_none_or(|g| g.matches(e)) {
            let m = e.meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            all.push((
                m,
                ListEntry {
                    path: e.rel.clone(),
                    kind: EntryType::of(&e.meta),
                    size: if e.meta.is_file() { e.meta.len() } else { 0 },
                    modified: rfc3339(m),
                },
            ));
        }
        Step::Continue
    })?;
    all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.path.cmp(&b.1.path)));
    let total = all.len();
    let entries: Vec<ListEntry> = all.into_iter().take(max).map(|(_, e)| e).collect();
    Ok(ListFilesResult {
        path: show(&dir.rel),
        truncated: total > entries.len() || stats.capped,
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
    // Entries grouped by their parent's path below the top folder ("" for the top).
    let mut kids: HashMap<String, Vec<(String, TreeNode)>> = HashMap::new();
    let mut count = 0usize;
    let mut truncated = false;
    walk(root, &dir, depth, |e| {
        let is_dir = e.meta.is_dir();
        if !is_dir && !files {
            return Step::Continue;
        }
        if count >= TREE_MAX_ENTRIES {
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
}

pub(crate) fn list_allowed(root: &ToolRoot, _a: NoArgs) -> ToolResult<AllowedResult> {
    let mut allowed = root.policy().describe();
    allowed.protected = crate::access::protected_list();
    Ok(AllowedResult {
        allowed,
        tools: crate::TOOL_NAMES.iter().map(|s| s.to_string()).collect(),
        max_request_bytes: root.limits().max_request_bytes,
        max_text_file_bytes: root.limits().max_text_file_bytes,
    })
}
