//! An agent fills the store's disk and then hammers the mount: the daemon keeps serving,
//! reports ENOSPC, and loses nothing it had acknowledged.

use std::fs;
use std::path::Path;

use crate::support::StoreOnImage;

fn mounted(mnt: &Path) -> bool {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == mnt.to_str() && l.contains(" - fuse.clawfs "))
}

#[test]
fn a_full_disk_never_takes_the_daemon_down() {
    let disk = StoreOnImage::new(48, "", &[]);
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
