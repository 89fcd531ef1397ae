//! Master key rotation: new key → re-encrypt every secret (version + 1) into a staging
//! directory → verify → switch → archive the old sealed key → done, with a journal
//! (`vault/rotation.json`) that lets the next `rotate` or `unlock` finish or roll back a
//! rotation interrupted at any instant.
//!
//! Journal states and what recovery does:
//! - `started`: the new key exists (sealed, in the journal), staging may be partial, no secret
//!   has been switched. Recovery rolls back: staging and journal removed.
//! - `staged`: every staged secret was written, fsynced and verified. Switching (renames from
//!   staging into `secrets/`, then `manifest.json`, then `master-key.enc`) may be partial.
//!   Recovery rolls forward by redoing the renames that are left.
//! - `switched`: `master-key.enc` holds the new key; only cleanup is left.
//!
//! Throughout, every secret file is encrypted under the old or the new key, both of which stay
//! in the keyring (`clawos-master`, `clawos-master-next`) until the switch is complete, so
//! readers keep working; after a crash `unlock` first recovers, then unseals.
//!
//! TPM-sealed vaults: the new manifest carries the TPM counter's value + 1, and the counter is
//! incremented once the rotation is done. A crash after the new manifest was switched in leaves
//! the counter one behind, which the next `unlock`, `put`, `rm` or `rotate` catches up.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::io_at;
use super::fault;
use super::keyring::{MASTER, MASTER_NEXT};
use super::secret::{ManifestEntry, SecretFile};
use super::{
    check_secret_name, mkdir_0700, now_rfc3339, sync_dir, write_atomic, Envelope, Key256, Vault,
    VaultError,
};

const JOURNAL: &str = "rotation.json";
const STAGING: &str = "rotation-staging";

/// A durable step of a rotation, reported to the caller's hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RotationStep<'a> {
    /// An interrupted rotation was finished or rolled back first (`"rolled back"` or
    /// `"completed"`).
    Recovered(&'a str),
    /// The journal (state `started`, holding the new sealed key) is on disk.
    Started,
    /// A secret was re-encrypted into staging.
    Staged(&'a str),
    /// Every staged secret decrypted to its original value; journal state `staged`.
    Verified,
    /// The old sealed key was archived.
    Archived,
    /// A secret was switched in.
    Switched(&'a str),
    /// The new manifest was switched in.
    ManifestSwitched,
    /// `master-key.enc` holds the new key; journal state `switched`.
    KeySwitched,
    /// Journal and staging removed; the keyring holds only the new key.
    Done,
}

/// What a rotation did.
#[derive(Debug, Clone, Serialize)]
pub struct RotationReport {
    /// Secrets re-encrypted.
    pub secrets: usize,
    /// Hosts whose grant now holds the new key (docs/multi-host.md).
    pub hosts: Vec<String>,
    /// Granted hosts whose grant could not be renewed, with why.
    pub hosts_skipped: Vec<(String, String)>,
    /// `key_id` before.
    pub old_key_id: String,
    /// `key_id` after.
    pub new_key_id: String,
    /// New master key generation.
    pub generation: u64,
    /// What happened to an interrupted earlier rotation, if any.
    pub recovered: Option<String>,
    /// Wall time.
    #[serde(with = "secs")]
    pub elapsed: Duration,
    /// Worker threads used for re-encryption.
    pub threads: usize,
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum State {
    Started,
    Staged,
    Switched,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Journal {
    format: u32,
    state: State,
    started_at: String,
    old_key_id: String,
    new_key_id: String,
    /// Secrets being rotated (complete from `staged` on).
    secrets: Vec<String>,
    /// The new sealed master key.
    new_key: Envelope,
}

fn journal_path(v: &Vault) -> PathBuf {
    v.dir.join(JOURNAL)
}

fn read_journal(v: &Vault) -> Result<Option<Journal>, VaultError> {
    let path = journal_path(v);
    match crate::files::read(&path, crate::files::MAX_RECORD) {
        Ok(b) => {
            let j = serde_json::from_slice::<Journal>(&b)
                .map_err(|e| VaultError::tampered(&path, format!("does not parse: {e}")))?;
            // Each name becomes a path under the vault: a name with `/` or `..` would reach
            // elsewhere.
            if let Some(bad) = j.secrets.iter().find(|n| check_secret_name(n).is_err()) {
                return Err(VaultError::tampered(
                    &path,
                    format!("names a secret {bad:?}"),
                ));
            }
            Ok(Some(j))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(&path)(e)),
    }
}

fn write_journal(v: &Vault, j: &Journal) -> Result<(), VaultError> {
    let mut bytes = serde_json::to_vec_pretty(j).expect("journal serialises");
    bytes.push(b'\n');
    write_atomic(&v.dir, JOURNAL, &bytes)
}

/// The state of an interrupted rotation, for `status`.
pub(super) fn journal_state(v: &Vault) -> Result<Option<String>, VaultError> {
    Ok(read_journal(v)?.map(|j| {
        match j.state {
            State::Started => "started",
            State::Staged => "staged",
            State::Switched => "switched",
        }
        .to_string()
    }))
}

fn remove_dir_all_if_exists(dir: &Path) -> Result<(), VaultError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(dir)(e)),
    }
}

fn rename_if_exists(from: &Path, to: &Path) -> Result<(), VaultError> {
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(from)(e)),
    }
}

fn archive_name(env: &Envelope) -> String {
    let ts = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    format!(
        "master-key-{ts}-{}.enc",
        &env.key_id[..env.key_id.len().min(8)]
    )
}

/// Archives `env` unless a copy of that key is already archived.
fn archive(v: &Vault, env: &Envelope) -> Result<(), VaultError> {
    let dir = v.archive_dir();
    mkdir_0700(&dir)?;
    let suffix = format!("-{}.enc", &env.key_id[..env.key_id.len().min(8)]);
    if let Ok(rd) = fs::read_dir(&dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(&suffix) {
                return Ok(());
            }
        }
    }
    write_atomic(&dir, &archive_name(env), &env.to_json())
}

/// Removes archived keys older than `keep` (by the timestamp in their name).
pub(super) fn purge_archive(dir: &Path, keep: Duration) -> Result<usize, VaultError> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_at(dir)(e)),
    };
    let cutoff = chrono::Utc::now()
        - chrono::Duration::from_std(keep).unwrap_or_else(|_| chrono::Duration::days(30));
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(ts) = name.strip_prefix("master-key-").and_then(|r| r.get(..16)) else {
            continue;
        };
        let Ok(t) = chrono::NaiveDateTime::parse_from_str(ts, "%Y%m%dT%H%M%SZ") else {
            continue;
        };
        if t.and_utc() < cutoff {
            fs::remove_file(e.path()).map_err(io_at(e.path()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Finishes or rolls back an interrupted rotation. Needs no key. Caller holds the write lock.
pub(super) fn recover(v: &Vault) -> Result<Option<String>, VaultError> {
    let Some(j) = read_journal(v)? else {
        return Ok(None);
    };
    let staging = v.dir.join(STAGING);
    let ring = v.keyring(false).ok().flatten();
    if j.state == State::Started {
        remove_dir_all_if_exists(&staging)?;
        if let Some(ring) = &ring {
            if let Some((_, b)) = ring.get(MASTER_NEXT)? {
                if Key256::from_slice(&b).map(|k| k.fingerprint()) == Some(j.new_key_id.clone()) {
                    ring.remove(MASTER_NEXT)?;
                }
            }
        }
        fs::remove_file(journal_path(v)).map_err(io_at(journal_path(v)))?;
        sync_dir(&v.dir)?;
        return Ok(Some("rolled back".into()));
    }
    finish_switch(v, &j, None)?;
    Ok(Some("completed".into()))
}

/// The switch and cleanup of a staged rotation; idempotent, so recovery simply runs it again.
fn finish_switch(
    v: &Vault,
    j: &Journal,
    on_step: Option<&(dyn Fn(&RotationStep<'_>) + Sync)>,
) -> Result<(), VaultError> {
    let report = |s: RotationStep<'_>| {
        fault::step();
        if let Some(f) = on_step {
            f(&s);
        }
    };
    let staging = v.dir.join(STAGING);
    let secrets = v.secrets_dir();
    if j.state == State::Staged {
        let current = Envelope::load(&v.master_path())?;
        if current.key_id == j.old_key_id {
            archive(v, &current)?;
            report(RotationStep::Archived);
        }
        for name in &j.secrets {
            let file = format!("{name}.enc");
            if staging.join(&file).exists() {
                rename_if_exists(&staging.join(&file), &secrets.join(&file))?;
                report(RotationStep::Switched(name));
            }
        }
        sync_dir(&secrets)?;
        if staging.join("manifest.json").exists() {
            rename_if_exists(&staging.join("manifest.json"), &v.manifest_path())?;
            sync_dir(&v.dir)?;
            report(RotationStep::ManifestSwitched);
        }
        if current.key_id != j.new_key_id {
            write_atomic(&v.dir, "master-key.enc", &j.new_key.to_json())?;
        }
        let mut switched = j.clone();
        switched.state = State::Switched;
        write_journal(v, &switched)?;
        report(RotationStep::KeySwitched);
    }
    // Keyring: promote the new key if this keyring had it; otherwise drop a master key that
    // can no longer read the secrets (the next unlock unseals the new one).
    if let Some(ring) = v.keyring(false)? {
        let next = ring
            .get(MASTER_NEXT)?
            .and_then(|(_, b)| Key256::from_slice(&b))
            .filter(|k| k.fingerprint() == j.new_key_id);
        let cur = ring
            .get(MASTER)?
            .and_then(|(_, b)| Key256::from_slice(&b))
            .map(|k| k.fingerprint());
        match next {
            Some(k) => {
                ring.put(MASTER, k.bytes(), v.config.unlock_timeout)?;
            }
            None if cur.as_deref() != Some(j.new_key_id.as_str()) => ring.remove(MASTER)?,
            None => {}
        }
        ring.remove(MASTER_NEXT)?;
        let prefix = format!("clawfs-derived:{}:{}:", v.vault_id()?, j.old_key_id);
        ring.remove_prefix(&prefix)?;
    }
    remove_dir_all_if_exists(&staging)?;
    match fs::remove_file(journal_path(v)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_at(journal_path(v))(e)),
    }
    sync_dir(&v.dir)?;
    report(RotationStep::Done);
    Ok(())
}

struct Staged {
    version: u64,
    digest: [u8; 32],
}

pub(super) fn rotate(
    v: &Vault,
    passphrase: Option<&str>,
    on_step: &(dyn Fn(&RotationStep<'_>) + Sync),
    granted: Option<std::collections::BTreeMap<String, String>>,
) -> Result<RotationReport, VaultError> {
    let t0 = Instant::now();
    let _lock = v.write_lock()?;
    let recovered = recover(v)?;
    if let Some(r) = &recovered {
        on_step(&RotationStep::Recovered(r));
    }
    let env = v.envelope()?;
    let sealer = v.sealer_for(env.sealed.kind(), Some(&env), passphrase)?;
    // Unsealing proves the sealer (passphrase, TPM state, host key) still opens this vault
    // before a new key is sealed with it.
    let old = sealer.unseal(&env, &v.master_path())?;
    let ring = v.keyring(false)?;
    let unlocked = match &ring {
        Some(r) => r.get(MASTER)?.is_some(),
        None => false,
    };
    let ring = if unlocked { ring } else { None };
    let mut manifest = v.read_manifest()?;
    manifest.verify(&old, &v.manifest_path())?;
    let mut bound = v.check_counter(&env, &manifest, ring.as_ref())?;
    let names = v.list()?;

    let new = Key256::random();
    let new_env = sealer.seal(&new, &env.vault_id, env.generation + 1, &now_rfc3339())?;
    if let Some(r) = &ring {
        r.put(MASTER_NEXT, new.bytes(), v.config.unlock_timeout)?;
    }
    let mut journal = Journal {
        format: 1,
        state: State::Started,
        started_at: now_rfc3339(),
        old_key_id: env.key_id.clone(),
        new_key_id: new.fingerprint(),
        secrets: names.clone(),
        new_key: new_env,
    };
    write_journal(v, &journal)?;
    fault::step();
    on_step(&RotationStep::Started);

    let staging = v.dir.join(STAGING);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(names.len().max(1));
    let result = (|| -> Result<BTreeMap<String, Staged>, VaultError> {
        remove_dir_all_if_exists(&staging)?;
        mkdir_0700(&staging)?;
        let staged = parallel(&names, threads, |name| {
            stage_one(
                v,
                ring.as_ref(),
                &old,
                &new,
                &manifest,
                &staging,
                name,
                on_step,
            )
        })?;
        // The new manifest: every rotated secret at its new version, tombstones kept; the
        // counter's next value.
        let mut m = manifest.clone();
        m.counter = bound.as_ref().map(super::counter::Bound::next);
        for (name, s) in &staged {
            m.secrets.insert(
                name.clone(),
                ManifestEntry {
                    version: s.version,
                    removed: false,
                },
            );
        }
        m.sign(&new);
        write_atomic(&staging, "manifest.json", &m.to_json())?;
        // Verify: read every staged file back from disk and decrypt it under the new key.
        parallel(&names, threads, |name| {
            let path = staging.join(format!("{name}.enc"));
            let f = SecretFile::load(&path, name)?
                .ok_or_else(|| VaultError::Rotation(format!("staged {name} vanished")))?;
            let key = v.secret_key(ring.as_ref(), &new, name, f.version)?;
            let plain = f.open(&key, &path)?;
            let want = &staged[name];
            if f.version != want.version || Sha256::digest(&plain[..])[..] != want.digest[..] {
                return Err(VaultError::Rotation(format!(
                    "staged {name} does not decrypt to its original value"
                )));
            }
            Ok(())
        })?;
        sync_dir(&staging)?;
        Ok(staged)
    })();
    if let Err(e) = result {
        // Nothing was switched: roll back.
        remove_dir_all_if_exists(&staging)?;
        if let Some(r) = &ring {
            r.remove(MASTER_NEXT)?;
        }
        fs::remove_file(journal_path(v)).map_err(io_at(journal_path(v)))?;
        return Err(e);
    }
    manifest.secrets.clear();
    journal.state = State::Staged;
    write_journal(v, &journal)?;
    fault::step();
    on_step(&RotationStep::Verified);

    finish_switch(v, &journal, Some(on_step))?;
    if let Some(b) = &mut bound {
        v.advance_counter(b, ring.as_ref())?;
    }
    let _ = purge_archive(&v.archive_dir(), super::ARCHIVE_RETENTION);
    // Hosts that had the old key get the new one (a crash here leaves them for the next
    // unlock on a host with the key).
    let (hosts, hosts_skipped) = v.renew_grants(&old, &new, env.generation + 1, granted);
    Ok(RotationReport {
        secrets: names.len(),
        hosts,
        hosts_skipped,
        old_key_id: super::secret::key_id_for(&env.key_id),
        new_key_id: super::secret::key_id_for(&journal.new_key_id),
        generation: env.generation + 1,
        recovered,
        elapsed: t0.elapsed(),
        threads,
    })
}

#[allow(clippy::too_many_arguments)]
fn stage_one(
    v: &Vault,
    ring: Option<&super::Keyring>,
    old: &Key256,
    new: &Key256,
    manifest: &super::Manifest,
    staging: &Path,
    name: &str,
    on_step: &(dyn Fn(&RotationStep<'_>) + Sync),
) -> Result<Staged, VaultError> {
    let path = v.secret_path(name);
    let f = SecretFile::load(&path, name)?
        .ok_or_else(|| VaultError::Rotation(format!("{name} vanished during rotation")))?;
    if f.master_fp() != old.fingerprint() {
        return Err(VaultError::tampered(
            &path,
            "encrypted under another master key than the vault's",
        ));
    }
    if let Some(e) = manifest.secrets.get(name) {
        if !e.removed && f.version < e.version {
            return Err(VaultError::tampered(
                &path,
                format!(
                    "version {} is older than the latest ({})",
                    f.version, e.version
                ),
            ));
        }
    }
    let key = v.secret_key(ring, old, name, f.version)?;
    let plain = f.open(&key, &path)?;
    let version = f.version + 1;
    let nkey = v.secret_key(ring, new, name, version)?;
    let sealed = SecretFile::seal(
        name,
        version,
        &new.fingerprint(),
        &nkey,
        &plain,
        &f.created_at,
        &now_rfc3339(),
    );
    write_atomic(staging, &format!("{name}.enc"), &sealed.to_json())?;
    fault::step();
    on_step(&RotationStep::Staged(name));
    Ok(Staged {
        version,
        digest: Sha256::digest(&plain[..]).into(),
    })
}

/// Runs `f` over `names` on `threads` threads; stops at the first error.
fn parallel<T: Send>(
    names: &[String],
    threads: usize,
    f: impl Fn(&str) -> Result<T, VaultError> + Sync,
) -> Result<BTreeMap<String, T>, VaultError> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let out = Mutex::new((BTreeMap::new(), None::<VaultError>));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(name) = names.get(i) else { return };
                let r = f(name);
                let mut g = out.lock().unwrap_or_else(|e| e.into_inner());
                match r {
                    Ok(t) => {
                        g.0.insert(name.clone(), t);
                    }
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        g.1.get_or_insert(e);
                    }
                }
            });
        }
    });
    let (map, err) = out.into_inner().unwrap_or_else(|e| e.into_inner());
    match err {
        Some(e) => Err(e),
        None => Ok(map),
    }
}
