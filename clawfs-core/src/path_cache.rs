//! Namespace paths of the nodes in use, so that a policy decision need not ask the kernel for
//! the backing path (a readlink of `/proc/self/fd/N`) on every open and create.
//!
//! A node's path changes only when it or a directory above it is renamed, through the mount or
//! by a tool; both empty the cache. A path computed while such a change ran is not stored (the
//! generation it was computed under is stale by then).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use clawfs_policy::NsPath;
use clawfs_store::backing::BackingHandle;

/// Entries kept before the cache starts over; a path is cheap to compute again.
const CAPACITY: usize = 65_536;

/// Backing handle → namespace path.
#[derive(Default)]
pub struct PathCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    generation: u64,
    paths: HashMap<Arc<BackingHandle>, NsPath>,
}

impl PathCache {
    /// The cached path of `handle`.
    pub fn get(&self, handle: &BackingHandle) -> Option<NsPath> {
        self.lock().paths.get(handle).cloned()
    }

    /// The generation to pass to [`Self::insert`] for a path about to be computed.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Stores `path`, computed under `generation`, unless a rename has happened since.
    pub fn insert(&self, generation: u64, handle: &Arc<BackingHandle>, path: &NsPath) {
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        if inner.paths.len() >= CAPACITY {
            inner.paths.clear();
        }
        inner.paths.insert(Arc::clone(handle), path.clone());
    }

    /// Forgets the path of `handle`: one of its names went, and the cached one may be it.
    pub fn forget(&self, handle: &BackingHandle) {
        self.lock().paths.remove(handle);
    }

    /// Forgets every path: something was renamed.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.paths.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn handle(dir: &std::path::Path, name: &str) -> Arc<BackingHandle> {
        std::fs::write(dir.join(name), b"").unwrap();
        let d = std::fs::File::open(dir).unwrap();
        Arc::new(BackingHandle::at(d.as_fd(), std::ffi::OsStr::new(name)).unwrap())
    }

    fn path(s: &str) -> NsPath {
        NsPath::from_components(s.split('/').map(std::ffi::OsStr::new)).unwrap()
    }

    #[test]
    fn a_rename_empties_the_cache_and_voids_paths_computed_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (handle(dir.path(), "a"), handle(dir.path(), "b"));
        let cache = PathCache::default();
        let g = cache.generation();
        cache.insert(g, &a, &path("workspaces/w/a"));
        assert_eq!(cache.get(&a), Some(path("workspaces/w/a")));
        assert_eq!(cache.get(&b), None);

        let before = cache.generation();
        cache.clear();
        assert_eq!(cache.get(&a), None);
        cache.insert(before, &b, &path("workspaces/w/b"));
        assert_eq!(
            cache.get(&b),
            None,
            "computed before the rename: not stored"
        );
    }
}
