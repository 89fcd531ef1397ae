//! Errors of the filesystem model. The FUSE adapter maps each variant to an errno in one place
//! (`clawfs-fuse/src/errno.rs`), so every refusal picks its errno on purpose.

use std::io;

pub use clawfs_store::ToErrno;

use clawfs_store::area::Area;

/// Why a filesystem could not be opened over a store.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The store root could not be reached by handle.
    #[error("the store root: {0}")]
    Io(#[from] io::Error),
    /// The policy in force does not load.
    #[error(transparent)]
    Policy(#[from] clawfs_policy::PolicyLoadError),
}

impl From<rustix::io::Errno> for OpenError {
    fn from(e: rustix::io::Errno) -> Self {
        OpenError::Io(e.into())
    }
}

/// Result of a filesystem-model operation.
pub type FsResult<T> = Result<T, FsError>;

/// Why a filesystem operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The backing store refused or failed; carries the OS error unchanged.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A mutating call on `system/` or `specs/`.
    #[error("{0} is read-only")]
    ReadOnly(Area),
    /// A mutating call on a workspace's snapshots.
    #[error("snapshots are read-only through the mount (make, restore and remove them with `clawfs snapshot`)")]
    SnapshotReadOnly,
    /// The mount root holds exactly the six areas; nothing is added, removed or changed there.
    #[error("the namespace root is fixed")]
    FixedRoot,
    /// A name that ClawFS validates (workspace, agent, snapshot) breaks the naming rules.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The refused name, lossily decoded.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A node ClawFS manages (workspace metadata, snapshots dir, area roots) cannot be removed,
    /// renamed or replaced.
    #[error("{0} is managed by ClawFS")]
    Managed(String),
    /// Renames and hard links stay inside one area.
    #[error("cannot move or link from {from} to {to}")]
    CrossArea {
        /// Source area.
        from: Area,
        /// Destination area.
        to: Area,
    },
    /// Only directories may be created directly under `workspaces/` and `agents/`.
    #[error("only directories can be created in {0}")]
    NotADirectoryArea(Area),
    /// The kernel named an inode the daemon does not know (forgotten or never looked up).
    #[error("unknown inode {0}")]
    UnknownInode(u64),
    /// The kernel named a file handle the daemon does not know.
    #[error("unknown file handle {0}")]
    UnknownHandle(u64),
    /// An extended attribute outside the `user.` namespace.
    #[error("extended attribute {0:?} is not in the user namespace")]
    XattrNamespace(String),
    /// A `user.clawfs.*` attribute with a bad name, value or target.
    #[error("invalid ClawFS attribute {name}: {reason}")]
    InvalidXattr {
        /// The attribute name.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// The policy refuses the call for this caller.
    #[error("{0}")]
    Denied(clawfs_policy::Denial),
    /// A frozen document whose SHA-256 does not match its signature, or that is unsigned.
    #[error("{0}")]
    Tampered(clawfs_integrity::IntegrityError),
    /// A call ClawFS does not serve on this node, decided by ClawFS itself (not the backing
    /// filesystem's answer): writing a generated read-only file, changing generated nodes, a
    /// second way of serving one inode. Logged as a refusal, with its reason.
    #[error("{why}")]
    Refused {
        /// The errno the caller gets.
        errno: i32,
        /// Why, for the log and the audit trail.
        why: &'static str,
    },
    /// The vault refused or failed (locked, no such secret, tampered, TPM…), with its error.
    #[error(transparent)]
    Vault(#[from] clawfs_vault::VaultError),
    /// A backing name that no namespace path can hold.
    #[error(transparent)]
    Path(#[from] clawfs_policy::NsPathError),
    /// The search index failed (serving `workspace.db`).
    #[error(transparent)]
    Search(#[from] clawfs_search::SearchError),
    /// A ClawFS-managed JSON file in the store could not be read or written.
    #[error("{path}: {reason}")]
    Corrupt {
        /// Store-relative path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl FsError {
    /// Whether the store said the name does not exist (and nothing else refused it).
    pub fn is_missing(&self) -> bool {
        matches!(self, FsError::Io(e) if e.raw_os_error() == Some(libc::ENOENT))
    }

    /// Whether ClawFS refused the call by one of its own fixed rules (not the policy, which
    /// records its refusals as it decides, nor the store): the refusals recorded with the rule
    /// `NAMESPACE`.
    pub fn is_rule_refusal(&self) -> bool {
        matches!(
            self,
            FsError::ReadOnly(_)
                | FsError::SnapshotReadOnly
                | FsError::FixedRoot
                | FsError::InvalidName { .. }
                | FsError::Managed(_)
                | FsError::CrossArea { .. }
                | FsError::NotADirectoryArea(_)
                | FsError::XattrNamespace(_)
                | FsError::InvalidXattr { .. }
                | FsError::Refused { .. }
        )
    }

    /// Wraps the last OS error.
    pub fn last_os_error() -> Self {
        FsError::Io(io::Error::last_os_error())
    }
}

/// The errno the caller gets: every refusal picks EACCES, EPERM, EROFS, … on purpose (every
/// variant matched, no fallback); the errors of the crates below pick their own.
impl ToErrno for FsError {
    fn errno(&self) -> i32 {
        match self {
            FsError::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
            FsError::ReadOnly(_) | FsError::SnapshotReadOnly => libc::EROFS,
            FsError::FixedRoot => libc::EPERM,
            FsError::InvalidName { .. } => libc::EINVAL,
            FsError::Managed(_) => libc::EPERM,
            FsError::CrossArea { .. } => libc::EXDEV,
            FsError::NotADirectoryArea(_) => libc::EPERM,
            FsError::UnknownInode(_) => libc::ESTALE,
            FsError::UnknownHandle(_) => libc::EBADF,
            FsError::XattrNamespace(_) => libc::EOPNOTSUPP,
            FsError::InvalidXattr { .. } => libc::EINVAL,
            FsError::Corrupt { .. } => libc::EIO,
            // The document exists but must not be served: an I/O error, as for a bad block.
            FsError::Tampered(_) => libc::EIO,
            FsError::Denied(d) => d.errno(),
            FsError::Refused { errno, .. } => *errno,
            FsError::Vault(e) => e.errno(),
            // A name the backing store holds but the namespace cannot: an I/O error to the caller.
            FsError::Path(_) => libc::EIO,
            FsError::Search(e) => e.errno(),
        }
    }
}

impl From<clawfs_store::NameError> for FsError {
    fn from(e: clawfs_store::NameError) -> Self {
        FsError::InvalidName {
            name: e.name,
            reason: e.reason,
        }
    }
}

impl From<rustix::io::Errno> for FsError {
    fn from(e: rustix::io::Errno) -> Self {
        FsError::Io(e.into())
    }
}
