//! The options both commands share: `migrate-pg-to-sqlite` and `clawfs import pg`.

/// Where the documents come from.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// The PostgreSQL server: postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (the password is
    /// never printed).
    #[arg(long = "pg-url", visible_alias = "url", value_name = "URL")]
    pub pg_url: String,
    /// The source's workspace to migrate (`documents.workspace_id`).
    #[arg(long = "workspace-id", value_name = "ID", default_value = "default")]
    pub workspace_id: String,
    #[command(flatten)]
    pub columns: Columns,
}

/// The tables and columns, when they are not named as in P1.4 §6.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Source tables and columns")]
pub struct Columns {
    /// The documents table (`schema.table` allowed).
    #[arg(long, value_name = "TABLE", default_value = "documents")]
    pub documents_table: String,
    /// The documents' id column.
    #[arg(long, value_name = "COLUMN", default_value = "id")]
    pub id_column: String,
    /// The documents' workspace column.
    #[arg(long, value_name = "COLUMN", default_value = "workspace_id")]
    pub workspace_column: String,
    /// The documents' text column.
    #[arg(long, value_name = "COLUMN", default_value = "content")]
    pub content_column: String,
    /// The documents' JSON metadata column.
    #[arg(long, value_name = "COLUMN", default_value = "metadata")]
    pub metadata_column: String,
    /// The embeddings table.
    #[arg(long, value_name = "TABLE", default_value = "vectors")]
    pub vectors_table: String,
    /// The embeddings' document column.
    #[arg(long, value_name = "COLUMN", default_value = "document_id")]
    pub document_id_column: String,
    /// The embeddings' vector column (pgvector `vector` or `real[]`).
    #[arg(long, value_name = "COLUMN", default_value = "embedding")]
    pub embedding_column: String,
    /// The embeddings' creation time column.
    #[arg(long, value_name = "COLUMN", default_value = "created_at")]
    pub created_at_column: String,
}

/// How the embeddings are carried over.
#[derive(Debug, Clone, clap::Args)]
pub struct EmbeddingArgs {
    /// The model that made the source's embeddings (e.g. text-embedding-3-small). They are kept
    /// only if the target's embedder is this model at this dimension.
    #[arg(long, value_name = "NAME")]
    pub embedding_model: Option<String>,
    /// Recompute every embedding with the target's own embedder instead of keeping the
    /// source's (needed when the models differ).
    #[arg(long)]
    pub reembed: bool,
    /// Documents per transaction.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Do not show a progress bar.
    #[arg(long)]
    pub quiet: bool,
}
