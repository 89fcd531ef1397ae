//! How the daemon names backing files: kernel file handles (`name_to_handle_at` /
//! `open_by_handle_at`). A handle is a few bytes that stay valid across renames and need no open
//! descriptor, so the daemon can know any number of inodes without pinning an fd per inode
//! (the fd limit here is 20,000) and without building long backing paths (PATH_MAX).

use std::ffi::{CStr, CString, OsStr};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// Largest handle the kernel hands out (`MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;
/// `struct file_handle` header: `handle_bytes: u32`, `handle_type: i32`.
const HEADER_WORDS: usize = 2;

/// A kernel file handle for one backing inode. Stored as `u32` words so the buffer has the
/// alignment `struct file_handle` needs.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BackingHandle {
    words: Box<[u32]>,
}

impl std::fmt::Debug for BackingHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BackingHandle({:08x?})", &self.words[HEADER_WORDS..])
    }
}

impl BackingHandle {
    /// The handle of `name` in `dir` (not following a final symlink), or of `dir` itself when
    /// `name` is empty.
    pub fn at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Self> {
        let cname = cstring(name)?;
        let flags = if name.is_empty() {
            libc::AT_EMPTY_PATH
        } else {
            0
        };
        Self::at_cstr(dir, &cname, flags)
    }

    /// The handle of the file an open descriptor refers to.
    pub fn of_fd(fd: BorrowedFd<'_>) -> io::Result<Self> {
        Self::at_cstr(fd, c"", libc::AT_EMPTY_PATH)
    }

    fn at_cstr(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<Self> {
        let mut words = vec![0u32; HEADER_WORDS + MAX_HANDLE_SZ / 4];
        words[0] = MAX_HANDLE_SZ as u32;
        let mut mount_id: libc::c_int = 0;
        // SAFETY: `words` is a u32-aligned buffer large enough for a `file_handle` header plus
        // MAX_HANDLE_SZ bytes, and its `handle_bytes` field says so; `name` is NUL-terminated.
        let rc = unsafe {
            libc::name_to_handle_at(
                dir.as_raw_fd(),
                name.as_ptr(),
                words.as_mut_ptr().cast::<libc::file_handle>(),
                &mut mount_id,
                flags,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = words[0] as usize;
        words.truncate(HEADER_WORDS + len.div_ceil(4));
        Ok(Self {
            words: words.into_boxed_slice(),
        })
    }

    /// Opens the inode. `mount_fd` is any descriptor on the backing filesystem. Needs
    /// CAP_DAC_READ_SEARCH, so call it before switching to a caller's credentials. `O_NOATIME`
    /// is dropped where it is not allowed (an inode of another owner, without CAP_FOWNER).
    pub fn open(&self, mount_fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
        match self.open_with(mount_fd, flags) {
            Err(e) if flags & libc::O_NOATIME != 0 && e.raw_os_error() == Some(libc::EPERM) => {
                self.open_with(mount_fd, flags & !libc::O_NOATIME)
            }
            other => other,
        }
    }

    fn open_with(&self, mount_fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
        // SAFETY: the buffer is a valid `file_handle` produced by `name_to_handle_at`; the
        // kernel only reads it, so the const-to-mut cast is sound.
        let fd = unsafe {
            libc::open_by_handle_at(
                mount_fd.as_raw_fd(),
                self.words.as_ptr().cast_mut().cast::<libc::file_handle>(),
                flags | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Opens the inode as an `O_PATH` descriptor: enough for `*at` calls, stat and xattrs.
    pub fn open_path(&self, mount_fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
        self.open(mount_fd, libc::O_PATH | libc::O_NOFOLLOW)
    }

    /// The handle as bytes, to be saved ([`Self::from_bytes`] reads them back).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    /// A handle saved by [`Self::to_bytes`]; `None` unless the bytes are the shape of one (a
    /// damaged file gives no handle; a wrong one only fails to open).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if !bytes.len().is_multiple_of(4) {
            return None;
        }
        let words: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let len = *words.first()? as usize;
        (words.len() > HEADER_WORDS
            && len <= MAX_HANDLE_SZ
            && words.len() == HEADER_WORDS + len.div_ceil(4))
        .then(|| Self {
            words: words.into_boxed_slice(),
        })
    }

    /// A generation number for the kernel: distinct for two files that reuse one inode number.
    pub fn generation(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.words.hash(&mut h);
        h.finish()
    }
}

/// The `/proc/self/fd/N` path of a descriptor: lets path-only calls (chmod, utimes, xattrs) act
/// on an `O_PATH` descriptor with the *current* credentials.
pub fn proc_fd_path(fd: &impl AsFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())).expect("no NUL in a number")
}

/// A `CString` from a name the kernel handed us (never contains NUL, but check anyway).
pub fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn handle_survives_rename_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"hello").unwrap();
        let root = std::fs::File::open(dir.path()).unwrap();
        let h = BackingHandle::at(root.as_fd(), OsStr::new("a")).unwrap();
        std::fs::rename(dir.path().join("a"), dir.path().join("b")).unwrap();
        match h.open(root.as_fd(), libc::O_RDONLY) {
            Ok(fd) => {
                let s =
                    std::fs::read_to_string(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
                assert_eq!(s, "hello");
            }
            // Without CAP_DAC_READ_SEARCH (tests not run as root) the kernel refuses.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
        }
        let h2 = BackingHandle::at(root.as_fd(), OsStr::new("b")).unwrap();
        assert_eq!(h, h2);
        assert_eq!(h.generation(), h2.generation());
    }
}
