//! What several commands do to a store the same way: read the policy in force, seal a change
//! of what the system manifest covers, take in an input file, say which modes were tightened.

use std::path::Path;

use anyhow::{anyhow, Context};
use clawfs_core::store::{ModeRepair, Store};
use clawfs_integrity::{seal, IntegrityError};

use crate::error::Failure;

/// An integrity refusal as a command failure: a mismatch or a damaged document is tampering
/// (exit 5), anything else an ordinary failure.
pub fn refused(e: IntegrityError) -> Failure {
    match e {
        IntegrityError::Mismatch(m) => Failure::Tampered(m),
        e @ IntegrityError::Json { .. } => Failure::Tampered(e.to_string()),
        e => Failure::Other(anyhow!(e)),
    }
}

/// The policy in force: the one installed in the store, refused if it was changed behind
/// ClawFS's back (as the daemon refuses it).
pub fn installed_policy(store: &Store) -> Result<clawfs_policy::Policy, Failure> {
    clawfs_core::fs::installed_policy(store.root_fd()).map_err(|errors| {
        Failure::Other(anyhow!(errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ")))
    })
}

/// The vault's key that seals the system manifest, asked for before a command changes what the
/// seal covers (`system/`, the signed books): a set-up vault that is locked refuses the change,
/// which could not be sealed. `None`: the store has no vault, nothing is sealed.
pub fn sealing_key(store: &Store) -> Result<Option<[u8; 32]>, Failure> {
    seal::key_of(store.root(), store.vault_config()).map_err(|e| match e {
        clawfs_vault::VaultError::Locked => Failure::Other(anyhow!(
            "the vault is locked: changes to system/, specs/ and tools/ are sealed with its key; unlock it first (`clawfs vault unlock`)"
        )),
        e => Failure::Other(anyhow!("the vault, whose key seals system/: {e}")),
    })
}

/// Seals the system manifest after a change, with the key [`sealing_key`] gave.
pub fn seal_after(store: &Store, key: Option<[u8; 32]>) -> Result<(), Failure> {
    match key {
        Some(key) => {
            seal::seal(store.root_fd(), &key, &clawfs_store::clock::now_rfc3339()).map_err(refused)
        }
        None => Ok(()),
    }
}

/// The largest file the commands take in: the mount serves checked files from a sealed
/// in-memory copy, so anything larger could never be read through it.
const MAX_INPUT: u64 = 32 << 20;

/// The regular file `path`, at most [`MAX_INPUT`] bytes. A FIFO, a device (`/dev/zero`) or a
/// folder is refused at once instead of blocking or filling memory.
pub fn read_input(path: &Path) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let what = || format!("reading {}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(what)?;
    let meta = file.metadata().with_context(what)?;
    if !meta.is_file() {
        return Err(anyhow!("{}: not a regular file", path.display()).into());
    }
    if meta.len() > MAX_INPUT {
        return Err(anyhow!("{}: larger than {} MiB", path.display(), MAX_INPUT >> 20).into());
    }
    let mut out = Vec::new();
    file.take(MAX_INPUT + 1)
        .read_to_end(&mut out)
        .with_context(what)?;
    if out.len() as u64 > MAX_INPUT {
        return Err(anyhow!("{}: larger than {} MiB", path.display(), MAX_INPUT >> 20).into());
    }
    Ok(out)
}

/// Says which store modes were tightened (a store made by an older ClawFS, or by hand).
pub fn report_repair(repair: &ModeRepair) {
    for (path, old, new) in &repair.changed {
        println!(
            "{}: mode {old:04o} -> {new:04o} (the store is reached only through the mount)",
            path.display()
        );
    }
}
