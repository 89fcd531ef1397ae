//! The one place where core errors become errnos. Every variant is matched explicitly, so each
//! refusal picks EACCES, EPERM, EROFS, … on purpose.

use clawfs_core::FsError;
use fuser::Errno;

/// The errno the kernel returns to the caller for `e`.
pub fn to_errno(e: &FsError) -> Errno {
    let code = match e {
        FsError::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        FsError::ReadOnly(_) => libc::EROFS,
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
        FsError::Denied(d) => clawfs_core::policy::errno_of(d.kind),
    };
    Errno::from_i32(code)
}

/// Whether `e` is a ClawFS rule refusing the call (logged with its reason), as opposed to the
/// backing filesystem's own answer (logged at debug level).
pub fn is_refusal(e: &FsError) -> bool {
    !matches!(e, FsError::Io(_))
}
