//! `vault/system-manifest.json`: the SHA-256 of every file under `system/`. `clawfs mount`
//! compares `system/` with it and refuses to serve a store whose system files changed behind
//! ClawFS's back; the commands that change a system file ([`install`]) record its new hash.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};

use super::{sha256_fd, IntegrityError};
use clawfs_store::beneath::{self, FileMode};

/// The manifest, relative to the store root (in root's `vault/`, not served through the
/// mount's `vault/`, which shows secrets only).
pub const MANIFEST: &str = "vault/system-manifest.json";

/// `system/`, relative to the store root.
const SYSTEM: &str = "system";

/// How deep `system/` may nest; deeper is reported, not followed.
const MAX_DEPTH: usize = 16;

/// What the seal remembers of the signed books (`super::seal`): their high-water marks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HighWater {
    /// Each document's latest signed version, by spec id.
    pub specs: BTreeMap<String, u32>,
    /// Each added tool's latest published version (`X.Y.Z`), by tool id.
    pub tools: BTreeMap<String, String>,
}

/// `vault/system-manifest.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Format version (1).
    pub version: u32,
    /// When it was last written (RFC 3339).
    pub updated_at: String,
    /// `sha256:<hex>` of each file, by path relative to `system/`.
    pub files: BTreeMap<String, String>,
    /// What the signed books held when the manifest was sealed ([`super::seal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub book: Option<HighWater>,
    /// `hmac-sha256:<hex>` under the vault's integrity key ([`super::seal`]); dropped by every
    /// change, set again by sealing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

/// How `system/` differs from the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Difference {
    /// The file's bytes changed.
    Changed {
        /// Relative to `system/`.
        path: String,
    },
    /// The manifest names it; it is gone.
    Missing {
        /// Relative to `system/`.
        path: String,
    },
    /// It is there; the manifest does not name it.
    Unexpected {
        /// Relative to `system/`.
        path: String,
    },
    /// Not a regular file or folder (a symlink, a FIFO, ...), nested too deep, or named with
    /// bytes that are not UTF-8.
    NotAFile {
        /// Relative to `system/`.
        path: String,
    },
    /// The store has no manifest (`clawfs system update --all` records one).
    NoManifest,
    /// The vault is set up but the manifest carries no seal: it was written without the vault's
    /// key (`clawfs system seal`, with the vault unlocked, seals what an admin has checked).
    NotSealed,
    /// The seal does not hold: the manifest was changed by someone without the vault's key.
    SealBroken,
    /// A signed book lost entries the seal remembers: a document or tool rolled back.
    RolledBack {
        /// Which, and how.
        what: String,
    },
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Difference::Changed { path } => write!(f, "system/{path}: changed"),
            Difference::Missing { path } => write!(f, "system/{path}: missing"),
            Difference::Unexpected { path } => write!(f, "system/{path}: not in the manifest"),
            Difference::NotAFile { path } => {
                write!(
                    f,
                    "system/{path}: not a regular file (or nested too deep, or not UTF-8)"
                )
            }
            Difference::NoManifest => write!(
                f,
                "{MANIFEST} is missing (`clawfs system update --all` records system/ as it is)"
            ),
            Difference::NotSealed => write!(
                f,
                "{MANIFEST} is not sealed by the vault (`clawfs system seal` seals it as it is, once checked)"
            ),
            Difference::SealBroken => write!(
                f,
                "{MANIFEST}: its seal does not hold: it was changed by someone without the vault's key"
            ),
            Difference::RolledBack { what } => write!(f, "rolled back: {what}"),
        }
    }
}

/// What `system/` holds now: the hash of each regular file, and the paths of anything else.
pub struct Scan {
    /// `sha256:<hex>` by path relative to `system/`.
    pub files: BTreeMap<String, String>,
    /// Entries that are neither regular files nor folders, or are nested too deep.
    pub odd: Vec<String>,
}

/// Hashes every file under `system/` of the store whose root is `store`.
pub fn scan(store: BorrowedFd<'_>) -> Result<Scan, IntegrityError> {
    let mut out = Scan {
        files: BTreeMap::new(),
        odd: Vec::new(),
    };
    super::walk(store, SYSTEM, MAX_DEPTH, &mut |rel, file| {
        match file {
            Some((dir, name)) => {
                let what = format!("{SYSTEM}/{rel}");
                let fd = beneath::open_file(dir, Path::new(name), OFlags::RDONLY)
                    .map_err(IntegrityError::io(&what))?;
                let sum = sha256_fd(fd.as_fd()).map_err(IntegrityError::io(what))?;
                out.files.insert(rel.to_string(), format!("sha256:{sum}"));
            }
            None => out.odd.push(rel.to_string()),
        }
        Ok(())
    })?;
    Ok(out)
}

/// The manifest of the store whose root is `store` (`None` if it has none yet).
pub fn load(store: BorrowedFd<'_>) -> Result<Option<Manifest>, IntegrityError> {
    super::read_json(store, MANIFEST)
}

/// How `system/` differs from `manifest`, sorted by path.
pub fn compare(manifest: &Manifest, now: &Scan) -> Vec<Difference> {
    let mut out = Vec::new();
    for (path, sum) in &manifest.files {
        match now.files.get(path) {
            None if now.odd.contains(path) => {}
            None => out.push(Difference::Missing { path: path.clone() }),
            Some(actual) if actual != sum => out.push(Difference::Changed { path: path.clone() }),
            Some(_) => {}
        }
    }
    for path in now.files.keys() {
        if !manifest.files.contains_key(path) {
            out.push(Difference::Unexpected { path: path.clone() });
        }
    }
    for path in &now.odd {
        out.push(Difference::NotAFile { path: path.clone() });
    }
    out.sort_by(|a, b| path_of(a).cmp(path_of(b)));
    out
}

fn path_of(d: &Difference) -> &str {
    match d {
        Difference::Changed { path }
        | Difference::Missing { path }
        | Difference::Unexpected { path }
        | Difference::NotAFile { path } => path,
        Difference::RolledBack { what } => what,
        Difference::NoManifest | Difference::NotSealed | Difference::SealBroken => "",
    }
}

/// Where the store's `system/` stands against its manifest.
pub enum Verification {
    /// It matches.
    Intact,
    /// It differs, or there is no manifest.
    Tampered(Vec<Difference>),
}

/// Compares `system/` with the manifest. A missing manifest is a difference: recording one from
/// what `system/` holds is an admin's decision (`clawfs system update --all`), never implied.
pub fn verify(store: BorrowedFd<'_>) -> Result<Verification, IntegrityError> {
    let Some(manifest) = load(store)? else {
        return Ok(Verification::Tampered(vec![Difference::NoManifest]));
    };
    match compare(&manifest, &scan(store)?) {
        d if d.is_empty() => Ok(Verification::Intact),
        d => Ok(Verification::Tampered(d)),
    }
}

/// Records the present hashes of `paths` (relative to `system/`; a missing one is dropped
/// from the manifest), leaving every other entry as it was: an update of one file never
/// blesses a change made to another behind ClawFS's back. A store without a manifest gets one
/// of everything.
pub fn record(store: BorrowedFd<'_>, paths: &[&str], now: &str) -> Result<(), IntegrityError> {
    let mut manifest = match load(store)? {
        Some(m) => m,
        None => Manifest {
            version: 1,
            updated_at: String::new(),
            files: scan(store)?.files,
            book: None,
            seal: None,
        },
    };
    for p in paths {
        let what = format!("{SYSTEM}/{p}");
        match beneath::open_file(store, &Path::new(SYSTEM).join(p), OFlags::RDONLY) {
            Ok(fd) => {
                let sum = sha256_fd(fd.as_fd()).map_err(IntegrityError::io(what))?;
                manifest
                    .files
                    .insert(p.to_string(), format!("sha256:{sum}"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                manifest.files.remove(*p);
            }
            Err(e) => return Err(IntegrityError::io(what)(e)),
        }
    }
    manifest.updated_at = now.to_string();
    // Changed: sealed again by whoever changed it, with the vault's key.
    manifest.seal = None;
    save(store, &manifest)
}

/// Writes the manifest from everything `system/` holds now (a new store).
pub fn record_all(store: BorrowedFd<'_>, now: &str) -> Result<(), IntegrityError> {
    let files = scan(store)?.files;
    save(
        store,
        &Manifest {
            version: 1,
            updated_at: now.to_string(),
            files,
            book: None,
            seal: None,
        },
    )
}

/// Installs `content` as `system/<rel>` (mode `mode`, root's; folders made 0555) and records
/// its hash in the manifest. The one way ClawFS changes a system file.
pub fn install(
    store: BorrowedFd<'_>,
    rel: &str,
    content: &[u8],
    mode: u32,
    now: &str,
) -> Result<(), IntegrityError> {
    let SystemFile {
        rel,
        dir,
        name,
        what,
    } = system_file(rel)?;
    let dir = beneath::create_dir_all(store, &dir, 0o555, Some((0, 0)))
        .map_err(IntegrityError::io(&what))?;
    beneath::write_atomic(
        dir.as_fd(),
        &name.to_string_lossy(),
        content,
        FileMode::mode(mode),
    )
    .map_err(IntegrityError::io(&what))?;
    record(store, &[&rel], now)
}

/// A file of `system/` named by a checked path.
struct SystemFile {
    /// The path relative to `system/`.
    rel: String,
    /// Its folder, from the store root.
    dir: std::path::PathBuf,
    /// Its name.
    name: std::ffi::OsString,
    /// How messages name it.
    what: String,
}

fn system_file(rel: &str) -> Result<SystemFile, IntegrityError> {
    let rel = check_system_path(rel)?;
    let path = Path::new(SYSTEM).join(&rel);
    Ok(SystemFile {
        dir: path.parent().expect("under system/").to_path_buf(),
        name: path.file_name().expect("a name").to_os_string(),
        what: format!("{SYSTEM}/{rel}"),
        rel,
    })
}

/// Removes `system/<rel>` and its manifest entry.
pub fn remove(store: BorrowedFd<'_>, rel: &str, now: &str) -> Result<(), IntegrityError> {
    let SystemFile {
        rel,
        dir,
        name,
        what,
    } = system_file(rel)?;
    let dir = beneath::open_dir(store, &dir).map_err(IntegrityError::io(&what))?;
    match rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(IntegrityError::io(what)(e.into())),
    }
    record(store, &[&rel], now)
}

/// Checks that `system/<rel>`, whose bytes are `bytes` (`None`: missing), is as the manifest
/// records it, before the daemon or a command trusts it. A store without a manifest trusts
/// nothing.
pub fn check_recorded(
    store: BorrowedFd<'_>,
    rel: &str,
    bytes: Option<&[u8]>,
) -> Result<(), IntegrityError> {
    use sha2::Digest;
    let manifest = load(store)?.ok_or_else(|| {
        IntegrityError::Mismatch(format!(
            "{MANIFEST} is missing: system/{rel} is not trusted"
        ))
    })?;
    let actual = bytes.map(|b| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b))));
    match manifest.files.get(rel) == actual.as_ref() {
        true => Ok(()),
        false => Err(IntegrityError::Mismatch(format!(
            "system/{rel} is not as {MANIFEST} records it (install it with `clawfs system update`)"
        ))),
    }
}

pub(super) fn save(store: BorrowedFd<'_>, manifest: &Manifest) -> Result<(), IntegrityError> {
    let dir = beneath::open_dir(store, Path::new("vault")).map_err(IntegrityError::io("vault"))?;
    beneath::write_atomic(
        dir.as_fd(),
        "system-manifest.json",
        &super::to_pretty(manifest),
        FileMode::mode(0o600),
    )
    .map_err(IntegrityError::io(MANIFEST))
}

/// A path under `system/`: relative, plain names only.
pub fn check_system_path(rel: &str) -> Result<String, IntegrityError> {
    let rel = rel.strip_prefix("system/").unwrap_or(rel);
    // What the manifest's own walk accepts (a file it refuses would refuse the next mount),
    // and names that print on one line.
    let ok = !rel.is_empty()
        && rel.split('/').count() <= MAX_DEPTH
        && !rel.chars().any(char::is_control)
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.starts_with('.'));
    match ok {
        true => Ok(rel.to_string()),
        false => Err(IntegrityError::Refused(format!(
            "{rel:?} is not a path under system/: at most {MAX_DEPTH} plain names separated by '/', none starting with '.' or holding control characters"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only paths the manifest's own walk accepts, printable on one line.
    #[test]
    fn system_paths_are_plain_shallow_and_printable() {
        assert_eq!(check_system_path("system/a/b.json").unwrap(), "a/b.json");
        let deep = vec!["d"; MAX_DEPTH + 1].join("/");
        for bad in [deep.as_str(), "a\nb.json", "a/../b", ".hidden", "a//b", ""] {
            assert!(check_system_path(bad).is_err(), "{bad:?}");
        }
    }

    fn store() -> (tempfile::TempDir, std::os::fd::OwnedFd) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("system/sub")).unwrap();
        std::fs::create_dir_all(dir.path().join("vault")).unwrap();
        std::fs::write(dir.path().join("system/a.toml"), "a").unwrap();
        std::fs::write(dir.path().join("system/sub/b.json"), "{}").unwrap();
        let fd = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        (dir, fd)
    }

    #[test]
    fn records_then_catches_every_kind_of_change() {
        let (dir, fd) = store();
        let Verification::Tampered(d) = verify(fd.as_fd()).unwrap() else {
            panic!("a missing manifest passed")
        };
        assert_eq!(d, vec![Difference::NoManifest]);
        record_all(fd.as_fd(), "t0").unwrap();
        assert!(matches!(verify(fd.as_fd()).unwrap(), Verification::Intact));
        let root = dir.path().join("system");
        std::fs::write(root.join("a.toml"), "b").unwrap();
        std::fs::remove_file(root.join("sub/b.json")).unwrap();
        std::fs::write(root.join("new"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        let Verification::Tampered(d) = verify(fd.as_fd()).unwrap() else {
            panic!("not caught")
        };
        assert_eq!(
            d,
            vec![
                Difference::Changed {
                    path: "a.toml".into()
                },
                Difference::NotAFile {
                    path: "link".into()
                },
                Difference::Unexpected { path: "new".into() },
                Difference::Missing {
                    path: "sub/b.json".into()
                },
            ]
        );
    }

    #[test]
    fn install_records_only_what_it_installs() {
        let (dir, fd) = store();
        record_all(fd.as_fd(), "t0").unwrap();
        std::fs::write(dir.path().join("system/a.toml"), "tampered").unwrap();
        install(fd.as_fd(), "sub/b.json", b"[1]", 0o444, "t1").unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("system/sub/b.json")).unwrap(),
            b"[1]"
        );
        let Verification::Tampered(d) = verify(fd.as_fd()).unwrap() else {
            panic!("the unrelated change was blessed")
        };
        assert_eq!(
            d,
            vec![Difference::Changed {
                path: "a.toml".into()
            }]
        );
        for bad in ["", "../x", "a/../b", ".hidden", "/abs"] {
            assert!(install(fd.as_fd(), bad, b"x", 0o444, "t").is_err(), "{bad}");
        }
    }
}
