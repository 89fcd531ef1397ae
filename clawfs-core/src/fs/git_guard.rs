//! In someone else's repository an agent makes git's config file and its index the way git
//! does, by renaming a finished file onto them (`config.lock` → `config`, `index.lock` →
//! `index`), and only so (the policy refuses opening them for writing). Before such a rename
//! the daemon reads the file and refuses settings that run commands or send git elsewhere
//! ([`crate::git_settings`]), or index entries git would never check out itself
//! ([`crate::git_index`]); so that what it read is what lands, the source inode is sealed first
//! — refused if anything has it open for writing, and no agent may open it for writing after —
//! and stays sealed once in place.
//!
//! A file becoming a hook git runs is sealed the same way when it is someone else's
//! ([`ClawFs::seal_new_hook`]): an agent's `*.sample` its owner renames into use.
//!
//! A folder an agent moves under someone else's repository is looked through for a `.git`
//! first ([`holds_git`]). So that nothing puts one in it between the look and the move, both
//! happen in a sole turn of [`MoveOrder`], and everything else that could (every rename, the
//! making of every name) in a shared turn, held from before its path is computed until it is
//! done: each either lands before the look, which sees it, or is decided after the move,
//! on the path under that repository.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, OFlags};

use super::{ClawFs, RenameMode};
use crate::creds::Caller;
use crate::error::{FsError, FsResult};
use crate::inodes::Node;
use clawfs_policy::{rule, Denial, DenyKind, NsPath};

/// The largest git config file an agent may put in place.
pub const MAX_GIT_CONFIG: u64 = 1 << 20;

/// The order of renames and the making of names against the looks through moved folders and
/// the checked renames onto git's config (see the module's documentation). Held across system
/// calls on the store, never across anything that waits for the kernel's FUSE side, so a FUSE
/// request waiting for a turn blocks no holder.
#[derive(Default)]
pub(super) struct MoveOrder {
    turns: std::sync::RwLock<()>,
    /// Renames put off until a file's releases come ([`AfterRelease`]).
    release_waits: std::sync::Mutex<ReleaseWaits>,
}

/// The renames put off now, in all and by uid.
#[derive(Default)]
struct ReleaseWaits {
    out: usize,
    by_uid: std::collections::HashMap<u32, UidWaits>,
}

#[derive(Default)]
struct UidWaits {
    out: usize,
    /// When the uid's last one waited in vain: its file still open after [`RELEASE_WAIT`], or
    /// closed only after [`RELEASE_LATE`].
    in_vain: Option<std::time::Instant>,
}

impl UidWaits {
    fn paused(&self) -> bool {
        self.in_vain.is_some_and(|at| at.elapsed() < IN_VAIN_PAUSE)
    }
}

/// Renames put off at once at most ([`AfterRelease`]), in all and by one uid; past either a
/// rename is decided at once.
const RELEASE_WAITS: usize = 64;
const RELEASE_WAITS_PER_UID: usize = 4;

/// How long after a put-off rename of a uid waited in vain its next ones are decided at once.
/// While a rename waits, the kernel holds its folder's lock: a caller that keeps its file open
/// (or closes it just before the wait ends) and renames it over and over would otherwise hold
/// it, and hold up someone else's git in that folder, most of the time. git's own renames
/// never wait in vain: their release is already on its way.
const IN_VAIN_PAUSE: std::time::Duration = std::time::Duration::from_secs(10);

/// A turn in [`MoveOrder`], until dropped.
pub(super) enum Turn<'a> {
    Shared {
        _held: std::sync::RwLockReadGuard<'a, ()>,
    },
    Sole {
        _held: std::sync::RwLockWriteGuard<'a, ()>,
    },
}

impl MoveOrder {
    /// A turn beside other shared turns: a rename, or the making of a name.
    pub(super) fn shared(&self) -> Turn<'_> {
        Turn::Shared {
            _held: self
                .turns
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }

    /// The renames put off now.
    fn waits(&self) -> std::sync::MutexGuard<'_, ReleaseWaits> {
        self.release_waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The only turn: a look through a folder and its move.
    pub(super) fn sole(&self) -> Turn<'_> {
        Turn::Sole {
            _held: self
                .turns
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }
}

/// How long a rename that would seal a file waits, holding no turn, for the releases of the
/// file's writers to arrive: git closes its `config.lock` and renames it at once, and the
/// kernel's RELEASE of the close may still be on its way, behind other requests.
pub(super) const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// A release that comes later than this after the rename was not on its way when the rename
/// came: the file was closed meanwhile (the wait is then counted in vain).
const RELEASE_LATE: std::time::Duration = std::time::Duration::from_millis(50);

/// A rename put off until the releases of a file it would seal have come (or
/// [`RELEASE_WAIT`] has passed): [`ClawFs::rename`] returns it so that the wait holds no thread
/// that serves requests, and [`ClawFs::rename_after_release`] decides the rename again after
/// it. At most [`RELEASE_WAITS`] are out at once ([`RELEASE_WAITS_PER_UID`] of one uid), and
/// none for a uid whose last one waited in vain within [`IN_VAIN_PAUSE`].
pub struct AfterRelease {
    node: Node,
    uid: u32,
    order: std::sync::Arc<MoveOrder>,
}

impl AfterRelease {
    /// One for `node`, renamed by `uid`, unless too many are out or `uid`'s last one waited
    /// in vain lately.
    pub(super) fn take(
        order: &std::sync::Arc<MoveOrder>,
        node: Node,
        uid: u32,
    ) -> Option<AfterRelease> {
        let mut waits = order.waits();
        let all = waits.out;
        let mine = waits.by_uid.entry(uid).or_default();
        if mine.paused() || mine.out >= RELEASE_WAITS_PER_UID || all >= RELEASE_WAITS {
            return None;
        }
        mine.out += 1;
        waits.out += 1;
        Some(AfterRelease {
            node,
            uid,
            order: std::sync::Arc::clone(order),
        })
    }

    /// Waits for the releases, at most [`RELEASE_WAIT`]; remembers a wait in vain.
    pub(super) fn wait(&self) {
        let started = std::time::Instant::now();
        let released = self.node.io.wait_writers_released(RELEASE_WAIT);
        if !released || started.elapsed() > RELEASE_LATE {
            let now = std::time::Instant::now();
            self.order
                .waits()
                .by_uid
                .entry(self.uid)
                .or_default()
                .in_vain = Some(now);
        }
    }
}

impl std::fmt::Debug for AfterRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfterRelease").finish_non_exhaustive()
    }
}

impl Drop for AfterRelease {
    fn drop(&mut self) {
        let mut waits = self.order.waits();
        waits.out -= 1;
        if let Some(mine) = waits.by_uid.get_mut(&self.uid) {
            mine.out -= 1;
        }
        // Forgotten once nothing is out and no pause is running.
        waits.by_uid.retain(|_, w| w.out > 0 || w.paused());
    }
}

/// How far the decision on a rename has come: the turn it holds, and whether it has waited
/// ([`RELEASE_WAIT`]) for the writers of a file it would seal.
pub(super) struct Attempt<'a> {
    pub turn: Turn<'a>,
    pub waited: bool,
}

impl Attempt<'_> {
    fn is_sole(&self) -> bool {
        matches!(self.turn, Turn::Sole { .. })
    }
}

/// What [`ClawFs::check_git_rename`] or [`ClawFs::seal_new_hook`] found.
pub(super) enum GitRename {
    /// The rename may go ahead; the sealed source, if it becomes git's config.
    Allowed(Option<Node>),
    /// The moved folder must be looked through, which only a sole turn may do: decide again
    /// in one.
    NeedsSoleTurn,
    /// The file the rename would seal is counted open for writing: decide again once the
    /// releases on their way have come, waiting with no turn held.
    Writing(Node),
}

impl ClawFs {
    /// For a rename by an agent of `name` in `dir` (`from`) onto `newname` in `newdir` (`to`):
    /// refuses a folder moving into, out of or within a `.git` folder; if `to` is a git config,
    /// seals the source and checks its settings, refusing (and recording) what may not land.
    /// Returns the sealed source node, to unseal if the rename then fails. A folder moving
    /// under someone else's repository is looked through only in a sole `turn`.
    pub(super) fn check_git_rename(
        &self,
        caller: &Caller,
        (dir, name): (impl AsFd, &std::ffi::OsStr),
        (newdir, newname): (impl AsFd, &std::ffi::OsStr),
        (from, to): (&NsPath, &NsPath),
        (mode, attempt): (RenameMode, &Attempt<'_>),
    ) -> FsResult<GitRename> {
        use clawfs_policy::GitRepos;
        let policy = self.policy();
        let git = self.repos(caller);
        let refuse = |reason: String| {
            let denial = Denial {
                rule: rule::PROTECTED,
                kind: DenyKind::ReadOnly,
                reason,
            };
            match self.refuse_move(caller, "rename", (from, to), denial) {
                Err(e) => e,
                Ok(()) => FsError::Io(std::io::Error::from_raw_os_error(libc::EPERM)),
            }
        };
        let source = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let is_dir =
            |st: &rustix::fs::Stat| FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        let is_link =
            |st: &rustix::fs::Stat| FileType::from_raw_mode(st.st_mode) == FileType::Symlink;
        let other = match mode.exchange {
            true => rustix::fs::statat(&newdir, newname, AtFlags::SYMLINK_NOFOLLOW).ok(),
            false => None,
        };
        let moved_dir = is_dir(&source) || other.as_ref().is_some_and(is_dir);
        let moved_link = is_link(&source) || other.as_ref().is_some_and(is_link);
        // What lands on a `.git` name must be the agent's: git trusts a `.git` for its owner,
        // so one moved in from someone else's folder would be trusted for them.
        let onto_git = |p: &NsPath| p.file_name().is_some_and(|n| policy.is_git_dir_name(n));
        if (onto_git(to) && (caller.uid == 0 || source.st_uid != caller.uid))
            || (mode.exchange && onto_git(from))
        {
            return Err(refuse(format!(
                "{from} is not yours to make {to}: git trusts a .git for whoever owns it, so agents put in place only a .git of their own (git init, git clone)"
            )));
        }
        let (foreign_from, foreign_to) = (git.foreign_git_above(from), git.foreign_git_above(to));
        let checked = |p: &NsPath| CheckedFile::of(&policy, p, &git);
        let in_git = |p: &NsPath| policy.is_in_git_dir(p, &git);
        if mode.exchange && ((foreign_from && in_git(from)) || (foreign_to && in_git(to))) {
            return Err(refuse(format!(
                "{from} ↔ {to}: nothing in the .git folder of a repository you do not own may be exchanged with another file (git never does); rename a finished file onto it, as git does"
            )));
        }
        // Folders do not move into, out of or within a `.git` folder of a repository someone
        // else owns: one prepared elsewhere would bring its `config`, `hooks/` and `HEAD` in
        // past the guard, and one built inside would take a `HEAD` out and make a repository
        // under another name. (git renames files there, lock files onto their targets.)
        if (moved_dir || moved_link)
            && ((foreign_from && in_git(from)) || (foreign_to && in_git(to)))
        {
            return Err(refuse(format!(
                "agents may not move a folder or a symlink into, out of or within a .git folder of a repository they do not own ({from} → {to}): it would carry git config, hooks or a HEAD past the guard, or send its owner's git elsewhere"
            )));
        }
        // A symlink landing in someone else's repository leads where a symlink the agent made
        // there may (`symlink_escape`).
        let landing = [
            (
                true,
                foreign_to,
                to,
                (&dir as &dyn AsFd, name),
                &newdir as &dyn AsFd,
            ),
            (
                mode.exchange,
                foreign_from,
                from,
                (&newdir as &dyn AsFd, newname),
                &dir as &dyn AsFd,
            ),
        ];
        for (moves, foreign, dest, (d, n), dest_dir) in landing {
            if !(moves && foreign && policy.guards_git()) {
                continue;
            }
            let Ok(target) = rustix::fs::readlinkat(d.as_fd(), n, Vec::new()) else {
                continue;
            };
            if let Some(why) = symlink_escape(dest, dest_dir, target.as_bytes()) {
                return Err(refuse(format!(
                    "{dest} would be a symlink to '{}' in a repository you do not own, and {why}; its owner's git could be made to write where it leads, so agents' symlinks there lead within the workspace, to no .git and through no symlink",
                    target.to_string_lossy()
                )));
            }
        }
        // A folder moving under someone else's repository may not hold a repository of an
        // owner other than that one's or root: their git, recursing into it as a submodule,
        // would run its config, which may never have been guarded (made where it was the
        // agent's own, or before the repository around it came). Looked through wherever it
        // comes from: where it was, or whose, when made is not known.
        let looked =
            policy.guards_git() && moved_dir && (foreign_to || (mode.exchange && foreign_from));
        let carried = |foreign: bool, dest: &NsPath, (d, n): (&dyn AsFd, &std::ffi::OsStr)| {
            foreign && holds_untrusted_git(&git, dest, (d, n))
        };
        // Looked through in a shared turn first: what it finds there is refused without
        // holding up every other rename (a refusal needs no order); what passes is looked
        // through again in the sole turn, where nothing can change it before the move.
        if looked
            && (carried(foreign_to, to, (&dir, name))
                || (mode.exchange && carried(foreign_from, from, (&newdir, newname))))
        {
            return Err(refuse(format!(
                "{from} holds a git repository, or a symlink that at {to} would lead out of the workspace, into a .git or through a symlink (or more than {WALK_BUDGET} entries to look through), and {to} is in a repository you do not own, whose git would recurse into it or write through the symlink; keep your repositories and such symlinks outside others'"
            )));
        }
        if looked && !attempt.is_sole() {
            return Ok(GitRename::NeedsSoleTurn);
        }
        // Any file landing in someone else's `.git` outside its refs and logs could be one git
        // reads as an index under a name of its own (`git stash` reads `index.stash.<pid>`),
        // so it is sealed, keeps one name, and is checked as an index if it is one.
        let regular = FileType::from_raw_mode(source.st_mode) == FileType::RegularFile;
        let kind = match checked(to) {
            Some(kind) => Some(kind),
            None if regular && in_git(to) && !policy.is_git_ref_or_log(to, &git) => {
                Some(CheckedFile::InGitDir)
            }
            None => None,
        };
        let Some(kind) = kind.filter(|_| foreign_to) else {
            return Ok(GitRename::Allowed(None));
        };
        // Checked alone: no name is made or moved meanwhile, so the file read is the one that
        // lands, and it keeps the one name it has.
        if !attempt.is_sole() {
            return Ok(GitRename::NeedsSoleTurn);
        }
        let st = source;
        let what = kind.what();
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refuse(format!(
                "{from} is not a regular file; only a file can become {what} {to}"
            )));
        }
        let Some(node) = self.inodes.get(self.inodes.mount_ino(st.st_ino)) else {
            return Err(FsError::Refused {
                errno: libc::EBUSY,
                why: "the file renamed onto git's config or index is not a node the daemon knows",
            });
        };
        if !node.io.seal() {
            if !attempt.waited {
                return Ok(GitRename::Writing(node));
            }
            return Err(refuse(format!(
                "{from} is open for writing; close it before renaming it onto {what} {to}, which is checked at the rename"
            )));
        }
        // Sealed first, so no name can be added after this count (a link of a sealed file is
        // refused).
        let names = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|now| (now.st_ino == st.st_ino).then_some(now.st_nlink));
        if names != Ok(Some(1)) {
            node.io.unseal();
            return Err(refuse(format!(
                "{from} has other names (hard links), or changed while checked; {what} may have only the one name it is checked under, or it could be written through another"
            )));
        }
        // A file that is no index (a pack, `ORIG_HEAD`) is not read whole.
        if kind == CheckedFile::InGitDir && !crate::git_index::is_index(&peek_regular(&dir, name)?)
        {
            return Ok(GitRename::Allowed(Some(node)));
        }
        let text = match read_regular(&dir, name, kind.max_size()) {
            Ok(t) => t,
            Err(e) => {
                node.io.unseal();
                return Err(e);
            }
        };
        if kind == CheckedFile::Index || kind == CheckedFile::InGitDir {
            if let Err(bad) = crate::git_index::check(&text) {
                node.io.unseal();
                return Err(refuse(format!(
                    "{from} cannot become git's index {to}: {bad}; its owner's git would check those out unchecked, so agents may put in place only an index of paths git enters itself"
                )));
            }
            return Ok(GitRename::Allowed(Some(node)));
        }
        // What the config it replaces says, which may keep a setting the agent could not make.
        let replaced = read_regular(&newdir, newname, MAX_GIT_CONFIG).ok();
        let refused = match crate::git_settings::refused_settings(&text, replaced.as_deref()) {
            Ok(refused) => refused,
            Err(why) => {
                node.io.unseal();
                return Err(refuse(format!(
                    "{from} cannot become git's config {to}: {why}; agents may put in place only a config git reads exactly as ClawFS checks it"
                )));
            }
        };
        if !refused.is_empty() {
            node.io.unseal();
            return Err(refuse(format!(
                "{from} sets {} in git's config {to}; agents may set only settings that run no command and send git nowhere but its remotes (see policy/README.md), so ask the repository's owner for the others",
                refused.join(", ")
            )));
        }
        Ok(GitRename::Allowed(Some(node)))
    }
}

impl ClawFs {
    /// For a rename by anyone of `name` in `dir` onto `to`: if `to` is a hook git would run
    /// and the file is someone else's, seals it (no agent opens it for writing after) and
    /// refuses (`ETXTBSY`) while anything has it open for writing: whoever made it (an agent's
    /// `*.sample` in a shared repository) could otherwise write what the repository's owner's
    /// git runs after the owner renamed it into place. Returns the sealed node, to unseal if
    /// the rename then fails.
    pub(super) fn seal_new_hook(
        &self,
        caller: &Caller,
        (dir, name): (impl AsFd, &std::ffi::OsStr),
        (from, to): (&NsPath, &NsPath),
        attempt: &Attempt<'_>,
    ) -> FsResult<GitRename> {
        if !self.policy().is_active_git_hook(to, &self.repos(caller)) {
            return Ok(GitRename::Allowed(None));
        }
        let st = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // The rename itself answers for a missing source.
            Err(_) => return Ok(GitRename::Allowed(None)),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_uid == caller.uid {
            return Ok(GitRename::Allowed(None));
        }
        // Unknown to the daemon: nothing has it open through the mount.
        let Some(node) = self.inodes.get(self.inodes.mount_ino(st.st_ino)) else {
            return Ok(GitRename::Allowed(None));
        };
        let sealed_before = node.io.is_sealed();
        let sealed = sealed_before || node.io.seal();
        if !sealed && !attempt.waited {
            return Ok(GitRename::Writing(node));
        }
        if sealed {
            // Sealed first, so no name can be added after this count (a link of a sealed
            // file is refused): another name would be written where the seal does not reach
            // (by the tools, which write the store directly).
            let names = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|now| (now.st_ino == st.st_ino).then_some(now.st_nlink));
            if names == Ok(Some(1)) {
                return Ok(GitRename::Allowed((!sealed_before).then_some(node)));
            }
            if !sealed_before {
                node.io.unseal();
            }
            let denial = Denial {
                rule: rule::PROTECTED,
                kind: DenyKind::Permission,
                reason: format!(
                    "{from} is uid {}'s and has other names (hard links); as the git hook {to} it could be written through them, so only a file with one name becomes a hook (or copy it: `cp`, then `chmod +x`)",
                    st.st_uid
                ),
            };
            return match self.refuse_move(caller, "rename", (from, to), denial) {
                Err(e) => Err(e),
                Ok(()) => Err(FsError::Io(std::io::Error::from_raw_os_error(libc::EPERM))),
            };
        }
        let denial = Denial {
            rule: rule::PROTECTED,
            kind: DenyKind::Busy,
            reason: format!(
                "{from} is uid {}'s and open for writing; as the git hook {to} whoever holds it could change what git runs, so it becomes a hook only once closed (or copy it: `cp`, then `chmod +x`)",
                st.st_uid
            ),
        };
        match self.refuse_move(caller, "rename", (from, to), denial) {
            Err(e) => Err(e),
            Ok(()) => Err(FsError::Io(std::io::Error::from_raw_os_error(
                libc::ETXTBSY,
            ))),
        }
    }
}

/// Why a symlink at `at` (in the folder `dir`) pointing at `target` may not be an agent's in a
/// repository someone else owns, if it may not. Its owner's git, checking out a path whose
/// folder the agent swapped for the symlink between git's `mkdir` and its `open`, writes
/// where the symlink leads: so it must lead, by name, within the workspace (or agent folder)
/// to no `.git` in any spelling git refuses (gitoxide's `gix-validate`), and through no
/// symlink that exists now.
pub(super) fn symlink_escape(at: &NsPath, dir: &dyn AsFd, target: &[u8]) -> Option<String> {
    use gix_index::validate::path::component::{self, Options};
    let options = Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    if target.is_empty() || target.starts_with(b"/") {
        return Some("it is empty or absolute".into());
    }
    let parts: Vec<&[u8]> = target.split(|b| *b == b'/').collect();
    // By name, from the symlink's folder: never above the workspace or agent folder.
    let mut depth = at.components().count().saturating_sub(1);
    for part in &parts {
        match *part {
            b"" | b"." => {}
            b".." if depth <= AREA_DEPTH => {
                return Some("it climbs out of its workspace or agent folder".into())
            }
            b".." => depth -= 1,
            name => match gix_index::validate::path::component(name.into(), None, options) {
                Err(component::Error::DotGitDir) => return Some("it leads into a .git".into()),
                Err(e) => return Some(format!("a part of it is not a name git enters: {e}")),
                Ok(_) => depth += 1,
            },
        }
    }
    // On the store as it is now: no part that exists is a symlink.
    let open = |d: &dyn AsFd, n: &[u8]| {
        rustix::fs::openat(
            d.as_fd(),
            std::ffi::OsStr::from_bytes(n),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
    };
    let mut cur = match open(dir, b".") {
        Ok(fd) => fd,
        Err(e) => return Some(format!("its folder cannot be opened: {e}")),
    };
    for part in parts {
        if part.is_empty() || part == b"." {
            continue;
        }
        let st = match rustix::fs::statat(
            &cur,
            std::ffi::OsStr::from_bytes(part),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => st,
            // What does not exist yet leads nowhere now.
            Err(_) => return None,
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                return Some(format!(
                    "it leads through the symlink '{}'",
                    String::from_utf8_lossy(part)
                ))
            }
            FileType::Directory => match open(&cur, part) {
                Ok(fd) => cur = fd,
                Err(e) => return Some(format!("a folder of it cannot be opened: {e}")),
            },
            _ => return None,
        }
        // A git dir under another name (a bare repository) is one as much as a `.git`.
        if super::git_repos::is_git_dir(&cur) {
            return Some(format!(
                "it leads into '{}', a git repository (a folder holding a HEAD)",
                String::from_utf8_lossy(part)
            ));
        }
    }
    None
}

/// Namespace components of a workspace's or agent's folder (`/workspaces/NAME`): a symlink in
/// someone else's repository leads nowhere above it.
const AREA_DEPTH: usize = 2;

impl ClawFs {
    /// Refuses an agent rewriting in place (`op`: an open for writing, a truncation) a file at
    /// `path` in the `.git` folder of a repository someone else owns that is an index by its
    /// first bytes, whatever its name (`git stash` reads `index.stash.<pid>`, which its owner
    /// made group-writable in a shared repository): its entries are checked only when renamed
    /// into place.
    pub(super) fn refuse_rewriting_an_index(
        &self,
        caller: &Caller,
        who: &clawfs_policy::Identity,
        (op, path): (&'static str, &NsPath),
        node: &Node,
    ) -> FsResult<()> {
        let repos = self.repos(caller);
        if !matches!(who, clawfs_policy::Identity::Agent(_))
            || !self.policy().is_in_git_dir(path, &repos)
            || !clawfs_policy::GitRepos::foreign_git_above(&repos, path)
        {
            return Ok(());
        }
        let fd = node
            .handle
            .open(self.mount_fd(), libc::O_RDONLY | libc::O_NOFOLLOW)?;
        let mut head = Vec::new();
        std::fs::File::from(fd).take(8).read_to_end(&mut head)?;
        if !crate::git_index::is_index(&head) {
            return Ok(());
        }
        let denial = Denial {
            rule: rule::PROTECTED,
            kind: DenyKind::ReadOnly,
            reason: format!(
                "{path} is a git index in a repository you do not own, which its owner's git checks out without checking its paths; agents put an index in place only by renaming a finished one onto it, whose entries are checked then"
            ),
        };
        self.refuse(caller, op, path, denial)
    }
}

/// A file an agent puts in place in someone else's repository only by a rename the daemon
/// checks: what git reads from it runs commands (a config) or writes files (an index).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CheckedFile {
    Config,
    Index,
    /// Any other file in the `.git` folder but its refs and logs: checked as an index if it
    /// is one.
    InGitDir,
}

impl CheckedFile {
    fn of(
        policy: &clawfs_policy::Policy,
        path: &NsPath,
        git: &dyn clawfs_policy::GitRepos,
    ) -> Option<Self> {
        match (
            policy.is_git_config(path, git),
            policy.is_git_index(path, git),
        ) {
            (true, _) => Some(Self::Config),
            (false, true) => Some(Self::Index),
            _ => None,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Config => "git's config",
            Self::Index => "git's index",
            Self::InGitDir => "a file of git's",
        }
    }

    fn max_size(self) -> u64 {
        match self {
            Self::Config => MAX_GIT_CONFIG,
            Self::Index | Self::InGitDir => crate::git_index::MAX_GIT_INDEX,
        }
    }
}

/// How many entries [`holds_git`] looks through before it answers yes.
const WALK_BUDGET: usize = 100_000;
const GIT_DIR: &str = ".git";

/// Whether the folder `name` in `dir`, moving to `dest`, holds a repository the git above
/// `dest` would run the config of for someone other than its owner ([`holds_git`]): a `.git`
/// of anyone but root and the owner of the outermost `.git` above `dest`, whose git recurses
/// into all of it (a repository nested in it, even the mover's own, is guarded, and its
/// owner is not trusted for what comes in below); or a symlink that, where it lands, an agent
/// could not make there ([`symlink_escape`]: a folder moved up turns `../../x` into a way out).
/// A file holds none.
pub(super) fn holds_untrusted_git(
    repos: &super::git_repos::Repos<'_>,
    dest: &NsPath,
    (dir, name): (&dyn AsFd, &std::ffi::OsStr),
) -> bool {
    let is_dir = rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    if matches!(is_dir, Ok(false)) {
        return false;
    }
    let owner = repos.outermost_git_owner(dest);
    let symlink_escapes = |within: &[&std::ffi::OsStr], at: &dyn AsFd, target: &[u8]| {
        within
            .iter()
            .try_fold(dest.clone(), |p, c| p.join(c))
            .map_or(true, |link| symlink_escape(&link, at, target).is_some())
    };
    holds_git(
        dir,
        name,
        &|uid| uid == 0 || owner == Some(uid),
        &symlink_escapes,
    )
}

/// What [`holds_git`] asks of each symlink it meets: whether the symlink at the path `within`
/// (below the folder looked through, its own name last), in the folder `at`, pointing at
/// `target`, may not come along.
pub(super) type SymlinkJudge<'a> = dyn Fn(&[&std::ffi::OsStr], &dyn AsFd, &[u8]) -> bool + 'a;

/// Whether the folder `name` in `dir` holds a `.git` (any letter case) at any depth whose
/// owner is not `trusted`, a symlink `escapes` refuses, or more than [`WALK_BUDGET`] entries:
/// what cannot be looked through counts as holding one.
pub(super) fn holds_git(
    dir: &dyn AsFd,
    name: &std::ffi::OsStr,
    trusted: &dyn Fn(u32) -> bool,
    escapes: &SymlinkJudge<'_>,
) -> bool {
    let open = |d: std::os::fd::BorrowedFd<'_>, n: &std::ffi::OsStr| {
        rustix::fs::openat(
            d,
            n,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
    };
    let Ok(top) = open(dir.as_fd(), name) else {
        return true;
    };
    let mut budget = WALK_BUDGET;
    // Each folder with the names leading to it from the top.
    let mut stack = vec![(top, Vec::<std::ffi::OsString>::new())];
    while let Some((fd, within)) = stack.pop() {
        let Ok(mut entries) = rustix::fs::Dir::read_from(&fd) else {
            return true;
        };
        for entry in entries.by_ref() {
            let Ok(entry) = entry else { return true };
            let n = entry.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            budget = match budget.checked_sub(1) {
                Some(b) => b,
                None => return true,
            };
            if n.eq_ignore_ascii_case(GIT_DIR.as_bytes()) {
                match rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if trusted(st.st_uid) => continue,
                    _ => return true,
                }
            }
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    match rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => FileType::from_raw_mode(st.st_mode),
                        Err(_) => return true,
                    }
                }
                t => t,
            };
            let here = std::ffi::OsStr::from_bytes(n);
            match kind {
                FileType::Directory => match open(fd.as_fd(), here) {
                    Ok(sub) => {
                        let mut deeper = within.clone();
                        deeper.push(here.to_os_string());
                        stack.push((sub, deeper));
                    }
                    Err(_) => return true,
                },
                FileType::Symlink => {
                    let Ok(target) = rustix::fs::readlinkat(&fd, here, Vec::new()) else {
                        return true;
                    };
                    let mut path: Vec<&std::ffi::OsStr> =
                        within.iter().map(|c| c.as_os_str()).collect();
                    path.push(here);
                    if escapes(&path, &fd, target.as_bytes()) {
                        return true;
                    }
                }
                _ => {}
            }
        }
    }
    false
}

/// The first bytes of the regular file `name` in `dir` (reached as [`read_regular`] reaches
/// it): enough to tell an index.
fn peek_regular(dir: impl AsFd, name: &std::ffi::OsStr) -> FsResult<Vec<u8>> {
    let fd =
        clawfs_store::beneath::open_file(dir.as_fd(), std::path::Path::new(name), OFlags::RDONLY)?;
    let mut out = Vec::new();
    std::fs::File::from(fd).take(8).read_to_end(&mut out)?;
    Ok(out)
}

/// The content of the regular file `name` in `dir` (reached as every daemon read of an agent's
/// file is: no symlink, no blocking on a FIFO), refused past `max` bytes rather than checked
/// in part.
fn read_regular(dir: impl AsFd, name: &std::ffi::OsStr, max: u64) -> FsResult<Vec<u8>> {
    let fd =
        clawfs_store::beneath::open_file(dir.as_fd(), std::path::Path::new(name), OFlags::RDONLY)?;
    if rustix::fs::fstat(&fd)?.st_size as u64 > max {
        return Err(FsError::Refused {
            errno: libc::EFBIG,
            why: "a git config or index larger than ClawFS checks",
        });
    }
    let mut out = Vec::new();
    std::fs::File::from(fd).take(max).read_to_end(&mut out)?;
    Ok(out)
}
