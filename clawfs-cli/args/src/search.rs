//! The arguments of `clawfs search` and `clawfs index`.

use std::path::PathBuf;

use clap::Subcommand;

use crate::StoreArg;

/// `clawfs search` arguments.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// The workspace.
    pub workspace: String,
    /// What to look for.
    pub query: String,
    /// hybrid (meaning and words), vector (meaning) or text (every word; BM25).
    #[arg(long, default_value = "hybrid", value_parser = ["text", "vector", "hybrid"])]
    pub mode: String,
    /// How many hits.
    #[arg(long, short = 'n', default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub limit: u16,
    /// Only paths matching this glob.
    #[arg(long, value_name = "GLOB")]
    pub path: Option<String>,
    /// Only files tagged TAG (in their `user.xdg.tags` or `user.tags` attribute, comma-separated);
    /// repeat for files carrying every one.
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Where ClawFS is mounted. Default: where the store is served (found in mountinfo); a DIR
    /// that does not serve the store is an error.
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArg,
    /// Print JSON Lines: one object per hit.
    #[arg(long)]
    pub json: bool,
}

/// `clawfs index` subcommands.
#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Re-index a workspace from its files (changes made in the store behind ClawFS's back).
    Rebuild {
        /// The workspace (default: every workspace).
        workspace: Option<String>,
    },
    /// Files, chunks and vectors indexed per workspace.
    Status {
        /// Print JSON Lines.
        #[arg(long)]
        json: bool,
    },
}
