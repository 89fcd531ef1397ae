//! The ground floor of ClawFS: what every other crate of it stands on, and nothing above.
//!
//! - [`agent_groups`]: which agent a process is, from its cgroup;
//! - [`area`]: the six roots of the namespace;
//! - [`names`]: the naming rules of the names ClawFS creates or validates ([`NameError`]);
//! - [`beneath`], [`tree`]: files reached by descriptor beneath a directory, never through a
//!   symlink or `..`;
//! - [`atomic`]: the one atomic write (temp file, fsync, rename) and its single-name steps;
//! - [`backing`]: kernel file handles of backing inodes;
//! - [`mountinfo`]: the one reader of `/proc/self/mountinfo`;
//! - [`accounts`]: users and groups, as the system's name service knows them;
//! - [`clock`]: the one "now" written into ClawFS's documents;
//! - [`layout`]: where things are in a store;
//! - [`ToErrno`]: how each crate's errors say which errno a caller gets.

pub mod accounts;
pub mod agent_groups;
pub mod area;
pub mod atomic;
pub mod backing;
pub mod beneath;
pub mod clock;
mod errno;
pub mod layout;
pub mod mountinfo;
pub mod names;
pub mod tree;

pub use errno::ToErrno;
pub use names::NameError;
