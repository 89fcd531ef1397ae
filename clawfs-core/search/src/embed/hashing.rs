//! A test double: feature hashing of words. It knows nothing of meaning (two synonyms share no
//! component), so it is never the default and never called semantic; tests use it where the
//! built-in model's files are not wanted.

use sha2::{Digest, Sha256};

use super::{fit, EmbedError, Embedder};

/// Hashes each lower-cased word to a component.
pub struct HashingEmbedder {
    dim: usize,
}

impl HashingEmbedder {
    /// An embedder of `dim` components.
    pub fn new(dim: usize) -> HashingEmbedder {
        HashingEmbedder { dim }
    }
}

impl Embedder for HashingEmbedder {
    fn fingerprint(&self) -> String {
        format!("hashing-test-double:{}", self.dim)
    }

    fn model(&self) -> String {
        "hashing-test-double".to_string()
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; self.dim];
                for word in t
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                {
                    let h = Sha256::digest(word.to_lowercase().as_bytes());
                    let i = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
                    v[(i % self.dim as u64) as usize] += 1.0;
                }
                fit(v, self.dim)
            })
            .collect())
    }
}
