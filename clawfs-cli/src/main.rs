//! `clawfs`: parse arguments, set up logging, run. Installed as `mount.fuse.clawfs` too, it is
//! the helper mount(8) runs for `fuse.clawfs` lines of /etc/fstab.

use clap::Parser;

fn main() -> std::process::ExitCode {
    clawfs_cli::mount_helper::default_path();
    let mut args = std::env::args_os();
    if args
        .next()
        .is_some_and(|argv0| clawfs_cli::mount_helper::is_helper(&argv0))
    {
        let rest: Vec<_> = args.collect();
        return clawfs_cli::mount_helper::main(&rest);
    }
    let cli = clawfs_args::Cli::parse();
    clawfs_cli::logging::init();
    clawfs_cli::run(cli)
}
