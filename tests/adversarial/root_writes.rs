//! The daemon writes as root in directories an agent can write (its own `agents/<name>/`): the
//! agent plants symlinks and guessed temp names there and makes the daemon write, hoping it
//! follows them to a root-owned file elsewhere on the host.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::common::Mounted;
use crate::support::text;

#[test]
fn planted_links_never_redirect_a_root_write() {
    let m = Mounted::new();
    let victim = m.dir.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let victim_dir = m.dir.path().join("victim-dir");
    fs::create_dir(&victim_dir).unwrap();
    fs::set_permissions(&victim_dir, fs::Permissions::from_mode(0o700)).unwrap();
    let dp = m.daemon_pid();
    let mnt = m.mnt.display();
    let v = victim.display();
    let vd = victim_dir.display();
    // Every name the daemon used to write beside the agent's files, pointed at the victims;
    // then a refusal (the denials file is rewritten) and an identity rewrite (a backup and an
    // atomic replace).
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {mnt}/agents/fs-engine || exit 9
             for n in .identity.json.tmp-{dp} .denials.tmp-{dp} denials .clawfs-tmp-{dp}-0; do
               ln -s {v} $n 2>&1
             done
             ln -s {vd} backups 2>&1
             (echo x > {mnt}/agents/kernel-engine/intruder) 2>&1
             cp identity.json /tmp/id.json && cat /tmp/id.json > identity.json
             echo rewrite=$?
             (echo y > {mnt}/agents/kernel-engine/intruder2) 2>&1
             true"
        ),
    );
    let out = text(&out);
    assert!(out.contains("Permission denied"), "{out}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n", "{out}");
    let md = fs::metadata(&victim).unwrap();
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o7777),
        (0, 0, 0o600),
        "{out}"
    );
    assert_eq!(fs::read_dir(&victim_dir).unwrap().count(), 0, "{out}");
    // What the daemon keeps in the agent's directory is a real file, not the planted link.
    let denials = fs::symlink_metadata(m.backing("agents/fs-engine/denials"));
    if let Ok(d) = denials {
        assert!(d.file_type().is_file(), "denials is a {:?}", d.file_type());
    }
    assert!(
        fs::symlink_metadata(m.backing("agents/fs-engine/identity.json"))
            .unwrap()
            .file_type()
            .is_file()
    );
}

#[test]
fn a_fifo_where_the_daemon_reads_never_hangs_it() {
    let m = Mounted::new();
    let mnt = m.mnt.display();
    // Where the agent can see it: its sandbox shows nothing of the host's /tmp.
    let go = m.ws().join("go");
    let held = m.ws().join("held");
    let doc = r#"{"agent_id":"fs-engine","version":2,"created_at":"x","state":{},"memory":{},"history":{},"performance":{}}"#;
    // The agent holds its identity file open for writing; meanwhile the file in the store
    // becomes a FIFO (as a rename over it would leave it, which the mount refuses); then the
    // agent writes and closes, and the daemon reads the current file to back it up.
    let agent = std::process::Command::new(crate::common::clawfs_bin())
        .args(["run", "--store", m.store.to_str().unwrap(), "--mount"])
        .arg(&m.mnt)
        .args(["--agent", "fs-engine", "--", "sh", "-c"])
        .arg(format!(
            "cd {mnt}/agents/fs-engine || exit 9
             exec 3<>identity.json
             : > {held}
             n=0; while [ ! -e {go} ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done
             echo '{doc}' >&3; exec 3>&- 2>&1
             echo committed",
            go = go.display(),
            held = held.display(),
        ))
        .output_after(|| {
            let identity = m.backing("agents/fs-engine/identity.json");
            // Swapped once the agent holds the file open (however slowly it started).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !held.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            fs::remove_file(&identity).unwrap();
            let c = std::ffi::CString::new(identity.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0);
            fs::write(&go, "").unwrap();
        });
    assert!(text(&agent).contains("committed"), "{}", text(&agent));
    // The daemon still answers, on every thread.
    for _ in 0..8 {
        let out = std::process::Command::new("timeout")
            .args(["5", "ls"])
            .arg(m.path("agents"))
            .output()
            .unwrap();
        assert!(out.status.success(), "the daemon hangs: {}", text(&out));
    }
}

/// Runs a command while `during` runs in this thread, and returns its output.
trait OutputAfter {
    fn output_after(&mut self, during: impl FnOnce()) -> std::process::Output;
}

impl OutputAfter for std::process::Command {
    fn output_after(&mut self, during: impl FnOnce()) -> std::process::Output {
        let child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        during();
        child.wait_with_output().unwrap()
    }
}

#[test]
fn identity_verify_never_follows_an_agents_link() {
    let m = Mounted::new();
    let victim = m.dir.path().join("victim");
    fs::write(&victim, "root-only secret\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    // Through the mount the agent may not replace its identity file at all (it changes only
    // whole, validated); the link is planted as a rename or deletion would have left it.
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {}/agents/fs-engine && rm -f identity.json 2>&1; true",
            m.mnt.display()
        ),
    );
    assert!(
        text(&out).contains("Operation not permitted"),
        "{}",
        text(&out)
    );
    let identity = m.backing("agents/fs-engine/identity.json");
    fs::remove_file(&identity).unwrap();
    std::os::unix::fs::symlink(&victim, &identity).unwrap();
    let out = crate::common::clawfs([
        "identity",
        "verify",
        "--store",
        m.store.to_str().unwrap(),
        "fs-engine",
    ]);
    assert!(!text(&out).contains("root-only secret"), "{}", text(&out));
    assert!(!out.status.success(), "{}", text(&out));
}

#[test]
fn identity_json_has_one_name() {
    let m = Mounted::new();
    let before = fs::read(m.backing("agents/fs-engine/identity.json")).unwrap();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {}/agents/fs-engine && ln identity.json cache/l2 2>&1; echo garbage > cache/l2 2>&1; true",
            m.mnt.display()
        ),
    );
    assert!(
        text(&out).contains("Operation not permitted"),
        "{}",
        text(&out)
    );
    assert_eq!(
        fs::read(m.backing("agents/fs-engine/identity.json")).unwrap(),
        before
    );
}

#[test]
fn run_passes_no_inherited_descriptor_to_the_agent() {
    let m = Mounted::new();
    let secret = m.dir.path().join("secret");
    fs::write(&secret, "root-only secret\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 9<{}; {} run --store {} --mount {} --agent fs-engine -- sh -c 'cat <&9 2>&1; true'",
            secret.display(),
            crate::common::clawfs_bin(),
            m.store.display(),
            m.mnt.display()
        ))
        .output()
        .unwrap();
    assert!(!text(&out).contains("root-only secret"), "{}", text(&out));
}
