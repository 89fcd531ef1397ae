//! `clawfs audit verify | tail | search | key` (CLI layer): reads the trail in
//! `<store>/.clawfs/audit` through `clawfs_audit` and prints it. Needs no running daemon.
//! In a store that hosts share, each host writes its own chain: `verify` checks every one
//! (and the store's chain from before the hosts joined), `tail` and `search` read this host's.

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use chrono::SecondsFormat;
use clawfs_audit::{self as audit, AuditError, AuditRecord, Filter, Outcome, VerifyOptions};
use clawfs_vault::Vault;
use zeroize::Zeroizing;

use clawfs_args::audit::{AuditCommand, FilterArgs};

use crate::error::Failure;

/// Runs one `clawfs audit` subcommand against the store at `store_root`.
pub fn run(store_root: &Path, cmd: &AuditCommand) -> Result<(), Failure> {
    let store = match clawfs_core::Store::open(store_root) {
        Ok(s) => Some(s),
        // A copy of a trail (a folder with `.clawfs/audit` alone) reads as a store of one host.
        Err(clawfs_core::store::StoreError::NotInitialised(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let dir = store.as_ref().map_or_else(
        || audit::audit_dir(store_root),
        clawfs_core::Store::audit_dir,
    );
    match cmd {
        AuditCommand::Verify {
            key_file,
            checkpoints,
            json,
        } => match store.as_ref().filter(|s| s.is_shared()) {
            Some(shared) => verify_hosts(shared, key_file.as_deref(), checkpoints, *json),
            None => verify_one(&dir, key_file.as_deref(), checkpoints, *json),
        },
        AuditCommand::Key { out } => export_key(store_root, out),
        AuditCommand::Tail {
            n,
            follow,
            filter,
            json,
        } => tail(&dir, *n, *follow, &filter_of(filter, None)?, *json),
        AuditCommand::Search {
            filter,
            limit,
            json,
        } => print_records(
            audit::search(&dir, &filter_of(filter, *limit)?).map_err(fail)?,
            *json,
        )
        .map(|_| ()),
    }
}

/// The conditions of `search` and `tail`, with `since` read against now.
fn filter_of(args: &FilterArgs, limit: Option<usize>) -> Result<Filter, Failure> {
    let since = args
        .since
        .as_deref()
        .map(|s| audit::parse_since(s, chrono::Utc::now()))
        .transpose()
        .map_err(fail)?;
    Ok(Filter {
        agent: args.agent.clone(),
        path_prefix: args.path.clone(),
        since,
        denied_only: args.denied,
        limit,
    })
}

/// `clawfs audit tail`: the last `n` records that pass `filter`, then with `follow` the new
/// ones as they are written. Following starts before the last records are read, and a record
/// already printed (by its `seq`) is not printed again, so none is missed or doubled between.
fn tail(dir: &Path, n: usize, follow: bool, filter: &Filter, json: bool) -> Result<(), Failure> {
    let mut following = match follow {
        true => Some(audit::Follow::from_end(dir).map_err(fail)?),
        false => None,
    };
    let mut last_seq = 0u64;
    let mut note = |r: &Result<AuditRecord, AuditError>| {
        if let Ok(rec) = r {
            last_seq = last_seq.max(rec.seq);
        }
    };
    let last: Vec<_> = if *filter == Filter::default() {
        let records = audit::tail(dir, n).map_err(fail)?;
        records.iter().for_each(&mut note);
        records
    } else {
        // The whole trail (from --since) is read for the last that match.
        let mut last = std::collections::VecDeque::with_capacity(n.min(4096));
        for r in audit::search(dir, filter).map_err(fail)? {
            note(&r);
            if last.len() == n {
                last.pop_front();
            }
            if n > 0 {
                last.push_back(r);
            }
        }
        last.into()
    };
    if !print_records(last, json)? {
        return Ok(());
    }
    let Some(following) = &mut following else {
        return Ok(());
    };
    // Following, a line that is not a record is reported and skipped.
    while !reader_gone() {
        let batch = following
            .next_batch(std::time::Duration::from_secs(1))
            .map_err(fail)?;
        let new = batch.into_iter().filter(|r| match r {
            Ok(rec) => rec.seq > last_seq && filter.matches(rec),
            Err(_) => true,
        });
        if !print_lines(new, json)?.0 {
            break;
        }
    }
    Ok(())
}

/// Whether standard output is a pipe or socket whose reader has gone (`| head -1` after its
/// line): following stops then, without waiting for a record to fail to write.
fn reader_gone() -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let stdout = io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::empty())];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

fn fail(e: AuditError) -> Failure {
    Failure::Other(e.into())
}

fn read_key(path: &Path) -> Result<[u8; 32], Failure> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let hex_text = text.trim();
    let key = if hex_text.len() == 64 {
        hex::decode(hex_text).map_err(|_| anyhow!("{}: not 64 hex digits", path.display()))?
    } else if bytes.len() == 32 {
        bytes
    } else {
        return Err(anyhow!("{}: a key is 64 hex digits or 32 bytes", path.display()).into());
    };
    let mut out = [0u8; 32];
    out.copy_from_slice(&key);
    Ok(out)
}

/// Writes the vault's audit key, as 64 hex digits and a newline, to a new file `out` (0600).
fn export_key(store_root: &Path, out: &Path) -> Result<(), Failure> {
    let config = clawfs_core::store::Store::open(store_root)
        .map(|s| s.vault_config())
        .unwrap_or_default();
    let vault = Vault::open(store_root, config).map_err(|e| anyhow!("opening the vault: {e}"))?;
    let key = Zeroizing::new(vault.audit_key().ok_or_else(|| {
        anyhow!(
            "the vault is locked or not set up: the audit key is derived from its master key; \
             run `clawfs vault unlock` first"
        )
    })?);
    let text = Zeroizing::new(format!("{}\n", hex::encode(*key)));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(out)
        .with_context(|| format!("creating {}", out.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "wrote the audit key (fingerprint {}) to {}",
        audit::key_fingerprint(&key),
        out.display()
    );
    Ok(())
}

/// `clawfs audit verify` of one chain: the store's, in a store of one host.
fn verify_one(
    dir: &Path,
    key_file: Option<&Path>,
    checkpoints: &[PathBuf],
    json: bool,
) -> Result<(), Failure> {
    let key = key_file.map(read_key).transpose()?.map(Zeroizing::new);
    if !checkpoints.is_empty() && key.is_none() {
        return Err(anyhow!("--checkpoint needs --key-file").into());
    }
    let (out, broken) = verify(dir, key.as_deref(), checkpoints, json)?;
    if json {
        crate::output::print_json(&out).context("writing to stdout")?;
    }
    match broken {
        None => Ok(()),
        Some(b) => Err(Failure::Other(anyhow!("audit trail broken: {b}"))),
    }
}

/// `clawfs audit verify` in a store that hosts share: every host's chain and the store's own
/// from before they joined (if it has records); each is checked alone (no host waits for
/// another to write), and all must hold.
fn verify_hosts(
    store: &clawfs_core::Store,
    key_file: Option<&Path>,
    checkpoints: &[PathBuf],
    json: bool,
) -> Result<(), Failure> {
    let key = key_file.map(read_key).transpose()?.map(Zeroizing::new);
    if !checkpoints.is_empty() {
        return Err(anyhow!(
            "--checkpoint names records of one chain, and hosts share this store: each host's chain has its own checkpoint"
        )
        .into());
    }
    let mut chains = Vec::new();
    let before = audit::audit_dir(store.root());
    if audit::list_files(&before).is_ok_and(|f| !f.is_empty()) {
        chains.push((None, before));
    }
    for host in clawfs_core::hosts::joined(store.root()).context("listing the hosts")? {
        let dir = clawfs_core::hosts::host_dir(store.root(), &host.name).join("audit");
        chains.push((Some(host.name.to_string()), dir));
    }
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for (host, dir) in chains {
        let label = host.as_deref().map_or_else(
            || "the store's chain from before hosts joined".to_string(),
            |h| format!("host {h}"),
        );
        if !json {
            println!("{label} ({}):", dir.display());
        }
        let (mut out, broken) = verify(&dir, key.as_deref(), &[], json)?;
        if let Some(b) = broken {
            failures.push(format!("{label}: {b}"));
        }
        out["host"] = host.into();
        results.push(out);
    }
    if json {
        let out = serde_json::json!({"intact": failures.is_empty(), "chains": results});
        crate::output::print_json(&out).context("writing to stdout")?;
    } else if failures.is_empty() {
        println!("every chain intact ({})", results.len());
    }
    match failures.is_empty() {
        true => Ok(()),
        false => Err(Failure::Other(anyhow!(
            "audit trail broken: {}",
            failures.join("; ")
        ))),
    }
}

/// Checks the chain in `dir`: its report (JSON, or printed) and where it breaks, if it does.
fn verify(
    dir: &Path,
    key: Option<&[u8; 32]>,
    checkpoints: &[PathBuf],
    json: bool,
) -> Result<(serde_json::Value, Option<audit::BrokenRecord>), Failure> {
    let opts = VerifyOptions {
        key,
        saved_checkpoints: checkpoints,
    };
    let r = audit::verify_with(dir, &opts).map_err(fail)?;
    let mut out = serde_json::Value::Null;
    if json {
        let checkpoint = r.checkpoint.as_ref().map(|c| {
            serde_json::json!({
                "seq": c.seq,
                "file": c.file,
                "time": c.time,
                "signing": c.signing,
                "key": c.key,
            })
        });
        let broken = r.broken.as_ref().map(|b| {
            serde_json::json!({
                "file": b.file,
                "line": b.line,
                "seq": b.seq,
                "kind": b.kind.to_string(),
                "detail": b.detail,
            })
        });
        out = serde_json::json!({
            "intact": r.is_intact(),
            "files": r.files,
            "records": r.records,
            "first_seq": r.first_seq,
            "last_seq": r.last_seq,
            "head_missing": r.head_missing,
            "hmac_checked": r.hmac_checked,
            "hmac_unchecked": r.hmac_unchecked,
            "torn_tail": r.torn_tail,
            "signatures_checked": key.is_some(),
            "checkpoint": checkpoint,
            "saved_checkpoints": r.saved_checkpoints,
            "after_checkpoint": r.after_checkpoint,
            "unsigned_after_checkpoint": r.unsigned_after_checkpoint,
            "interrupted": r.interrupted,
            "broken": broken,
        });
    } else {
        let mut msg = format!("{} good records in {} files", r.records, r.files);
        if let (Some(a), Some(b)) = (r.first_seq, r.last_seq) {
            let _ = write!(msg, " (seq {a}..={b})");
        }
        if key.is_some() {
            let _ = write!(msg, ", {} HMACs checked", r.hmac_checked);
        }
        println!("{msg}");
        if r.head_missing {
            println!(
                "note: the trail starts at seq {}: older files were removed",
                r.first_seq.unwrap_or(0)
            );
        }
        if r.hmac_unchecked > 0 {
            println!(
                "note: {} records carry an HMAC that was not checked ({})",
                r.hmac_unchecked,
                if key.is_some() {
                    "signed with another key"
                } else {
                    "give --key-file to check them"
                }
            );
        }
        if r.torn_tail {
            println!(
                "note: the newest file ends in a partial record (a write in progress or a crash)"
            );
        }
        if key.is_none() {
            println!(
                "note: without --key-file neither the signatures nor the signed checkpoint were \
                 checked: records cut from the end, or a trail rebuilt without its signatures, \
                 would not show"
            );
        }
        if let (Some(c), true) = (&r.checkpoint, r.is_intact()) {
            println!(
                "checkpoint: record seq {} ({}) signed {} with key {}: present and unchanged",
                c.seq, c.file, c.time, c.key
            );
            if r.saved_checkpoints > 0 {
                println!(
                    "saved checkpoints: {} given, each record present and unchanged",
                    r.saved_checkpoints
                );
            }
            let signed_after = r.after_checkpoint - r.unsigned_after_checkpoint;
            if r.unsigned_after_checkpoint > 0 {
                println!(
                    "note: {} records after the checkpoint are unsigned (written while the vault \
                     was locked): changes to them, or records cut from the end, would not show",
                    r.unsigned_after_checkpoint
                );
            }
            if signed_after > 0 {
                println!(
                    "note: {signed_after} signed records after the checkpoint (written in the \
                     last second before the daemon stopped or this check) were checked by their \
                     own HMACs only"
                );
            }
        }
        if !r.interrupted.is_empty() {
            let seqs: Vec<String> = r.interrupted.iter().map(u64::to_string).collect();
            println!(
                "note: the daemon stopped while signing without closing the log (a crash) before \
                 seq {}",
                seqs.join(", ")
            );
        }
    }
    if r.broken.is_none() && !json {
        println!("audit trail intact");
    }
    Ok((out, r.broken))
}

/// Prints `records`; `false` when the reader went away (a closed pipe: stop quietly). Lines
/// that are not records are reported on stderr, and fail the command once all is printed.
fn print_records(
    records: impl IntoIterator<Item = Result<AuditRecord, AuditError>>,
    json: bool,
) -> Result<bool, Failure> {
    let (printed, bad) = print_lines(records, json)?;
    if bad > 0 {
        return Err(Failure::Other(anyhow!(
            "{bad} lines are not audit records; run `clawfs audit verify`"
        )));
    }
    Ok(printed)
}

/// Prints `records`: whether the reader is still there, and how many lines were not records
/// (each reported on stderr).
fn print_lines(
    records: impl IntoIterator<Item = Result<AuditRecord, AuditError>>,
    json: bool,
) -> Result<(bool, usize), Failure> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut bad = 0usize;
    for rec in records {
        let written = match rec {
            // The record exactly as stored (one JSON object per line, HMAC included).
            Ok(rec) if json => out
                .write_all(&rec.to_line())
                .and_then(|()| out.write_all(b"\n")),
            Ok(rec) => writeln!(out, "{}", human(&rec)),
            Err(e @ AuditError::Parse { .. }) => {
                bad += 1;
                eprintln!("clawfs: {e}");
                Ok(())
            }
            Err(e) => return Err(fail(e)),
        };
        match written {
            Ok(()) => {}
            // `clawfs audit search … | head` closes the pipe: stop quietly.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok((false, bad)),
            Err(e) => return Err(anyhow::Error::from(e).context("writing to stdout").into()),
        }
    }
    match out.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok((false, bad)),
        Err(e) => Err(anyhow::Error::from(e).context("writing to stdout").into()),
        Ok(()) => Ok((true, bad)),
    }
}

/// One record as a log line in the P1.4 §8.4 style:
/// `2024-02-24T12:34:56.000Z [WARN] #12 agent=a pid=1 operation=open path=/x denied=true rule=R errno=13 reason="…"`.
pub fn human(rec: &AuditRecord) -> String {
    let ev = &rec.event;
    let level = match ev.result {
        Outcome::Ok => "INFO",
        Outcome::Denied => "WARN",
        Outcome::Error => "ERROR",
    };
    let mut s = format!(
        "{} [{level}] #{} agent={} pid={} operation={} path={}",
        ev.time.to_rfc3339_opts(SecondsFormat::Millis, true),
        rec.seq,
        quote(&ev.agent),
        ev.pid,
        quote(&ev.operation),
        quote(&ev.path),
    );
    if let Some(t) = &ev.target {
        let _ = write!(s, " target={}", quote(t));
    }
    if let Some(b) = ev.bytes {
        let _ = write!(s, " bytes={b}");
    }
    match ev.result {
        Outcome::Ok => {}
        Outcome::Denied => s.push_str(" denied=true"),
        Outcome::Error => s.push_str(" result=error"),
    }
    if let Some(r) = &ev.rule {
        let _ = write!(s, " rule={}", quote(r));
    }
    if let Some(e) = ev.errno {
        let _ = write!(s, " errno={e}");
    }
    if let Some(r) = &ev.reason {
        let _ = write!(s, " reason={}", quoted(r));
    }
    s
}

/// A value as is when it is printable ASCII without spaces, quotes, backslashes or `=`, else
/// [`quoted`].
fn quote(v: &str) -> String {
    let plain = |c: char| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\';
    match !v.is_empty() && v.chars().all(plain) {
        true => v.to_string(),
        false => quoted(v),
    }
}

/// `v` in double quotes, with `"` and `\` escaped and every character but printable ASCII
/// and the space as `\u{..}`: a line break, a terminal escape, a direction override or a
/// look-alike of a space or `=` in a name an agent chose can neither end the record nor fake
/// another one.
fn quoted(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c == ' ' || c.is_ascii_graphic() => out.push(c),
            c => out.extend(c.escape_unicode()),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawfs_audit::{AuditEvent, AuditLog};

    #[test]
    fn verify_tail_search_and_broken_trail() {
        let store = tempfile::tempdir().unwrap();
        let dir = audit::audit_dir(store.path());
        {
            let log = AuditLog::open(&dir).unwrap();
            log.record(AuditEvent::new(
                "alpha",
                1,
                "create",
                "/workspaces/default/My Notes.md",
            ));
            log.record(
                AuditEvent::new("alpha", 1, "open", "/agents/beta/state.json").denied(
                    13,
                    "RULE-001",
                    "agents write only their own directory",
                ),
            );
            log.record(AuditEvent::new("beta", 2, "write", "/agents/beta/x").bytes(10));
        }
        let verify = AuditCommand::Verify {
            key_file: None,
            checkpoints: vec![],
            json: false,
        };
        run(store.path(), &verify).unwrap();
        let tail = AuditCommand::Tail {
            n: 2,
            follow: false,
            filter: FilterArgs::default(),
            json: true,
        };
        run(store.path(), &tail).unwrap();
        let search = AuditCommand::Search {
            filter: FilterArgs {
                agent: Some("alpha".into()),
                since: Some("1h".into()),
                denied: true,
                ..FilterArgs::default()
            },
            limit: None,
            json: false,
        };
        run(store.path(), &search).unwrap();
        let bad_since = AuditCommand::Search {
            filter: FilterArgs {
                since: Some("yesterday".into()),
                ..FilterArgs::default()
            },
            limit: None,
            json: false,
        };
        assert!(run(store.path(), &bad_since).is_err());

        let file = audit::list_files(&dir).unwrap()[0].path.clone();
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, text.replacen("My Notes", "Our Notes", 1)).unwrap();
        let e = run(store.path(), &verify).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        let msg = e.to_string();
        assert!(
            msg.contains("record seq 1") && msg.contains("edited"),
            "{msg}"
        );
    }

    #[test]
    fn verify_with_key_checks_the_checkpoint() {
        let store = tempfile::tempdir().unwrap();
        let dir = audit::audit_dir(store.path());
        let key = [3u8; 32];
        {
            let log = AuditLog::open(&dir).unwrap();
            log.set_hmac_key(Some(key));
            for i in 0..5 {
                log.record(AuditEvent::new("alpha", 1, "create", format!("/w/{i}")));
            }
        }
        let key_file = store.path().join("key");
        std::fs::write(&key_file, hex::encode(key)).unwrap();
        let saved = store.path().join("saved.json");
        std::fs::copy(dir.join(audit::CHECKPOINT_FILE), &saved).unwrap();
        let with_key = |json| AuditCommand::Verify {
            key_file: Some(key_file.clone()),
            checkpoints: vec![saved.clone()],
            json,
        };
        run(store.path(), &with_key(false)).unwrap();
        run(store.path(), &with_key(true)).unwrap();
        // The last two records cut.
        let file = audit::list_files(&dir).unwrap()[0].path.clone();
        let text = std::fs::read_to_string(&file).unwrap();
        let kept: Vec<&str> = text.lines().collect();
        std::fs::write(&file, kept[..kept.len() - 2].join("\n") + "\n").unwrap();
        let e = run(store.path(), &with_key(false)).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("truncated"), "{e}");
        // Without the key the cut does not show.
        let verify = AuditCommand::Verify {
            key_file: None,
            checkpoints: vec![],
            json: false,
        };
        run(store.path(), &verify).unwrap();
        // The checkpoint deleted.
        std::fs::write(&file, text).unwrap();
        run(store.path(), &with_key(false)).unwrap();
        std::fs::remove_file(dir.join(audit::CHECKPOINT_FILE)).unwrap();
        let e = run(store.path(), &with_key(false)).unwrap_err();
        assert!(e.to_string().contains("checkpoint missing"), "{e}");
        // Exporting the key needs an unlocked vault.
        let e = run(
            store.path(),
            &AuditCommand::Key {
                out: store.path().join("k2"),
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("vault"), "{e}");
        assert!(!store.path().join("k2").exists());
    }

    #[test]
    fn human_lines() {
        let rec = AuditRecord {
            seq: 12,
            event: AuditEvent::new("kernel-engine", 7, "open", "/vault/master-key.enc")
                .denied(13, "RULE-004", "the vault is closed to this agent")
                .at(chrono::DateTime::from_timestamp(1_708_778_098, 0).unwrap()),
            prev: audit::GENESIS.into(),
            hmac: None,
        };
        assert_eq!(
            human(&rec),
            "2024-02-24T12:34:58.000Z [WARN] #12 agent=kernel-engine pid=7 operation=open \
             path=/vault/master-key.enc denied=true rule=RULE-004 errno=13 \
             reason=\"the vault is closed to this agent\""
        );
        assert_eq!(quote("My Notes.md"), "\"My Notes.md\"");
        // Look-alikes of a space and of `=`, a direction override, a line break: shown for
        // what they are, so that a name cannot pass for fields or for another record.
        assert_eq!(
            quote("a\u{2800}agent\u{a78a}x\u{202e}\n"),
            "\"a\\u{2800}agent\\u{a78a}x\\u{202e}\\u{a}\""
        );
        assert_eq!(quote("a\\b\"c"), "\"a\\\\b\\\"c\"");
    }
}
