//! The arguments of `clawfs run`.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::StoreArg;

/// Arguments of `clawfs run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The agent to run as (a directory under the store's agents/).
    #[arg(long, value_name = "NAME")]
    pub agent: String,
    /// Start in `<mount>/workspaces/WS`.
    #[arg(long, value_name = "WS")]
    pub workspace: Option<String>,
    /// Run as this uid (and gid; default: the user's primary group, or GID = UID), a number or a
    /// name from /etc/passwd. Default: the agent's own unprivileged uid.
    #[arg(long, value_name = "UID[:GID]")]
    pub user: Option<String>,
    /// Where ClawFS is mounted (for --workspace and the sandbox). Default: where the store is
    /// served (its daemon's mount, found in mountinfo); a DIR that does not serve the store is
    /// an error. Given without --store, the store is the one DIR serves.
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// Run outside the kernel sandbox (cgroup quotas still apply). By default every run is
    /// sandboxed: Landlock (its part of the mount, a private temporary directory that is also its
    /// HOME, the system files programs need; never the store), seccomp (the store's
    /// system/seccomp/whitelist.json), the eBPF egress filter, and AppArmor where the host has
    /// it. Refused when the policy's [agents.NAME.sandbox] require names a layer. See `clawfs
    /// sandbox check`.
    #[arg(long)]
    pub no_sandbox: bool,
    /// The default, kept for scripts that ask for it explicitly.
    #[arg(long, hide = true, conflicts_with = "no_sandbox")]
    pub sandbox: bool,
    #[command(flatten)]
    pub store: StoreArg,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}
