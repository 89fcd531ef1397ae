//! Where things are in a store.

/// The store's private area, root's alone and never seen through the mount.
pub const PRIVATE_DIR: &str = ".clawfs";

/// Where a store is mounted by convention (`clawfs mount /clawfs`): what generated files name
/// until the store is served somewhere.
pub const DEFAULT_MOUNT: &str = "/clawfs";

/// Asked of the mount's root by `clawfs run` (root) when its run has ended: answered once the
/// daemon's activity monitor has recorded what the run did, `settled` or `timeout`.
pub const SETTLE_XATTR: &str = "trusted.clawfs.settle";
