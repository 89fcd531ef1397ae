//! `vaultctl`: parse the command line, make one tool call through the mount, print its JSON,
//! exit 0 / 1 / 2 (see `vaultctl::Exit`).

use std::io::Write;

fn main() {
    let outcome = vaultctl::run(std::env::args_os(), &mut std::io::stdin().lock(), &|k| {
        std::env::var_os(k)
    });
    let mut out = std::io::stdout().lock();
    // A closed stdout (the SSH client went away) leaves nothing else to report to.
    let _ = out.write_all(&outcome.stdout).and_then(|()| out.flush());
    std::process::exit(outcome.exit.code());
}
