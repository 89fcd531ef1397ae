//! `specs/` serves only documents whose SHA-256 matches `specs/signatures.json`: a document
//! edited in the store behind ClawFS's back, or never signed, is refused.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use sha2::{Digest, Sha256};

/// The signatures file, relative to `specs/`.
pub const SIGNATURES: &str = "signatures.json";

/// What a verdict was computed for: the document's and the signatures' change times, and size.
type Version = (i64, i64, u64);

/// Whether a document may be served, or why not.
type Verdict = Result<(), String>;

/// Remembers verdicts per document version so a document is hashed once per change.
#[derive(Default)]
pub struct SpecChecker {
    verdicts: Mutex<HashMap<String, (Version, Verdict)>>,
}

impl SpecChecker {
    /// Whether `rel` (relative to `specs/`) may be served. `specs_dir` is the backing `specs/`.
    pub fn check(&self, specs_dir: &Path, rel: &str) -> Result<(), String> {
        if rel == SIGNATURES {
            return Ok(());
        }
        let path = specs_dir.join(rel);
        let md = std::fs::metadata(&path).map_err(|e| format!("{rel}: {e}"))?;
        let sigs_md = std::fs::metadata(specs_dir.join(SIGNATURES))
            .map_err(|e| format!("{SIGNATURES}: {e}"))?;
        use std::os::unix::fs::MetadataExt;
        let version: Version = (
            md.mtime_nsec() ^ md.mtime(),
            sigs_md.mtime_nsec() ^ sigs_md.mtime(),
            md.size(),
        );
        let mut verdicts = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, v)) = verdicts.get(rel) {
            if *seen == version {
                return v.clone();
            }
        }
        let verdict = verify(specs_dir, rel);
        verdicts.insert(rel.to_string(), (version, verdict.clone()));
        verdict
    }
}

fn verify(specs_dir: &Path, rel: &str) -> Result<(), String> {
    let sigs: serde_json::Value = serde_json::from_slice(
        &std::fs::read(specs_dir.join(SIGNATURES)).map_err(|e| format!("{SIGNATURES}: {e}"))?,
    )
    .map_err(|e| format!("{SIGNATURES} is not valid JSON: {e}"))?;
    let expected = sigs["signatures"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["path"] == rel)
        .and_then(|s| s["sha256"].as_str())
        .ok_or_else(|| format!("{rel} is not signed in {SIGNATURES}"))?;
    let mut file = std::fs::File::open(specs_dir.join(rel)).map_err(|e| format!("{rel}: {e}"))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|e| format!("{rel}: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let actual = hex::encode(hasher.finalize());
    if actual != expected {
        return Err(format!(
            "{rel} has SHA-256 {actual}, but {SIGNATURES} signs {expected}: not served"
        ));
    }
    Ok(())
}
