//! Sealing backends for the master key and the `master-key.enc` envelope that records them.
//!
//! ```json
//! {"format": 1, "vault_id": "…", "key_id": "<fingerprint>", "generation": 1,
//!  "created_at": "…", "sealer": "tpm2", "tcti": "…", "pcrs": [7], "public": "b64", "private": "b64"}
//! ```
//! `passphrase` envelopes carry `kdf` {algorithm, iterations, salt}, `check`, `nonce`,
//! `ciphertext`, `tag`; `host-key` envelopes `host_key_fingerprint`, `nonce`, `ciphertext`, `tag`.
//! The header fields (vault id, key id, generation, sealer) are the AES-GCM associated data of
//! the wrapped key; for the TPM the unsealed key must match `key_id`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::crypto::{self, b64, Key256, KDF_ALGORITHM, KDF_ITERATIONS};
use super::error::{io_at, VaultError};

/// Which backend seals the master key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SealerKind {
    /// TPM 2.0 sealed data object.
    #[serde(rename = "tpm2")]
    Tpm,
    /// AES-256-GCM under a key from an admin passphrase (PBKDF2).
    #[serde(rename = "passphrase")]
    Passphrase,
    /// AES-256-GCM under a root-only host key file.
    #[serde(rename = "host-key")]
    HostKey,
}

impl SealerKind {
    /// The name used in envelopes, the CLI and `status`.
    pub fn as_str(self) -> &'static str {
        match self {
            SealerKind::Tpm => "tpm2",
            SealerKind::Passphrase => "passphrase",
            SealerKind::HostKey => "host-key",
        }
    }
}

impl std::fmt::Display for SealerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// PBKDF2 parameters as recorded in vault files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdfParams {
    /// Always `PBKDF2-HMAC-SHA256`.
    pub algorithm: String,
    /// Iteration count.
    pub iterations: u32,
    /// Base64 salt.
    pub salt: String,
}

/// The sealer-specific part of an envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "sealer")]
pub enum SealedKey {
    /// TPM 2.0 sealed object blobs.
    #[serde(rename = "tpm2")]
    Tpm {
        /// The TCTI used when sealing (a hint; configuration and environment take precedence).
        tcti: String,
        /// SHA-256 PCR indices the object is bound to (empty: none).
        pcrs: Vec<u8>,
        /// Base64 marshalled TPM2B_PUBLIC.
        public: String,
        /// Base64 TPM2B_PRIVATE.
        private: String,
    },
    /// Passphrase-wrapped key.
    #[serde(rename = "passphrase")]
    Passphrase {
        /// KEK derivation.
        kdf: KdfParams,
        /// Base64 HMAC-SHA256(KEK, label)[..16]: tells a wrong passphrase from a damaged file.
        check: String,
        /// Base64 12-byte GCM nonce.
        nonce: String,
        /// Base64 wrapped key (32 bytes).
        ciphertext: String,
        /// Base64 16-byte GCM tag.
        tag: String,
    },
    /// Host-key-wrapped key.
    #[serde(rename = "host-key")]
    HostKey {
        /// Fingerprint of the host key that wrapped this key.
        host_key_fingerprint: String,
        /// Base64 12-byte GCM nonce.
        nonce: String,
        /// Base64 wrapped key (32 bytes).
        ciphertext: String,
        /// Base64 16-byte GCM tag.
        tag: String,
    },
}

impl SealedKey {
    /// Which backend this is.
    pub fn kind(&self) -> SealerKind {
        match self {
            SealedKey::Tpm { .. } => SealerKind::Tpm,
            SealedKey::Passphrase { .. } => SealerKind::Passphrase,
            SealedKey::HostKey { .. } => SealerKind::HostKey,
        }
    }
}

/// `master-key.enc` (also the journal's new key and the archived keys).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// Always 1.
    pub format: u32,
    /// Random id of this vault; names its kernel keyring `clawfs:<vault_id>`.
    pub vault_id: String,
    /// Fingerprint of the master key ([`Key256::fingerprint`]).
    pub key_id: String,
    /// 1 at init, +1 per rotation.
    pub generation: u64,
    /// RFC 3339 creation time of this master key.
    pub created_at: String,
    /// Base64 HMAC-SHA256 of the header under a sub-key of the master key: binds the header to
    /// the key whatever the sealer.
    pub header_mac: String,
    /// The sealed key.
    #[serde(flatten)]
    pub sealed: SealedKey,
}

impl Envelope {
    /// The associated data binding the header to a wrapped key.
    pub fn aad(vault_id: &str, key_id: &str, generation: u64, kind: SealerKind) -> Vec<u8> {
        format!("clawfs-vault-master/v1\0{vault_id}\0{key_id}\0{generation}\0{kind}").into_bytes()
    }

    /// Reads and parses an envelope file.
    pub fn load(path: &Path) -> Result<Envelope, VaultError> {
        let bytes = match crate::files::read(path, crate::files::MAX_RECORD) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(VaultError::NotInitialized)
            }
            Err(e) => return Err(io_at(path)(e)),
        };
        Envelope::parse(&bytes, path)
    }

    /// Parses an envelope.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Envelope, VaultError> {
        let env: Envelope = serde_json::from_slice(bytes)
            .map_err(|e| VaultError::tampered(path, format!("does not parse: {e}")))?;
        if env.format != 1 {
            return Err(VaultError::tampered(
                path,
                format!("unknown format {}", env.format),
            ));
        }
        Ok(env)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("envelope serialises");
        v.push(b'\n');
        v
    }
}

/// How to seal or unseal: one backend with its inputs.
pub enum Sealer {
    /// TPM on a TCTI, with PCR indices.
    Tpm {
        /// TCTI string.
        tcti: String,
        /// SHA-256 PCRs to bind (sealing only; unsealing uses the envelope's list).
        pcrs: Vec<u8>,
    },
    /// An admin passphrase.
    Passphrase(Zeroizing<String>),
    /// A host key file.
    HostKey(PathBuf),
}

fn wrap_fields(kek: &Key256, aad: &[u8], key: &Key256) -> (String, String, String) {
    let s = crypto::encrypt(kek, aad, key.bytes());
    (
        b64::enc(&s.nonce),
        b64::enc(&s.ciphertext),
        b64::enc(&s.tag),
    )
}

fn unwrap_fields(
    kek: &Key256,
    aad: &[u8],
    nonce: &str,
    ciphertext: &str,
    tag: &str,
    file: &Path,
) -> Result<Key256, VaultError> {
    let bad = |what: &str| VaultError::tampered(file, format!("bad {what}"));
    let nonce = b64::dec_n::<12>(nonce).ok_or_else(|| bad("nonce"))?;
    let tag = b64::dec_n::<16>(tag).ok_or_else(|| bad("tag"))?;
    let ct = b64::dec(ciphertext).ok_or_else(|| bad("ciphertext"))?;
    let plain = crypto::decrypt(kek, aad, &nonce, &ct, &tag)
        .ok_or_else(|| VaultError::tampered(file, "wrapped master key fails authentication"))?;
    Key256::from_slice(&plain).ok_or_else(|| bad("key length"))
}

const CHECK_LABEL: &[u8] = b"clawfs-vault-passphrase-check";
const HEADER_LABEL: &str = "clawfs-vault-envelope-header";

fn header_aad(aad: &[u8], created_at: &str) -> Vec<u8> {
    let mut v = aad.to_vec();
    v.push(0);
    v.extend_from_slice(created_at.as_bytes());
    v
}

impl Sealer {
    /// Which backend.
    pub fn kind(&self) -> SealerKind {
        match self {
            Sealer::Tpm { .. } => SealerKind::Tpm,
            Sealer::Passphrase(_) => SealerKind::Passphrase,
            Sealer::HostKey(_) => SealerKind::HostKey,
        }
    }

    /// Seals `key` into an envelope.
    pub fn seal(
        &self,
        key: &Key256,
        vault_id: &str,
        generation: u64,
        created_at: &str,
    ) -> Result<Envelope, VaultError> {
        let key_id = key.fingerprint();
        let aad = Envelope::aad(vault_id, &key_id, generation, self.kind());
        let sealed = match self {
            Sealer::Tpm { tcti, pcrs } => seal_tpm(tcti, pcrs, key)?,
            Sealer::Passphrase(pass) => {
                let salt: [u8; 16] = crypto::random_bytes();
                let kek = crypto::pbkdf2_key(pass.as_bytes(), &salt, KDF_ITERATIONS);
                let (nonce, ciphertext, tag) = wrap_fields(&kek, &aad, key);
                SealedKey::Passphrase {
                    kdf: KdfParams {
                        algorithm: KDF_ALGORITHM.into(),
                        iterations: KDF_ITERATIONS,
                        salt: b64::enc(&salt),
                    },
                    check: b64::enc(&kek.hmac(CHECK_LABEL)[..16]),
                    nonce,
                    ciphertext,
                    tag,
                }
            }
            Sealer::HostKey(path) => {
                let hk = read_host_key(path)?;
                let (nonce, ciphertext, tag) = wrap_fields(&hk, &aad, key);
                SealedKey::HostKey {
                    host_key_fingerprint: hk.fingerprint(),
                    nonce,
                    ciphertext,
                    tag,
                }
            }
        };
        Ok(Envelope {
            format: 1,
            vault_id: vault_id.into(),
            key_id,
            generation,
            created_at: created_at.into(),
            header_mac: b64::enc(&key.subkey(HEADER_LABEL).hmac(&header_aad(&aad, created_at))),
            sealed,
        })
    }

    /// Unseals the key of `env` (read from `file`); checks it against `env.key_id`.
    pub fn unseal(&self, env: &Envelope, file: &Path) -> Result<Key256, VaultError> {
        let aad = Envelope::aad(
            &env.vault_id,
            &env.key_id,
            env.generation,
            env.sealed.kind(),
        );
        let key = match (&env.sealed, self) {
            (
                SealedKey::Tpm {
                    pcrs,
                    public,
                    private,
                    ..
                },
                Sealer::Tpm { tcti, .. },
            ) => {
                let public = b64::dec(public)
                    .ok_or_else(|| VaultError::tampered(file, "bad public blob"))?;
                let private = b64::dec(private)
                    .ok_or_else(|| VaultError::tampered(file, "bad private blob"))?;
                unseal_tpm(tcti, pcrs, public, private).map_err(|e| match e {
                    VaultError::Tpm(m) => VaultError::tampered(file, format!("TPM: {m}")),
                    other => other,
                })?
            }
            (
                SealedKey::Passphrase {
                    kdf,
                    check,
                    nonce,
                    ciphertext,
                    tag,
                },
                Sealer::Passphrase(pass),
            ) => {
                let salt =
                    b64::dec(&kdf.salt).ok_or_else(|| VaultError::tampered(file, "bad salt"))?;
                if kdf.algorithm != KDF_ALGORITHM || kdf.iterations < 100_000 {
                    return Err(VaultError::tampered(file, "unexpected KDF parameters"));
                }
                let kek = crypto::pbkdf2_key(pass.as_bytes(), &salt, kdf.iterations);
                let want =
                    b64::dec(check).ok_or_else(|| VaultError::tampered(file, "bad check"))?;
                if !crypto::ct_eq(&kek.hmac(CHECK_LABEL)[..16], &want) {
                    return Err(VaultError::WrongPassphrase);
                }
                unwrap_fields(&kek, &aad, nonce, ciphertext, tag, file)?
            }
            (
                SealedKey::HostKey {
                    host_key_fingerprint,
                    nonce,
                    ciphertext,
                    tag,
                },
                Sealer::HostKey(path),
            ) => {
                let hk = read_host_key(path)?;
                if hk.fingerprint() != *host_key_fingerprint {
                    return Err(VaultError::HostKey {
                        path: path.clone(),
                        reason: format!(
                            "is not the key that sealed the vault (fingerprint {} ≠ {host_key_fingerprint})",
                            hk.fingerprint()
                        ),
                    });
                }
                unwrap_fields(&hk, &aad, nonce, ciphertext, tag, file)?
            }
            (sealed, _) => {
                return Err(VaultError::Keyring(format!(
                    "internal: {} sealer asked to open a {} envelope",
                    self.kind(),
                    sealed.kind()
                )))
            }
        };
        if key.fingerprint() != env.key_id {
            return Err(VaultError::tampered(
                file,
                "unsealed key does not match key_id",
            ));
        }
        let mac = key
            .subkey(HEADER_LABEL)
            .hmac(&header_aad(&aad, &env.created_at));
        let want = b64::dec(&env.header_mac).unwrap_or_default();
        if !crypto::ct_eq(&mac, &want) {
            return Err(VaultError::tampered(file, "header does not match the key"));
        }
        Ok(key)
    }
}

#[cfg(feature = "tpm")]
fn seal_tpm(tcti: &str, pcrs: &[u8], key: &Key256) -> Result<SealedKey, VaultError> {
    let s = super::tpm::seal(tcti, pcrs, key)?;
    Ok(SealedKey::Tpm {
        tcti: tcti.into(),
        pcrs: pcrs.to_vec(),
        public: b64::enc(&s.public),
        private: b64::enc(&s.private),
    })
}

#[cfg(feature = "tpm")]
fn unseal_tpm(
    tcti: &str,
    pcrs: &[u8],
    public: Vec<u8>,
    private: Vec<u8>,
) -> Result<Key256, VaultError> {
    super::tpm::unseal(tcti, pcrs, &super::tpm::TpmSealed { public, private })
}

#[cfg(not(feature = "tpm"))]
fn seal_tpm(_: &str, _: &[u8], _: &Key256) -> Result<SealedKey, VaultError> {
    Err(VaultError::NoTpm(
        "this build has no TPM support (feature `tpm`)".into(),
    ))
}

#[cfg(not(feature = "tpm"))]
fn unseal_tpm(_: &str, _: &[u8], _: Vec<u8>, _: Vec<u8>) -> Result<Key256, VaultError> {
    Err(VaultError::NoTpm(
        "this build has no TPM support (feature `tpm`)".into(),
    ))
}

/// Reads a host key: exactly 32 bytes, no group or other permission bits, owned by root or by
/// the current user.
pub fn read_host_key(path: &Path) -> Result<Key256, VaultError> {
    let err = |reason: String| VaultError::HostKey {
        path: path.to_path_buf(),
        reason,
    };
    let meta = fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(err(format!(
            "mode {:o} gives access beyond its owner (want 0600)",
            meta.mode() & 0o777
        )));
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != euid {
        return Err(err(format!("owned by uid {}, not root", meta.uid())));
    }
    let bytes = Zeroizing::new(fs::read(path).map_err(|e| err(e.to_string()))?);
    Key256::from_slice(&bytes).ok_or_else(|| err(format!("{} bytes, want 32", bytes.len())))
}

/// Creates a host key file (32 random bytes, mode 0600) unless one exists. Returns whether it
/// was created.
pub fn create_host_key(path: &Path) -> Result<bool, VaultError> {
    if path.exists() {
        read_host_key(path)?;
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
    }
    let key = Key256::random();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_at(path))?;
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io_at(path))?;
    f.write_all(key.bytes()).map_err(io_at(path))?;
    f.sync_all().map_err(io_at(path))?;
    Ok(true)
}
