//! Who owns the git repositories around a path: what the git guard asks the store before it
//! refuses (see [`clawfs_policy::GitRepos`]). git itself trusts a repository only when whoever
//! runs it owns the `.git` and the worktree (`safe.directory`), so a repository an agent owns is
//! its own business, and the guard keeps only repositories someone else owns.
//!
//! Folders are reached by descriptor beneath the store, one name at a time, never following a
//! symlink; whatever cannot be read counts as someone else's (the guard applies).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, OFlags};

use clawfs_policy::NsPath;

/// The areas where agents make repositories, and how deep their own top folders sit
/// (`workspaces/W`, `agents/A`): repositories are looked for from there down.
const REPO_AREAS: &[&str] = &["workspaces", "agents"];
const AREA_TOP_DEPTH: usize = 2;
const GIT_DIR: &str = ".git";
/// What makes a folder a git dir to git, under any name (with `objects/` and `refs/`, which an
/// agent could remove where it may write; the guard keeps `HEAD`).
const GIT_HEAD: &str = "HEAD";

/// The repositories around paths, as the caller with fs uid `uid` sees them.
pub(super) struct Repos<'a> {
    store: BorrowedFd<'a>,
    uid: u32,
    anchors: Vec<Anchor>,
}

/// A path the operation computed from a descriptor, and the inode it names: the folders
/// looked up by name for the path must lead to that inode, or the names moved in between (a
/// rename or an exchange racing the operation) and what they show is not where it acts.
#[derive(Clone, Debug)]
pub(crate) struct Anchor {
    path: NsPath,
    node: (u64, u64),
}

impl Anchor {
    /// `path`, computed for the inode `st` describes.
    pub(crate) fn new(path: &NsPath, st: &rustix::fs::Stat) -> Self {
        Self {
            path: path.clone(),
            node: (st.st_dev, st.st_ino),
        }
    }
}

impl<'a> Repos<'a> {
    pub(super) fn new(store: BorrowedFd<'a>, uid: u32) -> Self {
        Self {
            store,
            uid,
            anchors: Vec::new(),
        }
    }

    /// The same, checked against the paths the operation computed from its descriptors.
    pub(super) fn anchored(mut self, anchors: Vec<Anchor>) -> Self {
        self.anchors = anchors;
        self
    }

    /// Whether the caller owns what `st` describes: root never counts, since root's
    /// repositories are the ones the guard exists for.
    fn owns(&self, st: &rustix::fs::Stat) -> bool {
        self.uid != 0 && st.st_uid == self.uid
    }

    /// The folders holding `path`, from its workspace or agent directory down to its parent,
    /// each opened `O_PATH`; `None` if `path` is not in such a directory, a folder cannot be
    /// opened (a symlink, a race with a rename), or the names lead elsewhere than an anchor.
    fn folders(&self, path: &NsPath) -> Option<Vec<OwnedFd>> {
        let parts: Vec<&str> = path.components().collect();
        if parts.len() <= AREA_TOP_DEPTH || !REPO_AREAS.contains(&parts[0]) {
            return None;
        }
        let top: std::path::PathBuf = parts[..AREA_TOP_DEPTH].iter().collect();
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        let mut out = vec![clawfs_store::beneath::open(self.store, &top, flags, 0).ok()?];
        for name in &parts[AREA_TOP_DEPTH..parts.len() - 1] {
            let next =
                clawfs_store::beneath::open(out.last()?.as_fd(), Path::new(name), flags, 0).ok()?;
            out.push(next);
        }
        self.at_anchors(&parts, &out).then_some(out)
    }

    /// Whether the folders opened by name for `parts` (and the last part itself, if an anchor
    /// names it) are the inodes the anchors on the way say.
    fn at_anchors(&self, parts: &[&str], folders: &[OwnedFd]) -> bool {
        self.anchors.iter().all(|a| {
            let depth = a.path.components().count();
            if depth < AREA_TOP_DEPTH
                || depth > parts.len()
                || !a.path.components().zip(parts).all(|(x, y)| x == *y)
            {
                return true;
            }
            let node = match folders.get(depth - AREA_TOP_DEPTH) {
                Some(dir) => rustix::fs::fstat(dir),
                None => rustix::fs::statat(
                    folders.last().map(AsFd::as_fd).unwrap_or(self.store),
                    parts[depth - 1],
                    AtFlags::SYMLINK_NOFOLLOW,
                ),
            };
            node.is_ok_and(|st| (st.st_dev, st.st_ino) == a.node)
        })
    }
}

impl Repos<'_> {
    /// The owner of the outermost `.git` in the folders holding `path`: whose git recurses
    /// into everything below (none where it cannot be looked at).
    pub(super) fn outermost_git_owner(&self, path: &NsPath) -> Option<u32> {
        self.folders(path)?
            .iter()
            .find_map(|dir| git_in(dir).ok().flatten())
            .map(|st| st.st_uid)
    }
}

/// `.git` in `dir`, not followed if a symlink: `Ok(None)` if there is none.
fn git_in(dir: impl AsFd) -> rustix::io::Result<Option<rustix::fs::Stat>> {
    entry_in(dir, GIT_DIR)
}

/// `name` in `dir`, not followed if a symlink: `Ok(None)` if there is none.
fn entry_in(dir: impl AsFd, name: &str) -> rustix::io::Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the folder `dir` is a git dir by what it holds, whatever its name: a `HEAD`
/// (what cannot be looked at counts as one).
pub(super) fn is_git_dir(dir: impl AsFd) -> bool {
    !matches!(entry_in(dir, GIT_HEAD), Ok(None))
}

impl clawfs_policy::GitRepos for Repos<'_> {
    fn foreign_git_above(&self, path: &NsPath) -> bool {
        let Some(folders) = self.folders(path) else {
            return true;
        };
        // A `.git` someone else owns, or a folder of theirs git uses as a git dir.
        folders.iter().any(|dir| {
            let foreign =
                |st: rustix::io::Result<rustix::fs::Stat>| st.map_or(true, |st| !self.owns(&st));
            let dot_git = match git_in(dir) {
                Ok(None) => false,
                Ok(Some(st)) => foreign(Ok(st)),
                Err(_) => true,
            };
            dot_git || (is_git_dir(dir) && foreign(rustix::fs::fstat(dir)))
        })
    }

    fn git_dirs(&self, path: &NsPath) -> Vec<usize> {
        // Repositories are looked for where agents make them; the other areas are the
        // policy's alone (a secret or a tool file may be named `config`).
        if !path.get(0).is_some_and(|a| REPO_AREAS.contains(&a)) {
            return Vec::new();
        }
        match self.folders(path) {
            Some(folders) => folders
                .iter()
                .enumerate()
                .filter(|(_, dir)| is_git_dir(dir))
                .map(|(k, _)| AREA_TOP_DEPTH - 1 + k)
                .collect(),
            // What cannot be looked at counts as a git dir, as for the guard's other looks.
            None => (1..path.depth().saturating_sub(1)).collect(),
        }
    }

    fn at_repo_top(&self, path: &NsPath) -> bool {
        match self.folders(path) {
            Some(folders) => folders
                .last()
                .is_none_or(|d| !matches!(git_in(d), Ok(None))),
            None => true,
        }
    }

    fn owns_folder(&self, path: &NsPath) -> bool {
        self.folders(path)
            .and_then(|f| f.last().map(|d| rustix::fs::fstat(d).ok()))
            .flatten()
            .is_some_and(|st| self.owns(&st))
    }

    fn owns_file(&self, path: &NsPath) -> bool {
        let Some(name) = path.file_name() else {
            return false;
        };
        self.folders(path)
            .and_then(|f| {
                let dir = f.last()?;
                rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()
            })
            .is_some_and(|st| self.owns(&st))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawfs_policy::GitRepos;
    use std::os::unix::fs::chown;

    fn p(s: &str) -> NsPath {
        NsPath::parse(s).unwrap()
    }

    #[test]
    fn a_repository_is_the_callers_only_if_every_git_above_is() {
        let store = tempfile::tempdir().unwrap();
        let root = store.path();
        for d in [
            "workspaces/w/mine/.git",
            "workspaces/w/mine/vendor/x",
            "workspaces/w/shared/.git/hooks",
            "workspaces/w/shared/nested/.git",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for d in [
            "workspaces/w/mine",
            "workspaces/w/mine/.git",
            "workspaces/w/mine/vendor",
            "workspaces/w/mine/vendor/x",
            "workspaces/w/shared/nested",
            "workspaces/w/shared/nested/.git",
        ] {
            chown(root.join(d), Some(61006), None).unwrap();
        }
        let fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, 0.into()).unwrap();
        let me = Repos::new(fd.as_fd(), 61006);
        assert!(!me.foreign_git_above(&p("/workspaces/w/mine/.git/config")));
        assert!(!me.foreign_git_above(&p("/workspaces/w/mine/vendor/x/.gitmodules")));
        assert!(!me.at_repo_top(&p("/workspaces/w/mine/vendor/x/.gitmodules")));
        assert!(me.at_repo_top(&p("/workspaces/w/mine/.gitmodules")));
        assert!(me.owns_folder(&p("/workspaces/w/mine/HEAD")));
        assert!(me.foreign_git_above(&p("/workspaces/w/shared/.git/hooks/pre-commit")));
        // A repository of the caller's own inside someone else's is guarded too.
        assert!(me.foreign_git_above(&p("/workspaces/w/shared/nested/.git/config")));
        assert!(!me.owns_folder(&p("/workspaces/w/shared/HEAD")));
        // Outside the areas agents make repositories in, and for root, nothing is owned.
        assert!(me.foreign_git_above(&p("/tools/.git/config")));
        let root_caller = Repos::new(fd.as_fd(), 0);
        assert!(root_caller.foreign_git_above(&p("/workspaces/w/shared/.git/config")));
        assert!(!root_caller.owns_folder(&p("/workspaces/w/HEAD")));
        // A symlink on the way counts as someone else's.
        std::os::unix::fs::symlink("mine", root.join("workspaces/w/link")).unwrap();
        assert!(me.foreign_git_above(&p("/workspaces/w/link/.git/config")));
    }

    #[test]
    fn a_folder_holding_a_head_is_a_git_dir_whatever_its_name() {
        let store = tempfile::tempdir().unwrap();
        let root = store.path();
        for d in [
            "workspaces/w/proj.git/hooks",
            "workspaces/w/mine.git/hooks",
            "workspaces/w/other",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for d in ["workspaces/w/proj.git", "workspaces/w/mine.git"] {
            std::fs::write(root.join(d).join("HEAD"), "ref: refs/heads/main\n").unwrap();
        }
        chown(root.join("workspaces/w/mine.git"), Some(61006), None).unwrap();
        let fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, 0.into()).unwrap();
        let me = Repos::new(fd.as_fd(), 61006);
        assert_eq!(me.git_dirs(&p("/workspaces/w/proj.git/hooks/x")), vec![2]);
        assert_eq!(me.git_dirs(&p("/workspaces/w/proj.git/config")), vec![2]);
        assert!(me.git_dirs(&p("/workspaces/w/other/config")).is_empty());
        assert!(me.git_dirs(&p("/vault/secrets/config")).is_empty());
        assert!(me.foreign_git_above(&p("/workspaces/w/proj.git/config")));
        // The caller's own bare repository is its business.
        assert!(!me.foreign_git_above(&p("/workspaces/w/mine.git/config")));
    }
}
