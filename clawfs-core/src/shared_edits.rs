//! Hash-checked edits in a store that hosts share. On one host the agent tools' lock table
//! serializes edits of a file; other hosts' daemons are out of its reach, and their renames
//! reach this host's view of the volume only when its caches expire. So each edit of a file
//! also holds an exclusive `flock` (which JuiceFS holds across clients) on the file's lock,
//! `.clawfs/edit-locks/<workspace>/<sha256 of its path>`, which records the sha256 the last
//! edit left: the next editor, on any host, waits until its view shows that content before it
//! checks the caller's hash (`clawfs_agent_tools::SharedEdits`).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use clawfs_agent_tools::{SharedEdit, SharedEdits};
use clawfs_store::layout::PRIVATE_DIR;
use rustix::fs::{FlockOperation, Mode, OFlags};
use sha2::{Digest, Sha256};

/// The folder of the edit locks, in the private area.
pub const EDIT_LOCKS: &str = "edit-locks";
/// How long an edit waits for another host's edit of the same file before it gives up.
const WAIT: Duration = Duration::from_secs(30);

/// The edit locks of one workspace.
pub struct HostEdits {
    /// The store root.
    root: OwnedFd,
    workspace: String,
}

impl HostEdits {
    /// The locks of `workspace` in the store whose root is `root`.
    pub fn new(root: impl AsFd, workspace: &str) -> io::Result<HostEdits> {
        Ok(HostEdits {
            root: rustix::io::fcntl_dupfd_cloexec(root, 0)?,
            workspace: workspace.to_string(),
        })
    }
}

impl SharedEdits for HostEdits {
    fn lock(&self, rel: &str) -> io::Result<Box<dyn SharedEdit>> {
        let dir = Path::new(PRIVATE_DIR)
            .join(EDIT_LOCKS)
            .join(&self.workspace);
        let dir = clawfs_store::beneath::create_dir_all(self.root.as_fd(), &dir, 0o700, None)?;
        let name = hex::encode(Sha256::digest(rel.as_bytes()));
        let fd = rustix::fs::openat(
            &dir,
            name.as_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        if !rustix::fs::fstat(&fd).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        }) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let started = Instant::now();
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < WAIT => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "another host has been editing it for 30 s; try again",
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Read through a descriptor opened now that the lock is held: the one opened before
        // may show the file as it was then (the network file system refreshes at open), and
        // the hash another host recorded meanwhile would go unseen.
        let fresh = rustix::fs::openat(
            &dir,
            name.as_str(),
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        if rustix::fs::fstat(&fresh)?.st_ino != rustix::fs::fstat(&fd)?.st_ino {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        let mut file = File::from(fresh);
        let mut text = String::new();
        let last = match (&file).take(64).read_to_string(&mut text) {
            Ok(64) if text.bytes().all(|b| b.is_ascii_hexdigit()) => Some(text),
            _ => None,
        };
        file.seek(SeekFrom::Start(0))?;
        Ok(Box::new(HeldEdit {
            file,
            _locked: File::from(fd),
            last,
        }))
    }
}

/// One file's lock, held until dropped (closing the locked descriptor lets the `flock` go).
struct HeldEdit {
    /// Read and written: opened after the lock was taken.
    file: File,
    /// The descriptor the `flock` is on.
    _locked: File,
    last: Option<String>,
}

impl SharedEdit for HeldEdit {
    fn last_sha256(&self) -> Option<String> {
        self.last.clone()
    }

    fn record(&mut self, sha256: &str) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(sha256.as_bytes())?;
        self.file.set_len(sha256.len() as u64)?;
        // On the volume before the lock is let go, for the next editor's open.
        self.file.sync_data()
    }
}
