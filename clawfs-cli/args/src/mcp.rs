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
    /// The tools listed: `lean` (one tool per need, each saying when to use which; the
    /// default) or `full` (every tool, with the filesystem-server names each answers to).
    /// Every tool can be called either way.
    #[arg(long, value_enum, default_value_t = ToolSet::Lean)]
    pub tools: ToolSet,
    #[command(flatten)]
    pub store: StoreArg,
}

/// Which tools an MCP server lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolSet {
    /// One tool per need.
    Lean,
    /// Every tool and alias.
    Full,
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
    /// The tools listed.
    #[arg(long, value_enum, default_value_t = ToolSet::Lean)]
    pub tools: ToolSet,
}
