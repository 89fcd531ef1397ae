//! Namespace paths: where a request lands in the ClawFS tree, as the policy sees it.
//!
//! An [`NsPath`] is absolute (relative to the mount root), made of validated components, and
//! never contains `.` or `..`: the daemon builds it from its inode table (the real location after
//! lookup), never from a string the caller chose, so there is nothing left to resolve.

use std::ffi::OsStr;
use std::fmt;

/// Why a string or a list of names is not a namespace path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NsPathError {
    /// The path does not start with `/`.
    #[error("namespace path {0:?} must start with '/'")]
    NotAbsolute(String),
    /// A component is empty (`//`), `.` or `..`, or holds `/` or NUL.
    #[error("namespace path component {0:?} is not allowed (empty, '.', '..', or containing '/' or NUL)")]
    BadComponent(String),
}

/// An absolute path in the ClawFS namespace, e.g. `/workspaces/default/notes.md`.
///
/// Components are free-form (files inside workspaces have any name) but never empty, `.`, `..`,
/// or containing `/` or NUL. Names that are not UTF-8 are decoded lossily: every name the policy
/// compares against (areas, agents, workspaces, secrets, protected names) is valid UTF-8 without
/// U+FFFD, so a lossy component matches one of them exactly when the original does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NsPath {
    parts: Vec<String>,
}

fn check_component(c: &str) -> Result<(), NsPathError> {
    if c.is_empty() || c == "." || c == ".." || c.contains('/') || c.contains('\0') {
        return Err(NsPathError::BadComponent(c.to_string()));
    }
    Ok(())
}

impl NsPath {
    /// The mount root, `/`.
    pub fn root() -> NsPath {
        NsPath::default()
    }

    /// Parses `/a/b/c`. A single trailing `/` is accepted (`/workspaces/`); `//`, `.` and `..`
    /// are refused, not normalised.
    pub fn parse(s: &str) -> Result<NsPath, NsPathError> {
        let rest = s
            .strip_prefix('/')
            .ok_or_else(|| NsPathError::NotAbsolute(s.to_string()))?;
        if rest.is_empty() {
            return Ok(NsPath::root());
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let parts = rest
            .split('/')
            .map(|c| check_component(c).map(|()| c.to_string()))
            .collect::<Result<_, _>>()?;
        Ok(NsPath { parts })
    }

    /// Builds a path from the names leading to a node, mount root first.
    pub fn from_components<I, S>(names: I) -> Result<NsPath, NsPathError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        NsPath::root().join_all(names)
    }

    /// This path with each of `names` joined in turn, as [`NsPath::join`] joins one: in time
    /// linear in the names (a deep path is not copied once per component).
    pub fn join_all<I, S>(mut self, names: I) -> Result<NsPath, NsPathError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for n in names {
            let name = escape_name(n.as_ref());
            check_component(&name)?;
            self.parts.push(name);
        }
        Ok(self)
    }

    /// This path with one more component: a file name as it is when it is UTF-8 without a
    /// backslash, else escaped ([`escape_name`]), so that two names never make one path.
    pub fn join(&self, name: impl AsRef<OsStr>) -> Result<NsPath, NsPathError> {
        let name = escape_name(name.as_ref());
        check_component(&name)?;
        let mut parts = self.parts.clone();
        parts.push(name);
        Ok(NsPath { parts })
    }

    /// The parent directory; the root is its own parent.
    pub fn parent(&self) -> NsPath {
        let mut parts = self.parts.clone();
        parts.pop();
        NsPath { parts }
    }

    /// The last component, `None` for the root.
    pub fn file_name(&self) -> Option<&str> {
        self.parts.last().map(String::as_str)
    }

    /// The components, mount root first (none for the root).
    pub fn components(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.parts.iter().map(String::as_str)
    }

    /// How many components the path has (0 for the root).
    pub fn depth(&self) -> usize {
        self.parts.len()
    }

    /// Whether this is the mount root.
    pub fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The component at `i` (0 is the area name), if the path is that deep.
    pub fn get(&self, i: usize) -> Option<&str> {
        self.parts.get(i).map(String::as_str)
    }
}

impl fmt::Display for NsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.parts.is_empty() {
            return f.write_str("/");
        }
        for p in &self.parts {
            write!(f, "/{p}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for NsPath {
    type Err = NsPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NsPath::parse(s)
    }
}

/// A file name as a path component: as it is when it is UTF-8 without a backslash; else with
/// each backslash doubled and each byte that is not UTF-8 written `\xNN`. Injective (only an
/// escaped name holds a backslash), so the audit trail names exactly the file it means, where
/// a lossy conversion would give `\xff.md` and `\xfe.md` one name.
pub fn escape_name(name: &OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.contains('\\') => return s.to_string(),
        _ => {}
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn parses_and_displays() {
        let p = NsPath::parse("/workspaces/default/Project Plan.md").unwrap();
        assert_eq!(p.depth(), 3);
        assert_eq!(p.get(0), Some("workspaces"));
        assert_eq!(p.file_name(), Some("Project Plan.md"));
        assert_eq!(p.to_string(), "/workspaces/default/Project Plan.md");
        assert_eq!(p.parent().to_string(), "/workspaces/default");
        assert!(NsPath::parse("/").unwrap().is_root());
        assert_eq!(NsPath::parse("/agents/").unwrap().to_string(), "/agents");
        assert_eq!(NsPath::root().parent(), NsPath::root());
    }

    #[test]
    fn refuses_traversal_and_junk() {
        for bad in [
            "", "agents", "/a//b", "/a/./b", "/a/../b", "/..", "/a/b\0c", "//",
        ] {
            assert!(NsPath::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(NsPath::root().join("..").is_err());
        assert!(NsPath::root().join("a/b").is_err());
        assert!(NsPath::root().join("").is_err());
    }

    #[test]
    fn builds_from_os_names() {
        let p = NsPath::from_components([
            OsStr::new("workspaces"),
            OsStr::new("default"),
            OsStr::from_bytes(b"caf\xe9.md"),
        ])
        .unwrap();
        assert_eq!(p.depth(), 3);
        assert_eq!(p.file_name(), Some("caf\\xe9.md"));
    }

    #[test]
    fn names_that_are_not_plain_utf8_are_escaped_one_to_one() {
        use std::os::unix::ffi::OsStrExt;
        let name = |b: &[u8]| escape_name(OsStr::from_bytes(b));
        assert_eq!(name(b"notes.md"), "notes.md");
        assert_eq!(name(b"\xff\xfe.md"), "\\xff\\xfe.md");
        assert_eq!(name(b"\\xff"), "\\\\xff");
        assert_ne!(name(b"\xff"), name(b"\\xff"));
        assert_ne!(name(b"\xff"), name("\u{fffd}".as_bytes()));
        assert_eq!(
            NsPath::root()
                .join(OsStr::from_bytes(b"a\xc0"))
                .unwrap()
                .to_string(),
            "/a\\xc0"
        );
    }
}
