//! Where things are in a store.

/// The store's private area, root's alone and never seen through the mount.
pub const PRIVATE_DIR: &str = ".clawfs";
