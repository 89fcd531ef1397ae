//! `vaultctl-ssh` behind a real `sshd` (Debian's openssh-server) on 127.0.0.1: a dedicated
//! account whose key is restricted by `command=` in authorized_keys, as docs/vaultctl.md sets it
//! up. The account is `clawfs-sshbot`, created for the test if missing.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::Mounted;

const BOT: &str = "clawfs-sshbot";

/// The bot's account, created if missing; returns its uid.
fn bot_account() -> u32 {
    let exists = Command::new("id").args(["-u", BOT]).output().unwrap();
    if !exists.status.success() {
        let out = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", BOT])
            .output()
            .unwrap();
        // Another run may have created it meanwhile.
        assert!(
            out.status.success() || String::from_utf8_lossy(&out.stderr).contains("exists"),
            "useradd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new("id").args(["-u", BOT]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Sets the account's password field (`!` locks it, `*` unlocks it with no password).
fn set_password_field(field: &str) {
    let out = Command::new("usermod")
        .args(["-p", field, BOT])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// An sshd on a free port of 127.0.0.1, stopped when dropped.
struct Sshd {
    child: Child,
    port: u16,
    client_key: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

impl Sshd {
    /// Starts sshd whose only authorized key runs `forced` as the bot.
    fn start(forced: &str) -> Sshd {
        let dir = tempfile::TempDir::new().unwrap();
        // sshd reads authorized_keys as the user it logs in.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let host_key = dir.path().join("host_ed25519");
        let client_key = dir.path().join("client_ed25519");
        keygen(&host_key);
        keygen(&client_key);
        let public = fs::read_to_string(client_key.with_extension("pub")).unwrap();
        let keys = dir.path().join("authorized_keys");
        fs::write(&keys, format!("restrict,command=\"{forced}\" {public}")).unwrap();
        fs::set_permissions(&keys, fs::Permissions::from_mode(0o644)).unwrap();
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let config = dir.path().join("sshd_config");
        fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PidFile none\nUsePAM no\nStrictModes no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nAllowUsers {BOT}\n",
                host_key.display(),
                keys.display()
            ),
        )
        .unwrap();
        // sshd's privilege-separation directory.
        fs::create_dir_all("/run/sshd").unwrap();
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start /usr/sbin/sshd (Debian package openssh-server)");
        let sshd = Sshd {
            child,
            port,
            client_key,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        sshd
    }

    /// `ssh bot@127.0.0.1 COMMAND` with the restricted key and `stdin`.
    fn ssh(&self, command: Option<&str>, stdin: &str) -> Output {
        let mut cmd = Command::new("ssh");
        cmd.args(["-F", "/dev/null", "-T", "-i"])
            .arg(&self.client_key)
            .args(["-p", &self.port.to_string()])
            .args([
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
            ])
            .arg(format!("{BOT}@127.0.0.1"))
            .args(command);
        crate::common::output_with_input(&mut cmd, stdin.as_bytes())
    }
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {:?} / {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn vaultctl_over_a_real_sshd_with_a_forced_command_key() {
    let m = Mounted::new();
    let uid = bot_account();
    m.open_workspace_to_all();
    let notes = m.path("workspaces/notes");
    fs::create_dir(&notes).unwrap();
    fs::write(notes.join("Plan.md"), "# Plan\nold line\n").unwrap();
    fs::write(m.ws().join("Default.md"), "# Default\n").unwrap();
    for p in [notes.clone(), notes.join("Plan.md")] {
        std::os::unix::fs::chown(&p, Some(uid), None).unwrap();
    }
    let wrapper = crate::common::workspace_bin("vaultctl-ssh", "vaultctl");
    let sshd = Sshd::start(&format!(
        "{} --mount {} --workspace notes",
        wrapper.display(),
        m.mnt.display()
    ));

    // A locked account (useradd's "!") cannot log in with its key: the step docs/vaultctl.md
    // asks for.
    set_password_field("!");
    let out = sshd.ssh(Some("vaultctl info Plan.md"), "");
    assert!(!out.status.success(), "a locked account logged in: {out:?}");
    set_password_field("*");

    let out = sshd.ssh(Some("vaultctl info Plan.md"), "");
    assert!(out.status.success(), "{out:?}");
    let sha = json(&out)["sha256"].as_str().unwrap().to_string();
    let out = sshd.ssh(
        Some(&format!("vaultctl apply-patch Plan.md {sha}")),
        "@@ -2 +2 @@\n-old line\n+new line\n",
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        fs::read_to_string(notes.join("Plan.md")).unwrap(),
        "# Plan\nnew line\n"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        fs::metadata(m.backing("workspaces/notes/Plan.md"))
            .unwrap()
            .uid(),
        uid,
        "the edit was made as the bot's account"
    );

    // Whatever the client asks for, sshd runs the wrapper, which refuses anything but vaultctl,
    // and the workspace stays the one authorized_keys names.
    let canary = m.dir.path().join("pwned");
    for bad in [
        None,
        Some(format!("touch {}", canary.display())),
        Some(format!("vaultctl info Plan.md; touch {}", canary.display())),
        Some("vaultctl --workspace default info Default.md".to_string()),
    ] {
        let out = sshd.ssh(bad.as_deref(), "");
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("vaultctl-ssh: refused"), "{bad:?}: {err}");
        assert!(!canary.exists(), "{bad:?} ran a command");
    }
    let out = sshd.ssh(Some("vaultctl --workspace default info Default.md"), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("option \"--workspace\" is set by the server")
            && !err.contains("subcommand \""),
        "{err}"
    );
}
