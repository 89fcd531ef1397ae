//! `system/search.toml`: which embedder the store's workspaces use. Read-only through the mount
//! like the rest of `system/`, so only an administrator chooses where workspace text is sent
//! and which vault secret authenticates it.
//!
//! ```toml
//! [embedder]
//! kind = "openai-compatible"          # or "builtin" (the default when the file is absent)
//! base_url = "http://127.0.0.1:11434/v1"
//! model = "nomic-embed-text"
//! api_key_secret = "openai-api-key"   # a vault secret; omit for endpoints without keys
//! ```

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use zeroize::Zeroizing;

use super::embed::remote::KeySource;
use super::embed::RemoteConfig;
use super::SearchError;

/// The file, relative to the store.
pub const CONFIG_FILE: &str = "system/search.toml";

/// The whole file.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// The embedder.
    #[serde(default)]
    pub embedder: EmbedderConfig,
}

/// Which embedder.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EmbedderConfig {
    /// The built-in model.
    #[default]
    Builtin,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    OpenaiCompatible(RemoteConfig),
}

impl SearchConfig {
    /// The store's configuration (the default when the file is absent). A file that does not
    /// parse, or names bad values, is an error naming the file.
    pub fn load(store_root: &Path) -> Result<SearchConfig, SearchError> {
        let root = std::fs::File::open(store_root)
            .map_err(|e| SearchError::io(format!("opening {}", store_root.display()), e))?;
        let bad = |why: String| SearchError::Config(format!("{CONFIG_FILE}: {why}"));
        let Some(bytes) =
            clawfs_store::beneath::read(root.as_fd(), Path::new(CONFIG_FILE), 1 << 20)
                .map_err(|e| SearchError::io(format!("reading {CONFIG_FILE}"), e))?
        else {
            return Ok(SearchConfig::default());
        };
        let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
        let config: SearchConfig = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if let EmbedderConfig::OpenaiCompatible(c) = &config.embedder {
            c.validate().map_err(bad)?;
        }
        Ok(config)
    }
}

/// Reads API keys from the store's vault, as the daemon (the vault must be unlocked).
pub fn vault_keys(store_root: &Path) -> KeySource {
    let root = store_root.to_path_buf();
    Arc::new(move |name: &str| {
        let vault = clawfs_vault::Vault::open(&root, clawfs_vault::VaultConfig::default())
            .map_err(|e| e.to_string())?;
        let bytes = vault.get(name).map_err(|e| e.to_string())?;
        let text =
            std::str::from_utf8(&bytes).map_err(|_| "the secret is not UTF-8".to_string())?;
        Ok(Zeroizing::new(text.trim().to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::{EmbedderConfig, SearchConfig};

    #[test]
    fn the_file_names_one_embedder() {
        let c: SearchConfig = toml::from_str(
            "[embedder]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\nmodel = \"m\"\n",
        )
        .unwrap();
        assert!(matches!(c.embedder, EmbedderConfig::OpenaiCompatible(ref r) if r.model == "m"));
        let c: SearchConfig = toml::from_str("[embedder]\nkind = \"builtin\"\n").unwrap();
        assert_eq!(c.embedder, EmbedderConfig::Builtin);
        assert_eq!(
            toml::from_str::<SearchConfig>("").unwrap(),
            SearchConfig::default()
        );
        for bad in [
            "[embedder]\nkind = \"magic\"\n",
            "[embedder]\nkind = \"openai-compatible\"\nmodel = \"m\"\n",
            "[embedder]\nkind = \"openai-compatible\"\nbase_url = \"http://h\"\nmodel = \"m\"\nkey = \"sk\"\n",
            "[other]\n",
        ] {
            assert!(toml::from_str::<SearchConfig>(bad).is_err(), "{bad}");
        }
    }
}
