//! Namespace paths of backing nodes, which every policy decision is about: read from the
//! descriptor's `/proc` link, or rebuilt from the links the inode table keeps when the kernel
//! cannot name it (longer than a page), and cached per node.

use super::*;
use crate::fs::git_repos::Anchor;

/// Anchors kept per operation at most: an operation computes a few paths.
const MAX_ANCHORS: usize = 16;

thread_local! {
    /// The paths this thread's operation computed from descriptors, with the inodes they
    /// named ([`Anchor`]): what the git guard's lookups by name must agree with.
    static ANCHORS: std::cell::RefCell<Vec<Anchor>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Notes that `path` names the inode `st` describes, for the running operation.
fn anchor(path: &NsPath, st: &rustix::fs::Stat) {
    ANCHORS.with(|a| {
        let mut a = a.borrow_mut();
        if a.len() >= MAX_ANCHORS {
            a.remove(0);
        }
        a.push(Anchor::new(path, st));
    });
}

/// The paths the running operation computed from descriptors ([`anchor`]).
pub(in crate::fs) fn anchors() -> Vec<Anchor> {
    ANCHORS.with(|a| a.borrow().clone())
}

/// Forgets the anchors: an operation starts or ends.
pub(in crate::fs) fn forget_anchors() {
    ANCHORS.with(|a| a.borrow_mut().clear());
}

impl ClawFs {
    /// The namespace path of an open backing descriptor (`/workspaces/default/notes.md`),
    /// noted as the running operation's ([`anchors`]).
    pub(in crate::fs) fn ns_path(&self, fd: impl AsFd) -> FsResult<NsPath> {
        let path = self.ns_path_unanchored(fd.as_fd())?;
        anchor(&path, &rustix::fs::fstat(fd)?);
        Ok(path)
    }

    fn ns_path_unanchored(&self, fd: BorrowedFd<'_>) -> FsResult<NsPath> {
        let real = match std::fs::read_link(OsStr::from_bytes(proc_fd_path(&fd.as_fd()).as_bytes()))
        {
            Ok(real) => real,
            // Longer than the kernel names (a page): rebuilt from the names it was reached by.
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                return self.ns_path_by_links(fd.as_fd())
            }
            Err(e) => return Err(e.into()),
        };
        let Ok(rel) = real.strip_prefix(self.store.root()) else {
            // Reached by a file handle without its folder (a disconnected name): rebuilt.
            return self.ns_path_by_links(fd.as_fd());
        };
        if let Some(dead) = real.as_os_str().as_bytes().strip_suffix(b" (deleted)") {
            // The name this descriptor was opened through is gone (the kernel marks it so): a
            // file with another name is decided where it was last reached, never under the
            // dead name; if that name went too, ESTALE (an open is then looked up again by
            // the kernel, and reaches the name). A file with no name left is decided where it
            // was.
            return match self.ns_path_by_links(fd.as_fd()) {
                Ok(path) => Ok(path),
                Err(_) if rustix::fs::fstat(fd.as_fd())?.st_nlink == 0 => {
                    let rel = std::path::Path::new(OsStr::from_bytes(dead))
                        .strip_prefix(self.store.root())
                        .map_err(|_| {
                            FsError::Io(std::io::Error::from_raw_os_error(libc::ESTALE))
                        })?;
                    Ok(NsPath::from_components(
                        rel.components().map(|c| c.as_os_str()),
                    )?)
                }
                Err(_) => Err(FsError::Io(std::io::Error::from_raw_os_error(libc::ESTALE))),
            };
        }
        Ok(NsPath::from_components(
            rel.components().map(|c| c.as_os_str()),
        )?)
    }

    /// The namespace path of the node open as `fd`, from the directory and name each node on
    /// the way up was last reached by, each step checked against the store (the name still
    /// leads to that inode), so a stale name is an error, never a wrong path. Never another name
    /// of the inode: an open checks by this that a file still sits where it was reached.
    pub(in crate::fs) fn ns_path_by_links(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> FsResult<NsPath> {
        let stale = || FsError::Io(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        let st = rustix::fs::fstat(fd)?;
        let (mut ino, mut backing_ino) = (self.inodes.mount_ino(st.st_ino), st.st_ino);
        let mut names = Vec::new();
        while ino != crate::inodes::ROOT_INO {
            let node = self.inodes.get(ino).ok_or_else(stale)?;
            let (parent, name) = node.link.as_deref().ok_or_else(stale)?;
            let Some(pnode) = self.inodes.get(*parent) else {
                // A folder the kernel forgot, reached by its handle, has its path.
                let dir = self.parent_fd(*parent)?;
                let child = rustix::fs::statat(&*dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
                if child.st_ino != backing_ino {
                    return Err(stale());
                }
                names.push(name.clone());
                let mut path = self.ns_path(&*dir)?;
                for n in names.iter().rev() {
                    path = path.join(n)?;
                }
                return Ok(path);
            };
            let dir = self.open_path(&pnode)?;
            let child = rustix::fs::statat(&*dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
            if child.st_ino != backing_ino {
                return Err(stale());
            }
            names.push(name.clone());
            backing_ino = rustix::fs::fstat(&*dir)?.st_ino;
            ino = *parent;
        }
        Ok(NsPath::from_components(
            names.iter().rev().map(|n| n.as_os_str()),
        )?)
    }

    /// The namespace path of `node`, reached through `fd` (a descriptor of it) unless cached.
    /// A file of more than one name is never cached: its path is the name the kernel last
    /// reached it by, each step checked ([`Self::ns_path_by_links`]), not whichever name was
    /// cached or its descriptor was opened through.
    pub(in crate::fs) fn node_path(&self, node: &Node, fd: impl AsFd) -> FsResult<NsPath> {
        let st = rustix::fs::fstat(fd.as_fd())?;
        let path = if st.st_nlink > 1 && st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            self.ns_path_by_links(fd.as_fd())
                .or_else(|_| self.ns_path_unanchored(fd.as_fd()))?
        } else if let Some(path) = self.paths.get(&node.handle) {
            path
        } else {
            let generation = self.paths.generation();
            let path = self.ns_path_unanchored(fd.as_fd())?;
            self.paths.insert(generation, &node.handle, &path);
            path
        };
        anchor(&path, &st);
        Ok(path)
    }

    /// Forgets cached namespace paths: something was renamed.
    pub(crate) fn paths_changed(&self) {
        self.paths.clear();
    }

    /// `dir`'s namespace path joined with `name`.
    pub(in crate::fs) fn ns_child(&self, dir: impl AsFd, name: &OsStr) -> FsResult<NsPath> {
        Ok(self.ns_path(dir)?.join(name)?)
    }
}
