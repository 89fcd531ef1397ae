//! POSIX rules a root daemon writing on a caller's behalf would miss: setuid/setgid bits that
//! a write or an fallocate by a non-owner must clear, paths as long as PATH_MAX, a running
//! program truncated through a read-only open, SEEK_DATA/SEEK_HOLE at a negative offset.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::common::{errno, Mounted};
use crate::support::{text, TempUser};

/// The permission bits of `p` as the kernel reports them, from its cache if it holds them.
fn mode(p: &Path) -> u32 {
    cached_mode(p)
}

#[test]
fn a_write_by_someone_else_clears_setuid_and_setgid() {
    for passthrough in [true, false] {
        let m = Mounted::with_args(if passthrough {
            &[]
        } else {
            &["--no-passthrough"]
        });
        m.open_workspace_to_all();
        let user = TempUser::new("sg");
        for (bits, after) in [
            (0o4777, 0o777),
            (0o2777, 0o777),
            (0o6777, 0o777),
            (0o2767, 0o2767),
        ] {
            let f = m.ws().join(format!("f{bits:o}"));
            fs::write(&f, "").unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(bits)).unwrap();
            let out = user.sh(&format!("printf x >> {}", f.display()));
            assert!(out.status.success(), "{}", text(&out));
            assert_eq!(mode(&f), after, "{bits:o}, passthrough {passthrough}");
            // Truncation by someone else clears them too.
            fs::set_permissions(&f, fs::Permissions::from_mode(bits)).unwrap();
            let out = user.sh(&format!(": > {}", f.display()));
            assert!(out.status.success(), "{}", text(&out));
            assert_eq!(
                mode(&f),
                after,
                "truncate {bits:o}, passthrough {passthrough}"
            );
        }
        // The owner (root) writing keeps them.
        let f = m.ws().join("own");
        fs::write(&f, "").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o4755)).unwrap();
        fs::write(&f, "x").unwrap();
        assert_eq!(mode(&f), 0o4755);
    }
}

/// `fallocate` by another user (allocate, keep-size, punch a hole, zero a range) clears the
/// bits as a write does: the daemon itself, as root, would keep them.
#[test]
fn an_fallocate_by_someone_else_clears_setuid_and_setgid() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    let user = TempUser::new("fa");
    for how in [
        "-l 8192",
        "-n -l 8192",
        "-p -o 0 -l 4096",
        "-z -o 0 -l 4096",
    ] {
        for (bits, after) in [(0o6777, 0o777), (0o2767, 0o2767)] {
            let f = m.ws().join(format!("f{bits:o}"));
            fs::write(&f, vec![b'x'; 8192]).unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(bits)).unwrap();
            let out = user.sh(&format!("fallocate {how} {}", f.display()));
            assert!(out.status.success(), "fallocate {how}: {}", text(&out));
            assert_eq!(mode(&f), after, "fallocate {how} on {bits:o}");
        }
    }
    // Root's own fallocate keeps them.
    let f = m.ws().join("own");
    fs::write(&f, "").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6777)).unwrap();
    let out = std::process::Command::new("fallocate")
        .args(["-l", "8192"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(mode(&f), 0o6777);
}

/// SEEK_DATA and SEEK_HOLE at a negative offset find nothing (ENXIO), as on a local
/// filesystem; a plain seek there is EINVAL.
#[test]
fn seek_data_and_hole_at_a_negative_offset_are_enxio() {
    use std::os::fd::AsRawFd;
    for args in [&[][..], &["--no-passthrough"][..]] {
        let m = Mounted::with_args(args);
        let path = m.ws().join("sparse");
        fs::write(&path, vec![b'x'; 4096]).unwrap();
        let f = fs::File::open(&path).unwrap();
        let seek = |offset: i64, whence: i32| {
            // SAFETY: a plain lseek on a descriptor this test holds open.
            let r = unsafe { libc::lseek(f.as_raw_fd(), offset, whence) };
            if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(r)
            }
        };
        assert_eq!(errno(seek(-1, libc::SEEK_DATA)), libc::ENXIO, "{args:?}");
        assert_eq!(errno(seek(-1, libc::SEEK_HOLE)), libc::ENXIO, "{args:?}");
        assert_eq!(errno(seek(-1, libc::SEEK_SET)), libc::EINVAL, "{args:?}");
        assert_eq!(seek(0, libc::SEEK_DATA).unwrap(), 0);
        assert_eq!(seek(0, libc::SEEK_HOLE).unwrap(), 4096);
        assert_eq!(errno(seek(4096, libc::SEEK_DATA)), libc::ENXIO);
    }
}

/// `fstat` of a directory still open after it was removed, or replaced by a rename, answers as
/// natively (no links left) instead of ESTALE.
#[test]
fn an_open_directory_that_was_removed_can_still_be_fstat_ed() {
    use std::os::unix::fs::MetadataExt;
    let m = Mounted::new();
    let (gone, over, other) = (
        m.ws().join("gone"),
        m.ws().join("over"),
        m.ws().join("other"),
    );
    for d in [&gone, &over, &other] {
        fs::create_dir(d).unwrap();
    }
    let open_gone = fs::File::open(&gone).unwrap();
    let open_over = fs::File::open(&over).unwrap();
    let ino = open_gone.metadata().unwrap().ino();
    fs::remove_dir(&gone).unwrap();
    fs::rename(&other, &over).unwrap();
    for (what, dir) in [("removed", &open_gone), ("renamed over", &open_over)] {
        let md = dir
            .metadata()
            .unwrap_or_else(|e| panic!("fstat of the {what} directory: {e}"));
        assert!(md.is_dir(), "{what}");
        assert_eq!(md.nlink(), 0, "{what}: no links left");
    }
    assert_eq!(open_gone.metadata().unwrap().ino(), ino);
}

#[test]
fn paths_up_to_path_max_work_and_one_more_is_enametoolong() {
    let m = Mounted::new();
    let base = m.ws().join("p");
    fs::create_dir(&base).unwrap();
    // Relative to a directory on the mount: PATH_MAX - 1 bytes, as the C suite builds them.
    // Their full backing path is longer than the kernel can name (a page).
    let path_max = libc::PATH_MAX as usize;
    let component = "d".repeat(200);
    let mut rel = String::new();
    while rel.len() + component.len() + 1 < path_max - 1 {
        rel.push_str(&component);
        rel.push('/');
    }
    let full = format!("{rel}{}", "f".repeat(path_max - 1 - rel.len()));
    assert_eq!(full.len(), path_max - 1);
    let script = format!(
        "cd {base} && for c in $(echo {rel} | tr / ' '); do mkdir $c && cd $c || exit 1; done && \
         cd {base} && : > {full} && chmod 0600 {full} && chown 65534 {full} && \
         truncate -s 5 {full} && ln {full} {base}/hard && stat -c %s {base}/hard && \
         (: > {full}x) 2>&1; true",
        base = base.display(),
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(shown.starts_with("5\n"), "{shown}");
    assert!(shown.contains("File name too long"), "{shown}");
    assert_eq!(mode(&base.join("hard")), 0o600);
}

#[test]
fn a_running_program_is_not_truncated_by_a_read_only_open() {
    for args in [&[][..], &["--no-passthrough"][..]] {
        let m = Mounted::with_args(args);
        let prog = m.ws().join("sleep");
        fs::copy("/bin/sleep", &prog).unwrap();
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
        let size = fs::metadata(&prog).unwrap().len();
        let mut child = std::process::Command::new(&prog).arg("10").spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let trunc = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_TRUNC)
            .open(&prog);
        assert_eq!(errno(trunc), libc::ETXTBSY, "{args:?}");
        assert_eq!(
            errno(fs::OpenOptions::new().write(true).open(&prog)),
            libc::ETXTBSY
        );
        assert_eq!(
            fs::metadata(m.backing("workspaces/default/sleep"))
                .unwrap()
                .len(),
            size
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the program died: {args:?}"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A kernel file handle of `path` (`name_to_handle_at`), as `struct file_handle` bytes.
fn handle_of(path: &Path) -> Vec<u8> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = vec![0u32; 2 + 128 / 4];
    buf[0] = 128;
    let mut mount_id = 0;
    // SAFETY: `buf` is an aligned `file_handle` with room for 128 bytes, as its size field says.
    let rc = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "{}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    buf.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// Opens the handle `h` on the filesystem of `mount` (`open_by_handle_at`).
fn open_handle(mount: &Path, h: &[u8], flags: i32) -> std::io::Result<fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let m = fs::File::open(mount)?;
    let mut words: Vec<u32> = h
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // SAFETY: `words` holds a `file_handle` as `name_to_handle_at` wrote it.
    let fd = unsafe { libc::open_by_handle_at(m.as_raw_fd(), words.as_mut_ptr().cast(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns.
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// The kernel drops every unused dentry and inode: the daemon is told to forget them.
fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
}

/// File handles survive (FUSE_EXPORT_SUPPORT): a handle from `name_to_handle_at` opens its
/// file or folder after the kernel dropped the inode and after a remount, also once the file
/// was moved to another folder or kept only by a hard link; a removed file's handle is stale
/// (ESTALE), as on a local filesystem.
#[test]
fn file_handles_open_after_the_kernel_forgot_the_inode_and_after_a_remount() {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let m = Mounted::new();
    let dir = m.ws().join("fh");
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("a"), "alpha").unwrap();
    fs::write(dir.join("sub/b"), "beta").unwrap();
    fs::write(dir.join("gone"), "x").unwrap();
    fs::write(dir.join("moved"), "moved").unwrap();
    fs::write(dir.join("linked"), "linked").unwrap();
    let (a, sub, gone) = (
        handle_of(&dir.join("a")),
        handle_of(&dir.join("sub")),
        handle_of(&dir.join("gone")),
    );
    let (moved, linked) = (
        handle_of(&dir.join("moved")),
        handle_of(&dir.join("linked")),
    );
    fs::remove_file(dir.join("gone")).unwrap();
    drop_caches();
    fs::rename(dir.join("moved"), dir.join("sub/moved-here")).unwrap();
    fs::hard_link(dir.join("linked"), dir.join("sub/link")).unwrap();
    fs::remove_file(dir.join("linked")).unwrap();
    let check = |round: &str| {
        drop_caches();
        let mut text = String::new();
        open_handle(&m.mnt, &a, libc::O_RDONLY)
            .unwrap_or_else(|e| panic!("{round}: a: {e}"))
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "alpha", "{round}");
        let d = open_handle(&m.mnt, &sub, libc::O_RDONLY | libc::O_DIRECTORY)
            .unwrap_or_else(|e| panic!("{round}: sub: {e}"));
        let names: Vec<_> = fs::read_dir(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&d)
        ))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
        let mut names = names;
        names.sort();
        assert_eq!(names, ["b", "link", "moved-here"], "{round}");
        for (h, want) in [(&moved, "moved"), (&linked, "linked")] {
            let mut text = String::new();
            open_handle(&m.mnt, h, libc::O_RDONLY)
                .unwrap_or_else(|e| panic!("{round}: {want}: {e}"))
                .read_to_string(&mut text)
                .unwrap();
            assert_eq!(text, want, "{round}");
        }
        let b = fs::File::open(dir.join("sub/b")).unwrap();
        let mut buf = [0u8; 4];
        b.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"beta");
        assert_eq!(
            errno(open_handle(&m.mnt, &gone, libc::O_RDONLY)),
            libc::ESTALE,
            "{round}"
        );
    };
    check("after the kernel forgot");
    let out = m.umount();
    assert!(out.status.success(), "{}", text(&out));
    m.mount(&[]);
    check("after a remount");
}

/// The access time of `p`, in nanoseconds.
fn atime(p: &Path) -> i128 {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(p).unwrap();
    i128::from(m.atime()) * 1_000_000_000 + i128::from(m.atime_nsec())
}

/// Access times follow the mount's mode (`--atime`, or `noatime`/`nodiratime` in fstab): the
/// daemon's own reads (a lookup of a missing name reads the folder) never change a folder's
/// access time; with `noatime` reading a file does not either, with `nodiratime` listing a
/// folder does not; by default (the store's relatime) a first read does.
#[test]
fn access_times_follow_the_mount_mode() {
    let pause = || std::thread::sleep(std::time::Duration::from_millis(1100));
    for mode in ["relatime", "noatime", "nodiratime"] {
        let m = Mounted::with_args(&["--atime", mode]);
        let dir = m.ws().join("at");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("seed"), "x").unwrap();
        let before = atime(&dir);
        pause();
        // Looking up missing names, then creating one: the folder was not read by anyone.
        for i in 0..3 {
            assert!(!dir.join(format!("missing{i}")).exists());
        }
        fs::write(dir.join("new"), "new").unwrap();
        assert_eq!(
            atime(&dir),
            before,
            "{mode}: a create changed the folder's atime"
        );
        let file = dir.join("new");
        let (f0, d0) = (atime(&file), atime(&dir));
        pause();
        assert_eq!(fs::read_to_string(&file).unwrap(), "new");
        let _ = fs::read_dir(&dir).unwrap().count();
        let (f1, d1) = (atime(&file), atime(&dir));
        match mode {
            "relatime" => assert!(f1 > f0 && d1 > d0, "{mode}: {f0} {f1} {d0} {d1}"),
            "noatime" => assert!(f1 == f0 && d1 == d0, "{mode}: {f0} {f1} {d0} {d1}"),
            _ => assert!(f1 > f0 && d1 == d0, "{mode}: {f0} {f1} {d0} {d1}"),
        }
    }
}

/// The rows the store keeps of user attributes past what backing inodes hold.
fn kept_attribute_rows(m: &Mounted) -> usize {
    let spill = clawfs_core::xattr_spill::Spill::new(&m.backing(".clawfs"));
    spill.bytes_by_handle().unwrap().len()
}

fn set_xattr(p: &Path, name: &str, value: &[u8], flags: i32) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and a buffer of the given length.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// A file holds 1,000 user attributes and a 64 KiB value whatever the backing filesystem holds
/// per inode (ext4: about 110 small ones, no value past a block), with the kernel's rules: the
/// create and replace flags, ENODATA once removed, names kept across links and renames, and
/// another user's change refused as the file's mode says, nothing changed. The store forgets
/// them with the file's last name.
#[test]
fn a_thousand_user_attributes_and_values_of_64_kib() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    let f = m.ws().join("many");
    fs::write(&f, "x").unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt 1000 ]; do setfattr -n user.attribute_$i -v value_$i {} || exit 1; i=$((i+1)); done",
            f.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let dump = crate::common::sh(&format!("getfattr -d --absolute-names {}", f.display()));
    assert_eq!(
        dump.lines()
            .filter(|l| l.starts_with("user.attribute_"))
            .count(),
        1000
    );
    for i in [0, 500, 999] {
        let v = xattr::get(&f, format!("user.attribute_{i}")).unwrap();
        assert_eq!(v, Some(format!("value_{i}").into_bytes()));
    }
    assert!(kept_attribute_rows(&m) > 0, "ext4 alone would have refused");
    let long = vec![0xabu8; 65536];
    xattr::set(&f, "user.long_attr", &long).unwrap();
    assert_eq!(xattr::get(&f, "user.long_attr").unwrap(), Some(long));
    // The flags, on an attribute kept beside the file and on one that is nowhere.
    assert_eq!(
        errno(set_xattr(
            &f,
            "user.attribute_999",
            b"again",
            libc::XATTR_CREATE
        )),
        libc::EEXIST
    );
    assert_eq!(
        errno(set_xattr(&f, "user.nowhere", b"v", libc::XATTR_REPLACE)),
        libc::ENODATA
    );
    set_xattr(&f, "user.attribute_999", b"replaced", libc::XATTR_REPLACE).unwrap();
    assert_eq!(
        xattr::get(&f, "user.attribute_999").unwrap(),
        Some(b"replaced".to_vec())
    );
    xattr::remove(&f, "user.attribute_998").unwrap();
    assert_eq!(xattr::get(&f, "user.attribute_998").unwrap(), None);
    assert_eq!(
        errno(xattr::remove(&f, "user.attribute_998")),
        libc::ENODATA
    );
    // Another user may read them where the mode lets it, and change none.
    let user = TempUser::new("xa");
    let get = |who: &TempUser| who.sh(&format!("getfattr -n user.attribute_999 {}", f.display()));
    let out = get(&user);
    assert!(
        out.status.success() && text(&out).contains("replaced"),
        "{}",
        text(&out)
    );
    for change in [
        format!("setfattr -n user.attribute_999 -v evil {}", f.display()),
        format!("setfattr -x user.attribute_997 {}", f.display()),
        format!("setfattr -n user.new_one -v evil {}", f.display()),
    ] {
        let out = user.sh(&change);
        assert!(!out.status.success(), "{change}: {}", text(&out));
        assert!(text(&out).contains("Permission denied"), "{}", text(&out));
    }
    assert_eq!(
        xattr::get(&f, "user.attribute_999").unwrap(),
        Some(b"replaced".to_vec())
    );
    assert!(xattr::get(&f, "user.attribute_997").unwrap().is_some());
    assert_eq!(xattr::get(&f, "user.new_one").unwrap(), None);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    let out = get(&user);
    assert!(!out.status.success(), "{}", text(&out));
    // A link and a rename keep them; the last name removed forgets them.
    let link = m.ws().join("link");
    fs::hard_link(&f, &link).unwrap();
    let moved = m.ws().join("moved");
    fs::rename(&f, &moved).unwrap();
    assert_eq!(
        xattr::get(&link, "user.attribute_999").unwrap(),
        Some(b"replaced".to_vec())
    );
    fs::remove_file(&moved).unwrap();
    assert!(kept_attribute_rows(&m) > 0, "one name is left");
    fs::remove_file(&link).unwrap();
    assert_eq!(kept_attribute_rows(&m), 0);
}

/// `statx` of `p` asked for `mask` alone, as `stat -c %Y` or `%A` asks: the kernel answers from
/// its cache unless it knows those fields changed (`std::fs::metadata`, and `stat(2)`, ask for
/// more, which may send it to the daemon whatever it holds).
fn statx_only(p: &Path, mask: u32) -> libc::statx {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed `statx` the call fills.
    unsafe {
        let mut st = std::mem::zeroed::<libc::statx>();
        let rc = libc::statx(libc::AT_FDCWD, path.as_ptr(), 0, mask, &mut st);
        assert_eq!(rc, 0);
        st
    }
}

/// The mtime and ctime of `p` in nanoseconds, from the kernel's cache if it holds them.
fn stat_times(p: &Path) -> (i128, i128) {
    let st = statx_only(p, libc::STATX_MTIME | libc::STATX_CTIME);
    let ns =
        |t: libc::statx_timestamp| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    (ns(st.stx_mtime), ns(st.stx_ctime))
}

/// The permission bits of `p`, from the kernel's cache if it holds them.
fn cached_mode(p: &Path) -> u32 {
    u32::from(statx_only(p, libc::STATX_MODE).stx_mode) & 0o7777
}

/// The owner's own `O_DIRECT` write to its setuid/setgid file, served by passthrough, clears
/// the bits as a local filesystem does (setgid only where the group may execute), and the
/// kernel reports the new mode at once, asked for the mode alone (xfstests generic/355).
#[test]
fn an_owners_direct_write_clears_setuid_and_the_mode_shows_it_at_once() {
    let m = Mounted::with_args(&["--attr-timeout", "60"]);
    m.open_workspace_to_all();
    let user = TempUser::new("dw");
    let f = m.ws().join("direct");
    for (bits, after) in [(0o6644, 0o2644), (0o6754, 0o754)] {
        fs::write(&f, "this is a test\n").unwrap();
        std::os::unix::fs::chown(&f, Some(user.uid), Some(user.uid)).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(bits)).unwrap();
        assert_eq!(cached_mode(&f), bits);
        let out = user.sh(&format!(
            "dd if=/dev/zero of={} bs=4096 count=1 oflag=direct conv=notrunc status=none",
            f.display()
        ));
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(cached_mode(&f), after, "{bits:o}");
        fs::remove_file(&f).unwrap();
    }
}

/// A write through a shared mapping of a file opened with passthrough changes its mtime and
/// ctime as the kernel reports them once the writer is gone, not one attribute timeout later
/// (xfstests generic/080): `make` decides from mtimes. The kernel holds the attributes from
/// before (a `stat` just after the file was written, as a build's scan leaves them); the writer
/// exits with the mapping still in place, as xfs_io does in the xfstests case.
#[test]
fn a_write_through_a_mapping_changes_mtime_at_once_with_passthrough() {
    let m = Mounted::with_args(&["--attr-timeout", "60"]);
    let f = m.ws().join("mapped");
    fs::write(&f, vec![b'a'; 4096]).unwrap();
    let before = stat_times(&f);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import mmap, os, sys\n\
             fd = os.open(sys.argv[1], os.O_RDWR)\n\
             m = mmap.mmap(fd, 4096)\n\
             m[:] = b'b' * 4096\n\
             os._exit(0)",
        )
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let after = stat_times(&f);
    assert!(
        after.0 > before.0,
        "mtime still from before the mapped write"
    );
    assert!(
        after.1 > before.1,
        "ctime still from before the mapped write"
    );
    assert_eq!(fs::read(&f).unwrap(), vec![b'b'; 4096]);
}
