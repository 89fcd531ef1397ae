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
    // Another key: the records are unchecked rather than bad (another fingerprint), but the
    // checkpoint cannot be checked with it, so the trail is not vouched for.
    let r = verify(dir.path(), Some(&[1u8; 32])).unwrap();
    assert_eq!(r.hmac_unchecked, 6);
    assert_eq!(r.broken.unwrap().kind, BreakKind::BadCheckpoint);

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

// ---- The signed checkpoint: stripped signatures, a cut tail, a deleted checkpoint ----

const KEY: [u8; 32] = [5u8; 32];

/// A trail written with the vault unlocked, locked, unlocked again, then closed:
/// 1 unsigned; 2 hmac-on, 3..=7 signed; 8 hmac-off; 9, 10 unsigned; 11 hmac-on, 12..=14 signed;
/// 15 hmac-off ("the log was closed"), which the checkpoint names.
fn signed_trail() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    log.record(ev("kernel-engine", 1));
    log.set_hmac_key(Some(KEY));
    for i in 2..=6 {
        log.record(ev("kernel-engine", i));
    }
    log.set_hmac_key(None);
    log.record(ev("kernel-engine", 7));
    log.record(ev("kernel-engine", 8));
    log.set_hmac_key(Some(KEY));
    for i in 9..=11 {
        log.record(ev("kernel-engine", i));
    }
    drop(log);
    dir
}

fn broken_with_key(dir: &Path) -> BrokenRecord {
    let r = verify(dir, Some(&KEY)).unwrap();
    match r.broken {
        Some(b) => b,
        None => panic!("intact with the key: {r:?}"),
    }
}

fn strip_hmac(line: &str) -> String {
    match line.find(",\"hmac\":\"") {
        Some(cut) => format!("{}}}", &line[..cut]),
        None => line.to_string(),
    }
}

/// What someone without the key does after changing lines: numbers them from the first one's seq
/// (when `renumber`) and recomputes every `prev`.
fn rechain(lines: &mut [String], renumber: bool) {
    let first = AuditRecord::parse(lines[0].as_bytes()).unwrap();
    for i in 0..lines.len() {
        let mut r = AuditRecord::parse(lines[i].as_bytes()).unwrap();
        if renumber {
            r.seq = first.seq + i as u64;
        }
        if i > 0 {
            r.prev = line_hash(lines[i - 1].as_bytes());
        }
        lines[i] = String::from_utf8(r.to_line()).unwrap();
    }
}

fn checkpoint_of(dir: &Path) -> Checkpoint {
    Checkpoint::parse(&fs::read(checkpoint_path(dir)).unwrap()).unwrap()
}

#[test]
fn signed_trail_has_a_checkpoint_and_verifies() {
    let dir = signed_trail();
    let path = only_file(dir.path());
    let l = lines(&path);
    assert_eq!(l.len(), 15);
    let cp = checkpoint_of(dir.path());
    assert_eq!((cp.seq, cp.signing), (15, false));
    assert_eq!(cp.hash, line_hash(l[14].as_bytes()));
    assert_eq!(cp.file, path.file_name().unwrap().to_string_lossy());
    assert_eq!(cp.key, key_fingerprint(&KEY));
    assert_eq!(cp.check(&KEY), CheckpointStatus::Valid);
    assert_eq!(cp.check(&[6u8; 32]), CheckpointStatus::OtherKey);
    assert!(l[14].contains(OP_HMAC_OFF) && l[14].contains("the log was closed"));
    assert_eq!(
        fs::metadata(checkpoint_path(dir.path()))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let r = verify(dir.path(), Some(&KEY)).unwrap();
    assert!(r.is_intact(), "{r:?}");
    assert_eq!((r.records, r.hmac_checked), (15, 12));
    assert_eq!(r.checkpoint.as_ref().map(|c| c.seq), Some(15));
    assert_eq!(r.after_checkpoint, 0);
    // Without the key: as before, the chain only.
    let r = verify(dir.path(), None).unwrap();
    assert!(r.is_intact() && r.checkpoint.is_none(), "{r:?}");
}

#[test]
fn stripped_signatures_and_rebuilt_chain_fail_with_the_key() {
    // The attack seen in the field: the key switches deleted, every hmac removed, the records
    // renumbered, the chain recomputed and a record altered.
    let dir = signed_trail();
    let path = only_file(dir.path());
    let mut l: Vec<String> = lines(&path)
        .iter()
        .filter(|l| !l.contains("\"audit:hmac-o"))
        .map(|l| strip_hmac(l))
        .collect();
    l[3] = l[3].replace("f4.md", "fX.md");
    rechain(&mut l, true);
    write_lines(&path, &l);
    assert!(
        verify(dir.path(), None).unwrap().is_intact(),
        "the chain alone cannot tell"
    );
    let b = broken_with_key(dir.path());
    assert_eq!(
        b.kind,
        BreakKind::Truncated {
            first: 12,
            last: 15
        },
        "{b}"
    );
    assert!(b.to_string().contains("cut from its end"), "{b}");

    // The same, padded with forged records up to the checkpoint's seq.
    let mut padded = l.clone();
    for _ in 0..4 {
        padded.push(padded[1].clone());
    }
    rechain(&mut padded, true);
    write_lines(&path, &padded);
    let b = broken_with_key(dir.path());
    assert_eq!(
        (b.kind.clone(), b.seq),
        (BreakKind::CheckpointMismatch, Some(15)),
        "{b}"
    );
    assert!(b.to_string().contains("rewritten"), "{b}");

    // Every hmac stripped but the switches kept: unsigned records inside a signed stretch.
    let dir = signed_trail();
    let path = only_file(dir.path());
    let mut l: Vec<String> = lines(&path).iter().map(|l| strip_hmac(l)).collect();
    rechain(&mut l, false);
    write_lines(&path, &l);
    assert_eq!(broken(dir.path()).kind, BreakKind::MissingHmac);
    let b = broken_with_key(dir.path());
    assert_eq!((b.kind, b.seq), (BreakKind::MissingHmac, Some(2)));
}

#[test]
fn partly_stripped_signatures_fail() {
    for strip in [vec![4usize], vec![12, 13, 14], vec![14]] {
        let dir = signed_trail();
        let path = only_file(dir.path());
        let mut l = lines(&path);
        for &i in &strip {
            l[i] = strip_hmac(&l[i]);
        }
        rechain(&mut l, false);
        write_lines(&path, &l);
        let b = broken_with_key(dir.path());
        assert_eq!(b.kind, BreakKind::MissingHmac, "{strip:?}: {b}");
        assert_eq!(b.seq, Some(strip[0] as u64 + 1), "{b}");
    }
    // The switches stripped too, so that no stretch looks signed: the checkpoint still tells.
    let dir = signed_trail();
    let path = only_file(dir.path());
    let mut l = lines(&path);
    for (i, line) in l.iter_mut().enumerate() {
        if i >= 10 {
            *line = strip_hmac(line);
        }
    }
    l.remove(10); // the second hmac-on
    rechain(&mut l, true);
    write_lines(&path, &l);
    assert!(verify(dir.path(), None).unwrap().is_intact());
    let b = broken_with_key(dir.path());
    assert!(
        matches!(
            b.kind,
            BreakKind::Truncated {
                first: 15,
                last: 15
            }
        ),
        "{b}"
    );
}

#[test]
fn deleted_key_switches_fail() {
    // hmac-on/off records removed, the rest renumbered and rechained, signatures kept.
    let dir = signed_trail();
    let path = only_file(dir.path());
    let mut l: Vec<String> = lines(&path)
        .into_iter()
        .filter(|l| !l.contains("\"audit:hmac-o"))
        .collect();
    rechain(&mut l, true);
    write_lines(&path, &l);
    let b = broken_with_key(dir.path());
    assert!(
        matches!(b.kind, BreakKind::Truncated { .. } | BreakKind::BadHmac),
        "{b}"
    );
    // Without renumbering: a gap.
    let dir = signed_trail();
    let path = only_file(dir.path());
    let mut l = lines(&path);
    l.remove(7); // hmac-off
    rechain(&mut l, false);
    write_lines(&path, &l);
    let b = broken_with_key(dir.path());
    assert!(
        matches!(
            b.kind,
            BreakKind::Deleted { first: 8, last: 8 } | BreakKind::MissingHmac
        ),
        "{b}"
    );
}

#[test]
fn cut_tail_fails_with_the_key() {
    for n in 1..=4usize {
        let dir = signed_trail();
        let path = only_file(dir.path());
        let l = lines(&path);
        write_lines(&path, &l[..l.len() - n]);
        assert!(
            verify(dir.path(), None).unwrap().is_intact(),
            "a chain cannot show a cut end"
        );
        let b = broken_with_key(dir.path());
        let first = 16 - n as u64;
        assert_eq!(b.kind, BreakKind::Truncated { first, last: 15 }, "{b}");
        assert!(
            b.to_string()
                .contains(&format!("the trail ends at seq {}", first - 1)),
            "{b}"
        );
    }
    // Every file removed.
    let dir = signed_trail();
    fs::remove_file(only_file(dir.path())).unwrap();
    let b = broken_with_key(dir.path());
    assert_eq!(b.kind, BreakKind::Truncated { first: 1, last: 15 }, "{b}");
}

#[test]
fn missing_or_bad_checkpoint_fails_with_the_key() {
    let dir = signed_trail();
    let cp_path = checkpoint_path(dir.path());
    let good = fs::read(&cp_path).unwrap();
    fs::remove_file(&cp_path).unwrap();
    assert!(verify(dir.path(), None).unwrap().is_intact());
    let b = broken_with_key(dir.path());
    assert_eq!(b.kind, BreakKind::CheckpointMissing, "{b}");
    assert!(b.to_string().starts_with("checkpoint missing: "), "{b}");

    // Moved forward by hand (the HMAC no longer matches).
    let text = String::from_utf8(good.clone()).unwrap();
    fs::write(&cp_path, text.replace("\"seq\":15,", "\"seq\":14,")).unwrap();
    let b = broken_with_key(dir.path());
    assert_eq!(b.kind, BreakKind::BadCheckpoint, "{b}");
    assert!(b.detail.contains("forged"), "{b}");
    // Not a checkpoint at all.
    fs::write(&cp_path, "{}").unwrap();
    assert_eq!(broken_with_key(dir.path()).kind, BreakKind::BadCheckpoint);
    // A symlink to the good one is refused too.
    let elsewhere = dir.path().join("good.json");
    fs::write(&elsewhere, &good).unwrap();
    fs::remove_file(&cp_path).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &cp_path).unwrap();
    assert_eq!(broken_with_key(dir.path()).kind, BreakKind::BadCheckpoint);
    fs::remove_file(&cp_path).unwrap();
    fs::write(&cp_path, &good).unwrap();
    assert!(verify(dir.path(), Some(&KEY)).unwrap().is_intact());
    // Another key cannot vouch for it.
    let r = verify(dir.path(), Some(&[6u8; 32])).unwrap();
    assert_eq!(r.broken.unwrap().kind, BreakKind::BadCheckpoint);
}

#[test]
fn lock_unlock_rotation_and_restarts_verify() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        AuditLog::builder(dir.path())
            .with_max_file_bytes(1500)
            .open()
            .unwrap()
    };
    let mut n = 0;
    let mut some = |log: &AuditLog, k: u64| {
        for _ in 0..k {
            n += 1;
            log.record(ev("kernel-engine", n));
        }
    };
    {
        let log = open();
        some(&log, 3);
        log.set_hmac_key(Some(KEY));
        some(&log, 10);
        log.set_hmac_key(None); // locked
        some(&log, 4);
        log.set_hmac_key(Some(KEY)); // unlocked again
        some(&log, 6);
        log.flush().unwrap();
        let r = verify(dir.path(), Some(&KEY)).unwrap();
        assert!(r.is_intact(), "while it runs: {r:?}");
    }
    {
        // A restart with the vault locked.
        let log = open();
        some(&log, 5);
    }
    let r = verify(dir.path(), Some(&KEY)).unwrap();
    assert!(r.is_intact(), "{r:?}");
    assert_eq!(
        (r.after_checkpoint, r.unsigned_after_checkpoint),
        (5, 5),
        "{r:?}"
    );
    {
        // A restart with the vault unlocked: the key is set shortly after opening.
        let log = open();
        some(&log, 2);
        log.set_hmac_key(Some(KEY));
        some(&log, 8);
        // The key changes (the vault's key was rotated) and changes back.
        log.set_hmac_key(Some([6u8; 32]));
        some(&log, 2);
        log.set_hmac_key(Some(KEY));
        some(&log, 2);
    }
    let files = list_files(dir.path()).unwrap();
    assert!(files.len() >= 4, "{files:?}");
    let r = verify(dir.path(), Some(&KEY)).unwrap();
    assert!(r.is_intact(), "{r:?}");
    assert!(r.interrupted.is_empty(), "{r:?}");
    assert_eq!(r.checkpoint.as_ref().unwrap().seq, r.last_seq.unwrap());
    assert_eq!(r.after_checkpoint, 0);
    assert!(verify(dir.path(), None).unwrap().is_intact());
    // No temp file is left behind.
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    // Cutting the end across files fails.
    let last = files.last().unwrap();
    fs::remove_file(&last.path).unwrap();
    assert!(matches!(
        broken_with_key(dir.path()).kind,
        BreakKind::Truncated { .. }
    ));
}

/// Copies the audit files and checkpoint of `from` into a new directory.
fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), to.path().join(e.file_name())).unwrap();
        }
    }
    to
}

#[test]
fn crash_while_signing_is_not_tampering_but_stripping_after_the_checkpoint_is() {
    // The state a crash leaves: records synced after the last checkpoint, no closing hmac-off.
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    log.set_hmac_key(Some(KEY));
    for i in 1..=3 {
        log.record(ev("kernel-engine", i));
    }
    log.flush().unwrap();
    let old_checkpoint = fs::read(checkpoint_path(dir.path())).unwrap();
    for i in 4..=6 {
        log.record(ev("kernel-engine", i));
    }
    log.flush().unwrap();
    let crashed = copy_dir(dir.path());
    drop(log);
    fs::write(checkpoint_path(crashed.path()), &old_checkpoint).unwrap();
    assert_eq!(checkpoint_of(crashed.path()).seq, 4);
    let r = verify(crashed.path(), Some(&KEY)).unwrap();
    assert!(r.is_intact(), "{r:?}");
    assert_eq!((r.after_checkpoint, r.unsigned_after_checkpoint), (3, 0));

    // Someone strips the signatures after the checkpoint: still inside the signed stretch.
    let stripped = copy_dir(crashed.path());
    let path = only_file(stripped.path());
    let mut l = lines(&path);
    l[5] = strip_hmac(&l[5]);
    rechain(&mut l, false);
    write_lines(&path, &l);
    let b = broken_with_key(stripped.path());
    assert_eq!((b.kind, b.seq), (BreakKind::MissingHmac, Some(6)));

    // The next run ends the interrupted stretch; unlocking later signs again.
    {
        let log = AuditLog::open(crashed.path()).unwrap();
        log.record(ev("kernel-engine", 7));
        log.set_hmac_key(Some(KEY));
        log.record(ev("kernel-engine", 8));
    }
    let r = verify(crashed.path(), Some(&KEY)).unwrap();
    assert!(r.is_intact(), "{r:?}");
    assert_eq!(r.interrupted, [8]);
    let l = lines(&only_file(crashed.path()));
    assert!(l[7].contains(OP_HMAC_INTERRUPTED) && !l[7].contains("\"hmac\""));
}

#[test]
fn trail_cut_or_rewritten_while_stopped_is_reported_after_restart() {
    type Attack = fn(&Path);
    let attacks: [(&str, Attack); 4] = [
        ("cut", |dir| {
            let path = only_file(dir);
            let l = lines(&path);
            write_lines(&path, &l[..l.len() - 2]);
        }),
        ("rebuilt", |dir| {
            let path = only_file(dir);
            let mut l: Vec<String> = lines(&path)
                .iter()
                .filter(|l| !l.contains("\"audit:hmac-o"))
                .map(|l| strip_hmac(l))
                .collect();
            rechain(&mut l, true);
            write_lines(&path, &l);
        }),
        ("forged checkpoint", |dir| {
            let p = checkpoint_path(dir);
            let text = fs::read_to_string(&p).unwrap();
            fs::write(&p, text.replace("\"seq\":15,", "\"seq\":14,")).unwrap();
        }),
        ("not a checkpoint", |dir| {
            fs::write(checkpoint_path(dir), "garbage").unwrap();
        }),
    ];
    for (what, attack) in attacks {
        let dir = signed_trail();
        attack(dir.path());
        {
            // The daemon restarts and the vault is unlocked: new checkpoints would cover the
            // damage, but the writer first checks the old one with the key.
            let log = AuditLog::open(dir.path()).unwrap();
            log.record(ev("kernel-engine", 100));
            log.set_hmac_key(Some(KEY));
            log.record(ev("kernel-engine", 101));
        }
        let b = broken_with_key(dir.path());
        assert_eq!(b.kind, BreakKind::TamperReported, "{what}: {b}");
        assert!(b.to_string().contains("the daemon found"), "{what}: {b}");
        assert_eq!(broken(dir.path()).kind, BreakKind::TamperReported, "{what}");
    }
    // An untouched trail is not reported; nor is a checkpoint of another key (rotated while the
    // daemon was stopped), which cannot be checked.
    for key in [KEY, [6u8; 32]] {
        let dir = signed_trail();
        {
            let log = AuditLog::open(dir.path()).unwrap();
            log.record(ev("kernel-engine", 100));
            log.set_hmac_key(Some(key));
            log.record(ev("kernel-engine", 101));
        }
        let r = verify(dir.path(), Some(&key)).unwrap();
        assert!(r.is_intact(), "{r:?}");
    }
}

#[test]
fn saved_checkpoint_catches_an_older_one_put_back() {
    let dir = tempfile::tempdir().unwrap();
    let saved = tempfile::tempdir().unwrap();
    let first = saved.path().join("first.json");
    let latest = saved.path().join("latest.json");
    {
        let log = AuditLog::open(dir.path()).unwrap();
        log.set_hmac_key(Some(KEY));
        log.record(ev("kernel-engine", 1));
        log.flush().unwrap();
        fs::copy(checkpoint_path(dir.path()), &first).unwrap();
        for i in 2..=5 {
            log.record(ev("kernel-engine", i));
        }
    }
    fs::copy(checkpoint_path(dir.path()), &latest).unwrap();
    let with = |paths: &[std::path::PathBuf]| {
        verify_with(
            dir.path(),
            &VerifyOptions {
                key: Some(&KEY),
                saved_checkpoints: paths,
            },
        )
        .unwrap()
    };
    let r = with(&[first.clone(), latest.clone()]);
    assert!(r.is_intact(), "{r:?}");
    assert_eq!(r.saved_checkpoints, 2);

    // The older checkpoint put back and the trail cut back to it: nothing in the store tells...
    let cp1 = Checkpoint::parse(&fs::read(&first).unwrap()).unwrap();
    fs::copy(&first, checkpoint_path(dir.path())).unwrap();
    let path = only_file(dir.path());
    let l = lines(&path);
    write_lines(&path, &l[..cp1.seq as usize]);
    assert!(verify(dir.path(), Some(&KEY)).unwrap().is_intact());
    // ...but a copy of the latest one kept elsewhere does.
    let b = with(std::slice::from_ref(&latest)).broken.unwrap();
    assert!(matches!(b.kind, BreakKind::Truncated { .. }), "{b}");
    assert!(b.detail.contains("latest.json"), "{b}");
    // A saved copy that is missing is an error, not a finding.
    assert!(matches!(
        verify_with(
            dir.path(),
            &VerifyOptions {
                key: Some(&KEY),
                saved_checkpoints: &[saved.path().join("none.json")],
            },
        ),
        Err(AuditError::Io { .. })
    ));
}

#[test]
fn checkpoint_write_failure_keeps_the_log_going() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    // A directory where the checkpoint goes: every replacement fails, like a full disk would.
    fs::create_dir(checkpoint_path(dir.path())).unwrap();
    log.set_hmac_key(Some(KEY));
    for i in 1..=3 {
        log.record(ev("kernel-engine", i));
    }
    log.flush().unwrap();
    log.record(ev("kernel-engine", 4));
    log.flush().unwrap();
    assert_eq!(log.lost(), 0);
    drop(log);
    let l = lines(&only_file(dir.path()));
    assert_eq!(l.len(), 6);
    assert!(l.iter().all(|l| l.contains("\"hmac\":")));
    let r = verify(dir.path(), None).unwrap();
    assert!(r.is_intact(), "{r:?}");
    // With the key, the trail is not vouched for until a checkpoint can be written.
    assert_eq!(broken_with_key(dir.path()).kind, BreakKind::BadCheckpoint);
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    // Once it can be written again, the next run checkpoints.
    fs::remove_dir(checkpoint_path(dir.path())).unwrap();
    {
        let log = AuditLog::open(dir.path()).unwrap();
        log.set_hmac_key(Some(KEY));
        log.record(ev("kernel-engine", 5));
    }
    let r = verify(dir.path(), Some(&KEY)).unwrap();
    assert!(r.is_intact(), "{r:?}");
}

/// Following from the end: records written later come out once each, in order, across the
/// next file of the day (the size limit) and past a line written in two pieces; none of those
/// before the follow started.
#[test]
fn follow_yields_new_records_across_files_in_order() {
    let dir = trail(5);
    let mut follow = Follow::from_end(dir.path()).unwrap();
    assert!(follow
        .next_batch(std::time::Duration::ZERO)
        .unwrap()
        .is_empty());
    let log = AuditConfig::new(dir.path())
        .with_max_file_bytes(600)
        .open()
        .unwrap();
    let writer = std::thread::spawn(move || {
        for i in 6..=40 {
            log.record(ev("kernel-engine", i).at(t("2024-02-24T12:00:01Z")));
            if i % 7 == 0 {
                log.flush().unwrap();
            }
        }
        log.flush().unwrap();
    });
    let mut seqs = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while seqs.len() < 35 && std::time::Instant::now() < deadline {
        for r in follow
            .next_batch(std::time::Duration::from_millis(200))
            .unwrap()
        {
            seqs.push(r.unwrap().seq);
        }
    }
    writer.join().unwrap();
    assert!(list_files(dir.path()).unwrap().len() > 2, "no rotation");
    assert_eq!(seqs, (6..=40).collect::<Vec<u64>>());
    // A line appended in two writes comes out once it is whole.
    let log = AuditLog::open(dir.path()).unwrap();
    log.record(ev("kernel-engine", 41));
    log.flush().unwrap();
    drop(log);
    let last = list_files(dir.path()).unwrap().pop().unwrap().path;
    let line = {
        let text = fs::read_to_string(&last).unwrap();
        let whole: Vec<&str> = text.lines().collect();
        whole[whole.len() - 1].to_string()
    };
    let got: Vec<u64> = follow
        .next_batch(std::time::Duration::from_millis(200))
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(got, vec![41]);
    let mut f = fs::OpenOptions::new().append(true).open(&last).unwrap();
    use std::io::Write;
    // The record after it, by hand.
    let line = line.replacen("\"seq\":41,", "\"seq\":42,", 1);
    let (a, b) = line.split_at(line.len() / 2);
    f.write_all(a.as_bytes()).unwrap();
    assert!(follow
        .next_batch(std::time::Duration::from_millis(100))
        .unwrap()
        .is_empty());
    f.write_all(format!("{b}\n").as_bytes()).unwrap();
    let again = follow
        .next_batch(std::time::Duration::from_secs(2))
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].as_ref().unwrap().event.path,
        ev("kernel-engine", 41).path
    );
}

/// A file cut back and written over while it is followed (a crash's torn tail cut when the
/// trail is opened again, then new records): the new records come out, once each, and nothing
/// made of the old line's start and the new lines' ends.
#[test]
fn follow_reads_a_file_cut_back_and_written_over_again() {
    let dir = trail(5);
    let mut follow = Follow::from_end(dir.path()).unwrap();
    let file = only_file(dir.path());
    let len = fs::metadata(&file).unwrap().len();
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&file).unwrap();
        f.write_all(br#"{"seq":6,"time":"2024-02-24T12:00:00Z","agent":"torn"#)
            .unwrap();
    }
    assert!(follow
        .next_batch(std::time::Duration::ZERO)
        .unwrap()
        .is_empty());
    // Cut back and written over before the follower looks again.
    fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len)
        .unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    for i in 6..=9 {
        log.record(ev("kernel-engine", i));
    }
    log.flush().unwrap();
    drop(log);
    let got = follow
        .next_batch(std::time::Duration::from_secs(2))
        .unwrap();
    let seqs: Vec<u64> = got.into_iter().map(|r| r.unwrap().seq).collect();
    assert_eq!(seqs, vec![6, 7, 8, 9]);
}
