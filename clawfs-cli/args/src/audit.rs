//! The arguments of `clawfs audit`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// The `clawfs audit` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum AuditCommand {
    /// Replay the chain across all files and name the first broken record (exit 1 if any). With
    /// --key-file also check the signatures and the signed checkpoint, which shows a trail cut at
    /// its end or rebuilt without its signatures.
    Verify {
        /// Also check HMACs and the checkpoint with this key: a file holding 64 hex digits (or 32
        /// raw bytes), as written by `clawfs audit key`.
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// A copy of an earlier checkpoint.json kept elsewhere: the trail must still hold its
        /// record unchanged (repeatable; needs --key-file).
        #[arg(long = "checkpoint", value_name = "FILE", requires = "key_file")]
        checkpoints: Vec<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the audit HMAC key (derived from the vault's master key; the vault must be unlocked)
    /// to a new file, mode 0600, for `verify --key-file`.
    Key {
        /// The file to create (it must not exist).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Print the last records (those that match every condition given), and with --follow the
    /// new ones as they are written, until interrupted.
    Tail {
        /// How many.
        #[arg(short = 'n', long = "lines", default_value_t = 20)]
        n: usize,
        /// Keep printing records as they are written (across the trail's next files).
        #[arg(short = 'f', long)]
        follow: bool,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print records as JSON lines, exactly as stored.
        #[arg(long)]
        json: bool,
    },
    /// Print the records that match every condition given, oldest first.
    Search {
        #[command(flatten)]
        filter: FilterArgs,
        /// At most this many records (the oldest that match).
        #[arg(long)]
        limit: Option<usize>,
        /// Print records as JSON lines, exactly as stored.
        #[arg(long)]
        json: bool,
    },
}

/// Which records `search` and `tail` print: those that match every condition given.
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only this caller: an agent name, `admin` or `user:<uid>`.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only records on this path or under it (namespace path, e.g. /workspaces/default).
    #[arg(long, value_name = "PATH")]
    pub path: Option<String>,
    /// Only records since this time: RFC 3339, a date (2024-02-24) or an age (10m, 2h, 1d).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only refusals.
    #[arg(long)]
    pub denied: bool,
}
