//! What the attacks share: policy edits, the audit trail and denials of a store, hashes of the
//! store's tree (to show that nothing changed), a throw-away local user.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

pub use crate::common::{audit_until, text};
use crate::common::{clawfs, Mounted};

/// `clawfs run --agent AGENT [OPTIONS…] -- CMD…` against the mount, sandboxed unless the options
/// say `--no-sandbox` (options such as `--user UID`).
pub fn run_agent_with(m: &Mounted, agent: &str, options: &[&str], cmd: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--store",
        m.store.to_str().unwrap(),
        "--mount",
        m.mnt.to_str().unwrap(),
        "--agent",
        agent,
    ];
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(cmd);
    clawfs(args)
}

/// `clawfs run --agent AGENT --user USER --no-sandbox -- CMD…` against the mount: what the
/// daemon enforces on its own.
pub fn run_as_user(m: &Mounted, agent: &str, user: &str, cmd: &[&str]) -> Output {
    run_agent_with(m, agent, &["--no-sandbox", "--user", user], cmd)
}

/// Applies `edit` to the store's policy and reloads it in the daemon.
pub fn edit_policy(m: &Mounted, edit: impl FnOnce(String) -> String) {
    let current = fs::read_to_string(m.backing("system/policy.toml")).unwrap();
    let new = edit(current.clone());
    assert_ne!(new, current, "the policy edit changed nothing");
    let file = m.dir.path().join("policy.toml");
    fs::write(&file, new).unwrap();
    let out = clawfs([
        OsStr::new("policy"),
        OsStr::new("reload"),
        file.as_os_str(),
        OsStr::new("--store"),
        m.store.as_os_str(),
    ]);
    assert!(out.status.success(), "policy reload: {}", text(&out));
}

/// Adds `line` to the `[agents.NAME]` table of the policy.
pub fn agent_policy(m: &Mounted, agent: &str, line: &str) {
    edit_policy(m, |p| {
        let head = format!("[agents.{agent}]\n");
        p.replacen(&head, &format!("{head}{line}\n"), 1)
    });
}

/// The records whose operation is `op` and whose path ends with `path_end`.
pub fn records<'a>(all: &'a [Value], op: &str, path_end: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|r| {
            r["operation"] == op && r["path"].as_str().is_some_and(|p| p.ends_with(path_end))
        })
        .collect()
}

/// The lines of an agent's denials file (read in the store).
pub fn denials(m: &Mounted, agent: &str) -> Vec<Value> {
    fs::read_to_string(m.backing(&format!("agents/{agent}/denials")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Path, kind, mode, owner and content hash of everything under `root`, sorted: equal before
/// and after an attack means nothing there changed.
pub fn snapshot(root: &Path) -> Vec<String> {
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(md) = fs::symlink_metadata(&p) else {
                continue;
            };
            let what = if md.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if md.file_type().is_symlink() {
                format!("link:{}", fs::read_link(&p).unwrap().display())
            } else {
                hex::encode(sha2::Sha256::digest(fs::read(&p).unwrap_or_default()))
            };
            out.push(format!(
                "{} {:o} {}:{} {what}",
                p.strip_prefix(root).unwrap().display(),
                md.mode(),
                md.uid(),
                md.gid()
            ));
        }
    }
    out.sort();
    out
}

/// A local account made for one test and removed when dropped (also when the test fails).
pub struct TempUser {
    /// Its name.
    pub name: String,
    /// Its uid (= gid).
    pub uid: u32,
}

impl TempUser {
    /// Creates a user `cfs-<tag>-<pid>` with no home and no groups but its own.
    pub fn new(tag: &str) -> TempUser {
        let name = format!("cfs{tag}{}", std::process::id() % 100_000);
        let out = Command::new("useradd")
            .args(["-M", "-U", "-s", "/bin/sh", &name])
            .output()
            .unwrap();
        assert!(out.status.success(), "useradd: {}", text(&out));
        let id = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        TempUser { name, uid }
    }

    /// Runs `sh -c SCRIPT` as this user, with no supplementary groups.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("setpriv")
            .args([
                &format!("--reuid={}", self.uid),
                &format!("--regid={}", self.uid),
                "--clear-groups",
                "sh",
                "-c",
                script,
            ])
            .current_dir("/")
            .output()
            .unwrap()
    }
}

impl Drop for TempUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

/// A small journaled ext4 image (`mkfs.ext4 MKFS_OPTIONS`) mounted on a loop device, with a
/// ClawFS store on it mounted in turn (`clawfs mount MOUNT_ARGS`); both unmounted when dropped
/// (also when the test fails).
pub struct StoreOnImage {
    /// The image and both mount points; removed after `drop` has unmounted them.
    dir: tempfile::TempDir,
    /// Where the image is mounted (the store is `store/` in it).
    pub image_mnt: std::path::PathBuf,
    /// The ClawFS mount.
    pub mnt: std::path::PathBuf,
}

impl StoreOnImage {
    pub fn new(megabytes: u32, mkfs_options: &str, mount_args: &[&str]) -> StoreOnImage {
        let dir = tempfile::Builder::new()
            .prefix("clawfs-img.")
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
            "truncate -s {megabytes}M {0} && mkfs.ext4 -q -F {mkfs_options} {0}",
            image.display()
        ));
        sh(format!(
            "mount -o loop {} {}",
            image.display(),
            image_mnt.display()
        ));
        let disk = StoreOnImage {
            dir,
            image_mnt,
            mnt,
        };
        let store = disk.store();
        let mut args = vec![
            "mount",
            disk.mnt.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ];
        args.extend_from_slice(mount_args);
        let out = clawfs(args);
        assert!(out.status.success(), "{}", text(&out));
        disk
    }

    pub fn store(&self) -> std::path::PathBuf {
        self.image_mnt.join("store")
    }

    /// Runs `sh -c SCRIPT` as the agent fs-engine; returns its output.
    pub fn agent(&self, script: &str) -> String {
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

impl Drop for StoreOnImage {
    fn drop(&mut self) {
        let _ = clawfs(["umount", self.mnt.to_str().unwrap()]);
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
        let _ = Command::new("umount").arg(&self.image_mnt).output();
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.image_mnt)
            .output();
    }
}

/// Python for the agent's scripts: `probe(what, call)` prints `what` and `ok` or the errno's
/// name the call failed with.
pub const PROBE: &str = r#"
import ctypes, errno, os
def probe(what, call):
    try:
        call()
        print(what, "ok")
    except OSError as e:
        print(what, errno.errorcode.get(e.errno, e.errno))
def exchange(a, b):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
"#;

/// What a Python script run by fs-engine in its sandbox printed (stdout and stderr).
pub fn python_as_agent(m: &Mounted, script: &str) -> String {
    let out = m
        .run_command("fs-engine")
        .args(["--", "python3", "-c", script])
        .current_dir("/")
        .output()
        .unwrap();
    text(&out)
}
