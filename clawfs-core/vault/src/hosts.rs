//! The master key on hosts that share the store (docs/multi-host.md). `master-key.enc` is
//! sealed by the sealer of the host that created the vault (its TPM, say), which no other host
//! can open. Every other host has a key pair of its own. Its private half is sealed by that
//! host's own sealer, and a host that has the master key wraps the key to the public half
//! (HPKE, RFC 9180: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM). So the one master
//! key is sealed separately for every host, and adding a host takes an admin on a host that
//! already has the key.
//!
//! ```text
//! vault/hosts/<h>.pub     {format, vault_id, host, public, fingerprint}
//! vault/hosts/<h>.key     the seed of the host's key pair, sealed by its sealer (Envelope)
//! vault/hosts/<h>.grant   the master key wrapped to <h>.pub: {format, vault_id, host,
//!                         host_key, key_id, generation, enc, ciphertext}
//! ```
//! The header fields of a grant are the associated data of its ciphertext, so a grant moved
//! to another host's name, or edited, does not open.

use std::path::{Path, PathBuf};

use hpke::aead::AesGcm256;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable, Kem, OpModeR, OpModeS, Serializable};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::crypto::{b64, Key256};
use crate::error::{io_at, VaultError};

/// How long a host's view of the vault may disagree with itself (files another host just
/// replaced, behind this host's caches of the shared volume) before unlocking reports it.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// The HPKE `info` of every grant.
const INFO: &[u8] = b"clawfs vault host grant v1";

/// A host's public key, as `<h>.pub` records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostPublic {
    /// Always 1.
    pub format: u32,
    /// The vault the key pair is for.
    pub vault_id: String,
    /// The host.
    pub host: String,
    /// Base64 X25519 public key.
    pub public: String,
    /// The first 16 hex digits of its SHA-256: what an admin compares between hosts.
    pub fingerprint: String,
}

/// The master key wrapped to one host, as `<h>.grant` records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Grant {
    /// Always 1.
    pub format: u32,
    /// The vault.
    pub vault_id: String,
    /// The host it is for.
    pub host: String,
    /// The fingerprint of the host key it is wrapped to.
    pub host_key: String,
    /// The fingerprint of the master key it holds.
    pub key_id: String,
    /// That key's generation.
    pub generation: u64,
    /// Base64 HPKE encapsulated key.
    pub enc: String,
    /// Base64 ciphertext and tag.
    pub ciphertext: String,
}

impl Grant {
    fn aad(&self) -> Vec<u8> {
        format!(
            "clawfs-grant|{}|{}|{}|{}|{}",
            self.vault_id, self.host, self.host_key, self.key_id, self.generation
        )
        .into_bytes()
    }
}

/// A host name as the vault's files use it: the store's rule for host names.
pub fn check_host(host: &str) -> Result<&str, VaultError> {
    match clawfs_store::names::is_host_name(host) {
        true => Ok(host),
        false => Err(VaultError::BadHost(host.to_string())),
    }
}

/// Where a host keeps its own key files: `$CLAWFS_VAULT_KEY_DIR`, else `/etc/clawfs`. On the
/// host's own disk, never on the volume the hosts share, which every host reads.
pub const KEY_DIR_ENV: &str = "CLAWFS_VAULT_KEY_DIR";

/// The key file of the host-key sealer on `host`, in a store that hosts share.
pub fn local_key_file(host: &str) -> PathBuf {
    let dir = std::env::var_os(KEY_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/etc/clawfs"), PathBuf::from);
    dir.join(format!("vault-{host}.key"))
}

/// Whether `file` is (or would be, once its folders are made) inside `dir`, whatever its path's
/// symlinks: the real path of its folder's nearest existing ancestor, with the folders still to
/// be made, is compared. A path that cannot be told (a `..` among the folders still to be made)
/// counts as inside.
pub fn inside(file: &Path, dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut existing = file.parent().unwrap_or(file).to_path_buf();
    let mut to_make = Vec::new();
    let real = loop {
        match std::fs::canonicalize(&existing) {
            Ok(real) => break real,
            Err(_) => match (existing.file_name(), existing.parent()) {
                (Some(name), Some(parent)) => {
                    to_make.push(name.to_os_string());
                    existing = parent.to_path_buf();
                }
                _ => return true,
            },
        }
    };
    to_make
        .iter()
        .rev()
        .fold(real, |path, name| path.join(name))
        .starts_with(dir)
}

/// Where the files of `host` are, under the vault directory `vault`.
pub fn host_file(vault: &Path, host: &str, ext: &str) -> PathBuf {
    vault.join("hosts").join(format!("{host}.{ext}"))
}

/// The key pair a sealed seed stands for.
fn key_pair(
    seed: &Key256,
) -> (
    <X25519HkdfSha256 as Kem>::PrivateKey,
    <X25519HkdfSha256 as Kem>::PublicKey,
) {
    X25519HkdfSha256::derive_keypair(seed.bytes())
}

fn fingerprint(public: &[u8]) -> String {
    hex::encode(&Sha256::digest(public)[..8])
}

/// The public record of the key pair of `seed`.
pub fn public_of(seed: &Key256, vault_id: &str, host: &str) -> HostPublic {
    let public = key_pair(seed).1.to_bytes();
    HostPublic {
        format: 1,
        vault_id: vault_id.into(),
        host: host.into(),
        public: b64::enc(&public),
        fingerprint: fingerprint(&public),
    }
}

/// Wraps `master` (generation `generation`) to the host of `public`.
pub fn wrap(master: &Key256, generation: u64, public: &HostPublic) -> Result<Grant, VaultError> {
    let bad = |reason: &str| VaultError::BadHostKey {
        host: public.host.clone(),
        reason: reason.into(),
    };
    let bytes = b64::dec(&public.public).ok_or_else(|| bad("not base64"))?;
    if fingerprint(&bytes) != public.fingerprint {
        return Err(bad("its fingerprint does not match its key"));
    }
    let pk = <X25519HkdfSha256 as Kem>::PublicKey::from_bytes(&bytes)
        .map_err(|_| bad("not an X25519 public key"))?;
    let mut grant = Grant {
        format: 1,
        vault_id: public.vault_id.clone(),
        host: public.host.clone(),
        host_key: public.fingerprint.clone(),
        key_id: master.fingerprint(),
        generation,
        enc: String::new(),
        ciphertext: String::new(),
    };
    let (enc, ciphertext) = hpke::single_shot_seal::<AesGcm256, HkdfSha256, X25519HkdfSha256>(
        &OpModeS::Base,
        &pk,
        INFO,
        master.bytes(),
        &grant.aad(),
    )
    .map_err(|e| bad(&format!("wrapping to it failed: {e}")))?;
    grant.enc = b64::enc(&enc.to_bytes());
    grant.ciphertext = b64::enc(&ciphertext);
    Ok(grant)
}

/// Opens `grant` (read from `file`) with the host key pair of `seed`: the master key.
pub fn unwrap(grant: &Grant, seed: &Key256, file: &Path) -> Result<Key256, VaultError> {
    let (sk, pk) = key_pair(seed);
    if fingerprint(&pk.to_bytes()) != grant.host_key {
        return Err(VaultError::tampered(
            file,
            "wrapped to another key of this host (run `clawfs vault add-host` again on a host that has the key)",
        ));
    }
    let enc = b64::dec(&grant.enc)
        .and_then(|e| <X25519HkdfSha256 as Kem>::EncappedKey::from_bytes(&e).ok())
        .ok_or_else(|| VaultError::tampered(file, "bad encapsulated key"))?;
    let ciphertext =
        b64::dec(&grant.ciphertext).ok_or_else(|| VaultError::tampered(file, "bad ciphertext"))?;
    let plain = zeroize::Zeroizing::new(
        hpke::single_shot_open::<AesGcm256, HkdfSha256, X25519HkdfSha256>(
            &OpModeR::Base,
            &sk,
            &enc,
            INFO,
            &ciphertext,
            &grant.aad(),
        )
        .map_err(|_| VaultError::tampered(file, "does not open with this host's key"))?,
    );
    let key = Key256::from_slice(&plain)
        .ok_or_else(|| VaultError::tampered(file, "the wrapped key is not 32 bytes"))?;
    if key.fingerprint() != grant.key_id {
        return Err(VaultError::tampered(
            file,
            "the key is not the one it names",
        ));
    }
    Ok(key)
}

/// The most a file of the vault's `hosts/` folder may hold.
const MAX_FILE: u64 = 64 * 1024;

/// The bytes of a file of the vault's `hosts/` folder: a regular file, not followed if a
/// symlink, at most [`MAX_FILE`]; `None` if there is none.
fn read_bytes(file: &Path) -> Result<Option<Vec<u8>>, VaultError> {
    match crate::files::read(file, MAX_FILE) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            Err(VaultError::tampered(file, "a symlink"))
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Err(VaultError::tampered(file, "not a regular file"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(VaultError::tampered(
            file,
            format!("larger than {MAX_FILE} bytes"),
        )),
        Err(e) => Err(io_at(file)(e)),
    }
}

/// Reads a JSON file of the vault's `hosts/` folder; `None` if there is none.
pub fn read<T: for<'de> Deserialize<'de>>(file: &Path) -> Result<Option<T>, VaultError> {
    match read_bytes(file)? {
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| VaultError::tampered(file, e.to_string())),
        None => Ok(None),
    }
}

/// A host's sealed key pair seed, `<h>.key`.
fn read_sealed(file: &Path) -> Result<crate::Envelope, VaultError> {
    match read_bytes(file)? {
        Some(b) => crate::Envelope::parse(&b, file),
        None => Err(VaultError::tampered(file, "missing")),
    }
}

/// The hosts given the master key, as `granted.json` records them: host → the fingerprint
/// of the host key its grant is wrapped to. MACed under the master key, so that only a host
/// with the key (an admin's `add-host`) adds to it: renewals wrap to these alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Granted {
    format: u32,
    vault_id: String,
    /// The master key the MAC is under.
    key_id: String,
    hosts: std::collections::BTreeMap<String, String>,
    mac: String,
}

impl Granted {
    fn signed_bytes(&self) -> Vec<u8> {
        let hosts: Vec<String> = self.hosts.iter().map(|(h, f)| format!("{h}={f}")).collect();
        format!(
            "clawfs-granted|{}|{}|{}",
            self.vault_id,
            self.key_id,
            hosts.join(",")
        )
        .into_bytes()
    }

    fn mac_with(&self, key: &Key256) -> String {
        b64::enc(&key.subkey(GRANTED_LABEL).hmac(&self.signed_bytes()))
    }
}

/// The sub-key label of the MAC of `granted.json`.
const GRANTED_LABEL: &str = "clawfs-vault-granted";

impl crate::Vault {
    pub(crate) fn hosts_dir(&self) -> PathBuf {
        self.dir.join("hosts")
    }

    /// The sealer of `host`'s key pair: as [`Self::sealer_for`], but a host key file of its
    /// own outside the store (which every host reads): the configured one, else
    /// [`local_key_file`].
    fn host_pair_sealer(
        &self,
        host: &str,
        kind: crate::SealerKind,
        sealed: Option<&crate::Envelope>,
        passphrase: Option<&str>,
    ) -> Result<crate::sealer::Sealer, VaultError> {
        match kind {
            crate::SealerKind::HostKey => Ok(crate::sealer::Sealer::HostKey(
                self.config
                    .host_key_path
                    .clone()
                    .unwrap_or_else(|| local_key_file(host)),
            )),
            _ => self.sealer_for(kind, sealed, passphrase),
        }
    }

    /// This host, when it has a key of its own: it unlocks with its grant.
    pub(crate) fn granted_host(&self) -> Option<String> {
        let host = self.config.host.as_deref()?;
        host_file(&self.dir, host, "key")
            .exists()
            .then(|| host.to_string())
    }

    /// Creates `host`'s key pair for this vault, its private half sealed by `choice` on this
    /// host (TPM, passphrase or a host key file): run on that host. Answers the public half,
    /// whose fingerprint the admin of a host with the master key checks before granting.
    pub fn create_host_key(
        &self,
        host: &str,
        choice: crate::SealerChoice,
        passphrase: Option<&str>,
    ) -> Result<HostPublic, VaultError> {
        check_host(host)?;
        let _lock = self.write_lock()?;
        let env = self.envelope()?;
        let key_file = host_file(&self.dir, host, "key");
        if key_file.exists() {
            return Err(VaultError::AlreadyInitialized(key_file));
        }
        let kind = match choice {
            crate::SealerChoice::Kind(k) => k,
            crate::SealerChoice::Auto if crate::resolve_tcti(&self.config).is_some() => {
                crate::SealerKind::Tpm
            }
            crate::SealerChoice::Auto if passphrase.is_some() => crate::SealerKind::Passphrase,
            crate::SealerChoice::Auto => crate::SealerKind::HostKey,
        };
        let sealer = self.host_pair_sealer(host, kind, None, passphrase)?;
        if let crate::sealer::Sealer::HostKey(path) = &sealer {
            if inside(path, &self.store_root) {
                return Err(VaultError::HostKey {
                    path: path.clone(),
                    reason: "a host's key file must be on its own disk, not in the store every \
                             host reads (set CLAWFS_VAULT_KEY_DIR elsewhere)"
                        .into(),
                });
            }
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(io_at(dir))?;
            }
            crate::sealer::create_host_key(path)?;
        }
        crate::mkdir_0700(&self.hosts_dir())?;
        let seed = Key256::random();
        let sealed = sealer.seal(&seed, &env.vault_id, 1, &crate::now_rfc3339())?;
        let public = public_of(&seed, &env.vault_id, host);
        let json = serde_json::to_vec_pretty(&public).expect("a public key serialises");
        crate::write_atomic(&self.hosts_dir(), &format!("{host}.pub"), &json)?;
        crate::write_atomic(&self.hosts_dir(), &format!("{host}.key"), &sealed.to_json())?;
        Ok(public)
    }

    /// Wraps the unlocked master key to `host`'s public key: run by an admin on a host that
    /// has the key. Answers the public key granted to.
    pub fn add_host(&self, host: &str) -> Result<HostPublic, VaultError> {
        check_host(host)?;
        let _lock = self.write_lock()?;
        let master = self.unlocked_master()?;
        let env = self.envelope()?;
        let file = host_file(&self.dir, host, "pub");
        let public: HostPublic = read(&file)?.ok_or_else(|| VaultError::BadHostKey {
            host: host.into(),
            reason: format!(
                "{} does not exist: run `clawfs vault host-key` on host {host} first",
                file.display()
            ),
        })?;
        if public.host != host || public.vault_id != env.vault_id {
            return Err(VaultError::tampered(&file, "for another host or vault"));
        }
        let grant = wrap(&master, env.generation, &public)?;
        let mut granted = self.granted_or_fresh(&master, &env.vault_id);
        granted.insert(host.to_string(), public.fingerprint.clone());
        self.write_granted(&master, &env.vault_id, granted)?;
        let json = serde_json::to_vec_pretty(&grant).expect("a grant serialises");
        crate::write_atomic(&self.hosts_dir(), &format!("{host}.grant"), &json)?;
        Ok(public)
    }

    /// Takes the master key from `host`: out of the granted list, its files removed, then a
    /// rotation (`passphrase`, `on_step` as for [`crate::Vault::rotate`]) that renews the grants
    /// of the list as it is now, held in memory, not as read back (a copy of the old list put
    /// back meanwhile is signed with the key the rotation retires). What the host already read
    /// it keeps; a copy of its grant opens nothing new.
    pub fn remove_host(
        &self,
        host: &str,
        passphrase: Option<&str>,
        on_step: &(dyn Fn(&crate::RotationStep<'_>) + Sync),
    ) -> Result<crate::RotationReport, VaultError> {
        check_host(host)?;
        let lock = self.write_lock()?;
        let master = self.unlocked_master()?;
        let env = self.envelope()?;
        let mut granted = self.granted_or_fresh(&master, &env.vault_id);
        let was = granted.remove(host).is_some();
        self.write_granted(&master, &env.vault_id, granted.clone())?;
        let mut removed = was;
        for ext in ["grant", "pub", "key"] {
            let file = host_file(&self.dir, host, ext);
            match std::fs::remove_file(&file) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_at(&file)(e)),
            }
        }
        if !removed {
            return Err(VaultError::BadHostKey {
                host: host.into(),
                reason: "it has no key or grant in this vault".into(),
            });
        }
        drop(lock);
        crate::rotation::rotate(self, passphrase, on_step, Some(granted))
    }

    /// The granted list, or an empty one when it does not verify with `key` (a rotation
    /// stopped before it signed it again, or an old copy put back): a warning, not a dead end;
    /// the hosts it named are added again with `add-host`.
    fn granted_or_fresh(
        &self,
        key: &Key256,
        vault_id: &str,
    ) -> std::collections::BTreeMap<String, String> {
        self.read_granted(key, vault_id).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "starting the list of granted hosts again");
            eprintln!("clawfs: {e}; the list of granted hosts starts again from this one");
            Default::default()
        })
    }

    /// The granted hosts, checked with `key` (the master key their list is MACed under);
    /// none before the first `add-host`.
    fn read_granted(
        &self,
        key: &Key256,
        vault_id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, VaultError> {
        let file = self.hosts_dir().join("granted.json");
        let Some(g) = read::<Granted>(&file)? else {
            return Ok(Default::default());
        };
        if g.vault_id != vault_id || g.key_id != key.fingerprint() {
            return Err(VaultError::tampered(
                &file,
                "not signed with the vault's key (a rotation stopped before it was signed again?): \
                 add the hosts again with `clawfs vault add-host`",
            ));
        }
        if !crate::crypto::ct_eq(g.mac_with(key).as_bytes(), g.mac.as_bytes()) {
            return Err(VaultError::tampered(&file, "its MAC does not match"));
        }
        Ok(g.hosts)
    }

    fn write_granted(
        &self,
        key: &Key256,
        vault_id: &str,
        hosts: std::collections::BTreeMap<String, String>,
    ) -> Result<(), VaultError> {
        crate::mkdir_0700(&self.hosts_dir())?;
        let mut g = Granted {
            format: 1,
            vault_id: vault_id.into(),
            key_id: key.fingerprint(),
            hosts,
            mac: String::new(),
        };
        g.mac = g.mac_with(key);
        let json = serde_json::to_vec_pretty(&g).expect("a list serialises");
        crate::write_atomic(&self.hosts_dir(), "granted.json", &json)
    }

    /// Gives every host of the granted list (MACed under `listed_with`: the key before a
    /// rotation, else `master`) whose grant holds another key `master` (generation
    /// `generation`) instead, wrapped to the host key the list names; signs the list with
    /// `master`. A grant file nobody listed is never renewed. Answers the hosts renewed, and
    /// those left as they were, with why: never an error, since what called it (an unlock, a
    /// rotation) has already done its work.
    pub(crate) fn renew_grants(
        &self,
        listed_with: &Key256,
        master: &Key256,
        generation: u64,
        listed: Option<std::collections::BTreeMap<String, String>>,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let (mut renewed, mut skipped) = (Vec::new(), Vec::new());
        let vault_id = match self.vault_id() {
            Ok(id) => id,
            Err(e) => return (renewed, vec![("*".into(), e.to_string())]),
        };
        let granted = match listed.map_or_else(|| self.read_granted(listed_with, &vault_id), Ok) {
            Ok(g) => g,
            Err(e) => return (renewed, vec![("*".into(), e.to_string())]),
        };
        // Signed under the new key first: a rotation stopped while renewing leaves a list
        // the next unlock can use.
        if listed_with.fingerprint() != master.fingerprint() {
            if let Err(e) = self.write_granted(master, &vault_id, granted.clone()) {
                skipped.push(("*".into(), e.to_string()));
            }
        }
        for (host, fingerprint) in &granted {
            let current = read::<Grant>(&host_file(&self.dir, host, "grant"))
                .ok()
                .flatten()
                .is_some_and(|g| g.key_id == master.fingerprint() && &g.host_key == fingerprint);
            if current {
                continue;
            }
            let public = match read::<HostPublic>(&host_file(&self.dir, host, "pub")) {
                Ok(Some(p)) if &p.fingerprint == fingerprint && &p.host == host => p,
                Ok(_) => {
                    skipped.push((
                        host.clone(),
                        "its key is not the one it was given the master key for".into(),
                    ));
                    continue;
                }
                Err(e) => {
                    skipped.push((host.clone(), e.to_string()));
                    continue;
                }
            };
            let written = wrap(master, generation, &public).and_then(|g| {
                let json = serde_json::to_vec_pretty(&g).expect("a grant serialises");
                crate::write_atomic(&self.hosts_dir(), &format!("{host}.grant"), &json)
            });
            match written {
                Ok(()) => renewed.push(host.clone()),
                Err(e) => skipped.push((host.clone(), e.to_string())),
            }
        }
        for (host, why) in &skipped {
            tracing::warn!(host, why, "a host's grant was not renewed");
        }
        (renewed, skipped)
    }

    /// The hosts with a public key, sorted.
    fn host_names(&self) -> Result<Vec<String>, VaultError> {
        let dir = self.hosts_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_at(&dir)(e)),
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.strip_suffix(".pub")?.to_string();
                check_host(&name).is_ok().then_some(name)
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// The master key from `host`'s grant, opened with its key pair's `seed` and checked
    /// against the vault's key and manifest.
    fn open_grant(&self, host: &str, seed: &Key256) -> Result<Key256, VaultError> {
        let env = self.envelope()?;
        let grant_file = host_file(&self.dir, host, "grant");
        let grant: Grant = read(&grant_file)?.ok_or_else(|| VaultError::NoGrant {
            host: host.into(),
            reason: format!(
                "none yet: on a host that has the key, run `clawfs vault add-host {host}`"
            ),
        })?;
        if grant.host != host || grant.vault_id != env.vault_id {
            return Err(VaultError::tampered(
                &grant_file,
                "for another host or vault",
            ));
        }
        if grant.key_id != env.key_id {
            return Err(VaultError::NoGrant {
                host: host.into(),
                reason: format!(
                    "it holds the key of generation {}, the vault's is generation {}: unlock on \
                     a host that has the key (which renews grants), or run `clawfs vault \
                     add-host {host}` there",
                    grant.generation, env.generation
                ),
            });
        }
        let key = unwrap(&grant, seed, &grant_file)?;
        self.read_manifest()?.verify(&key, &self.manifest_path())?;
        Ok(key)
    }

    /// Each host's key and grant.
    pub(crate) fn host_statuses(&self) -> Result<Vec<crate::HostStatus>, VaultError> {
        let mut out = Vec::new();
        for host in self.host_names()? {
            // A damaged or planted file shows as nothing, never stops the status (or an
            // unlock, which ends with it).
            let Ok(Some(public)) = read::<HostPublic>(&host_file(&self.dir, &host, "pub")) else {
                continue;
            };
            let sealer = read_sealed(&host_file(&self.dir, &host, "key"))
                .ok()
                .map(|e| e.sealed.kind());
            let granted_generation = read::<Grant>(&host_file(&self.dir, &host, "grant"))
                .ok()
                .flatten()
                .filter(|g| g.host_key == public.fingerprint)
                .map(|g| g.generation);
            out.push(crate::HostStatus {
                host,
                fingerprint: public.fingerprint,
                sealer,
                granted_generation,
            });
        }
        Ok(out)
    }

    /// [`crate::Vault::unlock`] on a host with a key of its own: unseals its key pair with its
    /// sealer, opens its grant and checks the manifest with the key. The rollback counter is
    /// checked where it lives, on the host whose TPM sealed `master-key.enc`.
    pub(crate) fn unlock_by_grant(
        &self,
        host: &str,
        passphrase: Option<&str>,
    ) -> Result<crate::VaultStatus, VaultError> {
        let _lock = self.write_lock()?;
        if crate::rotation::journal_state(self)?.is_some() {
            return Err(VaultError::NoGrant {
                host: host.into(),
                reason:
                    "a key rotation is unfinished; unlock on the host that rotated to finish it"
                        .into(),
            });
        }
        let env = self.envelope()?;
        let key_file = host_file(&self.dir, host, "key");
        let sealed = read_sealed(&key_file)?;
        if sealed.vault_id != env.vault_id {
            return Err(VaultError::tampered(&key_file, "a key of another vault"));
        }
        let sealer =
            self.host_pair_sealer(host, sealed.sealed.kind(), Some(&sealed), passphrase)?;
        let seed = sealer.unseal(&sealed, &key_file)?;
        // Files another host just replaced (a grant, a rotation's key and manifest) show here
        // only once this host's caches of the shared volume expire: a view that does not agree
        // is read again for a while before it is reported.
        let deadline = std::time::Instant::now() + SETTLE;
        let key = loop {
            match self.open_grant(host, &seed) {
                Ok(key) => break key,
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
            }
        };
        let ring = self
            .keyring(true)?
            .ok_or_else(|| VaultError::Keyring("keyring not created".into()))?;
        ring.put(
            crate::keyring::MASTER,
            key.bytes(),
            self.config.unlock_timeout,
        )?;
        ring.remove(crate::keyring::MASTER_NEXT)?;
        ring.remove(crate::counter::FLOOR)?;
        drop(_lock);
        self.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_reached_through_a_symlink_or_folders_yet_to_be_made_is_inside_the_store() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let own = tmp.path().join("etc");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::create_dir_all(&own).unwrap();
        std::os::unix::fs::symlink(&store, own.join("link")).unwrap();
        assert!(!inside(&own.join("vault-a.key"), &store));
        assert!(!inside(&own.join("new/deeper/vault-a.key"), &store));
        assert!(inside(&store.join("vault-a.key"), &store));
        assert!(inside(&own.join("link/vault-a.key"), &store));
        // Folders that do not exist yet, beneath a symlink into the store.
        assert!(inside(&own.join("link/new/deeper/vault-a.key"), &store));
        // `..` among folders yet to be made cannot be told: refused.
        assert!(inside(&own.join("new/../../store/vault-a.key"), &store));
    }

    #[test]
    fn a_grant_opens_with_its_hosts_key_only_and_binds_its_header() {
        let master = Key256::random();
        let (seed, other) = (Key256::random(), Key256::random());
        let public = public_of(&seed, "v1", "b");
        let grant = wrap(&master, 3, &public).unwrap();
        let file = Path::new("b.grant");
        let key = unwrap(&grant, &seed, file).unwrap();
        assert_eq!(key.fingerprint(), master.fingerprint());
        assert!(unwrap(&grant, &other, file).is_err(), "another host's key");
        let mut moved = grant.clone();
        moved.host = "c".into();
        assert!(unwrap(&moved, &seed, file).is_err(), "renamed to host c");
        let mut older = grant.clone();
        older.generation = 2;
        assert!(unwrap(&older, &seed, file).is_err(), "header edited");
        let mut forged = public.clone();
        forged.public = public_of(&other, "v1", "b").public;
        assert!(wrap(&master, 3, &forged).is_err(), "fingerprint mismatch");
    }

    #[test]
    fn host_names_follow_the_stores_rules() {
        assert!(check_host("host-1").is_ok());
        for bad in ["", "-a", "A", "a/b", "..", "a.b"] {
            assert!(check_host(bad).is_err(), "{bad}");
        }
    }
}
