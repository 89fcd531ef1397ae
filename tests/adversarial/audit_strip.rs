//! Someone who can write the store's disk, but has no vault key, attacks a signed audit trail:
//! strips its signatures and rebuilds the chain, cuts its end, deletes its checkpoint. Each time
//! `clawfs audit verify --key-file K` must fail (`docs/audit.md`, "Checkpoint"), while the
//! untouched trail verifies.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::common::{clawfs, text, vault, Mounted};

/// Locks the vault when the test ends, also when it fails: no key is left in the kernel keyring.
struct LockOnDrop<'a>(&'a Mounted);

impl Drop for LockOnDrop<'_> {
    fn drop(&mut self) {
        let _ = vault(self.0, &["lock"], None);
    }
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    text(&o)
}

/// The trail's files in `audit`, oldest first, with their lines.
fn read_trail(audit: &Path) -> Vec<(PathBuf, Vec<String>)> {
    let mut files: Vec<PathBuf> = fs::read_dir(audit)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("audit-") && n.ends_with(".jsonl")
        })
        .collect();
    // Trail order: by date, then the day's index (`audit-DATE.jsonl` is 0, `audit-DATE.N.jsonl` N).
    files.sort_by_key(|p| {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        let stem = n.trim_start_matches("audit-").trim_end_matches(".jsonl");
        match stem.split_once('.') {
            Some((date, i)) => (date.to_string(), i.parse::<u32>().unwrap_or(u32::MAX)),
            None => (stem.to_string(), 0),
        }
    });
    files
        .into_iter()
        .map(|p| {
            let lines = fs::read_to_string(&p)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            (p, lines)
        })
        .collect()
}

/// Writes `lines` back, each to the file it came from (a file left with none is removed).
fn write_trail(files: &[(PathBuf, Vec<String>)], lines: &[(usize, String)]) {
    for (i, (path, _)) in files.iter().enumerate() {
        let mine: Vec<&str> = lines
            .iter()
            .filter(|(f, _)| *f == i)
            .map(|(_, l)| l.as_str())
            .collect();
        if mine.is_empty() {
            fs::remove_file(path).unwrap();
        } else {
            fs::write(path, mine.join("\n") + "\n").unwrap();
        }
    }
}

fn strip_hmac(line: &str) -> String {
    match line.rfind(",\"hmac\":\"") {
        Some(cut) => format!("{}}}", &line[..cut]),
        None => line.to_string(),
    }
}

/// What someone without the key does after changing lines: numbers them 1, 2, … and recomputes
/// every `prev` (SHA-256 of the line before).
fn renumber_and_rechain(lines: &mut [(usize, String)]) {
    let mut prev = "0".repeat(64);
    for (i, (_, l)) in lines.iter_mut().enumerate() {
        let rest = &l[l.find(',').unwrap()..];
        let mut s = format!("{{\"seq\":{}{rest}", i + 1);
        let at = s.rfind("\"prev\":\"").unwrap() + "\"prev\":\"".len();
        s.replace_range(at..at + 64, &prev);
        prev = hex::encode(Sha256::digest(s.as_bytes()));
        *l = s;
    }
}

/// A copy of the store's audit directory, as a store of its own for `clawfs audit --store`.
fn copy_store(store: &Path) -> tempfile::TempDir {
    let copy = tempfile::Builder::new()
        .prefix("clawfs-audit-copy.")
        .tempdir_in("/tmp")
        .unwrap();
    let to = copy.path().join(".clawfs/audit");
    fs::create_dir_all(&to).unwrap();
    for e in fs::read_dir(store.join(".clawfs/audit")).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    copy
}

fn verify(store: &Path, key: Option<&Path>) -> Output {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("audit"),
        OsStr::new("--store"),
        store.as_os_str(),
        OsStr::new("verify"),
    ];
    if let Some(k) = key {
        args.push(OsStr::new("--key-file"));
        args.push(k.as_os_str());
    }
    clawfs(args)
}

/// Runs `attack` on a fresh copy of the trail and checks that verification with the key fails
/// (saying `says`), and whether verification without it fails too.
fn attacked(
    store: &Path,
    key: &Path,
    what: &str,
    says: &[&str],
    chain_alone_sees_it: bool,
    attack: impl FnOnce(&Path),
) {
    let copy = copy_store(store);
    attack(&copy.path().join(".clawfs/audit"));
    let out = verify(copy.path(), Some(key));
    let msg = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: verify --key-file must fail:\n{msg}"
    );
    assert!(msg.contains("audit trail broken"), "{what}: {msg}");
    assert!(
        says.iter().any(|s| msg.contains(s)),
        "{what}: expected one of {says:?}:\n{msg}"
    );
    let out = verify(copy.path(), None);
    assert_eq!(
        !out.status.success(),
        chain_alone_sees_it,
        "{what}: without the key:\n{}",
        text(&out)
    );
    if !chain_alone_sees_it {
        assert!(text(&out).contains("without --key-file"), "{}", text(&out));
    }
}

#[test]
fn stripped_signatures_and_a_cut_tail_fail_verification_with_the_key() {
    let m = Mounted::new();
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    let _locked_at_end = LockOnDrop(&m);
    let audit = m.store.join(".clawfs/audit");
    // The daemon looks every 2 s whether the vault is unlocked, then signs.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !read_trail(&audit)
        .iter()
        .any(|(_, l)| l.iter().any(|l| l.contains("\"audit:hmac-on\"")))
    {
        assert!(Instant::now() < deadline, "the trail was never signed");
        std::thread::sleep(Duration::from_millis(200));
    }
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("audit.key");
    let out = ok(clawfs([
        OsStr::new("audit"),
        OsStr::new("--store"),
        m.store.as_os_str(),
        OsStr::new("key"),
        OsStr::new("--out"),
        key.as_os_str(),
    ]));
    assert!(out.contains("fingerprint"), "{out}");

    // Signed work through the mount.
    let ws = m.ws();
    fs::write(ws.join("notes.md"), "plan\n").unwrap();
    fs::write(ws.join("draft.md"), "draft\n").unwrap();
    fs::rename(ws.join("draft.md"), ws.join("final.md")).unwrap();
    fs::create_dir(ws.join("sub")).unwrap();
    fs::write(ws.join("sub/data.txt"), "1 2 3\n").unwrap();
    fs::remove_file(ws.join("final.md")).unwrap();
    assert!(m.umount().status.success());
    // Leave no key in the kernel keyring; the trail stays verifiable with the exported key.
    ok(vault(&m, &["lock"], None));

    let trail = read_trail(&audit);
    let all: Vec<&String> = trail.iter().flat_map(|(_, l)| l).collect();
    assert!(
        all.iter()
            .any(|l| l.contains("notes.md") && l.contains("\"hmac\":")),
        "the work was signed: {all:#?}"
    );
    let last = all.last().unwrap();
    assert!(
        last.contains("\"audit:hmac-off\"") && last.contains("\"hmac\":"),
        "unmounting ends the signed stretch: {last}"
    );
    assert!(audit.join("checkpoint.json").exists());
    let out = verify(&m.store, Some(&key));
    let msg = ok(out);
    assert!(msg.contains("audit trail intact"), "{msg}");
    assert!(msg.contains("checkpoint: record seq"), "{msg}");

    let store = m.store.clone();
    let lines_of = |dir: &Path| {
        let files = read_trail(dir);
        let lines: Vec<(usize, String)> = files
            .iter()
            .enumerate()
            .flat_map(|(i, (_, l))| l.iter().map(move |l| (i, l.clone())))
            .collect();
        (files, lines)
    };

    // The attack seen in the field: signing switches deleted, every hmac removed, records
    // renumbered, the chain recomputed, a record altered.
    let field_attack = |dir: &Path| {
        let (files, lines) = lines_of(dir);
        let mut lines: Vec<(usize, String)> = lines
            .into_iter()
            .filter(|(_, l)| !l.contains("\"audit:hmac-on\"") && !l.contains("\"audit:hmac-off\""))
            .map(|(f, l)| (f, strip_hmac(&l)))
            .collect();
        let target = lines
            .iter()
            .position(|(_, l)| l.contains("notes.md"))
            .unwrap();
        lines[target].1 = lines[target].1.replace("notes.md", "other.md");
        renumber_and_rechain(&mut lines);
        write_trail(&files, &lines);
    };
    attacked(
        &store,
        &key,
        "signatures stripped, switches deleted, renumbered, rechained, edited",
        &["truncated", "not what the checkpoint signed"],
        false,
        field_attack,
    );
    // The same, with the checkpoint deleted as well.
    attacked(
        &store,
        &key,
        "the same and the checkpoint deleted",
        &["checkpoint missing"],
        false,
        |dir| {
            field_attack(dir);
            fs::remove_file(dir.join("checkpoint.json")).unwrap();
        },
    );
    // Only some signatures stripped (the chain recomputed).
    attacked(
        &store,
        &key,
        "some signatures stripped",
        &["missing hmac"],
        true,
        |dir| {
            let (files, mut lines) = lines_of(dir);
            let signed: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].1.contains("\"hmac\":") && !lines[i].1.contains("audit:"))
                .collect();
            assert!(signed.len() >= 2, "{lines:#?}");
            for &i in &signed[signed.len() / 2..] {
                lines[i].1 = strip_hmac(&lines[i].1);
            }
            renumber_and_rechain(&mut lines);
            write_trail(&files, &lines);
        },
    );
    // The last records cut off, nothing recomputed.
    for n in [1, 3] {
        attacked(
            &store,
            &key,
            &format!("last {n} records cut"),
            &["truncated"],
            false,
            |dir| {
                let (files, mut lines) = lines_of(dir);
                lines.truncate(lines.len() - n);
                write_trail(&files, &lines);
            },
        );
    }
    // The checkpoint deleted, the trail untouched.
    attacked(
        &store,
        &key,
        "checkpoint deleted",
        &["checkpoint missing"],
        false,
        |dir| fs::remove_file(dir.join("checkpoint.json")).unwrap(),
    );
    // A checkpoint moved back by hand to match a cut trail.
    attacked(
        &store,
        &key,
        "checkpoint edited to match a cut trail",
        &["bad checkpoint"],
        false,
        |dir| {
            let (files, mut lines) = lines_of(dir);
            lines.pop();
            write_trail(&files, &lines);
            let cp = dir.join("checkpoint.json");
            let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&cp).unwrap()).unwrap();
            let seq = v["seq"].as_u64().unwrap();
            v["seq"] = (seq - 1).into();
            let last = &lines.last().unwrap().1;
            v["hash"] = hex::encode(Sha256::digest(last.as_bytes())).into();
            fs::write(&cp, v.to_string()).unwrap();
        },
    );
}
