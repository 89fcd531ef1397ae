//! POSIX behaviour on the writable roots beyond what pjdfstest covers: sparse and large files,
//! O_DIRECT, rename flags, stable inode numbers, inotify, with and without passthrough.

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{errno, sh, Mounted};

const GIB: u64 = 1 << 30;

fn large_sparse_file(m: &Mounted) {
    let p = m.ws().join("big.img");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    let at = 5 * GIB + 123;
    f.write_all_at(b"tail", at).unwrap();
    f.write_all_at(b"head", 0).unwrap();
    drop(f);
    let md = fs::metadata(&p).unwrap();
    assert_eq!(md.len(), at + 4);
    assert!(md.blocks() * 512 < 1 << 20, "the hole is not allocated");
    let f = fs::File::open(&p).unwrap();
    let mut buf = [0u8; 4];
    f.read_exact_at(&mut buf, at).unwrap();
    assert_eq!(&buf, b"tail");
    f.read_exact_at(&mut buf, GIB).unwrap();
    assert_eq!(buf, [0; 4]);
    // SEEK_DATA / SEEK_HOLE reach the backing file.
    // SAFETY: lseek on a descriptor we own.
    let hole = unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&f), 0, libc::SEEK_HOLE) };
    assert!(hole > 0 && (hole as u64) < at, "hole at {hole}");
}

#[test]
fn sparse_files_over_4gib_with_passthrough() {
    large_sparse_file(&Mounted::new());
}

#[test]
fn sparse_files_over_4gib_without_passthrough() {
    large_sparse_file(&Mounted::with_args(&["--no-passthrough"]));
}

#[test]
fn o_direct_is_honoured() {
    o_direct(&Mounted::new(), true);
}

#[test]
fn o_direct_works_without_passthrough() {
    o_direct(&Mounted::with_args(&["--no-passthrough"]), false);
}

fn o_direct(m: &Mounted, strict: bool) {
    let p = m.ws().join("direct");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    // An aligned write works...
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: layout has a non-zero size; the buffer is freed below.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    // SAFETY: ptr points to 4096 initialised bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, 4096) };
    buf.fill(7);
    f.write_all(buf).unwrap();
    // ...and with passthrough a misaligned one is refused, as on the backing filesystem: not
    // silently buffered. (Through the daemon the kernel bypasses its page cache for the file
    // and the daemon writes the bytes.)
    if strict {
        assert_eq!(errno(f.write(&buf[1..100])), libc::EINVAL);
    }
    f.seek(SeekFrom::Start(0)).unwrap();
    let n = f.read(buf).unwrap();
    assert_eq!(n, 4096);
    assert!(buf.iter().all(|&b| b == 7));
    // SAFETY: allocated above with the same layout.
    unsafe { std::alloc::dealloc(ptr, layout) };
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let a = CString::new(from.as_os_str().as_bytes()).unwrap();
    let b = CString::new(to.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn rename_noreplace_and_exchange() {
    let m = Mounted::new();
    let (a, b) = (m.ws().join("a"), m.ws().join("b"));
    fs::write(&a, b"A").unwrap();
    fs::write(&b, b"B").unwrap();
    assert_eq!(
        errno(renameat2(&a, &b, libc::RENAME_NOREPLACE)),
        libc::EEXIST
    );
    renameat2(&a, &b, libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"B");
    assert_eq!(fs::read(&b).unwrap(), b"A");
    renameat2(&a, &m.ws().join("c"), libc::RENAME_NOREPLACE).unwrap();
    assert!(!a.exists());
}

#[test]
fn inode_numbers_and_links_survive_a_remount() {
    let m = Mounted::new();
    let p = m.ws().join("stable");
    fs::write(&p, b"x").unwrap();
    fs::hard_link(&p, m.ws().join("stable2")).unwrap();
    let before = fs::metadata(&p).unwrap();
    assert_eq!(before.nlink(), 2);
    assert!(m.umount().status.success());
    m.mount(&[]);
    let after = fs::metadata(&p).unwrap();
    assert_eq!(before.ino(), after.ino());
    assert_eq!(after.nlink(), 2);
    assert_eq!(
        fs::metadata(m.ws().join("stable2")).unwrap().ino(),
        before.ino()
    );
    fs::remove_file(m.ws().join("stable2")).unwrap();
    assert_eq!(
        fs::metadata(&p).unwrap().nlink(),
        1,
        "nlink is not stale after unlink"
    );
}

#[test]
fn inotifywait_sees_changes_made_through_the_mount() {
    let m = Mounted::new();
    let ws = m.ws();
    let mut child = Command::new("inotifywait")
        .args([
            "-m",
            "-e",
            "create,modify,moved_to,delete",
            "--format",
            "%e %f",
        ])
        .arg(&ws)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("inotifywait (inotify-tools) is installed");
    // Wait until the watch is set up.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("Watches established") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "inotifywait exited");
    }
    fs::write(ws.join("n1"), b"one").unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(ws.join("n1"))
        .unwrap()
        .write_all(b"more")
        .unwrap();
    fs::rename(ws.join("n1"), ws.join("n2")).unwrap();
    fs::remove_file(ws.join("n2")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            if tx.send(l.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        let done = l == "DELETE n2";
        seen.push(l);
        if done {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    for want in ["CREATE n1", "MODIFY n1", "MOVED_TO n2", "DELETE n2"] {
        assert!(
            seen.iter().any(|s| s == want),
            "missing {want:?} in {seen:?}"
        );
    }
}

#[test]
fn a_slow_call_does_not_stall_ls() {
    // The daemon takes 3 s over every lookup of "slow" (a test hook); meanwhile other requests
    // are served by the other worker threads.
    let m = Mounted::with_args_env(&[], &[("CLAWFS_FAULT_SLOW_LOOKUP", "slow=3000")]);
    // (The kernel holds the directory being searched locked, so the rest happens elsewhere.)
    fs::create_dir(m.ws().join("busy")).unwrap();
    fs::create_dir(m.ws().join("other")).unwrap();
    let slow = std::thread::spawn({
        let p = m.ws().join("busy/slow");
        move || fs::metadata(p).is_err()
    });
    creates_and_lists_while(&m.ws().join("other"), &slow);
    assert!(slow.join().unwrap());
}

/// Small files opened only for reading are served through the page cache, writers by
/// passthrough; the kernel refuses to mix the two on one inode. Every interleaving must work
/// and show the latest bytes, on the mount and in the store.
#[test]
fn cached_readers_and_passthrough_writers_interleave() {
    let m = Mounted::new();
    let p = m.ws().join("small.txt");
    let read = |p: &Path| fs::read_to_string(p).unwrap();
    fs::write(&p, "one!").unwrap();
    assert_eq!(read(&p), "one!"); // cached: the kernel now holds the pages
    assert_eq!(read(&p), "one!");

    // Overwritten in place by a writer alone (passthrough, past the page cache), with the
    // size and mtime as before: only the mount's bookkeeping can tell the pages are stale.
    let mtime = fs::metadata(&p).unwrap().modified().unwrap();
    let w = OpenOptions::new().write(true).open(&p).unwrap();
    w.write_all_at(b"ONE", 0).unwrap();
    w.set_modified(mtime).unwrap();
    drop(w);
    assert_eq!(read(&p), "ONE!");

    // A writer opening while a cached reader is open joins the page cache: no EIO, and the
    // reader sees the write.
    let mut reader = fs::File::open(&p).unwrap();
    let w = OpenOptions::new().write(true).open(&p).unwrap();
    w.write_all_at(b"two", 0).unwrap();
    let mut s = String::new();
    reader.read_to_string(&mut s).unwrap();
    assert_eq!(s, "two!");
    drop((w, reader));

    // A reader opening while a passthrough writer is open joins passthrough.
    let mut w = OpenOptions::new().append(true).open(&p).unwrap();
    w.write_all(b"3").unwrap();
    assert_eq!(read(&p), "two!3");
    w.write_all(b"4").unwrap();
    assert_eq!(read(&p), "two!34");
    drop(w);
    assert_eq!(read(&p), "two!34");
    assert_eq!(read(&m.backing("workspaces/default/small.txt")), "two!34");
}

/// A small file's pages are kept across opens, but not past a change made behind the daemon's
/// back: once the attribute timeout lapses the kernel sees the new mtime and drops them.
#[test]
fn cached_pages_follow_changes_made_in_the_store() {
    let m = Mounted::with_args(&["--attr-timeout", "0.3"]);
    let p = m.ws().join("notes.md");
    fs::write(&p, "old text").unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "old text");
    assert_eq!(fs::read_to_string(&p).unwrap(), "old text");

    // Same size, rewritten in place in the store, a second later (a new mtime).
    std::thread::sleep(Duration::from_millis(1100));
    let backing = m.backing("workspaces/default/notes.md");
    let f = OpenOptions::new().write(true).open(&backing).unwrap();
    f.write_all_at(b"new text", 0).unwrap();
    drop(f);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(fs::read_to_string(&p).unwrap(), "new text");
}

/// Lookups of missing names in a folder that has not changed for a while are answered from
/// the daemon's copy of its names; a name made or renamed in the store behind the daemon's
/// back, or made through the mount, is found at once all the same.
#[test]
fn missing_names_follow_changes_made_in_the_store() {
    // No kernel cache of entries: every stat below asks the daemon.
    let m = Mounted::with_args(&["--attr-timeout", "0", "--no-search"]);
    let dir = m.ws().join("lib");
    fs::create_dir(&dir).unwrap();
    for i in 0..5 {
        fs::write(dir.join(format!("f{i}")), "x").unwrap();
    }
    let backing = |name: &str| m.backing(&format!("workspaces/default/lib/{name}"));
    let settle_and_miss = |round: &str| {
        // Longer than the daemon waits for a folder to settle before copying its names.
        std::thread::sleep(Duration::from_millis(2300));
        for i in 0..40 {
            let miss = dir.join(format!("{round}-miss{i}"));
            assert_eq!(
                errno(fs::metadata(&miss)),
                libc::ENOENT,
                "{}",
                miss.display()
            );
        }
    };

    settle_and_miss("create");
    fs::write(backing("behind"), "made in the store").unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("behind")).unwrap(),
        "made in the store"
    );

    settle_and_miss("rename");
    fs::rename(backing("f0"), backing("renamed")).unwrap();
    assert!(dir.join("renamed").exists());
    assert_eq!(errno(fs::metadata(dir.join("f0"))), libc::ENOENT);

    settle_and_miss("mount");
    fs::write(dir.join("made"), "through the mount").unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("made")).unwrap(),
        "through the mount"
    );
    assert!(dir.join("f1").exists());
}

/// Lists `dir` with `ls -l` and checks every name, size and inode number against the store.
fn check_listing(m: &Mounted, dir: &str, n: usize) {
    let listed = sh(&format!(
        "ls -lin --time-style=+ {}",
        m.ws().join(dir).display()
    ));
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .skip(1) // "total N"
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), n, "ls -l of {dir} lists every entry:\n{listed}");
    for row in rows {
        // inode, mode, links, uid, gid, size, name
        let name = row[row.len() - 1];
        let backing = fs::metadata(m.backing(&format!("workspaces/default/{dir}/{name}"))).unwrap();
        let through = fs::symlink_metadata(m.ws().join(dir).join(name)).unwrap();
        assert_eq!(row[5], backing.len().to_string(), "size of {dir}/{name}");
        assert_eq!(row[0], through.ino().to_string(), "inode of {dir}/{name}");
    }
    let mut names: Vec<_> = fs::read_dir(m.ws().join(dir))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let ino = e.ino();
            assert_eq!(
                ino,
                e.metadata().unwrap().ino(),
                "d_ino of {:?}",
                e.file_name()
            );
            e.file_name()
        })
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "readdir of {dir} returns each entry once");
}

#[test]
fn small_and_large_directories_list_whole_with_right_attributes() {
    // A directory of up to 64 entries comes back with attributes in the listing's first reply;
    // a larger one is listed without them and stat'ed per name (adapter.rs READDIRPLUS_BATCH).
    let m = Mounted::new();
    for (dir, n) in [("small", 10), ("edge", 64), ("large", 500)] {
        fs::create_dir(m.ws().join(dir)).unwrap();
        for i in 0..n {
            fs::write(m.ws().join(dir).join(format!("f{i:04}")), vec![b'x'; i]).unwrap();
        }
    }
    assert!(m.umount().status.success());
    m.mount(&[]); // a cold kernel: no dentries, no attributes
    for (dir, n) in [("small", 10), ("edge", 64), ("large", 500)] {
        check_listing(&m, dir, n);
    }
}

/// A listing read in small steps stays whole when the kernel drops its cache of the folder
/// midway (memory pressure; here `drop_caches`): the kernel served the first entries from
/// that cache, then asks the daemon for the rest on a handle that has listed nothing yet.
/// `git clone` of a local repository copied half of `objects/` this way.
#[test]
fn a_listing_survives_the_kernel_dropping_its_cache_midway() {
    let m = Mounted::new();
    let dir = m.ws().join("big");
    fs::create_dir(&dir).unwrap();
    for i in 0..300 {
        fs::write(dir.join(format!("entry-{i:04}")), "").unwrap();
    }
    let script = r#"
import ctypes, os, sys
d = sys.argv[1]
whole = len(os.listdir(d))  # fills the kernel's cache of the folder
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
buf = ctypes.create_string_buffer(1024)
names, first = [], True
while True:
    n = libc.syscall(217, fd, buf, len(buf))  # getdents64
    if n < 0:
        raise OSError(ctypes.get_errno(), "getdents64")
    if n == 0:
        break
    off = 0
    while off < n:
        reclen = int.from_bytes(buf.raw[off + 16:off + 18], "little")
        names.append(buf.raw[off + 19:off + reclen].split(b"\0", 1)[0])
        off += reclen
    if first:
        open("/proc/sys/vm/drop_caches", "w").write("1\n")
        first = False
print(whole, len(set(names) - {b".", b".."}))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "300 300");
}

/// 200 ms after `slow` started, 50 creates in `dir`, each followed by a listing of it, all
/// while `slow` (a request the daemon holds for seconds) has not ended.
pub(crate) fn creates_and_lists_while(dir: &Path, slow: &std::thread::JoinHandle<bool>) {
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..50 {
        fs::write(dir.join(format!("f{i}")), b"x").unwrap();
        assert!(fs::read_dir(dir).unwrap().count() > i);
    }
    assert!(
        !slow.is_finished(),
        "ls and 50 creates were served while the slow request was still in the daemon"
    );
}
