//! File permissions as the caller meets them: who the call runs as ([`CallerIds`]), what
//! `list_allowed` says of them, and the refusal that names a file's owner, group and mode and
//! what would let the caller write it.
//!
//! The policy's `read`/`write` globs are only half of what decides a write: the tools act on the
//! store with the caller's uid, gid and groups, so each file's mode applies too, exactly as to
//! any process of the caller's.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use crate::error::ToolError;
use crate::ToolRoot;

/// Who a call runs as: the ids the filesystem checks each file's owner, group and mode against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallerIds {
    /// The caller's uid.
    pub uid: u32,
    /// The caller's primary gid.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

/// A user or group id to name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    /// A uid.
    User(u32),
    /// A gid.
    Group(u32),
}

/// Names an id for messages (the daemon reads the system's user and group databases); `None`
/// shows the number alone.
pub type IdNames = Arc<dyn Fn(Id) -> Option<String> + Send + Sync>;

/// What `list_allowed` says of file permissions: they apply on top of `read` and `write`.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct FilePermissions {
    /// Always true: each file's and folder's owner, group and mode apply as well as `read` and
    /// `write`.
    pub apply: bool,
    /// The uid they are checked against, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The primary gid, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Every group of the caller's, named where the system names it (`clawos-agents (990)`).
    pub groups: Vec<String>,
    /// What this means for a write, in a sentence.
    pub note: String,
}

impl ToolRoot {
    /// The name of `id`, or its number when it has none.
    fn name(&self, id: Id) -> String {
        let n = match id {
            Id::User(n) | Id::Group(n) => n,
        };
        self.id_names
            .as_ref()
            .and_then(|f| f(id))
            .unwrap_or_else(|| n.to_string())
    }

    /// `name (id)`, or the id alone when it has no name.
    fn named(&self, id: Id) -> String {
        let n = match id {
            Id::User(n) | Id::Group(n) => n,
        };
        match self.name(id) {
            name if name == n.to_string() => name,
            name => format!("{name} ({n})"),
        }
    }

    /// The caller's groups, primary first, each named.
    fn group_names(&self, ids: &CallerIds) -> Vec<String> {
        std::iter::once(ids.gid)
            .chain(ids.groups.iter().copied().filter(|g| *g != ids.gid))
            .map(|g| self.named(Id::Group(g)))
            .collect()
    }

    /// What `list_allowed` says of file permissions for this caller.
    pub(crate) fn file_permissions(&self) -> FilePermissions {
        let ids = self.caller.as_ref();
        let who = match ids {
            Some(ids) => format!(
                "uid {}, groups {}",
                self.named(Id::User(ids.uid)),
                self.group_names(ids).join(", ")
            ),
            None => "your uid and groups".into(),
        };
        FilePermissions {
            apply: true,
            uid: ids.map(|i| i.uid),
            gid: ids.map(|i| i.gid),
            groups: ids.map(|i| self.group_names(i)).unwrap_or_default(),
            note: format!(
                "read and write list what your policy allows. Each file's and folder's owner, group and mode apply as well, checked against {who}: a file whose mode does not let you write it (e.g. another user's 0644 file) is refused even where write matches, and the refusal names its owner, group and mode and what would let you write it."
            ),
        }
    }

    /// The refusal of `action` (`writing 'notes.md'`) by the permissions of `what` (`the file`,
    /// `its folder`, shown as `path`), whose status is `m`: its owner, group and mode, who the
    /// caller is, and what would let it write. The group suggested for the caller is `like`
    /// (the group of the folder it is in) when the caller is in it.
    pub(crate) fn refused_by_mode(
        &self,
        action: &str,
        (what, path): (&str, &str),
        m: &Metadata,
        like: Option<u32>,
    ) -> ToolError {
        let mode = m.mode() & 0o7777;
        let owner = self.named(Id::User(m.uid()));
        let group = self.named(Id::Group(m.gid()));
        let head = format!(
            "{action} is refused by the permissions of {what} ({path}), not by your policy: owner {owner}, group {group}, mode {mode:04o} ({}).",
            symbolic(mode)
        );
        let Some(ids) = &self.caller else {
            return ToolError::Denied(format!(
                "{head} Its owner or an admin can let you write it (chmod, chgrp, chown); or write your text to a new file."
            ));
        };
        let you = format!(
            "You are uid {}, groups {}",
            self.named(Id::User(ids.uid)),
            self.group_names(ids).join(", ")
        );
        let fix = if ids.uid == m.uid() {
            format!(
                "{you}: you own it, and its mode gives its owner no write; `chmod u+w {path}` lets you write it."
            )
        } else if ids.gid == m.gid() || ids.groups.contains(&m.gid()) {
            format!(
                "{you}: you are in its group, and its mode gives the group no write; its owner {owner} or an admin can let you write it with `chmod g+w {path}`. Or write your text to a new file."
            )
        } else {
            let yours = like
                .filter(|g| ids.groups.contains(g))
                .or(ids.groups.last().copied())
                .unwrap_or(ids.gid);
            format!(
                "{you}: you are neither its owner nor in its group, and its mode gives others no write. Its owner {owner} or an admin can let you write it by giving it a group of yours with group write (`chgrp {} {path} && chmod g+w {path}`), or by giving it to you (`chown {} {path}`). Or write your text to a new file.",
                self.name(Id::Group(yours)),
                self.name(Id::User(ids.uid))
            )
        };
        ToolError::Denied(format!("{head} {fix}"))
    }
}

/// `rw-r--r--` for 0644 (set-id and sticky bits shown as `ls -l` does).
fn symbolic(mode: u32) -> String {
    let mut s = String::with_capacity(9);
    for (shift, special, set) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => set,
            (false, true) => set.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn symbolic_modes() {
        assert_eq!(super::symbolic(0o644), "rw-r--r--");
        assert_eq!(super::symbolic(0o1777), "rwxrwxrwt");
        assert_eq!(super::symbolic(0o2750), "rwxr-s---");
        assert_eq!(super::symbolic(0o4600), "rwS------");
    }
}
