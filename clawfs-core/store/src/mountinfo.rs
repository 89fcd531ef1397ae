//! The one reader of `/proc/self/mountinfo` (`proc_pid_mountinfo(5)`), and of its octal escapes.

use std::io;
use std::path::{Path, PathBuf};

/// One mount, the fields ClawFS uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The mounted filesystem's device (`major:minor` as a `dev_t`, the `st_dev` of its files):
    /// one per superblock, so one per cgroup hierarchy.
    pub dev: u64,
    /// The path, inside the filesystem, that is mounted (for a cgroup hierarchy, a cgroup path).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type, e.g. `fuse.clawfs`, `cgroup2`.
    pub fstype: String,
    /// Mount source (for ClawFS, the store path).
    pub source: String,
    /// The superblock's options (for FUSE, `user_id=` names who mounted it; for cgroup v1,
    /// the controllers).
    pub super_options: String,
}

/// The mounts in mountinfo text; a line that does not parse is left out.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    // The separator follows the six fixed fields and the optional ones.
    let sep = 6 + fields.iter().skip(6).position(|f| *f == "-")?;
    let (major, minor) = fields.get(2)?.split_once(':')?;
    Some(MountEntry {
        dev: libc::makedev(major.parse().ok()?, minor.parse().ok()?),
        root: unescape(fields.get(3)?),
        mount_point: PathBuf::from(unescape(fields.get(4)?)),
        fstype: fields.get(sep + 1)?.to_string(),
        source: unescape(fields.get(sep + 2)?),
        super_options: fields.get(sep + 3).copied().unwrap_or("").to_string(),
    })
}

/// The mounts of this process's mount namespace.
pub fn read() -> io::Result<Vec<MountEntry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The filesystem type ClawFS mounts show in mountinfo.
pub const FSTYPE: &str = "fuse.clawfs";

/// The ClawFS mounts.
pub fn clawfs_mounts() -> io::Result<Vec<MountEntry>> {
    Ok(read()?.into_iter().filter(is_clawfs).collect())
}

/// Whether `m` is a ClawFS mount: of type `fuse.clawfs`, or plain `fuse` with a ClawFS store for
/// source (the daemon mounted without `fusermount3`, and the kernel's `mount(2)` got no
/// subtype); mounted by root (or by the user running this command) either way. Type and source
/// are the mounter's words, and `fusermount3` lets any user choose both for a mount of their
/// own, which would then pass for a store's mount; `user_id=` is the kernel's.
pub fn is_clawfs(m: &MountEntry) -> bool {
    // SAFETY: geteuid has no preconditions.
    let me = format!("user_id={}", unsafe { libc::geteuid() });
    let trusted = m
        .super_options
        .split(',')
        .any(|o| o == "user_id=0" || o == me);
    let typed = m.fstype == FSTYPE
        || (m.fstype == "fuse"
            && m.source.starts_with('/')
            && Path::new(&m.source).join(".clawfs").is_dir());
    trusted && typed
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
    Ok(read()?.into_iter().rev().find(|m| m.mount_point == path))
}

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_anywhere() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/end\\040"), "/end ");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn fields_with_and_without_optional_ones() {
        let text = "36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n\
                    40 35 0:35 /sub /mnt/claw\\040fs rw - fuse.clawfs /var/lib/claw\\040fs rw,user_id=0\n\
                    not a mountinfo line\n";
        let m = parse(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].fstype, "cgroup2");
        assert_eq!(m[0].mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m[0].dev, libc::makedev(0, 31));
        assert_eq!(m[0].super_options, "rw,nsdelegate");
        assert_eq!(m[1].root, "/sub");
        assert_eq!(m[1].mount_point, PathBuf::from("/mnt/claw fs"));
        assert_eq!(m[1].source, "/var/lib/claw fs");
        assert_eq!(m[1].super_options, "rw,user_id=0");
    }

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
        assert!(is_clawfs(&m[0]));
    }

    #[test]
    fn a_users_own_fuse_mount_does_not_pass_for_clawfs() {
        // `fusermount3 -o fsname=/var/lib/clawfs,subtype=clawfs` by uid 1000.
        let text = "36 35 98:0 / /home/u/m rw,nosuid,nodev - fuse.clawfs /var/lib/clawfs rw,user_id=1000,group_id=1000\n";
        assert!(!is_clawfs(&parse(text)[0]));
    }
}
