//! Tool calls through generated files: running a call as its caller, with exactly the
//! caller's access, and recording it on the audit trail.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::PoisonError;

use clawfs_store::ToErrno;

use super::super::ClawFs;
use crate::creds::{AsCaller, Caller};
use crate::generated_files::{self, Exchange};
use clawfs_policy::{Identity, NsPath, Policy};

impl ClawFs {
    /// Runs one tool call for `caller` and returns the JSON response; the call is on the audit
    /// trail with the tool's result code, and a refusal reaches the agent's denials file. Every
    /// failure is a JSON error response, never an errno.
    pub(super) fn run_tool(
        &self,
        (who, creds): &(clawfs_policy::Identity, crate::creds::Credentials),
        tool: Option<&str>,
        exchange: &Exchange,
    ) -> Vec<u8> {
        let caller = &creds.caller;
        let mut head: RequestHead = serde_json::from_slice(&exchange.request).unwrap_or_default();
        let tool_name = tool
            .map(str::to_string)
            .or(RequestHead::text(head.tool.take()))
            .unwrap_or_else(|| "?".into());
        let target = head.target();
        if let Some(t) = tool.filter(|t| self.is_published_tool(t)) {
            // Recorded by the call itself, with what the tool was given.
            let result = match exchange.cut() {
                Some(cut) => Err(too_large(cut)),
                None => self.call_wasm((who, creds), t, &exchange.request),
            };
            return finish(result);
        }
        let (workspace, result) = match exchange.cut() {
            Some(cut) => (None, Err(too_large(cut))),
            None => self.call_tool(creds, who, tool, &exchange.request),
        };
        let named = target.as_ref().map(|(p, to)| (p.as_str(), to.as_deref()));
        let call = (tool_name.as_str(), named);
        self.record_tool(caller, who, call, workspace.as_deref(), &result);
        finish(result)
    }

    /// Records a tool call with its result code: ok, denied (with the agent's denials file
    /// told), or failed with an errno that says what kind of failure it was.
    pub(super) fn record_tool(
        &self,
        caller: &Caller,
        who: &clawfs_policy::Identity,
        (tool, target): (&str, Option<(&str, Option<&str>)>),
        workspace: Option<&str>,
        result: &clawfs_agent_tools::ToolResult<serde_json::Value>,
    ) {
        let path = match workspace {
            Some(ws) => format!("/workspaces/{ws}"),
            None => "/tools".to_string(),
        };
        let mut ev = clawfs_audit::AuditEvent::new(
            super::super::audit_name(who),
            caller.pid,
            format!("tool:{tool}"),
            path.clone(),
        );
        if let Some((from, to)) = target.filter(|(f, t)| f.len() + t.map_or(0, str::len) <= 4096) {
            // The file the call named (`<from> -> <to>` for a move), as a namespace path (so
            // that `audit search --path` finds the call), resolved as the tool resolves it: by
            // name, never by link.
            let mount = self.mountpoint.as_deref().and_then(|m| m.to_str());
            let ns = |p: &str| match workspace {
                Some(_) => namespace_target(&path, p, mount),
                None => p.to_string(),
            };
            ev = ev.target(match to {
                Some(to) => format!("{} -> {}", ns(from), ns(to)),
                None => ns(from),
            });
        }
        let e = match result {
            Ok(_) => return self.record(ev),
            Err(e) => e,
        };
        let message = e.to_string();
        let rule = match e {
            clawfs_agent_tools::ToolError::Protected(_) => clawfs_policy::rule::PROTECTED,
            clawfs_agent_tools::ToolError::Denied(_) => clawfs_policy::rule::TOOL_DENIED,
            _ => {
                let code = e.code();
                self.record(ev.failed(e.errno()).reason(format!("{code}: {message}")));
                return;
            }
        };
        self.record(ev.denied(libc::EACCES, rule, message.clone()));
        if let clawfs_policy::Identity::Agent(agent) = who {
            let denial = clawfs_policy::Denial {
                rule,
                reason: message,
                kind: clawfs_policy::DenyKind::Access,
            };
            if let Ok(ns) = clawfs_policy::NsPath::parse(&path) {
                self.write_denial(agent, &format!("tool:{tool}"), &ns, None, &denial);
            }
        }
    }

    /// "the workspaces you may read are: …" for `who`, by its policy (a name per folder of
    /// `/workspaces`, at most 50), for a message that must say where to go instead.
    fn workspaces_for(&self, who: &clawfs_policy::Identity) -> String {
        const SHOWN: usize = 50;
        let policy = self.policy();
        let dir = std::path::Path::new(clawfs_store::area::Area::Workspaces.dir_name());
        let listed: Vec<String> = clawfs_store::beneath::open_dir(self.store.root_fd(), dir)
            .ok()
            .and_then(|fd| rustix::fs::Dir::read_from(&fd).ok())
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let mut names: Vec<String> = listed
            .into_iter()
            .filter(|n| !n.starts_with('.'))
            .filter(|n| {
                NsPath::parse(&format!("/workspaces/{n}"))
                    .is_ok_and(|p| policy.check(who, clawfs_policy::Access::Read, &p).is_ok())
            })
            .collect();
        names.sort();
        match names.len() {
            0 => "you may read no workspace".into(),
            n if n > SHOWN => format!(
                "the workspaces you may read include: {} (and {} more)",
                names[..SHOWN].join(", "),
                n - SHOWN
            ),
            _ => format!("the workspaces you may read are: {}", names.join(", ")),
        }
    }

    /// Runs a tool with the caller's credentials; returns the workspace it ran in (if it got
    /// that far) and the response.
    pub(super) fn call_tool(
        &self,
        creds: &crate::creds::Credentials,
        who: &clawfs_policy::Identity,
        tool: Option<&str>,
        request: &[u8],
    ) -> (
        Option<String>,
        clawfs_agent_tools::ToolResult<serde_json::Value>,
    ) {
        let (workspace, request) = split_workspace(request);
        use clawfs_agent_tools::ToolError;
        let error = |e: ToolError| (None, Err(e));
        if let Err(e) = clawfs_store::names::check_system_name(OsStr::new(&workspace)) {
            return error(ToolError::InvalidArgs(format!("\"workspace\": {e}")));
        }
        let ws_dir = self
            .store
            .root()
            .join(clawfs_store::area::Area::Workspaces.dir_name())
            .join(&workspace);
        if !ws_dir.is_dir() {
            return error(ToolError::NotFound(format!(
                "there is no workspace {workspace:?}; {}",
                self.workspaces_for(who)
            )));
        }
        // The tools start from the workspace, opened by the daemon; the caller must be able to
        // reach it through /workspaces/ as it would by path. Checked before anything is made
        // in it for the call.
        let area = match clawfs_store::beneath::open(
            self.store.root_fd(),
            std::path::Path::new(clawfs_store::area::Area::Workspaces.dir_name()),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            0,
        ) {
            Ok(fd) => fd,
            Err(e) => return error(ToolError::io("starting the call", e)),
        };
        let entered = match AsCaller::enter_with(creds) {
            // Search permission on /workspaces/ and on the workspace, as the caller.
            Ok(_as) => rustix::fs::accessat(
                &area,
                workspace.as_str(),
                rustix::fs::Access::EXEC_OK,
                rustix::fs::AtFlags::EACCESS | rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            ),
            Err(e) => return error(ToolError::io("starting the call", e)),
        };
        if let Err(e) = entered {
            return error(ToolError::Denied(format!(
                "you may not enter /workspaces/{workspace}: {e} (by its permissions)"
            )));
        }
        if let Err(e) = self.prepare_tool_dirs(&ws_dir) {
            return error(ToolError::io("preparing the workspace's trash", e));
        }
        let mut root = match clawfs_agent_tools::ToolRoot::new(&ws_dir) {
            Ok(r) => r,
            Err(e) => return error(ToolError::io("starting the call", e)),
        };
        let policy = self.policy();
        let retention = policy.backups();
        let limits = clawfs_agent_tools::Limits {
            backups_kept: retention.keep,
            backup_max_age_days: retention.max_age_days,
            ..root.limits().clone()
        };
        root = root
            .with_alias(format!("/workspaces/{workspace}"))
            .with_limits(limits)
            .with_access(std::sync::Arc::new(ToolAccess {
                policy,
                who: who.clone(),
                workspace: workspace.clone(),
                repos: rustix::io::fcntl_dupfd_cloexec(self.store.root_fd(), 0)
                    .ok()
                    .map(|store| Carrying {
                        store,
                        root: self.store.root().to_path_buf(),
                        uid: creds.caller.uid,
                        order: std::sync::Arc::clone(&self.git_moves),
                    }),
            }));
        if let Some(mp) = &self.mountpoint {
            root = root
                .with_alias(format!("{}/workspaces/{workspace}", mp.display()))
                .with_mount(mp);
        }
        if self.store.is_shared() {
            // Hash-checked edits are serialized with the other hosts' daemons too.
            match crate::shared_edits::HostEdits::new(self.store.root_fd(), &workspace) {
                Ok(edits) => root = root.with_shared_edits(std::sync::Arc::new(edits)),
                Err(e) => return error(ToolError::io("starting the call", e)),
            }
        }
        if let Some(ix) = self.indexer() {
            root = root.with_semantic(std::sync::Arc::new(clawfs_search::ToolIndex {
                indexer: std::sync::Arc::clone(ix),
                workspace: workspace.clone(),
            }));
        }
        // An agent's call changes nothing once an emergency stop is in force (it may have been
        // computing since before), and stays within the quotas it grows (promised growth of
        // calls running at once included). What it really adds and gives back is counted from
        // its ledger when it is done.
        let promised = crate::fs::gate::Promised::default();
        if let Identity::Agent(agent) = who {
            root = root.with_meter(self.tool_meter(agent, creds.caller.uid, promised.clone()));
        }
        let ledger = crate::fs::gate::ToolLedger::new(self.spill.clone());
        root = root.with_ledger(std::sync::Arc::new(ledger.clone()));
        // Backups take the file's owner, group and mode, which only the daemon may give.
        let backup_creds = creds.clone();
        root = root.with_elevation(std::sync::Arc::new(move |f: &mut dyn FnMut()| {
            match crate::creds::AsDaemon::enter(&backup_creds) {
                Ok(_daemon) => f(),
                Err(e) => tracing::warn!(error = %e, "backup written as the caller"),
            }
        }));
        let changed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        root = root
            .with_caller(clawfs_agent_tools::CallerIds {
                uid: creds.caller.uid,
                gid: creds.caller.gid,
                groups: creds.groups.clone(),
            })
            .with_id_names(std::sync::Arc::new(|id| match id {
                clawfs_agent_tools::Id::User(uid) => Some(clawfs_store::accounts::user_name(uid)),
                clawfs_agent_tools::Id::Group(gid) => clawfs_store::accounts::group_name(gid),
            }))
            .with_umask(creds.umask)
            .with_observer(std::sync::Arc::new({
                let changed = std::sync::Arc::clone(&changed);
                move |p: &std::path::Path| {
                    changed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(p.to_path_buf())
                }
            }));
        // No one reads the answer of a caller that is gone: its walk or read stops early.
        if let Some(pid) = super::tool_threads::serving() {
            let gone = move || super::tool_threads::killed(pid);
            root = root.with_interrupt(clawfs_agent_tools::Interrupt::new(gone));
        }
        let as_caller = match AsCaller::enter_with(creds) {
            Ok(guard) => guard,
            Err(e) => return error(ToolError::io("starting the call", e)),
        };
        let out = clawfs_agent_tools::run(&root, tool, &request);
        if self.backup_sweep_due(&workspace) {
            // Counted with the call's changes: what it gives back is its owners' again.
            if let Err(e) = clawfs_agent_tools::sweep_backups(&root) {
                tracing::warn!(%workspace, error = %e, "aging out backups");
            }
        }
        drop(as_caller);
        self.count_tool_changes(&ledger, (who, creds.caller.uid));
        self.keep_promises(&promised);
        // The tool wrote the backing files directly: the kernel's view of them is stale until
        // told, and the caller must see its change as soon as it has the answer.
        let changed = std::mem::take(&mut *changed.lock().unwrap_or_else(PoisonError::into_inner));
        self.invalidate_paths(&changed);
        self.index_store_paths(&changed);
        (Some(workspace), out)
    }

    /// Whether the workspace's backups are due to be aged out: on its first call since the
    /// daemon started, then hourly. Files removed through the mount are never edited again,
    /// so their backups age out only so.
    fn backup_sweep_due(&self, workspace: &str) -> bool {
        const EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
        let mut swept = self
            .backup_sweeps
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = std::time::Instant::now();
        match swept.get(workspace) {
            Some(last) if now.duration_since(*last) < EVERY => false,
            _ => {
                swept.insert(workspace.to_string(), now);
                true
            }
        }
    }

    /// The workspace's private trash, shared by all its users like /tmp, and its backups,
    /// which only the daemon writes (each backup with the owner, group and mode of its file).
    fn prepare_tool_dirs(&self, ws_dir: &std::path::Path) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let private = ws_dir.join(clawfs_store::layout::PRIVATE_DIR);
        for (dir, mode) in [
            (private.clone(), 0o1777),
            (private.join("trash"), 0o1777),
            (private.join("backups"), 0o711),
        ] {
            match std::fs::DirBuilder::new().mode(mode).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            // Made earlier with other rights (backups were once shared like the trash).
            let m = std::fs::symlink_metadata(&dir)?;
            if !m.is_dir() {
                return Err(std::io::Error::other(format!(
                    "{} is not a folder",
                    dir.display()
                )));
            }
            if m.uid() != 0 && rustix::process::geteuid().is_root() {
                std::os::unix::fs::lchown(&dir, Some(0), Some(0))?;
            }
            if m.mode() & 0o7777 != mode {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
            }
        }
        Ok(())
    }
}

/// A call's response, ending with a newline.
fn finish(result: clawfs_agent_tools::ToolResult<serde_json::Value>) -> Vec<u8> {
    let mut out = clawfs_agent_tools::render(result);
    if out.last() != Some(&b'\n') {
        out.push(b'\n');
    }
    out
}

/// What the audit trail takes from a request: the tool, and the file it names (both ends of a
/// move, under either argument name the tools accept). Other fields are skipped unparsed.
#[derive(Default, serde::Deserialize)]
struct RequestHead {
    tool: Option<serde_json::Value>,
    path: Option<serde_json::Value>,
    from: Option<serde_json::Value>,
    source: Option<serde_json::Value>,
    to: Option<serde_json::Value>,
    destination: Option<serde_json::Value>,
}

impl RequestHead {
    fn text(v: Option<serde_json::Value>) -> Option<String> {
        match v {
            Some(serde_json::Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// `path`, or `from -> to` for a move.
    /// The path the call names, and where to for a move.
    fn target(self) -> Option<(String, Option<String>)> {
        let from = Self::text(self.from).or(Self::text(self.source));
        let to = Self::text(self.to).or(Self::text(self.destination));
        match (Self::text(self.path), from, to) {
            (Some(path), _, _) => Some((path, None)),
            (None, Some(from), Some(to)) => Some((from, Some(to))),
            (None, from, to) => from.or(to).map(|p| (p, None)),
        }
    }
}

/// Takes the optional `"workspace"` argument (default `default`) out of a request; a request
/// that is not a JSON object is passed on unchanged for the tool layer to report.
fn split_workspace(request: &[u8]) -> (String, Vec<u8>) {
    let default = || ("default".to_string(), request.to_vec());
    let Ok(serde_json::Value::Object(mut obj)) = serde_json::from_slice(request) else {
        return default();
    };
    match obj.remove("workspace") {
        Some(serde_json::Value::String(ws)) => (
            ws,
            serde_json::to_vec(&serde_json::Value::Object(obj)).expect("JSON serialises"),
        ),
        Some(_) => ("".into(), request.to_vec()),
        None => default(),
    }
}

/// A tool call's access: exactly what the calling identity has by direct file access.
pub(super) struct ToolAccess {
    pub(super) policy: std::sync::Arc<Policy>,
    pub(super) who: Identity,
    pub(super) workspace: String,
    /// What a move needs to see the repositories it may carry a repository under (none: moves
    /// are not checked, as for a listing).
    pub(super) repos: Option<Carrying>,
}

/// The store and the caller's uid, for the repositories around a tool's move, and the git
/// guard's order its look and move take their turn in.
pub(super) struct Carrying {
    store: std::os::fd::OwnedFd,
    root: std::path::PathBuf,
    uid: u32,
    order: std::sync::Arc<crate::fs::git_guard::MoveOrder>,
}

impl Carrying {
    /// The repositories around paths in the store, as the caller sees them.
    fn repos(&self) -> crate::fs::git_repos::Repos<'_> {
        crate::fs::git_repos::Repos::new(std::os::fd::AsFd::as_fd(&self.store), self.uid)
    }

    /// The namespace path of the store's folder `dir`, wherever it is now, and the anchor
    /// that ties it to `dir` for the lookups by name ([`crate::fs::git_repos::Anchor`]).
    fn path_of(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
    ) -> Option<(NsPath, crate::fs::git_repos::Anchor)> {
        let real = std::fs::read_link(std::path::Path::new(OsStr::from_bytes(
            clawfs_store::backing::proc_fd_path(&dir).as_bytes(),
        )))
        .ok()?;
        let rel = real.strip_prefix(&self.root).ok()?;
        let path = NsPath::from_components(rel.components().map(|c| c.as_os_str())).ok()?;
        let anchor = crate::fs::git_repos::Anchor::new(&path, &rustix::fs::fstat(dir).ok()?);
        Some((path, anchor))
    }
}

impl ToolAccess {
    fn ns(&self, rel: &str) -> Option<NsPath> {
        NsPath::parse(&format!("/workspaces/{}", self.workspace))
            .ok()?
            .join_all(rel.split('/').filter(|c| !c.is_empty()))
            .ok()
    }
}

impl clawfs_agent_tools::AccessCheck for ToolAccess {
    fn check(
        &self,
        rel: &str,
        access: clawfs_agent_tools::Access,
    ) -> clawfs_agent_tools::ToolResult<()> {
        clawfs_agent_tools::access::check_protected(rel)?;
        if access == clawfs_agent_tools::Access::Write
            && matches!(self.who, Identity::Agent(_))
            && rel
                .rsplit('/')
                .next()
                .is_some_and(|n| self.policy.is_git_head_name(n))
        {
            // A tool cannot tell making a file from changing one, nor see whose folder it is
            // in by the descriptor it writes through: `HEAD` is git's, like `.git`.
            return Err(clawfs_agent_tools::ToolError::Denied(format!(
                "{rel}: a file named HEAD makes its folder a bare git repository, which git trusts for the folder's owner; tools do not write git's files (make repositories with git through the mount: git init --bare, in a folder of your own)"
            )));
        }
        let top = rel.split('/').find(|c| !c.is_empty());
        if access == clawfs_agent_tools::Access::Write
            && top.is_some_and(|t| {
                clawfs_store::area::Place::WorkspaceRoot.is_managed_child(OsStr::new(t))
            })
        {
            // The workspace's metadata, snapshots and generated names are ClawFS's: the mount
            // refuses to make, remove or rename them, and so do the tools, which cannot tell a
            // write from a removal.
            return Err(clawfs_agent_tools::ToolError::Denied(format!(
                "{rel} is managed by ClawFS (the workspace's metadata.json, snapshots/, .search/ and workspace.db); set user.clawfs.* attributes on the workspace instead"
            )));
        }
        let path = self.ns(rel).ok_or_else(|| {
            clawfs_agent_tools::ToolError::InvalidArgs(format!("{rel:?} is not a valid path"))
        })?;
        let access = match access {
            clawfs_agent_tools::Access::Read => clawfs_policy::Access::Read,
            clawfs_agent_tools::Access::Write => clawfs_policy::Access::Write,
        };
        // The repositories around the path as the caller's git dirs, looked at in the store
        // (with the daemon's ids: the caller may not see the store's folders).
        let decided = match &self.repos {
            Some(carrying) => crate::creds::with_daemon_ids(|| {
                self.policy
                    .check_in(&self.who, access, &path, &carrying.repos())
            }),
            None => self.policy.check(&self.who, access, &path),
        };
        decided.map_err(|d| clawfs_agent_tools::ToolError::Denied(d.reason))
    }

    fn writing_in(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        name: &str,
        rel: &str,
    ) -> clawfs_agent_tools::ToolResult<()> {
        if !matches!(self.who, Identity::Agent(_)) || !self.policy.guards_git() {
            return Ok(());
        }
        // Where the folder is now, tied to it by an anchor, with the daemon's ids (the caller
        // may not see the store's folders): a git dir around it is looked at, by name, only
        // where the names still lead to the folder written through.
        let decided = self.repos.as_ref().and_then(|carrying| {
            crate::creds::with_daemon_ids(|| {
                let (dir_path, anchor) = carrying.path_of(dir)?;
                let path = dir_path.join(name).ok()?;
                let repos = carrying.repos().anchored(vec![anchor]);
                Some(
                    self.policy
                        .check_in(&self.who, clawfs_policy::Access::Write, &path, &repos),
                )
            })
        });
        match decided {
            Some(Ok(())) => Ok(()),
            Some(Err(d)) => Err(clawfs_agent_tools::ToolError::Denied(d.reason)),
            None => Err(clawfs_agent_tools::ToolError::Denied(format!(
                "the folder of '{rel}' could not be looked at for git repositories around it (it moved while the call ran); nothing was written"
            ))),
        }
    }

    fn carry(
        &self,
        (dir, name): (std::os::fd::BorrowedFd<'_>, &str),
        (to_dir, to): (std::os::fd::BorrowedFd<'_>, &str),
        rename: &mut dyn FnMut() -> clawfs_agent_tools::ToolResult<()>,
    ) -> clawfs_agent_tools::ToolResult<()> {
        use clawfs_policy::GitRepos;
        let Some(carrying) = &self.repos else {
            return rename();
        };
        if !matches!(self.who, Identity::Agent(_)) || !self.policy.guards_git() {
            return rename();
        }
        // As through the mount: the look through the folder and its move in a sole turn, where
        // they are looked at — where the folders the rename uses are now, with the daemon's
        // ids, since the caller may not see the store's folders. The owner's git, recursing
        // into it as a submodule, would run its config.
        let _turn = carrying.order.sole();
        let kind = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| st.st_mode & libc::S_IFMT);
        let (folder, symlink) = (kind == Ok(libc::S_IFDIR), kind == Ok(libc::S_IFLNK));
        let leaf = to.rsplit('/').next().unwrap_or(to);
        let carried = (folder || symlink)
            && crate::creds::with_daemon_ids(|| {
                let dest = carrying
                    .path_of(to_dir)
                    .and_then(|(dir, anchor)| Some((dir.join(leaf).ok()?, anchor)));
                match dest {
                    Some((dest, anchor)) => {
                        let repos = carrying.repos().anchored(vec![anchor]);
                        // A symlink leads where one made there may ([`symlink_escape`]).
                        let escapes = || {
                            rustix::fs::readlinkat(dir, name, Vec::new()).map_or(true, |t| {
                                crate::fs::git_guard::symlink_escape(&dest, &to_dir, t.as_bytes())
                                    .is_some()
                            })
                        };
                        repos.foreign_git_above(&dest)
                            && (self.policy.is_in_git_dir(&dest, &repos)
                                || match symlink {
                                    true => escapes(),
                                    false => crate::fs::git_guard::holds_untrusted_git(
                                        &repos,
                                        &dest,
                                        (&dir, OsStr::new(name)),
                                    ),
                                })
                    }
                    // Where it would go cannot be named: refused, as what cannot be looked at.
                    None => true,
                }
            });
        if carried {
            return Err(clawfs_agent_tools::ToolError::Denied(format!(
                "what you move to '{to}' is a folder or symlink landing in a git dir, or holds a git repository or a symlink that there would lead out of the workspace, into a .git or through a symlink (or more entries than can be looked through), and '{to}' is in a repository you do not own, whose git would recurse into it or write through the symlink; keep your repositories and such symlinks outside others'"
            )));
        }
        rename()
    }

    fn describe(&self) -> clawfs_agent_tools::Allowed {
        let all = || vec!["**".to_string()];
        let (read, write) = match &self.who {
            Identity::Agent(a) => match self.policy.workspace_grant(a, &self.workspace) {
                clawfs_policy::Grant::ReadWrite => (all(), all()),
                clawfs_policy::Grant::Read => (all(), Vec::new()),
                clawfs_policy::Grant::None => (Vec::new(), Vec::new()),
            },
            _ => (all(), all()),
        };
        clawfs_agent_tools::Allowed {
            read,
            write,
            protected: self.policy.protected().to_vec(),
        }
    }
}

/// The path `raw` a tool call named in the workspace at `ws` (`/workspaces/NAME`), as a
/// namespace path: relative to the workspace, or absolute in the namespace or under the mount
/// point `mount`, with `.`, `..` and repeated slashes resolved by name, as the tools resolve
/// them. Anything else (a path outside the workspace, one climbing above it) is kept as
/// written.
fn namespace_target(ws: &str, raw: &str, mount: Option<&str>) -> String {
    let under_mount = mount.and_then(|m| raw.strip_prefix(m.trim_end_matches('/')));
    let rel = match under_mount.unwrap_or(raw).strip_prefix(ws) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ if raw.starts_with('/') => return raw.to_string(),
        _ => raw,
    };
    let Some(parts) = clawfs_agent_tools::paths::lexical_components(rel) else {
        return raw.to_string();
    };
    match parts.is_empty() {
        true => ws.to_string(),
        false => format!("{ws}/{}", parts.join("/")),
    }
}

/// The answer to a request that was refused part of its body, and so not run.
pub(super) fn too_large(cut: generated_files::Cut) -> clawfs_agent_tools::ToolError {
    let message = match cut {
        generated_files::Cut::TooLarge => format!(
            "the request is larger than {} bytes and was not run; send a smaller one (e.g. fewer or shorter edits per call)",
            generated_files::MAX_CALL_REQUEST
        ),
        generated_files::Cut::CallerShare => format!(
            "your open tool-call files hold {} bytes of requests already, so this one was refused part of its body and was not run; close or finish the others first",
            super::BUFFERED_PER_CALLER
        ),
    };
    clawfs_agent_tools::ToolError::TooLarge(message)
}

#[cfg(test)]
mod tests {
    use super::{namespace_target, split_workspace};

    #[test]
    fn workspace_argument_is_taken_out() {
        let (ws, rest) = split_workspace(br#"{"workspace":"notes","path":"a.md"}"#);
        assert_eq!(ws, "notes");
        assert_eq!(rest, br#"{"path":"a.md"}"#);
        let (ws, rest) = split_workspace(b"not json");
        assert_eq!(
            (ws.as_str(), rest.as_slice()),
            ("default", &b"not json"[..])
        );
    }

    #[test]
    fn a_tool_calls_target_is_a_namespace_path() {
        let ws = "/workspaces/default";
        let t = |raw, mount| namespace_target(ws, raw, mount);
        assert_eq!(t("./secret.md", None), "/workspaces/default/secret.md");
        assert_eq!(t("sub/../mine.md", None), "/workspaces/default/mine.md");
        assert_eq!(t("../../etc/passwd", None), "../../etc/passwd");
        assert_eq!(t("a//b/", None), "/workspaces/default/a/b");
        assert_eq!(
            t("/workspaces/default/x/./y", None),
            "/workspaces/default/x/y"
        );
        assert_eq!(
            t("/clawfs/workspaces/default/n.md", Some("/clawfs")),
            "/workspaces/default/n.md"
        );
        assert_eq!(t("/etc/passwd", None), "/etc/passwd");
        assert_eq!(t("/workspaces/default2/x", None), "/workspaces/default2/x");
        assert_eq!(t(".", None), "/workspaces/default");
    }
}
