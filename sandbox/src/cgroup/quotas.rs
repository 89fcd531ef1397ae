//! The cgroup limits of an agent's runs, from `<store>/system/cgroup/quotas.json`:
//! `{"defaults": {KEY: VALUE, …}, "agents": {NAME: {KEY: VALUE, …}}}`, the agent's entries
//! overriding the defaults. Values are strings or numbers; `null` removes a default. A missing
//! file means no limits; a malformed one is an error (quotas are never silently dropped).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{check_limit_key, CgroupError};

/// Where a store keeps its quotas, relative to the store.
pub const QUOTAS_FILE: &str = "system/cgroup/quotas.json";

/// Why an agent's quotas could not be read.
#[derive(Debug, thiserror::Error)]
pub enum QuotasError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The quotas file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The file is not what it must be.
    #[error("{}: {source}", path.display())]
    Invalid {
        /// The quotas file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: InvalidQuotas,
    },
}

/// What is wrong with a quotas document.
#[derive(Debug, thiserror::Error)]
pub enum InvalidQuotas {
    /// Not JSON.
    #[error("not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A section that must be an object is not (`defaults`, `agents`, `agents.NAME`).
    #[error("{0} must be an object")]
    NotAnObject(String),
    /// A key that is no limit ClawFS sets.
    #[error("{section}: {source}")]
    Key {
        /// The section it is in.
        section: String,
        /// Why the key is refused.
        #[source]
        source: CgroupError,
    },
    /// A value that is neither a string nor a number nor `null`.
    #[error("{0} must be a string or a number")]
    Value(String),
}

/// The limits for `agent` in the store at `store`.
pub fn load_quotas(store: &Path, agent: &str) -> Result<BTreeMap<String, String>, QuotasError> {
    let path = store.join(QUOTAS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(QuotasError::Read { path, source }),
    };
    parse_quotas(&text, agent).map_err(|source| QuotasError::Invalid { path, source })
}

/// The limits for `agent` in quotas.json text (see [`load_quotas`]).
pub fn parse_quotas(text: &str, agent: &str) -> Result<BTreeMap<String, String>, InvalidQuotas> {
    let doc: Value = serde_json::from_str(text)?;
    let mut limits = BTreeMap::new();
    let mut merge = |section: Option<&Value>, what: &str| -> Result<(), InvalidQuotas> {
        let Some(section) = section else {
            return Ok(());
        };
        let map = section
            .as_object()
            .ok_or_else(|| InvalidQuotas::NotAnObject(what.to_string()))?;
        for (key, value) in map {
            check_limit_key(key).map_err(|source| InvalidQuotas::Key {
                section: what.to_string(),
                source,
            })?;
            match value {
                Value::String(s) => {
                    limits.insert(key.clone(), s.clone());
                }
                Value::Number(n) => {
                    limits.insert(key.clone(), n.to_string());
                }
                Value::Null => {
                    limits.remove(key);
                }
                _ => return Err(InvalidQuotas::Value(format!("{what}.{key}"))),
            }
        }
        Ok(())
    };
    merge(doc.get("defaults"), "defaults")?;
    if let Some(agents) = doc.get("agents") {
        let agents = agents
            .as_object()
            .ok_or_else(|| InvalidQuotas::NotAnObject("agents".to_string()))?;
        merge(agents.get(agent), &format!("agents.{agent}"))?;
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_merge_defaults_and_agent_overrides() {
        let text = r#"{
            "version": 1,
            "defaults": {"memory.max": "1073741824", "pids.max": 512, "cpu.max": "100000 100000"},
            "agents": {"a": {"pids.max": "64", "cpu.max": null}, "b": {}}
        }"#;
        let a = parse_quotas(text, "a").unwrap();
        assert_eq!(a.get("memory.max").map(String::as_str), Some("1073741824"));
        assert_eq!(a.get("pids.max").map(String::as_str), Some("64"));
        assert_eq!(a.get("cpu.max"), None);
        let c = parse_quotas(text, "c").unwrap();
        assert_eq!(c.get("pids.max").map(String::as_str), Some("512"));
        assert_eq!(c.len(), 3);
        assert!(matches!(
            parse_quotas("{", "a"),
            Err(InvalidQuotas::Json(_))
        ));
        assert!(matches!(
            parse_quotas(r#"{"defaults": {"cgroup.procs": "1"}}"#, "a"),
            Err(InvalidQuotas::Key { .. })
        ));
        assert!(matches!(
            parse_quotas(r#"{"defaults": {"memory.max": true}}"#, "a"),
            Err(InvalidQuotas::Value(_))
        ));
        assert!(matches!(
            parse_quotas(r#"{"agents": []}"#, "a"),
            Err(InvalidQuotas::NotAnObject(_))
        ));
        assert!(parse_quotas("{}", "a").unwrap().is_empty());
    }
}
