//! [`FileOpenGuard`]: a BPF LSM `file_open` program denying opens of listed inodes, where the
//! kernel allows BPF LSM.

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use aya::maps::{HashMap, MapData};
use aya::programs::Lsm;
use aya::{Btf, Ebpf};

use crate::{load_object, program, take_map, Error, FILE_OPEN_LSM_OBJ};

/// Key of the LSM's DENY_INODES map (mirror of `struct inode_key`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InodeKey {
    dev: u64,
    ino: u64,
}

// SAFETY: repr(C), two u64, no padding: any bit pattern is valid.
unsafe impl aya::Pod for InodeKey {}

/// The BPF LSM `file_open` program: opens of denied inodes fail with EPERM once enforced.
///
/// [`FileOpenGuard::new`] creates the map (works wherever eBPF maps do); [`FileOpenGuard::enforce`]
/// loads and attaches the program, which kernels without BPF LSM refuse.
pub struct FileOpenGuard {
    bpf: Ebpf,
    deny: HashMap<MapData, InodeKey, u8>,
    enforced: bool,
}

impl fmt::Debug for FileOpenGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileOpenGuard")
            .field("enforced", &self.enforced)
            .finish()
    }
}

/// A device number (`st_dev`) in the kernel's own encoding, `major << 20 | minor`: what eBPF
/// programs read from `super_block.s_dev`, unlike the userspace `dev_t`.
pub fn kernel_dev(dev: u64) -> u32 {
    (libc::major(dev) << 20) | libc::minor(dev)
}

fn inode_key(path: &Path) -> io::Result<InodeKey> {
    let md = std::fs::metadata(path)?;
    Ok(InodeKey {
        dev: u64::from(kernel_dev(md.dev())),
        ino: md.ino(),
    })
}

impl FileOpenGuard {
    /// Loads the object and creates its map, without loading the program.
    pub fn new() -> Result<FileOpenGuard, Error> {
        let mut bpf = load_object("file_open_lsm", FILE_OPEN_LSM_OBJ)?;
        let deny = take_map(&mut bpf, "DENY_INODES")?;
        Ok(FileOpenGuard {
            bpf,
            deny,
            enforced: false,
        })
    }

    /// Denies opens of the inode `path` resolves to (effective once enforced).
    pub fn deny(&mut self, path: &Path) -> Result<(), Error> {
        let key = inode_key(path).map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        self.deny
            .insert(key, 1u8, 0)
            .map_err(|e| Error::bpf(format!("denying {}", path.display()), &e))
    }

    /// Allows `path`'s inode again.
    pub fn allow(&mut self, path: &Path) -> Result<(), Error> {
        let key = inode_key(path).map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        match self.deny.remove(&key) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(Error::bpf(format!("allowing {}", path.display()), &e)),
        }
    }

    /// Number of denied inodes.
    pub fn denied_count(&self) -> usize {
        self.deny.keys().filter(|k| k.is_ok()).count()
    }

    /// Loads the LSM program against the kernel BTF and attaches it. Refused (EPERM) where BPF LSM
    /// is not enabled.
    pub fn enforce(&mut self) -> Result<(), Error> {
        if self.enforced {
            return Ok(());
        }
        let btf =
            Btf::from_sys_fs().map_err(|e| Error::bpf("reading /sys/kernel/btf/vmlinux", &e))?;
        let p: &mut Lsm = program(&mut self.bpf, "clawfs_file_open")?;
        p.load("file_open", &btf)
            .map_err(|e| Error::bpf("loading the BPF LSM program lsm/file_open", &e))?;
        p.attach()
            .map_err(|e| Error::bpf("attaching the BPF LSM program lsm/file_open", &e))?;
        self.enforced = true;
        Ok(())
    }

    /// Whether [`FileOpenGuard::enforce`] succeeded.
    pub fn enforced(&self) -> bool {
        self.enforced
    }
}
