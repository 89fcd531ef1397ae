//! Workspaces that search themselves: per workspace, an FTS5 full-text index and an HNSW graph
//! of embeddings over the same chunks, kept up to date in the background as files change, and
//! queried by text (BM25), by meaning (cosine kNN) or both (hybrid: 0.7 · vector + 0.3 ·
//! normalised BM25, P1.4 §4.5).
//!
//! - [`chunk`]: files into chunks with line ranges.
//! - [`config`]: `system/search.toml`, the store's choice of embedder.
//! - [`embed`]: the embedders (the built-in model, an OpenAI-compatible endpoint; a hashing
//!   test double).
//! - [`index`]: the SQLite half (the truth); [`hnsw`]: the graph (rebuilt from it when needed).
//! - `rank`: text search's BM25, with documents' lengths kept in memory.
//! - [`workspace`]: one workspace's index: update, rescan, query.
//! - [`import`]: documents brought in from another agent memory (PostgreSQL + pgvector).
//! - [`indexer`]: the background thread that follows changes.
//! - [`quality`]: retrieval quality (hit@1, hit@3, MRR) over the project's own set.
//! - [`snapshot`]: a workspace's files and index, kept and brought back whole.

pub mod chunk;
pub mod config;
pub mod embed;
pub mod hnsw;
pub mod import;
pub mod index;
pub mod indexer;
pub mod lease;
pub mod quality;
mod rank;
pub mod snapshot;
pub mod workspace;

pub use indexer::{Change, EmbedderChoice, Indexer};
pub use lease::Leases;
pub use workspace::{Answer, Hit, Mode, Query, WorkspaceIndex};

/// Default vector dimension of a workspace (P1.4 §4.4).
pub const DEFAULT_VECTOR_DIMENSION: u32 = 1536;
/// Allowed vector dimensions (P1.4 §4.4).
pub const VECTOR_DIMENSION_RANGE: std::ops::RangeInclusive<u32> = 128..=4096;

/// Why the index could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// SQLite failed.
    #[error("index database: {0}")]
    Db(#[from] rusqlite::Error),
    /// The database is damaged.
    #[error("index database is corrupt: {0}")]
    Corrupt(String),
    /// The HNSW graph failed.
    #[error("vector graph: {what}: {source}")]
    Hnsw {
        /// What was being done.
        what: &'static str,
        /// The graph library's error, or why the step could not be taken.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Embedding failed or no embedder is available.
    #[error(transparent)]
    Embed(#[from] embed::EmbedError),
    /// Reading the workspace failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The query cannot be run (e.g. a vector query with no embedder).
    #[error("{0}")]
    Unavailable(String),
    /// What was given cannot be indexed as it is (an embedding with a component that is not
    /// a finite number, a document given twice); nothing of it was written.
    #[error("{0}")]
    Invalid(String),
    /// `system/search.toml` is wrong.
    #[error("{0}")]
    Config(String),
}

/// The errno of a search error met through the mount (a search, `workspace.db`): every variant
/// matched, so a new one picks its errno on purpose.
impl clawfs_store::ToErrno for SearchError {
    fn errno(&self) -> i32 {
        use SearchError as S;
        match self {
            S::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            S::Db(_) | S::Corrupt(_) | S::Hnsw { .. } | S::Embed(_) | S::Config(_) => libc::EIO,
            // Search is off in this daemon, or not ready for this query.
            S::Unavailable(_) => libc::ENOENT,
            S::Invalid(_) => libc::EINVAL,
        }
    }
}

impl SearchError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> SearchError {
        SearchError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A workspace's index as the agent tools query it (`semantic_search`), opened only when a call
/// queries it.
pub struct ToolIndex {
    /// The indexer owning the index.
    pub indexer: std::sync::Arc<Indexer>,
    /// The workspace.
    pub workspace: String,
}

impl clawfs_agent_tools::SemanticIndex for ToolIndex {
    fn query(
        &self,
        query: &str,
        mode: &str,
        limit: usize,
        readable: &dyn Fn(&str) -> bool,
    ) -> Result<clawfs_agent_tools::SemanticAnswer, String> {
        let mode: Mode = mode.parse()?;
        let index = self
            .indexer
            .index(&self.workspace)
            .map_err(|e| e.to_string())?;
        let dir = self
            .indexer
            .workspace_dir(&self.workspace)
            .map_err(|e| e.to_string())?;
        let answer = index
            .search(&Query {
                text: query,
                mode,
                limit,
                readable,
                workspace: std::os::fd::AsFd::as_fd(&dir),
            })
            .map_err(|e| e.to_string())?;
        Ok(clawfs_agent_tools::SemanticAnswer {
            hits: answer.hits,
            mode: answer.mode.as_str().to_string(),
            note: answer.note,
        })
    }
}
