//! Telling the indexer what changed through the mount. Every hook only queues a change (the
//! indexer works in the background), so no write waits for indexing.

use std::sync::Arc;

use super::ClawFs;
use clawfs_policy::NsPath;
use clawfs_search::{Change, Indexer};

impl ClawFs {
    /// The indexer, if search is on.
    pub fn indexer(&self) -> Option<&Arc<Indexer>> {
        self.indexer.as_ref()
    }

    /// `path` was written, truncated, created, or is gone.
    pub(super) fn index_file(&self, path: &NsPath) {
        if let (Some(ix), Some((workspace, rel))) = (self.indexer.as_ref(), in_workspace(path)) {
            ix.notify(Change::File { workspace, rel });
        }
    }

    /// The folder `path` is gone.
    pub(super) fn index_tree_gone(&self, path: &NsPath) {
        if let (Some(ix), Some((workspace, rel))) = (self.indexer.as_ref(), in_workspace(path)) {
            ix.notify(Change::Tree { workspace, rel });
        }
    }

    /// `from` was renamed to `to`; `is_folder` says whether a folder moved (then everything
    /// below it did), asked only when search is on and a workspace is involved.
    pub(super) fn index_moved(&self, from: &NsPath, to: &NsPath, is_folder: impl FnOnce() -> bool) {
        let Some(ix) = self.indexer.as_ref() else {
            return;
        };
        if in_workspace(from).is_none() && in_workspace(to).is_none() {
            return;
        }
        if is_folder() {
            if let Some((workspace, rel)) = in_workspace(from) {
                ix.notify(Change::Tree { workspace, rel });
            }
            if let Some((workspace, _)) = in_workspace(to) {
                ix.notify(Change::Rescan { workspace });
            }
            return;
        }
        self.index_file(from);
        self.index_file(to);
    }

    /// The workspace `path` names got a new vector dimension.
    pub(super) fn index_reconfigured(&self, path: &NsPath) {
        let mut c = path.components();
        if let (Some(ix), Some("workspaces"), Some(ws), None) =
            (self.indexer.as_ref(), c.next(), c.next(), c.next())
        {
            ix.notify(Change::Reconfigure {
                workspace: ws.to_string(),
            });
        }
    }

    /// Files a tool call changed, by their paths in the store.
    pub(super) fn index_store_paths(&self, paths: &[std::path::PathBuf]) {
        let Some(ix) = self.indexer.as_ref() else {
            return;
        };
        let workspaces = self
            .store
            .root()
            .join(clawfs_store::area::Area::Workspaces.dir_name());
        for p in paths {
            let Ok(rel) = p.strip_prefix(&workspaces) else {
                continue;
            };
            let mut parts = rel.components();
            let (Some(ws), rest) = (parts.next(), parts.as_path()) else {
                continue;
            };
            let (Some(workspace), Some(rel)) = (ws.as_os_str().to_str(), rest.to_str()) else {
                continue;
            };
            let workspace = workspace.to_string();
            match std::fs::symlink_metadata(p) {
                // A folder made or moved by the tool: compare the workspace.
                Ok(m) if m.is_dir() => ix.notify(Change::Rescan { workspace }),
                _ if rel.is_empty() => {}
                _ => ix.notify(Change::File {
                    workspace,
                    rel: rel.to_string(),
                }),
            }
        }
    }
}

/// The workspace and workspace-relative path of `path`, if it is inside one.
fn in_workspace(path: &NsPath) -> Option<(String, String)> {
    let mut c = path.components();
    if c.next()? != "workspaces" {
        return None;
    }
    let ws = c.next()?.to_string();
    let rel: Vec<&str> = c.collect();
    if rel.is_empty() {
        return None;
    }
    let rel = rel.join("/");
    // ClawFS's own files in a workspace are never indexed.
    (!clawfs_search::workspace::is_managed(&rel)).then_some((ws, rel))
}
