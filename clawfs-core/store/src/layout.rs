//! Where things are in a store.

/// The store's private area, root's alone and never seen through the mount.
pub const PRIVATE_DIR: &str = ".clawfs";

/// Where a store is mounted by convention (`clawfs mount /clawfs`): what generated files name
/// until the store is served somewhere.
pub const DEFAULT_MOUNT: &str = "/clawfs";
