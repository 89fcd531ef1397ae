//! The emergency stop as the daemon enforces it: the flag `clawfs estop` writes, read on
//! SIGHUP and every 2 s, refusing agents' changes and tool calls while it is in force.

use super::*;

impl ClawFs {
    /// The emergency stop in force (the JSON `clawfs estop` wrote), if any.
    pub fn estop(&self) -> Option<serde_json::Value> {
        self.gate
            .estop
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether an emergency stop is in force.
    pub fn estop_in_force(&self) -> bool {
        self.gate
            .estop_on
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The switch [`Self::estop_in_force`] reads, for a tool call to look at before each change.
    pub(in crate::fs) fn estop_switch(&self) -> Arc<std::sync::atomic::AtomicBool> {
        Arc::clone(&self.gate.estop_on)
    }

    /// The flag as the store holds it now (an unreadable flag is a stop: failing closed).
    pub(in crate::fs) fn read_estop(&self) -> Option<serde_json::Value> {
        let path = Path::new(clawfs_store::layout::PRIVATE_DIR).join(ESTOP_FILE);
        match clawfs_store::beneath::read(self.store.root_fd(), &path, 1 << 16) {
            Ok(None) => None,
            Ok(Some(bytes)) => Some(
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| serde_json::json!({"by": "?", "unreadable": "not JSON"})),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "unreadable emergency stop flag; treated as in force");
                Some(serde_json::json!({"by": "?", "unreadable": e.to_string()}))
            }
        }
    }

    pub(in crate::fs) fn set_estop(&self, flag: Option<serde_json::Value>) {
        let on = flag.is_some();
        *self
            .gate
            .estop
            .write()
            .unwrap_or_else(PoisonError::into_inner) = flag;
        self.gate
            .estop_on
            .store(on, std::sync::atomic::Ordering::Release);
    }

    /// Re-reads `.clawfs/estop` (on SIGHUP, and periodically); a change is recorded on the
    /// audit trail as `estop:on` / `estop:off`, and what was seen is acknowledged in
    /// `.clawfs/estop-seen.json`. Returns whether a stop is in force.
    pub fn refresh_estop(&self) -> bool {
        let now = self.read_estop();
        let before = self.estop();
        let id = |f: &Option<serde_json::Value>| f.as_ref().map(|v| v["id"].clone());
        if now != before {
            // What the record says is what was seen: a flag the daemon could not read is a
            // stop it imposed itself (failing closed), and its end is not an admin's doing.
            let unreadable = |f: &Option<serde_json::Value>| {
                f.as_ref()
                    .and_then(|f| f.get("unreadable"))
                    .map(|why| why.as_str().unwrap_or("?").to_string())
            };
            let (op, reason) = match (&now, unreadable(&now), unreadable(&before)) {
                (Some(_), Some(why), _) => (
                    "estop:on",
                    format!("the flag is unreadable ({why}): treated as in force"),
                ),
                (Some(f), None, _) => (
                    "estop:on",
                    format!("by {}", f["by"].as_str().unwrap_or("admin")),
                ),
                (None, _, Some(_)) => (
                    "estop:off",
                    "the flag is readable again and holds no stop".to_string(),
                ),
                (None, _, None) => ("estop:off", "by admin".to_string()),
            };
            tracing::warn!(op, %reason, "emergency stop changed");
            self.record(AuditEvent::new("admin", 0, op, "/").reason(reason));
            self.set_estop(now.clone());
        }
        let (in_force, seen_id) = (now.is_some(), id(&now).or_else(|| id(&before)));
        let dir = &self.store.host_rel();
        let acked =
            clawfs_store::beneath::read(self.store.root_fd(), &dir.join(ESTOP_SEEN_FILE), 4096)
                .ok()
                .flatten()
                .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
                .is_some_and(|v| v["in_force"] == in_force && Some(&v["id"]) == seen_id.as_ref());
        if acked || (!in_force && seen_id.is_none()) {
            return in_force;
        }
        let seen = serde_json::json!({
            "in_force": in_force,
            "id": seen_id,
            "at": clawfs_store::clock::now_rfc3339(),
        });
        let how = clawfs_store::beneath::FileMode::mode(0o644);
        if let Err(e) =
            self.store
                .write_beneath(dir, ESTOP_SEEN_FILE, seen.to_string().as_bytes(), how)
        {
            tracing::warn!(error = %e, "could not acknowledge the emergency stop");
        }
        now.is_some()
    }

    /// Refuses an agent while a stop is in force; admins and users keep working.
    pub(in crate::fs) fn estop_check(&self, who: &Identity) -> Result<(), Denial> {
        match who {
            Identity::Agent(_) if self.estop_in_force() => Err(Denial {
                rule: ESTOP_RULE,
                reason: ESTOP_REASON.to_string(),
                kind: clawfs_policy::DenyKind::Permission,
            }),
            _ => Ok(()),
        }
    }

    /// Refuses (EPERM, audited as the opener's, in its denials file) a change through `file`
    /// while a stop is in force when an agent opened it: a descriptor keeps its opener's
    /// rights, whoever holds it now.
    pub(in crate::fs) fn estop_check_opener(
        &self,
        file: &crate::open_files::OpenFile,
        op: &'static str,
    ) -> FsResult<()> {
        let Some(w) = &file.writer else {
            return Ok(());
        };
        let Err(denial) = self.estop_check(&w.who) else {
            return Ok(());
        };
        let opener = Caller {
            uid: w.uid,
            gid: w.uid,
            pid: w.pid,
        };
        self.conclude_refusal(&opener, &w.who, op, &w.path, None, Err(denial))
    }

    /// Before a tool call on the open generated file `fh` runs (its first read, its close):
    /// while a stop is in force, an agent's call is answered `denied` instead of running,
    /// audited with rule ESTOP and written to the agent's denials file.
    pub(in crate::fs) fn estop_tool_call(&self, fh: u64) {
        if !self.estop_in_force() {
            return;
        }
        let Ok(handle) = self.generated.handles.get(fh) else {
            return;
        };
        let Identity::Agent(agent) = &handle.opener.0 else {
            return;
        };
        let request = match &handle.node {
            crate::generated_files::GeneratedNode::Call(_) => None,
            crate::generated_files::GeneratedNode::Request { owner, id } => {
                Some((owner.clone(), id.clone()))
            }
            _ => return,
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_some() {
            return;
        }
        let tool = match &handle.node {
            crate::generated_files::GeneratedNode::Call(t) => t.clone(),
            _ => serde_json::from_slice::<serde_json::Value>(&state.request)
                .ok()
                .and_then(|v| v["tool"].as_str().map(str::to_string))
                .unwrap_or_else(|| "?".into()),
        };
        let out = clawfs_agent_tools::render(Err(clawfs_agent_tools::ToolError::Denied(
            ESTOP_REASON.to_string(),
        )));
        let op = format!("tool:{tool}");
        let pid = handle.opener.1.caller.pid;
        self.record(
            AuditEvent::new(agent.as_str(), pid, op.clone(), "/tools").denied(
                libc::EPERM,
                ESTOP_RULE,
                ESTOP_REASON,
            ),
        );
        let denial = Denial {
            rule: ESTOP_RULE,
            reason: ESTOP_REASON.to_string(),
            kind: clawfs_policy::DenyKind::Permission,
        };
        if let Ok(ns) = NsPath::parse("/tools") {
            self.write_denial(agent, &op, &ns, None, &denial);
        }
        let Some((owner, id)) = request else {
            state.response = Some(out);
            return;
        };
        // A two-file request: its answer is kept for tools/responses/<id>.json.
        state.response = Some(Vec::new());
        drop(state);
        self.generated
            .keep_response(owner, id, out, &handle.opener.1.caller);
    }
}
