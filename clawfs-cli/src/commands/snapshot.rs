//! `clawfs snapshot` and `clawfs workspace fork`: snapshots of a workspace (SQLite Archive files
//! in its `snapshots/`), restoring one atomically, and forking a workspace into a new one.

use std::path::Path;

use anyhow::{anyhow, Context};
use clawfs_core::store::Store;
use clawfs_search::snapshot::Workspaces;

use clawfs_args::snapshot::{SnapshotCommand, WorkspaceCommand};

use crate::commands::search::index_db;
use crate::error::Failure;

fn open(store_root: &Path) -> Result<(Store, Workspaces), Failure> {
    let store = Store::open(store_root)?;
    let ws = Workspaces::open(store_root).map_err(|e| anyhow!(e))?;
    Ok((store, ws))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// `clawfs snapshot`.
pub fn snapshot(store_root: &Path, cmd: &SnapshotCommand) -> Result<(), Failure> {
    let (store, wss) = open(store_root)?;
    match cmd {
        SnapshotCommand::Create { workspace, json } => {
            let s = wss
                .create(workspace, Some(&index_db(&store, workspace)))
                .map_err(|e| anyhow!(e))?;
            if !json {
                for why in &s.skipped {
                    eprintln!("clawfs snapshot: warning: left out {why}");
                }
            }
            match json {
                true => crate::output::print_json(&s).context("writing to stdout")?,
                false => println!(
                    "snapshot {} of {workspace}: {} files, {} ({} on disk)",
                    s.name,
                    s.files,
                    mib(s.bytes),
                    mib(s.size)
                ),
            }
        }
        SnapshotCommand::List { workspace, json } => {
            let list = wss.list(workspace).map_err(|e| anyhow!(e))?;
            for s in &list {
                match json {
                    true => crate::output::print_json(s).context("writing to stdout")?,
                    false => println!(
                        "{:32} {:26} {:>8} files {:>12}",
                        s.name,
                        s.created_at,
                        s.files,
                        mib(s.bytes)
                    ),
                }
            }
            if list.is_empty() && !json {
                eprintln!("workspace {workspace} has no snapshots");
            }
        }
        SnapshotCommand::Restore {
            workspace,
            snapshot,
            json,
        } => {
            let r = wss
                .restore(workspace, snapshot, Some(&index_db(&store, workspace)))
                .map_err(|e| anyhow!(e))?;
            // A daemon serving the store shows the change before this returns.
            crate::commands::mount::refresh_daemon(&store)?;
            if let (Some(kept), false) = (&r.kept_at, json) {
                eprintln!(
                    "clawfs snapshot: warning: the snapshot of what was replaced left files out; the replaced tree is kept whole in {}/{kept}",
                    store.root().display()
                );
            }
            match json {
                true => crate::output::print_json(&r).context("writing to stdout")?,
                false => println!(
                    "restored {workspace} from {} ({} files); what it replaced is in {}",
                    r.snapshot, r.files, r.saved_as
                ),
            }
        }
        SnapshotCommand::Rm {
            workspace,
            snapshot,
        } => {
            wss.remove(workspace, snapshot).map_err(|e| anyhow!(e))?;
            println!("removed snapshot {snapshot} of {workspace}");
        }
    }
    Ok(())
}

/// `clawfs workspace`.
pub fn workspace(store_root: &Path, cmd: &WorkspaceCommand) -> Result<(), Failure> {
    let (store, wss) = open(store_root)?;
    match cmd {
        WorkspaceCommand::Fork {
            workspace,
            new,
            from,
            json,
        } => {
            let f = wss
                .fork(workspace, new, from.as_deref())
                .map_err(|e| anyhow!(e))?;
            // A daemon serving the store shows the change before this returns.
            crate::commands::mount::refresh_daemon(&store)?;
            if !json {
                for why in &f.skipped {
                    eprintln!("clawfs workspace: warning: left out {why}");
                }
            }
            match json {
                true => crate::output::print_json(&f).context("writing to stdout")?,
                false => println!(
                    "forked {workspace}{} into {new}: {} files ({} reflinked)",
                    from.as_ref()
                        .map(|s| format!(" at {s}"))
                        .unwrap_or_default(),
                    f.files,
                    f.reflinked
                ),
            }
        }
    }
    Ok(())
}
