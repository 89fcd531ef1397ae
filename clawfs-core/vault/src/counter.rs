//! Rollback detection for TPM-sealed vaults: the manifest bound to a TPM NV counter.
//!
//! The manifest's HMAC already refuses one secret put back at an older version; what it cannot
//! see is the *whole* vault put back to an earlier copy (old manifest and old secret files, all
//! consistently MACed and encrypted). A TPM NV counter can: it only ever goes up and lives outside
//! the vault's files.
//!
//! - `init --sealer tpm` defines a counter (`tpm::nv_counter_define`) and records its NV index
//!   and value in the manifest (`Manifest::counter`), under the manifest's HMAC.
//! - Every change of the manifest (`put`, `rm`, `rotate`, `rebind-counter`) first checks the
//!   current manifest against the counter ([`Vault::check_counter`]), writes the new manifest
//!   carrying counter value + 1, and only then increments the counter
//!   ([`Vault::advance_counter`]).
//! - `unlock` checks before the master key enters the keyring. Manifest value = counter: fine.
//!   Manifest value = counter + 1: a crash between writing the manifest and incrementing; the
//!   counter is incremented to catch up. Manifest value < counter: `RolledBack`. Manifest value
//!   > counter + 1: `RollbackCounter` (the counter cannot vouch for this manifest).
//! - While unlocked, the last value seen is kept in the vault's keyring as a floor
//!   ([`FLOOR`]); `get` refuses a manifest below it, so a vault rolled back under a running
//!   daemon is refused too, without a TPM round trip per read.
//!
//! A crash never loses a write: the counter is behind the newest manifest by at most one, which
//! the next check accepts and repairs. The price is that window: until the increment is done, the
//! copy from just before the write still passes. Non-TPM vaults have no counter (`None`), and
//! nothing here changes them.

use super::error::VaultError;
use super::fault;
use super::keyring::Keyring;
use super::secret::{Manifest, ManifestCounter};
use super::{Envelope, Vault};

/// Keyring entry holding the lowest manifest counter value `get` accepts while the vault is
/// unlocked (8 bytes, big-endian): the TPM counter's value at the last unlock or write.
pub(super) const FLOOR: &str = "clawfs-counter-floor";

/// A manifest's counter after it was checked against the TPM.
#[derive(Debug, Clone)]
pub(super) struct Bound {
    tcti: String,
    /// The counter's NV index handle.
    pub index: u32,
    /// The counter's value, equal to the checked manifest's.
    pub value: u64,
}

impl Bound {
    pub(super) fn new(tcti: String, index: u32, value: u64) -> Bound {
        Bound { tcti, index, value }
    }

    /// What a manifest at the counter's current value records.
    pub(super) fn current(&self) -> ManifestCounter {
        ManifestCounter {
            nv_index: self.index,
            value: self.value,
        }
    }

    /// Best effort: undefines the counter (an `init` that failed after defining it).
    pub(super) fn undefine(&self) {
        #[cfg(feature = "tpm")]
        if let Err(e) = super::tpm::nv_undefine(&self.tcti, self.index) {
            tracing::warn!(
                nv_index = self.index,
                "vault: could not undefine the NV counter: {e}"
            );
        }
    }

    /// What the next manifest records: this counter at its value + 1.
    pub(super) fn next(&self) -> ManifestCounter {
        ManifestCounter {
            nv_index: self.index,
            value: self.value + 1,
        }
    }
}

#[cfg(feature = "tpm")]
pub(super) use super::tpm::{nv_counter_define, nv_counter_increment, nv_counter_read};

#[cfg(not(feature = "tpm"))]
fn no_tpm() -> VaultError {
    VaultError::NoTpm("this build has no TPM support (feature `tpm`)".into())
}
#[cfg(not(feature = "tpm"))]
pub(super) fn nv_counter_define(_: &str) -> Result<(u32, u64), VaultError> {
    Err(no_tpm())
}
#[cfg(not(feature = "tpm"))]
pub(super) fn nv_counter_read(_: &str, _: u32) -> Result<u64, VaultError> {
    Err(no_tpm())
}
#[cfg(not(feature = "tpm"))]
pub(super) fn nv_counter_increment(_: &str, _: u32) -> Result<u64, VaultError> {
    Err(no_tpm())
}

/// For `get`: refuses a (verified) manifest whose counter value is below the keyring's floor.
pub(super) fn check_floor(manifest: &Manifest, floor: Option<u64>) -> Result<(), VaultError> {
    match (floor, manifest.counter) {
        (None, _) => Ok(()),
        (Some(f), Some(c)) if c.value >= f => Ok(()),
        (Some(f), c) => Err(VaultError::RolledBack {
            manifest: c.map_or(0, |c| c.value),
            tpm: f,
        }),
    }
}

impl Vault {
    /// Checks a verified `manifest` against its TPM counter (nothing to check without one):
    /// refuses a rollback, catches up a counter one increment behind (a crash between writing
    /// the manifest and incrementing). With `ring`, records the value there as the readers'
    /// floor. Caller holds the write lock.
    pub(super) fn check_counter(
        &self,
        env: &Envelope,
        manifest: &Manifest,
        ring: Option<&Keyring>,
    ) -> Result<Option<Bound>, VaultError> {
        let Some(mc) = manifest.counter else {
            return Ok(None);
        };
        let tcti = self.tpm_tcti(Some(env))?;
        let tpm = nv_counter_read(&tcti, mc.nv_index)?;
        let value = if mc.value < tpm {
            return Err(VaultError::RolledBack {
                manifest: mc.value,
                tpm,
            });
        } else if mc.value == tpm {
            tpm
        } else if mc.value - tpm == 1 {
            tracing::info!(
                nv_index = mc.nv_index,
                value = mc.value,
                "vault: the TPM counter was one behind the manifest (interrupted write); catching up"
            );
            let now = nv_counter_increment(&tcti, mc.nv_index)?;
            if now != mc.value {
                return Err(VaultError::RolledBack {
                    manifest: mc.value,
                    tpm: now,
                });
            }
            now
        } else {
            return Err(VaultError::RollbackCounter {
                index: mc.nv_index,
                reason: format!(
                    "is at {tpm}, behind the manifest ({}) by more than one increment: not this \
                     vault's counter, or the TPM's NV memory was reset",
                    mc.value
                ),
            });
        };
        if let Some(r) = ring {
            self.set_counter_floor(r, value)?;
        }
        Ok(Some(Bound {
            tcti,
            index: mc.nv_index,
            value,
        }))
    }

    /// Once a manifest carrying `bound.next()` is durable: increments the counter to that value
    /// (and, with `ring`, raises the readers' floor to it). A durable step for
    /// `CLAWFS_VAULT_FAULT_AFTER`: crashing here leaves the counter one behind the manifest.
    pub(super) fn advance_counter(
        &self,
        bound: &mut Bound,
        ring: Option<&Keyring>,
    ) -> Result<(), VaultError> {
        fault::step();
        let now = nv_counter_increment(&bound.tcti, bound.index)?;
        if now != bound.value + 1 {
            // Someone else incremented the counter meanwhile: this manifest is now behind it.
            return Err(VaultError::RolledBack {
                manifest: bound.value + 1,
                tpm: now,
            });
        }
        bound.value = now;
        if let Some(r) = ring {
            self.set_counter_floor(r, now)?;
        }
        Ok(())
    }

    /// Defines a new counter for this vault: `(index, value)`.
    pub(super) fn define_counter(&self, env: Option<&Envelope>) -> Result<Bound, VaultError> {
        let tcti = self.tpm_tcti(env)?;
        let (index, value) = nv_counter_define(&tcti)?;
        tracing::info!(
            nv_index = index,
            value,
            "vault: TPM rollback counter defined"
        );
        Ok(Bound { tcti, index, value })
    }

    pub(super) fn set_counter_floor(&self, ring: &Keyring, value: u64) -> Result<(), VaultError> {
        ring.put(FLOOR, &value.to_be_bytes(), self.config.unlock_timeout)
            .map(|_| ())
    }

    /// The readers' floor in `ring`, if one was set.
    pub(super) fn counter_floor(&self, ring: &Keyring) -> Result<Option<u64>, VaultError> {
        Ok(ring
            .get(FLOOR)?
            .and_then(|(_, b)| <[u8; 8]>::try_from(&b[..]).ok())
            .map(u64::from_be_bytes))
    }
}
