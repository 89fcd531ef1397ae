//! The arguments of `clawfs snapshot` and `clawfs workspace`.

use clap::Subcommand;

/// `clawfs snapshot` subcommands.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot of a workspace: every file, consistent while agents write, and its search
    /// index, in `snapshots/snapshot-YYYY-MM-DD[-N].db` (a SQLite Archive: `sqlite3 -A -t -f`
    /// lists it).
    Create {
        /// The workspace.
        workspace: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a workspace's snapshots, oldest first.
    List {
        /// The workspace.
        workspace: String,
        /// Print JSON Lines.
        #[arg(long)]
        json: bool,
    },
    /// Replace a workspace's files with a snapshot's, atomically; what is replaced is
    /// snapshotted first. metadata.json and snapshots/ stay.
    Restore {
        /// The workspace.
        workspace: String,
        /// The snapshot (as `clawfs snapshot list` names it).
        snapshot: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a snapshot.
    Rm {
        /// The workspace.
        workspace: String,
        /// The snapshot.
        snapshot: String,
    },
}

/// `clawfs workspace` subcommands.
#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Make a new workspace from the current state of another, or from one of its snapshots:
    /// files keep their owners and modes; reflinks share blocks where the store's filesystem has
    /// them.
    Fork {
        /// The workspace to fork.
        workspace: String,
        /// The new workspace's name.
        new: String,
        /// Fork this snapshot of it instead of its current state.
        #[arg(long, value_name = "SNAPSHOT")]
        from: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}
