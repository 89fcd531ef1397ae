//! How the vault reads its files. They are in the store, which in a store that hosts share
//! every host's root can write: a symlink to this machine's files, a FIFO or an endless file
//! put in place of one must be refused, not followed, waited on or read to the end.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most a vault file other than a secret may be (envelopes, the manifest, the journal).
pub const MAX_RECORD: u64 = 16 << 20;

/// The bytes of the regular file `path`, as [`std::fs::read`] would give them, except that a
/// symlink is refused (ELOOP), so is anything but a regular file (EINVAL), opened without
/// blocking, and so is a file of more than `max` bytes (`InvalidData`).
pub fn read(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    if meta.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Refuses `dir` unless it is a real folder (not a symlink to one) or missing.
pub fn real_dir(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a real folder (a symlink?)", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
