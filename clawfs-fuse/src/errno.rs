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

/// The name of errno `code` for metrics labels: the errnos a filesystem answers, else `other`
/// (a bounded set).
pub fn name(code: i32) -> &'static str {
    match code {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EDQUOT => "EDQUOT",
        _ => "other",
    }
}
