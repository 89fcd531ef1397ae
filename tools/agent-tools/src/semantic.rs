//! The workspace index as the tools see it: the daemon plugs its index in with
//! [`crate::ToolRoot::with_semantic`]; without one, `semantic_search` answers that search is off.

use serde::{Deserialize, Serialize};

/// One hit of a workspace query: where to read, and why it ranked.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SemanticHit {
    /// Path in the workspace; read it with read_range start=line_start end=line_end.
    pub path: String,
    /// First line of the matching chunk (1-based).
    pub line_start: u32,
    /// Last line of the matching chunk.
    pub line_end: u32,
    /// The Markdown headings above the chunk, outermost first.
    pub heading: String,
    /// The start of the chunk's text, near the first query word found.
    pub snippet: String,
    /// Rank score: BM25 (text), cosine similarity (vector), or 0.7 · cosine + 0.3 · BM25
    /// normalised to the best text hit (hybrid). Higher is better.
    pub score: f64,
    /// BM25 of the words, when they matched.
    pub text_score: Option<f64>,
    /// Cosine similarity, when the vector search found the chunk.
    pub vector_score: Option<f64>,
}

/// What a query found.
#[derive(Debug, Clone)]
pub struct SemanticAnswer {
    /// Best first.
    pub hits: Vec<SemanticHit>,
    /// The mode used (`text` when the embedder was unavailable for a vector or hybrid query).
    pub mode: String,
    /// Why the mode used differs from the one asked for.
    pub note: Option<String>,
}

/// A workspace's index, queried as the caller.
pub trait SemanticIndex: Send + Sync {
    /// The best `limit` chunks for `query` ranked by `mode` (`text`, `vector` or `hybrid`),
    /// counting only chunks of paths for which `readable(path)` holds; by text, with a note,
    /// when the embedder is unavailable. An error is a sentence for the caller.
    fn query(
        &self,
        query: &str,
        mode: &str,
        limit: usize,
        readable: &dyn Fn(&str) -> bool,
    ) -> Result<SemanticAnswer, String>;
}
