//! Retrieval quality of text, vector and hybrid search with the built-in model, over the
//! project's retrieval set (`clawfs-core/search/src/quality/retrieval-set.json`): hit@1, hit@3
//! and MRR, for the queries that share meaning but few words with their note, the keyword
//! queries, and all. `bench/search.sh` runs it.

use std::os::fd::AsFd;
use std::sync::Arc;

use clawfs_search::embed::{BuiltinModel, Embedder};
use clawfs_search::hnsw::HnswParams;
use clawfs_search::quality::RetrievalSet;
use clawfs_search::workspace::IndexFiles;
use clawfs_search::{Mode, WorkspaceIndex};

fn main() -> anyhow::Result<()> {
    let set = RetrievalSet::builtin();
    let tmp = tempfile::tempdir()?;
    let ws = tmp.path().join("ws");
    set.write_to(&ws)?;
    let model: Arc<dyn Embedder> = Arc::new(BuiltinModel::load(&BuiltinModel::model_dir(), 256)?);
    let (index, _) = WorkspaceIndex::open(
        "quality",
        &IndexFiles::private(&tmp.path().join("index")).unwrap(),
        256,
        HnswParams::default(),
        Some(model.clone()),
    )?;
    let dir = std::fs::File::open(&ws)?;
    index.rescan(dir.as_fd(), &mut |_, _| {})?;
    println!(
        "\n### Retrieval quality — {} notes, {} queries, {}\n",
        set.documents.len(),
        set.queries.len(),
        model.fingerprint()
    );
    println!("| Queries | Mode | hit@1 | hit@3 | MRR |");
    println!("|---|---|---:|---:|---:|");
    for (label, kind) in [
        ("meaning (few shared words)", Some("meaning")),
        ("keyword", Some("keyword")),
        ("all", None),
    ] {
        for mode in [Mode::Text, Mode::Vector, Mode::Hybrid] {
            let s = set.evaluate(&index, dir.as_fd(), mode, kind)?;
            println!(
                "| {label} ({}) | {mode:?} | {:.2} | {:.2} | {:.2} |",
                s.queries, s.hit_at_1, s.hit_at_3, s.mrr
            );
        }
    }
    Ok(())
}
