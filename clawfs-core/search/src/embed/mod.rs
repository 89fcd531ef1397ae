//! Embedders: text in, one vector per text out.
//!
//! Every vector an index holds was made by one embedder, named by its [`Embedder::fingerprint`]
//! (kept in the index): vectors of different embedders do not compare, so an index whose
//! fingerprint differs from the workspace's embedder is rebuilt, never mixed.
//!
//! Vectors have the workspace's dimension (`vector_dimension`, 128–4096). A model whose own
//! dimension differs is fitted: cut to the leading components (the built-in model's components
//! are ordered by variance, so the leading ones carry the most), or padded with zeros, which
//! leaves every cosine unchanged. Vectors are unit length.

mod hashing;
mod model2vec;
pub mod remote;

pub use hashing::HashingEmbedder;
pub use model2vec::{BuiltinModel, MODEL_DIR_ENV};
pub use remote::{RemoteClient, RemoteConfig};

/// Why texts could not be embedded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The model's files are missing or unreadable.
    #[error("the embedding model could not be loaded from {path}: {reason}")]
    Load {
        /// Where it was looked for.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The model failed on this input, or the endpoint's answer was wrong.
    #[error("embedding failed: {0}")]
    Failed(String),
    /// The embedder cannot be used now (endpoint unreachable, API key unreadable): search by
    /// text until it can.
    #[error("{0}")]
    Unavailable(String),
}

/// Turns texts into vectors of one dimension.
pub trait Embedder: Send + Sync {
    /// What makes the vectors: model and output dimension, e.g. `model2vec:potion-base-8M:256`.
    fn fingerprint(&self) -> String;
    /// The model alone, as vectors brought from elsewhere name theirs (`text-embedding-3-small`).
    fn model(&self) -> String;
    /// The length of every vector.
    fn dimension(&self) -> usize;
    /// One unit-length vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// `v` cut or zero-padded to `dim` and scaled to unit length (a zero vector stays zero).
pub fn fit(mut v: Vec<f32>, dim: usize) -> Vec<f32> {
    v.resize(dim, 0.0);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn fit_pads_cuts_and_normalises() {
        assert_eq!(fit(vec![3.0, 4.0], 3), vec![0.6, 0.8, 0.0]);
        assert_eq!(fit(vec![1.0, 0.0, 5.0], 2), vec![1.0, 0.0]);
        assert_eq!(fit(vec![0.0; 2], 2), vec![0.0, 0.0]);
    }
}
