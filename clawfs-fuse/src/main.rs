//! `clawfs`: parse arguments, set up logging, run.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = clawfs_fuse::cli::Cli::parse();
    clawfs_fuse::logging::init();
    clawfs_fuse::run(cli)
}
