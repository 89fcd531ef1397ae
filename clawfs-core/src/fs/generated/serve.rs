//! Serving the generated files: lookup, attributes, open, read, write, close, listing and
//! removal, each reached from [`super::Route::Generated`] with its node already known.

use std::ffi::{OsStr, OsString};
use std::sync::PoisonError;

use super::super::{errno, ClawFs, Entry, Opened};
use crate::attr::{Attr, FileKind};
use crate::creds::Caller;
use crate::error::{FsError, FsResult};
use crate::generated_files::{self, Exchange, GeneratedHandle, GeneratedNode};
use crate::open_files::DirEntry;
use clawfs_policy::{Identity, NsPath};

impl ClawFs {
    /// Whose requests and responses a caller sees.
    pub(in crate::fs) fn owner_key(&self, caller: &Caller) -> String {
        // By identity: an agent is itself whatever uid it runs as; others are their uid.
        match self.identify(caller) {
            Identity::Agent(a) => format!("agent:{a}"),
            _ => format!("uid:{}", caller.uid),
        }
    }

    /// The child `name` of the generated folder `dir`.
    pub(in crate::fs) fn lookup_generated(
        &self,
        caller: &Caller,
        dir: GeneratedNode,
        name: &OsStr,
    ) -> FsResult<Entry> {
        let child = match dir {
            GeneratedNode::ResponsesDir => generated_files::request_id(name).and_then(|id| {
                let owner = self.owner_key(caller);
                self.generated
                    .response(&owner, id)
                    .map(|_| GeneratedNode::Response {
                        owner,
                        id: id.to_string(),
                    })
            }),
            // Requests are in flight only while their writer holds them open.
            GeneratedNode::RequestsDir => None,
            GeneratedNode::SecretsDir => name
                .to_str()
                .filter(|n| clawfs_store::names::check_system_name(OsStr::new(n)).is_ok())
                .filter(|n| self.secret_exists(n))
                .map(|n| GeneratedNode::Secret(n.to_string())),
            GeneratedNode::SearchDir(workspace) => name
                .to_str()
                .filter(|q| !q.trim().is_empty())
                .map(|q| GeneratedNode::SearchResults {
                    workspace,
                    query: q.to_string(),
                }),
            GeneratedNode::SearchResults { workspace, query } => {
                let hits = self.search_links(caller, &workspace, &query)?;
                hits.into_iter()
                    .find(|(n, _)| OsStr::new(n) == name)
                    .map(|(name, target)| GeneratedNode::SearchHit {
                        workspace,
                        query,
                        name,
                        target,
                    })
            }
            GeneratedNode::CallDir => {
                generated_files::child_of_generated(&dir, name).or_else(|| {
                    name.to_str()
                        .filter(|n| self.is_published_tool(n))
                        .map(|n| GeneratedNode::Call(n.to_string()))
                })
            }
            dir => generated_files::child_of_generated(&dir, name),
        };
        let child = child.ok_or_else(|| errno(libc::ENOENT))?;
        Ok(self.entry_of_generated(&child))
    }

    /// The entry of a generated node (never cached, generation 0).
    pub(in crate::fs) fn entry_of_generated(&self, node: &GeneratedNode) -> Entry {
        Entry {
            attr: self.attr_of_generated(node),
            generation: 0,
        }
    }

    /// The attributes of a generated node.
    pub(in crate::fs) fn attr_of_generated(&self, node: &GeneratedNode) -> Attr {
        self.generated.attr(node)
    }

    /// `caller`'s open handles of the generated file `node`, with their numbers.
    pub(in crate::fs) fn opens_of(
        &self,
        caller: &Caller,
        node: &GeneratedNode,
    ) -> Vec<(u64, std::sync::Arc<crate::generated_files::GeneratedHandle>)> {
        let owner = self.owner_key(caller);
        // The owners are worked out after the table's lock is released.
        let mut opens = self.generated.handles.matching(|h| h.node == *node);
        opens.retain(|(_, h)| self.owner_key(&h.caller) == owner);
        opens
    }

    /// The attributes of a generated node as `caller` sees it: an index view has the size of
    /// the copy open on `fh`, or else of the caller's latest open copy (the kernel asks without
    /// a handle for `fstat`, and `sqlite3` believes the size it gets).
    pub(in crate::fs) fn attr_of_open_generated(
        &self,
        caller: &Caller,
        node: &GeneratedNode,
        fh: Option<u64>,
    ) -> Attr {
        let mut attr = self.attr_of_generated(node);
        if let GeneratedNode::IndexView(_) = node {
            let open = fh
                .and_then(|fh| self.generated.handles.get(fh).ok())
                .filter(|h| h.node == *node)
                .or_else(|| {
                    let opens = self.opens_of(caller, node);
                    opens.into_iter().max_by_key(|(fh, _)| *fh).map(|(_, h)| h)
                });
            if let Some(size) = open
                .as_ref()
                .and_then(|h| h.content.as_ref())
                .and_then(|f| f.metadata().ok())
                .map(|m| m.len())
            {
                attr.size = size;
                attr.blocks = size.div_ceil(512);
            }
        }
        attr
    }

    /// Only truncation to zero (a shell's `>`) is accepted: it clears the request.
    pub(in crate::fs) fn generated_setattr(
        &self,
        node: &GeneratedNode,
        fh: Option<u64>,
        change: super::super::SetAttr,
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
            let handle = self.generated.handles.get(fh)?;
            // A request refused part of its body and cleared unanswered is on the record.
            self.record_refused(&handle);
            *handle.state.lock().unwrap_or_else(PoisonError::into_inner) = Exchange::default();
        }
        Ok(self.attr_of_generated(node))
    }

    pub(in crate::fs) fn open_generated(
        &self,
        caller: &Caller,
        node: GeneratedNode,
        flags: i32,
    ) -> FsResult<u64> {
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let mut exchange = Exchange::default();
        match &node {
            GeneratedNode::IndexView(_) if writes => return Err(read_only_generated()),
            GeneratedNode::IndexView(ws) => {
                // Counted before the copy is made.
                let charge = self.charge_generated(caller, &node)?;
                let view = self.open_index_view(caller, ws)?;
                return Ok(self.insert_generated(caller, node, exchange, Some(view), charge));
            }
            GeneratedNode::SelfInfo if writes => return Err(read_only_generated()),
            GeneratedNode::SelfInfo => {
                if let Identity::Agent(agent) = self.identify(caller) {
                    // Named in the kernel's ACLs before the agent runs (a `--user` uid).
                    let path = NsPath::parse("/agents/self").expect("a valid path");
                    self.claim_agent_uid(caller, &agent, &path)?;
                    self.agent_starting(caller.pid);
                }
                exchange.response = Some(self.self_info(caller));
            }
            GeneratedNode::Response { .. } if writes => return Err(read_only_generated()),
            GeneratedNode::Response { owner, id } => {
                if *owner != self.owner_key(caller) {
                    return Err(errno(libc::ENOENT));
                }
                exchange.response = Some(
                    self.generated
                        .response(owner, id)
                        .ok_or_else(|| errno(libc::ENOENT))?,
                );
            }
            GeneratedNode::Secret(name) => self.open_secret(caller, name, writes, &mut exchange)?,
            GeneratedNode::CallDir
            | GeneratedNode::RequestsDir
            | GeneratedNode::ResponsesDir
            | GeneratedNode::SecretsDir
            | GeneratedNode::SearchDir(_)
            | GeneratedNode::SearchResults { .. } => return Err(errno(libc::EISDIR)),
            // A symlink is never opened itself (the kernel follows it, or O_NOFOLLOW fails).
            GeneratedNode::SearchHit { .. } => return Err(errno(libc::ELOOP)),
            // Reopening a request being written is not possible: each request is one file.
            GeneratedNode::Request { .. } => return Err(errno(libc::ENOENT)),
            GeneratedNode::Call(_) => {}
        }
        let charge = self.charge_generated(caller, &node)?;
        Ok(self.insert_generated(caller, node, exchange, None, charge))
    }

    pub(in crate::fs) fn write_generated(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
    ) -> FsResult<u32> {
        let handle = self.generated.handles.get(fh)?;
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        match handle.node {
            GeneratedNode::Call(_) | GeneratedNode::Request { .. } | GeneratedNode::Secret(_) => {}
            _ => return Err(errno(libc::EBADF)),
        }
        // What the write will hold: a write after a response starts the request anew.
        let before = state.request.len();
        let end = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(data.len()))
            .ok_or_else(|| errno(libc::EFBIG))?;
        // Past what one request may be, the write is refused as too large whatever the
        // caller's share holds (below); within it, the share is checked first.
        if end <= crate::generated_files::MAX_CALL_REQUEST {
            let after = match state.response {
                Some(_) => end,
                None => before.max(end),
            };
            let uid = handle.opener.1.caller.uid;
            let ledger = &self.generated.buffered;
            let hold = match &mut state.buffered {
                Some(hold) => hold,
                empty => empty.insert(ledger.take(uid, 0, |_| Ok::<_, FsError>(()))?),
            };
            let (held, after) = (hold.amount(), after as u64);
            let grown = match after > held {
                true => hold.resize(after, |h| {
                    match h.mine + (after - held) > super::BUFFERED_PER_CALLER {
                        true => Err(errno(libc::EFBIG)),
                        false => Ok(()),
                    }
                }),
                false => Ok(()),
            };
            if let Err(e) = grown {
                // Never run (or stored) on what was kept of it: answered `too_large` instead.
                state.refuse(crate::generated_files::Cut::CallerShare);
                hold_request(&mut state)?;
                return Err(e);
            }
        }
        let written = state.write(offset, data);
        // Counted whatever the write did (a refused write after a response still cleared it).
        hold_request(&mut state)?;
        Ok(written.map_err(errno)? as u32)
    }

    pub(in crate::fs) fn read_generated(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> FsResult<Vec<u8>> {
        let handle = self.generated.handles.get(fh)?;
        if let Some(file) = &handle.content {
            let mut buf = vec![0; size as usize];
            let n = std::os::unix::fs::FileExt::read_at(file, &mut buf, offset)?;
            buf.truncate(n);
            return Ok(buf);
        }
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_none() {
            if let GeneratedNode::Call(tool) = &handle.node {
                if state.running {
                    // Another read of this descriptor is running the call.
                    return Err(errno(libc::EBUSY));
                }
                // The call runs on this request thread, on a copy of the request, without the
                // exchange's lock: a close of another copy of the descriptor (a flush) must
                // not wait for it, holding a thread the call's own file operations need.
                let call = Exchange {
                    request: state.request.clone(),
                    cut: state.cut,
                    ..Exchange::default()
                };
                state.running = true;
                drop(state);
                let response = self.run_tool(&handle.opener, Some(tool), &call);
                let (response, answer) = self.hold_answer(&handle.opener, tool, response);
                state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.running = false;
                state.response = Some(response);
                state.answer = answer;
            }
        }
        Ok(state.read(offset, size as usize).to_vec())
    }

    /// `response`, counted against what its opener holds in open call files; past
    /// [`crate::generated_files::MAX_ANSWER_BYTES_PER_CALLER`] an error to read instead
    /// (audited: the call ran, its answer is withheld).
    fn hold_answer(
        &self,
        (who, creds): &(Identity, crate::creds::Credentials),
        tool: &str,
        response: Vec<u8>,
    ) -> (Vec<u8>, Option<crate::per_caller::Taken>) {
        use crate::generated_files::MAX_ANSWER_BYTES_PER_CALLER;
        let caller = &creds.caller;
        let bytes = response.len() as u64;
        let within = |h: crate::per_caller::Holdings| match h.mine + bytes
            > MAX_ANSWER_BYTES_PER_CALLER as u64
        {
            true => Err(h.mine),
            false => Ok(()),
        };
        let holding = match self.generated.answers.take(caller.uid, bytes, within) {
            Ok(charge) => return (response, Some(charge)),
            Err(holding) => holding,
        };
        let message = format!(
            "the answer ({} bytes) is withheld: you hold {holding} bytes of answers in open tools/call files, and at most {MAX_ANSWER_BYTES_PER_CALLER} are kept; close some and call again",
            response.len()
        );
        self.record(
            clawfs_audit::AuditEvent::new(
                crate::fs::audit_name(who),
                caller.pid,
                format!("tool:{tool}"),
                GeneratedNode::Call(tool.to_string()).audit_path(),
            )
            .failed(libc::ENOMEM)
            .reason(message.clone()),
        );
        let error = clawfs_agent_tools::ToolError::TooLarge(message);
        let mut out = clawfs_agent_tools::render(Err(error));
        out.push(b'\n');
        (out, None)
    }

    /// Registers `caller`'s open of the generated file `node` (served from `content` when
    /// given); returns its handle.
    fn insert_generated(
        &self,
        caller: &Caller,
        node: GeneratedNode,
        exchange: Exchange,
        content: Option<std::fs::File>,
        charge: crate::descriptors::Charge,
    ) -> u64 {
        let (fh, _) = self.generated.handles.insert(GeneratedHandle {
            node,
            caller: *caller,
            // The call runs with these, checked by nothing of the kernel's: read now.
            opener: (
                self.identify_fresh(caller),
                crate::creds::Credentials::fresh(caller),
            ),
            state: std::sync::Mutex::new(exchange),
            content,
            charge,
        });
        fh
    }

    /// `caller`'s open of the generated file `node`, counted against its open files.
    fn charge_generated(
        &self,
        caller: &Caller,
        node: &GeneratedNode,
    ) -> FsResult<crate::descriptors::Charge> {
        let path = clawfs_policy::NsPath::parse(&node.audit_path())
            .or_else(|_| clawfs_policy::NsPath::parse("/tools"))?;
        self.charge_descriptor(caller, "open", &path)
    }

    /// The entry and open handle of a generated file `caller` has just created.
    fn created_generated(
        &self,
        caller: &Caller,
        node: GeneratedNode,
        exchange: Exchange,
    ) -> FsResult<(Entry, Opened)> {
        let entry = Entry {
            attr: self.attr_of_generated(&node),
            generation: 0,
        };
        let charge = self.charge_generated(caller, &node)?;
        let fh = self.insert_generated(caller, node, exchange, None, charge);
        Ok((entry, Opened::Generated(fh)))
    }

    /// Creating `<id>.json` in `tools/requests/` starts a request.
    pub(in crate::fs) fn create_generated(
        &self,
        caller: &Caller,
        dir: GeneratedNode,
        name: &OsStr,
    ) -> FsResult<(Entry, Opened)> {
        if dir == GeneratedNode::SecretsDir {
            // A new secret, written by an admin; stored encrypted when closed.
            let secret = clawfs_store::names::check_system_name(name)?.to_string();
            let node = GeneratedNode::Secret(secret.clone());
            let mut exchange = Exchange::default();
            self.open_secret(caller, &secret, true, &mut exchange)?;
            return self.created_generated(caller, node, exchange);
        }
        if dir != GeneratedNode::RequestsDir {
            return Err(FsError::Refused {
                errno: libc::EACCES,
                why: "files are made in a generated folder only as tool requests (tools/requests/<id>.json)",
            });
        }
        let id = generated_files::request_id(name).ok_or_else(|| FsError::InvalidName {
            name: name.to_string_lossy().into_owned(),
            reason: "requests are named <id>.json, id of letters, digits, '.', '_' and '-'",
        })?;
        let node = GeneratedNode::Request {
            owner: self.owner_key(caller),
            id: id.to_string(),
        };
        self.created_generated(caller, node, Exchange::default())
    }

    /// Closing a request runs it; its answer is in `tools/responses/<id>.json` by the time
    /// `close()` returns (the kernel's FLUSH is synchronous with `close()`, RELEASE is not).
    pub(in crate::fs) fn flush_generated(&self, fh: u64) -> FsResult<()> {
        let handle = self.generated.handles.get(fh)?;
        if let GeneratedNode::Call(_) = handle.node {
            // A call runs at its first read, never at a close: nothing to do, and nothing to
            // wait for (its exchange may be busy with a running call).
            return Ok(());
        }
        // A close before anything was written (a shell's copy of the descriptor, closed after
        // dup2) runs nothing; the last close runs even an empty request.
        // A request refused as too large is answered now too, not at the release that
        // follows the close: the caller reads its answer once `close()` returns.
        let written = {
            let state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.written()
        };
        if written {
            self.run_request(&handle);
        }
        self.store_secret(&handle)
    }

    /// The last close of a generated file.
    pub(in crate::fs) fn release_generated(&self, fh: u64) -> FsResult<()> {
        let handle = self
            .generated
            .handles
            .remove(fh)
            .ok_or(FsError::UnknownHandle(fh))?;
        self.record_unanswered(&handle);
        self.store_secret(&handle)
    }

    /// A request that holds what nothing ran is dropped, not run, and the trail says so: a
    /// call refused part of its body whose caller closed it without reading the answer (as a
    /// read would have: `too_large`), or a request file written after its last FLUSH, by a
    /// write that raced the close. A release comes from the kernel, without its caller's
    /// credentials, and while the daemon holds it no other release of the mount reaches it
    /// (the kernel sends only a few at a time): it runs nothing that can take long.
    fn record_unanswered(&self, handle: &GeneratedHandle) {
        if self.record_refused(handle) {
            return;
        }
        let GeneratedNode::Request { .. } = &handle.node else {
            return;
        };
        let state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_some() || !state.written() {
            return;
        }
        drop(state);
        let (who, creds) = &handle.opener;
        self.record(
            clawfs_audit::AuditEvent::new(
                crate::fs::audit_name(who),
                creds.caller.pid,
                "tool",
                "/tools/requests".to_string(),
            )
            .failed(libc::EINTR)
            .reason("the request was written after its last close: not run"),
        );
    }

    /// Records a request refused part of its body that was never answered (closed unread, or
    /// cleared by a truncation), as its answer would have been: `too_large`. Whether it did.
    fn record_refused(&self, handle: &GeneratedHandle) -> bool {
        let state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        let cut = match state.response {
            Some(_) => None,
            None => state.cut(),
        };
        drop(state);
        let Some(cut) = cut else {
            return false;
        };
        let tool = match &handle.node {
            GeneratedNode::Call(tool) => tool.as_str(),
            GeneratedNode::Request { .. } => "?",
            _ => return false,
        };
        let (who, creds) = &handle.opener;
        let refused = Err(super::tool_calls::too_large(cut));
        self.record_tool(&creds.caller, who, (tool, None), None, &refused);
        true
    }

    /// Runs a request once; later flushes of the same descriptor (after more writes) run it
    /// again with the whole content.
    fn run_request(&self, handle: &GeneratedHandle) {
        let GeneratedNode::Request { owner, id } = &handle.node else {
            return;
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_some() {
            return;
        }
        let response = self.run_tool(&handle.opener, None, &state);
        state.response = Some(Vec::new());
        drop(state);
        self.generated
            .keep_response(owner.clone(), id.clone(), response, &handle.opener.1.caller);
    }

    /// Deleting a response in `tools/responses/` forgets it.
    pub(in crate::fs) fn remove_generated(
        &self,
        caller: &Caller,
        dir: GeneratedNode,
        name: &OsStr,
    ) -> FsResult<()> {
        if dir == GeneratedNode::SecretsDir {
            let name = clawfs_store::names::check_system_name(name)?;
            return self.remove_secret(caller, name);
        }
        if dir != GeneratedNode::ResponsesDir {
            return Err(FsError::Refused {
                errno: libc::EPERM,
                why: "only tool responses are removed from a generated folder",
            });
        }
        let id = generated_files::request_id(name).ok_or_else(|| errno(libc::ENOENT))?;
        match self.generated.forget_response(&self.owner_key(caller), id) {
            true => Ok(()),
            false => Err(errno(libc::ENOENT)),
        }
    }

    /// The entries of the generated folder `dir`, as `caller` sees them.
    pub(in crate::fs) fn list_generated_dir(
        &self,
        caller: &Caller,
        dir: GeneratedNode,
    ) -> FsResult<Vec<DirEntry>> {
        let ino = self.generated.ino(&dir);
        // The folder above: a stored one (an area's root, the workspace), or a generated one.
        let stored_parent = |rel: &str| -> FsResult<u64> {
            let st = rustix::fs::stat(self.store.root().join(rel))?;
            Ok(self.inodes.mount_ino(st.st_ino))
        };
        let parent = match &dir {
            GeneratedNode::SecretsDir => stored_parent(clawfs_store::area::Area::Vault.dir_name())?,
            GeneratedNode::SearchDir(ws) => stored_parent(&format!("workspaces/{ws}"))?,
            GeneratedNode::SearchResults { workspace, .. } => self
                .generated
                .ino(&GeneratedNode::SearchDir(workspace.clone())),
            _ => stored_parent(clawfs_store::area::Area::Tools.dir_name())?,
        };
        let mut out = DirEntry::dots(ino, parent);
        if let GeneratedNode::SearchResults { workspace, query } = &dir {
            for (name, target) in self.search_links(caller, workspace, query)? {
                let hit = GeneratedNode::SearchHit {
                    workspace: workspace.clone(),
                    query: query.clone(),
                    name: name.clone(),
                    target,
                };
                out.push(DirEntry {
                    ino: self.generated.ino(&hit),
                    kind: FileKind::Symlink,
                    name: OsString::from(name),
                });
            }
            return Ok(out);
        }
        let children = match dir {
            GeneratedNode::ResponsesDir => {
                let owner = self.owner_key(caller);
                self.generated
                    .response_ids(&owner)
                    .into_iter()
                    .map(|id| GeneratedNode::Response {
                        owner: owner.clone(),
                        id,
                    })
                    .collect()
            }
            GeneratedNode::SecretsDir => self
                .visible_secrets(caller)
                .into_iter()
                .map(GeneratedNode::Secret)
                .collect(),
            GeneratedNode::CallDir => {
                let mut calls = generated_files::children_of_generated(&dir);
                calls.extend(
                    self.published_tools()
                        .into_iter()
                        .filter(|t| !clawfs_agent_tools::TOOL_NAMES.contains(&t.as_str()))
                        .map(GeneratedNode::Call),
                );
                calls
            }
            dir => generated_files::children_of_generated(&dir),
        };
        for child in children {
            let name = match &child {
                GeneratedNode::Call(t) | GeneratedNode::Secret(t) => OsString::from(t),
                GeneratedNode::Request { id, .. } | GeneratedNode::Response { id, .. } => {
                    OsString::from(format!("{id}.json"))
                }
                other => OsString::from(format!("{other:?}")),
            };
            out.push(DirEntry {
                ino: self.generated.ino(&child),
                kind: child.kind(),
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
}

/// Opening `agents/self` or a tool response for writing.
fn read_only_generated() -> FsError {
    FsError::Refused {
        errno: libc::EACCES,
        why: "this generated file is read-only",
    }
}

/// What the caller holds for `state` set to what its request holds now.
fn hold_request(state: &mut Exchange) -> FsResult<()> {
    let now = state.request.len() as u64;
    if let Some(hold) = &mut state.buffered {
        hold.resize(now, |_| Ok::<_, FsError>(()))?;
    }
    Ok(())
}
