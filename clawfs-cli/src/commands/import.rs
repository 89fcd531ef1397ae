//! `clawfs import pg`: a PostgreSQL + pgvector agent memory into a workspace of the store, each
//! document a file of the workspace and a chunk of its index (the migration is
//! `migrate-pg-to-sqlite`'s, the index the daemon's own).

use anyhow::anyhow;
use clawfs_args::import::ImportCommand;
use clawfs_core::store::Store;
use clawfs_search::{EmbedderChoice, Indexer};
use migrate_pg::place::WorkspaceFiles;
use migrate_pg::source::Source;

use crate::error::Failure;

/// `clawfs import`.
pub fn import(store_root: &std::path::Path, cmd: &ImportCommand) -> Result<(), Failure> {
    let ImportCommand::Pg(args) = cmd;
    let store = Store::open(store_root)?;
    // The daemon keeps each index's graph in memory: it must not serve while another process
    // writes the index under it.
    let _lock = store.lock().map_err(|e| match store.daemon_info() {
        Some(d) => Failure::Other(anyhow!(
            "the store is served at {} (pid {}): unmount it, import, then mount again",
            d.mountpoint.display(),
            d.pid
        )),
        None => e.into(),
    })?;
    let embedder = EmbedderChoice::for_store(store_root).map_err(|e| anyhow!(e))?;
    let indexer = Indexer::new(store_root, embedder, false).map_err(|e| anyhow!(e))?;
    let ws = indexer
        .workspace_dir(&args.workspace)
        .map_err(|e| anyhow!("workspace {}: {e}", args.workspace))?;
    let mut place = WorkspaceFiles::new(ws, &args.into).map_err(|e| anyhow!(e))?;
    let mut source = Source::open(&args.source).map_err(|e| anyhow!(e))?;
    let index = indexer
        .index(&args.workspace)
        .map_err(|e| anyhow!("workspace {}: {e}", args.workspace))?;
    let report = migrate_pg::run(
        &mut source,
        &args.source,
        &index,
        &mut place,
        &args.embedding,
    );
    indexer.stop();
    let report = report.map_err(|e| anyhow!(e))?;
    if args.embedding.json {
        crate::output::print_json(&serde_json::json!({"ok": report.ok(), "report": report}))
            .map_err(|e| anyhow!("writing to stdout: {e}"))?;
    } else {
        print!("{}", report.render());
    }
    match report.ok() {
        true => Ok(()),
        false => Err(Failure::Tampered(format!(
            "workspace {}: the imported copy differs from the source (see the report)",
            args.workspace
        ))),
    }
}
