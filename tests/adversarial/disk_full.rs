//! An agent fills the store's disk and then hammers the mount: the daemon keeps serving,
//! reports ENOSPC, and loses nothing it had acknowledged.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::clawfs;
use crate::support::text;

/// A small journaled ext4 image mounted on a loop device, with a ClawFS store on it mounted
/// in turn; both unmounted when dropped (also when the test fails).
struct FullDisk {
    dir: tempfile::TempDir,
    image_mnt: PathBuf,
    mnt: PathBuf,
}

impl FullDisk {
    fn new(megabytes: u32) -> FullDisk {
        let dir = tempfile::Builder::new()
            .prefix("clawfs-df.")
            .tempdir_in("/tmp")
            .unwrap();
        let image = dir.path().join("disk.img");
        let image_mnt = dir.path().join("img");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&image_mnt).unwrap();
        fs::create_dir(&mnt).unwrap();
        let sh = |cmd: String| {
            let out = Command::new("sh").arg("-c").arg(&cmd).output().unwrap();
            assert!(out.status.success(), "{cmd}: {}", text(&out));
        };
        sh(format!(
            "truncate -s {megabytes}M {0} && mkfs.ext4 -q -F {0}",
            image.display()
        ));
        sh(format!(
            "mount -o loop {} {}",
            image.display(),
            image_mnt.display()
        ));
        let disk = FullDisk {
            dir,
            image_mnt,
            mnt,
        };
        let out = clawfs([
            "mount",
            disk.mnt.to_str().unwrap(),
            "--store",
            disk.store().to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
        disk
    }

    fn store(&self) -> PathBuf {
        self.image_mnt.join("store")
    }

    fn agent(&self, script: &str) -> String {
        let out = clawfs([
            "run",
            "--store",
            self.store().to_str().unwrap(),
            "--mount",
            self.mnt.to_str().unwrap(),
            "--agent",
            "fs-engine",
            "--",
            "sh",
            "-c",
            script,
        ]);
        text(&out)
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = clawfs(["umount", self.mnt.to_str().unwrap()]);
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
        let _ = Command::new("umount").arg(&self.image_mnt).output();
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.image_mnt)
            .output();
        let _ = self.dir.path();
    }
}

fn mounted(mnt: &Path) -> bool {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == mnt.to_str() && l.contains(" - fuse.clawfs "))
}

#[test]
fn a_full_disk_never_takes_the_daemon_down() {
    let disk = FullDisk::new(48);
    let mnt = disk.mnt.display();
    fs::write(
        disk.mnt.join("workspaces/default/kept.md"),
        "acknowledged\n",
    )
    .unwrap();
    // Fill the disk, then thousands of opens, allowed and refused (each refusal tries to
    // write the denials file, the audit trail and the log on the full disk).
    let out = disk.agent(&format!(
        "cd {mnt}/agents/fs-engine || exit 9
         (head -c 100000000 /dev/zero > fill) 2>&1 | tail -1
         i=0; while [ $i -lt 3000 ]; do
           cat identity.json > /dev/null || echo read-failed
           cat {mnt}/agents/kernel-engine/identity.json > /dev/null 2>&1
           i=$((i+1))
         done
         (echo more > more.txt) 2>&1 | tail -1
         echo finished"
    ));
    assert!(out.contains("No space left on device"), "{out}");
    assert!(
        out.contains("finished") && !out.contains("read-failed"),
        "{}",
        &out[..out.len().min(2000)]
    );
    assert!(mounted(&disk.mnt), "the daemon died: {out}");
    assert_eq!(
        fs::read_to_string(disk.mnt.join("workspaces/default/kept.md")).unwrap(),
        "acknowledged\n"
    );
    // Room again: it serves writes as before.
    fs::remove_file(disk.mnt.join("agents/fs-engine/fill")).unwrap();
    fs::write(disk.mnt.join("workspaces/default/after.md"), "after\n").unwrap();
    assert_eq!(
        fs::read_to_string(disk.store().join("workspaces/default/after.md")).unwrap(),
        "after\n"
    );
}
