//! Reading `/proc/self/mountinfo`: which ClawFS mounts exist and which stores they serve.

use std::io;
use std::path::{Path, PathBuf};

/// The filesystem type ClawFS mounts show in mountinfo.
pub const FSTYPE: &str = "fuse.clawfs";

/// One line of mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type, e.g. `fuse.clawfs`.
    pub fstype: String,
    /// Mount source; for ClawFS, the store path.
    pub source: String,
    /// The device of the mounted filesystem, as a `dev_t` (`st_dev` of its files).
    pub dev: u64,
}

/// Parses mountinfo text.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            let (major, minor) = fields.get(2)?.split_once(':')?;
            Some(MountEntry {
                dev: libc::makedev(major.parse().ok()?, minor.parse().ok()?),
                mount_point: PathBuf::from(clawfs_core::mountinfo::unescape(fields.get(4)?)),
                fstype: fields.get(sep + 1)?.to_string(),
                source: clawfs_core::mountinfo::unescape(fields.get(sep + 2)?),
            })
        })
        .collect()
}

/// All mounts of this mount namespace.
pub fn all() -> io::Result<Vec<MountEntry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The ClawFS mounts.
pub fn clawfs_mounts() -> io::Result<Vec<MountEntry>> {
    Ok(all()?.into_iter().filter(|m| m.fstype == FSTYPE).collect())
}

/// The ClawFS mount at `path`, if any (the last one wins when stacked).
pub fn clawfs_mount_at(path: &Path) -> io::Result<Option<MountEntry>> {
    Ok(clawfs_mounts()?
        .into_iter()
        .rev()
        .find(|m| m.mount_point == path))
}

/// Any mount at `path`, if any.
pub fn mount_at(path: &Path) -> io::Result<Option<MountEntry>> {
    Ok(all()?.into_iter().rev().find(|m| m.mount_point == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_clawfs_lines() {
        let text = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - fuse.clawfs /var/lib/claw\\040fs rw,user_id=0\n\
                    37 35 98:0 / /proc rw - proc proc rw\n";
        let m = parse(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].fstype, FSTYPE);
        assert_eq!(m[0].source, "/var/lib/claw fs");
        assert_eq!(m[0].dev, libc::makedev(98, 0));
    }
}
