//! `vaultctl-ssh`: the forced command for an `authorized_keys` entry. Checks
//! `$SSH_ORIGINAL_COMMAND` (see `vaultctl::ssh`), logs and refuses anything but one allowed
//! vaultctl command (exit 1), else runs vaultctl in-process with the mount and workspace given
//! here, never with the client's.
//!
//! ```text
//! vaultctl-ssh [--mount DIR] [--workspace WS] [--log FILE]
//! ```

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use vaultctl::{ssh, Exit, Outcome};

fn main() {
    let args = ssh::SshArgs::parse();
    let original = std::env::var("SSH_ORIGINAL_COMMAND").ok();
    let outcome = match ssh::check_command(original.as_deref()) {
        Ok(words) => {
            let mount = args
                .mount
                .or_else(|| std::env::var_os("CLAWFS_MOUNT").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from(vaultctl::cli::DEFAULT_MOUNT));
            let workspace = args
                .workspace
                .or_else(|| std::env::var("CLAWFS_WORKSPACE").ok())
                .unwrap_or_else(|| "default".to_string());
            let mut argv: Vec<OsString> = vec![
                "vaultctl".into(),
                "--mount".into(),
                mount.into_os_string(),
                "--workspace".into(),
                workspace.into(),
            ];
            argv.extend(words.into_iter().map(OsString::from));
            vaultctl::run(argv, &mut std::io::stdin().lock(), &|_| None)
        }
        Err(refusal) => {
            let client = std::env::var("SSH_CLIENT").unwrap_or_else(|_| "local".into());
            let line = format!(
                "vaultctl-ssh: refused command from {client}: {refusal}: {:?}",
                original.as_deref().unwrap_or("")
            );
            eprintln!("{line}");
            if let Some(log) = &args.log {
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .and_then(|mut f| writeln!(f, "{stamp} {line}"));
                if let Err(e) = written {
                    eprintln!("vaultctl-ssh: cannot write {}: {e}", log.display());
                }
            }
            Outcome::error(Exit::User, "denied", refusal.to_string())
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&outcome.stdout).and_then(|()| out.flush());
    std::process::exit(outcome.exit.code());
}
