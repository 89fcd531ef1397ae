//! An agent names a file it did not open by the number of a handle: the daemon numbers open
//! files and generated files (tool calls, responses, secrets) in tables of their own, and a
//! call that passes handles without going through a path (`copy_file_range`, `fallocate`,
//! `lseek`) must never reach a file of another table, or another inode. Here root holds open a
//! file the agent may not read; the agent opens tool-call files again and again, and through
//! each tries to copy out of it, copy into it, and grow it. Root's file keeps its content and
//! size, and nothing of it reaches the agent.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::Mounted;
use crate::support::python_as_agent;

#[test]
fn handles_of_generated_files_never_name_another_open_file() {
    let m = Mounted::new();
    let secret = m.ws().join("root-only.txt");
    fs::write(&secret, "ROOT-SECRET-0123456789\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    // Root holds it open for reading and writing, as an editor would.
    let held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&secret)
        .unwrap();
    let mnt = m.mnt.display();
    let script = format!(
        r#"
import errno, os
mine = "{mnt}/agents/fs-engine/mine.txt"
loot = "{mnt}/agents/fs-engine/loot.txt"
with open(mine, "w") as f:
    f.write("AGENT-WROTE-THIS")
src = os.open(mine, os.O_RDONLY)
dst = os.open(loot, os.O_WRONLY | os.O_CREAT, 0o600)
seen = set()
def note(call):
    try:
        call()
        seen.add("ok")
    except OSError as e:
        seen.add(errno.errorcode[e.errno])
try:
    open("{mnt}/workspaces/default/root-only.txt").read()
    print("readable")
except OSError as e:
    print("direct", errno.errorcode[e.errno])
for i in range(300):
    fd = os.open("{mnt}/tools/call/list_allowed", os.O_RDWR)
    note(lambda: os.copy_file_range(fd, dst, 64, 0, 0))
    note(lambda: os.copy_file_range(src, fd, 16, 0, 0))
    note(lambda: os.posix_fallocate(fd, 0, 1 << 20))
    note(lambda: os.lseek(fd, 0, os.SEEK_DATA))
    os.close(fd)
print("seen", sorted(seen))
"#
    );
    let out = python_as_agent(&m, &script);
    assert!(out.contains("direct EACCES"), "{out}");
    drop(held);
    let now = fs::read(m.backing("workspaces/default/root-only.txt")).unwrap();
    assert!(
        now == b"ROOT-SECRET-0123456789\n",
        "root's file was changed through another handle ({} bytes, starting {:?}): {out}",
        now.len(),
        String::from_utf8_lossy(&now[..now.len().min(40)])
    );
    let loot = fs::read_to_string(m.backing("agents/fs-engine/loot.txt")).unwrap_or_default();
    assert!(!loot.contains("ROOT-SECRET"), "root's file leaked: {out}");
}
