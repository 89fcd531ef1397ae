//! Audit events and records, and their one-line JSON form (core layer, no I/O).
//!
//! A record line is the JSON object
//! `{"seq","time","agent","pid","operation","path","target"?,"bytes"?,"result","errno"?,"rule"?,"reason"?,"prev","hmac"?}`
//! in exactly that order, absent optional fields omitted, no whitespace. `prev` is the SHA-256 of the
//! previous record's full line (without its newline); `hmac`, when present, is the HMAC-SHA256 of the
//! line as it would be without the `hmac` field, which is always last.

use std::borrow::Cow;
use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// `prev` of the first record ever written: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Agent name used for records the audit log writes about itself (`audit:*` operations). It holds a
/// `:`, so it can never be an agent name.
pub const SYSTEM_AGENT: &str = "system:clawfs";

/// What became of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It was allowed and succeeded.
    Ok,
    /// The policy (or POSIX permissions) refused it.
    Denied,
    /// It was allowed but failed.
    Error,
}

impl Outcome {
    /// The lowercase name used on disk.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing the daemon reports: an operation that reached it, and what was decided.
///
/// Build one with [`AuditEvent::new`] and the chaining setters, then hand it to
/// [`AuditLog::record`](super::AuditLog::record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When the operation happened (UTC, stored with millisecond precision).
    #[serde(serialize_with = "ser_time", deserialize_with = "de_time")]
    pub time: DateTime<Utc>,
    /// Who called: an agent name, `admin`, `user:<uid>`, or [`SYSTEM_AGENT`].
    pub agent: String,
    /// The calling process.
    pub pid: u32,
    /// What was done: `open`, `create`, `unlink`, `rename`, `setattr`, `setxattr`, `read`/`write`
    /// (summaries per handle), `tool:<name>`, `vault:get`, …; `audit:*` for the log's own records.
    pub operation: Cow<'static, str>,
    /// Namespace path, e.g. `/workspaces/default/notes.md`.
    pub path: String,
    /// Second path of a rename or link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Bytes read or written, when it applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Allowed and done, refused, or failed.
    pub result: Outcome,
    /// The errno returned to the caller, when not success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// The policy rule that decided, e.g. `RULE-001`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// One sentence saying why, for refusals and failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn ser_time<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

fn de_time<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    let s = Cow::<'de, str>::deserialize(d)?;
    DateTime::parse_from_rfc3339(&s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(serde::de::Error::custom)
}

impl AuditEvent {
    /// A successful operation happening now.
    pub fn new(
        agent: impl Into<String>,
        pid: u32,
        operation: impl Into<Cow<'static, str>>,
        path: impl Into<String>,
    ) -> AuditEvent {
        AuditEvent {
            time: Utc::now(),
            agent: agent.into(),
            pid,
            operation: match operation.into() {
                Cow::Owned(op) => Cow::Owned(bounded_to(op, OPERATION_LIMIT)),
                op => op,
            },
            path: bounded(path.into()),
            target: None,
            bytes: None,
            result: Outcome::Ok,
            errno: None,
            rule: None,
            reason: None,
        }
    }

    /// Sets the second path (rename, link).
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(bounded(target.into()));
        self
    }

    /// Sets the byte count.
    pub fn bytes(mut self, bytes: u64) -> Self {
        self.bytes = Some(bytes);
        self
    }

    /// Marks the operation refused by `rule`, with the errno returned and a one-sentence reason.
    pub fn denied(
        mut self,
        errno: i32,
        rule: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        self.result = Outcome::Denied;
        self.errno = Some(errno);
        self.rule = Some(rule.into());
        self.reason = Some(bounded(reason.into()));
        self
    }

    /// Marks the operation failed with `errno`.
    pub fn failed(mut self, errno: i32) -> Self {
        self.result = Outcome::Error;
        self.errno = Some(errno);
        self
    }

    /// Sets the one-sentence reason.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(bounded(reason.into()));
        self
    }

    /// Sets the time (for tests and for events reported after the fact).
    pub fn at(mut self, time: DateTime<Utc>) -> Self {
        self.time = time;
        self
    }

    /// Whether `agent` names an agent (not `admin`, `user:<uid>` or the system): the
    /// `[a-z0-9-]+` rule.
    pub fn is_agent(&self) -> bool {
        is_agent_name(&self.agent)
    }
}

/// Whether `s` follows the agent-name rule (`[a-z0-9-]+`, ≤ 64 bytes, no leading or trailing
/// hyphen) and is not `admin`.
pub fn is_agent_name(s: &str) -> bool {
    clawfs_store::names::check_system_name(std::ffi::OsStr::new(s)).is_ok() && s != "admin"
}

/// An event as written: its place in the chain and the chain links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Position in the trail, 1 for the first record ever, +1 per record across all files.
    pub seq: u64,
    /// What happened.
    pub event: AuditEvent,
    /// Hex SHA-256 of the previous record's line, [`GENESIS`] for the first.
    pub prev: String,
    /// Hex HMAC-SHA256 of this line without the `hmac` field, when a key was set.
    pub hmac: Option<String>,
}

/// The on-disk shape, borrowed, so that field order is fixed by this declaration.
#[derive(Serialize)]
struct WireRef<'a> {
    seq: u64,
    #[serde(flatten)]
    event: &'a AuditEvent,
    prev: &'a str,
}

#[derive(Deserialize)]
struct Wire {
    seq: u64,
    #[serde(flatten)]
    event: AuditEvent,
    prev: String,
    #[serde(default)]
    hmac: Option<String>,
}

type HmacSha256 = Hmac<Sha256>;

/// The hmac field as it is appended: `,"hmac":"` + 64 hex + `"}`.
const HMAC_PREFIX: &[u8] = b",\"hmac\":\"";
const HMAC_SUFFIX_LEN: usize = HMAC_PREFIX.len() + 64 + 2;

impl AuditRecord {
    /// Writes this record's line (no newline) into `out`, which is cleared first. With a key the
    /// `hmac` field is computed and appended; `self.hmac` is ignored.
    pub fn encode_into(&self, key: Option<&[u8; 32]>, out: &mut Vec<u8>) {
        out.clear();
        let wire = WireRef {
            seq: self.seq,
            event: &self.event,
            prev: &self.prev,
        };
        serde_json::to_writer(&mut *out, &wire).expect("serialising to a Vec cannot fail");
        if let Some(key) = key {
            let tag = hmac_hex(key, out);
            out.pop(); // the closing brace
            out.extend_from_slice(HMAC_PREFIX);
            out.extend_from_slice(tag.as_bytes());
            out.extend_from_slice(b"\"}");
        }
    }

    /// The record's line as stored (no newline), with its stored `hmac` if any. For a record read
    /// from a trail this gives back the line's bytes.
    pub fn to_line(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(320);
        self.encode_into(None, &mut out);
        if let Some(tag) = &self.hmac {
            out.pop();
            out.extend_from_slice(HMAC_PREFIX);
            out.extend_from_slice(tag.as_bytes());
            out.extend_from_slice(b"\"}");
        }
        out
    }

    /// Parses one line (without its newline).
    pub fn parse(line: &[u8]) -> Result<AuditRecord, serde_json::Error> {
        let w: Wire = serde_json::from_slice(line)?;
        Ok(AuditRecord {
            seq: w.seq,
            event: w.event,
            prev: w.prev,
            hmac: w.hmac,
        })
    }
}

/// Hex SHA-256 of a record line: the next record's `prev`.
pub fn line_hash(line: &[u8]) -> String {
    hex::encode(Sha256::digest(line))
}

/// Hex HMAC-SHA256 of `msg` under `key`.
pub(super) fn hmac_hex(key: &[u8; 32], msg: &[u8]) -> String {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(msg);
    hex::encode(mac.finalize().into_bytes())
}

/// Whether `tag_hex` is the HMAC-SHA256 of `msg` under `key` (compared in constant time).
pub(super) fn hmac_matches(key: &[u8; 32], msg: &[u8], tag_hex: &str) -> bool {
    let Ok(tag) = hex::decode(tag_hex) else {
        return false;
    };
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(msg);
    mac.verify_slice(&tag).is_ok()
}

/// Checks the `hmac` field of a line against `key`: `Some(true)` when it matches, `Some(false)`
/// when it does not (or is malformed), `None` when the line carries no `hmac` field.
pub fn check_line_hmac(line: &[u8], key: &[u8; 32]) -> Option<bool> {
    if line.len() < HMAC_SUFFIX_LEN + 1 {
        return None;
    }
    let cut = line.len() - HMAC_SUFFIX_LEN;
    let suffix = &line[cut..];
    if !suffix.starts_with(HMAC_PREFIX) || !suffix.ends_with(b"\"}") {
        return None;
    }
    let tag = &suffix[HMAC_PREFIX.len()..HMAC_PREFIX.len() + 64];
    let mut body = Vec::with_capacity(cut + 1);
    body.extend_from_slice(&line[..cut]);
    body.push(b'}');
    let Ok(tag) = hex::decode(tag) else {
        return Some(false);
    };
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(&body);
    Some(mac.verify_slice(&tag).is_ok())
}

/// A short public fingerprint of an HMAC key (16 hex digits), written in the `audit:hmac-on`
/// record so that `verify` knows which key a stretch of the trail was signed with.
pub fn key_fingerprint(key: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(b"clawfs audit key id\0");
    h.update(key);
    hex::encode(&h.finalize()[..8])
}

/// The longest `target` or `reason` a record keeps, bytes: a message that echoes what a caller
/// sent (a 4 MiB request) must not make the trail grow by as much per call.
pub const TEXT_LIMIT: usize = 4096;

/// The longest `operation` a record keeps, bytes: some carry a name the caller chose (`tool:…`).
pub const OPERATION_LIMIT: usize = 256;

/// `text`, cut at [`TEXT_LIMIT`] bytes (on a character boundary) with how much was left out.
fn bounded(text: String) -> String {
    bounded_to(text, TEXT_LIMIT)
}

/// `text`, cut at `limit` bytes (on a character boundary) with how much was left out.
fn bounded_to(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let total = text.len();
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("… ({} more bytes)", total - cut));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> AuditRecord {
        AuditRecord {
            seq: 7,
            event: AuditEvent::new(
                "kernel-engine",
                42,
                "open",
                "/workspaces/default/a \"b\".md",
            )
            .bytes(4096),
            prev: GENESIS.to_string(),
            hmac: None,
        }
    }

    #[test]
    fn field_order_is_fixed_and_round_trips() {
        let r = rec();
        let mut line = Vec::new();
        r.encode_into(None, &mut line);
        let s = std::str::from_utf8(&line).unwrap();
        assert!(s.starts_with("{\"seq\":7,\"time\":\""), "{s}");
        let order = [
            "\"seq\"",
            "\"time\"",
            "\"agent\"",
            "\"pid\"",
            "\"operation\"",
            "\"path\"",
            "\"bytes\"",
            "\"result\"",
            "\"prev\"",
        ];
        let pos: Vec<usize> = order.iter().map(|k| s.find(k).unwrap()).collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{s}");
        assert!(!s.contains("errno") && !s.contains("hmac"));
        let mut back = AuditRecord::parse(&line).unwrap();
        // Time is stored to the millisecond.
        back.event.time = r.event.time;
        assert_eq!(back.seq, 7);
        assert_eq!(back.event.path, r.event.path);
        assert_eq!(back.event.bytes, Some(4096));
    }

    #[test]
    fn hmac_is_last_and_checks() {
        let key = [7u8; 32];
        let mut line = Vec::new();
        rec().encode_into(Some(&key), &mut line);
        let s = std::str::from_utf8(&line).unwrap();
        assert!(
            s.contains(",\"prev\":\"") && s.contains(",\"hmac\":\""),
            "{s}"
        );
        assert_eq!(check_line_hmac(&line, &key), Some(true));
        assert_eq!(check_line_hmac(&line, &[8u8; 32]), Some(false));
        let parsed = AuditRecord::parse(&line).unwrap();
        assert_eq!(parsed.hmac.as_deref().map(str::len), Some(64));
        assert_eq!(parsed.to_line(), line);
        let mut edited = line.clone();
        let at = s.find("4096").unwrap();
        edited[at] = b'5';
        assert_eq!(check_line_hmac(&edited, &key), Some(false));
        let mut plain = Vec::new();
        rec().encode_into(None, &mut plain);
        assert_eq!(check_line_hmac(&plain, &key), None);
    }

    #[test]
    fn agent_names() {
        assert!(is_agent_name("kernel-engine"));
        assert!(!is_agent_name("admin"));
        assert!(!is_agent_name("user:1000"));
        assert!(!is_agent_name(SYSTEM_AGENT));
        assert!(!is_agent_name("../x"));
    }
}
