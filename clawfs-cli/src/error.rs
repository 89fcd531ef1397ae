//! CLI failures and their exit codes.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | any other error |
//! | 2 | bad command line (from clap) |
//! | 3 | mount point problem: missing, not a directory, not empty, already mounted, stale, busy, not a ClawFS mount, a store not mounted or mounted elsewhere than `--mount` |
//! | 4 | store problem: not initialised, newer format, already served, unreadable |
//! | 5 | integrity: system/ differs from its manifest, a document of specs/ fails verification |

use clawfs_core::store::StoreError;

/// A failed command: a one-line message and an exit code.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Mount point problems (exit 3).
    #[error("{0}")]
    Mountpoint(String),
    /// The mount a command works through is missing or serves another store (exit 3).
    #[error(transparent)]
    Mount(#[from] crate::mounts::MountError),
    /// Store problems (exit 4).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// What must not change did (exit 5).
    #[error("{0}")]
    Tampered(String),
    /// Anything else (exit 1), with every cause: "opening the audit trail: …: Permission denied".
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

impl Failure {
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Mountpoint(_) => 3,
            Failure::Mount(crate::mounts::MountError::Mountinfo(_)) => 1,
            Failure::Mount(_) => 3,
            Failure::Store(StoreError::Io { .. }) => 1,
            Failure::Store(_) => 4,
            Failure::Tampered(_) => 5,
            Failure::Other(_) => 1,
        }
    }
}

/// A mount point failure with a formatted message.
pub fn mountpoint(msg: impl Into<String>) -> Failure {
    Failure::Mountpoint(msg.into())
}
