//! An OpenAI-compatible embedding endpoint (`POST {base_url}/embeddings`: OpenAI, Ollama,
//! LM Studio, vLLM, …).
//!
//! Texts go in batches; a request that times out, cannot connect or gets 429/5xx is retried with
//! a growing pause. When every attempt failed the endpoint is taken as down for [`DOWN_FOR`]:
//! calls in that time fail at once with [`EmbedError::Unavailable`], which indexing and queries
//! take as "search by text for now" instead of waiting out a timeout per file.
//!
//! The API key is never in a configuration file: it is a vault secret, read when first needed
//! (the vault may be unlocked after the daemon starts) and read again when the endpoint refuses
//! it (after a rotation). It lives in memory only, zeroed when dropped.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::{fit, EmbedError, Embedder};

/// How long an endpoint that failed every attempt is left alone.
pub const DOWN_FOR: Duration = Duration::from_secs(30);
/// The largest response read (a batch of 64 vectors of 4,096 floats is about 6 MB of JSON).
const MAX_RESPONSE_BYTES: u64 = 64 << 20;
/// The first pause between attempts; doubled each time, at most [`MAX_BACKOFF`].
const BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Where and how to reach the endpoint (`system/search.toml`, `[embedder]`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// Base URL of the API, e.g. `http://127.0.0.1:11434/v1` (`/embeddings` is appended).
    pub base_url: String,
    /// The model's name at the endpoint.
    pub model: String,
    /// The vault secret holding the API key (none for endpoints without keys, e.g. Ollama).
    #[serde(default)]
    pub api_key_secret: Option<String>,
    /// Asks the endpoint for vectors of this many components (`dimensions`; models that
    /// support it, e.g. OpenAI's text-embedding-3). Vectors are then fitted to the workspace's
    /// dimension either way.
    #[serde(default)]
    pub dimensions: Option<usize>,
    /// Texts per request.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Seconds one request may take, connection included.
    #[serde(default = "default_timeout")]
    pub timeout_secs: f64,
    /// Attempts after the first for a request that timed out or got 429/5xx.
    #[serde(default = "default_retries")]
    pub retries: u32,
}

fn default_batch() -> usize {
    64
}
fn default_timeout() -> f64 {
    30.0
}
fn default_retries() -> u32 {
    2
}

impl RemoteConfig {
    /// Checks the values, with a sentence naming the bad one.
    pub fn validate(&self) -> Result<(), String> {
        let url = self.base_url.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "base_url {:?}: expected an http:// or https:// URL",
                self.base_url
            ));
        }
        if self.model.trim().is_empty() {
            return Err("model is empty".into());
        }
        if !(1..=2048).contains(&self.batch) {
            return Err(format!("batch {}: expected 1 to 2048", self.batch));
        }
        if !(self.timeout_secs > 0.0 && self.timeout_secs <= 600.0) {
            return Err(format!(
                "timeout_secs {}: expected more than 0 and at most 600",
                self.timeout_secs
            ));
        }
        if self.retries > 10 {
            return Err(format!("retries {}: at most 10", self.retries));
        }
        if let Some(d) = self.dimensions {
            if !(1..=65536).contains(&d) {
                return Err(format!("dimensions {d}: expected 1 to 65536"));
            }
        }
        if let Some(name) = &self.api_key_secret {
            clawfs_vault::check_secret_name(name).map_err(|e| format!("api_key_secret: {e}"))?;
        }
        Ok(())
    }
}

/// Reads the API key (a vault secret) when the client needs it.
pub type KeySource = Arc<dyn Fn(&str) -> Result<Zeroizing<String>, String> + Send + Sync>;

/// The connection to one endpoint, shared by the embedders of every workspace (so one outage
/// is noticed once).
pub struct RemoteClient {
    config: RemoteConfig,
    url: String,
    agent: ureq::Agent,
    key_source: KeySource,
    key: Mutex<Option<Zeroizing<String>>>,
    down_until: Mutex<Option<Instant>>,
}

/// Why one attempt failed.
enum Attempt {
    /// Worth another try (timeout, connection, 429, 5xx).
    Transient(String),
    /// The endpoint refused the key.
    Refused(String),
    /// The answer is wrong and will stay wrong.
    Fatal(String),
}

impl RemoteClient {
    /// A client for `config` (validated), reading its key through `key_source`.
    pub fn new(config: RemoteConfig, key_source: KeySource) -> Result<Arc<RemoteClient>, String> {
        config.validate()?;
        let timeout = Duration::from_secs_f64(config.timeout_secs);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(Duration::from_secs(5))))
            .http_status_as_error(false)
            // The key must not follow a redirect to another host.
            .max_redirects(0)
            .build()
            .into();
        Ok(Arc::new(RemoteClient {
            url: format!("{}/embeddings", config.base_url.trim_end_matches('/')),
            config,
            agent,
            key_source,
            key: Mutex::new(None),
            down_until: Mutex::new(None),
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &RemoteConfig {
        &self.config
    }

    /// An embedder of this endpoint producing `dim` components.
    pub fn embedder(self: &Arc<Self>, dim: usize) -> RemoteEmbedder {
        RemoteEmbedder {
            client: Arc::clone(self),
            dim,
        }
    }

    fn api_key(&self) -> Result<Option<Zeroizing<String>>, EmbedError> {
        let Some(name) = &self.config.api_key_secret else {
            return Ok(None);
        };
        let mut key = self.key.lock().unwrap_or_else(PoisonError::into_inner);
        if key.is_none() {
            // On a thread of its own: the caller's thread may be acting with an agent's
            // credentials (a query), and the vault is the daemon's to read.
            let read = std::thread::scope(|s| {
                s.spawn(|| (self.key_source)(name))
                    .join()
                    .unwrap_or_else(|_| Err("reading it panicked".into()))
            });
            let k = read.map_err(|e| {
                tracing::warn!(secret = name, error = %e, "the embedding API key cannot be read");
                EmbedError::Unavailable(format!(
                    "the API key (vault secret {name:?}) cannot be read (is the vault unlocked?)"
                ))
            })?;
            *key = Some(k);
        }
        Ok(key.clone())
    }

    fn forget_key(&self) {
        self.key
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn check_up(&self) -> Result<(), EmbedError> {
        let down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match *down {
            Some(until) if Instant::now() < until => Err(EmbedError::Unavailable(format!(
                "the embedding endpoint {} failed recently; retrying in {} s",
                self.url,
                until.saturating_duration_since(Instant::now()).as_secs() + 1
            ))),
            _ => Ok(()),
        }
    }

    fn set_down(&self, down: bool) {
        *self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = down.then(|| Instant::now() + DOWN_FOR);
    }

    /// The vectors of one batch, as the endpoint returns them (not fitted).
    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.check_up()?;
        let mut body = serde_json::json!({ "model": self.config.model, "input": texts });
        if let Some(d) = self.config.dimensions {
            body["dimensions"] = d.into();
        }
        let body = serde_json::to_vec(&body).map_err(|e| EmbedError::Failed(e.to_string()))?;
        let mut pause = BACKOFF;
        let mut refreshed_key = false;
        let mut attempt = 0;
        loop {
            let key = self.api_key()?;
            match self.attempt(&body, key.as_deref().map(String::as_str), texts.len()) {
                Ok(v) => {
                    self.set_down(false);
                    return Ok(v);
                }
                Err(Attempt::Fatal(why)) => return Err(EmbedError::Failed(why)),
                Err(Attempt::Refused(_)) if !refreshed_key && key.is_some() => {
                    // The secret may have been rotated since it was read.
                    tracing::info!(endpoint = %self.url, "the endpoint refused the API key: reading it again");
                    self.forget_key();
                    refreshed_key = true;
                }
                Err(Attempt::Refused(why)) => {
                    self.forget_key();
                    return Err(EmbedError::Unavailable(why));
                }
                Err(Attempt::Transient(why)) if attempt < self.config.retries => {
                    attempt += 1;
                    tracing::debug!(endpoint = %self.url, attempt, error = %why, "embedding request failed: retrying");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_BACKOFF);
                }
                Err(Attempt::Transient(why)) => {
                    self.set_down(true);
                    tracing::warn!(endpoint = %self.url, error = %why, "the embedding endpoint is unreachable: searching by text until it answers");
                    return Err(EmbedError::Unavailable(format!(
                        "the embedding endpoint {} is unreachable: {why}",
                        self.url
                    )));
                }
            }
        }
    }

    fn attempt(
        &self,
        body: &[u8],
        key: Option<&str>,
        expected: usize,
    ) -> Result<Vec<Vec<f32>>, Attempt> {
        let mut req = self.agent.post(&self.url).content_type("application/json");
        if let Some(key) = key {
            req = req.header("Authorization", format!("Bearer {key}"));
        }
        let mut resp = req
            .send(body)
            .map_err(|e| Attempt::Transient(e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| Attempt::Transient(format!("reading the answer: {e}")))?;
        match status {
            200..=299 => parse(&bytes, expected).map_err(Attempt::Fatal),
            401 | 403 => Err(Attempt::Refused(format!(
                "the embedding endpoint {} refused the API key (HTTP {status})",
                self.url
            ))),
            // The status only: an error body may echo the request, key included.
            429 | 500..=599 => Err(Attempt::Transient(format!("HTTP {status}"))),
            _ => Err(Attempt::Fatal(format!(
                "the embedding endpoint {} answered HTTP {status}",
                self.url
            ))),
        }
    }
}

/// The vectors of an answer `{"data": [{"index": i, "embedding": [...]}, ...]}`, in input order.
fn parse(bytes: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        data: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        index: Option<usize>,
        embedding: Vec<f32>,
    }
    let answer: Answer = serde_json::from_slice(bytes)
        .map_err(|e| format!("the embedding endpoint's answer is not an embeddings list: {e}"))?;
    if answer.data.len() != expected {
        return Err(format!(
            "the embedding endpoint returned {} vectors for {expected} texts",
            answer.data.len()
        ));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (pos, item) in answer.data.into_iter().enumerate() {
        let i = item.index.unwrap_or(pos);
        if item.embedding.is_empty() || item.embedding.iter().any(|x| !x.is_finite()) {
            return Err(format!("vector {i} is empty or not finite"));
        }
        match out.get_mut(i) {
            Some(slot @ None) => *slot = Some(item.embedding),
            _ => return Err(format!("vector index {i} is out of range or repeated")),
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// The endpoint's vectors fitted to one workspace's dimension.
pub struct RemoteEmbedder {
    client: Arc<RemoteClient>,
    dim: usize,
}

impl Embedder for RemoteEmbedder {
    fn fingerprint(&self) -> String {
        let c = &self.client.config;
        format!(
            "openai-compatible:{}:{}:{}",
            c.base_url.trim_end_matches('/'),
            c.model,
            self.dim
        )
    }

    fn model(&self) -> String {
        self.client.config.model.clone()
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.client.config.batch) {
            out.extend(
                self.client
                    .request(batch)?
                    .into_iter()
                    .map(|v| fit(v, self.dim)),
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, RemoteConfig};

    fn config(toml_text: &str) -> Result<RemoteConfig, String> {
        let c: RemoteConfig = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        c.validate().map(|()| c)
    }

    #[test]
    fn answers_are_put_in_input_order_and_checked() {
        let v = parse(
            br#"{"data":[{"index":1,"embedding":[0,1]},{"index":0,"embedding":[1,0]}]}"#,
            2,
        )
        .unwrap();
        assert_eq!(v, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
        for bad in [
            &br#"{"data":[{"index":0,"embedding":[1]}]}"#[..],
            br#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
            br#"{"data":[{"index":0,"embedding":[]},{"index":1,"embedding":[1]}]}"#,
            br#"{"error":"no"}"#,
            b"\xff\xfe",
        ] {
            assert!(parse(bad, 2).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn configurations_are_checked() {
        let ok = config("base_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"").unwrap();
        assert_eq!((ok.batch, ok.retries, ok.api_key_secret), (64, 2, None));
        for bad in [
            "base_url = \"file:///etc\"\nmodel = \"m\"",
            "base_url = \"http://h\"\nmodel = \"\"",
            "base_url = \"http://h\"\nmodel = \"m\"\nbatch = 0",
            "base_url = \"http://h\"\nmodel = \"m\"\ntimeout_secs = 0",
            "base_url = \"http://h\"\nmodel = \"m\"\napi_key_secret = \"../x\"",
            "base_url = \"http://h\"\nmodel = \"m\"\napi_key = \"sk-in-the-clear\"",
        ] {
            assert!(config(bad).is_err(), "{bad}");
        }
    }
}
