//! The arguments of `clawfs top`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::StoreArg;

/// `clawfs top [MOUNT | --store DIR]`.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// A mount of the store to watch (default: the store of --store, or the default store).
    pub mount: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArg,
    /// Print one sample, taken over --interval, and exit: a table, or JSON with --json.
    #[arg(long)]
    pub once: bool,
    /// With --once: print the sample as JSON.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Seconds between refreshes (and the span of --once).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub interval: f64,
    /// Show only the agents whose name contains this (`/` in the view).
    #[arg(long, value_name = "TEXT")]
    pub agent: Option<String>,
    /// The column to sort by (`s` in the view cycles through them).
    #[arg(long, value_enum, default_value_t = SortKey::Ops)]
    pub sort: SortKey,
}

/// What `clawfs top` sorts its agents by, largest first (names in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Operations per second.
    Ops,
    /// Bytes read and written.
    Bytes,
    /// Refusals.
    Refusals,
    /// Share of the byte quota used.
    Quota,
    /// Processes running.
    Procs,
    /// The agent's name.
    Agent,
}

impl SortKey {
    /// The next key, for the view's `s`.
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Ops => SortKey::Bytes,
            SortKey::Bytes => SortKey::Refusals,
            SortKey::Refusals => SortKey::Quota,
            SortKey::Quota => SortKey::Procs,
            SortKey::Procs => SortKey::Agent,
            SortKey::Agent => SortKey::Ops,
        }
    }

    /// Its name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Ops => "ops",
            SortKey::Bytes => "bytes",
            SortKey::Refusals => "refusals",
            SortKey::Quota => "quota",
            SortKey::Procs => "procs",
            SortKey::Agent => "agent",
        }
    }
}
