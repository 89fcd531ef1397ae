//! ClawFS core: the filesystem model behind the mount, with no FUSE dependency.
//!
//! The FUSE adapter (`clawfs-fuse`) decodes kernel requests, identifies the caller and calls one
//! function of [`fs::ClawFs`]; everything that decides what happens lives here and is testable
//! without a mount.
#![warn(missing_docs)]

pub mod attr;
pub mod creds;
pub mod descriptors;
pub mod error;
pub mod fs;
pub mod generated_files;
pub mod git_index;
pub mod git_settings;
pub mod held;
pub mod hosts;
pub mod identity;
pub mod inodes;
pub mod io_mode;
pub mod open_files;
pub mod path_cache;
pub mod per_caller;
pub mod seed;
pub mod shared_edits;
pub mod shared_usage;
pub mod store;
pub mod xattr_spill;
pub mod xattrs;

pub use error::{FsError, FsResult, OpenError};
pub use fs::ClawFs;
pub use store::Store;

/// The version of this build, shown by `clawfs status`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
