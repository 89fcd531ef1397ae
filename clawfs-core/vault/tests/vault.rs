//! Vault tests against real components: the kernel keyring, a swtpm started per test, real
//! files, and child processes aborted in the middle of a rotation or a write.
//!
//! Every test has its own store (a temporary directory), its own vault id (so its own kernel
//! keyring) and, for the TPM, its own swtpm with its own state directory: they run in parallel.
//! Temporary directories and swtpm are cleaned up by `Drop`, which runs when a test fails too;
//! swtpm also gets SIGKILL from the kernel if the test process dies without unwinding.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawfs_vault::{
    fault::FAULT_ENV, tpm, SealerChoice, SealerKind, Vault, VaultConfig, VaultError,
};
use serde_json::Value;

const PASS: &str = "correct horse battery staple";

fn store() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn vault(dir: &Path) -> Vault {
    Vault::open(dir, VaultConfig::default()).unwrap()
}

/// Locks the vault (removing its keyring) when the test ends, pass or fail.
struct Locker<'a>(&'a Vault);
impl Drop for Locker<'_> {
    fn drop(&mut self) {
        let _ = self.0.lock();
    }
}

fn secret_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("vault/secrets").join(format!("{name}.enc"))
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn flip_b64(s: &str) -> String {
    use base64::Engine;
    let e = base64::engine::general_purpose::STANDARD;
    let mut b = e.decode(s).unwrap();
    b[0] ^= 0x01;
    e.encode(b)
}

fn assert_tampered<T: std::fmt::Debug>(r: Result<T, VaultError>) {
    match r {
        Err(VaultError::Tampered { .. }) => {}
        other => panic!("want Tampered, got {other:?}"),
    }
}

/// `(manifest, tpm)` of a `RolledBack` refusal.
#[track_caller]
fn assert_rolled_back<T: std::fmt::Debug>(r: Result<T, VaultError>) -> (u64, u64) {
    match r {
        Err(VaultError::RolledBack { manifest, tpm }) => (manifest, tpm),
        other => panic!("want RolledBack, got {other:?}"),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A copy of the whole vault directory (master key, manifest, secrets, archive), removed when
/// dropped.
fn snapshot(store: &Path) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&store.join("vault"), &t.path().join("vault"));
    t
}

/// Puts a snapshot back in place of the whole vault directory.
fn restore(store: &Path, snap: &tempfile::TempDir) {
    std::fs::remove_dir_all(store.join("vault")).unwrap();
    copy_dir(&snap.path().join("vault"), &store.join("vault"));
}

/// `counter` of `manifest.json`: (NV index, value), if any.
fn manifest_counter(store: &Path) -> Option<(u32, u64)> {
    let m: Value =
        serde_json::from_slice(&std::fs::read(store.join("vault/manifest.json")).unwrap()).unwrap();
    let c = m.get("counter")?;
    Some((
        c["nv_index"].as_u64().unwrap() as u32,
        c["value"].as_u64().unwrap(),
    ))
}

#[test]
fn passphrase_vault_round_trip_lock_unlock() {
    let d = store();
    let v = vault(d.path());
    let _l = Locker(&v);
    assert!(!v.status().unwrap().initialized);
    assert!(matches!(v.get("a"), Err(VaultError::NotInitialized)));
    let st = v
        .init(SealerChoice::Kind(SealerKind::Passphrase), Some(PASS))
        .unwrap();
    assert_eq!(st.sealer, Some(SealerKind::Passphrase));
    assert!(st.unlocked);
    assert!(matches!(
        v.init(SealerChoice::Kind(SealerKind::Passphrase), Some(PASS)),
        Err(VaultError::AlreadyInitialized(_))
    ));
    assert_eq!(v.put("openai-api-key", b"sk-123").unwrap(), 1);
    assert_eq!(v.put("github-pat", b"ghp-456").unwrap(), 1);
    assert_eq!(v.put("openai-api-key", b"sk-789").unwrap(), 2);
    assert_eq!(&v.get("openai-api-key").unwrap()[..], b"sk-789");
    assert_eq!(v.list().unwrap(), ["github-pat", "openai-api-key"]);
    assert!(matches!(
        v.put("Bad Name", b"x"),
        Err(VaultError::BadName { .. })
    ));
    assert!(matches!(v.get("../x"), Err(VaultError::BadName { .. })));
    assert!(matches!(v.get("nope"), Err(VaultError::NotFound(_))));

    // The file is P1.4 §3.5 JSON.
    let f: Value =
        serde_json::from_slice(&std::fs::read(secret_path(d.path(), "openai-api-key")).unwrap())
            .unwrap();
    assert_eq!(f["algorithm"], "AES-256-GCM");
    assert_eq!(f["version"], 2);
    assert_eq!(f["kdf"]["iterations"], 600000);
    assert!(f["key_id"]
        .as_str()
        .unwrap()
        .starts_with("kernel-keyring:clawos-master#"));
    assert!(!String::from_utf8_lossy(
        &std::fs::read(secret_path(d.path(), "openai-api-key")).unwrap()
    )
    .contains("sk-789"));

    // Another process (a fresh Vault) reads through the keyring.
    assert_eq!(&vault(d.path()).get("github-pat").unwrap()[..], b"ghp-456");

    v.lock().unwrap();
    assert!(!v.status().unwrap().unlocked);
    assert!(matches!(v.get("github-pat"), Err(VaultError::Locked)));
    assert!(matches!(
        vault(d.path()).get("github-pat"),
        Err(VaultError::Locked)
    ));
    assert!(matches!(v.put("x", b"1"), Err(VaultError::Locked)));
    assert!(matches!(
        v.unlock(None),
        Err(VaultError::PassphraseRequired)
    ));
    assert!(matches!(
        v.unlock(Some("wrong")),
        Err(VaultError::WrongPassphrase)
    ));
    assert!(v.unlock(Some(PASS)).unwrap().unlocked);
    assert_eq!(&v.get("github-pat").unwrap()[..], b"ghp-456");

    v.remove("github-pat").unwrap();
    assert!(matches!(v.get("github-pat"), Err(VaultError::NotFound(_))));
    assert!(matches!(
        v.remove("github-pat"),
        Err(VaultError::NotFound(_))
    ));
    assert_eq!(v.list().unwrap(), ["openai-api-key"]);
    // A removed name can be stored again, at a higher version.
    assert_eq!(v.put("github-pat", b"new").unwrap(), 2);
    assert_eq!(v.status().unwrap().secrets, 2);
}

#[test]
fn host_key_vault() {
    let d = store();
    let v = vault(d.path());
    let _l = Locker(&v);
    let st = v
        .init(SealerChoice::Kind(SealerKind::HostKey), None)
        .unwrap();
    assert_eq!(st.sealer, Some(SealerKind::HostKey));
    let hk = d.path().join(".clawfs/host.key");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&hk).unwrap().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(&hk).unwrap().len(), 32);
    v.put("token", b"abc").unwrap();
    v.lock().unwrap();
    v.unlock(None).unwrap();
    assert_eq!(&v.get("token").unwrap()[..], b"abc");

    // A host key readable by others is refused; another key is refused by fingerprint.
    use std::os::unix::fs::PermissionsExt;
    v.lock().unwrap();
    std::fs::set_permissions(&hk, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(v.unlock(None), Err(VaultError::HostKey { .. })));
    let good = std::fs::read(&hk).unwrap();
    std::fs::set_permissions(&hk, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&hk, [7u8; 32]).unwrap();
    assert!(matches!(v.unlock(None), Err(VaultError::HostKey { .. })));
    std::fs::write(&hk, &good).unwrap();
    v.unlock(None).unwrap();
    assert_eq!(&v.get("token").unwrap()[..], b"abc");
}

#[test]
fn unlock_times_out() {
    let d = store();
    let cfg = VaultConfig {
        unlock_timeout: Duration::from_secs(2),
        ..VaultConfig::default()
    };
    let v = Vault::open(d.path(), cfg).unwrap();
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::HostKey), None)
        .unwrap();
    v.put("a", b"1").unwrap();
    v.unlock(None).unwrap();
    assert_eq!(&v.get("a").unwrap()[..], b"1");
    std::thread::sleep(Duration::from_millis(3100));
    assert!(matches!(v.get("a"), Err(VaultError::Locked)));
    assert!(!v.status().unwrap().unlocked);
}

#[test]
fn tampering_is_detected() {
    let d = store();
    let v = vault(d.path());
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::Passphrase), Some(PASS))
        .unwrap();
    for (n, val) in [("a", "alpha"), ("b", "bravo"), ("c", "charlie")] {
        v.put(n, val.as_bytes()).unwrap();
    }
    let pa = secret_path(d.path(), "a");
    let pb = secret_path(d.path(), "b");
    let pristine = std::fs::read(&pa).unwrap();
    let pristine_b = std::fs::read(&pb).unwrap();
    let restore = || {
        std::fs::write(&pa, &pristine).unwrap();
        std::fs::write(&pb, &pristine_b).unwrap();
    };

    // A flipped bit in each binary field.
    for field in ["encrypted_value", "iv", "auth_tag"] {
        edit_json(&pa, |j| {
            j[field] = Value::from(flip_b64(j[field].as_str().unwrap()))
        });
        assert_tampered(v.get("a"));
        restore();
    }
    // A flipped byte anywhere in the raw file.
    let mut raw = pristine.clone();
    let i = raw.len() / 2;
    raw[i] ^= 0x20;
    std::fs::write(&pa, &raw).unwrap();
    assert_tampered(v.get("a"));
    restore();
    assert_eq!(&v.get("a").unwrap()[..], b"alpha");

    // The AAD fields: secret_id, version (with a matching salt, so only GCM can tell), key_id.
    edit_json(&pa, |j| j["secret_id"] = "b".into());
    assert_tampered(v.get("a"));
    restore();
    edit_json(&pa, |j| {
        j["version"] = 7.into();
        use base64::Engine;
        j["kdf"]["salt"] = base64::engine::general_purpose::STANDARD
            .encode("a:v7")
            .into();
    });
    assert_tampered(v.get("a"));
    restore();
    edit_json(&pa, |j| {
        j["key_id"] = "kernel-keyring:clawos-master#00000000000000000000000000000000".into()
    });
    assert_tampered(v.get("a"));
    restore();

    // Ciphertext swapped between two files (same length values: both 5 bytes).
    let ja: Value = serde_json::from_slice(&pristine).unwrap();
    let jb: Value = serde_json::from_slice(&std::fs::read(&pb).unwrap()).unwrap();
    edit_json(&pa, |j| {
        for f in ["encrypted_value", "iv", "auth_tag"] {
            j[f] = jb[f].clone();
        }
    });
    edit_json(&pb, |j| {
        for f in ["encrypted_value", "iv", "auth_tag"] {
            j[f] = ja[f].clone();
        }
    });
    assert_tampered(v.get("a"));
    assert_tampered(v.get("b"));
    // A whole file copied over another name.
    std::fs::copy(secret_path(d.path(), "c"), &pb).unwrap();
    assert_tampered(v.get("b"));
    restore();

    // An older version put back.
    let old_c = std::fs::read(secret_path(d.path(), "c")).unwrap();
    v.put("c", b"charlie-2").unwrap();
    std::fs::write(secret_path(d.path(), "c"), &old_c).unwrap();
    assert_tampered(v.get("c"));
    // A removed secret put back.
    v.put("c", b"charlie-3").unwrap();
    let before_rm = std::fs::read(secret_path(d.path(), "c")).unwrap();
    v.remove("c").unwrap();
    std::fs::write(secret_path(d.path(), "c"), &before_rm).unwrap();
    assert!(matches!(v.get("c"), Err(VaultError::NotFound(_))));
    std::fs::remove_file(secret_path(d.path(), "c")).unwrap();

    // The manifest.
    let pm = d.path().join("vault/manifest.json");
    let m = std::fs::read(&pm).unwrap();
    edit_json(&pm, |j| j["secrets"]["a"]["version"] = 0.into());
    assert_tampered(v.get("a"));
    std::fs::write(&pm, &m).unwrap();

    // master-key.enc: the wrapped key, the header, a raw byte.
    let pk = d.path().join("vault/master-key.enc");
    let k = std::fs::read(&pk).unwrap();
    v.lock().unwrap();
    edit_json(&pk, |j| {
        j["ciphertext"] = flip_b64(j["ciphertext"].as_str().unwrap()).into()
    });
    assert_tampered(v.unlock(Some(PASS)));
    std::fs::write(&pk, &k).unwrap();
    edit_json(&pk, |j| j["generation"] = 9.into());
    assert_tampered(v.unlock(Some(PASS)));
    std::fs::write(&pk, &k).unwrap();
    let mut raw = k.clone();
    raw[10] ^= 0x01;
    std::fs::write(&pk, &raw).unwrap();
    assert_tampered(v.unlock(Some(PASS)));
    std::fs::write(&pk, &k).unwrap();
    v.unlock(Some(PASS)).unwrap();
    assert_eq!(&v.get("a").unwrap()[..], b"alpha");
    assert_eq!(&v.get("b").unwrap()[..], b"bravo");
}

#[test]
fn passphrase_rotation_and_archive() {
    let d = store();
    let v = vault(d.path());
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::Passphrase), Some(PASS))
        .unwrap();
    v.put("a", b"1").unwrap();
    v.put("b", b"2").unwrap();
    let before = v.status().unwrap();
    assert!(matches!(
        v.rotate(None, &|_| {}),
        Err(VaultError::PassphraseRequired)
    ));
    assert!(matches!(
        v.rotate(Some("wrong"), &|_| {}),
        Err(VaultError::WrongPassphrase)
    ));
    let r = v.rotate(Some(PASS), &|_| {}).unwrap();
    assert_eq!(r.secrets, 2);
    assert_eq!(r.generation, 2);
    let after = v.status().unwrap();
    assert_ne!(before.key_id, after.key_id);
    assert_eq!(after.key_id.as_deref(), Some(r.new_key_id.as_str()));
    assert_eq!(&v.get("a").unwrap()[..], b"1");
    let f: Value =
        serde_json::from_slice(&std::fs::read(secret_path(d.path(), "a")).unwrap()).unwrap();
    assert_eq!(f["version"], 2);
    assert_eq!(f["key_id"], Value::from(r.new_key_id.clone()));
    let archived: Vec<_> = std::fs::read_dir(d.path().join("vault/archive"))
        .unwrap()
        .collect();
    assert_eq!(archived.len(), 1);
    // After relocking, the passphrase still opens the new key.
    v.lock().unwrap();
    v.unlock(Some(PASS)).unwrap();
    assert_eq!(&v.get("b").unwrap()[..], b"2");
    // Archives older than 30 days are purged by the next unlock.
    let old = d
        .path()
        .join("vault/archive/master-key-20000101T000000Z-deadbeef.enc");
    std::fs::write(&old, b"{}").unwrap();
    v.unlock(Some(PASS)).unwrap();
    assert!(!old.exists());
    assert_eq!(
        std::fs::read_dir(d.path().join("vault/archive"))
            .unwrap()
            .count(),
        1
    );
}

/// Child half of `rotation_survives_a_crash_at_every_step`: rotates and is aborted by the fault
/// hook. Does nothing unless started by that test.
#[test]
fn child_rotate() {
    let Ok(dir) = std::env::var("CLAWFS_TEST_VAULT_STORE") else {
        return;
    };
    let v = vault(Path::new(&dir));
    v.rotate(None, &|_| {}).unwrap();
}

/// Child half of the TPM crash tests: stores `CLAWFS_TEST_PUT` (`name=value`) and is aborted
/// by the fault hook. Does nothing unless started by those tests.
#[test]
fn child_put() {
    let (Ok(dir), Ok(put)) = (
        std::env::var("CLAWFS_TEST_VAULT_STORE"),
        std::env::var("CLAWFS_TEST_PUT"),
    ) else {
        return;
    };
    let (name, value) = put.split_once('=').unwrap();
    vault(Path::new(&dir)).put(name, value.as_bytes()).unwrap();
}

/// Runs the child test `test` on the store `dir`, aborting after step `fault_after`. `tcti` goes
/// to the child as `TPM2TOOLS_TCTI` (its vault uses the default configuration).
fn run_child(
    test: &str,
    dir: &Path,
    fault_after: u64,
    tcti: Option<&str>,
    env: &[(&str, &str)],
) -> std::process::ExitStatus {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("CLAWFS_TEST_VAULT_STORE", dir)
        .env(FAULT_ENV, fault_after.to_string())
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match tcti {
        Some(t) => cmd.env("TPM2TOOLS_TCTI", t),
        None => cmd.env_remove("TPM2TOOLS_TCTI"),
    };
    cmd.status().unwrap()
}

fn run_child_rotation(dir: &Path, fault_after: u64) -> std::process::ExitStatus {
    run_child("child_rotate", dir, fault_after, None, &[])
}

#[test]
fn rotation_survives_a_crash_at_every_step() {
    let d = store();
    let v = vault(d.path());
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::HostKey), None)
        .unwrap();
    let mut want = BTreeMap::new();
    for i in 0..3 {
        let name = format!("secret-{i}");
        let value = format!("value {i}");
        v.put(&name, value.as_bytes()).unwrap();
        want.insert(name, value);
    }
    let check = |v: &Vault| {
        for (n, val) in &want {
            assert_eq!(&v.get(n).unwrap()[..], val.as_bytes(), "{n}");
        }
    };
    // Steps: started, 3 × staged, verified, archived, 3 × switched, manifest, key, done = 12.
    let steps = 2 * want.len() as u64 + 6;
    let mut generation = 1;
    for n in 1..=steps + 1 {
        let status = run_child_rotation(d.path(), n);
        if n <= steps {
            assert!(!status.success(), "step {n}: the child should have aborted");
        } else {
            assert!(status.success(), "the child should have finished");
        }
        // Every secret readable straight away, through the keyring, by another process.
        check(&vault(d.path()));
        // Half the time, relock and unlock (which recovers); then the next rotate completes.
        let fresh = vault(d.path());
        if n % 2 == 0 {
            fresh.lock().unwrap();
            assert!(matches!(fresh.get("secret-0"), Err(VaultError::Locked)));
            fresh.unlock(None).unwrap();
            assert!(fresh.status().unwrap().rotation.is_none());
            check(&fresh);
        }
        let r = fresh.rotate(None, &|_| {}).unwrap();
        assert_eq!(r.secrets, want.len());
        // Crashed before every staged secret was verified (steps 1..=4): rolled back; after:
        // completed. Either way this rotation then adds one generation.
        let completed = n > 1 + want.len() as u64;
        let expect = generation + 1 + u64::from(completed);
        assert_eq!(r.generation, expect, "step {n}");
        generation = r.generation;
        assert!(fresh.status().unwrap().rotation.is_none());
        assert!(!d.path().join("vault/rotation-staging").exists());
        check(&fresh);
        check(&vault(d.path()));
    }
}

#[test]
fn rotation_during_concurrent_reads() {
    let d = store();
    let v = Arc::new(vault(d.path()));
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::HostKey), None)
        .unwrap();
    let mut want = BTreeMap::new();
    for i in 0..6 {
        let name = format!("s-{i}");
        let value = format!("value-{i}").repeat(i + 1);
        v.put(&name, value.as_bytes()).unwrap();
        want.insert(name, value);
    }
    let want = Arc::new(want);
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (want, done, dir) = (want.clone(), done.clone(), d.path().to_path_buf());
            std::thread::spawn(move || {
                // A separate Vault: like the daemon, with its own cache.
                let reader = vault(&dir);
                let mut reads = 0u64;
                while !done.load(Ordering::SeqCst) {
                    for (n, val) in want.iter().skip(t) {
                        let got = reader.get(n).unwrap_or_else(|e| panic!("{n}: {e}"));
                        assert_eq!(&got[..], val.as_bytes(), "{n}");
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    for _ in 0..3 {
        v.rotate(None, &|_| {}).unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 0);
    assert_eq!(v.status().unwrap().generation, Some(4));
}

// ---------------------------------------------------------------------------------------------
// TPM (swtpm)

struct Swtpm {
    child: Child,
    state: tempfile::TempDir,
    port: u16,
}

impl Swtpm {
    fn start() -> Swtpm {
        for _ in 0..50 {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            if port == u16::MAX || TcpListener::bind(("127.0.0.1", port + 1)).is_err() {
                continue;
            }
            drop(l);
            let state = tempfile::tempdir().unwrap();
            let mut cmd = Command::new("swtpm");
            // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent. It makes
            // the kernel SIGKILL swtpm if the test process dies without running `Drop` (killed,
            // aborted), so no swtpm outlives a test run.
            unsafe {
                use std::os::unix::process::CommandExt;
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = cmd
                .args(["socket", "--tpm2", "--server"])
                .arg(format!("type=tcp,port={port}"))
                .arg("--ctrl")
                .arg(format!("type=tcp,port={}", port + 1))
                .args(["--flags", "not-need-init,startup-clear", "--tpmstate"])
                .arg(format!("dir={}", state.path().display()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("swtpm (apt-get install swtpm swtpm-tools)");
            let mut s = Swtpm { child, state, port };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = s.child.try_wait() {
                    break; // port taken meanwhile: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return s;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = s.child.kill();
            let _ = s.child.wait();
            let _ = &mut s.state;
        }
        panic!("could not start swtpm");
    }

    fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tpm_config(tpm: &Swtpm, pcrs: Vec<u8>) -> VaultConfig {
    VaultConfig {
        tcti: Some(tpm.tcti()),
        pcrs,
        ..VaultConfig::default()
    }
}

#[test]
fn tpm_sealed_vault() {
    let tpm = Swtpm::start();
    let d = store();
    let v = Vault::open(d.path(), tpm_config(&tpm, vec![])).unwrap();
    let _l = Locker(&v);
    let st = v.init(SealerChoice::Auto, None).unwrap();
    assert_eq!(st.sealer, Some(SealerKind::Tpm));
    assert_eq!(st.tcti.as_deref(), Some(tpm.tcti().as_str()));
    let env: Value =
        serde_json::from_slice(&std::fs::read(d.path().join("vault/master-key.enc")).unwrap())
            .unwrap();
    assert_eq!(env["sealer"], "tpm2");
    assert_eq!(env["format"], 1);
    assert!(env["public"].is_string() && env["private"].is_string());
    v.put("k", b"tpm-protected").unwrap();
    v.lock().unwrap();
    // Unseal in a fresh context and a fresh Vault.
    let v2 = Vault::open(d.path(), tpm_config(&tpm, vec![])).unwrap();
    v2.unlock(None).unwrap();
    assert_eq!(&v2.get("k").unwrap()[..], b"tpm-protected");
    v2.rotate(None, &|_| {}).unwrap();
    v2.lock().unwrap();
    v2.unlock(None).unwrap();
    assert_eq!(&v2.get("k").unwrap()[..], b"tpm-protected");

    // A flipped byte in the private blob: the TPM refuses to load it.
    v2.lock().unwrap();
    let pk = d.path().join("vault/master-key.enc");
    let k = std::fs::read(&pk).unwrap();
    edit_json(&pk, |j| {
        use base64::Engine;
        let e = base64::engine::general_purpose::STANDARD;
        let mut b = e.decode(j["private"].as_str().unwrap()).unwrap();
        let i = b.len() - 5;
        b[i] ^= 0x01;
        j["private"] = e.encode(b).into();
    });
    assert_tampered(v2.unlock(None));
    std::fs::write(&pk, &k).unwrap();
    v2.unlock(None).unwrap();
}

#[test]
fn tpm_pcr_policy_refuses_after_extend() {
    let tpm = Swtpm::start();
    let d = store();
    let v = Vault::open(d.path(), tpm_config(&tpm, vec![16, 23])).unwrap();
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::Tpm), None).unwrap();
    assert_eq!(v.status().unwrap().pcrs, vec![16, 23]);
    v.put("k", b"bound").unwrap();
    v.lock().unwrap();
    // PCRs unchanged: unseals (the PCR list comes from the envelope).
    let plain = Vault::open(d.path(), tpm_config(&tpm, vec![])).unwrap();
    plain.unlock(None).unwrap();
    assert_eq!(&plain.get("k").unwrap()[..], b"bound");
    plain.lock().unwrap();
    // Extend PCR 16 with tpm2-tools: the boot state "changed", the TPM refuses.
    let out = Command::new("tpm2_pcrextend")
        .arg("-T")
        .arg(tpm.tcti())
        .arg(format!("16:sha256={}", "ab".repeat(32)))
        .output()
        .expect("tpm2_pcrextend (apt-get install tpm2-tools)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(matches!(plain.unlock(None), Err(VaultError::PcrMismatch)));
    assert!(matches!(plain.get("k"), Err(VaultError::Locked)));
    // The same through tss-esapi on PCR 23, on a fresh vault.
    let d2 = store();
    let v2 = Vault::open(d2.path(), tpm_config(&tpm, vec![23])).unwrap();
    let _l2 = Locker(&v2);
    v2.init(SealerChoice::Kind(SealerKind::Tpm), None).unwrap();
    v2.lock().unwrap();
    clawfs_vault::tpm::pcr_extend(&tpm.tcti(), 23, b"new boot state").unwrap();
    assert!(matches!(v2.unlock(None), Err(VaultError::PcrMismatch)));
}

#[test]
fn no_tpm_is_reported() {
    let d = store();
    let cfg = VaultConfig {
        tcti: Some("swtpm:host=127.0.0.1,port=1".into()),
        ..VaultConfig::default()
    };
    let v = Vault::open(d.path(), cfg).unwrap();
    let _l = Locker(&v);
    match v.init(SealerChoice::Kind(SealerKind::Tpm), None) {
        Err(VaultError::NoTpm(_)) => {}
        other => panic!("want NoTpm, got {other:?}"),
    }
    assert!(!v.status().unwrap().initialized);
}

// ---------------------------------------------------------------------------------------------
// Rollback of the whole vault: the manifest bound to a TPM NV counter (TPM sealer only)

/// A TPM vault in `dir`, initialised and unlocked.
fn tpm_vault(tpm: &Swtpm, dir: &Path) -> Vault {
    let v = Vault::open(dir, tpm_config(tpm, vec![])).unwrap();
    v.init(SealerChoice::Kind(SealerKind::Tpm), None).unwrap();
    v
}

/// (NV index, manifest value, TPM counter value).
fn counters(tpm: &Swtpm, dir: &Path) -> (u32, u64, u64) {
    let (index, value) = manifest_counter(dir).expect("a TPM vault's manifest has a counter");
    (
        index,
        value,
        tpm::nv_counter_read(&tpm.tcti(), index).unwrap(),
    )
}

#[test]
fn tpm_whole_vault_rollback_is_refused() {
    let tpm = Swtpm::start();
    let d = store();
    let v = tpm_vault(&tpm, d.path());
    let _l = Locker(&v);
    let (index, c0, t0) = counters(&tpm, d.path());
    assert_eq!(c0, t0);
    assert!((tpm::NV_COUNTER_FIRST..=tpm::NV_COUNTER_LAST).contains(&index));
    assert_eq!(v.status().unwrap().rollback_counter, Some(index));

    // Every put moves manifest and counter on by one.
    v.put("a", b"v1").unwrap();
    v.put("b", b"b1").unwrap();
    assert_eq!(counters(&tpm, d.path()), (index, c0 + 2, c0 + 2));
    let old = snapshot(d.path());
    v.put("a", b"v2").unwrap();
    let latest = snapshot(d.path());
    assert_eq!(counters(&tpm, d.path()), (index, c0 + 3, c0 + 3));

    // The whole vault put back under the unlocked vault: readers (this process and another one,
    // through the keyring's floor) and writers refuse it.
    restore(d.path(), &old);
    assert_eq!(assert_rolled_back(v.get("a")), (c0 + 2, c0 + 3));
    let other = Vault::open(d.path(), tpm_config(&tpm, vec![])).unwrap();
    assert_rolled_back(other.get("b"));
    assert_rolled_back(v.put("c", b"x"));
    assert_rolled_back(v.remove("b"));
    // Locked, then unlocked: refused, and the vault stays locked.
    v.lock().unwrap();
    assert_eq!(assert_rolled_back(v.unlock(None)), (c0 + 2, c0 + 3));
    assert!(!v.status().unwrap().unlocked);
    assert!(matches!(v.get("a"), Err(VaultError::Locked)));
    assert_rolled_back(v.rotate(None, &|_| {}));
    // Nothing was written by the refusals.
    assert_eq!(counters(&tpm, d.path()), (index, c0 + 2, c0 + 3));
    // The latest copy back: accepted.
    restore(d.path(), &latest);
    v.unlock(None).unwrap();
    assert_eq!(&v.get("a").unwrap()[..], b"v2");

    // rm and rotate move the counter on too, so a copy from before either is refused.
    for what in ["rm", "rotate"] {
        let before = snapshot(d.path());
        let (_, m, _) = counters(&tpm, d.path());
        match what {
            "rm" => v.remove("b").unwrap(),
            _ => {
                v.rotate(None, &|_| {}).unwrap();
            }
        }
        assert_eq!(counters(&tpm, d.path()), (index, m + 1, m + 1), "{what}");
        let after = snapshot(d.path());
        restore(d.path(), &before);
        v.lock().unwrap();
        // Before the rotation the key was another one: unsealed from the old master-key.enc
        // (same TPM), it opens the old manifest, which the counter refuses.
        assert_eq!(assert_rolled_back(v.unlock(None)), (m, m + 1), "{what}");
        restore(d.path(), &after);
        v.unlock(None).unwrap();
        assert_eq!(&v.get("a").unwrap()[..], b"v2", "{what}");
    }
    assert!(matches!(v.get("b"), Err(VaultError::NotFound(_))));

    // A backup put back on purpose: `rebind_counter` accepts it and leaves every other copy
    // behind, the one it replaced included.
    let newest = snapshot(d.path());
    restore(d.path(), &old);
    v.lock().unwrap();
    assert_rolled_back(v.unlock(None));
    let st = v.rebind_counter(None).unwrap();
    assert!(st.unlocked);
    assert_eq!(st.rollback_counter, Some(index));
    assert_eq!(&v.get("a").unwrap()[..], b"v1");
    assert_eq!(&v.get("b").unwrap()[..], b"b1");
    let (_, m, t) = counters(&tpm, d.path());
    assert_eq!(m, t);
    restore(d.path(), &newest);
    v.lock().unwrap();
    assert_rolled_back(v.unlock(None));
}

#[test]
fn tpm_crash_between_manifest_and_counter_is_caught_up() {
    let tpm = Swtpm::start();
    let d = store();
    let v = tpm_vault(&tpm, d.path());
    let _l = Locker(&v);
    v.put("a", b"v1").unwrap();
    let before = snapshot(d.path());
    let (index, c, t) = counters(&tpm, d.path());
    assert_eq!(c, t);

    // A child stores v2 and dies right after the new manifest is durable, before the counter
    // is incremented (step 1 of a TPM put).
    let crash = |value: &str| {
        let put = format!("a={value}");
        let st = run_child(
            "child_put",
            d.path(),
            1,
            Some(&tpm.tcti()),
            &[("CLAWFS_TEST_PUT", &put)],
        );
        assert!(!st.success(), "the child should have aborted");
    };
    crash("v2");
    assert_eq!(counters(&tpm, d.path()), (index, c + 1, c));
    // Nothing is lost: the new manifest, one ahead of the counter, is accepted by readers ...
    assert_eq!(&v.get("a").unwrap()[..], b"v2");
    // ... and by unlock, which catches the counter up.
    v.lock().unwrap();
    v.unlock(None).unwrap();
    assert_eq!(counters(&tpm, d.path()), (index, c + 1, c + 1));
    assert_eq!(&v.get("a").unwrap()[..], b"v2");
    // The catch-up is real: the copy from before that put is now a rollback.
    let caught_up = snapshot(d.path());
    restore(d.path(), &before);
    v.lock().unwrap();
    assert_eq!(assert_rolled_back(v.unlock(None)), (c, c + 1));
    restore(d.path(), &caught_up);
    v.unlock(None).unwrap();

    // A writer catches up as well: crash again, then a put in this process.
    crash("v3");
    assert_eq!(counters(&tpm, d.path()), (index, c + 2, c + 1));
    v.put("b", b"b1").unwrap();
    assert_eq!(counters(&tpm, d.path()), (index, c + 3, c + 3));
    assert_eq!(&v.get("a").unwrap()[..], b"v3");
    assert_eq!(&v.get("b").unwrap()[..], b"b1");
}

#[test]
fn tpm_rotation_crash_at_every_step_keeps_manifest_and_counter_in_step() {
    let tpm = Swtpm::start();
    let d = store();
    let v = tpm_vault(&tpm, d.path());
    let _l = Locker(&v);
    v.put("s", b"value").unwrap();
    let first = snapshot(d.path());
    // One secret: started, staged, verified, archived, switched, manifest, key, done, and the
    // TPM counter increment = 9 steps.
    let steps = 9;
    for n in 1..=steps + 1 {
        let st = run_child("child_rotate", d.path(), n, Some(&tpm.tcti()), &[]);
        assert_eq!(st.success(), n > steps, "step {n}");
        // The counter is never ahead of the manifest, and behind it by one at most.
        let (_, m, t) = counters(&tpm, d.path());
        assert!(m == t || m == t + 1, "step {n}: manifest {m}, counter {t}");
        // Readable straight away, through the keyring, by another process.
        let fresh = Vault::open(d.path(), tpm_config(&tpm, vec![])).unwrap();
        assert_eq!(&fresh.get("s").unwrap()[..], b"value", "step {n}");
        // Unlock recovers the rotation and catches the counter up; the next rotate completes.
        fresh.lock().unwrap();
        fresh.unlock(None).unwrap();
        let (_, m, t) = counters(&tpm, d.path());
        assert_eq!(m, t, "step {n}");
        assert_eq!(&fresh.get("s").unwrap()[..], b"value", "step {n}");
        fresh.rotate(None, &|_| {}).unwrap();
        let (_, m2, t2) = counters(&tpm, d.path());
        assert_eq!((m2, t2), (m + 1, m + 1), "step {n}");
        assert_eq!(&fresh.get("s").unwrap()[..], b"value", "step {n}");
    }
    restore(d.path(), &first);
    v.lock().unwrap();
    assert_rolled_back(v.unlock(None));
}

#[test]
fn tpm_lost_or_replaced_counter_is_refused_until_rebound() {
    let tpm = Swtpm::start();
    let d = store();
    let v = tpm_vault(&tpm, d.path());
    let _l = Locker(&v);
    v.put("a", b"v1").unwrap();
    let (index, _, old_value) = counters(&tpm, d.path());
    v.lock().unwrap();

    // The counter undefined.
    tpm::nv_undefine(&tpm.tcti(), index).unwrap();
    match v.unlock(None) {
        Err(VaultError::RollbackCounter { index: i, .. }) => assert_eq!(i, index),
        other => panic!("want RollbackCounter, got {other:?}"),
    }
    // An ordinary index (anyone may write any value into it) defined at its handle.
    let out = Command::new("tpm2_nvdefine")
        .arg("-T")
        .arg(tpm.tcti())
        .args([
            "-C",
            "o",
            "-s",
            "8",
            "-a",
            "ownerread|ownerwrite|authread|authwrite",
        ])
        .arg(format!("{index:#x}"))
        .output()
        .expect("tpm2_nvdefine (apt-get install tpm2-tools)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match v.unlock(None) {
        Err(VaultError::RollbackCounter { index: i, reason }) => {
            assert_eq!(i, index);
            assert!(reason.contains("not a counter"), "{reason}");
        }
        other => panic!("want RollbackCounter, got {other:?}"),
    }
    assert!(!v.status().unwrap().unlocked);

    // Rebinding defines a new counter (the foreign index is left alone) and unlocks.
    let st = v.rebind_counter(None).unwrap();
    let new = st.rollback_counter.unwrap();
    assert_ne!(new, index);
    assert_eq!(&v.get("a").unwrap()[..], b"v1");
    let (i, m, t) = counters(&tpm, d.path());
    assert_eq!((i, m), (new, t));
    // A new counter starts above any counter the TPM deleted: undefining and redefining never
    // takes a value back.
    assert!(
        t > old_value,
        "new counter at {t}, the undefined one was at {old_value}"
    );
    v.lock().unwrap();
    v.unlock(None).unwrap();

    // Someone with access to the TPM bumps the counter: the vault refuses (a denial of
    // service, never an accepted rollback), until rebound.
    tpm::nv_counter_increment(&tpm.tcti(), new).unwrap();
    v.lock().unwrap();
    assert_eq!(assert_rolled_back(v.unlock(None)), (m, m + 1));
    v.rebind_counter(None).unwrap();
    assert_eq!(&v.get("a").unwrap()[..], b"v1");
}

#[test]
fn passphrase_vault_rollback_is_not_detected() {
    // Documented limitation (docs/vault.md): without a TPM there is no counter, so a whole
    // vault put back to a consistent earlier copy is accepted, with no false refusal.
    let d = store();
    let v = vault(d.path());
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::Passphrase), Some(PASS))
        .unwrap();
    assert_eq!(v.status().unwrap().rollback_counter, None);
    v.put("a", b"v1").unwrap();
    let old = snapshot(d.path());
    v.put("a", b"v2").unwrap();
    v.rotate(Some(PASS), &|_| {}).unwrap();
    assert!(manifest_counter(d.path()).is_none());
    restore(d.path(), &old);
    v.lock().unwrap();
    v.unlock(Some(PASS)).unwrap();
    assert_eq!(&v.get("a").unwrap()[..], b"v1");
    v.put("b", b"b1").unwrap();
    assert!(matches!(
        v.rebind_counter(Some(PASS)),
        Err(VaultError::NoTpm(_))
    ));
}

/// How host `host` of a shared store opens the vault, with its own TPM.
fn host_config(tpm: &Swtpm, host: &str) -> VaultConfig {
    VaultConfig {
        host: Some(host.into()),
        ..tpm_config(tpm, Vec::new())
    }
}

#[test]
fn each_host_unseals_the_master_key_with_its_own_tpm() {
    let (tpm_a, tpm_b) = (Swtpm::start(), Swtpm::start());
    let d = store();
    // Host a creates the vault (its TPM seals master-key.enc) and stores a secret.
    let a = Vault::open(d.path(), host_config(&tpm_a, "a")).unwrap();
    let _la = Locker(&a);
    a.init(SealerChoice::Kind(SealerKind::Tpm), None).unwrap();
    a.put("db-password", b"hunter2").unwrap();
    // Host b cannot open master-key.enc: it is sealed by a's TPM.
    let b = Vault::open(d.path(), host_config(&tpm_b, "b")).unwrap();
    let _lb = Locker(&b);
    assert!(b.unlock(None).is_err());
    // b makes its key pair, sealed by its TPM; until a grants it, b has no key.
    let public = b
        .create_host_key("b", SealerChoice::Kind(SealerKind::Tpm), None)
        .unwrap();
    assert!(matches!(
        b.create_host_key("b", SealerChoice::Kind(SealerKind::Tpm), None),
        Err(VaultError::AlreadyInitialized(_))
    ));
    match b.unlock(None) {
        Err(e @ VaultError::NoGrant { .. }) => assert!(e.to_string().contains("add-host b")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(b.get("db-password"), Err(VaultError::Locked)));
    // A host with no key of its own is refused; so is a name that is no host.
    assert!(matches!(
        a.add_host("c"),
        Err(VaultError::BadHostKey { .. })
    ));
    assert!(matches!(a.add_host("../b"), Err(VaultError::BadHost(_))));
    // a grants b; b unlocks with its own TPM and reads the secret.
    assert_eq!(a.add_host("b").unwrap().fingerprint, public.fingerprint);
    b.unlock(None).unwrap();
    assert_eq!(&b.get("db-password").unwrap()[..], b"hunter2");
    let st = a.status().unwrap();
    assert_eq!(st.hosts.len(), 1);
    assert_eq!(st.hosts[0].granted_generation, Some(1));
    // Each host has its own keyring: locking b leaves a unlocked.
    b.lock().unwrap();
    assert_eq!(&a.get("db-password").unwrap()[..], b"hunter2");
    // b's key needs b's TPM: on a machine with another TPM, b's grant does not open (and that
    // TPM does not hold master-key.enc's seal either).
    let other_tpm = Swtpm::start();
    let b_elsewhere = Vault::open(d.path(), host_config(&other_tpm, "b")).unwrap();
    assert!(b_elsewhere.unlock(None).is_err());
    // A rotation on a renews b's grant: b unlocks with the new key and reads the secret.
    let r = a.rotate(None, &|_| {}).unwrap();
    assert_eq!(r.hosts, ["b"]);
    b.unlock(None).unwrap();
    assert_eq!(&b.get("db-password").unwrap()[..], b"hunter2");
    assert_eq!(b.status().unwrap().generation, Some(2));
    b.lock().unwrap();
    // A grant edited, or moved to another host's name, does not open.
    let grant = d.path().join("vault/hosts/b.grant");
    let good = std::fs::read(&grant).unwrap();
    edit_json(&grant, |v| {
        v["ciphertext"] = Value::String(flip_b64(v["ciphertext"].as_str().unwrap()))
    });
    assert_tampered(b.unlock(None));
    std::fs::write(&grant, &good).unwrap();
    edit_json(&grant, |v| v["generation"] = Value::from(1));
    assert!(b.unlock(None).is_err());
    std::fs::write(&grant, &good).unwrap();
    // A grant of an older key (a rotation that stopped before renewing it) says what to do,
    // and the next unlock on a host with the key renews it.
    let older = serde_json::to_vec(&{
        let mut v: Value = serde_json::from_slice(&good).unwrap();
        v["key_id"] = Value::String("0".repeat(64));
        v
    })
    .unwrap();
    std::fs::write(&grant, older).unwrap();
    match b.unlock(None) {
        Err(e @ VaultError::NoGrant { .. }) => assert!(e.to_string().contains("generation")),
        other => panic!("{other:?}"),
    }
    a.lock().unwrap();
    a.unlock(None).unwrap();
    b.unlock(None).unwrap();
    assert_eq!(&b.get("db-password").unwrap()[..], b"hunter2");

    // A host nobody granted forges a grant file for itself: renewals (an unlock, a rotation on
    // a) never wrap the key to it, as only `add-host` lists hosts.
    let tpm_d = Swtpm::start();
    let dv = Vault::open(d.path(), host_config(&tpm_d, "d")).unwrap();
    let _ld = Locker(&dv);
    let d_key = dv
        .create_host_key("d", SealerChoice::Kind(SealerKind::Tpm), None)
        .unwrap();
    let host_file = |h: &str, ext: &str| d.path().join(format!("vault/hosts/{h}.{ext}"));
    let forged = host_file("d", "grant");
    let mut fake: Value = serde_json::from_slice(&good).unwrap();
    fake["host"] = Value::String("d".into());
    fake["host_key"] = Value::String(d_key.fingerprint);
    fake["key_id"] = Value::String("0".repeat(64));
    std::fs::write(&forged, serde_json::to_vec(&fake).unwrap()).unwrap();
    a.lock().unwrap();
    a.unlock(None).unwrap();
    let r = a.rotate(None, &|_| {}).unwrap();
    assert_eq!(r.hosts, ["b"], "only the host a granted");
    assert!(dv.unlock(None).is_err());
    assert!(dv.get("db-password").is_err());
    // A removed host's files put back are not renewed either.
    let kept: Vec<(PathBuf, Vec<u8>)> = ["grant", "pub", "key"]
        .iter()
        .map(|e| {
            let p = host_file("b", e);
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    let old_list = std::fs::read(host_file("granted", "json")).unwrap();
    let r = a.remove_host("b", None, &|_| {}).unwrap();
    assert!(r.hosts.is_empty(), "{:?}", r.hosts);
    // Put back, with the list from before: signed with the key the removal retired.
    for (p, b) in &kept {
        std::fs::write(p, b).unwrap();
    }
    std::fs::write(host_file("granted", "json"), &old_list).unwrap();
    let r = a.rotate(None, &|_| {}).unwrap();
    assert!(r.hosts.is_empty(), "{:?}", r.hosts);
    b.lock().unwrap();
    match b.unlock(None) {
        Err(VaultError::NoGrant { .. }) => {}
        other => panic!("a removed host unlocked: {other:?}"),
    }
    // A damaged public key of a granted host never stops a rotation half way.
    a.add_host("b").unwrap();
    edit_json(&host_file("b", "pub"), |v| {
        v["public"] = Value::String(flip_b64(v["public"].as_str().unwrap()))
    });
    let r = a.rotate(None, &|_| {}).unwrap();
    assert!(r.hosts.is_empty() && r.hosts_skipped.len() == 1, "{r:?}");
    assert_eq!(&a.get("db-password").unwrap()[..], b"hunter2");
}

#[test]
fn a_host_of_a_shared_store_never_takes_the_tpm_the_stores_files_name() {
    let tpm = Swtpm::start();
    let d = store();
    // A vault sealed by a TPM the store's files name (any host's root could have made it).
    let maker = Vault::open(d.path(), tpm_config(&tpm, Vec::new())).unwrap();
    let _l = Locker(&maker);
    maker
        .init(SealerChoice::Kind(SealerKind::Tpm), None)
        .unwrap();
    maker.lock().unwrap();
    // A store of one machine may use the TPM its envelope recorded…
    let alone = vault(d.path());
    assert!(alone.unlock(None).is_ok());
    alone.lock().unwrap();
    // …a host of a shared store only its own (configuration, environment, /dev/tpmrm0).
    let host = Vault::open(
        d.path(),
        VaultConfig {
            host: Some("a".into()),
            shared: true,
            ..VaultConfig::default()
        },
    )
    .unwrap();
    assert!(host.unlock(None).is_err());
    assert!(!host.status().unwrap().unlocked);
}

/// Runs `f` on a thread; fails if it takes more than 10 s (it waited on a FIFO, say).
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("a vault call blocked")
}

#[test]
fn fifos_endless_files_symlinks_and_forged_names_in_the_vault_are_refused_not_followed() {
    let d = store();
    let v = vault(d.path());
    let _l = Locker(&v);
    v.init(SealerChoice::Kind(SealerKind::Passphrase), Some(PASS))
        .unwrap();
    v.put("api-key", b"sk-1").unwrap();
    let dir = d.path().join("vault");
    let fifo = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo of a path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    // The sealed key as a FIFO, then as an endless file: refused at once.
    v.lock().unwrap();
    let master = dir.join("master-key.enc");
    std::fs::rename(&master, dir.join("kept")).unwrap();
    fifo(&master);
    let root = d.path().to_path_buf();
    let status = within_10s(move || {
        Vault::open(&root, VaultConfig::default())
            .unwrap()
            .unlock(Some(PASS))
            .is_err()
    });
    assert!(status);
    std::fs::remove_file(&master).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &master).unwrap();
    let root = d.path().to_path_buf();
    assert!(within_10s(move || {
        Vault::open(&root, VaultConfig::default())
            .unwrap()
            .unlock(Some(PASS))
            .is_err()
    }));
    std::fs::remove_file(&master).unwrap();
    std::fs::rename(dir.join("kept"), &master).unwrap();
    v.unlock(Some(PASS)).unwrap();
    // A secret as a FIFO: refused, not waited on.
    let secret = secret_path(d.path(), "api-key");
    std::fs::rename(&secret, dir.join("kept")).unwrap();
    fifo(&secret);
    let root = d.path().to_path_buf();
    assert!(within_10s(move || {
        Vault::open(&root, VaultConfig::default())
            .unwrap()
            .get("api-key")
            .is_err()
    }));
    std::fs::remove_file(&secret).unwrap();
    std::fs::rename(dir.join("kept"), &secret).unwrap();
    assert_eq!(v.get("api-key").unwrap().as_slice(), b"sk-1");
    // The secrets' folder swapped for a symlink to a folder elsewhere: the vault refuses it.
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("precious.enc"), "{}").unwrap();
    std::fs::rename(dir.join("secrets"), dir.join("secrets.real")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("secrets")).unwrap();
    assert!(Vault::open(d.path(), VaultConfig::default()).is_err());
    assert!(elsewhere.join("precious.enc").exists());
    std::fs::remove_file(dir.join("secrets")).unwrap();
    std::fs::rename(dir.join("secrets.real"), dir.join("secrets")).unwrap();
    // A rotation journal naming a path instead of a secret: refused before anything moves.
    let journal = serde_json::json!({
        "format": 1, "state": "staged", "started_at": "now", "old_key_id": "x",
        "new_key_id": "y", "secrets": ["../../elsewhere/precious"],
        "new_key": serde_json::from_slice::<Value>(&std::fs::read(&master).unwrap()).unwrap(),
    });
    std::fs::write(dir.join("rotation.json"), journal.to_string()).unwrap();
    v.lock().unwrap();
    assert!(Vault::open(d.path(), VaultConfig::default())
        .unwrap()
        .unlock(Some(PASS))
        .is_err());
    assert!(elsewhere.join("precious.enc").exists());
}
