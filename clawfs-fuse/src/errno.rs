//! Core errors as FUSE errnos: the mapping itself is `ToErrno for FsError` in clawfs-core (the
//! audit trail records the same errno the caller gets).

use clawfs_core::FsError;
use clawfs_store::ToErrno;
use fuser::Errno;

/// The errno the kernel returns to the caller for `e` (chosen by its `ToErrno`).
pub fn to_errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

/// Whether `e` is a ClawFS rule refusing the call (logged with its reason), as opposed to the
/// backing filesystem's own answer (logged at debug level).
pub fn is_refusal(e: &FsError) -> bool {
    !matches!(e, FsError::Io(_))
}
