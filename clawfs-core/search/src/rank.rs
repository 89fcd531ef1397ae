//! Text search's BM25: the score FTS5's own `bm25()` gives, with each document's length read
//! from memory instead of from FTS5's `docsize` table. That lookup, one B-tree search per
//! match, was most of a query's time: 13.3 ms with `bm25()` against 3.9 ms with this function
//! for a two-word query matching 12,000 of 100,000 documents.
//!
//! A connection registers the FTS5 auxiliary function `clawfs_bm25` and keeps the lengths of
//! the documents it has seen ([`Bm25`]). Triggers on `chunks` (every document has its chunk
//! row, written and deleted with it) log each id that changes in `text_changes`; before a
//! query, inside the query's own read transaction, the lengths catch up on the log since they
//! were last read, or are read afresh when the log no longer reaches back that far (it keeps
//! the last [`LOG_KEPT`] changes). A document whose length is not known is scored with FTS5's
//! own lookup, so every score is the one `bm25()` gives.
//!
//! A query's IDF needs how many documents hold each of its phrases, which FTS5 counts by walking
//! the phrase's whole list of documents (about a third of a two-word query's time on a corpus
//! where each word is in one document in eight). The counts are kept by phrase while the index
//! is unchanged: the catch-up that sees any change forgets them.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::ffi::{self, Fts5Context, Fts5ExtensionApi, Fts5PhraseIter};
use rusqlite::{Connection, OptionalExtension};

use super::SearchError;

/// How many changes `text_changes` keeps (pruned every [`LOG_PRUNE_EVERY`]).
pub(super) const LOG_KEPT: i64 = if cfg!(test) { 64 } else { 65_536 };
pub(super) const LOG_PRUNE_EVERY: i64 = if cfg!(test) { 16 } else { 4_096 };

/// Above this id, a document's length is left to FTS5 (the lengths are a vector by id).
const MAX_ID: i64 = 1 << 24;

/// How many phrases' document counts are kept before they are all forgotten.
const HITS_KEPT: usize = 4096;
/// The longest phrase (its key's bytes) whose count is kept: words are short, and a query of
/// one enormous word must not make the kept counts hold gigabytes.
const LONGEST_KEPT: usize = 256;

/// The change log and its triggers, in the live index only (a snapshot's copy is never
/// searched with these lengths).
pub(super) fn change_log() -> String {
    format!(
        "
CREATE TABLE IF NOT EXISTS text_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, id INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS text_added AFTER INSERT ON chunks
    BEGIN INSERT INTO text_changes (id) VALUES (new.id); END;
CREATE TRIGGER IF NOT EXISTS text_removed AFTER DELETE ON chunks
    BEGIN INSERT INTO text_changes (id) VALUES (old.id); END;
CREATE TRIGGER IF NOT EXISTS text_changes_pruned AFTER INSERT ON text_changes
    WHEN new.seq % {LOG_PRUNE_EVERY} = 0
    BEGIN DELETE FROM text_changes WHERE seq <= new.seq - {LOG_KEPT}; END;
"
    )
}

/// The name queries call the function by: `clawfs_bm25(documents)`, lower is better, as
/// `bm25()`'s.
pub(super) const FUNCTION: &str = "clawfs_bm25";

/// The lengths a query may read, by document id (0: not known), published to the function for
/// the length of one query on one connection, and the phrases' document counts, which hold
/// for as long as the lengths do.
#[derive(Default)]
struct Published {
    ptr: AtomicPtr<u32>,
    len: AtomicUsize,
    /// Documents holding each phrase, by the phrase's tokens ([`Row::phrase_key`]).
    hits: Mutex<HashMap<Vec<u8>, i64>>,
    /// Whether `hits` is used (the benchmark turns it off to compare).
    remember: AtomicBool,
}

impl Published {
    /// Whether a query is running with published lengths (so in the read transaction the
    /// lengths and the counts were caught up in).
    fn live(&self) -> bool {
        !self.ptr.load(Ordering::Acquire).is_null()
    }

    fn hits(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, i64>> {
        self.hits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The length of document `id`, if published and known.
    fn length(&self, id: i64) -> Option<u32> {
        let ptr = self.ptr.load(Ordering::Acquire);
        let len = self.len.load(Ordering::Acquire);
        let i = usize::try_from(id).ok().filter(|&i| i < len)?;
        if ptr.is_null() {
            return None;
        }
        // SAFETY: `ptr` and `len` describe the slice a `Publication` published, which it
        // borrows until it unpublishes (when dropped), and `i < len`. A connection runs one
        // query at a time on one thread, so no other publication overlaps.
        let n = unsafe { *ptr.add(i) };
        (n > 0).then_some(n)
    }
}

/// `lengths` published to the function until dropped (also when a query panics).
struct Publication<'a> {
    published: &'a Published,
    _lengths: std::marker::PhantomData<&'a [u32]>,
}

impl<'a> Publication<'a> {
    fn new(published: &'a Published, lengths: &'a [u32]) -> Publication<'a> {
        published.len.store(0, Ordering::Release);
        published
            .ptr
            .store(lengths.as_ptr().cast_mut(), Ordering::Release);
        published.len.store(lengths.len(), Ordering::Release);
        Publication {
            published,
            _lengths: std::marker::PhantomData,
        }
    }
}

impl Drop for Publication<'_> {
    fn drop(&mut self) {
        self.published.len.store(0, Ordering::Release);
        self.published.ptr.store(ptr::null_mut(), Ordering::Release);
    }
}

/// The lengths of one connection and the function registered on it.
pub(super) struct Bm25 {
    published: Arc<Published>,
    /// Token counts by document id (0: unknown).
    lengths: Vec<u32>,
    /// The last change of `text_changes` the lengths include; None before the first read.
    seq: Option<i64>,
}

impl Bm25 {
    /// Registers `clawfs_bm25` on `conn`.
    pub(super) fn register(conn: &Connection) -> Result<Bm25, SearchError> {
        let published = Arc::new(Published {
            remember: AtomicBool::new(true),
            ..Published::default()
        });
        let api = fts5_api(conn)?;
        let user = Arc::into_raw(Arc::clone(&published)) as *mut c_void;
        let name = std::ffi::CString::new(FUNCTION).expect("no NUL in the name");
        // SAFETY: `api` is the connection's live fts5_api (checked non-null); FTS5 copies the
        // name; `user` is an Arc reference that `release` gives back when the function is
        // dropped with the connection.
        let rc = unsafe {
            match (*api.as_ptr()).xCreateFunction {
                Some(create) => create(
                    api.as_ptr(),
                    name.as_ptr(),
                    user,
                    Some(clawfs_bm25),
                    Some(release),
                ),
                None => ffi::SQLITE_ERROR,
            }
        };
        if rc != ffi::SQLITE_OK {
            // SAFETY: FTS5 did not take the reference: it is ours to drop.
            drop(unsafe { Arc::from_raw(user as *const Published) });
            return Err(SearchError::Db(rusqlite::Error::SqliteFailure(
                ffi::Error::new(rc),
                Some(format!("registering {FUNCTION}")),
            )));
        }
        Ok(Bm25 {
            published,
            lengths: Vec::new(),
            seq: None,
        })
    }

    /// Whether queries reuse the phrases' document counts of earlier queries (the default).
    pub(super) fn remember_phrase_counts(&self, on: bool) {
        // The counts kept meanwhile stay right: every change still forgets them.
        self.published.remember.store(on, Ordering::Relaxed);
    }

    /// Runs `query` on `conn` (the connection this was registered on) in one read transaction,
    /// with the lengths caught up to what that transaction sees.
    pub(super) fn run<T>(
        &mut self,
        conn: &Connection,
        query: impl FnOnce(&Connection) -> Result<T, SearchError>,
    ) -> Result<T, SearchError> {
        let tx = conn.unchecked_transaction()?;
        self.catch_up(&tx)?;
        let out = {
            let _published = Publication::new(&self.published, &self.lengths);
            query(&tx)
        };
        tx.finish()?;
        out
    }

    /// Brings the lengths to the state the open transaction sees.
    fn catch_up(&mut self, conn: &Connection) -> Result<(), SearchError> {
        let last: i64 = conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'text_changes'",
                [],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0);
        if self.seq == Some(last) {
            return Ok(());
        }
        // A document came or went: any phrase's count may have moved.
        self.published.hits().clear();
        let oldest: Option<i64> =
            conn.query_row("SELECT min(seq) FROM text_changes", [], |r| r.get(0))?;
        match (self.seq, oldest) {
            (Some(seen), Some(oldest)) if oldest <= seen + 1 => {
                let mut st = conn.prepare_cached(
                    "SELECT c.id, d.sz FROM text_changes c
                     LEFT JOIN documents_docsize d ON d.id = c.id WHERE c.seq > ?1",
                )?;
                let mut rows = st.query([seen])?;
                while let Some(r) = rows.next()? {
                    let size: Option<Vec<u8>> = r.get(1)?;
                    self.set(r.get(0)?, size.map_or(0, |s| tokens(&s)));
                }
            }
            _ => {
                self.lengths.clear();
                let mut st = conn.prepare_cached("SELECT id, sz FROM documents_docsize")?;
                let mut rows = st.query([])?;
                while let Some(r) = rows.next()? {
                    self.set(r.get(0)?, tokens(&r.get::<_, Vec<u8>>(1)?));
                }
            }
        }
        self.seq = Some(last);
        Ok(())
    }

    fn set(&mut self, id: i64, tokens: u32) {
        let Ok(i) = usize::try_from(id) else { return };
        if id > MAX_ID {
            return;
        }
        if i >= self.lengths.len() {
            if tokens == 0 {
                return;
            }
            self.lengths.resize(i + 1, 0);
        }
        self.lengths[i] = tokens;
    }
}

/// The token count of a `docsize` record: one varint per column, summed (FTS5's `bm25()`
/// takes the length of the whole row).
fn tokens(record: &[u8]) -> u32 {
    let (mut total, mut value, mut shift) = (0u32, 0u32, 0u32);
    for &b in record {
        value |= u32::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
        if b & 0x80 != 0 {
            shift += 7;
        } else {
            total = total.saturating_add(value);
            (value, shift) = (0, 0);
        }
    }
    total
}

/// The connection's FTS5 API (`SELECT fts5(?1)` with a pointer bound, as FTS5 documents).
fn fts5_api(conn: &Connection) -> Result<NonNull<ffi::fts5_api>, SearchError> {
    let mut api: *mut ffi::fts5_api = ptr::null_mut();
    let failed = |rc| {
        SearchError::Db(rusqlite::Error::SqliteFailure(
            ffi::Error::new(rc),
            Some("reaching FTS5's API".into()),
        ))
    };
    // SAFETY: the statement is prepared, bound, stepped and finalized on the connection's own
    // handle, which `conn` keeps open; the bound pointer is `api`, alive across the step, and
    // the type name is a static C string as the pointer interface requires.
    unsafe {
        let db = conn.handle();
        let mut stmt = ptr::null_mut();
        let rc = ffi::sqlite3_prepare_v2(
            db,
            c"SELECT fts5(?1)".as_ptr(),
            -1,
            &mut stmt,
            ptr::null_mut(),
        );
        if rc != ffi::SQLITE_OK {
            return Err(failed(rc));
        }
        ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&mut api as *mut *mut ffi::fts5_api).cast(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        ffi::sqlite3_step(stmt);
        let rc = ffi::sqlite3_finalize(stmt);
        if rc != ffi::SQLITE_OK {
            return Err(failed(rc));
        }
    }
    NonNull::new(api).ok_or_else(|| failed(ffi::SQLITE_ERROR))
}

/// Gives back the function's reference to its [`Published`].
unsafe extern "C" fn release(user: *mut c_void) {
    // SAFETY: `user` is the `Arc::into_raw` that `register` handed to FTS5, released once.
    drop(unsafe { Arc::from_raw(user as *const Published) });
}

/// What a query computes once: each phrase's IDF and the average length, as `bm25()` does.
struct QueryStats {
    idf: Vec<f64>,
    avgdl: f64,
    /// Each phrase's count in the current row (reused from row to row).
    tf: Vec<f64>,
}

unsafe extern "C" fn drop_stats(p: *mut c_void) {
    // SAFETY: `p` is the `Box::into_raw` of `stats`, which FTS5 frees once.
    drop(unsafe { Box::from_raw(p as *mut QueryStats) });
}

/// The FTS5 calls the function makes, for the row the query is on.
struct Row<'a> {
    api: &'a Fts5ExtensionApi,
    fts: *mut Fts5Context,
}

macro_rules! call {
    ($row:expr, $f:ident $(, $arg:expr)*) => {
        match $row.api.$f {
            Some(f) => {
                // SAFETY: the function comes from the API FTS5 passed this call, and is called
                // with the context FTS5 passed, during the call.
                unsafe { f($row.fts $(, $arg)*) }
            }
            None => return Err(ffi::SQLITE_ERROR),
        }
    };
}

impl Row<'_> {
    /// The query's statistics, computed at its first row and kept by FTS5 as the query's aux
    /// data (which only this function, one row at a time, uses).
    fn stats(&self, published: &Published) -> Result<NonNull<QueryStats>, c_int> {
        let p = call!(self, xGetAuxdata, 0) as *mut QueryStats;
        if let Some(p) = NonNull::new(p) {
            return Ok(p);
        }
        let phrases = call!(self, xPhraseCount);
        let (mut rows, mut tokens) = (0i64, 0i64);
        check(call!(self, xRowCount, &mut rows))?;
        check(call!(self, xColumnTotalSize, -1, &mut tokens))?;
        let rows_f = rows.max(1) as f64;
        let mut idf = Vec::new();
        let live = published.live() && published.remember.load(Ordering::Relaxed);
        for phrase in 0..phrases {
            let key = match live {
                true => self.phrase_key(phrase)?,
                false => None,
            };
            let known = key.as_ref().and_then(|k| published.hits().get(k).copied());
            let hits = match known {
                Some(hits) => hits,
                None => {
                    let hits = self.documents_holding(phrase)?;
                    if let Some(key) = key {
                        let mut kept = published.hits();
                        if kept.len() >= HITS_KEPT {
                            kept.clear();
                        }
                        kept.insert(key, hits);
                    }
                    hits
                }
            };
            let x = ((rows_f - hits as f64 + 0.5) / (hits as f64 + 0.5)).ln();
            idf.push(if x <= 0.0 { 1e-6 } else { x });
        }
        let stats = Box::into_raw(Box::new(QueryStats {
            tf: vec![0.0; idf.len()],
            idf,
            avgdl: tokens as f64 / rows_f,
        }));
        check(call!(self, xSetAuxdata, stats.cast(), Some(drop_stats)))?;
        NonNull::new(stats).ok_or(ffi::SQLITE_NOMEM)
    }

    /// How many documents hold `phrase` (FTS5 walks its list of documents).
    fn documents_holding(&self, phrase: c_int) -> Result<i64, c_int> {
        let mut hits = 0i64;
        check(call!(
            self,
            xQueryPhrase,
            phrase,
            (&mut hits as *mut i64).cast(),
            Some(count_hit)
        ))?;
        Ok(hits)
    }

    /// `phrase` as the tokenizer produced it: each token's length and bytes. The queries this
    /// function serves are plain phrases ([`super::index::fts_query`]: no prefixes, columns or
    /// NEAR), so equal keys hold in the same documents. None where FTS5 cannot tell the tokens
    /// or the key would be longer than [`LONGEST_KEPT`].
    fn phrase_key(&self, phrase: c_int) -> Result<Option<Vec<u8>>, c_int> {
        if self.api.iVersion < 3 {
            return Ok(None);
        }
        let mut key = Vec::new();
        for token in 0..call!(self, xPhraseSize, phrase) {
            let (mut p, mut n) = (ptr::null(), 0);
            check(call!(self, xQueryToken, phrase, token, &mut p, &mut n))?;
            let Ok(len) = usize::try_from(n) else {
                return Ok(None);
            };
            if key.len() + 8 + len > LONGEST_KEPT {
                return Ok(None);
            }
            key.extend_from_slice(&(len as u64).to_le_bytes());
            if len > 0 {
                // SAFETY: FTS5 set `p` to a buffer of `n` bytes, valid during this call.
                key.extend_from_slice(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) });
            }
        }
        Ok(Some(key))
    }

    /// How many times `phrase` occurs in the row.
    fn count(&self, phrase: c_int) -> Result<f64, c_int> {
        let mut it = Fts5PhraseIter {
            a: ptr::null(),
            b: ptr::null(),
        };
        let (mut col, mut off) = (0, 0);
        check(call!(
            self,
            xPhraseFirst,
            phrase,
            &mut it,
            &mut col,
            &mut off
        ))?;
        let mut n = 0.0;
        while col >= 0 {
            n += 1.0;
            call!(self, xPhraseNext, &mut it, &mut col, &mut off);
        }
        Ok(n)
    }

    /// The row's length in tokens: from the published lengths, else FTS5's lookup.
    fn length(&self, published: &Published) -> Result<f64, c_int> {
        let id = call!(self, xRowid);
        if let Some(n) = published.length(id) {
            return Ok(f64::from(n));
        }
        let mut n = 0;
        check(call!(self, xColumnSize, -1, &mut n))?;
        Ok(f64::from(n))
    }

    /// BM25 of the row (k1 = 1.2, b = 0.75), negated as `bm25()`'s.
    fn score(&self, published: &Published) -> Result<f64, c_int> {
        const K1: f64 = 1.2;
        const B: f64 = 0.75;
        let mut stats = self.stats(published)?;
        // SAFETY: the query's aux data lives as long as the query, and nothing else touches it
        // while this row is scored (FTS5 calls the function for one row at a time).
        let stats = unsafe { stats.as_mut() };
        for (phrase, tf) in stats.tf.iter_mut().enumerate() {
            *tf = self.count(phrase as c_int)?;
        }
        let dl = self.length(published)?;
        let norm = K1 * (1.0 - B + B * dl / stats.avgdl);
        let score: f64 = stats
            .idf
            .iter()
            .zip(&stats.tf)
            .map(|(idf, tf)| idf * (tf * (K1 + 1.0)) / (tf + norm))
            .sum();
        Ok(-score)
    }
}

fn check(rc: c_int) -> Result<(), c_int> {
    match rc {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(rc),
    }
}

unsafe extern "C" fn count_hit(
    _: *const Fts5ExtensionApi,
    _: *mut Fts5Context,
    hits: *mut c_void,
) -> c_int {
    // SAFETY: `hits` is the i64 `Row::stats` passed to xQueryPhrase, alive during it.
    unsafe { *(hits as *mut i64) += 1 };
    ffi::SQLITE_OK
}

/// `clawfs_bm25(documents)`.
unsafe extern "C" fn clawfs_bm25(
    api: *const Fts5ExtensionApi,
    fts: *mut Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    _: c_int,
    _: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: FTS5 passes its API, valid for the call, and the user data given at
    // registration: a `Published` kept alive by the reference FTS5 holds.
    let (api, published) = unsafe {
        let api = &*api;
        let user = api.xUserData.map_or(ptr::null_mut(), |f| f(fts));
        (api, (user as *const Published).as_ref())
    };
    let result = match published {
        Some(published) => Row { api, fts }.score(published),
        None => Err(ffi::SQLITE_ERROR),
    };
    // SAFETY: `ctx` is the call's result context.
    unsafe {
        match result {
            Ok(score) => ffi::sqlite3_result_double(ctx, score),
            Err(rc) => ffi::sqlite3_result_error_code(ctx, rc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_docsize_record_is_the_sum_of_its_varints() {
        assert_eq!(tokens(&[0, 5, 0]), 5);
        assert_eq!(tokens(&[0x81, 0x01, 3]), 129 + 3);
        assert_eq!(tokens(&[]), 0);
        // A truncated or absurd record is not a panic.
        assert_eq!(tokens(&[0xff; 12]), 0);
    }
}
