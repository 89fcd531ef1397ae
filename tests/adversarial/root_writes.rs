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
    let doc = r#"{"agent_id":"fs-engine","version":2,"created_at":"x","state":{},"memory":{},"history":{},"performance":{}}"#;
    // Swap identity.json for a FIFO while holding it open for writing, then commit.
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {mnt}/agents/fs-engine || exit 9
             exec 3<>identity.json; mkfifo ff; mv -f ff identity.json; echo '{doc}' >&3; exec 3>&- 2>&1
             echo committed"
        ),
    );
    assert!(text(&out).contains("committed"), "{}", text(&out));
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

#[test]
fn identity_verify_never_follows_an_agents_link() {
    let m = Mounted::new();
    let victim = m.dir.path().join("victim");
    fs::write(&victim, "root-only secret\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {}/agents/fs-engine && rm -f identity.json && ln -s {} identity.json 2>&1; true",
            m.mnt.display(),
            victim.display()
        ),
    );
    let _ = out;
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
