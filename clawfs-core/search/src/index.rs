//! One workspace's index: SQLite (the chunks, their FTS5 text and their vectors: the truth) and
//! an HNSW graph over the vectors ([`super::hnsw`]), which can always be rebuilt from SQLite.
//!
//! Layout, in the store's private area (never visible through the mount):
//! `.clawfs/index/<workspace>/index.db` (+ its WAL) and `hnsw.usearch`.
//!
//! Schema (P1.4 §4.2, with FTS5's rowid as the document id):
//! - `documents`: FTS5 (`porter unicode61`) of `workspace_id`, `content`, `metadata` (JSON:
//!   path, lines, heading, embedding model and dimension); one row per chunk.
//! - `vectors`: `id` = the document id, `document_id`, `embedding` (little-endian f32),
//!   `created_at`.
//! - `chunks`: document id → path and line range, indexed by path, for updates and hits.
//! - `files`: what was indexed of each file (size, mtime), so a rescan skips unchanged files.
//! - `metadata`: `embedder` (fingerprint), `dimension`, `hnsw_generation`.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use rusqlite::{params, Connection, OptionalExtension};

use super::chunk::Chunk;
use super::rank::{self, Bm25};
use super::SearchError;

/// What the index knows of a file: enough to tell a changed or different file from the one
/// indexed. The change time is the kernel's (a rename, chmod or write sets it; `touch` cannot
/// set it back), so content swapped in under an old size and mtime is still seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// Change time, nanoseconds since the epoch.
    pub ctime_ns: i64,
}

impl FileStamp {
    /// The stamp of a file's status.
    pub fn of(st: &rustix::fs::Stat) -> FileStamp {
        FileStamp {
            size: st.st_size as u64,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
            ino: st.st_ino,
            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
        }
    }

    /// Whether both describe the same inode unchanged since (size and mtime aside).
    pub fn same_file(&self, other: &FileStamp) -> bool {
        self.ino == other.ino && self.ctime_ns == other.ctime_ns
    }
}

/// A chunk stored in the index.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChunk {
    /// Document id (FTS5 rowid, vector key).
    pub id: i64,
    /// Path in the workspace.
    pub path: String,
    /// First line.
    pub line_start: u32,
    /// Last line.
    pub line_end: u32,
    /// Headings above it.
    pub heading: String,
    /// The text.
    pub content: String,
}

/// The SQLite half of a workspace's index.
pub struct IndexDb {
    conn: Connection,
    /// `conn`'s text scoring (its documents' lengths).
    bm25: Mutex<Bm25>,
    /// A second connection to the same database: a large text search scores half of the
    /// documents on it, on another core (a connection serves one thread at a time; WAL lets
    /// both read at once). Only text searches use it, with `bm25`'s lock held.
    helper: Mutex<(Connection, Bm25)>,
    /// From how many document ids on a text search is split in two.
    split_from: i64,
    workspace: String,
    batch: Batch,
}

/// The indexer's batch transaction on an [`IndexDb`]'s connection ([`IndexDb::batch`]).
#[derive(Default)]
struct Batch {
    /// Whether the connection holds it open.
    open: bool,
    /// Whether one was rolled back since [`IndexDb::take_lost_batch`] last asked.
    lost: bool,
}

impl Batch {
    /// Ends a batch whose write or commit failed: rolls back what it holds (SQLite may have
    /// done so already), so that no file is left half written, and marks it lost.
    fn abandon(&mut self, conn: &Connection) {
        self.open = false;
        self.lost = true;
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
}

/// `files.skipped` of a file whose chunks are indexed for text but have no vectors yet (the
/// embedder was unavailable); the others say why a file has no chunks (`binary`, `too_large`).
pub const UNEMBEDDED: &str = "unembedded";

/// How many text hits the first page of a text search reads (then four times more per page).
const FIRST_TEXT_PAGE: i64 = 64;

/// Below this span of document ids a text search reads its first page on one connection: the
/// second thread costs more than the half of the scoring it would save.
const SPLIT_FROM: i64 = 8192;

/// The statements of a text search: all matches, those up to an id, those after it.
/// (`clawfs_bm25` is FTS5's `bm25()` with documents' lengths in memory: [`rank`]. The order is
/// by the result column, `2`: naming the function again calls it twice per match.)
const TEXT_ALL: &str = "SELECT rowid, clawfs_bm25(documents) FROM documents
     WHERE documents MATCH ?1 ORDER BY 2, rowid LIMIT ?2 OFFSET ?3";
const TEXT_UP_TO: &str = "SELECT rowid, clawfs_bm25(documents) FROM documents
     WHERE documents MATCH ?1 AND rowid <= ?2 ORDER BY 2, rowid LIMIT ?3";
const TEXT_AFTER: &str = "SELECT rowid, clawfs_bm25(documents) FROM documents
     WHERE documents MATCH ?1 AND rowid > ?2 ORDER BY 2, rowid LIMIT ?3";

/// The schema below; a database of another version is rebuilt.
const SCHEMA_VERSION: i64 = 1;

/// The index's tables (P1.4 §4.2), their names prefixed by `p`: the index itself uses none, a
/// snapshot's copy `index_`.
fn schema(p: &str) -> String {
    format!(
        "
CREATE TABLE IF NOT EXISTS {p}metadata (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS {p}documents USING fts5(
    workspace_id UNINDEXED, content, metadata UNINDEXED, tokenize = 'porter unicode61');
CREATE TABLE IF NOT EXISTS {p}vectors (
    id INTEGER PRIMARY KEY, document_id INTEGER NOT NULL, embedding BLOB NOT NULL,
    created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {p}chunks (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL, line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL, heading TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS {p}chunks_by_path ON {p}chunks(path);
CREATE TABLE IF NOT EXISTS {p}files (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, skipped TEXT);
"
    )
}

/// The file of a workspace's index database in its index folder.
pub const DB_FILE: &str = "index.db";

/// Copies the index database at `src` into `conn`'s tables prefixed by `prefix` (created), in
/// one read transaction of `src`, so the copy is the index at one moment while the indexer
/// goes on. With `keep`, only those files' rows are copied, and the full-text index is built
/// from their text alone: nothing of another file is left in it, not even a word.
///
/// `conn` must be inside a transaction; it is committed after the copy and a new one begun
/// (detaching `src` needs the transaction done).
pub fn copy_index(
    conn: &Connection,
    src: &Path,
    prefix: &str,
    keep: Option<&[(String, FileStamp)]>,
) -> Result<(), SearchError> {
    let src = src
        .to_str()
        .ok_or_else(|| SearchError::Corrupt(format!("{}: not UTF-8", src.display())))?;
    // A URI, so the source is opened read-only; '?' and '#' in a path would end it.
    let uri = format!(
        "file:{}?mode=ro",
        src.replace('%', "%25")
            .replace('?', "%3f")
            .replace('#', "%23")
    );
    conn.execute("ATTACH DATABASE ?1 AS idx", [uri])?;
    let p = prefix;
    let copy = || -> Result<(), SearchError> {
        conn.execute_batch(&schema(p))?;
        // An index still being created has no tables yet: its copy is empty.
        let version: i64 = conn.query_row("PRAGMA idx.user_version", [], |r| r.get(0))?;
        if version == 0 {
            return Ok(());
        }
        let Some(files) = keep else {
            conn.execute_batch(&format!(
                "INSERT INTO {p}metadata SELECT * FROM idx.metadata;
                 INSERT INTO {p}files SELECT * FROM idx.files;
                 INSERT INTO {p}chunks SELECT * FROM idx.chunks;
                 INSERT INTO {p}vectors SELECT * FROM idx.vectors;
                 INSERT INTO {p}documents (rowid, workspace_id, content, metadata)
                     SELECT rowid, workspace_id, content, metadata FROM idx.documents;"
            ))?;
            return Ok(());
        };
        conn.execute_batch(
            "CREATE TEMP TABLE keep (path TEXT PRIMARY KEY, ino INTEGER, ctime_ns INTEGER);
             CREATE TEMP TABLE ids (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);",
        )?;
        {
            let mut st = conn.prepare("INSERT OR IGNORE INTO temp.keep VALUES (?1, ?2, ?3)")?;
            for (path, stamp) in files {
                st.execute(params![path, stamp.ino as i64, stamp.ctime_ns])?;
            }
        }
        // Only the files as they were checked (a file swapped in since is not the one the
        // caller may read), numbered afresh so that ids do not count the rows left out, and
        // without the index's update counter.
        conn.execute_batch(&format!(
            "INSERT INTO {p}files SELECT f.* FROM idx.files f
                 JOIN temp.keep k ON k.path = f.path AND k.ino = f.ino AND k.ctime_ns = f.ctime_ns;
             INSERT INTO temp.ids (old, new)
                 SELECT id, row_number() OVER (ORDER BY id) FROM idx.chunks
                 WHERE path IN (SELECT path FROM {p}files);
             INSERT INTO {p}chunks
                 SELECT i.new, c.path, c.line_start, c.line_end, c.heading
                 FROM idx.chunks c JOIN temp.ids i ON i.old = c.id;
             INSERT INTO {p}vectors
                 SELECT i.new, i.new, v.embedding, v.created_at
                 FROM idx.vectors v JOIN temp.ids i ON i.old = v.id;
             INSERT INTO {p}documents (rowid, workspace_id, content, metadata)
                 SELECT i.new, d.workspace_id, d.content, d.metadata
                 FROM idx.documents d JOIN temp.ids i ON i.old = d.rowid;
             INSERT INTO {p}metadata SELECT * FROM idx.metadata WHERE key != 'generation';
             DROP TABLE temp.keep; DROP TABLE temp.ids;"
        ))?;
        Ok(())
    };
    let copied = copy();
    conn.execute_batch("COMMIT; DETACH DATABASE idx; BEGIN;")?;
    copied
}

/// Writes a self-contained copy of the index database at `src` to the new file `dest`,
/// holding only the files in `keep`, as stamped: what a caller may read of the index, for
/// `sqlite3`.
pub fn write_view(
    src: &Path,
    dest: &Path,
    keep: &[(String, FileStamp)],
) -> Result<(), SearchError> {
    let conn = Connection::open(dest)?;
    // Nothing to recover if this fails half way: the file is thrown away.
    conn.pragma_update(None, "journal_mode", "OFF")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.execute_batch("BEGIN;")?;
    copy_index(&conn, src, "", Some(keep))?;
    conn.execute_batch("COMMIT;")?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    conn.close().map_err(|(_, e)| SearchError::Db(e))?;
    Ok(())
}

impl IndexDb {
    /// Opens (creating) the database at `path` for `workspace`, with the P1.4 §9.1 pragmas.
    pub fn open(path: &Path, workspace: &str) -> Result<IndexDb, SearchError> {
        let conn = Self::connect(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let tables: i64 = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )?;
        if tables > 0 && version != SCHEMA_VERSION {
            return Err(SearchError::Corrupt(format!(
                "{}: schema version {version}, expected {SCHEMA_VERSION}",
                path.display()
            )));
        }
        // One transaction: a reader (a snapshot copying the index while the daemon creates
        // it) sees every table or none.
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; {} {} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;",
            schema(""),
            rank::change_log()
        ))?;
        // Readable by the daemon alone, whatever its umask.
        for ext in ["", "-wal", "-shm"] {
            let f = std::path::PathBuf::from(format!("{}{ext}", path.display()));
            let _ =
                std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600));
        }
        // A database that is not ours, or damaged, fails here rather than at the first query.
        let ok: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if ok != "ok" {
            return Err(SearchError::Corrupt(format!("{}: {ok}", path.display())));
        }
        let helper = Self::connect(path)?;
        let helper_bm25 = Bm25::register(&helper)?;
        Ok(IndexDb {
            bm25: Mutex::new(Bm25::register(&conn)?),
            conn,
            helper: Mutex::new((helper, helper_bm25)),
            split_from: match std::thread::available_parallelism().map_or(1, |n| n.get()) {
                1 => i64::MAX,
                _ => SPLIT_FROM,
            },
            workspace: workspace.to_string(),
            batch: Batch::default(),
        })
    }

    /// Opens the indexer's batch transaction unless it is open: the files indexed until
    /// [`IndexDb::settle`] are committed together. One transaction per file wrote each file's
    /// share of the text index's pages again, about 17 pages of WAL for a 5 kB file, which
    /// competed with the agents' own writes for the disk.
    pub(super) fn batch(&mut self) -> Result<(), SearchError> {
        if !self.batch.open {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            self.batch.open = true;
        }
        Ok(())
    }

    /// Commits the batch transaction, if one is open, before anything else reads or writes:
    /// searches and the helper connection see only committed files. A commit that fails is
    /// rolled back and the batch marked lost ([`IndexDb::take_lost_batch`]).
    pub(super) fn settle(&mut self) -> Result<(), SearchError> {
        if !self.batch.open {
            return Ok(());
        }
        match self.conn.execute_batch("COMMIT") {
            Ok(()) => {
                self.batch.open = false;
                Ok(())
            }
            Err(e) => {
                self.batch.abandon(&self.conn);
                Err(e.into())
            }
        }
    }

    /// Whether a batch was rolled back (a failed write or commit) since the last call: its
    /// files are no longer in the index, and the workspace must be compared with it again.
    pub(super) fn take_lost_batch(&mut self) -> bool {
        std::mem::take(&mut self.batch.lost)
    }

    /// A connection to the database with the settings of every one (P1.4 §9.1).
    fn connect(path: &Path) -> Result<Connection, SearchError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "mmap_size", 256i64 << 20)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(conn)
    }

    /// Whether a large text search scores its two halves at once.
    pub fn split_text_search(&mut self, on: bool) {
        self.split_from = match on {
            true => SPLIT_FROM,
            false => i64::MAX,
        };
    }

    /// Whether text searches reuse the phrases' document counts of earlier ones while the
    /// index is unchanged (the default).
    pub fn remember_phrase_counts(&mut self, on: bool) {
        self.bm25
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .remember_phrase_counts(on);
        let helper = self
            .helper
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        helper.1.remember_phrase_counts(on);
    }

    /// The workspace it indexes.
    pub(super) fn workspace(&self) -> &str {
        &self.workspace
    }

    /// A transaction on the database.
    pub(super) fn transaction(&mut self) -> Result<rusqlite::Transaction<'_>, SearchError> {
        Ok(self.conn.transaction()?)
    }

    /// The connection, for queries of the modules beside this one.
    pub(super) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// A metadata value.
    pub fn meta(&self, key: &str) -> Result<Option<String>, SearchError> {
        Ok(self
            .conn
            .query_row("SELECT value FROM metadata WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// Sets a metadata value.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<(), SearchError> {
        put_meta(&self.conn, key, value)
    }

    /// Empties the index (a new embedder or dimension), keeping the schema.
    pub fn clear(&mut self) -> Result<(), SearchError> {
        let tx = self.conn.savepoint()?;
        tx.execute_batch(
            "DELETE FROM documents; DELETE FROM vectors; DELETE FROM chunks; DELETE FROM files;
             DELETE FROM text_changes;",
        )?;
        bump_generation(&tx)?;
        tx.commit()?;
        Ok(())
    }

    /// What was indexed of `path`.
    pub fn stamp(&self, path: &str) -> Result<Option<FileStamp>, SearchError> {
        Ok(self.indexed(path)?.map(|(stamp, _)| stamp))
    }

    /// What was indexed of `path`, and why it has no chunks or vectors (`files.skipped`).
    fn indexed(&self, path: &str) -> Result<Option<(FileStamp, Option<String>)>, SearchError> {
        Ok(self
            .conn
            .query_row(
                "SELECT size, mtime_ns, ino, ctime_ns, skipped FROM files WHERE path = ?1",
                [path],
                |r| {
                    let stamp = FileStamp {
                        size: r.get::<_, i64>(0)? as u64,
                        mtime_ns: r.get(1)?,
                        ino: r.get::<_, i64>(2)? as u64,
                        ctime_ns: r.get(3)?,
                    };
                    Ok((stamp, r.get(4)?))
                },
            )
            .optional()?)
    }

    /// Whether `path` is indexed as `stamp` says and completely: a file indexed while the
    /// embedder was unavailable has chunks but no vectors yet, and is not.
    pub fn is_current(&self, path: &str, stamp: &FileStamp) -> Result<bool, SearchError> {
        Ok(self
            .indexed(path)?
            .is_some_and(|(s, skipped)| s == *stamp && skipped.as_deref() != Some(UNEMBEDDED)))
    }

    /// How many files wait for their vectors (indexed while the embedder was unavailable).
    pub fn unembedded(&self) -> Result<u64, SearchError> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM files WHERE skipped = ?1",
            [UNEMBEDDED],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    /// Every indexed file, with the stamp it was indexed at.
    pub fn files(&self) -> Result<Vec<(String, FileStamp)>, SearchError> {
        let mut st = self
            .conn
            .prepare("SELECT path, size, mtime_ns, ino, ctime_ns FROM files")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                FileStamp {
                    size: r.get::<_, i64>(1)? as u64,
                    mtime_ns: r.get(2)?,
                    ino: r.get::<_, i64>(3)? as u64,
                    ctime_ns: r.get(4)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every indexed path.
    pub fn paths(&self) -> Result<Vec<String>, SearchError> {
        let mut st = self.conn.prepare("SELECT path FROM files")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Replaces what the index holds of `path` with `chunks` and their `vectors`, in one
    /// transaction; returns the ids removed and the ids added (for the HNSW graph).
    pub fn replace_file(
        &mut self,
        path: &str,
        stamp: FileStamp,
        skipped: Option<&str>,
        chunks: &[Chunk],
        vectors: &[Vec<f32>],
        model: &str,
    ) -> Result<(Vec<i64>, Vec<i64>), SearchError> {
        let workspace = &self.workspace;
        write(&mut self.conn, &mut self.batch, |tx| {
            let removed = remove_in(tx, path)?;
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let mut added = Vec::with_capacity(chunks.len());
            for (i, c) in chunks.iter().enumerate() {
                let meta = serde_json::json!({
                    "path": path,
                    "line_start": c.line_start,
                    "line_end": c.line_end,
                    "heading": c.heading,
                    "content_type": if path.ends_with(".md") { "text/markdown" } else { "text/plain" },
                    "embedding_model": model,
                    "embedding_dimension": vectors.get(i).map_or(0, Vec::len),
                });
                added.push(insert_chunk(
                    tx,
                    workspace,
                    &ChunkRow {
                        path,
                        line_start: c.line_start,
                        line_end: c.line_end,
                        heading: &c.heading,
                        text: &indexed_text(c),
                        metadata: &meta,
                    },
                    vectors.get(i).map(|v| (v.as_slice(), now.as_str())),
                )?);
            }
            upsert_file(tx, path, stamp, skipped)?;
            bump_generation(tx)?;
            Ok((removed, added))
        })
    }

    /// Forgets `path` (and, with `prefix`, everything under it); returns the ids removed.
    pub fn remove_file(&mut self, path: &str, prefix: bool) -> Result<Vec<i64>, SearchError> {
        write(&mut self.conn, &mut self.batch, |tx| {
            let mut removed = remove_in(tx, path)?;
            tx.execute("DELETE FROM files WHERE path = ?1", [path])?;
            if prefix {
                let below: Vec<String> = {
                    let mut st =
                        tx.prepare("SELECT path FROM files WHERE substr(path, 1, ?2) = ?1")?;
                    let pat = format!("{path}/");
                    let rows = st.query_map(params![pat, pat.len() as i64], |r| r.get(0))?;
                    rows.collect::<Result<_, _>>()?
                };
                for p in below {
                    removed.extend(remove_in(tx, &p)?);
                    tx.execute("DELETE FROM files WHERE path = ?1", [&p])?;
                }
            }
            bump_generation(tx)?;
            Ok(removed)
        })
    }

    /// Text search: chunks matching every word of `query`, best BM25 first (higher is better
    /// here; FTS5's own is negative), handed to `each` until it returns false.
    ///
    /// Read in pages of growing size: with a LIMIT, SQLite keeps only the best rows while FTS5
    /// scores the matches instead of sorting all of them, and most queries end within the first
    /// page. Scoring is most of a search's time (FTS5's BM25 reads each match's positions and
    /// size), so in a large index the first page is scored in two halves of the document ids
    /// at once. A later page scores the matches again, which only a caller that skips most hits
    /// (unreadable files) pays.
    pub fn text_search_each(
        &self,
        query: &str,
        each: &mut dyn FnMut(i64, f64) -> Result<bool, SearchError>,
    ) -> Result<(), SearchError> {
        let fts = fts_query(query);
        if fts.is_empty() {
            // Only punctuation: no word to look for.
            return Ok(());
        }
        let mut bm25 = self.bm25.lock().unwrap_or_else(PoisonError::into_inner);
        bm25.run(&self.conn, |conn| {
            let (first, complete) = self.first_text_page(conn, &fts)?;
            for (id, rank) in first {
                if !each(id, -rank)? {
                    return Ok(());
                }
            }
            if complete {
                return Ok(());
            }
            let mut st = conn.prepare_cached(TEXT_ALL)?;
            let (mut offset, mut page) = (FIRST_TEXT_PAGE, FIRST_TEXT_PAGE * 4);
            loop {
                let mut rows = st.query(params![fts, page, offset])?;
                let mut read = 0;
                while let Some(r) = rows.next()? {
                    read += 1;
                    if !each(r.get(0)?, -r.get::<_, f64>(1)?)? {
                        return Ok(());
                    }
                }
                if read < page {
                    return Ok(());
                }
                offset += page;
                page = page.saturating_mul(4);
            }
        })
    }

    /// The best [`FIRST_TEXT_PAGE`] matches of `fts` as (id, FTS5 rank), best first, and
    /// whether they are all the matches, read on `conn` (`self.conn` in a transaction).
    /// Split in two, each half's best page is read at once, the upper half on the helper
    /// connection; the global best page is the best of both (each of its rows is in its
    /// half's best page).
    fn first_text_page(
        &self,
        conn: &Connection,
        fts: &str,
    ) -> Result<(Vec<(i64, f64)>, bool), SearchError> {
        let page = FIRST_TEXT_PAGE;
        let (lo, hi): (Option<i64>, Option<i64>) = conn
            // Two subqueries: SQLite reads a lone min() or max() off the index, both at once
            // by scanning every row.
            .prepare_cached("SELECT (SELECT min(id) FROM chunks), (SELECT max(id) FROM chunks)")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let rows = |conn: &Connection, sql: &str, args: &[&dyn rusqlite::ToSql]| {
            let mut st = conn.prepare_cached(sql)?;
            let got = st
                .query_map(args, |r| Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, SearchError>(got)
        };
        let mid = match (lo, hi) {
            (Some(lo), Some(hi)) if hi - lo >= self.split_from => lo + (hi - lo) / 2,
            _ => {
                let got = rows(conn, TEXT_ALL, params![fts, page, 0])?;
                let complete = (got.len() as i64) < page;
                return Ok((got, complete));
            }
        };
        let (helper, rows) = (&self.helper, &rows);
        let (low, high) = std::thread::scope(|s| {
            let high = s.spawn(move || {
                let mut helper = helper.lock().unwrap_or_else(PoisonError::into_inner);
                let (conn, bm25) = &mut *helper;
                bm25.run(conn, |conn| rows(conn, TEXT_AFTER, params![fts, mid, page]))
            });
            let low = rows(conn, TEXT_UP_TO, params![fts, mid, page]);
            let high = high.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            (low, high)
        });
        let (low, high) = (low?, high?);
        // Complete only if both halves are, and the best page of both holds all they found.
        let complete = (low.len() as i64) < page
            && (high.len() as i64) < page
            && ((low.len() + high.len()) as i64) <= page;
        let mut got = low;
        got.extend(high);
        got.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        got.truncate(page as usize);
        Ok((got, complete))
    }

    /// The chunk `id`.
    pub fn chunk(&self, id: i64) -> Result<Option<StoredChunk>, SearchError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT c.path, c.line_start, c.line_end, c.heading, d.content
                 FROM chunks c JOIN documents d ON d.rowid = c.id WHERE c.id = ?1",
            )?
            .query_row([id], |r| {
                Ok(StoredChunk {
                    id,
                    path: r.get(0)?,
                    line_start: r.get(1)?,
                    line_end: r.get(2)?,
                    heading: r.get(3)?,
                    content: r.get(4)?,
                })
            })
            .optional()?)
    }

    /// Every stored vector, for rebuilding the HNSW graph.
    pub fn all_vectors(&self) -> Result<Vec<(i64, Vec<f32>)>, SearchError> {
        let mut st = self.conn.prepare("SELECT id, embedding FROM vectors")?;
        let rows = st.query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, from_blob(&r.get::<_, Vec<u8>>(1)?)))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How many chunks and files the index holds.
    pub fn counts(&self) -> Result<(u64, u64), SearchError> {
        let chunks: i64 = self
            .conn
            .query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))?;
        let files: i64 = self
            .conn
            .query_row("SELECT count(*) FROM files", [], |r| r.get(0))?;
        Ok((chunks as u64, files as u64))
    }
}

/// Runs the writes `f` as one unit: in their own savepoint, or, while the indexer's batch is
/// open, straight in its transaction. A savepoint per file inside the batch would end FTS5's
/// pending terms at each file (it flushes them at every savepoint), which is the cost the batch
/// is there to save. A failure in the batch rolls the whole batch back, so that no file is left
/// half written, and marks it lost: the indexer then compares the workspace with its index again.
fn write<T>(
    conn: &mut Connection,
    batch: &mut Batch,
    f: impl FnOnce(&Connection) -> Result<T, SearchError>,
) -> Result<T, SearchError> {
    if batch.open {
        return f(conn).inspect_err(|_| batch.abandon(conn));
    }
    let sp = conn.savepoint()?;
    let out = f(&sp)?;
    sp.commit()?;
    Ok(out)
}

/// Counts changes: the graph saved beside the database is good only for the generation it was
/// saved at.
pub(super) fn bump_generation(tx: &Connection) -> Result<(), SearchError> {
    tx.execute(
        "INSERT INTO metadata (key, value) VALUES ('generation', '1')
         ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)",
        [],
    )?;
    Ok(())
}

/// Sets a metadata value through `conn` (a transaction derefs to one).
pub(super) fn put_meta(conn: &Connection, key: &str, value: &str) -> Result<(), SearchError> {
    conn.prepare_cached(
        "INSERT INTO metadata (key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// One chunk as its rows hold it.
pub(super) struct ChunkRow<'a> {
    pub path: &'a str,
    pub line_start: u32,
    pub line_end: u32,
    pub heading: &'a str,
    /// What FTS5 indexes.
    pub text: &'a str,
    /// `documents.metadata`.
    pub metadata: &'a serde_json::Value,
}

/// Writes the `documents`, `chunks` and (given a vector and its creation time) `vectors` rows
/// of one chunk; returns its id.
pub(super) fn insert_chunk(
    tx: &Connection,
    workspace: &str,
    c: &ChunkRow<'_>,
    vector: Option<(&[f32], &str)>,
) -> Result<i64, SearchError> {
    tx.prepare_cached(
        "INSERT INTO documents (workspace_id, content, metadata) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![workspace, c.text, c.metadata.to_string()])?;
    let id = tx.last_insert_rowid();
    tx.prepare_cached(
        "INSERT INTO chunks (id, path, line_start, line_end, heading) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id, c.path, c.line_start, c.line_end, c.heading])?;
    if let Some((v, created)) = vector {
        tx.prepare_cached(
            "INSERT INTO vectors (id, document_id, embedding, created_at) VALUES (?1, ?1, ?2, ?3)",
        )?
        .execute(params![id, to_blob(v), created])?;
    }
    Ok(id)
}

/// Records what was indexed of the file `path`.
pub(super) fn upsert_file(
    tx: &Connection,
    path: &str,
    stamp: FileStamp,
    skipped: Option<&str>,
) -> Result<(), SearchError> {
    tx.prepare_cached(
        "INSERT INTO files (path, size, mtime_ns, ino, ctime_ns, skipped)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT(path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns,
             ino = excluded.ino, ctime_ns = excluded.ctime_ns, skipped = excluded.skipped",
    )?
    .execute(params![
        path,
        stamp.size as i64,
        stamp.mtime_ns,
        stamp.ino as i64,
        stamp.ctime_ns,
        skipped
    ])?;
    Ok(())
}

pub(super) fn remove_in(tx: &Connection, path: &str) -> Result<Vec<i64>, SearchError> {
    let ids: Vec<i64> = {
        let mut st = tx.prepare_cached("SELECT id FROM chunks WHERE path = ?1")?;
        let rows = st.query_map([path], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for id in &ids {
        tx.execute("DELETE FROM documents WHERE rowid = ?1", [id])?;
        tx.execute("DELETE FROM vectors WHERE id = ?1", [id])?;
        tx.execute("DELETE FROM chunks WHERE id = ?1", [id])?;
    }
    Ok(ids)
}

/// What is indexed of a chunk, by FTS5 and the embedder alike: its headings (so a section is
/// found by its title) and text.
pub(super) fn indexed_text(c: &Chunk) -> String {
    match c.heading.is_empty() {
        true => c.text.clone(),
        false => format!("{}\n{}", c.heading, c.text),
    }
}

/// A user's words as an FTS5 query: every word must appear (any order), each quoted so that
/// FTS5's operators and punctuation in the query are taken literally.
pub fn fts_query(query: &str) -> String {
    query
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" ")
}

fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn from_blob(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

/// Where a workspace's index lives in the store.
pub fn index_dir(store_private: &Path, workspace: &str) -> PathBuf {
    store_private.join("index").join(workspace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp() -> FileStamp {
        FileStamp {
            size: 1,
            mtime_ns: 1,
            ino: 1,
            ctime_ns: 1,
        }
    }

    /// An index the daemon is still creating (a database without tables yet) is copied as
    /// an empty index, not refused.
    #[test]
    fn an_index_being_created_copies_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join(DB_FILE);
        Connection::open(&src)
            .unwrap()
            .pragma_update(None, "journal_mode", "WAL")
            .unwrap();
        let conn = Connection::open(dir.path().join("copy.db")).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        copy_index(&conn, &src, "index_", None).unwrap();
        let chunks: i64 = conn
            .query_row("SELECT count(*) FROM index_chunks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(chunks, 0);
    }

    /// A caller that skips most hits reads past the first page: every match comes exactly once,
    /// best first.
    #[test]
    fn text_search_pages_through_every_match_once() {
        pages_through_every_match_once(SPLIT_FROM);
    }

    /// The same with the first page scored in two halves: the same hits in the same order.
    #[test]
    fn split_text_search_finds_what_one_pass_finds() {
        assert_eq!(
            pages_through_every_match_once(1),
            pages_through_every_match_once(SPLIT_FROM)
        );
    }

    /// Files indexed in a batch are one transaction: another connection sees none of them
    /// until the batch settles, then all; the text index matches them all, scored as FTS5
    /// scores them.
    #[test]
    fn a_batch_commits_its_files_together() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        let mut db = IndexDb::open(&path, "ws").unwrap();
        let other = IndexDb::connect(&path).unwrap();
        let files = |c: &Connection| -> i64 {
            c.query_row("SELECT count(*) FROM files", [], |r| r.get(0))
                .unwrap()
        };
        db.batch().unwrap();
        for i in 0..50 {
            put(&mut db, i, 1 + i % 3, 2);
        }
        db.remove_file("f7.md", false).unwrap();
        assert_eq!(files(&other), 0, "seen before the batch settled");
        db.settle().unwrap();
        assert_eq!(files(&other), 49);
        assert!(db.conn.is_autocommit());
        assert_scores_are_bm25(&db);
        // Without a batch, each file commits at once.
        put(&mut db, 99, 1, 0);
        assert_eq!(files(&other), 50);
    }

    /// A write that fails inside a batch rolls the whole batch back: no file is left half
    /// indexed, and the next write works.
    #[test]
    fn a_failed_write_rolls_its_batch_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = IndexDb::open(&dir.path().join(DB_FILE), "ws").unwrap();
        put(&mut db, 1, 1, 0);
        db.batch().unwrap();
        put(&mut db, 2, 1, 0);
        let failed = write(&mut db.conn, &mut db.batch, |tx| {
            tx.execute("DELETE FROM files", [])?;
            tx.execute("INSERT INTO no_such_table VALUES (1)", [])?;
            Ok(())
        });
        assert!(failed.is_err());
        assert!(!db.batch.open && db.conn.is_autocommit());
        assert!(db.take_lost_batch(), "the indexer is told to compare again");
        assert!(!db.take_lost_batch());
        db.settle().unwrap();
        let paths: Vec<String> = db.paths().unwrap().into_iter().collect();
        assert_eq!(paths, ["f1.md"]);
        put(&mut db, 3, 1, 0);
        assert_eq!(db.paths().unwrap().len(), 2);
    }

    /// Writes `f{i}.md` with `n` repeats of the word and `extra` other words.
    fn put(db: &mut IndexDb, i: usize, n: usize, extra: usize) {
        let chunk = Chunk {
            line_start: 1,
            line_end: 1,
            heading: String::new(),
            text: format!("{} {}", "harbour ".repeat(n), "filler ".repeat(extra)),
        };
        db.replace_file(&format!("f{i}.md"), stamp(), None, &[chunk], &[], "m")
            .unwrap();
    }

    /// Text search's scores (with lengths from memory) are FTS5's own `bm25()`, exactly,
    /// whatever changed in between: on `db`, on another connection, in a burst longer than the
    /// change log keeps, or all at once.
    fn assert_scores_are_bm25(db: &IndexDb) {
        let mut ours = Vec::new();
        db.text_search_each("harbour", &mut |id, score| {
            ours.push((id, score));
            Ok(true)
        })
        .unwrap();
        let fts5: Vec<(i64, f64)> = db
            .conn
            .prepare("SELECT rowid, -bm25(documents) FROM documents WHERE documents MATCH 'harbour' ORDER BY bm25(documents), rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(ours.len(), fts5.len());
        for ((id, a), (fid, b)) in ours.iter().zip(&fts5) {
            assert_eq!(id, fid, "{ours:?}\n{fts5:?}");
            assert!((a - b).abs() < 1e-9, "{id}: {a} vs bm25 {b}");
        }
    }

    #[test]
    fn text_scores_are_bm25_through_every_kind_of_change() {
        for split_from in [1, SPLIT_FROM] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(DB_FILE);
            let mut ours = IndexDb::open(&path, "ws").unwrap();
            ours.split_from = split_from;
            let mut other = IndexDb::open(&path, "ws").unwrap();
            for i in 0..40 {
                put(&mut ours, i, i % 5 + 1, i % 11);
            }
            assert_scores_are_bm25(&ours);
            // Rewritten in place: the last file's chunk gets its id back, with a new length.
            put(&mut ours, 39, 2, 30);
            put(&mut ours, 3, 1, 50);
            assert_scores_are_bm25(&ours);
            // Changed on another connection (the log is what tells).
            put(&mut other, 39, 4, 2);
            other.remove_file("f5.md", false).unwrap();
            put(&mut other, 40, 3, 9);
            assert_scores_are_bm25(&ours);
            // More changes than the log keeps, after the newest file's chunk got its id back
            // with a new length: read afresh.
            put(&mut other, 40, 1, 70);
            for round in 0..((rank::LOG_KEPT + rank::LOG_PRUNE_EVERY) as usize) {
                put(&mut other, 100 + round, round % 3 + 1, round % 13);
            }
            assert_scores_are_bm25(&ours);
            // Emptied and filled again.
            other.clear().unwrap();
            for i in 0..5 {
                put(&mut other, i, 5 - i, i * 3);
            }
            assert_scores_are_bm25(&ours);
            assert_scores_are_bm25(&other);
        }
    }

    fn pages_through_every_match_once(split_from: i64) -> Vec<(i64, f64)> {
        let dir = tempfile::tempdir().unwrap();
        let mut db = IndexDb::open(&dir.path().join(DB_FILE), "ws").unwrap();
        db.split_from = split_from;
        let total = FIRST_TEXT_PAGE as usize * 6;
        for i in 0..total {
            // More repeats of the word make a better match: file i has i % 7 + 1 of them.
            let text = format!("{} filler text {i}", "harbour ".repeat(i % 7 + 1));
            let chunk = Chunk {
                line_start: 1,
                line_end: 1,
                heading: String::new(),
                text,
            };
            db.replace_file(&format!("f{i}.md"), stamp(), None, &[chunk], &[], "m")
                .unwrap();
        }
        let mut seen = Vec::new();
        db.text_search_each("harbour", &mut |id, score| {
            seen.push((id, score));
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen.len(), total);
        let ids: std::collections::HashSet<i64> = seen.iter().map(|s| s.0).collect();
        assert_eq!(ids.len(), total, "a hit came twice");
        assert!(seen.windows(2).all(|w| w[0].1 >= w[1].1), "not best first");

        let mut first = 0;
        db.text_search_each("harbour", &mut |_, _| {
            first += 1;
            Ok(first < 3)
        })
        .unwrap();
        assert_eq!(first, 3, "stops when the caller has enough");
        seen
    }
}
