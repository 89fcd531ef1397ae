//! The vault (docs/architecture.md §7, P1.4 §3): secrets encrypted under per-secret keys derived
//! from a 256-bit master key, which is sealed in `vault/master-key.enc` by a TPM, a passphrase or a
//! host key, and held in the kernel keyring while unlocked.
//!
//! Files under `<store>/vault/`:
//! ```text
//! master-key.enc           the sealed master key (sealer::Envelope)
//! manifest.json            latest version of every secret (and, TPM-sealed, the TPM NV
//!                          counter value it goes with), MACed under the master key
//! secrets/<name>.enc       one secret (secret::SecretFile)
//! archive/master-key-<ts>-<fp>.enc   sealed keys replaced by rotation; purged after 30 days
//! rotation.json            the journal of a rotation in progress
//! rotation-staging/        re-encrypted secrets waiting to be switched in
//! .lock                    flock()ed by every writer (init, unlock, put, rm, rotate)
//! ```
//! Readers take no lock: every file is replaced by rename, and a reader that meets a secret
//! encrypted under a key that has just left the keyring re-reads (see `get`).
//!
//! TPM-sealed vaults bind the manifest to a TPM NV counter, so the whole vault put back to an
//! earlier copy is refused (`VaultError::RolledBack`); see `counter`.

mod counter;
pub mod crypto;
mod error;
pub mod fault;
mod files;
pub mod hosts;
pub mod keyring;
mod rotation;
pub mod sealer;
pub mod secret;
#[cfg(feature = "tpm")]
pub mod tpm;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::Serialize;
use zeroize::Zeroizing;

pub use crypto::Key256;
pub use error::VaultError;
pub use rotation::{RotationReport, RotationStep};
pub use sealer::{Envelope, SealerKind};

use error::io_at;
use keyring::{Keyring, MASTER, MASTER_NEXT};
use sealer::{SealedKey, Sealer};
use secret::{Manifest, ManifestEntry, SecretFile};

/// How long an unlocked master key stays in the keyring unless configured.
pub const DEFAULT_UNLOCK_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long archived master keys are kept.
pub const ARCHIVE_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Vault settings (from the daemon or CLI configuration).
#[derive(Debug, Clone)]
pub struct VaultConfig {
    /// TCTI of the TPM; else `TPM2TOOLS_TCTI` / `TCTI` from the environment, else
    /// `device:/dev/tpmrm0` if present.
    pub tcti: Option<String>,
    /// SHA-256 PCR indices to bind the sealed key to (TPM sealer, at init and rotation).
    pub pcrs: Vec<u8>,
    /// Lifetime of the unlocked master key (and cached derived keys) in the kernel keyring.
    pub unlock_timeout: Duration,
    /// Name of the vault's keyring under `@u`; default `clawfs:<vault id>`.
    pub keyring_name: Option<String>,
    /// Host key file; default `<store>/.clawfs/host.key`.
    pub host_key_path: Option<PathBuf>,
    /// The host this is, in a store that hosts share: it unlocks with its own grant of the
    /// master key when it has a host key (see [`hosts`]), and names its keyring apart.
    pub host: Option<String>,
    /// Hosts share the store: a host key file inside it, which every host reads, is refused.
    pub shared: bool,
}

impl Default for VaultConfig {
    fn default() -> Self {
        VaultConfig {
            tcti: None,
            pcrs: Vec::new(),
            unlock_timeout: DEFAULT_UNLOCK_TIMEOUT,
            keyring_name: None,
            host_key_path: None,
            host: None,
            shared: false,
        }
    }
}

/// The sealer `init` should use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealerChoice {
    /// TPM if one is reachable, else the passphrase if one is given, else the host key.
    Auto,
    /// This sealer.
    Kind(SealerKind),
}

/// What `clawfs vault status` shows.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct VaultStatus {
    /// `master-key.enc` exists.
    pub initialized: bool,
    /// Which sealer protects the master key.
    pub sealer: Option<SealerKind>,
    /// The master key is in the kernel keyring.
    pub unlocked: bool,
    /// Number of secret files.
    pub secrets: usize,
    /// `key_id` of the current master key (as in secret files).
    pub key_id: Option<String>,
    /// Master key generation (1 at init, +1 per rotation).
    pub generation: Option<u64>,
    /// The keyring name.
    pub keyring: Option<String>,
    /// TCTI recorded at sealing (TPM sealer).
    pub tcti: Option<String>,
    /// PCRs the master key is bound to (TPM sealer).
    pub pcrs: Vec<u8>,
    /// State of an interrupted rotation, if its journal exists.
    pub rotation: Option<String>,
    /// NV index handle of the TPM counter the manifest is bound to (rollback detection; TPM
    /// sealer). As recorded in the manifest, not verified (`status` needs no key).
    pub rollback_counter: Option<u32>,
    /// Hosts with a key of their own (a store that hosts share).
    pub hosts: Vec<HostStatus>,
}

/// One host's key and grant, as `clawfs vault status` shows them.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HostStatus {
    /// The host.
    pub host: String,
    /// Its public key's fingerprint.
    pub fingerprint: String,
    /// The sealer of its private key.
    pub sealer: Option<SealerKind>,
    /// Generation of the master key its grant holds (none: not granted yet).
    pub granted_generation: Option<u64>,
}

/// The TCTI to use: configuration, then `TPM2TOOLS_TCTI`, `TCTI`, then `/dev/tpmrm0`.
pub fn resolve_tcti(config: &VaultConfig) -> Option<String> {
    if let Some(t) = &config.tcti {
        return Some(t.clone());
    }
    for var in ["TPM2TOOLS_TCTI", "TCTI"] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() {
                return Some(v);
            }
        }
    }
    Path::new("/dev/tpmrm0")
        .exists()
        .then(|| "device:/dev/tpmrm0".to_string())
}

/// Checks a secret name: `[a-z0-9-]+`, at most 64 bytes, no leading or trailing hyphen.
pub fn check_secret_name(name: &str) -> Result<&str, VaultError> {
    clawfs_store::names::check_system_name(std::ffi::OsStr::new(name)).map_err(|e| {
        VaultError::BadName {
            name: name.into(),
            reason: e.reason,
        }
    })
}

pub(crate) use clawfs_store::clock::now_rfc3339;

/// Writes `dir/name` atomically (temp + fsync + rename + fsync dir), mode 0600.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), VaultError> {
    clawfs_store::atomic::atomic_write(dir, name, bytes, 0o600).map_err(io_at(dir.join(name)))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), VaultError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_at(dir))
}

fn mkdir_0700(dir: &Path) -> Result<(), VaultError> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_at(dir)(e)),
    }
}

/// Holds the vault's write lock (flock on `vault/.lock`) until dropped.
struct WriteLock(#[allow(dead_code)] File);

/// One store's vault. Cheap to open; cloneless; share it behind an `Arc` (methods take `&self`).
pub struct Vault {
    dir: PathBuf,
    store_root: PathBuf,
    config: VaultConfig,
    vault_id: OnceLock<String>,
    /// Derived per-secret keys of this process, by (master fingerprint, secret, version). Used
    /// only while that master key is in the keyring.
    derived: Mutex<HashMap<(String, String, u64), Key256>>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault").field("dir", &self.dir).finish()
    }
}

impl Vault {
    /// Opens the vault of the store at `store_root` (nothing is read yet).
    pub fn open(store_root: &Path, config: VaultConfig) -> Result<Vault, VaultError> {
        let dir = store_root.join("vault");
        if !store_root.is_dir() {
            return Err(io_at(store_root)(std::io::Error::from(
                std::io::ErrorKind::NotFound,
            )));
        }
        // Its folders are reached by path: refused if one is a symlink (in a store that hosts
        // share, another host's root could point one at this machine's own folders).
        for sub in ["", "secrets", "archive", "hosts", "rotation-staging"] {
            files::real_dir(&dir.join(sub)).map_err(io_at(&dir.join(sub)))?;
        }
        Ok(Vault {
            dir,
            store_root: store_root.to_path_buf(),
            config,
            vault_id: OnceLock::new(),
            derived: Mutex::new(HashMap::new()),
        })
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &VaultConfig {
        &self.config
    }

    /// The vault directory (`<store>/vault`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn master_path(&self) -> PathBuf {
        self.dir.join("master-key.enc")
    }
    fn secrets_dir(&self) -> PathBuf {
        self.dir.join("secrets")
    }
    fn archive_dir(&self) -> PathBuf {
        self.dir.join("archive")
    }
    fn manifest_path(&self) -> PathBuf {
        self.dir.join("manifest.json")
    }
    fn secret_path(&self, name: &str) -> PathBuf {
        self.secrets_dir().join(format!("{name}.enc"))
    }
    fn host_key_path(&self) -> PathBuf {
        self.config.host_key_path.clone().unwrap_or_else(|| {
            self.store_root
                .join(clawfs_store::layout::PRIVATE_DIR)
                .join("host.key")
        })
    }

    fn write_lock(&self) -> Result<WriteLock, VaultError> {
        mkdir_0700(&self.dir)?;
        let path = self.dir.join(".lock");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io_at(&path))?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io_at(&path)(e.into()))?;
        Ok(WriteLock(f))
    }

    fn envelope(&self) -> Result<Envelope, VaultError> {
        let env = Envelope::load(&self.master_path())?;
        let _ = self.vault_id.set(env.vault_id.clone());
        Ok(env)
    }

    fn vault_id(&self) -> Result<String, VaultError> {
        if let Some(id) = self.vault_id.get() {
            return Ok(id.clone());
        }
        Ok(self.envelope()?.vault_id)
    }

    fn keyring_name(&self, vault_id: &str) -> String {
        self.config
            .keyring_name
            .clone()
            .unwrap_or_else(|| match &self.config.host {
                Some(h) => format!("clawfs:{vault_id}:{h}"),
                None => format!("clawfs:{vault_id}"),
            })
    }

    fn keyring(&self, create: bool) -> Result<Option<Keyring>, VaultError> {
        let id = self.vault_id()?;
        Keyring::open(&self.keyring_name(&id), create)
    }

    fn derived_desc(&self, fp: &str, name: &str, version: u64) -> Result<String, VaultError> {
        Ok(format!(
            "clawfs-derived:{}:{fp}:{name}:v{version}",
            self.vault_id()?
        ))
    }

    /// The unlocked master key with fingerprint `fp` (the current one or, during a rotation,
    /// the next one). `Err(Locked)` if the vault is locked; `Ok(None)` if unlocked but that key
    /// is not in the keyring.
    fn keyring_master(&self, ring: &Keyring, fp: &str) -> Result<Option<Key256>, VaultError> {
        let mut locked = true;
        for desc in [MASTER, MASTER_NEXT] {
            if let Some((_, bytes)) = ring.get(desc)? {
                if desc == MASTER {
                    locked = false;
                }
                if let Some(k) = Key256::from_slice(&bytes) {
                    if k.fingerprint() == fp {
                        return Ok(Some(k));
                    }
                }
            }
        }
        if locked {
            self.forget_derived();
            return Err(VaultError::Locked);
        }
        Ok(None)
    }

    fn unlocked_ring(&self) -> Result<Keyring, VaultError> {
        match self.keyring(false)? {
            Some(r) => Ok(r),
            None => {
                self.forget_derived();
                Err(VaultError::Locked)
            }
        }
    }

    fn forget_derived(&self) {
        self.derived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The per-secret key of `name` version `version` under `master`: from this process's cache,
    /// else the keyring, else PBKDF2 (600,000 iterations), then cached in both.
    fn secret_key(
        &self,
        ring: Option<&Keyring>,
        master: &Key256,
        name: &str,
        version: u64,
    ) -> Result<Key256, VaultError> {
        let fp = master.fingerprint();
        let k = (fp.clone(), name.to_string(), version);
        if let Some(key) = self
            .derived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&k)
        {
            return Ok(key.clone());
        }
        let desc = self.derived_desc(&fp, name, version)?;
        let cached = match ring {
            Some(r) => r.get(&desc)?.and_then(|(_, b)| Key256::from_slice(&b)),
            None => None,
        };
        let key = match cached {
            Some(key) => key,
            None => {
                let key = secret::derive_secret_key(master, name, version);
                if let Some(r) = ring {
                    // Best effort: a full key quota only costs the next process a derivation.
                    let _ = r.put(&desc, key.bytes(), self.config.unlock_timeout);
                }
                key
            }
        };
        self.derived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k, key.clone());
        Ok(key)
    }

    /// The TCTI of this vault's TPM: configuration, environment or `/dev/tpmrm0`, else the one
    /// recorded in `env` at sealing. Never the recorded one in a store that hosts share: the
    /// record is a file every host's root can write, and a TPM it names (another host's, or a
    /// simulator) would unseal a key of that host's making, which this host would then use.
    fn tpm_tcti(&self, env: Option<&Envelope>) -> Result<String, VaultError> {
        let recorded = env
            .filter(|_| !self.config.shared)
            .and_then(|e| match &e.sealed {
                SealedKey::Tpm { tcti, .. } => Some(tcti.clone()),
                _ => None,
            });
        resolve_tcti(&self.config).or(recorded).ok_or_else(|| {
            VaultError::NoTpm(
                "no TCTI configured, TPM2TOOLS_TCTI/TCTI unset and no /dev/tpmrm0".into(),
            )
        })
    }

    fn sealer_for(
        &self,
        kind: SealerKind,
        env: Option<&Envelope>,
        passphrase: Option<&str>,
    ) -> Result<Sealer, VaultError> {
        Ok(match kind {
            SealerKind::Tpm => {
                let recorded = env.and_then(|e| match &e.sealed {
                    SealedKey::Tpm { pcrs, .. } => Some(pcrs.clone()),
                    _ => None,
                });
                let tcti = self.tpm_tcti(env)?;
                let pcrs = match (recorded, self.config.pcrs.is_empty()) {
                    (Some(r), true) => r,
                    _ => self.config.pcrs.clone(),
                };
                Sealer::Tpm { tcti, pcrs }
            }
            SealerKind::Passphrase => Sealer::Passphrase(Zeroizing::new(
                passphrase
                    .ok_or(VaultError::PassphraseRequired)?
                    .to_string(),
            )),
            SealerKind::HostKey => Sealer::HostKey(self.host_key_path()),
        })
    }

    /// Creates the master key, seals it and leaves the vault unlocked. `passphrase` is needed for
    /// the passphrase sealer (and picks it under `Auto` when no TPM is reachable).
    pub fn init(
        &self,
        choice: SealerChoice,
        passphrase: Option<&str>,
    ) -> Result<VaultStatus, VaultError> {
        let _lock = self.write_lock()?;
        if self.master_path().exists() {
            return Err(VaultError::AlreadyInitialized(self.master_path()));
        }
        let kind = match choice {
            SealerChoice::Kind(k) => k,
            SealerChoice::Auto if resolve_tcti(&self.config).is_some() => SealerKind::Tpm,
            SealerChoice::Auto if passphrase.is_some() => SealerKind::Passphrase,
            SealerChoice::Auto => SealerKind::HostKey,
        };
        if kind == SealerKind::Tpm && resolve_tcti(&self.config).is_none() {
            return Err(VaultError::NoTpm(
                "no TCTI configured, TPM2TOOLS_TCTI/TCTI unset and no /dev/tpmrm0".into(),
            ));
        }
        if kind == SealerKind::HostKey {
            let path = self.host_key_path();
            if self.config.shared && hosts::inside(&path, &self.store_root) {
                return Err(VaultError::HostKey {
                    path,
                    reason: "hosts share this store, so a key file in it is one every host can \
                             read: name this host (CLAWFS_HOST or /etc/clawfs/host) so that its \
                             key file is kept on its own disk, or seal with a TPM or a passphrase"
                        .into(),
                });
            }
            sealer::create_host_key(&path)?;
        }
        for d in [self.dir.clone(), self.secrets_dir(), self.archive_dir()] {
            mkdir_0700(&d)?;
        }
        let sealer = self.sealer_for(kind, None, passphrase)?;
        let key = Key256::random();
        let vault_id = hex::encode(crypto::random_bytes::<8>());
        let env = sealer.seal(&key, &vault_id, 1, &now_rfc3339())?;
        // TPM: the counter that detects the whole vault rolled back (see `counter`).
        let counter = match kind {
            SealerKind::Tpm => Some(self.define_counter(Some(&env))?),
            _ => None,
        };
        let manifest = Manifest::new(&key, counter.as_ref().map(|c| c.current()));
        // An interrupted earlier init may have left a manifest; the new key replaces it.
        let written = write_atomic(&self.dir, "manifest.json", &manifest.to_json())
            .and_then(|()| write_atomic(&self.dir, "master-key.enc", &env.to_json()));
        if let Err(e) = written {
            if let Some(c) = &counter {
                c.undefine();
            }
            return Err(e);
        }
        let _ = self.vault_id.set(vault_id.clone());
        let ring = Keyring::open(&self.keyring_name(&vault_id), true)?
            .ok_or_else(|| VaultError::Keyring("keyring not created".into()))?;
        ring.put(MASTER, key.bytes(), self.config.unlock_timeout)?;
        if let Some(c) = &counter {
            self.set_counter_floor(&ring, c.value)?;
        }
        drop(_lock);
        self.status()
    }

    /// Finishes or rolls back an interrupted rotation, unseals the master key and puts it in the
    /// kernel keyring for the configured timeout. Purges archived keys older than 30 days.
    ///
    /// A TPM-sealed vault's manifest is checked against its TPM NV counter first: a vault put
    /// back to an earlier copy is refused (`RolledBack`) and stays locked.
    pub fn unlock(&self, passphrase: Option<&str>) -> Result<VaultStatus, VaultError> {
        // A host with a grant unlocks by it; if that fails and the host also holds
        // master-key.enc's own seal (a planted grant must not lock out the host that made
        // the vault), by that seal, else the grant's error is the one told.
        if let Some(host) = self.granted_host() {
            match self.unlock_by_grant(&host, passphrase) {
                Ok(st) => return Ok(st),
                Err(e) => return self.unlock_sealed(passphrase).map_err(|_| e),
            }
        }
        self.unlock_sealed(passphrase)
    }

    /// [`Self::unlock`] by `master-key.enc`'s own seal.
    fn unlock_sealed(&self, passphrase: Option<&str>) -> Result<VaultStatus, VaultError> {
        let _lock = self.write_lock()?;
        self.recover_locked()?;
        let env = self.envelope()?;
        let sealer = self.sealer_for(env.sealed.kind(), Some(&env), passphrase)?;
        let key = sealer.unseal(&env, &self.master_path())?;
        let manifest = self.read_manifest().and_then(|m| {
            m.verify(&key, &self.manifest_path())?;
            Ok(m)
        });
        let bound = match manifest {
            Ok(m) => self.check_counter(&env, &m, None)?,
            // The counter can only be checked against an authentic manifest. Other sealers
            // have no counter: unlocking does not depend on the manifest, as before.
            Err(e) if env.sealed.kind() == SealerKind::Tpm => return Err(e),
            Err(_) => None,
        };
        let ring = self
            .keyring(true)?
            .ok_or_else(|| VaultError::Keyring("keyring not created".into()))?;
        ring.put(MASTER, key.bytes(), self.config.unlock_timeout)?;
        ring.remove(MASTER_NEXT)?;
        match &bound {
            Some(b) => self.set_counter_floor(&ring, b.value)?,
            None => ring.remove(counter::FLOOR)?,
        }
        self.purge_archive()?;
        // Grants of an older key (a rotation that stopped before renewing them) get this one.
        self.renew_grants(&key, &key, env.generation, None);
        drop(_lock);
        self.status()
    }

    /// Accepts the vault's current state as its latest and unlocks it: for a TPM-sealed vault
    /// put back to an earlier copy on purpose (a backup restored), whose counter is lost
    /// (undefined, or its handle reused), or that predates rollback counters. Unseals the key
    /// (so it gives nothing to someone who could not unlock), verifies the manifest, binds it to
    /// the recorded counter or, if that is unusable, to a new one, at the counter's value + 1,
    /// then increments the counter: every other copy of the vault is refused from then on.
    pub fn rebind_counter(&self, passphrase: Option<&str>) -> Result<VaultStatus, VaultError> {
        let _lock = self.write_lock()?;
        self.recover_locked()?;
        let env = self.envelope()?;
        if env.sealed.kind() != SealerKind::Tpm {
            return Err(VaultError::NoTpm(format!(
                "this vault is sealed by {}; rollback counters are for TPM-sealed vaults",
                env.sealed.kind()
            )));
        }
        let sealer = self.sealer_for(env.sealed.kind(), Some(&env), passphrase)?;
        let key = sealer.unseal(&env, &self.master_path())?;
        let mut manifest = self.read_manifest()?;
        manifest.verify(&key, &self.manifest_path())?;
        let current = match manifest.counter {
            Some(mc) => {
                let tcti = self.tpm_tcti(Some(&env))?;
                match counter::nv_counter_read(&tcti, mc.nv_index) {
                    Ok(value) => Some(counter::Bound::new(tcti, mc.nv_index, value)),
                    Err(VaultError::RollbackCounter { index, reason }) => {
                        tracing::warn!(
                            nv_index = index,
                            reason,
                            "vault: the rollback counter is unusable; defining a new one"
                        );
                        None
                    }
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        let (mut bound, defined) = match current {
            Some(b) => (b, false),
            None => (self.define_counter(Some(&env))?, true),
        };
        manifest.counter = Some(bound.next());
        manifest.sign(&key);
        if let Err(e) = write_atomic(&self.dir, "manifest.json", &manifest.to_json()) {
            if defined {
                bound.undefine();
            }
            return Err(e);
        }
        self.advance_counter(&mut bound, None)?;
        let ring = self
            .keyring(true)?
            .ok_or_else(|| VaultError::Keyring("keyring not created".into()))?;
        ring.put(MASTER, key.bytes(), self.config.unlock_timeout)?;
        ring.remove(MASTER_NEXT)?;
        self.set_counter_floor(&ring, bound.value)?;
        drop(_lock);
        self.status()
    }

    /// Removes the master key and every cached derived key from the kernel keyring (and this
    /// process's cache). Locking a locked vault is not an error.
    pub fn lock(&self) -> Result<(), VaultError> {
        self.forget_derived();
        if let Some(ring) = self.keyring(false)? {
            ring.destroy()?;
        }
        Ok(())
    }

    /// Which sealer, locked or not, how many secrets, which key.
    pub fn status(&self) -> Result<VaultStatus, VaultError> {
        let secrets = self.list().map(|l| l.len()).unwrap_or(0);
        let rotation = rotation::journal_state(self)?;
        let env = match self.envelope() {
            Ok(e) => e,
            Err(VaultError::NotInitialized) => {
                return Ok(VaultStatus {
                    initialized: false,
                    sealer: None,
                    unlocked: false,
                    secrets,
                    key_id: None,
                    generation: None,
                    keyring: None,
                    tcti: None,
                    pcrs: Vec::new(),
                    rotation,
                    rollback_counter: None,
                    hosts: Vec::new(),
                })
            }
            Err(e) => return Err(e),
        };
        let unlocked = match self.keyring(false)? {
            Some(r) => r.get(MASTER)?.is_some(),
            None => false,
        };
        let (tcti, pcrs) = match &env.sealed {
            SealedKey::Tpm { tcti, pcrs, .. } => (Some(tcti.clone()), pcrs.clone()),
            _ => (None, Vec::new()),
        };
        let rollback_counter = self
            .read_manifest()
            .ok()
            .and_then(|m| m.counter)
            .map(|c| c.nv_index);
        Ok(VaultStatus {
            initialized: true,
            sealer: Some(env.sealed.kind()),
            unlocked,
            secrets,
            key_id: Some(secret::key_id_for(&env.key_id)),
            generation: Some(env.generation),
            keyring: Some(self.keyring_name(&env.vault_id)),
            tcti,
            pcrs,
            rotation,
            rollback_counter,
            hosts: self.host_statuses()?,
        })
    }

    /// Names of the stored secrets, sorted. Needs no key.
    pub fn list(&self) -> Result<Vec<String>, VaultError> {
        let dir = self.secrets_dir();
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_at(&dir)(e)),
        };
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.map_err(io_at(&dir))?;
            let file = entry.file_name();
            let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".enc")) else {
                continue;
            };
            if check_secret_name(name).is_ok() {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn read_manifest(&self) -> Result<Manifest, VaultError> {
        let path = self.manifest_path();
        match files::read(&path, files::MAX_RECORD) {
            Ok(b) => Manifest::parse(&b, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(VaultError::tampered(&path, "missing"))
            }
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    /// Decrypts secret `name`. Works without the write lock and during a rotation: a reader that
    /// finds a file under a master key that has just left the keyring reads the file again.
    /// A manifest below the counter floor of the keyring (TPM-sealed vaults) is `RolledBack`.
    pub fn get(&self, name: &str) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        check_secret_name(name)?;
        let path = self.secret_path(name);
        let manifest_path = self.manifest_path();
        const ATTEMPTS: u32 = 20;
        for attempt in 1..=ATTEMPTS {
            let ring = self.unlocked_ring()?;
            // The floor before the manifest: writers raise it only once the manifest that goes
            // with it is in place.
            let floor = self.counter_floor(&ring)?;
            let manifest = self.read_manifest()?;
            let Some(file) = SecretFile::load(&path, name)? else {
                return Err(VaultError::NotFound(name.into()));
            };
            let mkey = self.keyring_master(&ring, &manifest.key_id)?;
            let fkey = self.keyring_master(&ring, file.master_fp())?;
            let (Some(mkey), Some(fkey)) = (mkey, fkey) else {
                if attempt < ATTEMPTS {
                    // A rotation may have just switched keys: read both files again.
                    std::thread::sleep(Duration::from_millis(5 * u64::from(attempt)));
                    continue;
                }
                return Err(VaultError::tampered(
                    &path,
                    format!(
                        "encrypted under master key {}, which is not the unlocked one",
                        file.master_fp()
                    ),
                ));
            };
            manifest.verify(&mkey, &manifest_path)?;
            counter::check_floor(&manifest, floor)?;
            match manifest.secrets.get(name) {
                Some(e) if e.removed && file.version <= e.version => {
                    return Err(VaultError::NotFound(name.into()))
                }
                Some(e) if !e.removed && file.version < e.version => {
                    return Err(VaultError::tampered(
                        &path,
                        format!(
                            "version {} is older than the latest ({}): an older version was put back",
                            file.version, e.version
                        ),
                    ))
                }
                _ => {}
            }
            let key = self.secret_key(Some(&ring), &fkey, name, file.version)?;
            return file.open(&key, &path);
        }
        unreachable!("the loop returns on its last attempt")
    }

    /// The key that signs the audit trail (HMAC-SHA256) while the vault is unlocked: derived
    /// from the master key under its own label, so the master key itself never signs anything.
    /// `None` when the vault is locked or not set up.
    pub fn audit_key(&self) -> Option<[u8; 32]> {
        let master = self.unlocked_master().ok()?;
        Some(master.hmac(b"clawfs-audit-hmac-v1"))
    }

    /// The key that seals the system manifest (`clawfs_integrity::seal`), derived from the
    /// master key under its own label. `Ok(None)` when the vault is not set up;
    /// [`VaultError::Locked`] when it is set up but locked.
    pub fn integrity_key(&self) -> Result<Option<[u8; 32]>, VaultError> {
        match self.unlocked_master() {
            Ok(master) => Ok(Some(master.hmac(b"clawfs-system-manifest-v1"))),
            Err(VaultError::NotInitialized) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The master key in force, from the keyring; `Locked` when the vault is locked.
    fn unlocked_master(&self) -> Result<Key256, VaultError> {
        let env = self.envelope()?;
        let ring = self.unlocked_ring()?;
        self.keyring_master(&ring, &env.key_id)?
            .ok_or(VaultError::Locked)
    }

    /// Stores `value` as a new version of secret `name` (atomically).
    pub fn put(&self, name: &str, value: &[u8]) -> Result<u64, VaultError> {
        check_secret_name(name)?;
        let _lock = self.write_lock()?;
        self.recover_locked()?;
        let env = self.envelope()?;
        let ring = self.unlocked_ring()?;
        let master = self
            .keyring_master(&ring, &env.key_id)?
            .ok_or(VaultError::Locked)?;
        let mut manifest = self.read_manifest()?;
        manifest.verify(&master, &self.manifest_path())?;
        let mut bound = self.check_counter(&env, &manifest, Some(&ring))?;
        let path = self.secret_path(name);
        // A damaged existing file is simply replaced.
        let old = SecretFile::load(&path, name).ok().flatten();
        let version = manifest
            .secrets
            .get(name)
            .map(|e| e.version)
            .into_iter()
            .chain(old.as_ref().map(|f| f.version))
            .max()
            .unwrap_or(0)
            + 1;
        let now = now_rfc3339();
        let created = match (&old, manifest.secrets.get(name)) {
            (Some(f), Some(e)) if !e.removed => f.created_at.clone(),
            _ => now.clone(),
        };
        let key = self.secret_key(Some(&ring), &master, name, version)?;
        let file = SecretFile::seal(name, version, &env.key_id, &key, value, &created, &now);
        mkdir_0700(&self.secrets_dir())?;
        write_atomic(&self.secrets_dir(), &format!("{name}.enc"), &file.to_json())?;
        manifest.secrets.insert(
            name.into(),
            ManifestEntry {
                version,
                removed: false,
            },
        );
        manifest.counter = bound.as_ref().map(counter::Bound::next);
        manifest.sign(&master);
        write_atomic(&self.dir, "manifest.json", &manifest.to_json())?;
        if let Some(b) = &mut bound {
            self.advance_counter(b, Some(&ring))?;
        }
        Ok(version)
    }

    /// Removes secret `name`. Its manifest entry becomes a tombstone, so the removed file put
    /// back is refused.
    pub fn remove(&self, name: &str) -> Result<(), VaultError> {
        check_secret_name(name)?;
        let _lock = self.write_lock()?;
        self.recover_locked()?;
        let env = self.envelope()?;
        let ring = self.unlocked_ring()?;
        let master = self
            .keyring_master(&ring, &env.key_id)?
            .ok_or(VaultError::Locked)?;
        let path = self.secret_path(name);
        if !path.exists() {
            return Err(VaultError::NotFound(name.into()));
        }
        let mut manifest = self.read_manifest()?;
        manifest.verify(&master, &self.manifest_path())?;
        let mut bound = self.check_counter(&env, &manifest, Some(&ring))?;
        let version = manifest
            .secrets
            .get(name)
            .map(|e| e.version)
            .into_iter()
            .chain(
                SecretFile::load(&path, name)
                    .ok()
                    .flatten()
                    .map(|f| f.version),
            )
            .max()
            .unwrap_or(0);
        manifest.secrets.insert(
            name.into(),
            ManifestEntry {
                version,
                removed: true,
            },
        );
        manifest.counter = bound.as_ref().map(counter::Bound::next);
        manifest.sign(&master);
        write_atomic(&self.dir, "manifest.json", &manifest.to_json())?;
        if let Some(b) = &mut bound {
            self.advance_counter(b, Some(&ring))?;
        }
        fs::remove_file(&path).map_err(io_at(&path))?;
        sync_dir(&self.secrets_dir())
    }

    /// Rotates the master key: every secret is re-encrypted under a new key with version + 1,
    /// verified, and switched in; the old sealed key is archived. Crash-safe (see
    /// `docs/vault.md`); `on_step` is called after each durable step. A passphrase vault needs
    /// the passphrase (the new key is sealed with it).
    pub fn rotate(
        &self,
        passphrase: Option<&str>,
        on_step: &(dyn Fn(&RotationStep<'_>) + Sync),
    ) -> Result<RotationReport, VaultError> {
        rotation::rotate(self, passphrase, on_step, None)
    }

    fn recover_locked(&self) -> Result<Option<String>, VaultError> {
        rotation::recover(self)
    }

    fn purge_archive(&self) -> Result<usize, VaultError> {
        rotation::purge_archive(&self.archive_dir(), ARCHIVE_RETENTION)
    }
}
