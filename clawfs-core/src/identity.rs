//! Agent identity files (P1.4 §5): the initial document and its checksum.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The checksum of an identity document: `sha256:` + hex SHA-256 of its canonical form (compact
/// JSON, keys sorted, without the `checksum` field).
pub fn checksum(doc: &Value) -> String {
    let mut doc = doc.clone();
    if let Some(obj) = doc.as_object_mut() {
        obj.remove("checksum");
    }
    // serde_json's map is a BTreeMap here, so keys serialise sorted: the form is canonical.
    let canonical = serde_json::to_string(&doc).expect("a Value serialises");
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    )
}

/// Whether a document's `checksum` field matches its content.
pub fn verify(doc: &Value) -> bool {
    doc.get("checksum").and_then(Value::as_str) == Some(checksum(doc).as_str())
}

/// A fresh identity document for `agent`, created at `now` (RFC 3339), with its checksum.
pub fn new_identity(agent: &str, now: &str) -> Value {
    let mut doc = json!({
        "agent_id": agent,
        "version": 1,
        "created_at": now,
        "updated_at": now,
        "state": {
            "current_phase": null,
            "current_task": null,
            "last_checkpoint": null,
            "status": "idle"
        },
        "memory": { "learned_patterns": [], "heuristics": [] },
        "history": {
            "completed_tasks": [],
            "failed_tasks": [],
            "total_executions": 0,
            "success_rate": null
        },
        "performance": {
            "avg_execution_time_ms": null,
            "peak_memory_mb": null,
            "last_benchmark": null
        }
    });
    let sum = checksum(&doc);
    doc["checksum"] = Value::String(sum);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_detects_edits() {
        let mut doc = new_identity("fs-engine", "2026-01-01T00:00:00Z");
        assert!(verify(&doc));
        doc["history"]["total_executions"] = json!(5);
        assert!(!verify(&doc));
    }
}
