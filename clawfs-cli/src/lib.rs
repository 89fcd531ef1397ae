//! The `clawfs` command and the thin FUSE adapter over `clawfs-core`.

pub mod adapter;
pub mod audit_cmd;
pub mod cli;
pub mod commands;
pub mod daemon;
pub mod errno;
pub mod error;
pub mod estop_cmd;
pub mod import_cmd;
pub mod integrity_cmd;
pub mod logging;
pub mod mcp_cmd;
pub mod monitor;
pub mod mount_helper;
pub mod mounts;
pub mod output;
pub mod policy_cmd;
pub mod quota_cmd;
pub mod run;
pub mod sandbox_cmd;
pub mod search_cmd;
pub mod snapshot_cmd;
pub mod vault_cmd;

use std::process::ExitCode;

use cli::{Cli, Command};

/// The exit code of a command that ran a child: the child's own, or ours if it never ran.
fn child_exit(result: Result<u8, error::Failure>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("clawfs: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Runs one `clawfs` command; prints a one-line error and returns its exit code on failure.
pub fn run(cli: Cli) -> ExitCode {
    let result = match &cli.command {
        Command::Init { store } => commands::init(&store.store),
        Command::Mount(args) => daemon::mount(args),
        Command::Umount { mountpoint, lazy } => commands::umount(mountpoint, *lazy),
        Command::Status { mountpoint, json } => commands::status(mountpoint.as_deref(), *json),
        Command::Run(args) => return child_exit(run::run(args)),
        Command::Mcp(args) => return child_exit(mcp_cmd::mcp(args)),
        Command::McpServe(args) => mcp_cmd::serve(args).map_err(Into::into),
        Command::Audit { store, command } => {
            audit_cmd::run(&mounts::store_path(&store.store), command)
        }
        Command::Vault { store, command } => {
            vault_cmd::run(&mounts::store_path(&store.store), command)
        }
        Command::Identity {
            command: cli::IdentityCommand::Verify { agent, store },
        } => commands::identity_verify(&store.store, agent.as_deref()),
        Command::Sandbox {
            command: cli::SandboxCommand::Check { json },
        } => sandbox_cmd::check(*json),
        Command::Estop {
            store,
            clear,
            status,
        } => estop_cmd::run(&store.store, *clear, *status),
        Command::Quota {
            store,
            mount,
            json,
            command,
        } => match mounts::store_for(&store.store, mount.as_deref()) {
            Err(e) => Err(e.into()),
            Ok(root) => match command {
                Some(cli::QuotaCommand::Rescan) => quota_cmd::rescan(&root),
                None => quota_cmd::show(&root, *json),
            },
        },
        Command::Search(args) => search_cmd::search(args),
        Command::Index { store, command } => {
            search_cmd::index(&mounts::store_path(&store.store), command)
        }
        Command::Specs { store, command } => {
            integrity_cmd::specs(&mounts::store_path(&store.store), command)
        }
        Command::Tools { store, command } => {
            integrity_cmd::tools(&mounts::store_path(&store.store), command)
        }
        Command::System { store, command } => {
            integrity_cmd::system(&mounts::store_path(&store.store), command)
        }
        Command::Snapshot { store, command } => {
            snapshot_cmd::snapshot(&mounts::store_path(&store.store), command)
        }
        Command::Import { store, command } => {
            import_cmd::import(&mounts::store_path(&store.store), command)
        }
        Command::Workspace { store, command } => {
            snapshot_cmd::workspace(&mounts::store_path(&store.store), command)
        }
        Command::Policy { command } => match command {
            cli::PolicyCommand::Check { file } => policy_cmd::check(file),
            cli::PolicyCommand::Reload { file, store } => {
                commands::policy_reload(&store.store, file.as_deref())
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clawfs: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
