//! `workspaces/<ws>/workspace.db`: the workspace's search index as a SQLite file a caller can
//! open with `sqlite3`. Each open gets its own copy, made from one consistent moment of the
//! index and holding only the files the caller may read (protected names and the policy, then
//! the file's own permissions, checked as the caller): the same rule as every search answer. The copy is
//! made in the store's private area, unlinked once open, and gone when the caller closes it.

use std::os::fd::AsFd;
use std::os::unix::fs::DirBuilderExt;

use super::super::ClawFs;
use crate::creds::{AsCaller, Caller, Credentials};
use crate::error::{FsError, FsResult};
use clawfs_policy::{Access, NsPath};

/// The folder of the store's private area where views are made (emptied when search starts).
pub const VIEWS_DIR: &str = "views";

/// Copies of `workspace.db` one caller may hold open at once (each is a file on disk).
const MAX_OPEN_VIEWS: usize = 4;

impl ClawFs {
    /// A read-only descriptor of a fresh view of `ws`'s index for `caller`.
    pub(in crate::fs) fn open_index_view(
        &self,
        caller: &Caller,
        ws: &str,
    ) -> FsResult<std::fs::File> {
        let ws_path = NsPath::parse(&format!("/workspaces/{ws}"))?;
        let who = self.decide(
            caller,
            "open",
            Access::Read,
            &ws_path.join(clawfs_store::area::INDEX_VIEW)?,
        )?;
        let indexer = self.indexer().ok_or_else(|| {
            clawfs_search::SearchError::Unavailable("search is off in this daemon".into())
        })?;
        // Each open is a copy of the index on disk: a caller holds a few at a time.
        let node = crate::generated_files::GeneratedNode::IndexView(ws.to_string());
        if self.opens_of(caller, &node).len() >= MAX_OPEN_VIEWS {
            return Err(FsError::Refused {
                errno: libc::EMFILE,
                why: "this caller has the most copies of workspace.db open at once (4); close one first",
            });
        }
        let index = indexer.index(ws)?;
        let ws_fd = indexer.workspace_dir(ws)?;
        let creds = Credentials::fresh(caller);
        // What a `semantic_search` call by the caller would show: the tools' access (protected
        // names, the policy), then the file's own permissions.
        let access = super::tool_calls::ToolAccess {
            policy: self.policy(),
            who,
            workspace: ws.to_string(),
            repos: None,
        };
        let readable = |rel: &str| -> bool {
            use clawfs_agent_tools::AccessCheck;
            access.check(rel, clawfs_agent_tools::Access::Read).is_ok()
                && clawfs_agent_tools::beneath::may_read(ws_fd.as_fd(), rel)
        };
        let dir = self.store.host_dir().join(VIEWS_DIR);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        // A real folder, not a symlink another host's root put in its place.
        if std::fs::symlink_metadata(&dir)?.file_type().is_symlink() {
            return Err(std::io::Error::from_raw_os_error(libc::ELOOP).into());
        }
        // An unpredictable new name (O_EXCL) in a folder only root can enter.
        let tmp = tempfile::Builder::new()
            .prefix("view-")
            .suffix(".db")
            .tempfile_in(&dir)?;
        // The checks run as the caller, on the files as they are now; the copy (written as the
        // daemon) takes each file only if it is still the one checked.
        let keep = {
            let _as = AsCaller::enter_with(&creds)?;
            index.shown_files(ws_fd.as_fd(), &readable)?
        };
        index.write_view(tmp.path(), &keep)?;
        let view = std::fs::File::open(tmp.path())?;
        drop(tmp);
        Ok(view)
    }
}
