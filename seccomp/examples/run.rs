//! Runs a command under a whitelist, as `clawfs run` would:
//! `cargo run -p clawfs-seccomp --example run -- WHITELIST.json CMD [ARGS...]`.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: run WHITELIST.json CMD [ARGS...]");
        return ExitCode::from(2);
    }
    let filter = match std::fs::read_to_string(&args[0])
        .map_err(|e| e.to_string())
        .and_then(|t| clawfs_seccomp::Whitelist::parse(&t).map_err(|e| e.to_string()))
        .and_then(|w| w.compile().map_err(|e| e.to_string()))
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{}: {e}", args[0]);
            return ExitCode::FAILURE;
        }
    };
    let mut cmd = Command::new(&args[1]);
    cmd.args(&args[2..]);
    // SAFETY: Filter::load makes system calls only and touches no lock or allocator.
    unsafe {
        cmd.pre_exec(move || filter.load());
    }
    match cmd.status() {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitCode::from(c as u8),
            (None, Some(sig)) => {
                eprintln!("{}: killed by signal {sig}", args[1]);
                ExitCode::from(128 + sig as u8)
            }
            _ => ExitCode::FAILURE,
        },
        Err(e) => {
            eprintln!("{}: {e}", args[1]);
            ExitCode::FAILURE
        }
    }
}
