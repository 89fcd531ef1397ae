//! What must not change, and proof that it has not: the documents of `specs/` (SHA-256 and
//! Ed25519 signatures in `specs/signatures.json`), the files of `system/` (SHA-256 in
//! `vault/system-manifest.json`) and the public keys of the people who sign
//! (`system/signers.json`, itself one of the system files).
//!
//! Checking needs only public keys, so it works while the vault is locked; signing needs a
//! signer's private key, which lives in the vault as the secret `signer-<name>`.
//!
//! Everything here is reached by descriptor beneath the store root (`clawfs_store::beneath`): the
//! daemon checks what agents read, so a symlink planted in the store never redirects it.

pub mod registry;
pub mod seal;
pub mod signers;
pub mod specs;
pub mod system;

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use sha2::{Digest, Sha256};

/// An integrity check or change that failed, or was refused.
#[derive(Debug, thiserror::Error)]
pub enum IntegrityError {
    /// A file could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// Which file, relative to the store.
        what: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file that must be JSON of a known shape is not.
    #[error("{what} is not valid: {source}")]
    Json {
        /// Which file, relative to the store.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Content does not match what was recorded or signed.
    #[error("{0}")]
    Mismatch(String),
    /// A request that the rules refuse (an unknown signer, one signer approving twice, ...).
    #[error("{0}")]
    Refused(String),
}

impl IntegrityError {
    /// An I/O failure on `what` (a file relative to the store), as a `map_err` closure.
    pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> IntegrityError {
        let what = what.into();
        move |source| IntegrityError::Io { what, source }
    }

    pub(crate) fn json(
        what: impl Into<String>,
    ) -> impl FnOnce(serde_json::Error) -> IntegrityError {
        let what = what.into();
        move |source| IntegrityError::Json { what, source }
    }
}

/// The largest file of `system/`, `specs/` or their JSON indexes read whole (bigger is refused).
pub const MAX_FILE: u64 = 64 << 20;

/// The SHA-256 of everything `fd` holds, in lower-case hex, read with positioned reads so a
/// descriptor shared with others keeps its offset.
pub fn sha256_fd(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut hasher = Sha256::new();
    each_chunk(fd, u64::MAX, &mut |chunk| {
        hasher.update(chunk);
        Ok(())
    })?;
    Ok(hex::encode(hasher.finalize()))
}

/// Hands what `fd` holds to `each`, a chunk at a time, with positioned reads; more than `max`
/// bytes is refused (EFBIG).
fn each_chunk(
    fd: BorrowedFd<'_>,
    max: u64,
    each: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0u64;
    loop {
        let n = rustix::io::pread(fd, &mut buf, at)?;
        if n == 0 {
            return Ok(());
        }
        at += n as u64;
        if at > max {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        each(&buf[..n])?;
    }
}

/// Visits everything below the folder `top` of the store whose root is `store`, by descriptor
/// and in name order: `visit(rel, Some((dir, name)))` for a regular file (`rel` relative to
/// `top`, `dir` its open folder), `visit(rel, None)` for anything else that is not a folder
/// (a symlink, a FIFO, ...) and for folders deeper than `max_depth`. Nothing is followed.
pub(crate) fn walk(
    store: BorrowedFd<'_>,
    top: &str,
    max_depth: usize,
    visit: &mut Visit<'_>,
) -> Result<(), IntegrityError> {
    let dir =
        clawfs_store::beneath::open_dir(store, Path::new(top)).map_err(IntegrityError::io(top))?;
    walk_below(dir.as_fd(), top, "", max_depth, visit)
}

/// What [`walk`] calls for each entry.
pub(crate) type Visit<'a> =
    dyn FnMut(&str, Option<(BorrowedFd<'_>, &str)>) -> Result<(), IntegrityError> + 'a;

fn walk_below(
    dir: BorrowedFd<'_>,
    top: &str,
    prefix: &str,
    depth_left: usize,
    visit: &mut Visit<'_>,
) -> Result<(), IntegrityError> {
    use rustix::fs::{FileType, OFlags};
    let what = |rel: &str| format!("{top}/{rel}");
    let fail = |rel: &str| {
        let w = what(rel);
        move |e: rustix::io::Errno| IntegrityError::io(w)(e.into())
    };
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(dir).map_err(fail(prefix))? {
        let e = e.map_err(fail(prefix))?;
        match e.file_name().to_str() {
            Ok("." | "..") => {}
            Ok(name) => names.push(Ok(name.to_string())),
            // Reported, never opened by a lossy name that could be another file's.
            Err(_) => names.push(Err(e.file_name().to_string_lossy().into_owned())),
        }
    }
    names.sort();
    for name in names {
        let name = match name {
            Ok(name) => name,
            Err(lossy) => {
                visit(&join(prefix, &lossy), None)?;
                continue;
            }
        };
        let rel = join(prefix, &name);
        // Opened without following anything; what it is comes from the descriptor.
        let fd = match clawfs_store::beneath::open(dir, Path::new(&name), OFlags::PATH, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                visit(&rel, None)?;
                continue;
            }
            Err(e) => return Err(IntegrityError::io(what(&rel))(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(fail(&rel))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => visit(&rel, Some((dir, &name)))?,
            FileType::Directory if depth_left > 0 => {
                let sub = clawfs_store::beneath::open_dir(dir, Path::new(&name))
                    .map_err(IntegrityError::io(what(&rel)))?;
                walk_below(sub.as_fd(), top, &rel, depth_left - 1, visit)?;
            }
            _ => visit(&rel, None)?,
        }
    }
    Ok(())
}

fn join(prefix: &str, name: &str) -> String {
    match prefix {
        "" => name.to_string(),
        p => format!("{p}/{name}"),
    }
}

/// A sealed in-memory copy of what `fd` holds (at most [`MAX_FILE`] bytes), with the SHA-256
/// of its bytes, taken in the same pass: no one can change the copy, so its bytes stay the ones
/// hashed for as long as it is open.
pub fn sealed_copy(fd: BorrowedFd<'_>) -> io::Result<(std::fs::File, String)> {
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::io::Write;
    let copy = rustix::fs::memfd_create(
        "clawfs-verified",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut out = std::fs::File::from(copy);
    let mut hasher = Sha256::new();
    each_chunk(fd, MAX_FILE, &mut |chunk| {
        hasher.update(chunk);
        out.write_all(chunk)
    })?;
    rustix::fs::fcntl_add_seals(
        &out,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    Ok((out, hex::encode(hasher.finalize())))
}

/// Reads the JSON file `rel` beneath the store root `store`; `None` if it is missing.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    store: BorrowedFd<'_>,
    rel: &str,
) -> Result<Option<T>, IntegrityError> {
    let Some(bytes) = clawfs_store::beneath::read(store, Path::new(rel), MAX_FILE)
        .map_err(IntegrityError::io(rel))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(IntegrityError::json(rel))
}

/// One version of a file: inode, change time (seconds, nanoseconds) and size. A file replaced
/// atomically is a new inode.
pub(crate) type Stamp = (u64, i64, u64, i64);

pub(crate) fn stamp(st: &rustix::fs::Stat) -> Stamp {
    (st.st_ino, st.st_ctime, st.st_ctime_nsec, st.st_size)
}

/// The stamp of `rel` beneath the store root `store` (all zero if it cannot be reached).
pub(crate) fn stamp_of(store: BorrowedFd<'_>, rel: &str) -> Stamp {
    clawfs_store::beneath::open(store, Path::new(rel), rustix::fs::OFlags::PATH, 0)
        .and_then(|fd| Ok(rustix::fs::fstat(&fd)?))
        .map_or((0, 0, 0, 0), |st| stamp(&st))
}

/// Whether a file may be served, or why not.
pub type Verdict = Result<(), IntegrityError>;

/// Index files as parsed, with the stamps they were read at.
type Indexes<B> = ((Stamp, Stamp), std::sync::Arc<B>);

/// Two index files (a signatures file and the signers) as parsed, read again only when either
/// changed: what the daemon's checkers keep between opens. (A verdict per file would never be
/// reused: each open checks a fresh sealed copy.)
pub(crate) struct Indexed<B> {
    parsed: std::sync::Mutex<Option<Indexes<B>>>,
}

impl<B> Default for Indexed<B> {
    fn default() -> Self {
        Self {
            parsed: Default::default(),
        }
    }
}

impl<B> Indexed<B> {
    /// The index files `paths` (relative to the store root) as `load` parses them. They are read
    /// after their stamps are taken: one replaced in between is read under the older stamps,
    /// and read again next time, when the stamps differ.
    pub(crate) fn get(
        &self,
        store: BorrowedFd<'_>,
        paths: [&str; 2],
        load: impl FnOnce() -> Result<B, IntegrityError>,
    ) -> Result<std::sync::Arc<B>, IntegrityError> {
        let at = (stamp_of(store, paths[0]), stamp_of(store, paths[1]));
        if let Some((seen, parsed)) = lock(&self.parsed).as_ref() {
            if *seen == at {
                return Ok(std::sync::Arc::clone(parsed));
            }
        }
        let parsed = std::sync::Arc::new(load()?);
        *lock(&self.parsed) = Some((at, std::sync::Arc::clone(&parsed)));
        Ok(parsed)
    }
}

pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Pretty JSON with a final newline, the form every file here is written in.
pub fn to_pretty(value: &impl serde::Serialize) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(value).expect("serialisable");
    out.push(b'\n');
    out
}

/// Parses `bytes` as JSON in which no object gives a key twice. Parsers disagree on which of
/// two equal keys counts (serde_json keeps the last, others the first), so a file that is
/// signed or checked here must not leave the choice to whoever reads it next.
pub fn strict_json(bytes: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};

    struct Unique;
    impl<'de> Deserialize<'de> for Unique {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
            d.deserialize_any(Unique)
        }
    }
    impl<'de> Visitor<'de> for Unique {
        type Value = Unique;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_unit<E>(self) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Unique, A::Error> {
            while a.next_element::<Unique>()?.is_some() {}
            Ok(Unique)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Unique, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = a.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    return Err(A::Error::custom(format!("key \"{key}\" given twice")));
                }
                a.next_value::<Unique>()?;
            }
            Ok(Unique)
        }
    }
    serde_json::from_slice::<Unique>(bytes)?;
    serde_json::from_slice(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key given twice, at any depth, is refused; the same key in sibling objects is not.
    #[test]
    fn strict_json_refuses_a_key_given_twice() {
        assert!(strict_json(br#"{"a": 1, "b": [{"a": 2}, {"a": 3}]}"#).is_ok());
        for bad in [
            &br#"{"caps": ["r"], "caps": ["*"]}"#[..],
            br#"{"x": [{"k": 1, "k": 2}]}"#,
            br#"{"x": {"y": {"z": 1, "z": 1}}}"#,
        ] {
            let e = strict_json(bad).unwrap_err().to_string();
            assert!(e.contains("given twice"), "{e}");
        }
    }
}
