//! Users and groups, as the system's name service knows them (`getpwnam_r` and friends: local
//! files, and LDAP or SSSD where the host uses them).

/// A user account: its login name, uid and primary group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The login name.
    pub name: String,
    /// The uid.
    pub uid: u32,
    /// The primary group's gid.
    pub gid: u32,
}

impl From<nix::unistd::User> for Account {
    fn from(u: nix::unistd::User) -> Self {
        Account {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }
    }
}

/// The account named `name`, if there is one.
pub fn user_named(name: &str) -> Option<Account> {
    nix::unistd::User::from_name(name).ok()?.map(Account::from)
}

/// The account of `uid`, if it has one.
pub fn user_of(uid: u32) -> Option<Account> {
    nix::unistd::User::from_uid(uid.into())
        .ok()?
        .map(Account::from)
}

/// The login name of `uid`, or the number when it has no account.
pub fn user_name(uid: u32) -> String {
    user_of(uid).map_or_else(|| uid.to_string(), |a| a.name)
}

/// The gid of the group named `name`, if it exists.
pub fn group_id(name: &str) -> Option<u32> {
    Some(nix::unistd::Group::from_name(name).ok()??.gid.as_raw())
}

/// The name of the group `gid`, if it has one.
pub fn group_name(gid: u32) -> Option<String> {
    Some(nix::unistd::Group::from_gid(gid.into()).ok()??.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known_both_ways() {
        let root = user_named("root").expect("every system has root");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(user_of(0), Some(root));
        assert_eq!(user_name(0), "root");
        assert_eq!(user_name(4_000_000_000), "4000000000");
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_name(0).as_deref(), Some("root"));
        assert_eq!(user_named("no-such-user-here"), None);
    }
}
