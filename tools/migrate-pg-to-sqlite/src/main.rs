//! `migrate-pg-to-sqlite`: a PostgreSQL + pgvector memory into a ClawFS index database of its
//! own (P1.4 §6.3). `clawfs import pg` does the same into a workspace of a store, files
//! included.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use clawfs_search::embed::{EmbedError, Embedder};
use clawfs_search::hnsw::HnswParams;
use clawfs_search::index::IndexDb;
use clawfs_search::workspace::IndexFiles;
use clawfs_search::{EmbedderChoice, WorkspaceIndex};
use migrate_pg::cli::Cli;
use migrate_pg::place::{check_into, PathsOnly};
use migrate_pg::source::Source;
use migrate_pg::{MigrateError, EXIT_MISMATCH};

/// The source's embeddings as the index's vectors: a model that lives elsewhere, named so that
/// a second run (or a mismatch) can tell.
struct Foreign {
    model: String,
    dim: usize,
}

impl Embedder for Foreign {
    fn fingerprint(&self) -> String {
        format!("imported:{}:{}", self.model, self.dim)
    }

    fn model(&self) -> String {
        self.model.clone()
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::Unavailable(format!(
            "{} is not available here: this index holds its vectors",
            self.model
        )))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match migrate(&cli) {
        Ok(report) => {
            if cli.embedding.json {
                println!(
                    "{}",
                    serde_json::json!({"ok": report.ok(), "report": report})
                );
            } else {
                print!("{}", report.render());
            }
            match report.ok() {
                true => ExitCode::SUCCESS,
                false => ExitCode::from(EXIT_MISMATCH),
            }
        }
        Err(e) => {
            eprintln!("migrate-pg-to-sqlite: {e}");
            ExitCode::FAILURE
        }
    }
}

fn migrate(cli: &Cli) -> Result<migrate_pg::Report, MigrateError> {
    check_into(&cli.into)?;
    let mut source = Source::open(&cli.source)?;
    let (embedder, dim): (Option<Arc<dyn Embedder>>, usize) = match (
        cli.embedding.reembed,
        source.shape.dimension,
        &cli.embedding.embedding_model,
    ) {
        (true, _, _) => {
            let dim = clawfs_search::DEFAULT_VECTOR_DIMENSION as usize;
            (
                EmbedderChoice::builtin_or_text_only().for_dimension(dim),
                dim,
            )
        }
        (false, Some(dim), Some(model)) => (
            Some(Arc::new(Foreign {
                model: model.clone(),
                dim,
            })),
            dim,
        ),
        (false, dim, _) => (
            None,
            dim.unwrap_or(clawfs_search::DEFAULT_VECTOR_DIMENSION as usize),
        ),
    };
    // Before anything is written.
    migrate_pg::migrate::check_fit(&source, embedder.as_ref(), dim, &cli.embedding)?;
    let files = IndexFiles::beside(&cli.sqlite_path);
    // An index made by another embedder would be emptied by opening it: refuse instead.
    if cli.sqlite_path.exists() {
        let held = IndexDb::open(&cli.sqlite_path, &cli.source.workspace_id)?.meta("embedder")?;
        let ours = embedder
            .as_ref()
            .map(|e| e.fingerprint())
            .unwrap_or_default();
        if let Some(held) = held.filter(|h| *h != ours) {
            return Err(MigrateError::Refused(format!(
                "{} holds vectors made by {held:?}; these would be {ours:?}: write another database",
                cli.sqlite_path.display()
            )));
        }
    }
    let (index, _) = WorkspaceIndex::open(
        &cli.source.workspace_id,
        &files,
        dim,
        HnswParams::default(),
        embedder,
    )?;
    let mut place = PathsOnly {
        into: cli.into.clone(),
    };
    migrate_pg::run(&mut source, &cli.source, &index, &mut place, &cli.embedding)
}
