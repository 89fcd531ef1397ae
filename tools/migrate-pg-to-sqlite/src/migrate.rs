//! One migration: check that the embeddings fit the target, copy the documents in batches
//! (each batch one transaction, resumable), then verify both sides.

use std::sync::{mpsc, Arc};
use std::time::Instant;

use clawfs_search::embed::Embedder;
use clawfs_search::import::{checksum, Document, Placed, Progress};
use clawfs_search::WorkspaceIndex;
use sha2::{Digest, Sha256};

use crate::place::Placement;
use crate::source::Source;
use crate::MigrateError;
use clawfs_args::pg::{EmbeddingArgs, SourceArgs};

/// Texts per call of the target's embedder (`--reembed`).
const EMBED_BATCH: usize = 64;

/// What a migration did and found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The source (without its password) and its workspace.
    pub source: String,
    /// The source's workspace id.
    pub workspace_id: String,
    /// Documents: in the source, in the target.
    pub documents: (u64, u64),
    /// Embeddings: in the source, in the target.
    pub vectors: (u64, u64),
    /// Dimension: of the source's embeddings, of the target.
    pub dimension: (Option<usize>, usize),
    /// Checksums over (id, content, embedding): source, target.
    pub checksum: (String, String),
    /// Whether the embeddings were recomputed by the target's embedder (then the checksums
    /// cover id and content).
    pub reembedded: bool,
    /// Embeddings in the source that name no document (not migrated).
    pub orphan_vectors: u64,
    /// Documents already imported by an earlier, interrupted run.
    pub resumed_after: u64,
    /// Whether an earlier run had imported everything (this one only verified).
    pub already_done: bool,
    /// Documents whose copy differs, or that one side lacks (at most 20).
    pub mismatches: Vec<String>,
    /// Seconds the copy took (0 when there was nothing left to copy).
    pub copy_seconds: f64,
    /// Seconds the verification took.
    pub verify_seconds: f64,
}

impl Report {
    /// Whether both sides agree.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty()
            && self.documents.0 == self.documents.1
            && (self.reembedded || self.vectors.0 == self.vectors.1)
            && self.checksum.0 == self.checksum.1
            && self.dimension_fits()
    }

    /// Whether the source's embeddings have the target's dimension (re-embedded ones are the
    /// target's own).
    fn dimension_fits(&self) -> bool {
        self.reembedded || self.dimension.0.is_none_or(|d| d == self.dimension.1)
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let mark = |same: bool| if same { "ok" } else { "MISMATCH" };
        let mut out = format!(
            "source     {} (workspace {})\n\
             documents  {} -> {}  {}\n\
             vectors    {} -> {}  {}\n\
             dimension  {} -> {}  {}\n\
             checksum   {} -> {}  {}\n",
            self.source,
            self.workspace_id,
            self.documents.0,
            self.documents.1,
            mark(self.documents.0 == self.documents.1),
            self.vectors.0,
            self.vectors.1,
            match self.reembedded {
                true => "re-embedded",
                false => mark(self.vectors.0 == self.vectors.1),
            },
            self.dimension.0.map_or("-".into(), |d| d.to_string()),
            self.dimension.1,
            mark(self.dimension_fits()),
            &self.checksum.0[..16],
            &self.checksum.1[..16],
            mark(self.checksum.0 == self.checksum.1),
        );
        if self.orphan_vectors > 0 {
            out += &format!(
                "note       {} embeddings name no document and were not migrated\n",
                self.orphan_vectors
            );
        }
        if self.already_done {
            out += "resumed    nothing to copy: an earlier run imported everything\n";
        } else if self.resumed_after > 0 {
            out += &format!(
                "resumed    after {} documents copied by an earlier run\n",
                self.resumed_after
            );
        }
        for m in &self.mismatches {
            out += &format!("differs    {m}\n");
        }
        out += &format!(
            "time       copy {:.1} s, verify {:.1} s\nresult     {}\n",
            self.copy_seconds,
            self.verify_seconds,
            if self.ok() { "OK" } else { "MISMATCH" }
        );
        out
    }
}

/// What names one migration in the target, so that a second run resumes the first: the
/// source's server, database, workspace, tables and columns.
pub fn import_key(source: &Source, args: &SourceArgs) -> String {
    let c = &args.columns;
    let text = [
        source.description.as_str(),
        &args.workspace_id,
        &c.documents_table,
        &c.id_column,
        &c.workspace_column,
        &c.content_column,
        &c.metadata_column,
        &c.vectors_table,
        &c.document_id_column,
        &c.embedding_column,
        &c.created_at_column,
    ]
    .join("\n");
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

/// Checks that the source's embeddings can be kept by a target whose vectors have `dim`
/// components by `embedder`: made by its model, at its dimension. With `--reembed`, that it
/// has an embedder at all.
pub fn check_fit(
    source: &Source,
    embedder: Option<&Arc<dyn Embedder>>,
    dim: usize,
    opts: &EmbeddingArgs,
) -> Result<(), MigrateError> {
    let refuse = |why: String| Err(MigrateError::Refused(why));
    if !opts.reembed && source.shape.vectors == 0 {
        return Ok(());
    }
    let Some(model) = opts.embedding_model.as_ref().filter(|_| !opts.reembed) else {
        return match (opts.reembed, embedder) {
            (true, Some(_)) => Ok(()),
            (true, None) => refuse("--reembed: the target has no embedder (the built-in model is not installed and no endpoint is configured)".into()),
            (false, _) => refuse(format!(
                "the source's embeddings need their model named: --embedding-model NAME{}, or \
                 --reembed to recompute them",
                embedder.map_or(String::new(), |e| format!(" (the target's embedder is {})", e.model()))
            )),
        };
    };
    let Some(embedder) = embedder else {
        return refuse("the target has no embedder, so its vector search could not use the source's embeddings (install the built-in model or configure an endpoint in system/search.toml)".into());
    };
    let theirs = source.shape.dimension.unwrap_or(0);
    if theirs != dim {
        return refuse(format!(
            "the source's embeddings have {theirs} dimensions; the target's have {dim} (set the \
             workspace's user.clawfs.vector_dimension to {theirs}, or --reembed)"
        ));
    }
    if *model != embedder.model() {
        return refuse(format!(
            "the source's embeddings were made by {model}; the target's embedder is {}, whose \
             vectors would not compare with them (--reembed to recompute them)",
            embedder.model()
        ));
    }
    Ok(())
}

/// Copies every document not yet copied into `index`, placing each with `place`, then
/// verifies. `progress_bar` shows how far it got.
pub fn run(
    source: &mut Source,
    args: &SourceArgs,
    index: &WorkspaceIndex,
    place: &mut dyn Placement,
    opts: &EmbeddingArgs,
) -> Result<Report, MigrateError> {
    check_fit(source, index.embedder(), index.dimension(), opts)?;
    let key = import_key(source, args);
    let model = match (opts.reembed, index.embedder()) {
        (true, Some(e)) => e.fingerprint(),
        _ => opts.embedding_model.clone().unwrap_or_default(),
    };
    let mut progress = match index.import_progress(&key)? {
        Some(p) => {
            // One import, one folder: a resumed run that went elsewhere would split it.
            if let Some(into) = p.into.as_deref().filter(|i| *i != place.folder()) {
                return Err(MigrateError::Refused(format!(
                    "an earlier run of this import put its documents in {into:?}, not {:?}: \
                     run it again with --into {into:?}",
                    place.folder()
                )));
            }
            p
        }
        None => {
            place.check_fresh()?;
            Progress {
                source: source.description.clone(),
                into: Some(place.folder().to_string()),
                ..Progress::default()
            }
        }
    };
    let (resumed_after, already_done) = (progress.documents, progress.done);
    let started = Instant::now();
    if !progress.done {
        copy(
            source,
            args,
            index,
            place,
            opts,
            &key,
            &model,
            &mut progress,
        )?;
        progress.done = true;
        index.set_import_progress(&key, &progress)?;
        index.save_graph()?;
    }
    let copy_seconds = match resumed_after == progress.documents {
        true => 0.0,
        false => started.elapsed().as_secs_f64(),
    };
    let mut report = verify(source, args, index, &key, opts.reembed, opts.batch_size)?;
    report.resumed_after = resumed_after;
    report.already_done = already_done;
    report.copy_seconds = copy_seconds;
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn copy(
    source: &mut Source,
    args: &SourceArgs,
    index: &WorkspaceIndex,
    place: &mut dyn Placement,
    opts: &EmbeddingArgs,
    key: &str,
    model: &str,
    progress: &mut Progress,
) -> Result<(), MigrateError> {
    let bar = match opts.quiet || opts.json {
        true => indicatif::ProgressBar::hidden(),
        false => indicatif::ProgressBar::new(source.shape.documents),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} documents {per_sec} {elapsed_precise} (eta {eta})",
        )
        .expect("a valid template"),
    );
    bar.set_position(progress.documents);
    let workspace = args.workspace_id.clone();
    let limit = i64::from(opts.batch_size);
    let start_after = progress.after.clone();
    // PostgreSQL is read on a thread of its own, a batch ahead of the writes.
    std::thread::scope(|s| -> Result<(), MigrateError> {
        let (tx, rx) = mpsc::sync_channel::<Result<Vec<Document>, MigrateError>>(2);
        // It stops after the last batch, or when a write fails first: `rx` is dropped then,
        // and its next send fails.
        // No more documents than the server counted are read in all.
        let most = source.shape.documents;
        s.spawn(move || {
            let mut batches = source.batches(&workspace, start_after, limit, most);
            loop {
                let batch = batches.next_batch();
                let end = batch.as_ref().map_or(true, Vec::is_empty);
                if tx.send(batch).is_err() || end {
                    return;
                }
            }
        });
        for batch in rx {
            let mut docs = batch?;
            if docs.is_empty() {
                break;
            }
            if opts.reembed {
                reembed(index, &mut docs)?;
            }
            let mut placed: Vec<(Document, Placed)> = Vec::with_capacity(docs.len());
            for d in docs {
                let p = place.place(&d)?;
                placed.push((d, p));
            }
            // The files are on disk before the index says they were imported.
            place.sync()?;
            let mut next = progress.clone();
            next.after = placed.last().map(|(d, _)| d.source_id.clone());
            next.documents += placed.len() as u64;
            next.vectors += placed.iter().filter(|(d, _)| d.embedding.is_some()).count() as u64;
            index.import(key, &placed, model, &next)?;
            *progress = next;
            bar.set_position(progress.documents);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(())
}

/// Replaces each document's embedding with the target embedder's.
fn reembed(index: &WorkspaceIndex, docs: &mut [Document]) -> Result<(), MigrateError> {
    let embedder = index
        .embedder()
        .ok_or_else(|| MigrateError::Refused("--reembed: the target has no embedder".into()))?;
    for part in docs.chunks_mut(EMBED_BATCH) {
        let texts: Vec<&str> = part.iter().map(|d| d.content.as_str()).collect();
        let vectors = embedder
            .embed(&texts)
            .map_err(|e| MigrateError::Target(format!("embedding: {e}")))?;
        for (d, v) in part.iter_mut().zip(vectors) {
            d.embedding = Some(v);
        }
    }
    Ok(())
}

/// Compares both sides afresh: counts, dimension, and the digest of every document.
pub fn verify(
    source: &mut Source,
    args: &SourceArgs,
    index: &WorkspaceIndex,
    key: &str,
    reembedded: bool,
    batch: u32,
) -> Result<Report, MigrateError> {
    let started = Instant::now();
    let (documents, vectors) = source.counts(&args.workspace_id)?;
    let theirs = source.digests(&args.workspace_id, !reembedded, i64::from(batch), documents)?;
    // Re-embedded vectors are the target's own: then what was carried over is compared.
    let (ours, ours_vectors) = index.imported_digests(key, !reembedded)?;
    let mut mismatches = Vec::new();
    for (id, d) in &theirs {
        match ours.get(id) {
            None => mismatches.push(format!(
                "document \"{}\": missing in the target",
                id.escape_debug()
            )),
            Some(o) if o != d => mismatches.push(format!(
                "document \"{}\": content or embedding differs",
                id.escape_debug()
            )),
            Some(_) => {}
        }
    }
    for id in ours.keys().filter(|id| !theirs.contains_key(*id)) {
        mismatches.push(format!(
            "document \"{}\": in the target only",
            id.escape_debug()
        ));
    }
    mismatches.truncate(20);
    Ok(Report {
        source: source.description.clone(),
        workspace_id: args.workspace_id.clone(),
        documents: (documents, ours.len() as u64),
        vectors: (vectors, ours_vectors),
        dimension: (source.shape.dimension, index.dimension()),
        checksum: (checksum(&theirs), checksum(&ours)),
        reembedded,
        orphan_vectors: source.shape.orphan_vectors,
        resumed_after: 0,
        already_done: false,
        mismatches,
        copy_seconds: 0.0,
        verify_seconds: started.elapsed().as_secs_f64(),
    })
}
