//! Secret files (P1.4 §3.5) and the version manifest.
//!
//! A secret file `vault/secrets/<name>.enc`:
//! ```json
//! {"secret_id": "openai-api-key", "encrypted_value": "b64", "iv": "b64 (12 bytes)",
//!  "auth_tag": "b64 (16 bytes)", "algorithm": "AES-256-GCM",
//!  "key_id": "kernel-keyring:clawos-master#<master fingerprint>",
//!  "kdf": {"algorithm": "PBKDF2-HMAC-SHA256", "iterations": 600000, "salt": "b64(\"<id>:v<version>\")"},
//!  "created_at": "…", "updated_at": "…", "version": 3}
//! ```
//! The AES-GCM associated data is `clawfs-vault-secret/v1 \0 secret_id \0 version \0 key_id \0
//! iterations`, and the key is PBKDF2(master, "<secret_id>:v<version>"), so a ciphertext moved to
//! another file, relabelled with another version or key, fails to decrypt.
//!
//! The manifest `vault/manifest.json` records the latest version of every secret (and a
//! tombstone for removed ones), authenticated by an HMAC under a sub-key of the master key. A
//! secret file older than its manifest entry (an older version put back) is refused. In a
//! TPM-sealed vault it also records the vault's TPM NV counter and the value that counter has
//! once this manifest is in force, under the same HMAC (see `super::counter`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::crypto::{self, b64, Key256, ALGORITHM, KDF_ALGORITHM, KDF_ITERATIONS};
use super::error::{io_at, VaultError};
use super::sealer::KdfParams;

/// The `key_id` of secrets encrypted under the master key with fingerprint `fp`.
pub fn key_id_for(fp: &str) -> String {
    format!("kernel-keyring:clawos-master#{fp}")
}

/// The master key fingerprint inside a `key_id`.
pub fn fingerprint_of(key_id: &str) -> Option<&str> {
    key_id.strip_prefix("kernel-keyring:clawos-master#")
}

/// The PBKDF2 salt of a secret version (P1.4 §3.2 Level 3).
pub fn salt_for(secret_id: &str, version: u64) -> String {
    format!("{secret_id}:v{version}")
}

/// The per-secret key (600,000 PBKDF2 iterations: cache it).
pub fn derive_secret_key(master: &Key256, secret_id: &str, version: u64) -> Key256 {
    master.pbkdf2(salt_for(secret_id, version).as_bytes(), KDF_ITERATIONS)
}

/// One secret file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretFile {
    /// The secret's name; equals the file name without `.enc`.
    pub secret_id: String,
    /// Base64 ciphertext without the tag.
    pub encrypted_value: String,
    /// Base64 12-byte nonce.
    pub iv: String,
    /// Base64 16-byte GCM tag.
    pub auth_tag: String,
    /// `AES-256-GCM`.
    pub algorithm: String,
    /// `kernel-keyring:clawos-master#<master key fingerprint>`.
    pub key_id: String,
    /// Per-secret key derivation.
    pub kdf: KdfParams,
    /// When the secret was first stored.
    pub created_at: String,
    /// When this version was written.
    pub updated_at: String,
    /// 1 on first put; +1 on every put and every rotation.
    pub version: u64,
}

fn aad(secret_id: &str, version: u64, key_id: &str, iterations: u32) -> Vec<u8> {
    format!("clawfs-vault-secret/v1\0{secret_id}\0{version}\0{key_id}\0{iterations}").into_bytes()
}

impl SecretFile {
    /// Encrypts `value` as version `version` of `secret_id` under `key` (derived for exactly that
    /// id and version from the master key `master_fp`).
    pub fn seal(
        secret_id: &str,
        version: u64,
        master_fp: &str,
        key: &Key256,
        value: &[u8],
        created_at: &str,
        now: &str,
    ) -> SecretFile {
        let key_id = key_id_for(master_fp);
        let s = crypto::encrypt(
            key,
            &aad(secret_id, version, &key_id, KDF_ITERATIONS),
            value,
        );
        SecretFile {
            secret_id: secret_id.into(),
            encrypted_value: b64::enc(&s.ciphertext),
            iv: b64::enc(&s.nonce),
            auth_tag: b64::enc(&s.tag),
            algorithm: ALGORITHM.into(),
            key_id,
            kdf: KdfParams {
                algorithm: KDF_ALGORITHM.into(),
                iterations: KDF_ITERATIONS,
                salt: b64::enc(salt_for(secret_id, version).as_bytes()),
            },
            created_at: created_at.into(),
            updated_at: now.into(),
            version,
        }
    }

    /// Reads and structurally checks `dir/<name>.enc` (no decryption). `Ok(None)` if absent.
    pub fn load(path: &Path, name: &str) -> Result<Option<SecretFile>, VaultError> {
        let bytes = match crate::files::read(path, crate::files::MAX_RECORD) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(path)(e)),
        };
        let f: SecretFile = serde_json::from_slice(&bytes)
            .map_err(|e| VaultError::tampered(path, format!("does not parse: {e}")))?;
        if f.secret_id != name {
            return Err(VaultError::tampered(
                path,
                format!("holds secret {:?}, not {name:?}", f.secret_id),
            ));
        }
        if f.algorithm != ALGORITHM || f.kdf.algorithm != KDF_ALGORITHM {
            return Err(VaultError::tampered(path, "unknown algorithm"));
        }
        if f.kdf.iterations != KDF_ITERATIONS {
            return Err(VaultError::tampered(path, "unexpected KDF iterations"));
        }
        if b64::dec(&f.kdf.salt).as_deref() != Some(salt_for(name, f.version).as_bytes()) {
            return Err(VaultError::tampered(
                path,
                "KDF salt does not match id and version",
            ));
        }
        if fingerprint_of(&f.key_id).is_none() {
            return Err(VaultError::tampered(path, "unknown key_id"));
        }
        Ok(Some(f))
    }

    /// The master key fingerprint this file is encrypted under.
    pub fn master_fp(&self) -> &str {
        fingerprint_of(&self.key_id).unwrap_or("")
    }

    /// Decrypts with the per-secret key for this file's id and version.
    pub fn open(&self, key: &Key256, path: &Path) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        let bad = |what: &str| VaultError::tampered(path, format!("bad {what}"));
        let nonce = b64::dec_n::<12>(&self.iv).ok_or_else(|| bad("iv"))?;
        let tag = b64::dec_n::<16>(&self.auth_tag).ok_or_else(|| bad("auth_tag"))?;
        let ct = b64::dec(&self.encrypted_value).ok_or_else(|| bad("encrypted_value"))?;
        crypto::decrypt(
            key,
            &aad(
                &self.secret_id,
                self.version,
                &self.key_id,
                self.kdf.iterations,
            ),
            &nonce,
            &ct,
            &tag,
        )
        .ok_or_else(|| {
            VaultError::tampered(
                path,
                "fails authentication (changed ciphertext, iv, tag, secret_id, version or key_id)",
            )
        })
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("secret file serialises");
        v.push(b'\n');
        v
    }
}

/// One manifest entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// The latest version written (or, when `removed`, the version that was removed).
    pub version: u64,
    /// The secret was removed; files of `version` or older are refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// The TPM NV counter a manifest is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestCounter {
    /// NV index handle of the counter (0x01800000..=0x01BFFFFF).
    pub nv_index: u32,
    /// The counter's value once this manifest is in force: written as the current value + 1,
    /// before the counter is incremented.
    pub value: u64,
}

/// `vault/manifest.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// Fingerprint of the master key whose sub-key MACs this manifest.
    pub key_id: String,
    /// Latest version per secret.
    pub secrets: BTreeMap<String, ManifestEntry>,
    /// The TPM NV counter (TPM-sealed vaults); `None` for the other sealers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<ManifestCounter>,
    /// Base64 HMAC-SHA256 over `key_id`, `secrets` and, when present, `counter`.
    #[serde(default)]
    pub mac: String,
}

const MANIFEST_LABEL: &str = "clawfs-vault-manifest";

impl Manifest {
    /// v1 (no counter) is what manifests were before counters; v2 covers the counter. The label
    /// differs, so a counter cannot be stripped from (or added to) a manifest without the key.
    fn mac_input(&self) -> Vec<u8> {
        let (mut v, body) = match &self.counter {
            None => (
                b"clawfs-vault-manifest/v1\0".to_vec(),
                serde_json::to_vec(&(&self.key_id, &self.secrets)),
            ),
            Some(c) => (
                b"clawfs-vault-manifest/v2\0".to_vec(),
                serde_json::to_vec(&(&self.key_id, &self.secrets, c)),
            ),
        };
        v.extend_from_slice(&body.expect("serialises"));
        v
    }

    /// An empty manifest for the master key `master`, bound to `counter` if given.
    pub fn new(master: &Key256, counter: Option<ManifestCounter>) -> Manifest {
        let mut m = Manifest {
            key_id: master.fingerprint(),
            counter,
            ..Manifest::default()
        };
        m.sign(master);
        m
    }

    /// Recomputes the MAC under `master` (whose fingerprint becomes `key_id`).
    pub fn sign(&mut self, master: &Key256) {
        self.key_id = master.fingerprint();
        self.mac = b64::enc(&master.subkey(MANIFEST_LABEL).hmac(&self.mac_input()));
    }

    /// Parses without verifying (to learn `key_id`).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Manifest, VaultError> {
        serde_json::from_slice(bytes)
            .map_err(|e| VaultError::tampered(path, format!("does not parse: {e}")))
    }

    /// Checks the MAC under `master`.
    pub fn verify(&self, master: &Key256, path: &Path) -> Result<(), VaultError> {
        let mac = master.subkey(MANIFEST_LABEL).hmac(&self.mac_input());
        let want = b64::dec(&self.mac).unwrap_or_default();
        if self.key_id != master.fingerprint() || !crypto::ct_eq(&mac, &want) {
            return Err(VaultError::tampered(path, "manifest fails authentication"));
        }
        Ok(())
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("manifest serialises");
        v.push(b'\n');
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(master: &Key256) -> Manifest {
        let mut m = Manifest::new(
            master,
            Some(ManifestCounter {
                nv_index: 0x0180_1234,
                value: 7,
            }),
        );
        m.secrets.insert(
            "a".into(),
            ManifestEntry {
                version: 2,
                removed: false,
            },
        );
        m.sign(master);
        m
    }

    #[test]
    fn manifest_mac_covers_the_counter() {
        let k = Key256::random();
        let p = Path::new("manifest.json");
        let m = bound(&k);
        m.verify(&k, p).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&m.to_json()).unwrap();
        assert_eq!(json["counter"]["nv_index"], 0x0180_1234);
        assert_eq!(json["counter"]["value"], 7);
        // Through JSON and back.
        Manifest::parse(&m.to_json(), p)
            .unwrap()
            .verify(&k, p)
            .unwrap();
        // A lower (or any other) value, another index, or no counter at all: refused.
        for edit in [
            |m: &mut Manifest| m.counter.as_mut().unwrap().value = 6,
            |m: &mut Manifest| m.counter.as_mut().unwrap().value = 8,
            |m: &mut Manifest| m.counter.as_mut().unwrap().nv_index = 0x0180_1235,
            |m: &mut Manifest| m.counter = None,
        ] {
            let mut t = m.clone();
            edit(&mut t);
            assert!(matches!(t.verify(&k, p), Err(VaultError::Tampered { .. })));
        }
        // A counter added to a manifest that had none: refused.
        let mut plain = Manifest::new(&k, None);
        plain.verify(&k, p).unwrap();
        plain.counter = Some(ManifestCounter {
            nv_index: 0x0180_0000,
            value: 1,
        });
        assert!(plain.verify(&k, p).is_err());
    }

    #[test]
    fn manifest_without_counter_keeps_the_v1_mac() {
        // Manifests written before rollback counters still verify: same MAC input as before.
        let k = Key256::random();
        let m = Manifest::new(&k, None);
        let mut want = b"clawfs-vault-manifest/v1\0".to_vec();
        want.extend_from_slice(
            &serde_json::to_vec(&(&m.key_id, &BTreeMap::<String, ManifestEntry>::new())).unwrap(),
        );
        let mac = k.subkey(MANIFEST_LABEL).hmac(&want);
        assert_eq!(m.mac, b64::enc(&mac));
        assert!(!String::from_utf8(m.to_json()).unwrap().contains("counter"));
    }
}
