//! `workspaces/<ws>/.search/<query>/`: a query as a folder. Listing it runs `semantic_search`
//! as the caller (the same tool, the same permission checks and audit record as a call through
//! `tools/call/`), and shows the best matching files, ranked, as symlinks to them.

use super::super::ClawFs;
use crate::creds::Caller;
use crate::error::{FsError, FsResult};

/// Files listed per query folder.
pub const SEARCH_DIR_HITS: usize = 20;

impl ClawFs {
    /// The results of `query` in `workspace` for `caller`: `(name, target)` per matching file,
    /// best first, named `NN-<file name>` and pointing at `../../<path>`.
    pub(in crate::fs) fn search_links(
        &self,
        caller: &Caller,
        workspace: &str,
        query: &str,
    ) -> FsResult<Vec<(String, String)>> {
        let who = self.identify_fresh(caller);
        let creds = crate::creds::Credentials::fresh(caller);
        // More chunks than files: a file's several chunks count once.
        let request = serde_json::json!({
            "workspace": workspace,
            "query": query,
            "limit": SEARCH_DIR_HITS * 3,
        })
        .to_string();
        let (ran_in, result) =
            self.call_tool(&creds, &who, Some("semantic_search"), request.as_bytes());
        self.record_tool(
            caller,
            &who,
            ("semantic_search", None),
            ran_in.as_deref(),
            &result,
        );
        let value = result.map_err(|e| {
            FsError::Io(std::io::Error::from_raw_os_error(
                clawfs_store::ToErrno::errno(&e),
            ))
        })?;
        let mut out: Vec<(String, String)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for hit in value["hits"].as_array().into_iter().flatten() {
            let Some(path) = hit["path"].as_str() else {
                continue;
            };
            if !seen.insert(path.to_string()) {
                continue;
            }
            let base = path.rsplit('/').next().unwrap_or(path);
            out.push((
                format!("{:02}-{base}", out.len() + 1),
                format!("../../{path}"),
            ));
            if out.len() == SEARCH_DIR_HITS {
                break;
            }
        }
        Ok(out)
    }
}
