//! Validates a whitelist and shows what it compiles to:
//! `cargo run -p clawfs-seccomp --example check -- FILE [--pfc]`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!("{}", clawfs_seccomp::available());
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: check WHITELIST.json [--pfc]");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let whitelist = match clawfs_seccomp::Whitelist::parse(&text) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for name in whitelist.overridden() {
        println!("note: {name} is denied whatever the whitelist says");
    }
    match whitelist.compile() {
        Ok(filter) => {
            println!(
                "{path}: ok: {} syscalls allowed, {} rules, default {}, {} BPF instructions, denials {}logged",
                whitelist.syscalls().len(),
                whitelist.rules().len(),
                whitelist.default_action(),
                filter.instructions(),
                if filter.logs_denials() { "" } else { "not " }
            );
            if args.iter().any(|a| a == "--pfc") {
                print!("{}", filter.pfc());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}
