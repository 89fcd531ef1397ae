//! One workspace's index: keeping it in step with the files, and answering queries.

use std::io::Read;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::OFlags;

use super::chunk::{self, Skip};
use super::embed::{EmbedError, Embedder};
use super::hnsw::{Hnsw, HnswParams};
use super::index::{FileStamp, IndexDb, UNEMBEDDED};
use super::SearchError;

/// How a query ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// BM25 over the words.
    Text,
    /// Cosine similarity of embeddings.
    Vector,
    /// 0.7 · vector + 0.3 · BM25 normalised to the best text hit.
    Hybrid,
}

impl Mode {
    /// Its name: `text`, `vector` or `hybrid`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Text => "text",
            Mode::Vector => "vector",
            Mode::Hybrid => "hybrid",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "text" => Ok(Mode::Text),
            "vector" => Ok(Mode::Vector),
            "hybrid" => Ok(Mode::Hybrid),
            _ => Err(format!("mode {s:?}: expected text, vector or hybrid")),
        }
    }
}

/// A query.
#[derive(Clone, Copy)]
pub struct Query<'a> {
    /// The words.
    pub text: &'a str,
    /// How to rank.
    pub mode: Mode,
    /// At most this many hits.
    pub limit: usize,
    /// Whether the caller may read a path (workspace-relative); others are never shown.
    pub readable: &'a dyn Fn(&str) -> bool,
    /// The workspace folder, to check that a hit's file is still the one indexed.
    pub workspace: BorrowedFd<'a>,
}

/// The hits of a query, and how they were found.
#[derive(Debug)]
pub struct Answer {
    /// Best first.
    pub hits: Vec<Hit>,
    /// The mode used: text when the embedder was unavailable.
    pub mode: Mode,
    /// Why the mode used is not the one asked for.
    pub note: Option<String>,
}

/// One result: where to read, and why it ranked (the agent tools' own hit type, so the
/// tool and the core cannot disagree on it).
pub use clawfs_agent_tools::SemanticHit as Hit;

/// Weight of the vector score in a hybrid rank (P1.4 §4.5).
const VECTOR_WEIGHT: f64 = 0.7;
/// Candidates fetched from each side per hit wanted.
const CANDIDATES_PER_HIT: usize = 5;
/// Characters of a hit's snippet.
const SNIPPET_CHARS: usize = 240;
/// Texts embedded per model call while indexing.
const EMBED_BATCH: usize = 64;

/// Where an index keeps its files: the database (the truth) and the graph saved from it, with
/// the database generation the graph matches.
#[derive(Debug, Clone)]
pub struct IndexFiles {
    /// The SQLite database.
    pub db: PathBuf,
    /// The saved HNSW graph.
    pub graph: PathBuf,
    /// The generation of the database the saved graph matches.
    pub generation: PathBuf,
}

impl IndexFiles {
    /// A workspace's index in the store's private area: `dir` (created, the daemon's alone
    /// whatever its umask, as is its parent) holds `index.db`, `hnsw.usearch` and
    /// `hnsw.generation`.
    pub fn private(dir: &Path) -> Result<IndexFiles, SearchError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| SearchError::io("creating the index folder", e))?;
        for d in [dir, dir.parent().unwrap_or(dir)] {
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700));
        }
        Ok(IndexFiles {
            db: dir.join(super::index::DB_FILE),
            graph: dir.join("hnsw.usearch"),
            generation: dir.join("hnsw.generation"),
        })
    }

    /// A database anywhere (`migrate-pg-to-sqlite --sqlite-path`), its graph beside it as
    /// `DB.usearch` and `DB.usearch.generation`.
    pub fn beside(db: &Path) -> IndexFiles {
        let with = |ext: &str| PathBuf::from(format!("{}{ext}", db.display()));
        IndexFiles {
            db: db.to_path_buf(),
            graph: with(".usearch"),
            generation: with(".usearch.generation"),
        }
    }
}

/// How a saved graph is made, written with the generation it matches: a graph saved by a
/// build that kept every component (before graphs were cut to their width) is rebuilt once.
const GRAPH_FORMAT: &str = "width";

/// What `hnsw.generation` holds for a graph of the database generation `generation`.
fn graph_stamp(generation: &str) -> String {
    format!("{GRAPH_FORMAT}:{generation}")
}

/// The index of one workspace.
pub struct WorkspaceIndex {
    name: String,
    files: IndexFiles,
    dim: usize,
    db: Mutex<IndexDb>,
    graph: Mutex<Hnsw>,
    params: HnswParams,
    embedder: Option<Arc<dyn Embedder>>,
    /// Between [`WorkspaceIndex::begin_batch`] and [`WorkspaceIndex::end_batch`]: the files
    /// indexed go into one transaction, committed when anything else uses the database.
    batching: std::sync::atomic::AtomicBool,
}

impl WorkspaceIndex {
    /// Opens the index of workspace `name` kept in `files` for vectors of `dim` components by
    /// `embedder` (None: text search only). A damaged database is moved aside and started
    /// afresh; an index made by another embedder or dimension is emptied. Both leave
    /// `needs_rescan` true.
    pub fn open(
        name: &str,
        files: &IndexFiles,
        dim: usize,
        params: HnswParams,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<(WorkspaceIndex, bool), SearchError> {
        let (mut db, mut fresh) = match IndexDb::open(&files.db, name) {
            Ok(db) => (db, false),
            Err(e @ (SearchError::Corrupt(_) | SearchError::Db(_))) => {
                tracing::warn!(workspace = name, error = %e, "index database unusable: rebuilding it");
                for ext in ["", "-wal", "-shm"] {
                    let p = format!("{}{ext}", files.db.display());
                    let _ = std::fs::rename(&p, format!("{p}.corrupt"));
                }
                (IndexDb::open(&files.db, name)?, true)
            }
            Err(e) => return Err(e),
        };
        let fingerprint = embedder
            .as_ref()
            .map(|e| e.fingerprint())
            .unwrap_or_default();
        let same = db.meta("embedder")?.as_deref() == Some(fingerprint.as_str())
            && db.meta("dimension")?.as_deref() == Some(dim.to_string().as_str());
        if !same {
            if db.meta("embedder")?.is_some() {
                tracing::info!(workspace = name, embedder = %fingerprint, dim, "index made by another embedder or dimension: re-indexing");
            }
            db.clear()?;
            db.set_meta("embedder", &fingerprint)?;
            db.set_meta("dimension", &dim.to_string())?;
            fresh = true;
        }
        let graph = Self::load_graph(files, &db, dim, params)?;
        let index = WorkspaceIndex {
            name: name.to_string(),
            files: files.clone(),
            dim,
            db: Mutex::new(db),
            graph: Mutex::new(graph),
            params,
            embedder,
            batching: std::sync::atomic::AtomicBool::new(false),
        };
        Ok((index, fresh))
    }

    /// Writes a consistent copy of the database to `to` (replaced atomically): what hosts
    /// that do not write this index search ([`crate::indexer`]). The vectors are in it; each
    /// host builds its own graph from them.
    pub fn publish(&self, to: &Path) -> Result<(), SearchError> {
        let dir = to.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            ".publish-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        // Committed first: VACUUM INTO runs outside any transaction.
        let db = self.db();
        let done = db
            .connection()
            .execute("VACUUM INTO ?1", [tmp.to_string_lossy()])
            .map_err(SearchError::from)
            .and_then(|_| {
                std::fs::rename(&tmp, to).map_err(|e| SearchError::io("publishing the index", e))
            });
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        done
    }

    /// The saved graph if it matches the database's generation, else one rebuilt from it.
    fn load_graph(
        files: &IndexFiles,
        db: &IndexDb,
        dim: usize,
        params: HnswParams,
    ) -> Result<Hnsw, SearchError> {
        let generation = db.meta("generation")?.unwrap_or_default();
        let saved = std::fs::read_to_string(&files.generation).unwrap_or_default();
        if saved.trim() == graph_stamp(&generation) && !generation.is_empty() {
            match Hnsw::load(&files.graph, dim, params) {
                Ok(g) => return Ok(g),
                Err(e) => tracing::warn!(error = %e, "vector graph unreadable: rebuilding it"),
            }
        }
        Self::graph_of(db, dim, params)
    }

    /// A graph of every vector `db` holds, as wide as they need ([`super::hnsw::width_for`]).
    fn graph_of(db: &IndexDb, dim: usize, params: HnswParams) -> Result<Hnsw, SearchError> {
        let vectors: Vec<(i64, Vec<f32>)> = db
            .all_vectors()?
            .into_iter()
            .filter(|(_, v)| v.len() == dim && v.iter().any(|x| *x != 0.0))
            .collect();
        let width = super::hnsw::width_for(dim, vectors.iter().map(|(_, v)| v.as_slice()));
        let graph = Hnsw::new(dim, width, params)?;
        graph.add_many(&vectors)?;
        Ok(graph)
    }

    /// Whether the graph is too narrow for `vectors` (stored in the database already); if so,
    /// it is rebuilt from the database as wide as they all need, and they are in it.
    pub(super) fn widened<'a>(
        &self,
        vectors: impl IntoIterator<Item = &'a [f32]>,
    ) -> Result<bool, SearchError> {
        let fits = {
            let graph = self.graph();
            vectors.into_iter().all(|v| graph.fits(v))
        };
        if fits {
            return Ok(false);
        }
        tracing::info!(workspace = %self.name, "vectors wider than the graph: rebuilding it wider");
        // The database before the graph, as every other user takes them.
        let db = self.db_for_indexing()?;
        let rebuilt = Self::graph_of(&db, self.dim, self.params)?;
        *self.graph() = rebuilt;
        Ok(true)
    }

    /// The dimension of its vectors.
    pub fn dimension(&self) -> usize {
        self.dim
    }

    /// The embedder of its vectors (None: text search only).
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The workspace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The indexed files a caller is shown, with their stamps: those `readable` lets it read
    /// and whose file at the path is still the one indexed (see [`shows`]).
    pub fn shown_files(
        &self,
        ws: BorrowedFd<'_>,
        readable: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, FileStamp)>, SearchError> {
        let files = self.db().files()?;
        Ok(files
            .into_iter()
            .filter(|(path, stamp)| shows(readable, ws, path, Some(*stamp)))
            .collect())
    }

    /// Writes to the new file `dest` a copy of the index holding only the files `keep`, as
    /// stamped (see [`super::index::write_view`]).
    pub fn write_view(&self, dest: &Path, keep: &[(String, FileStamp)]) -> Result<(), SearchError> {
        // Read on a connection of its own: the batch is committed first.
        drop(self.db());
        super::index::write_view(&self.files.db, dest, keep)
    }

    /// The database, with the indexer's batch committed: what every reader and every other
    /// writer sees.
    pub(super) fn db(&self) -> std::sync::MutexGuard<'_, IndexDb> {
        let mut db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = db.settle() {
            tracing::warn!(workspace = %self.name, error = %e, "committing indexed files");
        }
        db
    }

    /// The database for indexing a file: inside the batch transaction while one is on.
    fn db_for_indexing(&self) -> Result<std::sync::MutexGuard<'_, IndexDb>, SearchError> {
        let mut db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        if self.batching.load(std::sync::atomic::Ordering::Relaxed) {
            db.batch()?;
        }
        Ok(db)
    }

    /// From now on, files indexed or forgotten are committed together (by
    /// [`WorkspaceIndex::end_batch`], or earlier when a search or anything else reads).
    pub fn begin_batch(&self) {
        self.batching
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Commits what the batch indexed and goes back to one transaction per file. `Ok(false)`:
    /// part of the batch was rolled back (a failed write or commit), and the workspace must be
    /// compared with its index again to find those files.
    pub fn end_batch(&self) -> Result<bool, SearchError> {
        self.batching
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let mut db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        let settled = db.settle();
        let lost = db.take_lost_batch();
        settled.map(|()| !lost)
    }

    pub(super) fn graph(&self) -> std::sync::MutexGuard<'_, Hnsw> {
        self.graph.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Inserts the vectors waiting beside the graph ([`Hnsw::settle`]) a slice at a time,
    /// letting searches in between, until none waits (true) or `go_on` says no (false).
    pub fn settle_graph(&self, go_on: &dyn Fn() -> bool) -> Result<bool, SearchError> {
        loop {
            if self.graph().settle(&|| false)? {
                return Ok(true);
            }
            if !go_on() {
                return Ok(false);
            }
        }
    }

    /// Saves the graph, every waiting vector inserted, with the database generation it
    /// matches.
    pub fn save_graph(&self) -> Result<(), SearchError> {
        let db = self.db();
        let generation = db.meta("generation")?.unwrap_or_default();
        self.graph().save(&self.files.graph)?;
        let (dir, name) = match (
            self.files.generation.parent(),
            self.files.generation.file_name(),
        ) {
            (Some(d), Some(n)) => (d, n.to_string_lossy()),
            _ => {
                return Err(SearchError::Hnsw {
                    what: "saving the graph's generation",
                    source: "its file has no folder".into(),
                })
            }
        };
        clawfs_store::atomic::atomic_write(dir, &name, graph_stamp(&generation).as_bytes(), 0o600)
            .map_err(|e| SearchError::io("saving the graph's generation", e))
    }

    /// Brings `rel` (workspace-relative) up to date from the workspace folder `ws` (reached by
    /// descriptor; symlinks are not followed). A file that is gone is forgotten. Returns whether
    /// anything changed.
    pub fn update(&self, ws: BorrowedFd<'_>, rel: &str) -> Result<bool, SearchError> {
        // The index reads without touching the access time: nobody read the file. O_NOATIME
        // takes the file's owner or CAP_FOWNER; a daemon with neither reads it plainly.
        let open = |flags| clawfs_store::beneath::open_file(ws, Path::new(rel), flags);
        let opened = open(OFlags::RDONLY | OFlags::NOATIME).or_else(|e| match e.raw_os_error() {
            Some(libc::EPERM) => open(OFlags::RDONLY),
            _ => Err(e),
        });
        let fd = match opened {
            Ok(fd) => fd,
            // Out of descriptors or memory, interrupted: the file is still there, and what the
            // index holds of it stays until it can be read.
            Err(e) if is_transient(&e) => {
                return Err(SearchError::io(format!("opening {rel}"), e));
            }
            // Gone, or a folder, a symlink or a special file: not indexed.
            Err(_) => return self.forget(rel, false).map(|n| n > 0),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| SearchError::io("stat", e.into()))?;
        let stamp = FileStamp::of(&st);
        if self.db_for_indexing()?.is_current(rel, &stamp)? {
            return Ok(false);
        }
        let mut bytes = Vec::new();
        let read = std::fs::File::from(fd)
            .take(chunk::MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes);
        read.map_err(|e| SearchError::io(format!("reading {rel}"), e))?;
        let (chunks, mut skipped) = match chunk::chunk_file(rel, &bytes) {
            Ok(c) => (c, None),
            Err(Skip::TooLarge) => (Vec::new(), Some("too_large")),
            Err(Skip::Binary) => (Vec::new(), Some("binary")),
        };
        let vectors = match self.embed_chunks(&chunks) {
            Ok(v) => v,
            // Found by text now, and embedded when the embedder is back (is_current is false).
            Err(EmbedError::Unavailable(why)) => {
                tracing::debug!(workspace = %self.name, path = %rel, error = %why, "indexed without vectors");
                skipped = Some(UNEMBEDDED);
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        let model = self
            .embedder
            .as_ref()
            .map(|e| e.fingerprint())
            .unwrap_or_default();
        let (removed, added) = self
            .db_for_indexing()?
            .replace_file(rel, stamp, skipped, &chunks, &vectors, &model)?;
        if self.widened(vectors.iter().map(Vec::as_slice))? {
            return Ok(true);
        }
        let graph = self.graph();
        for id in removed {
            graph.remove(id)?;
        }
        for (id, v) in added.iter().zip(&vectors) {
            if v.iter().any(|x| *x != 0.0) {
                graph.add(*id, v)?;
            }
        }
        Ok(true)
    }

    /// The vectors of `chunks` (none without an embedder).
    fn embed_chunks(&self, chunks: &[chunk::Chunk]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let Some(e) = &self.embedder else {
            return Ok(Vec::new());
        };
        let texts: Vec<String> = chunks.iter().map(super::index::indexed_text).collect();
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(EMBED_BATCH) {
            let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
            out.extend(e.embed(&refs)?);
        }
        Ok(out)
    }

    /// Whether the embedder embeds now (one short text).
    pub fn embedder_answers(&self) -> bool {
        self.embedder
            .as_ref()
            .is_some_and(|e| e.embed(&["ClawFS"]).is_ok())
    }

    /// How many files wait for vectors because the embedder was unavailable.
    pub fn unembedded(&self) -> Result<u64, SearchError> {
        self.db().unembedded()
    }

    /// Forgets `rel` (and with `prefix`, everything below it); returns how many chunks went.
    pub fn forget(&self, rel: &str, prefix: bool) -> Result<usize, SearchError> {
        let removed = self.db_for_indexing()?.remove_file(rel, prefix)?;
        let graph = self.graph();
        for id in &removed {
            graph.remove(*id)?;
        }
        Ok(removed.len())
    }

    /// Brings the whole index up to date with the workspace folder `ws`: every regular file
    /// (except ClawFS's own `.clawfs/`, `snapshots/`, `metadata.json` and `.git/`) is updated,
    /// and files gone are forgotten. `progress(done, total)` is called as it goes.
    pub fn rescan(
        &self,
        ws: BorrowedFd<'_>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<RescanReport, SearchError> {
        self.rescan_while(ws, progress, &|| true)
    }

    /// [`WorkspaceIndex::rescan`], ending before the next file once `go_on` says no (the graph
    /// saved, the report so far).
    pub fn rescan_while(
        &self,
        ws: BorrowedFd<'_>,
        progress: &mut dyn FnMut(u64, u64),
        go_on: &dyn Fn() -> bool,
    ) -> Result<RescanReport, SearchError> {
        let files = list_files(ws)?;
        let mut report = RescanReport::default();
        let known = self.db().paths()?;
        let present: std::collections::HashSet<&str> = files.iter().map(String::as_str).collect();
        for gone in known.iter().filter(|p| !present.contains(p.as_str())) {
            self.forget(gone, false)?;
            report.removed += 1;
        }
        let total = files.len() as u64;
        for (i, rel) in files.iter().enumerate() {
            if !go_on() {
                report.left = total - i as u64;
                break;
            }
            match self.update(ws, rel) {
                Ok(true) => report.updated += 1,
                Ok(false) => report.unchanged += 1,
                Err(e @ (SearchError::Db(_) | SearchError::Corrupt(_))) => return Err(e),
                Err(e) => {
                    tracing::warn!(workspace = %self.name, path = %rel, error = %e, "not indexed");
                    report.failed += 1;
                }
            }
            progress(i as u64 + 1, total);
        }
        self.save_graph()?;
        Ok(report)
    }

    /// Runs `q`.
    ///
    /// A chunk counts only if the caller may read its file (`q.readable`) *and* the file now at
    /// its path is the one that was indexed (same inode and change time: a file swapped in by
    /// rename, or touched back to the old size and mtime, does not inherit another's chunks).
    /// Candidates are taken in rank order until `limit` such chunks are found, so unreadable
    /// files change neither the hits nor their number. Text scores are BM25 normalised to the
    /// best readable hit (1.0), so their magnitude does not reveal how often a word occurs in
    /// files the caller cannot read.
    pub fn query(&self, q: &Query<'_>) -> Result<Vec<Hit>, SearchError> {
        let want = q.limit.clamp(1, 1000);
        // Hybrid ranks the union of both sides: each brings more than the limit.
        let per_side = match q.mode {
            Mode::Hybrid => want * 2,
            _ => want,
        };
        // The query's vector before the index is locked: an endpoint may take its timeout,
        // and indexing must not wait for it.
        let query_vector = match q.mode {
            Mode::Text => None,
            _ => {
                let embedder = self.embedder.as_ref().ok_or_else(|| {
                    EmbedError::Unavailable(
                        "no embedding model is installed (scripts/fetch-model.sh installs it)"
                            .into(),
                    )
                })?;
                Some(embedder.embed(&[q.text])?.remove(0))
            }
        };
        let db = self.db();
        let mut verdicts: std::collections::HashMap<String, bool> = Default::default();
        let mut shown = |c: &super::index::StoredChunk| -> Result<bool, SearchError> {
            if let Some(v) = verdicts.get(&c.path) {
                return Ok(*v);
            }
            let v = shows(q.readable, q.workspace, &c.path, db.stamp(&c.path)?);
            verdicts.insert(c.path.clone(), v);
            Ok(v)
        };
        let mut found: std::collections::HashMap<
            i64,
            (super::index::StoredChunk, Option<f64>, Option<f64>),
        > = Default::default();
        if q.mode != Mode::Vector {
            let mut taken = 0;
            db.text_search_each(q.text, &mut |id, score| {
                let Some(c) = db.chunk(id)? else {
                    return Ok(true);
                };
                if shown(&c)? {
                    found.entry(id).or_insert((c, None, None)).1 = Some(score);
                    taken += 1;
                }
                Ok(taken < per_side)
            })?;
        }
        if let Some(v) = query_vector {
            let graph = self.graph();
            let total = graph.len();
            let mut k = (per_side * CANDIDATES_PER_HIT).max(50);
            let mut seen = std::collections::HashSet::new();
            let mut taken = 0;
            loop {
                for (id, sim) in graph.search(&v, k.min(total))? {
                    if taken >= per_side || !seen.insert(id) {
                        continue;
                    }
                    let Some(c) = db.chunk(id)? else { continue };
                    if shown(&c)? {
                        found.entry(id).or_insert((c, None, None)).2 = Some(f64::from(sim));
                        taken += 1;
                    }
                }
                // Unreadable neighbours crowded the readable ones out: look further.
                if taken >= per_side || k >= total {
                    break;
                }
                k = k.saturating_mul(4);
            }
        }
        drop(db);
        let best_text = found
            .values()
            .filter_map(|(_, t, _)| *t)
            .fold(0.0f64, f64::max);
        let mut hits: Vec<Hit> = found
            .into_values()
            .map(|(c, text, vector)| {
                let text = text.map(|t| if best_text > 0.0 { t / best_text } else { 0.0 });
                let score = match q.mode {
                    Mode::Text => text.unwrap_or(0.0),
                    Mode::Vector => vector.unwrap_or(0.0),
                    Mode::Hybrid => {
                        VECTOR_WEIGHT * vector.unwrap_or(0.0)
                            + (1.0 - VECTOR_WEIGHT) * text.unwrap_or(0.0)
                    }
                };
                Hit {
                    snippet: snippet(&c.content, q.text),
                    path: c.path,
                    line_start: c.line_start,
                    line_end: c.line_end,
                    heading: c.heading,
                    score,
                    text_score: text,
                    vector_score: vector,
                }
            })
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
        });
        hits.truncate(want);
        Ok(hits)
    }

    /// [`WorkspaceIndex::query`] as a caller should see it: when the query cannot be embedded
    /// (no model, an endpoint down or answering nonsense, its key unreadable), a vector or
    /// hybrid query is answered by text, and the answer says so.
    pub fn search(&self, q: &Query<'_>) -> Result<Answer, SearchError> {
        match self.query(q) {
            Err(SearchError::Embed(e @ (EmbedError::Unavailable(_) | EmbedError::Failed(_))))
                if q.mode != Mode::Text =>
            {
                let why = e.to_string();
                let hits = self.query(&Query {
                    mode: Mode::Text,
                    ..*q
                })?;
                Ok(Answer {
                    hits,
                    mode: Mode::Text,
                    note: Some(format!("{why}: these are text search results")),
                })
            }
            r => r.map(|hits| Answer {
                hits,
                mode: q.mode,
                note: None,
            }),
        }
    }

    /// Whether a large text search scores its two halves at once (the default; on a machine
    /// of one core, one pass is as fast).
    pub fn split_text_search(&self, on: bool) {
        self.db().split_text_search(on);
    }

    /// Whether text searches reuse the phrases' document counts of earlier ones while the
    /// index is unchanged (the default).
    pub fn remember_phrase_counts(&self, on: bool) {
        self.db().remember_phrase_counts(on);
    }

    /// Chunks and files indexed, and vectors in the graph.
    pub fn counts(&self) -> Result<(u64, u64, usize), SearchError> {
        let (chunks, files) = self.db().counts()?;
        Ok((chunks, files, self.graph().len()))
    }
}

/// What a rescan did.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct RescanReport {
    /// Files (re)indexed.
    pub updated: u64,
    /// Files already up to date.
    pub unchanged: u64,
    /// Files forgotten (gone from the workspace).
    pub removed: u64,
    /// Files that could not be read.
    pub failed: u64,
    /// Files not visited: the rescan was told to stop (the next one takes them up).
    pub left: u64,
}

/// Whether a caller is shown what the index holds of `rel`: it may read the file (`readable`),
/// and the file now at the path is the one indexed. A file swapped in by rename, or created
/// where another was deleted, does not inherit another's text, not even for a moment.
fn shows(
    readable: &dyn Fn(&str) -> bool,
    ws: BorrowedFd<'_>,
    rel: &str,
    stamp: Option<FileStamp>,
) -> bool {
    readable(rel) && same_file(ws, rel, stamp)
}

/// Whether the file at `rel` is the one `stamp` describes (same inode and change time; a rename
/// or a permission change gives a new change time, which `touch` cannot set back).
fn same_file(ws: BorrowedFd<'_>, rel: &str, stamp: Option<FileStamp>) -> bool {
    let Some(stamp) = stamp else { return false };
    match rustix::fs::statat(ws, rel, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => FileStamp::of(&st).same_file(&stamp),
        Err(_) => false,
    }
}

/// Names in a workspace that are ClawFS's, never indexed.
pub fn is_managed(rel: &str) -> bool {
    let top = rel.split('/').next().unwrap_or("");
    matches!(top, ".clawfs" | "snapshots" | ".git" | ".search") || rel == "metadata.json"
}

/// Every regular file below `ws`, workspace-relative, without following symlinks.
fn list_files(ws: BorrowedFd<'_>) -> Result<Vec<String>, SearchError> {
    let entries = clawfs_store::tree::walk(ws, &is_managed)
        .map_err(|e| SearchError::io("listing the workspace", e))?;
    Ok(entries
        .entries
        .into_iter()
        .filter(|e| e.kind == rustix::fs::FileType::RegularFile)
        .map(|e| e.rel)
        .collect())
}

/// Up to [`SNIPPET_CHARS`] of `content`, starting near the first word of `query` found in it.
fn snippet(content: &str, query: &str) -> String {
    let lower = content.to_lowercase();
    let start = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .find_map(|w| lower.find(&w.to_lowercase()))
        .map_or(0, |i| i.saturating_sub(60));
    let mut start = start.min(content.len());
    while !content.is_char_boundary(start) {
        start -= 1;
    }
    let text: String = content[start..].chars().take(SNIPPET_CHARS).collect();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match start > 0 {
        true => format!("…{text}"),
        false => text,
    }
}

/// An open that failed for want of a resource or by interruption, not because of the file.
fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EINTR | libc::EAGAIN | libc::EIO)
    )
}
