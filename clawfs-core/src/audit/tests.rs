//! Tests of the audit trail through its public API: chain, rotation, tampering, HMAC, concurrency,
//! per-agent views, search.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn ev(agent: &str, i: u64) -> AuditEvent {
    AuditEvent::new(agent, 100, "create", format!("/workspaces/default/f{i}.md")).bytes(i)
}

/// Writes `n` records dated 2024-02-24 and returns the dir.
fn trail(n: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    for i in 1..=n {
        log.record(ev("kernel-engine", i).at(t("2024-02-24T12:00:00Z")));
    }
    log.flush().unwrap();
    dir
}

fn only_file(dir: &Path) -> std::path::PathBuf {
    let files = list_files(dir).unwrap();
    assert_eq!(files.len(), 1);
    files[0].path.clone()
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut s = lines.join("\n");
    s.push('\n');
    fs::write(path, s).unwrap();
}

fn broken(dir: &Path) -> BrokenRecord {
    let r = verify(dir, None).unwrap();
    match r.broken {
        Some(b) => b,
        None => panic!("intact: {r:?}"),
    }
}

#[test]
fn chain_starts_at_genesis_and_verifies() {
    let dir = trail(3);
    let path = only_file(dir.path());
    assert!(path.ends_with("audit-2024-02-24.jsonl"));
    let l = lines(&path);
    assert_eq!(l.len(), 3);
    let r0 = AuditRecord::parse(l[0].as_bytes()).unwrap();
    let r1 = AuditRecord::parse(l[1].as_bytes()).unwrap();
    assert_eq!((r0.seq, r0.prev.as_str()), (1, GENESIS));
    assert_eq!(r1.prev, line_hash(l[0].as_bytes()));
    let report = verify(dir.path(), None).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 3);
    assert_eq!((report.first_seq, report.last_seq), (Some(1), Some(3)));
    assert!(!report.head_missing && !report.torn_tail);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn chain_continues_over_rotation_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = AuditLog::builder(dir.path())
            .with_max_file_bytes(1000)
            .open()
            .unwrap();
        for i in 0..20 {
            log.record(ev("kernel-engine", i).at(t("2024-02-24T23:59:59Z")));
        }
        for i in 0..5 {
            log.record(ev("kernel-engine", i).at(t("2024-02-25T00:00:01Z")));
        }
    }
    {
        // Reopen: continues the newest file's chain.
        let log = AuditLog::builder(dir.path())
            .with_max_file_bytes(1000)
            .open()
            .unwrap();
        log.record(ev("kernel-engine", 99).at(t("2024-02-25T00:00:02Z")));
        // A clock that went back stays in the current file.
        log.record(ev("kernel-engine", 98).at(t("2024-02-24T00:00:00Z")));
    }
    let files = list_files(dir.path()).unwrap();
    let names: Vec<String> = files.iter().map(AuditFile::name).collect();
    assert!(names.len() >= 4, "{names:?}");
    assert_eq!(names[0], "audit-2024-02-24.jsonl");
    assert_eq!(names[1], "audit-2024-02-24.1.jsonl");
    assert!(names.contains(&"audit-2024-02-25.jsonl".to_string()));
    assert_eq!(names.last().unwrap(), "audit-2024-02-25.1.jsonl");
    for f in &files {
        assert!(
            fs::metadata(&f.path).unwrap().len() < 1000 + 400,
            "{f:?} {}",
            fs::read_to_string(&f.path).unwrap()
        );
    }
    let report = verify(dir.path(), None).unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.records, 27);
    assert_eq!(report.files, files.len());

    // Deleting a whole middle file is a gap.
    fs::remove_file(&files[1].path).unwrap();
    let b = broken(dir.path());
    assert!(matches!(b.kind, BreakKind::Deleted { .. }), "{b}");
}

#[test]
fn edited_record_is_named() {
    // The receipts seed's test: three records, the second edited by hand.
    let dir = trail(3);
    let path = only_file(dir.path());
    let mut l = lines(&path);
    l[1] = l[1].replace("f2.md", "f2.txt");
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!(
        (b.kind.clone(), b.seq, b.line),
        (BreakKind::Edited, Some(2), 2),
        "{b}"
    );
    assert!(b.to_string().contains("record seq 2"), "{b}");
}

#[test]
fn edited_link_and_seq_are_named() {
    let dir = trail(5);
    let path = only_file(dir.path());
    let orig = lines(&path);
    // Changing the prev field of record 3 breaks links at 3 and 4: record 3 is the edited one.
    let mut l = orig.clone();
    let r = AuditRecord::parse(l[2].as_bytes()).unwrap();
    l[2] = l[2].replace(&r.prev, &"1".repeat(64));
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!((b.kind.clone(), b.seq), (BreakKind::Edited, Some(3)), "{b}");
    // Changing the seq of record 3.
    let mut l = orig.clone();
    l[2] = l[2].replace("\"seq\":3,", "\"seq\":9,");
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!((b.kind.clone(), b.line), (BreakKind::Edited, 3), "{b}");
    // The first record's link.
    let mut l = orig;
    l[0] = l[0].replace(GENESIS, &"2".repeat(64));
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!((b.kind.clone(), b.seq), (BreakKind::Edited, Some(1)), "{b}");
}

#[test]
fn deleted_record_is_named() {
    let dir = trail(5);
    let path = only_file(dir.path());
    let mut l = lines(&path);
    l.remove(2);
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!(b.kind, BreakKind::Deleted { first: 3, last: 3 }, "{b}");
    assert_eq!((b.seq, b.line), (Some(4), 3));
    let mut l = lines(&path);
    l.remove(1);
    write_lines(&path, &l);
    assert_eq!(
        broken(dir.path()).kind,
        BreakKind::Deleted { first: 2, last: 3 }
    );
}

#[test]
fn reordered_record_is_named() {
    let dir = trail(5);
    let path = only_file(dir.path());
    let orig = lines(&path);
    // Swapped neighbours.
    let mut l = orig.clone();
    l.swap(1, 2);
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!(
        (b.kind.clone(), b.seq, b.line),
        (BreakKind::Reordered, Some(3), 2),
        "{b}"
    );
    // A record moved to the end.
    let mut l = orig.clone();
    let moved = l.remove(1);
    l.push(moved);
    write_lines(&path, &l);
    assert_eq!(broken(dir.path()).kind, BreakKind::Reordered);
    // A record moved earlier: seq goes backwards after the jump is explained.
    let mut l = orig;
    let moved = l.remove(3);
    l.insert(0, moved);
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert!(matches!(b.kind, BreakKind::Reordered), "{b}");
}

#[test]
fn unparsable_line_is_named() {
    let dir = trail(3);
    let path = only_file(dir.path());
    let mut l = lines(&path);
    l[1] = "{not json".into();
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!((b.kind, b.seq, b.line), (BreakKind::Unparsable, None, 2));
}

#[test]
fn torn_last_line_is_reported_then_cut_on_open() {
    let dir = trail(3);
    let path = only_file(dir.path());
    let good = fs::read(&path).unwrap();
    let mut torn = good.clone();
    torn.extend_from_slice(b"{\"seq\":4,\"time\":\"2024-02-");
    fs::write(&path, &torn).unwrap();
    let r = verify(dir.path(), None).unwrap();
    assert!(r.is_intact() && r.torn_tail, "{r:?}");
    assert_eq!(r.records, 3);

    let log = AuditLog::open(dir.path()).unwrap();
    assert_eq!(
        fs::read(&path).unwrap(),
        good,
        "the torn tail is cut on open"
    );
    log.record(ev("kernel-engine", 4).at(t("2024-02-24T12:00:01Z")));
    log.flush().unwrap();
    drop(log);
    let r = verify(dir.path(), None).unwrap();
    assert!(r.is_intact() && !r.torn_tail, "{r:?}");
    assert_eq!(r.records, 5);
    let recovered = search(dir.path(), &Filter::default())
        .unwrap()
        .map(Result::unwrap)
        .find(|r| r.event.operation == "audit:recovered")
        .expect("a recovered record");
    assert_eq!(recovered.seq, 4);
    assert_eq!(recovered.event.agent, SYSTEM_AGENT);
}

#[test]
fn hmac_signs_and_detects_rebuilt_chain() {
    let key = [9u8; 32];
    let dir = tempfile::tempdir().unwrap();
    {
        let log = AuditLog::open(dir.path()).unwrap();
        log.record(ev("kernel-engine", 1));
        log.set_hmac_key(Some(key));
        for i in 2..=5 {
            log.record(ev("kernel-engine", i));
        }
        log.set_hmac_key(None);
        log.record(ev("kernel-engine", 6));
    }
    let r = verify(dir.path(), Some(&key)).unwrap();
    assert!(r.is_intact(), "{r:?}");
    // hmac-on, 4 records, hmac-off are signed.
    assert_eq!((r.records, r.hmac_checked, r.hmac_unchecked), (8, 6, 0));
    // Without the key the signatures are not checked.
    let r = verify(dir.path(), None).unwrap();
    assert_eq!((r.hmac_checked, r.hmac_unchecked), (0, 6));
    // Another key: a different fingerprint, so unchecked rather than bad.
    let r = verify(dir.path(), Some(&[1u8; 32])).unwrap();
    assert!(r.is_intact() && r.hmac_unchecked == 6);

    // Someone without the key edits record 4 and rebuilds the chain after it.
    let path = only_file(dir.path());
    let mut l = lines(&path);
    l[3] = l[3].replace("f3.md", "fX.md");
    for i in 4..l.len() {
        let old = AuditRecord::parse(l[i].as_bytes()).unwrap().prev;
        let new = line_hash(l[i - 1].as_bytes());
        l[i] = l[i].replace(&old, &new);
    }
    write_lines(&path, &l);
    assert!(
        verify(dir.path(), None).unwrap().is_intact(),
        "chain alone cannot tell"
    );
    let b = verify(dir.path(), Some(&key)).unwrap().broken.unwrap();
    assert_eq!(
        (b.kind.clone(), b.seq),
        (BreakKind::BadHmac, Some(4)),
        "{b}"
    );

    // Stripping the signature is noticed even without the key.
    let mut l = lines(&path);
    let cut = l[4].find(",\"hmac\":").unwrap();
    l[4] = format!("{}}}", &l[4][..cut]);
    write_lines(&path, &l);
    let b = broken(dir.path());
    assert_eq!((b.kind, b.seq), (BreakKind::MissingHmac, Some(5)));
}

#[test]
fn many_threads_all_records_chain() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(
        AuditLog::builder(dir.path())
            .with_capacity(64)
            .open()
            .unwrap(),
    );
    let threads: Vec<_> = (0..8)
        .map(|th| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    log.record(
                        AuditEvent::new(format!("agent-{th}"), th, "write", format!("/p/{i}"))
                            .bytes(i),
                    );
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    log.flush().unwrap();
    let r = verify(dir.path(), None).unwrap();
    assert!(r.is_intact(), "{r:?}");
    assert_eq!(r.records, 16_000);
    let mut seen = std::collections::HashSet::new();
    for rec in search(dir.path(), &Filter::default()).unwrap() {
        let rec = rec.unwrap();
        assert!(seen.insert((rec.event.pid, rec.event.bytes)));
    }
    assert_eq!(seen.len(), 16_000);
    assert_eq!(log.lost(), 0);
}

#[test]
fn per_agent_views() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    let agents = dir.path().join("agents");
    fs::create_dir_all(agents.join("alpha")).unwrap();
    fs::create_dir_all(agents.join("gamma")).unwrap();
    // An agent pointing its logs elsewhere gets nothing written there.
    let elsewhere = dir.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, agents.join("gamma/logs")).unwrap();
    {
        let log = AuditLog::builder(&audit)
            .with_agent_logs(&agents)
            .open()
            .unwrap();
        let day = t("2024-02-24T08:00:00Z");
        log.record(ev("alpha", 1).at(day));
        log.record(ev("beta", 2).at(day));
        log.record(ev("admin", 3).at(day));
        log.record(ev("user:1000", 4).at(day));
        log.record(ev("gamma", 5).at(day));
        log.record(ev("alpha", 6).at(t("2024-02-25T08:00:00Z")));
        log.flush().unwrap();
    }
    let main = lines(&list_files(&audit).unwrap()[0].path);
    let a1 = agents.join("alpha/logs/agent-2024-02-24.log");
    assert_eq!(lines(&a1), vec![main[0].clone()]);
    assert_eq!(
        fs::metadata(&a1).unwrap().permissions().mode() & 0o777,
        0o640
    );
    let a2 = lines(&agents.join("alpha/logs/agent-2024-02-25.log"));
    assert_eq!(a2.len(), 1);
    assert!(a2[0].contains("\"seq\":6,"));
    assert!(
        !agents.join("beta").exists(),
        "no directory for an unknown agent"
    );
    assert!(!agents.join("admin").exists() && !agents.join("user:1000").exists());
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert!(verify(&audit, None).unwrap().is_intact());
}

#[test]
fn search_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = AuditLog::open(dir.path()).unwrap();
        log.record(ev("alpha", 1).at(t("2024-02-23T12:00:00Z")));
        log.record(
            AuditEvent::new("alpha", 1, "open", "/agents/beta/state.json")
                .denied(13, "RULE-001", "agents write only their own directory")
                .at(t("2024-02-24T12:00:00Z")),
        );
        log.record(
            AuditEvent::new("beta", 2, "rename", "/workspaces/default/a")
                .target("/workspaces/other/a")
                .at(t("2024-02-24T13:00:00Z")),
        );
        log.record(ev("beta", 4).at(t("2024-02-25T12:00:00Z")));
    }
    let find = |f: Filter| -> Vec<u64> {
        search(dir.path(), &f)
            .unwrap()
            .map(|r| r.unwrap().seq)
            .collect()
    };
    assert_eq!(find(Filter::default()), [1, 2, 3, 4]);
    let agent = |a: &str| Filter {
        agent: Some(a.into()),
        ..Filter::default()
    };
    assert_eq!(find(agent("alpha")), [1, 2]);
    assert_eq!(
        find(Filter {
            denied_only: true,
            ..Filter::default()
        }),
        [2]
    );
    let under = |p: &str| Filter {
        path_prefix: Some(p.into()),
        ..Filter::default()
    };
    assert_eq!(find(under("/workspaces/other")), [3]);
    assert_eq!(find(under("/workspaces/default")), [1, 3, 4]);
    assert_eq!(find(under("/agents")), [2]);
    let since = Filter {
        since: Some(t("2024-02-24T12:30:00Z")),
        ..Filter::default()
    };
    assert_eq!(find(since), [3, 4]);
    assert_eq!(
        find(Filter {
            limit: Some(2),
            ..agent("beta")
        }),
        [3, 4]
    );
    assert_eq!(
        find(Filter {
            limit: Some(1),
            ..agent("beta")
        }),
        [3]
    );

    let last: Vec<u64> = tail(dir.path(), 3)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(last, [2, 3, 4]);
    assert_eq!(tail(dir.path(), 100).unwrap().len(), 4);
    assert!(tail(dir.path(), 0).unwrap().is_empty());
    let empty = tempfile::tempdir().unwrap();
    assert!(tail(&empty.path().join("none"), 5).unwrap().is_empty());
    assert_eq!(
        search(&empty.path().join("none"), &Filter::default())
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn second_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _log = AuditLog::open(dir.path()).unwrap();
    assert!(matches!(
        AuditLog::open(dir.path()),
        Err(AuditError::Locked(_))
    ));
}

#[test]
fn empty_trail_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let r = verify(&dir.path().join("missing"), None).unwrap();
    assert!(r.is_intact());
    assert_eq!((r.files, r.records), (0, 0));
}
