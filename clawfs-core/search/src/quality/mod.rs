//! Retrieval quality, measured: a small set of notes and queries that each name the note they
//! should find (`retrieval-set.json`), and hit@1, hit@3 and MRR of an index over it.
//!
//! Most queries share their note's meaning but few or none of its words ("I can't fall asleep"
//! → a note on sleep hygiene): text search cannot find those, an embedder that carries meaning
//! can. A few use the note's own rare words, where text search is strongest.

use std::os::fd::BorrowedFd;
use std::path::Path;

use super::{Mode, Query, SearchError, WorkspaceIndex};

/// How many hits a query looks at (MRR counts ranks up to this).
pub const DEPTH: usize = 10;

/// The notes and the queries.
#[derive(Debug, serde::Deserialize)]
pub struct RetrievalSet {
    /// The notes.
    pub documents: Vec<Document>,
    /// The queries.
    pub queries: Vec<Case>,
}

/// One note.
#[derive(Debug, serde::Deserialize)]
pub struct Document {
    /// Path in the workspace.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// One query and the note it should find.
#[derive(Debug, serde::Deserialize)]
pub struct Case {
    /// The words.
    pub query: String,
    /// The note's path.
    pub expect: String,
    /// `meaning` (few shared words) or `keyword` (the note's own words).
    pub kind: String,
}

/// The figures of one mode over some queries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    /// Queries asked.
    pub queries: usize,
    /// Share whose note ranked first.
    pub hit_at_1: f64,
    /// Share whose note ranked in the first three.
    pub hit_at_3: f64,
    /// Mean of 1 / the note's rank (0 past [`DEPTH`]).
    pub mrr: f64,
}

impl RetrievalSet {
    /// The project's set.
    pub fn builtin() -> RetrievalSet {
        serde_json::from_str(include_str!("retrieval-set.json"))
            .expect("retrieval-set.json is valid (checked by a test)")
    }

    /// Writes every note under `dir`.
    pub fn write_to(&self, dir: &Path) -> std::io::Result<()> {
        for d in &self.documents {
            let p = dir.join(&d.path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(p, &d.text)?;
        }
        Ok(())
    }

    /// The scores of `mode` over the queries of `kind` (all when None), against `index` of the
    /// notes written to `workspace`.
    pub fn evaluate(
        &self,
        index: &WorkspaceIndex,
        workspace: BorrowedFd<'_>,
        mode: Mode,
        kind: Option<&str>,
    ) -> Result<Scores, SearchError> {
        let (mut n, mut h1, mut h3, mut rr) = (0usize, 0usize, 0usize, 0f64);
        for case in self
            .queries
            .iter()
            .filter(|c| kind.is_none_or(|k| c.kind == k))
        {
            let hits = index.query(&Query {
                text: &case.query,
                mode,
                limit: DEPTH,
                readable: &|_| true,
                workspace,
            })?;
            // Rank among distinct files: a note's second chunk is not a second answer.
            let mut files: Vec<&str> = Vec::new();
            for h in &hits {
                if !files.contains(&h.path.as_str()) {
                    files.push(&h.path);
                }
            }
            n += 1;
            if let Some(rank) = files.iter().position(|p| *p == case.expect) {
                h1 += usize::from(rank == 0);
                h3 += usize::from(rank < 3);
                rr += 1.0 / (rank + 1) as f64;
            }
        }
        let share = |x: f64| if n == 0 { 0.0 } else { x / n as f64 };
        Ok(Scores {
            queries: n,
            hit_at_1: share(h1 as f64),
            hit_at_3: share(h3 as f64),
            mrr: share(rr),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::RetrievalSet;

    #[test]
    fn every_query_names_a_note_of_the_set() {
        let set = RetrievalSet::builtin();
        assert!(set.queries.len() >= 20);
        for c in &set.queries {
            assert!(
                set.documents.iter().any(|d| d.path == c.expect),
                "{c:?} names no note"
            );
            assert!(matches!(c.kind.as_str(), "meaning" | "keyword"), "{c:?}");
        }
    }
}
