//! Documents brought in from another agent memory (PostgreSQL + pgvector, by
//! `migrate-pg-to-sqlite` and `clawfs import pg`). Each document becomes one chunk of a
//! workspace's index — its whole text, with the vector it came with — and, in a store, a file of
//! the workspace, so that a hit leads to it and a rescan keeps it.
//!
//! An import is resumable: each batch is written in one transaction together with how far the
//! import got (the `metadata` key `import:KEY`), so an interrupted run leaves every batch before
//! it complete and none after, and the next run goes on from there. A failed batch rolls back
//! whole.
//!
//! Verification compares a digest of every document, (id, content, embedding), on both sides:
//! [`row_digest`] is the one definition of it.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::index::{
    bump_generation, from_blob, insert_chunk, put_meta, remove_in, upsert_file, ChunkRow,
    FileStamp, IndexDb, UNEMBEDDED,
};
use super::workspace::WorkspaceIndex;
use super::SearchError;

/// A document as read from the source.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Its id in the source (as text).
    pub source_id: String,
    /// The source's workspace id.
    pub workspace_id: String,
    /// The text.
    pub content: String,
    /// The source's metadata (JSON), kept as it was.
    pub metadata: Option<serde_json::Value>,
    /// Its embedding, if it has one.
    pub embedding: Option<Vec<f32>>,
    /// When the embedding was made, as the source wrote it.
    pub created_at: Option<String>,
}

/// Where a document was placed in the workspace: its file, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// The file, workspace-relative.
    pub path: String,
    /// The file as written (zero without a workspace: a database alone).
    pub stamp: FileStamp,
}

/// How far an import got, kept with the batches it counts.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// What is imported (the source, without its password).
    pub source: String,
    /// The last document id imported, in the source's order.
    pub after: Option<String>,
    /// Documents imported.
    pub documents: u64,
    /// Of which with an embedding.
    pub vectors: u64,
    /// Whether every document was imported.
    pub done: bool,
    /// The folder of the workspace the documents went into (none: an import recorded before
    /// it was kept).
    #[serde(default)]
    pub into: Option<String>,
}

fn progress_key(key: &str) -> String {
    format!("import:{key}")
}

/// The digest of one document: its id, text and embedding (little-endian `f32`s, none when it
/// has no embedding), each length-prefixed so that no two documents share one by shifting
/// bytes between fields.
pub fn row_digest(id: &str, content: &str, embedding: Option<&[f32]>) -> [u8; 32] {
    let mut h = Sha256::new();
    for field in [id.as_bytes(), content.as_bytes()] {
        h.update((field.len() as u64).to_le_bytes());
        h.update(field);
    }
    match embedding {
        None => h.update(u64::MAX.to_le_bytes()),
        Some(v) => {
            h.update((v.len() as u64).to_le_bytes());
            for x in v {
                h.update(x.to_le_bytes());
            }
        }
    }
    h.finalize().into()
}

/// One checksum of a whole side: SHA-256 over every (id, digest), in id order.
pub fn checksum(digests: &BTreeMap<String, [u8; 32]>) -> String {
    let mut h = Sha256::new();
    for (id, d) in digests {
        h.update((id.len() as u64).to_le_bytes());
        h.update(id.as_bytes());
        h.update(d);
    }
    hex::encode(h.finalize())
}

impl IndexDb {
    /// How far import `key` got, if it started.
    pub fn import_progress(&self, key: &str) -> Result<Option<Progress>, SearchError> {
        let Some(text) = self.meta(&progress_key(key))? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| SearchError::Corrupt(format!("import progress of {key}: {e}")))
    }

    /// Records how far import `key` got (outside a batch: its end).
    pub fn set_import_progress(&self, key: &str, progress: &Progress) -> Result<(), SearchError> {
        let text = serde_json::to_string(progress).expect("progress serialises");
        self.set_meta(&progress_key(key), &text)
    }

    /// Writes one batch of import `key` and `progress` (which counts it) in one transaction:
    /// each document replaces whatever the index held of its file. `model` names the
    /// embeddings' maker. Returns the ids removed, and the id of each document added.
    pub fn import_batch(
        &mut self,
        key: &str,
        docs: &[(Document, Placed)],
        model: &str,
        progress: &Progress,
    ) -> Result<(Vec<i64>, Vec<i64>), SearchError> {
        let workspace = self.workspace().to_string();
        let tx = self.transaction()?;
        let mut removed = Vec::new();
        let mut added = Vec::with_capacity(docs.len());
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        for (doc, placed) in docs {
            removed.extend(remove_in(&tx, &placed.path)?);
            let lines = doc.content.lines().count().max(1) as u32;
            let meta = serde_json::json!({
                "path": placed.path,
                "line_start": 1,
                "line_end": lines,
                "heading": "",
                "content_type": "text/markdown",
                "embedding_model": model,
                "embedding_dimension": doc.embedding.as_ref().map_or(0, Vec::len),
                "import": key,
                "source_id": doc.source_id,
                "source_workspace_id": doc.workspace_id,
                "source_metadata": doc.metadata,
            });
            let id = insert_chunk(
                &tx,
                &workspace,
                &ChunkRow {
                    path: &placed.path,
                    line_start: 1,
                    line_end: lines,
                    heading: "",
                    text: &doc.content,
                    metadata: &meta,
                },
                doc.embedding
                    .as_deref()
                    .map(|v| (v, doc.created_at.as_deref().unwrap_or(&now))),
            )?;
            // Without an embedding, found by text now and embedded by the workspace's own
            // embedder when the daemon retries.
            let skipped = doc.embedding.is_none().then_some(UNEMBEDDED);
            upsert_file(&tx, &placed.path, placed.stamp, skipped)?;
            added.push(id);
        }
        let text = serde_json::to_string(progress).expect("progress serialises");
        put_meta(&tx, &progress_key(key), &text)?;
        bump_generation(&tx)?;
        tx.commit()?;
        Ok((removed, added))
    }

    /// The digest of every document import `key` wrote, by source id, as the index holds it
    /// now (without their embeddings unless `with_embeddings`), and how many have an
    /// embedding. A source id held twice is reported as corrupt.
    pub fn imported_digests(
        &self,
        key: &str,
        with_embeddings: bool,
    ) -> Result<(BTreeMap<String, [u8; 32]>, u64), SearchError> {
        let mut st = self.connection().prepare(
            "SELECT json_extract(d.metadata, '$.source_id'), d.content, v.embedding
             FROM documents d LEFT JOIN vectors v ON v.id = d.rowid
             WHERE json_extract(d.metadata, '$.import') = ?1",
        )?;
        let mut rows = st.query([key])?;
        let (mut out, mut vectors) = (BTreeMap::new(), 0);
        while let Some(r) = rows.next()? {
            let id: String = r.get(0)?;
            let content: String = r.get(1)?;
            let embedding: Option<Vec<u8>> = r.get(2)?;
            vectors += u64::from(embedding.is_some());
            let v = embedding.filter(|_| with_embeddings).map(|b| from_blob(&b));
            if out
                .insert(id.clone(), row_digest(&id, &content, v.as_deref()))
                .is_some()
            {
                return Err(SearchError::Corrupt(format!("document {id} is held twice")));
            }
        }
        Ok((out, vectors))
    }
}

impl WorkspaceIndex {
    /// Writes one batch of import `key` (see [`IndexDb::import_batch`]) and adds its vectors to
    /// the graph. The graph is saved by [`WorkspaceIndex::save_graph`] at the end; a run cut
    /// short leaves a graph older than the database, rebuilt from it at the next open.
    pub fn import(
        &self,
        key: &str,
        docs: &[(Document, Placed)],
        model: &str,
        progress: &Progress,
    ) -> Result<(), SearchError> {
        check_batch(docs)?;
        let (removed, added) = self.db().import_batch(key, docs, model, progress)?;
        let vectors: Vec<(i64, Vec<f32>)> = added
            .iter()
            .zip(docs)
            .filter_map(|(id, (d, _))| d.embedding.clone().map(|v| (*id, v)))
            .filter(|(_, v)| v.len() == self.dimension() && v.iter().any(|x| *x != 0.0))
            .collect();
        if self.widened(vectors.iter().map(|(_, v)| v.as_slice()))? {
            return Ok(());
        }
        let graph = self.graph();
        for id in removed {
            graph.remove(id)?;
        }
        graph.add_many(&vectors)
    }

    /// How far import `key` got, if it started.
    pub fn import_progress(&self, key: &str) -> Result<Option<Progress>, SearchError> {
        self.db().import_progress(key)
    }

    /// Marks import `key` as `progress` (its end).
    pub fn set_import_progress(&self, key: &str, progress: &Progress) -> Result<(), SearchError> {
        self.db().set_import_progress(key, progress)
    }

    /// The digest of every document import `key` wrote (see [`IndexDb::imported_digests`]).
    pub fn imported_digests(
        &self,
        key: &str,
        with_embeddings: bool,
    ) -> Result<(BTreeMap<String, [u8; 32]>, u64), SearchError> {
        self.db().imported_digests(key, with_embeddings)
    }
}

/// Refuses a batch the index cannot keep as it is, before anything of it is written: a
/// document given twice (both would claim one file and one graph key), or an embedding with a
/// NaN or infinite component (cosine distance to it is NaN, which ranks it first for every
/// query).
fn check_batch(docs: &[(Document, Placed)]) -> Result<(), SearchError> {
    let mut seen = std::collections::HashSet::new();
    for (d, _) in docs {
        if !seen.insert(d.source_id.as_str()) {
            return Err(SearchError::Invalid(format!(
                "document {} comes twice",
                d.source_id.escape_debug()
            )));
        }
        if let Some(x) = d.embedding.iter().flatten().find(|x| !x.is_finite()) {
            return Err(SearchError::Invalid(format!(
                "document {}: its embedding holds {x}, not a finite number",
                d.source_id.escape_debug()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_binds_each_field_to_its_place() {
        let a = row_digest("1", "ab", Some(&[1.0]));
        assert_ne!(a, row_digest("1a", "b", Some(&[1.0])));
        assert_ne!(a, row_digest("1", "ab", Some(&[1.5])));
        assert_ne!(a, row_digest("1", "ab", None));
        assert_ne!(row_digest("1", "", None), row_digest("1", "", Some(&[])));
        assert_eq!(a, row_digest("1", "ab", Some(&[1.0])));
    }

    #[test]
    fn a_batch_with_a_document_twice_or_a_non_finite_vector_is_refused_whole() {
        let doc = |id: &str, v: Vec<f32>| {
            (
                Document {
                    source_id: id.into(),
                    workspace_id: "w".into(),
                    content: "c".into(),
                    metadata: None,
                    embedding: Some(v),
                    created_at: None,
                },
                Placed {
                    path: format!("imported/{id}.md"),
                    stamp: FileStamp {
                        size: 1,
                        mtime_ns: 0,
                        ino: 0,
                        ctime_ns: 0,
                    },
                },
            )
        };
        assert!(check_batch(&[doc("1", vec![1.0]), doc("2", vec![0.5])]).is_ok());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let e = check_batch(&[doc("1", vec![1.0]), doc("2", vec![bad])]).unwrap_err();
            assert!(matches!(e, SearchError::Invalid(_)), "{e}");
        }
        let e = check_batch(&[doc("1", vec![1.0]), doc("1", vec![0.5])]).unwrap_err();
        assert!(e.to_string().contains("comes twice"), "{e}");
    }

    #[test]
    fn batches_resume_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = IndexDb::open(&dir.path().join("i.db"), "ws").unwrap();
        let doc = |id: &str, v: Option<Vec<f32>>| {
            (
                Document {
                    source_id: id.into(),
                    workspace_id: "default".into(),
                    content: format!("note {id}\nsecond line"),
                    metadata: Some(serde_json::json!({"tag": id})),
                    embedding: v,
                    created_at: None,
                },
                Placed {
                    path: format!("imported/{id}.md"),
                    stamp: FileStamp {
                        size: 0,
                        mtime_ns: 0,
                        ino: 0,
                        ctime_ns: 0,
                    },
                },
            )
        };
        assert_eq!(db.import_progress("k").unwrap(), None);
        let p = Progress {
            source: "pg".into(),
            after: Some("2".into()),
            documents: 2,
            vectors: 1,
            done: false,
            into: Some("imported".into()),
        };
        let batch = [doc("1", Some(vec![0.5, 0.5])), doc("2", None)];
        db.import_batch("k", &batch, "m", &p).unwrap();
        assert_eq!(db.import_progress("k").unwrap(), Some(p));
        let (digests, vectors) = db.imported_digests("k", true).unwrap();
        assert_eq!(vectors, 1);
        assert_eq!(digests.len(), 2);
        assert_eq!(
            digests["1"],
            row_digest("1", "note 1\nsecond line", Some(&[0.5, 0.5]))
        );
        assert_eq!(digests["2"], row_digest("2", "note 2\nsecond line", None));
        // The same document again replaces its row instead of doubling it.
        db.import_batch("k", &batch[..1], "m", &Progress::default())
            .unwrap();
        assert_eq!(db.imported_digests("k", false).unwrap().0.len(), 2);
        assert_eq!(db.counts().unwrap(), (2, 2));
    }
}
