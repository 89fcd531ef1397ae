//! The HNSW graph over a workspace's vectors (usearch, cosine). It is a cache of the vectors in
//! SQLite: saved beside the database (temp file + rename), and rebuilt from SQLite when it is
//! missing, unreadable, of another dimension or older than the database.

use std::path::Path;

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

/// An HNSW graph of `dim`-component vectors keyed by document id.
pub struct Hnsw {
    index: Index,
    dim: usize,
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
    /// An empty graph.
    pub fn new(dim: usize, params: HnswParams) -> Result<Hnsw, SearchError> {
        let options = IndexOptions {
            dimensions: dim,
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
        Ok(Hnsw { index, dim })
    }

    /// The graph saved at `path`, if it loads and has `dim` components.
    pub fn load(path: &Path, dim: usize, params: HnswParams) -> Result<Hnsw, SearchError> {
        let h = Hnsw::new(dim, params)?;
        let p = path
            .to_str()
            .ok_or_else(|| err("loading", "path is not UTF-8"))?;
        h.index.load(p).map_err(|e| err("loading the graph", e))?;
        if h.index.dimensions() != dim {
            return Err(err(
                "loading the graph",
                format!("{} dimensions, expected {dim}", h.index.dimensions()),
            ));
        }
        h.index.change_expansion_search(params.ef_search);
        let cap = (h.index.size() * 2).max(1024);
        h.index
            .reserve(cap)
            .map_err(|e| err("reserving the graph", e))?;
        Ok(h)
    }

    /// Adds (or replaces) the vector of `key`.
    pub fn add(&self, key: i64, v: &[f32]) -> Result<(), SearchError> {
        self.make_room(&[(key, v)])?;
        self.index.add(key as u64, v).map_err(|e| err("adding", e))
    }

    /// Checks the vectors' dimension, removes the keys' old vectors, and reserves room for
    /// the new ones (usearch takes concurrent inserts only within the capacity reserved).
    fn make_room<V: AsRef<[f32]>>(&self, items: &[(i64, V)]) -> Result<(), SearchError> {
        if let Some((_, v)) = items.iter().find(|(_, v)| v.as_ref().len() != self.dim) {
            return Err(err(
                "adding",
                format!("{} components, expected {}", v.as_ref().len(), self.dim),
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
        for (key, _) in items {
            if self.index.contains(*key as u64) {
                self.index
                    .remove(*key as u64)
                    .map_err(|e| err("replacing", e))?;
            }
        }
        let need = self.index.size() + items.len();
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
                            .try_for_each(|(key, v)| self.index.add(*key as u64, v))
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
        self.index
            .remove(key as u64)
            .map(|_| ())
            .map_err(|e| err("removing", e))
    }

    /// The `k` nearest keys to `v`, with their cosine similarity, best first.
    pub fn search(&self, v: &[f32], k: usize) -> Result<Vec<(i64, f32)>, SearchError> {
        if self.index.size() == 0 || k == 0 {
            return Ok(Vec::new());
        }
        let m = self.index.search(v, k).map_err(|e| err("searching", e))?;
        Ok(m.keys
            .iter()
            .zip(&m.distances)
            .map(|(k, d)| (*k as i64, 1.0 - d))
            .collect())
    }

    /// How many vectors the graph holds.
    pub fn len(&self) -> usize {
        self.index.size()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Saves the graph to `path` atomically (a temp file in the same folder, then rename).
    pub fn save(&self, path: &Path) -> Result<(), SearchError> {
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
        let h = Hnsw::new(4, HnswParams::default()).unwrap();
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
}
