//! The people (admins) who sign: their public keys in `system/signers.json`, their private keys
//! in the vault as `signer-<name>`, and the Ed25519 signing and checking itself.

use std::os::fd::BorrowedFd;

use base64::Engine as _;
pub use ed25519_dalek::SigningKey;
use ed25519_dalek::{Signature, Signer as _, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::IntegrityError;

/// The trusted signers' public keys, relative to the store root (a file of `system/`, so the
/// system manifest covers it).
pub const SIGNERS_FILE: &str = "system/signers.json";

/// The vault secret holding `signer`'s private key.
pub fn vault_secret(signer: &str) -> String {
    format!("signer-{signer}")
}

/// `system/signers.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signers {
    /// Format version (1).
    pub version: u32,
    /// Every trusted signer.
    pub signers: Vec<SignerKey>,
}

/// One trusted signer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignerKey {
    /// Who signs (`[a-z0-9-]`, 1–64 bytes).
    pub name: String,
    /// The Ed25519 public key, base64 (32 bytes).
    pub public_key: String,
    /// When the key was added (RFC 3339).
    pub added_at: String,
}

impl Signers {
    /// The signers of the store whose root is `store` (none when the file is missing). The
    /// file must be as the system manifest records it: a key added or removed in the store
    /// behind ClawFS's back is refused, not trusted.
    pub fn load(store: BorrowedFd<'_>) -> Result<Signers, IntegrityError> {
        let bytes =
            clawfs_store::beneath::read(store, std::path::Path::new(SIGNERS_FILE), super::MAX_FILE)
                .map_err(IntegrityError::io(SIGNERS_FILE))?;
        super::system::check_recorded(store, "signers.json", bytes.as_deref())?;
        match bytes {
            None => Ok(Signers {
                version: 1,
                signers: Vec::new(),
            }),
            Some(b) => Signers::parse(&b),
        }
    }

    /// A signers file's bytes: JSON with no key given twice, every name a signer name and
    /// given once, every key valid and trusted under one name only (one key under two names
    /// would let one private key count as the two signers a change needs).
    pub fn parse(bytes: &[u8]) -> Result<Signers, IntegrityError> {
        let v = super::strict_json(bytes).map_err(IntegrityError::json(SIGNERS_FILE))?;
        let signers: Signers =
            serde_json::from_value(v).map_err(IntegrityError::json(SIGNERS_FILE))?;
        let mut names = std::collections::HashSet::new();
        let mut keys = std::collections::HashSet::new();
        for s in &signers.signers {
            check_signer_name(&s.name)?;
            if !names.insert(s.name.as_str()) {
                return Err(IntegrityError::Mismatch(format!(
                    "{SIGNERS_FILE}: '{}' is listed twice",
                    s.name
                )));
            }
            if !keys.insert(signers.key(&s.name)?.to_bytes()) {
                return Err(IntegrityError::Mismatch(format!(
                    "{SIGNERS_FILE}: '{}' has the key of another signer",
                    s.name
                )));
            }
        }
        Ok(signers)
    }

    /// Whether any signer is trusted: then every frozen document must carry a signature.
    pub fn is_empty(&self) -> bool {
        self.signers.is_empty()
    }

    /// `name`'s public key.
    pub fn key(&self, name: &str) -> Result<VerifyingKey, IntegrityError> {
        let entry = self
            .signers
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| IntegrityError::Mismatch(format!("'{name}' is not a trusted signer")))?;
        let bytes = b64()
            .decode(&entry.public_key)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                IntegrityError::Mismatch(format!("{SIGNERS_FILE}: '{name}' has a malformed key"))
            })?;
        VerifyingKey::from_bytes(&bytes).map_err(|_| {
            IntegrityError::Mismatch(format!("{SIGNERS_FILE}: '{name}' has an invalid key"))
        })
    }

    /// Checks that `signature` (base64) is `signer`'s signature of `message`.
    pub fn verify(
        &self,
        signer: &str,
        message: &[u8],
        signature: &str,
    ) -> Result<(), IntegrityError> {
        let key = self.key(signer)?;
        let bad = || IntegrityError::Mismatch(format!("the signature by '{signer}' is not valid"));
        let sig = b64()
            .decode(signature)
            .ok()
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .ok_or_else(bad)?;
        key.verify_strict(message, &Signature::from_bytes(&sig))
            .map_err(|_| bad())
    }

    /// Refuses a signing key that is not the trusted public key of `signer` (a vault secret
    /// replaced, or a signer removed from `system/signers.json`).
    pub fn check_key(&self, signer: &str, key: &SigningKey) -> Result<(), IntegrityError> {
        let trusted = self
            .key(signer)
            .map_err(|e| IntegrityError::Refused(e.to_string()))?;
        if trusted != key.verifying_key() {
            return Err(IntegrityError::Refused(format!(
                "the vault's key for {signer} is not the public key {SIGNERS_FILE} trusts"
            )));
        }
        Ok(())
    }

    /// Adds `name` with `key`; refused if the name is taken.
    pub fn add(&mut self, name: &str, key: &VerifyingKey, now: &str) -> Result<(), IntegrityError> {
        check_signer_name(name)?;
        if self.signers.iter().any(|s| s.name == name) {
            return Err(IntegrityError::Refused(format!(
                "'{name}' is already a trusted signer"
            )));
        }
        if let Some(s) = self
            .signers
            .iter()
            .find(|s| self.key(&s.name).is_ok_and(|k| k == *key))
        {
            return Err(IntegrityError::Refused(format!(
                "this key is already trusted as '{}'",
                s.name
            )));
        }
        self.signers.push(SignerKey {
            name: name.to_string(),
            public_key: b64().encode(key.as_bytes()),
            added_at: now.to_string(),
        });
        Ok(())
    }
}

/// A new signing key from the kernel's random source.
pub fn generate() -> SigningKey {
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut()).expect("the kernel's random source");
    SigningKey::from_bytes(&seed)
}

/// The signing key stored as a vault secret (its 32-byte seed).
pub fn from_secret(signer: &str, secret: &[u8]) -> Result<SigningKey, IntegrityError> {
    let seed: [u8; 32] = secret.try_into().map_err(|_| {
        IntegrityError::Refused(format!(
            "the vault secret {} is not a signing key (32 bytes)",
            vault_secret(signer)
        ))
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

/// `key`'s signature of `message`, base64.
pub fn sign(key: &SigningKey, message: &[u8]) -> String {
    b64().encode(key.sign(message).to_bytes())
}

/// Signer names: `[a-z0-9-]`, 1–64 bytes, not starting with `-`.
pub fn check_signer_name(name: &str) -> Result<(), IntegrityError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    match ok {
        true => Ok(()),
        false => Err(IntegrityError::Refused(format!(
            "'{name}' is not a signer name: use 1-64 of a-z, 0-9 and '-'"
        ))),
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_and_checks() {
        let (alice, bob) = (generate(), generate());
        let mut signers = Signers::default();
        signers.add("alice", &alice.verifying_key(), "now").unwrap();
        signers.add("bob", &bob.verifying_key(), "now").unwrap();
        assert!(signers.add("bob", &bob.verifying_key(), "now").is_err());
        let sig = sign(&alice, b"message");
        signers.verify("alice", b"message", &sig).unwrap();
        // Another message, another signer's name, an unknown signer, garbage.
        assert!(signers.verify("alice", b"messagE", &sig).is_err());
        assert!(signers.verify("bob", b"message", &sig).is_err());
        assert!(signers.verify("carol", b"message", &sig).is_err());
        assert!(signers.verify("alice", b"message", "not base64!").is_err());
        assert!(signers.verify("alice", b"message", "AAAA").is_err());
    }

    /// One key under two names, or one name twice, is not a signers file: either would let
    /// one private key count as two signers.
    #[test]
    fn one_key_one_name() {
        let key = generate().verifying_key();
        let other = generate().verifying_key();
        let mut signers = Signers {
            version: 1,
            signers: Vec::new(),
        };
        signers.add("alice", &key, "now").unwrap();
        let e = signers.add("carol", &key, "now").unwrap_err().to_string();
        assert!(e.contains("already trusted as 'alice'"), "{e}");
        signers.add("bob", &other, "now").unwrap();
        let good = serde_json::to_vec(&signers).unwrap();
        assert_eq!(Signers::parse(&good).unwrap().signers.len(), 2);
        for (edit, why) in [
            ("bob", "has the key of another signer"),
            ("alice", "is listed twice"),
        ] {
            let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
            let mut twin = v["signers"][0].clone();
            twin["name"] = edit.into();
            if edit == "bob" {
                v["signers"][1] = twin;
            } else {
                v["signers"].as_array_mut().unwrap().push(twin);
            }
            let e = Signers::parse(&serde_json::to_vec(&v).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{edit}: {e}");
        }
    }

    #[test]
    fn names() {
        for good in ["alice", "sec-1", "a"] {
            check_signer_name(good).unwrap();
        }
        for bad in ["", "-x", "Alice", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_signer_name(bad).is_err(), "{bad}");
        }
    }
}
