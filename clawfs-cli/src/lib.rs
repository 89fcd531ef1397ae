//! The `clawfs` command: [`run`] dispatches a parsed command line ([`clawfs_args::Cli`]) to
//! its command, one file each under [`commands`].

pub mod commands;
pub mod error;
pub mod logging;
pub mod monitor;
pub mod mount_helper;
pub mod mounts;
pub mod output;
pub mod store_ops;

use std::process::ExitCode;

use clawfs_args::integrity::ToolsCommand;
use clawfs_args::{Cli, Command};

use commands::{
    audit, estop, host, identity, import, integrity, mcp, mount, policy, quota, run as run_cmd,
    sandbox, search, snapshot, store, top, vault, wasm_tool,
};

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
        Command::Init { store } => store::init(&store.store),
        Command::Mount(args) => mount::mount(args),
        Command::Umount { mountpoint, lazy } => store::umount(mountpoint, *lazy),
        Command::Status { mountpoint, json } => store::status(mountpoint.as_deref(), *json),
        Command::Run(args) => return child_exit(run_cmd::run(args)),
        Command::Mcp(args) => return child_exit(mcp::mcp(args)),
        Command::McpServe(args) => mcp::serve(args).map_err(Into::into),
        Command::Audit { store, command } => audit::run(&mounts::store_path(&store.store), command),
        Command::Vault { store, command } => vault::run(&mounts::store_path(&store.store), command),
        Command::Identity {
            command: clawfs_args::IdentityCommand::Verify { agent, store },
        } => identity::identity_verify(&store.store, agent.as_deref()),
        Command::Sandbox {
            command: clawfs_args::SandboxCommand::Check { json },
        } => sandbox::check(*json),
        Command::Estop {
            store,
            clear,
            status,
        } => estop::run(&store.store, *clear, *status),
        Command::Quota {
            store,
            mount,
            json,
            command,
        } => match mounts::store_for(&store.store, mount.as_deref()) {
            Err(e) => Err(e.into()),
            Ok(root) => match command {
                Some(clawfs_args::QuotaCommand::Rescan) => quota::rescan(&root),
                None => quota::show(&root, *json),
            },
        },
        Command::Search(args) => search::search(args),
        Command::Top(args) => top::top(args),
        Command::Host { store, command } => host::run(&mounts::store_path(&store.store), command),
        Command::Index { store, command } => {
            search::index(&mounts::store_path(&store.store), command)
        }
        Command::Specs { store, command } => {
            integrity::specs(&mounts::store_path(&store.store), command)
        }
        Command::Tools {
            command:
                ToolsCommand::Run {
                    tool_id,
                    version,
                    mount,
                    input,
                },
            ..
        } => {
            return child_exit(wasm_tool::run(
                mount,
                tool_id,
                version.as_deref(),
                input.as_deref(),
            ))
        }
        Command::Tools { store, command } => {
            integrity::tools(&mounts::store_path(&store.store), command)
        }
        Command::System { store, command } => {
            integrity::system(&mounts::store_path(&store.store), command)
        }
        Command::Snapshot { store, command } => {
            snapshot::snapshot(&mounts::store_path(&store.store), command)
        }
        Command::Import { store, command } => {
            import::import(&mounts::store_path(&store.store), command)
        }
        Command::Workspace { store, command } => {
            snapshot::workspace(&mounts::store_path(&store.store), command)
        }
        Command::Policy { command } => match command {
            clawfs_args::PolicyCommand::Check { file } => policy::check(file),
            clawfs_args::PolicyCommand::Reload { file, store } => {
                policy::reload(&store.store, file.as_deref())
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
