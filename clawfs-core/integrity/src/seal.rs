//! The seal of the system manifest: an HMAC-SHA256, keyed from the vault's master key
//! ([`clawfs_vault::Vault::integrity_key`]), over the manifest and the high-water marks of what
//! is signed — each document's latest version in `specs/signatures.json`, each added tool's
//! latest version in `tools/registry.json`.
//!
//! Hashes alone catch a change made by someone who cannot also rewrite the manifest; the seal
//! catches the manifest rewritten to match (a policy that makes an agent root, a new signer),
//! and the marks catch a signed book rolled back to an older consistent state (the newest
//! version of a document or tool deleted with its entry). Sealing and checking need the vault
//! unlocked: commands that change what the manifest covers refuse to run while a set-up vault
//! is locked, and a check made while it is locked says so instead of passing.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::Path;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::system::HighWater;
use super::system::{self, Difference, Manifest};
use super::IntegrityError;

/// Each document's latest signed version, by spec id.
type SpecMarks = BTreeMap<String, u32>;
/// Each added tool's latest version, by tool id.
type ToolMarks = BTreeMap<String, String>;

/// The marks of the books as the store holds them now; a book that cannot be read (the daemon
/// then serves none of it) has no marks (`None`), and its sealed ones are kept.
fn marks(store: BorrowedFd<'_>) -> (Option<SpecMarks>, Option<ToolMarks>) {
    let specs =
        match super::read_json::<super::specs::SignatureBook>(store, "specs/signatures.json") {
            // A missing book signs nothing: every sealed document is gone.
            Ok(None) => Some(BTreeMap::new()),
            Ok(Some(book)) => {
                let mut m = BTreeMap::new();
                for e in book
                    .signatures
                    .iter()
                    .filter(|e| e.status != super::specs::Status::Draft)
                {
                    let v = m.entry(e.spec_id.clone()).or_insert(0);
                    *v = (*v).max(e.version);
                }
                Some(m)
            }
            Err(_) => None,
        };
    let tools = super::registry::load_packages(store).ok().map(|packages| {
        let mut m: BTreeMap<String, String> = BTreeMap::new();
        for p in packages {
            if m.get(&p.tool_id)
                .is_none_or(|v| super::registry::newer(&p.version, v))
            {
                m.insert(p.tool_id.clone(), p.version.clone());
            }
        }
        m
    });
    (specs, tools)
}

/// The marks to seal: the books' as they are, or the sealed ones of a book that cannot be read.
pub fn high_water(store: BorrowedFd<'_>, sealed: Option<&HighWater>) -> HighWater {
    let (specs, tools) = marks(store);
    HighWater {
        specs: specs.unwrap_or_else(|| sealed.map(|h| h.specs.clone()).unwrap_or_default()),
        tools: tools.unwrap_or_else(|| sealed.map(|h| h.tools.clone()).unwrap_or_default()),
    }
}

/// The seal of `manifest` (its own `seal` left out) under `key`, `hmac-sha256:HEX`.
fn seal_of(manifest: &Manifest, key: &[u8; 32]) -> String {
    let mut unsealed = manifest.clone();
    unsealed.seal = None;
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(b"clawfs-system-manifest-seal-v1\n");
    mac.update(&serde_json::to_vec(&unsealed).expect("a manifest serialises"));
    format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()))
}

/// Records the books' marks in the manifest and seals it under `key`. A store without a
/// manifest is refused: what `system/` holds is recorded first, by an admin's decision.
pub fn seal(store: BorrowedFd<'_>, key: &[u8; 32], now: &str) -> Result<(), IntegrityError> {
    let mut manifest = system::load(store)?.ok_or_else(|| {
        IntegrityError::Refused(format!(
            "{} is missing: record system/ first (`clawfs system update --all`)",
            system::MANIFEST
        ))
    })?;
    manifest.book = Some(high_water(store, manifest.book.as_ref()));
    manifest.updated_at = now.to_string();
    manifest.seal = Some(seal_of(&manifest, key));
    system::save(store, &manifest)
}

/// How the manifest's seal and marks differ from what they should be under `key`: not sealed,
/// sealed under another key or changed since, or a book whose newest entries are gone.
pub fn check(
    store: BorrowedFd<'_>,
    manifest: &Manifest,
    key: &[u8; 32],
) -> Result<Vec<Difference>, IntegrityError> {
    let Some(seal) = &manifest.seal else {
        return Ok(vec![Difference::NotSealed]);
    };
    let want = seal_of(manifest, key);
    if !constant_time_eq(seal.as_bytes(), want.as_bytes()) {
        return Ok(vec![Difference::SealBroken]);
    }
    let sealed = manifest.book.clone().unwrap_or_default();
    let (specs, tools) = marks(store);
    let mut out = Vec::new();
    for (id, v) in specs.as_ref().map_or(&BTreeMap::new(), |_| &sealed.specs) {
        match specs.as_ref().and_then(|s| s.get(id)) {
            Some(n) if n >= v => {}
            found => out.push(Difference::RolledBack {
                what: format!(
                    "specs: {id} was at version {v}, now {}",
                    found.map_or("gone".to_string(), |n| format!("at version {n}"))
                ),
            }),
        }
    }
    for (id, v) in tools.as_ref().map_or(&BTreeMap::new(), |_| &sealed.tools) {
        match tools.as_ref().and_then(|t| t.get(id)) {
            Some(n) if !super::registry::newer(v, n) => {}
            found => out.push(Difference::RolledBack {
                what: format!(
                    "tools: {id} was at version {v}, now {}",
                    found.map_or("gone".to_string(), |n| format!("at version {n}"))
                ),
            }),
        }
    }
    Ok(out)
}

/// Whether the seal could be checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealCheck {
    /// Checked with the vault's key (its differences are in the answer).
    Checked,
    /// The vault is set up but locked: the seal and the marks were not checked.
    Locked,
    /// The store has no vault: there is no seal.
    NoVault,
}

/// The vault's key for sealing, or why there is none: `Err` when a set-up vault is locked or
/// unreadable. `config`: how this host opens the vault.
pub fn key_of(
    root: &Path,
    config: clawfs_vault::VaultConfig,
) -> Result<Option<[u8; 32]>, clawfs_vault::VaultError> {
    clawfs_vault::Vault::open(root, config)?.integrity_key()
}

/// [`system::verify`], and with the vault unlocked the seal and the marks too.
pub fn verify(
    root: &Path,
    config: clawfs_vault::VaultConfig,
    fd: BorrowedFd<'_>,
) -> Result<(system::Verification, SealCheck), IntegrityError> {
    let verdict = system::verify(fd)?;
    let key = match key_of(root, config) {
        Ok(Some(key)) => key,
        // A sealed manifest without its vault: the seal cannot hold.
        Ok(None) if system::load(fd)?.is_some_and(|m| m.seal.is_some()) => {
            let mut differences = match verdict {
                system::Verification::Intact => Vec::new(),
                system::Verification::Tampered(d) => d,
            };
            differences.push(Difference::SealBroken);
            return Ok((
                system::Verification::Tampered(differences),
                SealCheck::NoVault,
            ));
        }
        Ok(None) => return Ok((verdict, SealCheck::NoVault)),
        Err(_) => return Ok((verdict, SealCheck::Locked)),
    };
    let Some(manifest) = system::load(fd)? else {
        return Ok((verdict, SealCheck::Checked));
    };
    let mut differences = match verdict {
        system::Verification::Intact => Vec::new(),
        system::Verification::Tampered(d) => d,
    };
    differences.extend(check(fd, &manifest, &key)?);
    let verdict = match differences.is_empty() {
        true => system::Verification::Intact,
        false => system::Verification::Tampered(differences),
    };
    Ok((verdict, SealCheck::Checked))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn store() -> (tempfile::TempDir, std::os::fd::OwnedFd) {
        let dir = tempfile::tempdir().unwrap();
        for d in ["system", "vault", "specs", "tools"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("system/policy.toml"), "x").unwrap();
        let fd = rustix::fs::open(
            dir.path(),
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        system::record_all(fd.as_fd(), "t0").unwrap();
        (dir, fd)
    }

    #[test]
    fn a_manifest_rewritten_without_the_key_or_a_book_rolled_back_is_caught() {
        let (dir, fd) = store();
        let key = [7u8; 32];
        let m = system::load(fd.as_fd()).unwrap().unwrap();
        assert_eq!(
            check(fd.as_fd(), &m, &key).unwrap(),
            vec![Difference::NotSealed]
        );
        // A book whose one document is signed at `version`.
        let book = |version: u32| {
            std::fs::write(
                dir.path().join("specs/signatures.json"),
                format!(r#"{{"version":1,"signatures":[{{"spec_id":"R-1","path":"r.md","sha256":"00","signed_by":"a","signed_at":"t","status":"FROZEN","version":{version}}}]}}"#),
            )
            .unwrap()
        };
        book(2);
        seal(fd.as_fd(), &key, "t1").unwrap();
        let m = system::load(fd.as_fd()).unwrap().unwrap();
        assert_eq!(check(fd.as_fd(), &m, &key).unwrap(), vec![]);
        // Another key, or the manifest changed by hand: broken.
        assert_eq!(
            check(fd.as_fd(), &m, &[8u8; 32]).unwrap(),
            vec![Difference::SealBroken]
        );
        let mut forged = m.clone();
        forged
            .files
            .insert("policy.toml".into(), "sha256:00".into());
        assert_eq!(
            check(fd.as_fd(), &forged, &key).unwrap(),
            vec![Difference::SealBroken]
        );
        // The newest version's entry deleted: rolled back.
        book(1);
        let d = check(fd.as_fd(), &m, &key).unwrap();
        assert!(
            matches!(&d[..], [Difference::RolledBack { what }] if what.contains("R-1")),
            "{d:?}"
        );
    }
}
