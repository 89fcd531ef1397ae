//! The policy as the kernel's own permission check sees it.
//!
//! The mount uses `default_permissions`: the kernel decides some things from the attributes
//! ClawFS reports without asking the daemon at all (an inotify watch, a path walk through
//! folders it has cached). Every agent is in the groups that own agent directories and
//! workspaces, so by mode alone the kernel would let any agent watch another agent's folder or a
//! workspace it has no grant to. The places the policy grants per agent therefore carry a POSIX
//! ACL with one entry per agent uid of the policy, saying exactly what the policy grants it
//! there; people keep the plain mode bits. A named entry overrides the group entry for that
//! user, so an agent in the owning group still gets only its grant. The mask lets every named
//! entry through: the policy, not the owner's `chmod`, decides what another agent gets (an
//! agent cannot shut `read_agents` out of its folder); the mode still decides for people.

use super::{Access, AgentName, Identity, NsPath, Policy};

/// Read permission in an ACL entry.
pub const ACL_READ: u16 = 4;
/// Write permission in an ACL entry.
pub const ACL_WRITE: u16 = 2;
/// Execute (search, for folders) permission in an ACL entry.
pub const ACL_EXECUTE: u16 = 1;

/// A place whose access the policy decides per agent, so whose ACL the kernel must see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Governed<'a> {
    /// `agents/<name>/`.
    AgentDir(&'a str),
    /// `workspaces/<name>/`.
    Workspace(&'a str),
    /// `vault/secrets/`: every agent may pass through (each secret decides), none may list it
    /// by the kernel's check (a watch there would name every secret read).
    SecretsDir,
    /// `vault/secrets/<name>`.
    Secret(&'a str),
}

impl Policy {
    /// What the kernel may grant each uid that acts as an agent at `place` (owned by `owner`,
    /// who keeps the ACL's owner entry), in uid order: `ACL_*` bits. The uids are the policy's
    /// (`uid`, `[uids]`) and `seen`, those runs were seen acting as (`clawfs run --user`); the
    /// policy's mapping wins. Root is never named.
    pub fn kernel_grants(
        &self,
        place: Governed<'_>,
        owner: u32,
        seen: &[(u32, String)],
    ) -> Vec<(u32, u16)> {
        let mut uids: std::collections::BTreeMap<u32, AgentName> = seen
            .iter()
            .filter_map(|(u, a)| Some((*u, AgentName::new(a).ok()?)))
            .collect();
        uids.extend(self.uid_map.iter().map(|(u, a)| (*u, a.clone())));
        uids.into_iter()
            .filter(|&(u, _)| u != owner && u != 0)
            .map(|(u, agent)| (u, self.kernel_perms(&agent, place)))
            .collect()
    }

    fn kernel_perms(&self, agent: &AgentName, place: Governed<'_>) -> u16 {
        let who = Identity::Agent(agent.clone());
        let may = |access: Access, path: String| {
            NsPath::parse(&path).is_ok_and(|p| self.check(&who, access, &p).is_ok())
        };
        // Writes always reach the daemon (the kernel completes none alone), which refuses
        // them with its own errno and reason: a folder the agent may use at all is rwx to the
        // kernel, one it may not is nothing. Reads, watches and walks are what the kernel
        // decides alone.
        let folder = |dir: String| match may(Access::List, dir.clone())
            || may(Access::Create, format!("{dir}/x"))
        {
            true => ACL_READ | ACL_WRITE | ACL_EXECUTE,
            false => 0,
        };
        match place {
            Governed::AgentDir(name) => folder(format!("/agents/{name}")),
            Governed::Workspace(name) => folder(format!("/workspaces/{name}")),
            Governed::SecretsDir => ACL_EXECUTE,
            Governed::Secret(name) => match may(Access::Read, format!("/vault/secrets/{name}")) {
                true => ACL_READ,
                false => 0,
            },
        }
    }
}

/// The permission bits a node with a kernel ACL reports: the group bits are the ACL's mask
/// (`rwx`), as POSIX has it. The kernel consults an ACL only when a node's group bits are not
/// zero: an owner's `chmod g-rwx` must not turn the policy's entries off. The group's own
/// permission is the ACL's group entry, from the stored mode.
pub fn presented_perm(perm: u16) -> u16 {
    perm | 0o070
}

/// `system.posix_acl_access`, the name the kernel reads an access ACL by.
pub const POSIX_ACL_ACCESS: &str = "system.posix_acl_access";

/// The `system.posix_acl_access` value for a node of permission bits `mode` with the `named`
/// user entries (uid order, no duplicates): the kernel's xattr layout (version 2, then
/// little-endian tag, perm, id per entry, in tag order).
pub fn acl_xattr(mode: u32, named: &[(u32, u16)]) -> Vec<u8> {
    const VERSION: u32 = 2;
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const NO_ID: u32 = u32::MAX;
    let bits = |shift: u32| ((mode >> shift) & 7) as u16;
    let mut out = Vec::with_capacity(4 + 8 * (named.len() + 4));
    out.extend_from_slice(&VERSION.to_le_bytes());
    let mut entry = |tag: u16, perm: u16, id: u32| {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    };
    entry(USER_OBJ, bits(6), NO_ID);
    for &(uid, perm) in named {
        entry(USER, perm & 7, uid);
    }
    entry(GROUP_OBJ, bits(3), NO_ID);
    entry(MASK, 7, NO_ID);
    entry(OTHER, bits(0), NO_ID);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::parse(text).unwrap()
    }

    const TWO_AGENTS: &str = r#"
version = 1
[agents.a]
uid = 61001
[agents.b]
uid = 61002
read_agents = ["a"]
[agents.b.workspaces]
shared = "read"
[agents.a.workspaces]
shared = "read-write"
"#;

    #[test]
    fn grants_follow_the_policy_per_agent() {
        let p = policy(TWO_AGENTS);
        // a's folder: its owner is not named; b reads it.
        assert_eq!(
            p.kernel_grants(Governed::AgentDir("a"), 61001, &[]),
            vec![(61002, 7)]
        );
        // b's folder: a has no grant.
        assert_eq!(
            p.kernel_grants(Governed::AgentDir("b"), 61002, &[]),
            vec![(61001, 0)]
        );
        assert_eq!(
            p.kernel_grants(Governed::Workspace("shared"), 0, &[]),
            vec![(61001, 7), (61002, 7)]
        );
        assert_eq!(
            p.kernel_grants(Governed::Workspace("other"), 0, &[(1001, "b".into())]),
            vec![(1001, 0), (61001, 0), (61002, 0)]
        );
        assert_eq!(
            p.kernel_grants(Governed::SecretsDir, 0, &[]),
            vec![(61001, ACL_EXECUTE), (61002, ACL_EXECUTE)]
        );
    }

    #[test]
    fn the_xattr_is_the_kernels_layout() {
        let v = acl_xattr(0o750, &[(1000, 5)]);
        assert_eq!(&v[..4], &2u32.to_le_bytes());
        assert_eq!(v.len(), 4 + 8 * 5);
        // user::rwx, user:1000:r-x, group::r-x, mask::rwx, other::---
        let entries: Vec<(u16, u16, u32)> = v[4..]
            .chunks(8)
            .map(|c| {
                (
                    u16::from_le_bytes([c[0], c[1]]),
                    u16::from_le_bytes([c[2], c[3]]),
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                (1, 7, u32::MAX),
                (2, 5, 1000),
                (4, 5, u32::MAX),
                (0x10, 7, u32::MAX),
                (0x20, 0, u32::MAX)
            ]
        );
    }
}
