//! `VaultError`: every way a vault operation can fail, each a distinct variant so the CLI, the FUSE
//! adapter (errno) and tests can tell them apart.

use std::io;
use std::path::PathBuf;

/// A failed vault operation.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// `vault/master-key.enc` does not exist.
    #[error("the vault is not initialised (run `clawfs vault init`)")]
    NotInitialized,
    /// `init` on a vault that already has a master key.
    #[error("the vault is already initialised ({0} exists)")]
    AlreadyInitialized(PathBuf),
    /// The master key is not in the kernel keyring (never unlocked, locked, or timed out).
    #[error("the vault is locked (run `clawfs vault unlock`)")]
    Locked,
    /// The passphrase does not open `master-key.enc`.
    #[error("wrong passphrase")]
    WrongPassphrase,
    /// The sealer needs a passphrase and none was given.
    #[error(
        "this vault is sealed with a passphrase; give it (CLAWFS_VAULT_PASSPHRASE or the prompt)"
    )]
    PassphraseRequired,
    /// A vault file fails authentication or does not parse: it was modified, truncated, moved
    /// from another name, or is an older version put back.
    #[error("{}: tampered or corrupt: {reason}", file.display())]
    Tampered {
        /// The file that failed.
        file: PathBuf,
        /// What did not match.
        reason: String,
    },
    /// No secret of that name.
    #[error("no secret named {0:?}")]
    NotFound(String),
    /// A secret name outside `[a-z0-9-]+` (≤ 64 bytes, no leading or trailing hyphen).
    #[error("bad secret name {name:?}: {reason}")]
    BadName {
        /// The name given.
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// No TPM is reachable (no TCTI configured, no `/dev/tpmrm0`), or the TCTI cannot be opened.
    #[error("no TPM: {0}")]
    NoTpm(String),
    /// The TPM refused to unseal because the PCR values differ from those at sealing time.
    #[error("the TPM refused to unseal the master key: PCR values differ from sealing time (policy check failed)")]
    PcrMismatch,
    /// Any other TPM failure.
    #[error("TPM: {0}")]
    Tpm(String),
    /// The manifest is older than the vault's TPM NV counter: the whole vault (manifest and
    /// secrets) was put back to an earlier copy. Detected only for TPM-sealed vaults.
    #[error(
        "the vault was rolled back: its manifest is at counter value {manifest}, the TPM counter at {tpm} \
         (put back the latest copy, or accept this state with `clawfs vault rebind-counter`)"
    )]
    RolledBack {
        /// The counter value the manifest records.
        manifest: u64,
        /// The TPM counter's value.
        tpm: u64,
    },
    /// The TPM NV counter named by the manifest cannot vouch for it: missing, not a counter, or
    /// behind the manifest by more than the one increment a crash can leave undone.
    #[error(
        "TPM rollback counter {index:#010x}: {reason} (if the vault's state is known good, \
         `clawfs vault rebind-counter` binds it to a new counter)"
    )]
    RollbackCounter {
        /// The NV index handle recorded in the manifest.
        index: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// The host key file is missing, unreadable, has the wrong size or mode, or is another key
    /// than the one that wrapped the master key.
    #[error("host key {}: {reason}", path.display())]
    HostKey {
        /// The host key file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Not a host name.
    #[error("{0:?} is not a host name: use 1 to 63 of a-z, 0-9 and '-', not starting with '-'")]
    BadHost(String),
    /// A host's public key cannot be used (missing, for another vault, damaged).
    #[error("the vault key of host {host}: {reason}")]
    BadHostKey {
        /// The host.
        host: String,
        /// What is wrong with it.
        reason: String,
    },
    /// This host cannot unseal the master key: it has no grant, or a grant of an older key.
    #[error("host {host} has no grant of the vault's key: {reason}")]
    NoGrant {
        /// The host.
        host: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A kernel keyring call failed.
    #[error("kernel keyring: {0}")]
    Keyring(String),
    /// A staged secret did not decrypt to the original value during rotation (nothing was switched).
    #[error("rotation aborted: {0}")]
    Rotation(String),
    /// A file system call failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl VaultError {
    pub(crate) fn tampered(file: impl Into<PathBuf>, reason: impl Into<String>) -> VaultError {
        VaultError::Tampered {
            file: file.into(),
            reason: reason.into(),
        }
    }
}

/// `map_err` helper: an I/O error on `path`.
pub(crate) fn io_at(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> VaultError {
    let path = path.into();
    move |source| VaultError::Io { path, source }
}

/// The errno a caller of the mount gets (reading a secret): every variant matched, so a new one
/// picks its errno on purpose.
impl clawfs_store::ToErrno for VaultError {
    fn errno(&self) -> i32 {
        use VaultError as V;
        match self {
            V::NotFound(_) => libc::ENOENT,
            // The key is not available to the daemon: the vault must be unlocked (or initialised).
            V::Locked | V::NotInitialized | V::PassphraseRequired | V::WrongPassphrase => {
                libc::ENOKEY
            }
            V::BadName { .. } => libc::EINVAL,
            V::AlreadyInitialized(_) => libc::EEXIST,
            // The key cannot be unsealed here (no TPM, a policy or counter that does not match, a
            // host key that does not open it): the key has been rejected.
            V::NoTpm(_)
            | V::PcrMismatch
            | V::RolledBack { .. }
            | V::RollbackCounter { .. }
            | V::HostKey { .. }
            | V::BadHostKey { .. }
            | V::NoGrant { .. } => libc::EKEYREJECTED,
            V::BadHost(_) => libc::EINVAL,
            // Data that fails authentication or an interrupted rotation: the content is bad.
            V::Tampered { .. } | V::Rotation(_) => libc::EBADMSG,
            V::Tpm(_) | V::Keyring(_) => libc::EIO,
            V::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}
