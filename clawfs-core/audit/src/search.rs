//! Reading the audit trail: filtered search and tail (core layer).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, NaiveDate, Utc};

use super::files::{self, AuditFile, Lines};
use super::record::{AuditRecord, Outcome};
use super::AuditError;

/// Which records [`search`] yields. The default matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this caller (`kernel-engine`, `admin`, `user:1000`).
    pub agent: Option<String>,
    /// Only records whose path or target is this path or lies under it (`/workspaces/default`
    /// matches `/workspaces/default/a.md`, not `/workspaces/default2`).
    pub path_prefix: Option<String>,
    /// Only records at or after this time (see [`parse_since`]).
    pub since: Option<DateTime<Utc>>,
    /// Only refusals.
    pub denied_only: bool,
    /// At most this many records (the oldest that match).
    pub limit: Option<usize>,
}

impl Filter {
    /// Whether `rec` passes every condition except `limit`.
    pub fn matches(&self, rec: &AuditRecord) -> bool {
        let ev = &rec.event;
        if self.agent.as_deref().is_some_and(|a| a != ev.agent) {
            return false;
        }
        if self.denied_only && ev.result != Outcome::Denied {
            return false;
        }
        if self.since.is_some_and(|t| ev.time < t) {
            return false;
        }
        if let Some(prefix) = &self.path_prefix {
            let under = |p: &str| path_under(p, prefix);
            if !under(&ev.path) && !ev.target.as_deref().is_some_and(under) {
                return false;
            }
        }
        true
    }
}

fn path_under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Parses a `--since` value relative to `now`: RFC 3339 (`2024-02-24T12:00:00Z`), a UTC date
/// (`2024-02-24`), or an age (`30s`, `10m`, `2h`, `1d`, `1w`).
pub fn parse_since(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, AuditError> {
    let s = s.trim();
    let bad = || AuditError::BadTime(s.to_string());
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).ok_or_else(bad)?.and_utc());
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = s.split_at(split);
    let n: i64 = num.parse().map_err(|_| bad())?;
    let age = match unit {
        "s" => Duration::try_seconds(n),
        "m" => Duration::try_minutes(n),
        "h" => Duration::try_hours(n),
        "d" => Duration::try_days(n),
        "w" => Duration::try_weeks(n),
        _ => None,
    }
    .ok_or_else(bad)?;
    now.checked_sub_signed(age).ok_or_else(bad)
}

/// The records of the trail in `dir` that match `filter`, oldest first. Lines that are not records
/// come out as errors (and the iteration goes on); a torn last line is skipped.
pub fn search(dir: &Path, filter: &Filter) -> Result<Search, AuditError> {
    let mut files = files::list(dir)?;
    if let Some(since) = filter.since {
        // A file holds no record dated after its own date, so older files cannot match.
        let day = since.date_naive();
        files.retain(|f| f.date >= day);
    }
    Ok(Search {
        files: files.into_iter(),
        current: None,
        filter: filter.clone(),
        yielded: 0,
    })
}

/// Iterator returned by [`search`].
pub struct Search {
    files: std::vec::IntoIter<AuditFile>,
    current: Option<(PathBuf, Lines)>,
    filter: Filter,
    yielded: usize,
}

impl Iterator for Search {
    type Item = Result<AuditRecord, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.filter.limit.is_some_and(|l| self.yielded >= l) {
            return None;
        }
        loop {
            let Some((path, lines)) = &mut self.current else {
                let f = self.files.next()?;
                match Lines::open(&f.path) {
                    Ok(lines) => self.current = Some((f.path, lines)),
                    Err(e) => return Some(Err(e)),
                }
                continue;
            };
            let line = match lines.next() {
                None => {
                    self.current = None;
                    continue;
                }
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(line)) => line,
            };
            if !line.terminated {
                continue;
            }
            match AuditRecord::parse(&line.bytes) {
                Ok(rec) if self.filter.matches(&rec) => {
                    self.yielded += 1;
                    return Some(Ok(rec));
                }
                Ok(_) => {}
                Err(source) => {
                    return Some(Err(AuditError::Parse {
                        file: path.clone(),
                        line: line.number,
                        source,
                    }))
                }
            }
        }
    }
}

/// The last `n` records of the trail, oldest first; a line that is not a record is an error in its
/// place. Reads only the ends of the newest files.
pub fn tail(dir: &Path, n: usize) -> Result<Vec<Result<AuditRecord, AuditError>>, AuditError> {
    let mut out: Vec<Result<AuditRecord, AuditError>> = Vec::new();
    for f in files::list(dir)?.iter().rev() {
        if out.len() >= n {
            break;
        }
        let (lines, _) = files::last_lines(&f.path, n - out.len())?;
        let mut batch: Vec<Result<AuditRecord, AuditError>> = lines
            .iter()
            .map(|l| {
                AuditRecord::parse(l).map_err(|source| AuditError::Parse {
                    file: f.path.clone(),
                    // Line numbers would need a full read; 0 means "near the end".
                    line: 0,
                    source,
                })
            })
            .collect();
        batch.append(&mut out);
        out = batch;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_forms() {
        let now = DateTime::parse_from_rfc3339("2024-02-24T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |s: &str| parse_since(s, now).unwrap().to_rfc3339();
        assert_eq!(at("10m"), "2024-02-24T11:50:00+00:00");
        assert_eq!(at("2h"), "2024-02-24T10:00:00+00:00");
        assert_eq!(at("1d"), "2024-02-23T12:00:00+00:00");
        assert_eq!(at("30s"), "2024-02-24T11:59:30+00:00");
        assert_eq!(at("1w"), "2024-02-17T12:00:00+00:00");
        assert_eq!(at("2024-02-20"), "2024-02-20T00:00:00+00:00");
        assert_eq!(at("2024-02-20T01:02:03+01:00"), "2024-02-20T00:02:03+00:00");
        for bad in [
            "",
            "m",
            "10",
            "10y",
            "-1h",
            "yesterday",
            "99999999999999999999d",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn path_prefix_is_by_component() {
        assert!(path_under(
            "/workspaces/default/a.md",
            "/workspaces/default"
        ));
        assert!(path_under("/workspaces/default", "/workspaces/default/"));
        assert!(!path_under("/workspaces/default2/a", "/workspaces/default"));
        assert!(path_under("/anything", "/"));
    }
}
