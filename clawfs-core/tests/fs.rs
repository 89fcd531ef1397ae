//! The filesystem without a mount: `ClawFs` built over a fresh store and driven the way the FUSE
//! adapter drives it (lookup, forget, create, write, read, release, rename), so lookup counting,
//! handles, the gate's decisions and generated files are tested where they live. Needs root (the
//! store is root's, and calls run with the caller's credentials).

use std::ffi::OsStr;

use clawfs_core::creds::Caller;
use clawfs_core::error::ToErrno;
use clawfs_core::fs::{Opened, SetAttr};
use clawfs_core::inodes::ROOT_INO;
use clawfs_core::{ClawFs, FsError, Store};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

macro_rules! require_root {
    () => {
        if !is_root() {
            // CI's machine runs every test as root: there a skip is a failure.
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "needs root (a root-owned store, calls as other uids)"
            );
            eprintln!("SKIP: needs root (a root-owned store, calls as other uids)");
            return;
        }
    };
}

/// A fresh store and the filesystem over it (no mount).
fn fs() -> (tempfile::TempDir, ClawFs) {
    fs_with(|b| b)
}

/// [`fs`], built with what `with` adds.
fn fs_with(
    with: impl FnOnce(clawfs_core::fs::ClawFsBuilder) -> clawfs_core::fs::ClawFsBuilder,
) -> (tempfile::TempDir, ClawFs) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    Store::init(&root).unwrap();
    let fs = with(ClawFs::builder(Store::open(&root).unwrap()))
        .build()
        .unwrap();
    (dir, fs)
}

const ADMIN: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 0,
};

/// fs-engine, by the uid the default policy gives it (rule 2: a uid the policy maps is the agent).
const FS_ENGINE: Caller = Caller {
    uid: 61006,
    gid: 61006,
    pid: 0,
};

fn errno(e: &FsError) -> i32 {
    e.errno()
}

fn lookup(fs: &ClawFs, parent: u64, name: &str) -> u64 {
    fs.lookup(&ADMIN, parent, OsStr::new(name))
        .unwrap_or_else(|e| panic!("lookup {name}: {e}"))
        .attr
        .ino
}

#[test]
fn lookups_are_counted_and_forget_drops_the_inode_at_zero() {
    require_root!();
    let (_d, fs) = fs();
    let ws = lookup(&fs, ROOT_INO, "workspaces");
    assert_eq!(
        lookup(&fs, ROOT_INO, "workspaces"),
        ws,
        "stable inode numbers"
    );
    // Two lookups: one forget leaves the inode known, the second drops it.
    fs.forget(ws, 1);
    assert!(fs.getattr(&ADMIN, ws, None).is_ok());
    fs.forget(ws, 1);
    let e = fs.getattr(&ADMIN, ws, None).unwrap_err();
    assert!(matches!(e, FsError::UnknownInode(_)), "{e:?}");
    // A missing name is ENOENT, and looking it up leaves nothing behind.
    let e = fs
        .lookup(&ADMIN, ROOT_INO, OsStr::new("nothing-here"))
        .unwrap_err();
    assert_eq!(errno(&e), libc::ENOENT);
}

#[test]
fn a_created_file_is_written_read_and_released_through_its_handle() {
    require_root!();
    let (_d, fs) = fs();
    let ws = lookup(&fs, ROOT_INO, "workspaces");
    let default = lookup(&fs, ws, "default");
    let (entry, opened) = fs
        .create(
            &ADMIN,
            default,
            OsStr::new("notes.md"),
            0o644,
            libc::O_CREAT | libc::O_RDWR,
        )
        .unwrap();
    let Opened::Backing(fh, _) = opened else {
        panic!("a workspace file is a backing file")
    };
    let ino = entry.attr.ino;
    assert_eq!(fs.write(ino, fh, 0, b"hello\n", false).unwrap(), 6);
    assert_eq!(fs.read(ino, fh, 0, 100).unwrap(), b"hello\n");
    fs.release(ino, fh).unwrap();
    assert!(matches!(
        fs.release(ino, fh).unwrap_err(),
        FsError::UnknownHandle(_)
    ));
    assert_eq!(fs.getattr(&ADMIN, ino, None).unwrap().size, 6);
    // The store holds the real file.
    let on_disk = fs.store().root().join("workspaces/default/notes.md");
    assert_eq!(std::fs::read(on_disk).unwrap(), b"hello\n");
}

#[test]
fn the_gate_refuses_an_agent_another_agents_directory_and_nothing_is_made() {
    require_root!();
    let (_d, fs) = fs();
    let agents = lookup(&fs, ROOT_INO, "agents");
    let other = lookup(&fs, agents, "build-engine");
    let mine = lookup(&fs, agents, "fs-engine");
    let e = fs
        .mkdir(&FS_ENGINE, other, OsStr::new("intruder"), 0o755)
        .unwrap_err();
    let FsError::Denied(denial) = &e else {
        panic!("refused by the policy, not the backing fs: {e:?}")
    };
    assert_eq!(denial.rule, "RULE-001", "{denial:?}");
    assert_eq!(errno(&e), libc::EACCES);
    assert!(!fs
        .store()
        .root()
        .join("agents/build-engine/intruder")
        .exists());
    // Its own directory is its to write.
    fs.mkdir(&FS_ENGINE, mine, OsStr::new("work"), 0o755)
        .unwrap();
    assert!(fs.store().root().join("agents/fs-engine/work").is_dir());
}

/// In a repository someone else owns (here root's, writable by the agent).
#[test]
fn git_config_is_made_only_by_a_checked_rename() {
    require_root!();
    let (_d, fs) = fs();
    let agents = lookup(&fs, ROOT_INO, "agents");
    let mine = lookup(&fs, agents, "fs-engine");
    // In a repository the agent owns, config is its own business.
    let own = fs
        .mkdir(&FS_ENGINE, mine, OsStr::new("own"), 0o755)
        .unwrap()
        .attr
        .ino;
    let own_git = fs
        .mkdir(&FS_ENGINE, own, OsStr::new(".git"), 0o755)
        .unwrap()
        .attr
        .ino;
    let flags = libc::O_CREAT | libc::O_WRONLY;
    fs.create(&FS_ENGINE, own_git, OsStr::new("config"), 0o644, flags)
        .unwrap();
    // A repository root made (and lets the agent write) is guarded.
    let git = fs
        .mkdir(&ADMIN, mine, OsStr::new(".git"), 0o777)
        .unwrap()
        .attr
        .ino;
    let dir = fs.store().root().join("agents/fs-engine/.git");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // Created in place: refused.
    let made = fs.create(
        &FS_ENGINE,
        git,
        OsStr::new("config"),
        0o644,
        libc::O_CREAT | libc::O_WRONLY,
    );
    assert!(matches!(made, Err(FsError::Denied(_))), "created in place");
    // A finished lock file with a hook path: refused at the rename, and it stays a lock file.
    let lock = |text: &[u8]| {
        let (entry, opened) = fs
            .create(
                &FS_ENGINE,
                git,
                OsStr::new("config.lock"),
                0o644,
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            )
            .unwrap();
        let Opened::Backing(fh, _) = opened else {
            panic!()
        };
        fs.write(entry.attr.ino, fh, 0, text, false).unwrap();
        (entry.attr.ino, fh)
    };
    let rename = || {
        fs.rename(
            &FS_ENGINE,
            git,
            OsStr::new("config.lock"),
            git,
            OsStr::new("config"),
            Default::default(),
        )
    };
    let after_release = |after| {
        fs.rename_after_release(
            &FS_ENGINE,
            (git, OsStr::new("config.lock")),
            (git, OsStr::new("config")),
            Default::default(),
            after,
        )
    };
    let refused_for = |e: FsError, why: &str| {
        let FsError::Denied(d) = &e else {
            panic!("{e:?}")
        };
        assert!(d.reason.contains(why), "{}", d.reason);
    };
    // Open for writing and renamed across folders: refused at once, never put off.
    fs.create(
        &FS_ENGINE,
        mine,
        OsStr::new("staged-config"),
        0o644,
        libc::O_CREAT | libc::O_WRONLY,
    )
    .unwrap();
    let across = fs.rename(
        &FS_ENGINE,
        mine,
        OsStr::new("staged-config"),
        git,
        OsStr::new("config"),
        Default::default(),
    );
    refused_for(across.unwrap_err(), "is open for writing");
    // Still open for writing: put off; released meanwhile, then decided on what it says.
    let (ino, fh) = lock(b"[core]\n\thooksPath = /tmp/x\n");
    let after = rename().unwrap().expect("put off while open for writing");
    fs.release(ino, fh).unwrap();
    refused_for(after_release(after).unwrap_err(), "core.hookspath");
    assert!(dir.join("config.lock").exists() && !dir.join("config").exists());
    // Never released: put off, then refused whatever it says.
    let (ino, fh) = lock(b"[core]\n\trepositoryformatversion = 0\n");
    let after = rename().unwrap().expect("put off while open for writing");
    refused_for(after_release(after).unwrap_err(), "is open for writing");
    // That wait was in vain: the same uid's next such rename is refused at once.
    refused_for(rename().unwrap_err(), "is open for writing");
    fs.release(ino, fh).unwrap();
    // What git init writes lands.
    let (ino, fh) = lock(b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n");
    fs.release(ino, fh).unwrap();
    assert!(rename().unwrap().is_none(), "renamed at once");
    assert!(dir.join("config").exists() && !dir.join("config.lock").exists());
}

#[test]
fn generated_files_answer_per_caller() {
    require_root!();
    let (_d, fs) = fs();
    let agents = lookup(&fs, ROOT_INO, "agents");
    let read_self = |caller: &Caller| {
        let ino = fs
            .lookup(caller, agents, OsStr::new("self"))
            .unwrap()
            .attr
            .ino;
        let Opened::Generated(fh) = fs.open(caller, ino, libc::O_RDONLY).unwrap() else {
            panic!("agents/self is generated")
        };
        let text = fs.read(ino, fh, 0, 1 << 16).unwrap();
        fs.release(ino, fh).unwrap();
        String::from_utf8(text).unwrap()
    };
    assert!(read_self(&ADMIN).contains("admin"), "{}", read_self(&ADMIN));
    let agent = read_self(&FS_ENGINE);
    assert!(agent.contains("fs-engine"), "{agent}");
}

#[test]
fn readdirplus_takes_a_reference_per_entry_it_answers_and_gives_back_what_did_not_fit() {
    require_root!();
    let (_d, fs) = fs_with(|b| b.cache_ttl(std::time::Duration::from_secs(7)));
    let agents = lookup(&fs, ROOT_INO, "agents");
    let fh = fs.opendir(&ADMIN, agents).unwrap();
    // Room for `.`, `..` and one entry: the second entry does not fit and is given back.
    let mut seen = Vec::new();
    fs.readdirplus(&ADMIN, agents, fh, 0, |e| {
        seen.push((e.name.to_owned(), e.ino, e.ttl));
        seen.len() == 4
    })
    .unwrap();
    assert_eq!(seen.len(), 4, "{seen:?}");
    let (kept, refused) = (seen[2].1, seen[3].1);
    assert_eq!(seen[2].2, std::time::Duration::from_secs(7));
    // The kept entry holds one reference (the kernel's), the refused one none.
    fs.forget(kept, 1);
    assert!(matches!(
        fs.getattr(&ADMIN, kept, None),
        Err(FsError::UnknownInode(_))
    ));
    assert!(matches!(
        fs.getattr(&ADMIN, refused, None),
        Err(FsError::UnknownInode(_))
    ));
    // A missing name is a negative entry the kernel may keep; a generated folder's is not.
    assert!(fs
        .lookup_entry(&ADMIN, agents, OsStr::new("nobody"))
        .unwrap()
        .is_none());
    let tools = lookup(&fs, ROOT_INO, "tools");
    let call = lookup(&fs, tools, "call");
    assert!(fs
        .lookup_entry(&ADMIN, call, OsStr::new("no-such-tool"))
        .is_err());
    assert_eq!(fs.ttl(call), std::time::Duration::ZERO);
    fs.releasedir(fh).unwrap();
}

/// The daemon remembers who a pid is for a moment (reading `/proc/PID/cgroup` on every request
/// would cost too much), but only for the credentials it saw: the same pid with other
/// credentials (root's pid reused by an agent's process) is asked about again.
#[test]
fn a_pids_identity_is_remembered_for_its_credentials_only() {
    use clawfs_policy::Identity;
    require_root!();
    let (_dir, fs) = fs();
    let pid = std::process::id();
    let root = Caller { pid, ..ADMIN };
    assert_eq!(fs.identify(&root), Identity::Admin);
    let agent = Caller { pid, ..FS_ENGINE };
    match fs.identify(&agent) {
        Identity::Agent(name) => assert_eq!(name.as_str(), "fs-engine"),
        other => panic!("the agent's process was taken for {other:?}"),
    }
    assert_eq!(fs.identify(&root), Identity::Admin);
}

/// A descriptor keeps its opener's rights: once a stop is in force, nothing the daemon serves
/// is changed through an agent's descriptor, whoever holds it now (a process the agent handed
/// it to), and the refusal is recorded as the agent's.
#[test]
fn a_stop_refuses_writes_through_an_agents_descriptor_held_by_anyone() {
    require_root!();
    let (_d, fs) = fs();
    let mine = lookup(&fs, lookup(&fs, ROOT_INO, "agents"), "fs-engine");
    let (entry, opened) = fs
        .create(
            &FS_ENGINE,
            mine,
            OsStr::new("notes.txt"),
            0o644,
            libc::O_CREAT | libc::O_WRONLY,
        )
        .unwrap();
    let Opened::Backing(fh, _) = opened else {
        panic!("a stored file")
    };
    let ino = entry.attr.ino;
    fs.write(ino, fh, 0, b"before", false).unwrap();
    let flag = fs.store().private_dir().join("estop");
    std::fs::write(&flag, r#"{"by":"root","id":"t"}"#).unwrap();
    assert!(fs.refresh_estop());
    // A write the daemon serves, on the agent's descriptor.
    let e = fs.write(ino, fh, 6, b"after", false).unwrap_err();
    assert_eq!(errno(&e), libc::EPERM, "{e}");
    // A truncation through it, asked by another user holding it.
    let someone = Caller {
        uid: 4242,
        gid: 4242,
        pid: 0,
    };
    let truncate = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    let e = fs.setattr(&someone, ino, Some(fh), truncate).unwrap_err();
    assert_eq!(errno(&e), libc::EPERM, "{e}");
    let on_disk = fs.store().root().join("agents/fs-engine/notes.txt");
    assert_eq!(std::fs::read(&on_disk).unwrap(), b"before");
    std::fs::remove_file(&flag).unwrap();
    assert!(!fs.refresh_estop());
    fs.write(ino, fh, 6, b"after", false).unwrap();
}
