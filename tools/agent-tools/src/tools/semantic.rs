//! `semantic_search`: the workspace's index, by words, by meaning, or both.

use serde::{Deserialize, Serialize};

use super::walk::Glob;
use crate::access::Access;
use crate::error::{ToolError, ToolResult};
use crate::semantic::SemanticHit;
use crate::ToolRoot;

/// Most hits per call.
const MAX_LIMIT: usize = 100;

/// Arguments of `semantic_search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SemanticArgs {
    /// What to look for, in plain words.
    pub query: String,
    /// `hybrid` (default: meaning and words), `vector` (meaning only) or `text` (every word
    /// must appear; BM25).
    #[serde(default)]
    pub mode: Option<String>,
    /// How many hits (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only paths matching this glob (e.g. "notes/**/*.md", or "*.rs" at any depth).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files carrying every one of these tags (set with `setfattr -n user.xdg.tags -v
    /// "draft,q3"`, or `user.tags`; compared without case).
    #[serde(default)]
    pub tags: Option<Vec<String>>,
}

/// Result of `semantic_search`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SemanticResult {
    /// The mode used: `text` when a vector or hybrid query could not be embedded (see `note`).
    pub mode: String,
    /// Best first; read a hit with read_range path/line_start/line_end.
    pub hits: Vec<SemanticHit>,
    /// Why the mode used is not the one asked for (e.g. the embedding endpoint is down).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

pub(crate) fn semantic_search(root: &ToolRoot, a: SemanticArgs) -> ToolResult<SemanticResult> {
    let mode = a.mode.unwrap_or_else(|| "hybrid".into());
    if !matches!(mode.as_str(), "text" | "vector" | "hybrid") {
        return Err(ToolError::InvalidArgs(format!(
            "mode {mode:?}: use \"hybrid\" (default), \"vector\" or \"text\""
        )));
    }
    if a.query.trim().is_empty() {
        return Err(ToolError::InvalidArgs(
            "query is empty: say what to look for".into(),
        ));
    }
    if a.query.len() > 4096 {
        return Err(ToolError::TooLarge(
            "query is longer than 4096 bytes".into(),
        ));
    }
    let limit = a.limit.unwrap_or(10).clamp(1, MAX_LIMIT);
    let glob = a.path.as_deref().map(Glob::new).transpose()?;
    let index = root.semantic().ok_or_else(|| {
        ToolError::NotFound(
            "this workspace has no search index (search is off in this daemon)".into(),
        )
    })?;
    // Exactly what the caller could read directly: the protected names and the policy, then
    // the file's own permissions, checked as the caller.
    let tags: Vec<String> = a
        .tags
        .unwrap_or_default()
        .iter()
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    if tags.len() > 32 || tags.iter().any(|t| t.len() > 256 || t.contains(',')) {
        return Err(ToolError::InvalidArgs(
            "tags: at most 32, each at most 256 bytes and without commas".into(),
        ));
    }
    let readable = |rel: &str| -> bool {
        glob.as_ref().is_none_or(|g| g.matches_path(rel))
            && root.check(rel, Access::Read).is_ok()
            && root.caller_may_read(rel)
            && (tags.is_empty()
                || root
                    .tags_of(rel)
                    .is_some_and(|have| tags.iter().all(|t| have.contains(t))))
    };
    let answer = index
        .query(&a.query, &mode, limit, &readable)
        .map_err(ToolError::NotFound)?;
    Ok(SemanticResult {
        mode: answer.mode,
        hits: answer.hits,
        note: answer.note,
    })
}
