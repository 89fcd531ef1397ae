//! What the kernel may cache, decided here rather than in the FUSE adapter: how long entries
//! and attributes stay valid (the mount's `--attr-timeout`; never for generated nodes, which
//! answer per caller), which missing names it may remember (negative entries), and how much of
//! a READDIRPLUS listing is looked up (each entry answered is a kernel reference).

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{ClawFs, Entry, Invalidation};
use crate::attr::Attr;
use crate::creds::Caller;
use crate::error::FsResult;
use crate::generated_files::GeneratedInodes;

/// Entries with attributes in one READDIRPLUS answer. The kernel asks for "plus" on a listing's
/// first call, and again only once stats of listed names follow (`ls -l`). A directory of at
/// most this many entries is served whole, attributes included, in that first call. A larger one
/// gets just `.` and `..` then, and the kernel lists the rest with plain READDIR: stat'ing its
/// entries up front would read every inode from disk when cold (12 ms for 64 inodes on the
/// bench image), which a plain listing (`ls`, `find`) never pays natively.
pub const READDIRPLUS_BATCH: usize = 64;

/// One entry of a READDIRPLUS answer, for the adapter to encode.
#[derive(Debug)]
pub struct PlusEntry<'a> {
    /// The entry's inode number.
    pub ino: u64,
    /// Its name.
    pub name: &'a OsStr,
    /// The offset of the entry after it.
    pub next: u64,
    /// Its attributes (the directory's own for `.` and `..`).
    pub attr: Attr,
    /// Its generation.
    pub generation: u64,
    /// How long the kernel may keep it.
    pub ttl: Duration,
}

impl ClawFs {
    /// How long the kernel may cache `ino`'s entry and attributes: generated nodes differ per
    /// caller, so never.
    pub fn ttl(&self, ino: u64) -> Duration {
        match GeneratedInodes::is_generated(ino) {
            true => Duration::ZERO,
            false => Duration::from_nanos(self.cache_ttl_ns.load(Ordering::Relaxed)),
        }
    }

    /// Tells the kernel that the attributes of `ino` changed behind its cache.
    pub(crate) fn attributes_changed(&self, ino: u64) {
        self.invalidate(vec![Invalidation::Attributes { ino }]);
    }

    /// How long the kernel may keep names looked up in `parent`, found or missing: like
    /// [`ClawFs::ttl`], but never in `system/`, `specs/` and `tools/`, which change only
    /// behind the daemon's back (`clawfs system update`, `clawfs specs ...`, `clawfs tools
    /// add`) and whose every name must be looked up, and checked, again.
    pub fn ttl_in(&self, parent: u64) -> Duration {
        match self.inodes.place_of(parent) {
            Some(place) if place.area().is_checked() => Duration::ZERO,
            _ => self.ttl(parent),
        }
    }

    /// How long the kernel may keep the entry `name` (inode `ino`) of `parent`: the shorter
    /// of [`ClawFs::ttl`] of the child and [`ClawFs::ttl_in`] of the parent; never for a
    /// workspace's `metadata.json`, which the daemon replaces while a request on the workspace
    /// folder holds it (setting `user.clawfs.vector_dimension`), so that the kernel cannot
    /// take the invalidation of the old name before that request is answered.
    pub fn entry_ttl(&self, parent: u64, name: &OsStr, ino: u64) -> Duration {
        let metadata = name == clawfs_store::area::WORKSPACE_MANAGED[0]
            && self.inodes.place_of(parent) == Some(clawfs_store::area::Place::WorkspaceRoot);
        match GeneratedInodes::is_generated(ino) || metadata {
            true => Duration::ZERO,
            false => self.ttl_in(parent),
        }
    }

    /// A lookup as the kernel wants it: `Ok(None)` is a missing name the kernel may remember
    /// (a negative entry, for [`ClawFs::ttl`] of `parent`): `git status` and the like look the
    /// same missing files up over and over. Generated folders answer per caller, so their
    /// misses are errors, never remembered.
    pub fn lookup_entry(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
    ) -> FsResult<Option<Entry>> {
        match self.lookup(caller, parent, name) {
            Ok(e) => Ok(Some(e)),
            Err(e) if e.is_missing() && !GeneratedInodes::is_generated(parent) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Answers READDIRPLUS on `fh` (directory `ino`) from `offset`: each entry is looked up (a
    /// kernel reference) and passed to `add`, which returns `true` when the answer is full; the
    /// entry that did not fit gives its reference back. At most [`READDIRPLUS_BATCH`] lookups
    /// per answer, and none at all for the first answer of a large listing.
    pub fn readdirplus(
        &self,
        caller: &Caller,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(PlusEntry<'_>) -> bool,
    ) -> FsResult<()> {
        let entries = self.readdir(fh, offset)?;
        let dir_attr = self.getattr(caller, ino, None)?;
        let ttl = self.ttl(ino);
        // `.` and `..` are the first two entries of every listing.
        let large = offset == 0 && entries.len() > READDIRPLUS_BATCH + 2;
        let mut looked_up = 0;
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if looked_up == READDIRPLUS_BATCH || (large && i == 2) {
                break;
            }
            let next = (i + 1) as u64;
            if e.name == "." || e.name == ".." {
                // The kernel takes no reference for these two.
                let entry = PlusEntry {
                    ino: e.ino,
                    name: &e.name,
                    next,
                    attr: dir_attr,
                    generation: 0,
                    ttl,
                };
                if add(entry) {
                    break;
                }
                continue;
            }
            let Ok(found) = self.lookup(caller, ino, &e.name) else {
                continue; // removed since the listing
            };
            looked_up += 1;
            let entry = PlusEntry {
                ino: found.attr.ino,
                name: &e.name,
                next,
                attr: found.attr,
                generation: found.generation,
                ttl: self.entry_ttl(ino, &e.name, found.attr.ino),
            };
            if add(entry) {
                self.forget(found.attr.ino, 1);
                break;
            }
        }
        Ok(())
    }
}
