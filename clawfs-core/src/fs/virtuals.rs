//! Serving the generated files (`agents/self`, `tools/call/<tool>`): lookup, attributes, open,
//! read, write. See [`crate::virtual_files`] for what they are.

use std::ffi::{OsStr, OsString};
use std::sync::PoisonError;

use super::{errno, ClawFs, Entry};
use crate::attr::{Attr, FileKind};
use crate::creds::{AsCaller, Caller};
use crate::error::{FsError, FsResult};
use crate::open_files::DirEntry;
use crate::policy::{Identity, NsPath, Policy};
use crate::virtual_files::{self, Exchange, VirtualHandle, VirtualInodes, VirtualNode};

impl ClawFs {
    /// The node of a virtual inode number.
    pub(super) fn virtual_node(&self, ino: u64) -> FsResult<VirtualNode> {
        self.virtuals.node(ino).ok_or(FsError::UnknownInode(ino))
    }

    /// Whose requests and responses a caller sees.
    pub(super) fn owner_key(&self, caller: &Caller) -> String {
        // By identity: an agent is itself whatever uid it runs as; others are their uid.
        match self.identify(caller) {
            Identity::Agent(a) => format!("agent:{a}"),
            _ => format!("uid:{}", caller.uid),
        }
    }

    fn response(&self, owner: &str, id: &str) -> Option<Vec<u8>> {
        let all = self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.get(owner)?
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, r)| r.clone())
    }

    pub(super) fn keep_response(&self, owner: String, id: String, response: Vec<u8>) {
        let mut all = self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mine = all.entry(owner).or_default();
        mine.retain(|(i, _)| *i != id);
        mine.push_back((id, response));
        while mine.len() > virtual_files::MAX_RESPONSES_PER_CALLER {
            mine.pop_front();
        }
    }

    /// A virtual child of `parent`, if `name` is one.
    pub(super) fn lookup_virtual(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
    ) -> FsResult<Option<Entry>> {
        let node = if VirtualInodes::is_virtual(parent) {
            let dir = self.virtual_node(parent)?;
            let child = match dir {
                VirtualNode::ResponsesDir => virtual_files::request_id(name).and_then(|id| {
                    let owner = self.owner_key(caller);
                    self.response(&owner, id).map(|_| VirtualNode::Response {
                        owner,
                        id: id.to_string(),
                    })
                }),
                // Requests are in flight only while their writer holds them open.
                VirtualNode::RequestsDir => None,
                VirtualNode::SecretsDir => name
                    .to_str()
                    .filter(|n| crate::names::check_system_name(OsStr::new(n)).is_ok())
                    .filter(|n| self.secret_exists(n))
                    .map(|n| VirtualNode::Secret(n.to_string())),
                dir => virtual_files::child_of_virtual(&dir, name),
            };
            Some(child.ok_or_else(|| errno(libc::ENOENT))?)
        } else {
            let pnode = self.node(parent)?;
            virtual_files::child_of_place(pnode.place, name)
        };
        Ok(node.map(|n| Entry {
            attr: self.attr_of_virtual(&n),
            generation: 0,
        }))
    }

    fn attr_of_virtual(&self, node: &VirtualNode) -> Attr {
        let size = match node {
            VirtualNode::Response { owner, id } => {
                self.response(owner, id).map_or(0, |r| r.len() as u64)
            }
            _ => 0,
        };
        Attr {
            ino: self.virtuals.ino(node),
            // Other content depends on the caller and the request: reads go to the daemon
            // (direct I/O), which serves whatever length there is.
            size,
            blocks: 0,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            kind: if node.is_dir() {
                FileKind::Dir
            } else {
                FileKind::File
            },
            perm: node.perm(),
            nlink: if node.is_dir() { 2 } else { 1 },
            uid: 0,
            gid: match node {
                VirtualNode::Secret(_) => crate::seed::agents_group().unwrap_or(0),
                _ => 0,
            },
            rdev: 0,
            blksize: 4096,
        }
    }

    pub(super) fn virtual_attr(&self, ino: u64) -> FsResult<Attr> {
        Ok(self.attr_of_virtual(&self.virtual_node(ino)?))
    }

    /// Only truncation to zero (a shell's `>`) is accepted: it clears the request.
    pub(super) fn virtual_setattr(
        &self,
        ino: u64,
        fh: Option<u64>,
        change: super::SetAttr,
    ) -> FsResult<Attr> {
        let only_truncate = change.mode.is_none()
            && change.uid.is_none()
            && change.gid.is_none()
            && change.size == Some(0);
        let times_only = change.size.is_none()
            && change.mode.is_none()
            && change.uid.is_none()
            && change.gid.is_none();
        if !(only_truncate || times_only) {
            return Err(FsError::Refused {
                errno: libc::EPERM,
                why: "a generated file takes only a truncation or new times",
            });
        }
        if let (true, Some(fh)) = (only_truncate, fh) {
            let handle = self.vfiles.get(fh)?;
            *handle.state.lock().unwrap_or_else(PoisonError::into_inner) = Exchange::default();
        }
        self.virtual_attr(ino)
    }

    pub(super) fn open_virtual(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<u64> {
        let node = self.virtual_node(ino)?;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let mut exchange = Exchange::default();
        match &node {
            VirtualNode::SelfInfo if writes => return Err(read_only_generated()),
            VirtualNode::SelfInfo => exchange.response = Some(self.self_info(caller)),
            VirtualNode::Response { .. } if writes => return Err(read_only_generated()),
            VirtualNode::Response { owner, id } => {
                if *owner != self.owner_key(caller) {
                    return Err(errno(libc::ENOENT));
                }
                exchange.response = Some(
                    self.response(owner, id)
                        .ok_or_else(|| errno(libc::ENOENT))?,
                );
            }
            VirtualNode::Secret(name) => self.open_secret(caller, name, writes, &mut exchange)?,
            VirtualNode::CallDir
            | VirtualNode::RequestsDir
            | VirtualNode::ResponsesDir
            | VirtualNode::SecretsDir => return Err(errno(libc::EISDIR)),
            // Reopening a request being written is not possible: each request is one file.
            VirtualNode::Request { .. } => return Err(errno(libc::ENOENT)),
            VirtualNode::Call(_) => {}
        }
        Ok(self.insert_virtual(caller, node, exchange))
    }

    pub(super) fn write_virtual(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let handle = self.vfiles.get(fh)?;
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        match handle.node {
            VirtualNode::Call(_) | VirtualNode::Request { .. } | VirtualNode::Secret(_) => {
                Ok(state.write(offset, data).map_err(errno)? as u32)
            }
            _ => Err(errno(libc::EBADF)),
        }
    }

    pub(super) fn read_virtual(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let handle = self.vfiles.get(fh)?;
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_none() {
            if let VirtualNode::Call(tool) = &handle.node {
                // The call runs on this request thread; the other threads keep serving.
                let response = self.run_tool(&handle.opener, Some(tool), &state);
                state.response = Some(response);
            }
        }
        Ok(state.read(offset, size as usize).to_vec())
    }

    /// Registers `caller`'s open of the generated file `node`; returns its handle.
    fn insert_virtual(&self, caller: &Caller, node: VirtualNode, exchange: Exchange) -> u64 {
        let (fh, _) = self.vfiles.insert(VirtualHandle {
            node,
            caller: *caller,
            opener: (self.identify(caller), crate::creds::Credentials::of(caller)),
            state: std::sync::Mutex::new(exchange),
        });
        fh
    }

    /// The entry and open handle of a generated file `caller` has just created.
    fn created_virtual(
        &self,
        caller: &Caller,
        node: VirtualNode,
        exchange: Exchange,
    ) -> (Entry, super::Opened) {
        let entry = Entry {
            attr: self.attr_of_virtual(&node),
            generation: 0,
        };
        let fh = self.insert_virtual(caller, node, exchange);
        (entry, super::Opened::Virtual(fh))
    }

    /// Creating `<id>.json` in `tools/requests/` starts a request.
    pub(super) fn create_virtual(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
    ) -> FsResult<(Entry, super::Opened)> {
        if self.virtual_node(parent)? == VirtualNode::SecretsDir {
            // A new secret, written by an admin; stored encrypted when closed.
            let secret = crate::names::check_system_name(name)?.to_string();
            let node = VirtualNode::Secret(secret.clone());
            let mut exchange = Exchange::default();
            self.open_secret(caller, &secret, true, &mut exchange)?;
            return Ok(self.created_virtual(caller, node, exchange));
        }
        if self.virtual_node(parent)? != VirtualNode::RequestsDir {
            return Err(FsError::Refused {
                errno: libc::EACCES,
                why: "files are made in a generated folder only as tool requests (tools/requests/<id>.json)",
            });
        }
        let id = virtual_files::request_id(name).ok_or_else(|| FsError::InvalidName {
            name: name.to_string_lossy().into_owned(),
            reason: "requests are named <id>.json, id of letters, digits, '.', '_' and '-'",
        })?;
        let node = VirtualNode::Request {
            owner: self.owner_key(caller),
            id: id.to_string(),
        };
        Ok(self.created_virtual(caller, node, Exchange::default()))
    }

    /// Closing a request runs it; its answer is in `tools/responses/<id>.json` by the time
    /// `close()` returns (the kernel's FLUSH is synchronous with `close()`, RELEASE is not).
    pub(super) fn flush_virtual(&self, fh: u64) -> FsResult<()> {
        let handle = self.vfiles.get(fh)?;
        // A close before anything was written (a shell's copy of the descriptor, closed after
        // dup2) runs nothing; the last close runs even an empty request.
        let written = !handle
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .request
            .is_empty();
        if written {
            self.run_request(&handle);
        }
        self.store_secret(&handle)
    }

    /// The last close of a request that was never flushed also runs it.
    pub(super) fn release_virtual(&self, fh: u64) -> FsResult<()> {
        let handle = self.vfiles.remove(fh).ok_or(FsError::UnknownHandle(fh))?;
        self.run_request(&handle);
        self.store_secret(&handle)
    }

    /// Runs a request once; later flushes of the same descriptor (after more writes) run it
    /// again with the whole content.
    fn run_request(&self, handle: &VirtualHandle) {
        let VirtualNode::Request { owner, id } = &handle.node else {
            return;
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_some() {
            return;
        }
        let response = self.run_tool(&handle.opener, None, &state);
        state.response = Some(Vec::new());
        drop(state);
        self.keep_response(owner.clone(), id.clone(), response);
    }

    /// Deleting a response in `tools/responses/` forgets it.
    pub(super) fn remove_virtual(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
    ) -> FsResult<()> {
        if self.virtual_node(parent)? == VirtualNode::SecretsDir {
            let name = crate::names::check_system_name(name)?;
            return self.remove_secret(caller, name);
        }
        if self.virtual_node(parent)? != VirtualNode::ResponsesDir {
            return Err(FsError::Refused {
                errno: libc::EPERM,
                why: "only tool responses are removed from a generated folder",
            });
        }
        let id = virtual_files::request_id(name).ok_or_else(|| errno(libc::ENOENT))?;
        let owner = self.owner_key(caller);
        let mut all = self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mine = all.get_mut(&owner).ok_or_else(|| errno(libc::ENOENT))?;
        let before = mine.len();
        mine.retain(|(i, _)| i != id);
        if mine.len() == before {
            return Err(errno(libc::ENOENT));
        }
        Ok(())
    }

    pub(super) fn list_virtual_dir(&self, caller: &Caller, ino: u64) -> FsResult<Vec<DirEntry>> {
        let dir = self.virtual_node(ino)?;
        let parent_area = match dir {
            VirtualNode::SecretsDir => crate::area::Area::Vault,
            _ => crate::area::Area::Tools,
        };
        let parent = self
            .inodes
            .mount_ino(rustix::fs::stat(self.store.root().join(parent_area.dir_name()))?.st_ino);
        let mut out = DirEntry::dots(ino, parent);
        let children = match dir {
            VirtualNode::ResponsesDir => {
                let owner = self.owner_key(caller);
                let all = self
                    .responses
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                all.get(&owner)
                    .map(|mine| {
                        mine.iter()
                            .map(|(id, _)| VirtualNode::Response {
                                owner: owner.clone(),
                                id: id.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            }
            VirtualNode::SecretsDir => self
                .visible_secrets(caller)
                .into_iter()
                .map(VirtualNode::Secret)
                .collect(),
            dir => virtual_files::children_of_virtual(&dir),
        };
        for child in children {
            let name = match &child {
                VirtualNode::Call(t) | VirtualNode::Secret(t) => OsString::from(t),
                VirtualNode::Request { id, .. } | VirtualNode::Response { id, .. } => {
                    OsString::from(format!("{id}.json"))
                }
                other => OsString::from(format!("{other:?}")),
            };
            out.push(DirEntry {
                ino: self.virtuals.ino(&child),
                kind: if child.is_dir() {
                    FileKind::Dir
                } else {
                    FileKind::File
                },
                name,
            });
        }
        Ok(out)
    }

    /// What `agents/self` says to `caller`.
    fn self_info(&self, caller: &Caller) -> Vec<u8> {
        let who = self.identify(caller);
        let policy = self.policy();
        let (identity, agent, grants) = match &who {
            Identity::Admin => ("admin", None, serde_json::Value::Null),
            Identity::User { .. } => ("user", None, serde_json::Value::Null),
            Identity::Agent(a) => {
                let spec = policy.agent(a);
                let grants = serde_json::json!({
                    "own_directory": format!("/agents/{a}"),
                    "workspaces": spec.map(|s| {
                        let mut m = serde_json::Map::new();
                        for (ws, g) in &s.workspaces.named {
                            m.insert(ws.clone(), g.as_str().into());
                        }
                        if let Some(g) = s.workspaces.others {
                            m.insert("*".into(), g.as_str().into());
                        }
                        m
                    }),
                    "secrets": policy.secrets_for(a).collect::<Vec<_>>(),
                    "quota": spec.map(|s| serde_json::json!({"bytes": s.quota.bytes, "files": s.quota.files})),
                });
                ("agent", Some(a.as_str().to_string()), grants)
            }
        };
        let mut out = serde_json::to_vec_pretty(&serde_json::json!({
            "identity": identity,
            "agent": agent,
            "uid": caller.uid,
            "gid": caller.gid,
            "pid": caller.pid,
            "policy": grants,
        }))
        .expect("JSON serialises");
        out.push(b'\n');
        out
    }

    /// Runs one tool call for `caller` and returns the JSON response; the call is on the audit
    /// trail with the tool's result code, and a refusal reaches the agent's denials file. Every
    /// failure is a JSON error response, never an errno.
    fn run_tool(
        &self,
        (who, creds): &(crate::policy::Identity, crate::creds::Credentials),
        tool: Option<&str>,
        exchange: &Exchange,
    ) -> Vec<u8> {
        let caller = &creds.caller;
        let head: RequestHead = serde_json::from_slice(&exchange.request).unwrap_or_default();
        let tool_name = tool
            .map(str::to_string)
            .or(RequestHead::text(head.tool))
            .unwrap_or_else(|| "?".into());
        let target = RequestHead::text(head.path).or(RequestHead::text(head.from));
        let (workspace, result) = if exchange.oversized {
            let message = format!(
                "the request is larger than {} bytes and was not run; send a smaller one (e.g. fewer or shorter edits per call)",
                virtual_files::MAX_CALL_REQUEST
            );
            (None, Err(clawfs_agent_tools::ToolError::TooLarge(message)))
        } else {
            self.call_tool(creds, who, tool, &exchange.request)
        };
        let call = (tool_name.as_str(), target.as_deref());
        self.record_tool(caller, who, call, workspace.as_deref(), &result);
        let mut out = clawfs_agent_tools::render(result);
        if out.last() != Some(&b'\n') {
            out.push(b'\n');
        }
        out
    }

    /// Records a tool call with its result code: ok, denied (with the agent's denials file
    /// told), or failed with an errno that says what kind of failure it was.
    fn record_tool(
        &self,
        caller: &Caller,
        who: &crate::policy::Identity,
        (tool, target): (&str, Option<&str>),
        workspace: Option<&str>,
        result: &clawfs_agent_tools::ToolResult<serde_json::Value>,
    ) {
        let path = match workspace {
            Some(ws) => format!("/workspaces/{ws}"),
            None => "/tools".to_string(),
        };
        let mut ev = crate::audit::AuditEvent::new(
            super::audit_name(who),
            caller.pid,
            format!("tool:{tool}"),
            path.clone(),
        );
        if let Some(t) = target.filter(|t| t.len() <= 4096) {
            // The file the call named, as the caller wrote it (the tool resolves it).
            ev = ev.target(t.to_string());
        }
        let e = match result {
            Ok(_) => return self.record(ev),
            Err(e) => e,
        };
        let code = e.code().to_string();
        let message = e.to_string();
        let rule = match code.as_str() {
            "protected" => Some(crate::policy::rule::PROTECTED),
            "denied" => Some(crate::policy::rule::TOOL_DENIED),
            _ => None,
        };
        let Some(rule) = rule else {
            self.record(
                ev.failed(tool_errno(&code))
                    .reason(format!("{code}: {message}")),
            );
            return;
        };
        self.record(ev.denied(libc::EACCES, rule, message.clone()));
        if let crate::policy::Identity::Agent(agent) = who {
            let denial = crate::policy::Denial {
                rule,
                reason: message,
                kind: crate::policy::DenyKind::Access,
            };
            if let Ok(ns) = crate::policy::NsPath::parse(&path) {
                self.write_denial(agent, &format!("tool:{tool}"), &ns, None, &denial);
            }
        }
    }

    /// Runs a tool with the caller's credentials; returns the workspace it ran in (if it got
    /// that far) and the response.
    fn call_tool(
        &self,
        creds: &crate::creds::Credentials,
        who: &crate::policy::Identity,
        tool: Option<&str>,
        request: &[u8],
    ) -> (
        Option<String>,
        clawfs_agent_tools::ToolResult<serde_json::Value>,
    ) {
        let (workspace, request) = split_workspace(request);
        use clawfs_agent_tools::ToolError;
        let error = |e: ToolError| (None, Err(e));
        if let Err(e) = crate::names::check_system_name(OsStr::new(&workspace)) {
            return error(ToolError::InvalidArgs(format!("\"workspace\": {e}")));
        }
        let ws_dir = self
            .store
            .root()
            .join(crate::area::Area::Workspaces.dir_name())
            .join(&workspace);
        if !ws_dir.is_dir() {
            return error(ToolError::NotFound(format!(
                "there is no workspace {workspace:?}; list /workspaces to see them"
            )));
        }
        // The tools start from the workspace, opened by the daemon; the caller must be able to
        // reach it through /workspaces/ as it would by path. Checked before anything is made
        // in it for the call.
        let area = match crate::beneath::open(
            self.store.root_fd(),
            std::path::Path::new(crate::area::Area::Workspaces.dir_name()),
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
        root = root
            .with_alias(format!("/workspaces/{workspace}"))
            .with_access(std::sync::Arc::new(ToolAccess {
                policy: self.policy(),
                who: who.clone(),
                workspace: workspace.clone(),
            }));
        if let Some(mp) = self.mountpoint.get() {
            root = root.with_alias(format!("{}/workspaces/{workspace}", mp.display()));
        }
        // An agent's byte quota: the call may add what is left of it, and is charged what it
        // added when it is done.
        let added = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        if let (true, Identity::Agent(agent)) = (self.metered(who), who) {
            let left = self
                .policy()
                .quota(agent)
                .bytes
                .saturating_sub(self.usage(agent).bytes);
            let added = std::sync::Arc::clone(&added);
            let name = agent.as_str().to_string();
            root = root.with_meter(std::sync::Arc::new(move |bytes| {
                use std::sync::atomic::Ordering;
                let before = added.fetch_add(bytes, Ordering::AcqRel);
                if before.saturating_add(bytes) <= left {
                    return Ok(());
                }
                added.fetch_sub(bytes, Ordering::AcqRel);
                Err(format!(
                    "agent {name} has {} bytes of its quota left and this write adds {bytes}; ask an admin to raise quota.bytes",
                    left.saturating_sub(before)
                ))
            }));
        }
        let changed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        root = root
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
        let as_caller = match AsCaller::enter_with(creds) {
            Ok(guard) => guard,
            Err(e) => return error(ToolError::io("starting the call", e)),
        };
        let out = clawfs_agent_tools::run(&root, tool, &request);
        drop(as_caller);
        if let Identity::Agent(agent) = who {
            let bytes = added.load(std::sync::atomic::Ordering::Acquire);
            if bytes > 0 {
                self.add_usage(agent, crate::policy::Quota { bytes, files: 0 });
            }
        }
        // The tool wrote the backing files directly: the kernel's view of them is stale until
        // told, and the caller must see its change as soon as it has the answer.
        let changed = std::mem::take(&mut *changed.lock().unwrap_or_else(PoisonError::into_inner));
        self.invalidate_paths(&changed);
        (Some(workspace), out)
    }

    /// The workspace's private trash and backup folders, shared by all its users like /tmp.
    fn prepare_tool_dirs(&self, ws_dir: &std::path::Path) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let private = ws_dir.join(crate::store::PRIVATE_DIR);
        for dir in [
            private.clone(),
            private.join("trash"),
            private.join("backups"),
        ] {
            match std::fs::DirBuilder::new().mode(0o1777).create(&dir) {
                Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// What the audit trail takes from a request: the tool, and the file it names. Other fields are
/// skipped unparsed.
#[derive(Default, serde::Deserialize)]
struct RequestHead {
    tool: Option<serde_json::Value>,
    path: Option<serde_json::Value>,
    from: Option<serde_json::Value>,
}

impl RequestHead {
    fn text(v: Option<serde_json::Value>) -> Option<String> {
        match v {
            Some(serde_json::Value::String(s)) => Some(s),
            _ => None,
        }
    }
}

/// The errno a failed tool call is recorded with, by its error code.
fn tool_errno(code: &str) -> i32 {
    match code {
        "not_found" => libc::ENOENT,
        "too_large" => libc::EFBIG,
        "io_error" | "internal" => libc::EIO,
        "exists" | "already_exists" => libc::EEXIST,
        "hash_mismatch" | "conflict" => libc::ESTALE,
        _ => libc::EINVAL,
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
struct ToolAccess {
    policy: std::sync::Arc<Policy>,
    who: Identity,
    workspace: String,
}

impl ToolAccess {
    fn ns(&self, rel: &str) -> Option<NsPath> {
        let mut p = NsPath::parse(&format!("/workspaces/{}", self.workspace)).ok()?;
        for c in rel.split('/').filter(|c| !c.is_empty()) {
            p = p.join(c).ok()?;
        }
        Some(p)
    }
}

impl clawfs_agent_tools::AccessCheck for ToolAccess {
    fn check(
        &self,
        rel: &str,
        access: clawfs_agent_tools::Access,
    ) -> clawfs_agent_tools::ToolResult<()> {
        clawfs_agent_tools::access::check_protected(rel)?;
        let top = rel.split('/').find(|c| !c.is_empty());
        if access == clawfs_agent_tools::Access::Write
            && (top == Some("snapshots") || rel.trim_matches('/') == "metadata.json")
        {
            // The workspace's metadata and snapshots are ClawFS's: the mount refuses to remove
            // or rename them, and so do the tools, which cannot tell a write from a removal.
            return Err(clawfs_agent_tools::ToolError::Denied(format!(
                "{rel} is managed by ClawFS (the workspace's metadata.json and snapshots/); set user.clawfs.* attributes on the workspace instead"
            )));
        }
        let path = self.ns(rel).ok_or_else(|| {
            clawfs_agent_tools::ToolError::InvalidArgs(format!("{rel:?} is not a valid path"))
        })?;
        let access = match access {
            clawfs_agent_tools::Access::Read => crate::policy::Access::Read,
            clawfs_agent_tools::Access::Write => crate::policy::Access::Write,
        };
        self.policy
            .check(&self.who, access, &path)
            .map_err(|d| clawfs_agent_tools::ToolError::Denied(d.reason))
    }

    fn describe(&self) -> clawfs_agent_tools::Allowed {
        let all = || vec!["**".to_string()];
        let (read, write) = match &self.who {
            Identity::Agent(a) => match self.policy.workspace_grant(a, &self.workspace) {
                crate::policy::Grant::ReadWrite => (all(), all()),
                crate::policy::Grant::Read => (all(), Vec::new()),
                crate::policy::Grant::None => (Vec::new(), Vec::new()),
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

/// Opening `agents/self` or a tool response for writing.
fn read_only_generated() -> FsError {
    FsError::Refused {
        errno: libc::EACCES,
        why: "this generated file is read-only",
    }
}

#[cfg(test)]
mod tests {
    use super::split_workspace;

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
}
