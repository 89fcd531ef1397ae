//! Deny paths: every refusal ClawFS adds on top of POSIX, with its errno, its reason in the
//! daemon log, and nothing changed in the store.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{symlink, PermissionsExt};

use crate::common::{errno, tree, Mounted};

/// The six areas of the store (the private area holds the daemon's log, which grows).
fn areas(m: &Mounted) -> Vec<(String, String)> {
    tree(&m.store)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(".clawfs"))
        .collect()
}

/// Asserts that `f` is refused with `want` and that the store is byte-for-byte unchanged.
fn refused(m: &Mounted, what: &str, want: i32, f: impl FnOnce() -> std::io::Result<()>) {
    let before = areas(m);
    let got = errno(f());
    assert_eq!(got, want, "{what}: errno {got}, wanted {want}");
    assert!(before == areas(m), "{what} changed the store");
}

#[test]
fn system_and_specs_are_read_only() {
    let m = Mounted::new();
    for area in ["system", "specs"] {
        let root = m.path(area);
        let file = if area == "system" {
            m.path("system/seccomp/whitelist.json")
        } else {
            m.path("specs/signatures.json")
        };
        refused(&m, "create", libc::EROFS, || {
            fs::write(root.join("new"), b"x")
        });
        refused(&m, "mkdir", libc::EROFS, || fs::create_dir(root.join("d")));
        refused(&m, "open for write", libc::EROFS, || {
            OpenOptions::new().write(true).open(&file).map(drop)
        });
        refused(&m, "truncate", libc::EROFS, || {
            OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&file)
                .map(drop)
        });
        refused(&m, "unlink", libc::EROFS, || fs::remove_file(&file));
        refused(&m, "chmod", libc::EROFS, || {
            fs::set_permissions(&file, fs::Permissions::from_mode(0o666))
        });
        refused(&m, "setxattr", libc::EROFS, || {
            xattr::set(&file, "user.x", b"1")
        });
        refused(&m, "symlink", libc::EROFS, || symlink("x", root.join("l")));
        refused(&m, "rename inside", libc::EROFS, || {
            fs::rename(&file, root.join("moved"))
        });
        // Reading works.
        assert!(!fs::read(&file).unwrap().is_empty());
    }
}

#[test]
fn the_namespace_root_is_fixed() {
    let m = Mounted::new();
    refused(&m, "create at root", libc::EPERM, || {
        fs::write(m.path("x"), b"x")
    });
    refused(&m, "mkdir at root", libc::EPERM, || {
        fs::create_dir(m.path("extra"))
    });
    refused(&m, "rmdir an area", libc::EPERM, || {
        fs::remove_dir(m.path("tools"))
    });
    refused(&m, "rename an area", libc::EPERM, || {
        fs::rename(m.path("tools"), m.path("tools2"))
    });
    refused(&m, "chmod the root", libc::EPERM, || {
        fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o777))
    });
    refused(&m, "chmod vault", libc::EPERM, || {
        fs::set_permissions(m.path("vault"), fs::Permissions::from_mode(0o777))
    });
}

#[test]
fn workspace_and_agent_names_follow_the_rules() {
    let m = Mounted::new();
    for bad in [
        "Bad",
        "has space",
        "under_score",
        "-lead",
        "système",
        "system",
        "vault",
    ] {
        refused(&m, bad, libc::EINVAL, || {
            fs::create_dir(m.path(&format!("workspaces/{bad}")))
        });
    }
    let long = "a".repeat(65);
    refused(&m, "65 chars", libc::EINVAL, || {
        fs::create_dir(m.path(&format!("workspaces/{long}")))
    });
    refused(&m, "file in workspaces/", libc::EPERM, || {
        fs::write(m.path("workspaces/loose.txt"), b"x")
    });
    refused(&m, "agent name", libc::EINVAL, || {
        fs::create_dir(m.path("agents/Agent_1"))
    });
    // Snapshots are made by `clawfs snapshot`, never written through the mount.
    for name in ["latest.db", "snapshot-2026-11-22.db"] {
        refused(&m, name, libc::EROFS, || {
            fs::write(
                m.path(&format!("workspaces/default/snapshots/{name}")),
                b"x",
            )
        });
    }
    // The reason is in the log.
    let log = m.log();
    assert!(log.contains("is a reserved workspace name"), "{log}");
    assert!(
        log.contains("snapshots are read-only through the mount"),
        "{log}"
    );
}

#[test]
fn managed_files_cannot_be_removed_or_replaced() {
    let m = Mounted::new();
    let ws = m.ws();
    fs::write(ws.join("other.json"), b"{}").unwrap();
    refused(&m, "rm metadata.json", libc::EPERM, || {
        fs::remove_file(ws.join("metadata.json"))
    });
    refused(&m, "rmdir snapshots", libc::EPERM, || {
        fs::remove_dir(ws.join("snapshots"))
    });
    refused(&m, "replace metadata.json", libc::EPERM, || {
        fs::rename(ws.join("other.json"), ws.join("metadata.json"))
    });
    refused(&m, "rename a workspace", libc::EPERM, || {
        fs::rename(m.path("workspaces/default"), m.path("workspaces/renamed"))
    });
}

#[test]
fn renames_and_links_stay_inside_their_area() {
    let m = Mounted::new();
    let f = m.ws().join("f");
    fs::write(&f, b"data").unwrap();
    refused(&m, "rename to tools", libc::EXDEV, || {
        fs::rename(&f, m.path("tools/f"))
    });
    refused(&m, "link to agents", libc::EXDEV, || {
        fs::hard_link(&f, m.path("agents/fs-engine/f"))
    });
    // `mv` falls back to copy + delete across areas, as across filesystems (into agents/:
    // tools/ serves only the files its registry signs).
    crate::common::sh(&format!(
        "mv {} {}",
        f.display(),
        m.path("agents/fs-engine/f").display()
    ));
    assert_eq!(fs::read(m.path("agents/fs-engine/f")).unwrap(), b"data");
    assert!(!f.exists());
}

#[test]
fn other_xattr_namespaces_are_refused() {
    let m = Mounted::new();
    let f = m.ws().join("f");
    fs::write(&f, b"x").unwrap();
    refused(&m, "trusted.*", libc::EOPNOTSUPP, || {
        xattr::set(&f, "trusted.x", b"1")
    });
    refused(&m, "security.*", libc::EOPNOTSUPP, || {
        xattr::set(&f, "security.x", b"1")
    });
    assert_eq!(
        errno(
            xattr::get(&f, "trusted.x")
                .and_then(|v| v.ok_or(std::io::Error::from_raw_os_error(libc::ENODATA)))
        ),
        libc::ENODATA
    );
    refused(&m, "remove clawfs attr", libc::EINVAL, || {
        xattr::remove(m.ws(), "user.clawfs.vector_dimension")
    });
}

#[test]
fn ordinary_users_get_posix_permissions() {
    let m = Mounted::new();
    // workspaces/ is 0750 root:clawos-users: an outsider cannot even look in.
    let out = crate::common::sh_as_nobody(&format!("ls {}", m.path("workspaces").display()));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    // The admin opens the default workspace; files are then created as the caller.
    m.open_workspace_to_all();
    let f = m.ws().join("by-nobody");
    let out = crate::common::sh_as_nobody(&format!("echo hi > {}", f.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = fs::metadata(m.backing("workspaces/default/by-nobody")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((md.uid(), md.gid()), (65534, 65534));
    // And nobody cannot overwrite root's file.
    fs::write(m.ws().join("roots"), b"root").unwrap();
    fs::set_permissions(m.ws().join("roots"), fs::Permissions::from_mode(0o644)).unwrap();
    let out = crate::common::sh_as_nobody(&format!("echo x > {}", m.ws().join("roots").display()));
    assert!(!out.status.success());
    assert_eq!(fs::read(m.ws().join("roots")).unwrap(), b"root");
    // The admin's chmod of the roots persists across a remount.
    assert!(m.umount().status.success());
    m.mount(&[]);
    let mode = fs::metadata(m.path("workspaces"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755);
}

#[test]
fn a_tampered_spec_is_not_served() {
    let m = Mounted::new();
    let spec = m.path("specs/p1/P1.4-clawfs-spec.md");
    assert!(fs::read(&spec).unwrap().starts_with(b"# P1.4"));
    // Edited in the store behind the daemon's back.
    let backing = m.backing("specs/p1/P1.4-clawfs-spec.md");
    fs::set_permissions(&backing, fs::Permissions::from_mode(0o644)).unwrap();
    let mut text = fs::read(&backing).unwrap();
    text[2] ^= 0x20;
    fs::write(&backing, &text).unwrap();
    assert_eq!(errno(fs::read(&spec)), libc::EIO);
    assert!(m.log().contains("not served"), "{}", m.log());
    // An unsigned document is not served either; signatures.json always is.
    fs::write(m.backing("specs/p1/unsigned.md"), b"x").unwrap();
    assert_eq!(errno(fs::read(m.path("specs/p1/unsigned.md"))), libc::EIO);
    assert!(fs::read(m.path("specs/signatures.json")).is_ok());
}
