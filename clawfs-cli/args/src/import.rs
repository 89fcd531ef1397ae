//! The arguments of `clawfs import`.

use clap::Subcommand;

use crate::pg::{EmbeddingArgs, SourceArgs};

/// What to import.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Bring a PostgreSQL + pgvector memory (documents and their embeddings) into a workspace:
    /// each document becomes a file under --into and one entry of the workspace's index, with
    /// the embedding it came with when the workspace's embedder is the same model at the same
    /// dimension (else --reembed). Batches of one transaction each; an interrupted import
    /// resumes when run again. Both sides are then verified (counts, dimension, a checksum over
    /// every document's id, text and embedding); a difference exits 5. The store must not be
    /// mounted meanwhile.
    Pg(Box<PgArgs>),
}

/// `clawfs import pg` arguments.
#[derive(Debug, clap::Args)]
pub struct PgArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// The workspace to import into.
    #[arg(long, value_name = "WS")]
    pub workspace: String,
    /// The folder of the workspace the documents' files go to (new for a new import).
    #[arg(long, value_name = "DIR", default_value = "imported")]
    pub into: String,
    #[command(flatten)]
    pub embedding: EmbeddingArgs,
}
