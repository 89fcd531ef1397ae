//! The access policy: who the callers are, what each agent may do where, and the pure decision
//! the FUSE adapter asks for on every call that reaches the daemon.
//!
//! The policy is a TOML file (`policy/default.toml`, documented in `policy/README.md`).
//! [`Policy::parse`] validates a whole file and reports every mistake with its line and column;
//! [`Policy::check`] answers "may `who` do `access` at `path`?" with no I/O, so it is cheap enough
//! for every open and can be tested exhaustively without a mount. Counting bytes and files for
//! quotas, cgroup lookups and writing denials belong to the daemon; this crate only decides.
//!
//! Admins and ordinary users keep plain POSIX semantics (the backing filesystem applies the mode
//! bits); the policy only tightens what ordinary users get through [`UsersMode`]. Agents get POSIX
//! *and* the rules below (docs/architecture.md §4).

mod decide;
pub mod kernel_acl;
mod parse;
mod path;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

pub use decide::{EveryRepoForeign, GitRepos};
pub use path::{NsPath, NsPathError};

use clawfs_store::names::check_system_name;

/// The policy shipped with ClawFS and installed by `clawfs init`.
pub const DEFAULT_POLICY_TOML: &str = include_str!("../default.toml");

/// Paths no grant of the default sandbox may cover: password and group shadows, sudo's rules,
/// SSH host keys, TLS private keys, PAM's password history, root's home, and ClawFS's default
/// store. The sandbox denies them to every agent, and a policy grant may not cover one.
pub const DEFAULT_DENY: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/root",
    "/var/lib/clawfs",
];

/// The only policy format version this build reads.
pub const POLICY_VERSION: i64 = 1;

/// Agent names that can never be used: `/agents/self` tells a caller who ClawFS thinks it is.
pub const RESERVED_AGENT_NAMES: [&str; 1] = ["self"];

/// Name prefix of ClawFS's own files; any component starting with it (in any case) is protected
/// from agents whatever the policy says.
pub const INTERNAL_PREFIX: &str = ".clawfs";

/// The names of the rules a [`Denial`] cites. They appear in denials, audit records and tool
/// errors, so they are stable.
pub mod rule {
    /// An agent writes only inside its own `/agents/<self>/` (P1.4 RULE-001).
    pub const RULE_001: &str = "RULE-001";
    /// Reading another agent's directory needs `read_agents` or `read_other_agents`.
    pub const AGENT_READ: &str = "AGENT-READ";
    /// `/agents/<self>/logs/` and `/agents/<self>/denials` are written by ClawFS only.
    pub const AGENT_LOGS: &str = "AGENT-LOGS";
    /// A protected name (`.git`, `.obsidian`, …, `.clawfs*`) in the path.
    pub const PROTECTED: &str = "PROTECTED";
    /// `/system`, `/specs` and (unless granted) `/tools` are read-only to agents.
    pub const READ_ONLY_ROOT: &str = "READ-ONLY-ROOT";
    /// The agent's grant on a workspace does not allow this.
    pub const WORKSPACE_GRANT: &str = "WORKSPACE-GRANT";
    /// Only admins and users create, remove or rename whole workspaces, or edit a workspace's
    /// `metadata.json` (agents change its settings through `user.clawfs.*` xattrs, validated).
    pub const WORKSPACE_ROOT: &str = "WORKSPACE-ROOT";
    /// Only granted secrets in `/vault/secrets/` are readable by an agent; nothing is writable.
    pub const VAULT_GRANT: &str = "VAULT-GRANT";
    /// The mount root holds only the six areas.
    pub const NAMESPACE: &str = "NAMESPACE";
    /// The caller was identified as an agent the policy does not list.
    pub const UNKNOWN_AGENT: &str = "UNKNOWN-AGENT";
    /// The policy's `users` mode restricts ordinary users on the writable roots.
    pub const USERS_MODE: &str = "USERS-MODE";
    /// The agent's byte or file quota would be exceeded.
    pub const QUOTA: &str = "QUOTA";
    /// A tool call refused by the policy (the message names the rule behind it).
    pub const TOOL_DENIED: &str = "TOOL-DENIED";
    /// One uid, one agent: a uid whose files are counted for an agent cannot act as another.
    pub const ONE_UID: &str = "ONE-UID";
    /// A caller holds as many open files and folders through the mount as it may, or callers
    /// together hold all the daemon keeps for them.
    pub const OPEN_FILES: &str = "OPEN-FILES";
    /// A caller has as many tool calls waiting for their turn as it may.
    pub const TOOL_CALLS: &str = "TOOL-CALLS";
}

// ---------------------------------------------------------------------------------------------
// Identities
// ---------------------------------------------------------------------------------------------

/// The name of an agent: `[a-z0-9-]+`, at most 64 bytes, no leading or trailing hyphen, not
/// `self` (P1.4 §2.2). Once built it is valid for the life of the value, whatever policy is in
/// force; whether the policy *knows* the agent is asked of [`Policy::agent`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentName(String);

impl AgentName {
    /// Validates `name` as an agent name.
    pub fn new(name: &str) -> Result<AgentName, clawfs_store::NameError> {
        let s = check_system_name(OsStr::new(name))?;
        if RESERVED_AGENT_NAMES.contains(&s) {
            return Err(clawfs_store::NameError::new(
                OsStr::new(s),
                "is reserved (/agents/self tells a caller who it is)",
            ));
        }
        Ok(AgentName(s.to_string()))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for AgentName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for AgentName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Who is calling, as far as the policy cares (docs/architecture.md §4). The daemon decides it per
/// request: cgroup → agent first, then [`Policy::identity_for_uid`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Identity {
    /// Root, the store's owner, or a uid listed in `admins`: POSIX only.
    Admin,
    /// A process of this agent: POSIX and the policy.
    Agent(AgentName),
    /// Anyone else: POSIX, tightened by the `users` mode.
    User {
        /// The caller's uid.
        uid: u32,
    },
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Admin => f.write_str("admin"),
            Identity::Agent(a) => write!(f, "agent {a}"),
            Identity::User { uid } => write!(f, "user {uid}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------------------------

/// What a call wants to do at a path. The adapter maps each FUSE operation to one or more of
/// these (see the table in `policy/README.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read a file's content, a symlink's target or an xattr (open for reading, readlink,
    /// getxattr, listxattr).
    Read,
    /// List a directory (opendir, readdir).
    List,
    /// Change an existing node's content or attributes (open for writing, truncate, setattr,
    /// setxattr, removexattr).
    Write,
    /// Make a new name at the path (create, mknod, mkdir, symlink; the destination of rename and
    /// link).
    Create,
    /// Remove the name at the path (unlink, rmdir; the source of rename).
    Delete,
}

impl Access {
    /// Whether this access leaves the tree unchanged.
    pub fn is_read(self) -> bool {
        matches!(self, Access::Read | Access::List)
    }

    /// The verb used in denial reasons.
    pub fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::List => "list",
            Access::Write => "modify",
            Access::Create => "create",
            Access::Delete => "delete",
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::List => "list",
            Access::Write => "write",
            Access::Create => "create",
            Access::Delete => "delete",
        })
    }
}

/// Which errno a denial becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DenyKind {
    /// `EACCES`: the caller has no right to this place.
    Access,
    /// `EPERM`: nobody of the caller's kind may do this here (protected names, ClawFS-written
    /// files, the fixed namespace).
    Permission,
    /// `EROFS`: the place is read-only to the caller (read-only roots, read grants).
    ReadOnly,
    /// `EDQUOT`: a quota would be exceeded.
    Quota,
    /// `EINVAL`: the caller may write here, but what it wrote is not valid (an identity
    /// document that does not validate).
    Invalid,
    /// `EMFILE`: the caller holds as many open files and folders through the mount as it may.
    CallerFiles,
    /// `ENFILE`: callers together hold all the open files and folders the daemon keeps for
    /// them.
    DaemonFiles,
    /// `ETXTBSY`: someone else holds the file open for writing, and it would become a program
    /// (a git hook) they could still change.
    Busy,
}

/// The errno a refusal of `kind` returns to the caller (also written in audit records).
pub fn errno_of(kind: DenyKind) -> i32 {
    match kind {
        DenyKind::Access => libc::EACCES,
        DenyKind::Permission => libc::EPERM,
        DenyKind::ReadOnly => libc::EROFS,
        DenyKind::Quota => libc::EDQUOT,
        DenyKind::Invalid => libc::EINVAL,
        DenyKind::CallerFiles => libc::EMFILE,
        DenyKind::DaemonFiles => libc::ENFILE,
        DenyKind::Busy => libc::ETXTBSY,
    }
}

impl clawfs_store::ToErrno for Denial {
    fn errno(&self) -> i32 {
        errno_of(self.kind)
    }
}

/// A refusal: the rule that refused, one sentence the caller can act on, and the errno kind.
/// Written as-is to `/agents/<self>/denials`, the audit trail and tool errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Denial {
    /// The rule's stable name, one of [`rule`].
    pub rule: &'static str,
    /// What was refused and what the caller may do instead; ends with the rule in parentheses.
    pub reason: String,
    /// Which errno the refusal maps to.
    pub kind: DenyKind,
}

impl Denial {
    fn new(rule: &'static str, kind: DenyKind, reason: String) -> Denial {
        Denial {
            rule,
            reason: format!("{reason} ({rule})"),
            kind,
        }
    }

    /// An open refused because the caller holds `limit` open files and folders through the
    /// mount.
    pub fn caller_files(limit: u64) -> Denial {
        Denial::new(
            rule::OPEN_FILES,
            DenyKind::CallerFiles,
            format!("you hold {limit} open files and folders on this mount, as many as one caller may: close some first (`clawfs mount --max-open-per-caller`)"),
        )
    }

    /// An open refused because callers together hold the `limit` open files and folders the
    /// daemon keeps for them.
    pub fn daemon_files(limit: u64) -> Denial {
        Denial::new(
            rule::OPEN_FILES,
            DenyKind::DaemonFiles,
            format!("callers together hold {limit} open files and folders on this mount, all the daemon keeps for them: try again once some are closed"),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Policy contents
// ---------------------------------------------------------------------------------------------

/// What ordinary users (not agents, not admins) get on the writable roots (`/agents`, `/tools`,
/// `/workspaces`, `/vault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UsersMode {
    /// Plain POSIX, like any Linux filesystem (the default).
    #[default]
    Posix,
    /// Reads and listings only (`EROFS` for everything else).
    ReadOnly,
    /// Nothing below the writable roots (`EACCES`); `/system` and `/specs` stay readable.
    None,
}

impl UsersMode {
    /// The spelling used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            UsersMode::Posix => "posix",
            UsersMode::ReadOnly => "read-only",
            UsersMode::None => "none",
        }
    }
}

/// An access level granted on a workspace or on `/tools`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grant {
    /// Nothing: not even a listing.
    None,
    /// Read files and list directories.
    Read,
    /// Read, create, modify and delete.
    ReadWrite,
}

impl Grant {
    /// The spelling used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::None => "none",
            Grant::Read => "read",
            Grant::ReadWrite => "read-write",
        }
    }

    /// Whether `access` is within this grant.
    pub fn allows(self, access: Access) -> bool {
        match self {
            Grant::None => false,
            Grant::Read => access.is_read(),
            Grant::ReadWrite => true,
        }
    }
}

/// Workspace grants: per workspace name, plus an optional `"*"` for every other workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceGrants {
    /// Grants by workspace name.
    pub named: BTreeMap<String, Grant>,
    /// The `"*"` entry: workspaces not named.
    pub others: Option<Grant>,
}

impl WorkspaceGrants {
    /// The grant these entries give `workspace`, if they say anything about it.
    pub fn get(&self, workspace: &str) -> Option<Grant> {
        self.named.get(workspace).copied().or(self.others)
    }
}

/// Limits on what an agent writes. [`Quota::UNLIMITED`] in a field means no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Bytes.
    pub bytes: u64,
    /// Files (and directories).
    pub files: u64,
}

impl Quota {
    /// The value of a field with no limit.
    pub const UNLIMITED: u64 = u64::MAX;

    /// No limit on anything.
    pub const NONE: Quota = Quota {
        bytes: Quota::UNLIMITED,
        files: Quota::UNLIMITED,
    };
}

/// Everything the policy says about one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSpec {
    /// The agent's name.
    pub name: AgentName,
    /// The uid `clawfs run` drops to; `None` when the policy gives none (then `--user` is
    /// needed). A process running as this uid is this agent (identity rule 2), except uid 0.
    pub uid: Option<u32>,
    /// The gid `clawfs run` drops to; defaults to `uid` when only that is given.
    pub gid: Option<u32>,
    /// Whether `uid`/`gid` may be 0. Never true unless the file says so.
    pub allow_root: bool,
    /// The agent's own workspace grants (before `[defaults]`; see [`Policy::workspace_grant`]).
    pub workspaces: WorkspaceGrants,
    /// Other agents whose directories this agent may read.
    pub read_agents: BTreeSet<AgentName>,
    /// `read_agents = ["*"]`: every other agent's directory is readable.
    pub read_all_agents: bool,
    /// Vault secrets this agent may read.
    pub secrets: BTreeSet<String>,
    /// The agent's quota, with `[defaults]` applied.
    pub quota: Quota,
    /// Access to `/tools` beyond the call interface: `Read` (the default) or `ReadWrite`.
    pub tools: Grant,
    /// The `[agents.NAME.sandbox]` section: what `clawfs run --sandbox` adds or requires.
    pub sandbox: SandboxSpec,
}

/// What `[agents.NAME.sandbox]` says about an agent's `clawfs run --sandbox`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxSpec {
    /// Extra read-only paths (absolute; never `/`, `/etc` or the store).
    pub read: Vec<PathBuf>,
    /// Which TCP connections the agent may open.
    pub network: Network,
    /// Layers without which the sandboxed run refuses to start.
    pub require: BTreeSet<Layer>,
}

/// The `network` setting of a sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Network {
    /// `"all"` (the default when absent): TCP is not restricted.
    #[default]
    All,
    /// `"none"`: no network at all, in either direction: no IPv4 or IPv6 socket, no connect,
    /// no bind.
    None,
    /// An allow list of `host:port` endpoints. Landlock filters TCP by port only; the eBPF layer
    /// checks address and port, for TCP and UDP.
    Allow(Vec<Endpoint>),
}

impl Network {
    /// The TCP ports the agent may bind (Landlock's `tcp_bind`): any under `"all"`, none
    /// otherwise: a port an agent listens on is a way in, and out, that no allow list names.
    pub fn tcp_bind_ports(&self) -> Option<Vec<u16>> {
        match self {
            Network::All => None,
            Network::None | Network::Allow(_) => Some(Vec::new()),
        }
    }

    /// The TCP ports the agent may connect to: `None` when unrestricted, `Some(vec![])` for
    /// `"none"`, else the allow list's ports, sorted and without duplicates. This is the value
    /// for Landlock's `tcp_connect`.
    pub fn tcp_connect_ports(&self) -> Option<Vec<u16>> {
        match self {
            Network::All => None,
            Network::None => Some(Vec::new()),
            Network::Allow(list) => {
                let ports: BTreeSet<u16> = list.iter().map(|e| e.port).collect();
                Some(ports.into_iter().collect())
            }
        }
    }
}

/// One `network` allow-list entry: `"127.0.0.1:8080"`, `"localhost:5432"`, `"[::1]:80"`,
/// `"10.0.0.0/8:5432"` (a network), `"[fd00::/8]:443"` or `":443"` (any host).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    /// The host as written (without IPv6 brackets or the prefix length); `None` for any host.
    pub host: Option<String>,
    /// For a network (`addr/len`), how many leading bits of the address must match.
    pub prefix: Option<u8>,
    /// The TCP port (1–65535).
    pub port: u16,
}

/// A sandbox layer `require` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layer {
    /// Landlock (file-system and network rules).
    Landlock,
    /// The seccomp system-call filter.
    Seccomp,
    /// cgroup limits (the agent's quotas in force).
    Cgroup,
    /// AppArmor: the agent's profile, entered at exec where AppArmor is active (docs/sandbox.md).
    Apparmor,
}

impl Layer {
    /// Every layer, in the order they are checked.
    pub const ALL: [Layer; 4] = [
        Layer::Landlock,
        Layer::Seccomp,
        Layer::Cgroup,
        Layer::Apparmor,
    ];

    /// The spelling used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::Cgroup => "cgroup",
            Layer::Apparmor => "apparmor",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AgentSpec {
    /// The `(uid, gid)` `clawfs run` drops to, if the policy gives one.
    pub fn run_as(&self) -> Option<(u32, u32)> {
        self.uid.map(|u| (u, self.gid.unwrap_or(u)))
    }
}

/// A validated policy. Build it with [`Policy::parse`], [`Policy::load`] or
/// [`Policy::default_policy`]; it is immutable, so the daemon swaps whole policies on reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    users: UsersMode,
    admins: BTreeSet<u32>,
    read_other_agents: bool,
    /// Protected names as written.
    protected: Vec<String>,
    /// The same, lowercased, for case-insensitive matching.
    protected_folded: Vec<String>,
    default_workspaces: WorkspaceGrants,
    backups: BackupRetention,
    agents: BTreeMap<AgentName, AgentSpec>,
    /// Explicit `[uids]` entries and every agent's own `uid`.
    uid_map: BTreeMap<u32, AgentName>,
}

/// What the editing tools keep of the content they replace: at most `keep` backups per file,
/// none older than `max_age_days` but the newest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupRetention {
    /// Backups kept per file (at least 1).
    pub keep: usize,
    /// Days a backup is kept at most.
    pub max_age_days: u64,
}

impl Default for BackupRetention {
    fn default() -> Self {
        BackupRetention {
            keep: 10,
            max_age_days: 30,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// One mistake in a policy file, with where it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct PolicyError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Why [`Policy::load`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyLoadError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The policy file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file was read but is not a valid policy; `errors` holds every mistake found.
    #[error("{}: {} error(s), first: {}", path.display(), errors.len(), errors.first().map(|e| e.to_string()).unwrap_or_default())]
    Invalid {
        /// The policy file.
        path: PathBuf,
        /// Every mistake, in file order.
        errors: Vec<PolicyError>,
    },
}

// ---------------------------------------------------------------------------------------------
// Construction and queries
// ---------------------------------------------------------------------------------------------

impl Policy {
    /// Parses and validates a policy, reporting every mistake (in file order) rather than the
    /// first.
    pub fn parse(text: &str) -> Result<Policy, Vec<PolicyError>> {
        parse::parse(text)
    }

    /// Reads and validates the policy file at `path`.
    pub fn load(path: &Path) -> Result<Policy, PolicyLoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyLoadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Policy::parse(&text).map_err(|errors| PolicyLoadError::Invalid {
            path: path.to_path_buf(),
            errors,
        })
    }

    /// The policy shipped with ClawFS ([`DEFAULT_POLICY_TOML`]).
    pub fn default_policy() -> Policy {
        Policy::parse(DEFAULT_POLICY_TOML).expect("the shipped default policy is valid")
    }

    /// Identity rules 2 to 4 of docs/architecture.md §4 for a caller not in an agent cgroup: a uid
    /// the policy maps to an agent (in `[uids]` or as an agent's own `uid`) is that agent; else
    /// root, `store_owner_uid` and the `admins` are [`Identity::Admin`]; anyone else is an
    /// ordinary user.
    pub fn identity_for_uid(&self, uid: u32, store_owner_uid: u32) -> Identity {
        if let Some(agent) = self.uid_map.get(&uid) {
            return Identity::Agent(agent.clone());
        }
        if uid == 0 || uid == store_owner_uid || self.admins.contains(&uid) {
            return Identity::Admin;
        }
        Identity::User { uid }
    }

    /// What ordinary users get on the writable roots.
    pub fn users(&self) -> UsersMode {
        self.users
    }

    /// The uids listed in `admins` (root and the store owner are admins without being listed).
    pub fn admins(&self) -> &BTreeSet<u32> {
        &self.admins
    }

    /// The protected names, as written in the policy (matching is case-insensitive, and
    /// `.clawfs*` is always protected besides these).
    pub fn protected(&self) -> &[String] {
        &self.protected
    }

    /// How many backups of a file the editing tools keep, and for how long
    /// (`[defaults] backups`).
    pub fn backups(&self) -> BackupRetention {
        self.backups
    }

    /// The agent named `name`, if the policy lists it.
    pub fn agent(&self, name: &AgentName) -> Option<&AgentSpec> {
        self.agents.get(name)
    }

    /// Every agent, by name.
    pub fn agents(&self) -> impl ExactSizeIterator<Item = &AgentSpec> + '_ {
        self.agents.values()
    }

    /// The agent a uid maps to (identity rule 2), if any.
    pub fn agent_for_uid(&self, uid: u32) -> Option<&AgentName> {
        self.uid_map.get(&uid)
    }

    /// The quota of `agent` ([`Quota::NONE`] for an agent the policy does not list: it is denied
    /// everything anyway).
    pub fn quota(&self, agent: &AgentName) -> Quota {
        self.agents.get(agent).map_or(Quota::NONE, |a| a.quota)
    }

    /// The vault secrets `agent` may read (empty for an unknown agent).
    pub fn secrets_for(&self, agent: &AgentName) -> impl Iterator<Item = &str> + '_ {
        self.agents
            .get(agent)
            .into_iter()
            .flat_map(|a| a.secrets.iter().map(String::as_str))
    }

    /// The grant `agent` has on `workspace`: the agent's entry for it, else the agent's `"*"`,
    /// else `[defaults]`'s entry for it, else `[defaults]`'s `"*"`, else [`Grant::None`].
    pub fn workspace_grant(&self, agent: &AgentName, workspace: &str) -> Grant {
        let Some(spec) = self.agents.get(agent) else {
            return Grant::None;
        };
        spec.workspaces
            .get(workspace)
            .or_else(|| self.default_workspaces.get(workspace))
            .unwrap_or(Grant::None)
    }

    /// Whether `agent` may read the directory of agent `other` (always true for itself).
    pub fn may_read_agent(&self, agent: &AgentName, other: &str) -> bool {
        if agent.as_str() == other {
            return true;
        }
        let Some(spec) = self.agents.get(agent) else {
            return false;
        };
        self.read_other_agents || spec.read_all_agents || spec.read_agents.contains(other)
    }

    /// The protected name `component` matches, if any (case-insensitive; `.clawfs*` included).
    pub fn protected_match(&self, component: &str) -> Option<&str> {
        let folded = component.to_lowercase();
        if folded.starts_with(INTERNAL_PREFIX) {
            return Some(INTERNAL_PREFIX);
        }
        self.protected_folded
            .iter()
            .position(|p| *p == folded)
            .map(|i| self.protected[i].as_str())
    }
}

#[cfg(test)]
mod tests;
