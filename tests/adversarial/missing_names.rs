//! Lookups of missing names are answered from the daemon's copy of a folder's names once misses
//! keep coming there. The attacks: make a name exist in the store that the copy does not know,
//! without the change the daemon watches for, and have the mount deny it.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use crate::common::errno;
use crate::support::StoreOnImage;

/// `FS_IOC_ADD_ENCRYPTION_KEY`, `FS_IOC_REMOVE_ENCRYPTION_KEY`, `FS_IOC_SET_ENCRYPTION_POLICY`
/// (`linux/fscrypt.h`).
const ADD_KEY: libc::c_ulong = 0xc050_6617;
const REMOVE_KEY: libc::c_ulong = 0xc040_6618;
const SET_POLICY: libc::c_ulong = 0x800c_6613;
/// `FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER`.
const SPEC_IDENTIFIER: u32 = 2;

fn ioctl(path: &Path, request: libc::c_ulong, arg: &mut [u8]) {
    let f = File::open(path).unwrap();
    // SAFETY: `arg` is a buffer of the size the request's structure has, alive for the call.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), request, arg.as_mut_ptr()) };
    assert_eq!(
        rc,
        0,
        "ioctl {request:#x} on {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Adds a fixed 64-byte master key to the file system mounted at `root`; returns its identifier.
fn add_key(root: &Path) -> [u8; 16] {
    // struct fscrypt_add_key_arg: key_spec (type, reserved, u[32]), raw_size, key_id,
    // reserved[8], raw[raw_size].
    let mut arg = vec![0u8; 80 + 64];
    arg[0..4].copy_from_slice(&SPEC_IDENTIFIER.to_ne_bytes());
    arg[40..44].copy_from_slice(&64u32.to_ne_bytes());
    for (i, b) in arg[80..].iter_mut().enumerate() {
        *b = i as u8;
    }
    ioctl(root, ADD_KEY, &mut arg);
    arg[8..24].try_into().unwrap()
}

fn remove_key(root: &Path, id: [u8; 16]) {
    // struct fscrypt_remove_key_arg: key_spec, removal_status_flags, reserved[5].
    let mut arg = vec![0u8; 64];
    arg[0..4].copy_from_slice(&SPEC_IDENTIFIER.to_ne_bytes());
    arg[8..24].copy_from_slice(&id);
    ioctl(root, REMOVE_KEY, &mut arg);
}

/// Encrypts the empty folder `dir` with the key `id` (a v2 policy: AES-256-XTS contents,
/// AES-256-CTS names).
fn set_policy(dir: &Path, id: [u8; 16]) {
    let mut arg = vec![0u8; 24];
    arg[0..4].copy_from_slice(&[2, 1, 4, 0]);
    arg[8..24].copy_from_slice(&id);
    ioctl(dir, SET_POLICY, &mut arg);
}

/// An encrypted folder shows encoded names while its key is away and its real names when the
/// key comes back, and neither changes the folder's times. Missing names looked up while the
/// key was away must not make the real names missing once it is back.
#[test]
fn an_encrypted_folders_names_are_found_when_its_key_comes_back() {
    let disk = StoreOnImage::new(64, "-O encrypt", &["--attr-timeout", "0", "--no-search"]);
    let stored = disk.store().join("workspaces/default/enc");
    let seen = disk.mnt.join("workspaces/default/enc");
    let id = add_key(&disk.image_mnt);
    fs::create_dir(&stored).unwrap();
    set_policy(&stored, id);
    fs::write(stored.join("secret"), "hi\n").unwrap();
    remove_key(&disk.image_mnt, id);
    assert!(
        fs::read_dir(&stored)
            .unwrap()
            .all(|e| e.unwrap().file_name() != "secret"),
        "without its key the folder shows encoded names"
    );

    // Longer than the daemon waits for a folder to settle, then misses enough to be copied.
    std::thread::sleep(Duration::from_millis(2500));
    for i in 0..40 {
        assert_eq!(
            errno(fs::metadata(seen.join(format!("miss{i}")))),
            libc::ENOENT
        );
    }
    assert_eq!(add_key(&disk.image_mnt), id);
    assert_eq!(fs::read_to_string(seen.join("secret")).unwrap(), "hi\n");
}
