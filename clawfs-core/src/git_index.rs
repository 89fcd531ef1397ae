//! What an agent may put in place as a git index in someone else's repository (`.git/index`,
//! a worktree's, a submodule's, a split index's `sharedindex.*`). git checks the paths of a
//! tree before it enters them in an index, but not the paths of an index it reads: an entry
//! `.git/hooks/post-checkout` (or `../x`) in the index is written there by its owner's next
//! `git checkout -- .` or `git reset --hard`. So every entry's path must be one git itself would
//! enter: each component checked as git does with `core.protectHFS` and `core.protectNTFS` on
//! (gitoxide's `gix-validate`), the index parsed by gitoxide's `gix-index`.
//!
//! A file that is not an index (no `DIRC` signature: a ref of a branch called `index`) passes:
//! git reads none as one. git also reads indexes under names of its own (`git stash` reads
//! `index.stash.<pid>`), so the daemon checks every file renamed into someone else's `.git`
//! that starts as one, and refuses rewriting one in place ([`is_index`]). A split index (the `link` extension) is refused: its entries are in
//! a shared index this check would have to read too.

use bstr::ByteSlice;

/// The largest index an agent may put in place (a repository of 300,000 files has one of
/// about 30 MiB).
pub const MAX_GIT_INDEX: u64 = 256 << 20;

/// The signature every index starts with.
const SIGNATURE: &[u8] = b"DIRC";

/// Why an index may not be put in place.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadIndex {
    /// Not parsed as an index of any object format.
    #[error("it does not parse as a git index ({0})")]
    Unparsed(String),
    /// A split index, whose entries live in another file.
    #[error("it is a split index (its entries are in a shared index), which agents may not put in others' repositories")]
    Split,
    /// Entries with paths git would not check out itself.
    #[error("it lists {} that git would never enter itself: {}", plural(.0.len()), .0.join(", "))]
    Paths(Vec<String>),
}

fn plural(n: usize) -> String {
    match n {
        1 => "a path".to_string(),
        n => format!("{n} paths"),
    }
}

/// Whether `head` (a file's first bytes) starts as an index does: git reads nothing else as
/// one.
pub fn is_index(head: &[u8]) -> bool {
    head.starts_with(SIGNATURE)
}

/// Checks `bytes` as an index: `Ok` if it is not one, or if every entry's path is one git would
/// enter. Parsed in every object format it parses in (the repository's is not looked up), and
/// refused if it parses in none or any parse lists a bad path.
pub fn check(bytes: &[u8]) -> Result<(), BadIndex> {
    if !is_index(bytes) {
        return Ok(());
    }
    let options = gix_index::decode::Options {
        thread_limit: Some(1),
        // Nothing the file says makes the daemon allocate more than the file's own size.
        alloc_limit_bytes: Some(bytes.len().max(1 << 20)),
        ..Default::default()
    };
    let mut parsed = 0;
    let mut last_error = String::new();
    for kind in [gix_index::hash::Kind::Sha1, gix_index::hash::Kind::Sha256] {
        let state =
            match gix_index::State::from_bytes(bytes, filetime::FileTime::zero(), kind, options) {
                Ok((state, _)) => state,
                Err(e) => {
                    last_error = e.to_string();
                    continue;
                }
            };
        parsed += 1;
        if state.link().is_some() {
            return Err(BadIndex::Split);
        }
        let bad: Vec<String> = state
            .entries()
            .iter()
            .filter(|e| !path_ok(e.path(&state), e.mode))
            .take(5)
            .map(|e| format!("'{}'", e.path(&state).to_str_lossy()))
            .collect();
        if !bad.is_empty() {
            return Err(BadIndex::Paths(bad));
        }
    }
    match parsed {
        0 => Err(BadIndex::Unparsed(last_error)),
        _ => Ok(()),
    }
}

/// Whether git would enter `path` (an entry of `mode`) in an index: no empty, `.`, `..` or
/// `.git` component in any spelling a file system may take for it, no symlink `.gitmodules`.
fn path_ok(path: &bstr::BStr, mode: gix_index::entry::Mode) -> bool {
    use gix_index::validate::path::component::{Mode, Options};
    let options = Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    let mut parts = path.split_str("/").peekable();
    while let Some(part) = parts.next() {
        let leaf = parts.peek().is_none();
        let kind = (leaf && mode == gix_index::entry::Mode::SYMLINK).then_some(Mode::Symlink);
        if gix_index::validate::path::component(part.as_bstr(), kind, options).is_err() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// An index git writes for a repository holding `names`, each renamed after by `renames`
    /// (same length, so the bytes stay an index once its checksum is made again).
    fn index_of(names: &[&str], renames: &[(&str, &str)]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        };
        git(&["init", "-q"]);
        for n in names {
            let p = dir.path().join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        git(&["add", "-A"]);
        let mut bytes = std::fs::read(dir.path().join(".git/index")).unwrap();
        for (from, to) in renames {
            assert_eq!(from.len(), to.len());
            let at = bytes
                .find(from.as_bytes())
                .expect("the name is in the index");
            bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
        }
        let body = bytes.len() - 20;
        let sum = sha1_of(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum);
        bytes
    }

    fn sha1_of(data: &[u8]) -> [u8; 20] {
        let mut h = gix_index::hash::hasher(gix_index::hash::Kind::Sha1);
        h.update(data);
        let id = h.try_finalize().unwrap();
        id.as_bytes().try_into().unwrap()
    }

    #[test]
    fn an_index_git_wrote_passes() {
        let bytes = index_of(&["a.txt", "src/lib.rs", "docs/x/y.md", ".gitignore"], &[]);
        assert_eq!(check(&bytes), Ok(()));
    }

    #[test]
    fn entries_git_would_never_enter_are_refused() {
        for (from, to) in [
            ("xgit/hooks/post-checkout", ".git/hooks/post-checkout"),
            ("xGIT/config", ".GIT/config"),
            ("sub/xgit/hooks/pre-commit", "sub/.git/hooks/pre-commit"),
            ("xx/escape", "../escape"),
            ("git~1x/config", "git~1/xconfig"),
            ("a/b", "./b"),
        ] {
            let bytes = index_of(&[from], &[(from, to)]);
            match check(&bytes) {
                Err(BadIndex::Paths(p)) => assert!(p[0].contains(to), "{p:?}"),
                other => panic!("{to}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_is_not_an_index_passes_and_garbage_that_claims_to_be_is_refused() {
        assert_eq!(check(b"0123456789abcdef0123456789abcdef01234567\n"), Ok(()));
        assert_eq!(check(b""), Ok(()));
        assert!(matches!(
            check(b"DIRC\0\0\0\x02\xff\xff\xff\xff"),
            Err(BadIndex::Unparsed(_))
        ));
        let mut cut = index_of(&["a.txt"], &[]);
        cut.truncate(40);
        assert!(matches!(check(&cut), Err(BadIndex::Unparsed(_))));
    }
}
