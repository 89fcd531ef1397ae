//! Moves a PostgreSQL + pgvector agent memory (P1.4 §6: `documents` and `vectors`) into a
//! ClawFS workspace index: the same schema, FTS5 and HNSW, as the workspace's own files get.
//!
//! - [`source`]: the PostgreSQL side, checked, then read in id order a batch at a time.
//! - [`place`]: where each document goes (a file of the workspace, or a path in a database of
//!   its own).
//! - [`migrate`]: the copy (a transaction per batch, resumable) and the verification.
//! - [`cli`]: the command line of `migrate-pg-to-sqlite`.
//! - [`wire`]: what the server sends, read as untrusted (bounded, checked, escaped).
//! - the options it shares with `clawfs import pg` are `clawfs_args::pg`.
//!
//! The SQLite half is ClawFS's own ([`clawfs_search::import`]), so an imported document
//! is indexed exactly as the daemon indexes a file.

pub mod cli;
pub mod migrate;
pub mod place;
pub mod source;
pub mod wire;

pub use migrate::{run, Report};

/// Why a migration stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The source or the target cannot be migrated as asked (nothing was written).
    #[error("{0}")]
    Refused(String),
    /// PostgreSQL failed while reading.
    #[error("PostgreSQL: {0}")]
    Source(String),
    /// Writing the target failed (the batch under way was rolled back).
    #[error("{0}")]
    Target(String),
    /// The index failed.
    #[error(transparent)]
    Index(#[from] clawfs_search::SearchError),
}

/// The exit status of a verification that found the two sides different (as `clawfs`'s for a
/// failed integrity check).
pub const EXIT_MISMATCH: u8 = 5;
