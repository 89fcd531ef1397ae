//! The command line of `migrate-pg-to-sqlite` (here rather than in its `main.rs` so that its man
//! page and completions are generated with the other commands').

use std::path::PathBuf;

use clawfs_args::pg::{EmbeddingArgs, SourceArgs};

/// Move a PostgreSQL + pgvector agent memory into a ClawFS index database
///
/// Copies the documents and their embeddings into an index database: FTS5 text, vectors and an
/// HNSW graph, in batches of one transaction each, with a progress bar. An interrupted run resumes where it stopped when run again. Both sides
/// are then verified (counts, dimension, a checksum over every document's id, text and
/// embedding) and a report printed.
///
/// The graph is written beside the database as DB.usearch. To import into a workspace of a
/// ClawFS store, files included, use `clawfs import pg`.
///
/// Exit status: 0 when both sides agree, 1 on an error or refusal (nothing of the batch under
/// way is written), 2 on a usage error, 5 when the verification finds a difference.
#[derive(Debug, clap::Parser)]
#[command(name = "migrate-pg-to-sqlite", version)]
pub struct Cli {
    #[command(flatten)]
    pub source: SourceArgs,
    /// The index database to write (created if missing).
    #[arg(long, value_name = "PATH")]
    pub sqlite_path: PathBuf,
    /// The folder the documents' paths name in the index.
    #[arg(long, value_name = "DIR", default_value = "imported")]
    pub into: String,
    #[command(flatten)]
    pub embedding: EmbeddingArgs,
}
