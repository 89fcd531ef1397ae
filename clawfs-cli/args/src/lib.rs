//! The command line of `clawfs`: every clap definition, and nothing else, so that what reads
//! them (the man pages and completions) builds without the filesystem.

pub mod audit;
pub mod import;
pub mod integrity;
pub mod mcp;
pub mod mount;
pub mod pg;
pub mod run;
pub mod search;
pub mod snapshot;
pub mod top;
pub mod vault;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// What `clawfs --help` says first: what ClawFS is, for a user.
const ABOUT: &str = "ClawFS: a filesystem for AI agents";
const LONG_ABOUT: &str = "\
ClawFS: a filesystem for AI agents.

ClawFS serves a directory tree at a mount point (/clawfs by default) that people use with ls,
cat and setfattr, and AI agents use as their only interface, their tools included. Six roots:
system (read-only configuration), agents (one private directory per agent), tools (the agent
tools, called by writing a request to a file), workspaces (shared files), vault (encrypted
secrets, plaintext only to whom the policy grants) and specs (signed, read-only documents).

Agents are processes started with `clawfs run --agent NAME`: ClawFS knows them by their cgroup,
applies the policy (system/policy.toml) to everything they do, records it on a tamper-evident
audit trail, and keeps them in a kernel sandbox (cgroup limits, Landlock, seccomp, eBPF).

Start with `clawfs mount /clawfs`, then `ls /clawfs`.";
const EXIT_STATUS: &str = "\
Exit status:
  0  success
  1  any other error
  2  bad command line
  3  mount point problem: missing, not a directory, not empty, already mounted, stale, busy,
     not a ClawFS mount, the store not mounted (run, mcp, search) or not at --mount
  4  store problem: not initialised, newer format, already served
  5  integrity: system/ differs from its manifest (mount, system verify), a document of
     specs/ fails verification (specs verify)
`clawfs run` exits with the command's status (128 + N if a signal N killed it).

JSON output (--json):
  JSON Lines on stdout: a report (status MOUNTPOINT, vault status, audit verify) is one object
  on one line; a list (status of every mount, audit tail, audit search, sandbox check) is one
  object per line. Keys are snake_case, times RFC 3339, absent values null. Errors go to
  stderr with the exit status above.";

/// The `clawfs` command line.
#[derive(Debug, Parser)]
#[command(
    name = "clawfs",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = EXIT_STATUS
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the store is.
#[derive(Debug, Clone, Args)]
pub struct StoreArg {
    /// The backing store (default: /var/lib/clawfs for root, else ~/.local/share/clawfs).
    #[arg(long, value_name = "DIR", global = true)]
    pub store: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a store: the six roots, the agent roster, the default workspace.
    Init {
        #[command(flatten)]
        store: StoreArg,
    },
    /// Serve a store at MOUNTPOINT (initialising the default store on first use).
    Mount(mount::MountArgs),
    /// Unmount a ClawFS mount (also clears a mount left by a killed daemon).
    #[command(alias = "unmount")]
    Umount {
        /// The mount point.
        mountpoint: PathBuf,
        /// Detach now even if files are open; the mount goes when they close.
        #[arg(long)]
        lazy: bool,
    },
    /// Show what is mounted: store, version, daemon, counts.
    Status {
        /// A mount point (default: every ClawFS mount).
        mountpoint: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Search a workspace by meaning and words, as you: only files you may read are searched.
    Search(crate::search::SearchArgs),
    /// A live view of the agents: their runs, operations, bytes, refusals and quota use.
    Top(crate::top::TopArgs),
    /// The workspaces' search indexes: rebuild, status.
    Index {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::search::IndexCommand,
    },
    /// Snapshots of a workspace: create, list, restore, rm.
    Snapshot {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::snapshot::SnapshotCommand,
    },
    /// Bring another agent memory into a workspace: PostgreSQL + pgvector (pg).
    Import {
        #[command(flatten)]
        store: StoreArg,
        /// What to import.
        #[command(subcommand)]
        command: crate::import::ImportCommand,
    },
    /// Workspaces: fork one into a new one.
    Workspace {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::snapshot::WorkspaceCommand,
    },
    /// Run a command as an agent: in a cgroup of its own that identifies it to the daemon, inside
    /// the kernel sandbox.
    Run(crate::run::RunArgs),
    /// Serve the agent tools to an MCP client on standard input and output, as an agent: the
    /// server runs like `clawfs run` (the agent's cgroup, uid and sandbox) and makes every call
    /// through the mount.
    Mcp(crate::mcp::McpArgs),
    /// The MCP server itself, started by `clawfs mcp` as the agent.
    #[command(hide = true)]
    McpServe(crate::mcp::ServeArgs),
    /// Read and verify the audit trail.
    Audit {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::audit::AuditCommand,
    },
    /// The vault: sealed master key, encrypted secrets, grants, rotation.
    Vault {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::vault::VaultCommand,
    },
    /// Signed documents of specs/: signing keys, drafts, freezing, verification, changes
    /// approved by two signers.
    Specs {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::integrity::SpecsCommand,
    },
    /// Published tools: add one (definition + WebAssembly binary, signed), list them.
    Tools {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::integrity::ToolsCommand,
    },
    /// The files of system/ against their manifest (vault/system-manifest.json): verify, update.
    System {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: crate::integrity::SystemCommand,
    },
    /// Check agents' identity files: reports any whose checksum does not match its content
    /// (e.g. edited in the store behind ClawFS's back).
    Identity {
        /// What to do.
        #[command(subcommand)]
        command: IdentityCommand,
    },
    /// The agent sandbox: which layers this host can apply.
    Sandbox {
        /// What to do.
        #[command(subcommand)]
        command: SandboxCommand,
    },
    /// Emergency stop: refuse every agent write and tool call (persistently, until
    /// `--clear`) and freeze and kill every running agent.
    Estop {
        #[command(flatten)]
        store: StoreArg,
        /// Lift the stop.
        #[arg(long, conflicts_with = "status")]
        clear: bool,
        /// Say whether a stop is in force.
        #[arg(long)]
        status: bool,
    },
    /// What each agent holds (bytes and files it owns) against its quota; `rescan` recounts.
    ///
    /// A quota counts what an agent holds now, by owner as quota(1) does: the inodes its uid
    /// owns in workspaces/ and agents/, each costing its size (or the space preallocated past
    /// it), a symlink's target length, a folder's size (at least 4096), plus its user.* xattrs. Removing,
    /// truncating and overwriting give back. The table shows bytes and files held, the limits
    /// of the policy in force and the bytes used in percent; --json gives the same per agent
    /// (`null` for no limit), with the uids counted for each. The counts are the daemon's, saved
    /// every 2 s; `clawfs quota rescan` recounts the store (by the serving daemon when one
    /// serves it, else here with a progress bar).
    Quota {
        #[command(flatten)]
        store: StoreArg,
        /// A mount of the store, instead of --store.
        #[arg(long, value_name = "DIR", global = true)]
        mount: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Recount instead of showing the counts.
        #[command(subcommand)]
        command: Option<QuotaCommand>,
    },
    /// Hosts that share the store, each running its own daemon over its own mount of a
    /// distributed file system (JuiceFS) that holds it: join one, list them.
    Host {
        #[command(flatten)]
        store: StoreArg,
        /// What to do.
        #[command(subcommand)]
        command: HostCommand,
    },
    /// Check or reload the policy.
    Policy {
        /// What to do.
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// `clawfs host` subcommands.
#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Let host NAME serve the store (`clawfs mount --host NAME`). Once one host has joined,
    /// every daemon of the store must serve as a host that has.
    Join {
        /// The host: 1 to 63 of a-z, 0-9 and '-'.
        name: String,
        /// Also record NAME in /etc/clawfs/host, as the host this machine is.
        #[arg(long)]
        local: bool,
    },
    /// The hosts that have joined, and which daemon serves as each (its lease).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `clawfs quota` subcommands.
#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Recount what every owner holds from the store (by the serving daemon, if one serves it),
    /// then show the counts.
    Rescan,
}

/// `clawfs identity` subcommands.
#[derive(Debug, Subcommand)]
pub enum IdentityCommand {
    /// Verify the checksum of every agent's identity.json (or one agent's).
    Verify {
        /// Only this agent.
        agent: Option<String>,
        #[command(flatten)]
        store: StoreArg,
    },
}

/// `clawfs sandbox` subcommands.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Print each layer (cgroup, Landlock, seccomp, AppArmor, eBPF): available or not, and why.
    Check {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `clawfs policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file, reporting every error with its line and column.
    Check {
        /// The policy file.
        file: PathBuf,
    },
    /// Make the daemon serving a store re-read `system/policy.toml` (as SIGHUP does); an
    /// invalid policy is refused and the old one stays.
    Reload {
        /// A new policy to install first (checked before it replaces the one in force).
        file: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArg,
    },
}
