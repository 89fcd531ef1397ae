//! The one clock of ClawFS's documents.

/// RFC 3339 "now", seconds precision, UTC: what every document ClawFS writes records.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
