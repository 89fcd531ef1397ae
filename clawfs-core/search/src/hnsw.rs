//! The HNSW graph over a workspace's vectors (usearch, cosine). It is a cache of the vectors in
//! SQLite: saved beside the database (temp file + rename), and rebuilt from SQLite when it is
//! missing, unreadable, of another dimension or older than the database.
//!
//! Inserting into the graph is most of what indexing a file costs (the distance computations of
//! the insert's search, at `ef_construction` candidates). A vector added one at a time therefore
//! waits beside the graph, searched exactly, until [`Hnsw::settle`] inserts it when the indexer
//! has a quiet moment: the insert then no longer competes with the writer whose files are being
//! indexed. At most [`MAX_WAITING_BYTES`] of vectors wait; past that they go into the graph at
//! once.
//!
//! The graph keeps only the leading components that are not zero in any of its vectors, in
//! steps of [`WIDTH_STEP`] (its width): the built-in model's 256 components of a 1,536-component
//! workspace are 256 wide, and each distance costs a sixth. Cosine similarity is the same over
//! the components kept, the others being zero. A vector wider than the graph ([`Hnsw::fits`]:
//! an imported embedding of another model) makes its owner rebuild the graph wider.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use super::SearchError;

/// The graph's parameters (`hnsw_params` in a workspace's `metadata.json`; P1.4 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct HnswParams {
    /// Links per node (8–64).
    pub m: usize,
    /// Candidates while inserting (100–1000).
    pub ef_construction: usize,
    /// Candidates while searching (10–200).
    pub ef_search: usize,
}

impl Default for HnswParams {
    fn default() -> HnswParams {
        HnswParams {
            m: 16,
            ef_construction: 200,
            ef_search: 50,
        }
    }
}

impl HnswParams {
    /// The parameters clamped into P1.4 §4.4's ranges.
    pub fn clamped(self) -> HnswParams {
        HnswParams {
            m: self.m.clamp(8, 64),
            ef_construction: self.ef_construction.clamp(100, 1000),
            ef_search: self.ef_search.clamp(10, 200),
        }
    }
}

/// The most the vectors waiting beside the graph may take (32,768 vectors of the built-in
/// model's 256 components): an exact search over them costs a few milliseconds.
pub const MAX_WAITING_BYTES: usize = 32 << 20;

/// How many waiting vectors [`Hnsw::settle`] inserts between two looks at `go_on`: tens of
/// milliseconds of work, so a search or a new change never waits long for it.
const SETTLE_SLICE: usize = 32;

/// The graph's width is a multiple of this (or the whole dimension).
pub const WIDTH_STEP: usize = 64;

/// An HNSW graph of `dim`-component vectors keyed by document id, of which it keeps the first
/// `width` components, and the vectors added since it was last settled.
pub struct Hnsw {
    index: Index,
    dim: usize,
    width: usize,
    waiting: Mutex<BTreeMap<i64, Vec<f32>>>,
}

/// The width a graph needs for `vectors` of `dim` components: up to their last component
/// that is not zero, rounded up to [`WIDTH_STEP`], at most `dim`, at least one step.
pub fn width_for<'a>(dim: usize, vectors: impl IntoIterator<Item = &'a [f32]>) -> usize {
    vectors
        .into_iter()
        .map(|v| v.iter().rposition(|x| *x != 0.0).map_or(0, |i| i + 1))
        .max()
        .unwrap_or(0)
        .max(1)
        .next_multiple_of(WIDTH_STEP)
        .min(dim)
}

fn err(
    what: &'static str,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> SearchError {
    SearchError::Hnsw {
        what,
        source: source.into(),
    }
}

impl Hnsw {
    /// An empty graph of `dim`-component vectors that keeps `width` of them (see
    /// [`width_for`]).
    pub fn new(dim: usize, width: usize, params: HnswParams) -> Result<Hnsw, SearchError> {
        let width = width.clamp(1, dim.max(1));
        let options = IndexOptions {
            dimensions: width,
            metric: MetricKind::Cos,
            quantization: ScalarKind::F32,
            connectivity: params.m,
            expansion_add: params.ef_construction,
            expansion_search: params.ef_search,
            multi: false,
        };
        let index = Index::new(&options).map_err(|e| err("creating the graph", e))?;
        index
            .reserve(1024)
            .map_err(|e| err("reserving the graph", e))?;
        Ok(Hnsw {
            index,
            dim,
            width,
            waiting: Mutex::default(),
        })
    }

    /// The components the graph keeps of each vector.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Whether `v` has no component that is not zero past the graph's width.
    pub fn fits(&self, v: &[f32]) -> bool {
        v.iter().skip(self.width).all(|x| *x == 0.0)
    }

    fn waiting(&self) -> MutexGuard<'_, BTreeMap<i64, Vec<f32>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The graph saved at `path`, if it loads and is at most `dim` components wide.
    pub fn load(path: &Path, dim: usize, params: HnswParams) -> Result<Hnsw, SearchError> {
        let p = path
            .to_str()
            .ok_or_else(|| err("loading", "path is not UTF-8"))?;
        let saved = Index::metadata(p).map_err(|e| err("loading the graph", e))?;
        let width = usize::try_from(saved.dimensions).unwrap_or(usize::MAX);
        if width == 0 || width > dim {
            return Err(err(
                "loading the graph",
                format!("{width} dimensions, expected at most {dim}"),
            ));
        }
        let h = Hnsw::new(dim, width, params)?;
        h.index.load(p).map_err(|e| err("loading the graph", e))?;
        if h.index.dimensions() != width {
            return Err(err(
                "loading the graph",
                format!("{} dimensions, expected {width}", h.index.dimensions()),
            ));
        }
        h.index.change_expansion_search(params.ef_search);
        let cap = (h.index.size() * 2).max(1024);
        h.index
            .reserve(cap)
            .map_err(|e| err("reserving the graph", e))?;
        Ok(h)
    }

    /// Adds (or replaces) the vector of `key`: it waits beside the graph until
    /// [`Hnsw::settle`], or goes in at once when [`MAX_WAITING_BYTES`] already wait.
    pub fn add(&self, key: i64, v: &[f32]) -> Result<(), SearchError> {
        self.make_room(&[(key, v)])?;
        let v = &v[..self.width];
        let mut waiting = self.waiting();
        if (waiting.len() + 1) * self.width * std::mem::size_of::<f32>() <= MAX_WAITING_BYTES {
            waiting.insert(key, v.to_vec());
            return Ok(());
        }
        drop(waiting);
        self.index.add(key as u64, v).map_err(|e| err("adding", e))
    }

    /// Inserts the waiting vectors into the graph, a slice at a time, until none waits (true)
    /// or `go_on` says no (false).
    pub fn settle(&self, go_on: &dyn Fn() -> bool) -> Result<bool, SearchError> {
        loop {
            // In key order, one at a time, as they were indexed: the graph comes out as if
            // each had gone in at once.
            let slice: Vec<(i64, Vec<f32>)> = {
                let mut waiting = self.waiting();
                std::iter::from_fn(|| waiting.pop_first())
                    .take(SETTLE_SLICE)
                    .collect()
            };
            if slice.is_empty() {
                return Ok(true);
            }
            // Waiting vectors are cut to the width already.
            self.reserve(slice.len())?;
            for (key, v) in &slice {
                self.index
                    .add(*key as u64, v)
                    .map_err(|e| err("adding", e))?;
            }
            if !go_on() {
                return Ok(self.waiting().is_empty());
            }
        }
    }

    /// How many vectors wait beside the graph.
    pub fn waiting_len(&self) -> usize {
        self.waiting().len()
    }

    /// Checks the vectors' dimension and width, removes the keys' old vectors, and reserves
    /// room for the new ones (usearch takes concurrent inserts only within the capacity
    /// reserved).
    fn make_room<V: AsRef<[f32]>>(&self, items: &[(i64, V)]) -> Result<(), SearchError> {
        if let Some((_, v)) = items.iter().find(|(_, v)| v.as_ref().len() != self.dim) {
            return Err(err(
                "adding",
                format!("{} components, expected {}", v.as_ref().len(), self.dim),
            ));
        }
        if let Some((key, _)) = items.iter().find(|(_, v)| !self.fits(v.as_ref())) {
            return Err(err(
                "adding",
                format!(
                    "the vector of {key} is wider than the graph ({} components)",
                    self.width
                ),
            ));
        }
        // A NaN's distance to anything is NaN, which would rank it first for every query.
        if let Some((key, _)) = items
            .iter()
            .find(|(_, v)| v.as_ref().iter().any(|x| !x.is_finite()))
        {
            return Err(err(
                "adding",
                format!("the vector of {key} has a component that is not a finite number"),
            ));
        }
        let mut waiting = self.waiting();
        for (key, _) in items {
            waiting.remove(key);
            if self.index.contains(*key as u64) {
                self.index
                    .remove(*key as u64)
                    .map_err(|e| err("replacing", e))?;
            }
        }
        drop(waiting);
        self.reserve(items.len())
    }

    /// Room in the graph for `more` vectors.
    fn reserve(&self, more: usize) -> Result<(), SearchError> {
        let need = self.index.size() + more;
        if need >= self.index.capacity() {
            let cap = (self.index.capacity() * 2).max(need + 1).max(1024);
            self.index
                .reserve(cap)
                .map_err(|e| err("growing the graph", e))?;
        }
        Ok(())
    }

    /// Adds (or replaces) many vectors, on every core: a graph rebuilt from SQLite or a batch of
    /// imported documents (HNSW inserts dominate both).
    pub fn add_many(&self, items: &[(i64, Vec<f32>)]) -> Result<(), SearchError> {
        self.make_room(items)?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per = items.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let workers: Vec<_> = items
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .try_for_each(|(key, v)| self.index.add(*key as u64, &v[..self.width]))
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join()
                    .map_err(|_| err("adding", "a worker panicked"))?
                    .map_err(|e| err("adding", e))
            })
        })
    }

    /// Removes `key` (nothing if absent).
    pub fn remove(&self, key: i64) -> Result<(), SearchError> {
        self.waiting().remove(&key);
        self.index
            .remove(key as u64)
            .map(|_| ())
            .map_err(|e| err("removing", e))
    }

    /// The `k` nearest keys to `v`, with their cosine similarity, best first: the graph's
    /// approximate neighbours and the waiting vectors' exact ones, together.
    pub fn search(&self, v: &[f32], k: usize) -> Result<Vec<(i64, f32)>, SearchError> {
        if k == 0 {
            return Ok(Vec::new());
        }
        if v.len() != self.dim {
            return Err(err(
                "searching",
                format!("{} components, expected {}", v.len(), self.dim),
            ));
        }
        // The graph's vectors are zero past its width: the query's components there add
        // nothing to a dot product, only to the query's length.
        let norm = |x: &[f32]| x.iter().map(|a| a * a).sum::<f32>().sqrt();
        let (whole, v) = (norm(v), &v[..self.width]);
        let vn = norm(v);
        let scale = if whole > 0.0 { vn / whole } else { 0.0 };
        let mut found: Vec<(i64, f32)> = match self.index.size() {
            // A query with nothing in the graph's components is as far from every vector.
            _ if vn == 0.0 => Vec::new(),
            0 => Vec::new(),
            n => {
                let m = self
                    .index
                    .search(v, k.min(n))
                    .map_err(|e| err("searching", e))?;
                m.keys
                    .iter()
                    .zip(&m.distances)
                    .map(|(k, d)| (*k as i64, (1.0 - d) * scale))
                    .collect()
            }
        };
        found.extend(self.waiting().iter().filter_map(|(key, w)| {
            let wn = norm(w);
            (whole > 0.0 && wn > 0.0).then(|| {
                let dot: f32 = v.iter().zip(w).map(|(a, b)| a * b).sum();
                (*key, dot / (whole * wn))
            })
        }));
        found.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        found.truncate(k);
        Ok(found)
    }

    /// How many vectors the graph holds, waiting ones included.
    pub fn len(&self) -> usize {
        self.index.size() + self.waiting_len()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Saves the graph to `path` atomically (a temp file in the same folder, then rename),
    /// with every waiting vector inserted first.
    pub fn save(&self, path: &Path) -> Result<(), SearchError> {
        self.settle(&|| true)?;
        let dir = path.parent().ok_or_else(|| err("saving", "no folder"))?;
        let tmp = tempfile::Builder::new()
            .prefix(".hnsw-")
            .tempfile_in(dir)
            .map_err(|e| err("saving the graph", e))?;
        let p = tmp
            .path()
            .to_str()
            .ok_or_else(|| err("saving", "path is not UTF-8"))?;
        self.index.save(p).map_err(|e| err("saving the graph", e))?;
        tmp.as_file()
            .sync_all()
            .map_err(|e| err("saving the graph", e))?;
        tmp.persist(path)
            .map_err(|e| err("saving the graph", e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NaN's distance to any query is NaN, which ranked it first for every query: a vector
    /// with a component that is not a finite number never enters the graph.
    #[test]
    fn a_vector_that_is_not_finite_is_refused() {
        let h = Hnsw::new(4, 4, HnswParams::default()).unwrap();
        h.add(1, &[1.0, 0.0, 0.0, 0.0]).unwrap();
        for bad in [f32::NAN, f32::INFINITY] {
            assert!(h.add(2, &[0.0, bad, 0.0, 0.0]).is_err());
            assert!(h
                .add_many(&[(3, vec![1.0, 1.0, 0.0, 0.0]), (4, vec![bad; 4])])
                .is_err());
        }
        assert_eq!(h.len(), 1);
        assert!(h.add(5, &[1.0, 0.0]).is_err(), "another dimension");
        assert_eq!(h.search(&[0.0, 1.0, 0.0, 0.0], 3).unwrap().len(), 1);
    }

    /// A vector added waits beside the graph and is found by exact search; replaced or removed
    /// before it is settled, its old value is never found; settled, the graph finds it, and a
    /// saved graph holds every vector.
    #[test]
    fn waiting_vectors_are_searched_until_settled() {
        let h = Hnsw::new(4, 4, HnswParams::default()).unwrap();
        let many: Vec<(i64, Vec<f32>)> = (10..60)
            .map(|i| (i, vec![1.0, i as f32 / 100.0, 0.0, 0.0]))
            .collect();
        h.add_many(&many).unwrap();
        h.add(1, &[0.0, 0.0, 1.0, 0.0]).unwrap();
        h.add(2, &[0.0, 0.0, 0.0, 1.0]).unwrap();
        assert_eq!((h.len(), h.waiting_len()), (52, 2));
        let best = h.search(&[0.0, 0.0, 1.0, 0.1], 3).unwrap();
        assert_eq!(best[0].0, 1);
        assert!((best[0].1 - 0.995).abs() < 0.01, "{best:?}");

        // Replaced while waiting, and a graph vector replaced: only the new values are found.
        h.add(1, &[0.0, 1.0, 0.0, 0.0]).unwrap();
        h.add(10, &[0.0, 0.0, 1.0, 0.0]).unwrap();
        assert_eq!(h.search(&[0.0, 0.0, 1.0, 0.0], 1).unwrap()[0].0, 10);
        h.remove(2).unwrap();
        assert!(h
            .search(&[0.0, 0.0, 0.0, 1.0], 60)
            .unwrap()
            .iter()
            .all(|(k, _)| *k != 2));
        assert_eq!((h.len(), h.waiting_len()), (51, 2));

        // Settling stops when told to, between slices, and goes on later.
        for i in 100..200 {
            h.add(i, &[0.5, 0.5, i as f32 / 200.0, 0.0]).unwrap();
        }
        assert!(!h.settle(&|| false).unwrap());
        assert!(h.waiting_len() > 0 && h.waiting_len() < 102);
        assert!(h.settle(&|| true).unwrap());
        assert_eq!((h.len(), h.waiting_len()), (151, 0));
        assert_eq!(h.search(&[0.0, 0.0, 1.0, 0.0], 1).unwrap()[0].0, 10);

        let dir = tempfile::tempdir().unwrap();
        h.add(3, &[1.0, 1.0, 1.0, 1.0]).unwrap();
        h.save(&dir.path().join("g")).unwrap();
        let back = Hnsw::load(&dir.path().join("g"), 4, HnswParams::default()).unwrap();
        assert_eq!((back.len(), back.waiting_len()), (152, 0));
        assert_eq!(back.search(&[1.0, 1.0, 1.0, 1.0], 1).unwrap()[0].0, 3);
    }

    /// Vectors whose components past the first 256 are zero (the built-in model's, in a
    /// 1,536-component workspace) make a graph 256 wide: the same similarities as over the
    /// whole vectors, saved and loaded at that width; a wider vector is refused, not cut.
    #[test]
    fn a_graph_keeps_only_the_components_its_vectors_use() {
        let dim = 1536;
        let vector = |seed: usize, used: usize| -> Vec<f32> {
            (0..dim)
                .map(|i| match i < used {
                    true => (((i * 7 + seed * 13) % 17) as f32 - 8.0) / 8.0,
                    false => 0.0,
                })
                .collect()
        };
        let vs: Vec<(i64, Vec<f32>)> = (0..40).map(|s| (s as i64, vector(s, 250))).collect();
        let width = width_for(dim, vs.iter().map(|(_, v)| v.as_slice()));
        assert_eq!(width, 256);
        assert_eq!(width_for(dim, [vector(1, 1536).as_slice()]), dim);
        assert_eq!(width_for(dim, std::iter::empty()), WIDTH_STEP);
        let h = Hnsw::new(dim, width, HnswParams::default()).unwrap();
        h.add_many(&vs[..30]).unwrap();
        for (k, v) in &vs[30..] {
            h.add(*k, v).unwrap();
        }
        let cos = |a: &[f32], b: &[f32]| {
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let n = |x: &[f32]| x.iter().map(|a| a * a).sum::<f32>().sqrt();
            dot / (n(a) * n(b))
        };
        // A query with components past the width: its similarity is still the whole one.
        let mut q = vector(99, 250);
        q[1000] = 3.0;
        let check = |h: &Hnsw| {
            let found = h.search(&q, 40).unwrap();
            assert_eq!(found.len(), 40);
            for (k, sim) in found {
                let want = cos(&q, &vs[k as usize].1);
                assert!((sim - want).abs() < 1e-4, "{k}: {sim} against {want}");
            }
        };
        check(&h);
        let wide = vector(7, 300);
        assert!(!h.fits(&wide) && h.fits(&vs[0].1));
        assert!(h.add(77, &wide).is_err());
        assert!(h.add_many(&[(78, wide)]).is_err());
        let dir = tempfile::tempdir().unwrap();
        h.save(&dir.path().join("g")).unwrap();
        let back = Hnsw::load(&dir.path().join("g"), dim, HnswParams::default()).unwrap();
        assert_eq!((back.width(), back.len()), (256, 40));
        check(&back);
        assert!(Hnsw::load(&dir.path().join("g"), 128, HnswParams::default()).is_err());
    }
}
