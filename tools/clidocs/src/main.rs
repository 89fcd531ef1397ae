//! `clawfs-clidocs OUT_DIR`: the man pages and shell completions of `clawfs`, `vaultctl`,
//! `vaultctl-ssh` and `migrate-pg-to-sqlite`, generated from their clap definitions (see README.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// The commands, as their binaries are named.
fn commands() -> Vec<clap::Command> {
    vec![
        clawfs_args::Cli::command(),
        vaultctl::cli::Cli::command(),
        vaultctl::ssh::SshArgs::command(),
        migrate_pg::cli::Cli::command(),
    ]
}

/// Writes every page and completion file under `out`; returns the files written.
pub fn generate(out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let man = out.join("man/man1");
    std::fs::create_dir_all(&man)?;
    let mut written = Vec::new();
    for cmd in commands() {
        let name = cmd.get_name().to_string();
        clap_mangen::generate_to(cmd.clone(), &man)?;
        for (shell, dir, file) in [
            (Shell::Bash, "bash", name.clone()),
            (Shell::Zsh, "zsh", format!("_{name}")),
            (Shell::Fish, "fish", format!("{name}.fish")),
        ] {
            let dir = out.join("completions").join(dir);
            std::fs::create_dir_all(&dir)?;
            let path = dir.join(file);
            let mut f = std::fs::File::create(&path)?;
            clap_complete::generate(shell, &mut cmd.clone(), &name, &mut f);
            written.push(path);
        }
    }
    for e in std::fs::read_dir(&man)? {
        written.push(e?.path());
    }
    written.sort();
    Ok(written)
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(out), None) = (args.next(), args.next()) else {
        eprintln!("usage: clawfs-clidocs OUT_DIR");
        return ExitCode::from(2);
    };
    if out == "--help" || out == "-h" {
        println!("usage: clawfs-clidocs OUT_DIR\nWrites OUT_DIR/man/man1/*.1 and OUT_DIR/completions/{{bash,zsh,fish}}/ for clawfs, vaultctl, vaultctl-ssh and migrate-pg-to-sqlite.");
        return ExitCode::SUCCESS;
    }
    match generate(Path::new(&out)) {
        Ok(files) => {
            println!("{} files under {}", files.len(), Path::new(&out).display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("clawfs-clidocs: {}: {e}", Path::new(&out).display());
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_completions_for_every_command_and_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(dir.path()).unwrap();
        let man = dir.path().join("man/man1");
        for page in [
            "clawfs.1",
            "clawfs-mount.1",
            "clawfs-run.1",
            "clawfs-vault.1",
            "vaultctl.1",
            "vaultctl-ssh.1",
            "migrate-pg-to-sqlite.1",
        ] {
            assert!(man.join(page).is_file(), "{page}: {files:?}");
        }
        let clawfs = std::fs::read_to_string(man.join("clawfs.1")).unwrap();
        assert!(clawfs.contains("filesystem for AI agents"), "{clawfs}");
        assert!(clawfs.contains("Exit status"), "exit codes are in the page");
        let migrate = std::fs::read_to_string(man.join("migrate-pg-to-sqlite.1")).unwrap();
        for needle in ["\\-\\-pg\\-url", "\\-\\-sqlite\\-path", "Exit status"] {
            assert!(migrate.contains(needle), "{needle}: {migrate}");
        }
        for c in ["bash/clawfs", "zsh/_vaultctl", "fish/vaultctl-ssh.fish"] {
            let path = dir.path().join("completions").join(c);
            assert!(std::fs::metadata(&path).unwrap().len() > 100, "{c}");
        }
        // The bash completion is valid bash.
        let ok = std::process::Command::new("bash")
            .arg("-n")
            .arg(dir.path().join("completions/bash/clawfs"))
            .status()
            .unwrap();
        assert!(ok.success());
    }
}
