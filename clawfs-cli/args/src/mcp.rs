//! The arguments of `clawfs mcp` and `clawfs mcp-serve`.

use std::path::PathBuf;

use crate::StoreArg;

/// Arguments of `clawfs mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// The agent the server acts as (a directory under the store's agents/).
    #[arg(long, value_name = "NAME")]
    pub agent: String,
    /// The workspace a call works in unless it names another (`"workspace"` argument), which
    /// the agent's policy then decides.
    #[arg(long, value_name = "WS", default_value = "default")]
    pub workspace: String,
    /// Where ClawFS is mounted. Default: where the store is served (its daemon's mount, found
    /// in mountinfo); a DIR that does not serve the store is an error. Given without --store,
    /// the store is the one DIR serves.
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// Run the server outside the kernel sandbox (as `clawfs run --no-sandbox`).
    #[arg(long)]
    pub no_sandbox: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

/// Arguments of the server itself, started by `clawfs mcp` as the agent.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Where ClawFS is mounted.
    #[arg(long, value_name = "DIR")]
    pub mount: PathBuf,
    /// The workspace a call works in unless it names another.
    #[arg(long, value_name = "WS")]
    pub workspace: String,
    /// The agent, for the server's description only (the daemon identifies the caller itself).
    #[arg(long, value_name = "NAME")]
    pub agent: String,
}
