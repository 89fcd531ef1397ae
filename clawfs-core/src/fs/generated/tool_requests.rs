//! Requests on generated files that run a tool call (the first read of `tools/call/<tool>`,
//! the close of `tools/requests/<id>.json`) are answered from the tool threads
//! ([`super::tool_threads`]), in the turn of the call's opener (the call runs as them), and
//! so is an open of `workspace.db`, which copies the index; every other request is served
//! where it arrived. A release never runs a call.

use std::sync::{Arc, PoisonError};

use super::tool_threads::{Job, Turn, WAITING_PER_CALLER};
use crate::creds::Caller;
use crate::error::FsResult;
use crate::fs::{errno, ClawFs};
use crate::generated_files::{GeneratedInodes, GeneratedNode};

/// The requests that may run a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStep {
    /// An open (OPEN).
    Open,
    /// A read (READ).
    Read,
    /// A `close()` (FLUSH).
    Flush,
}

impl ClawFs {
    /// Serves `op`, `caller`'s request `step` on the handle `fh` of `ino`, and hands its
    /// result to `done`: from a tool thread, in the caller's turn, when it runs a tool call;
    /// else at once, on this thread.
    pub fn serve_then<T: 'static>(
        self: &Arc<Self>,
        caller: &Caller,
        (ino, fh, step): (u64, u64, ToolStep),
        op: impl FnOnce(&ClawFs) -> FsResult<T> + Send + 'static,
        done: impl FnOnce(FsResult<T>) + Send + 'static,
    ) {
        // A running call's own requests (a WebAssembly tool's file operations) are never
        // queued behind it. One that runs a call of its own runs it on a thread of its own:
        // the thread serving requests may be the only one serving its CPU's (FUSE over
        // io_uring), and the inner call's own file operations may come from that CPU.
        let (opener, path) = match self.runs_tool_call(caller, ino, fh, step) {
            Some(call) if !self.tool_threads.is_tool_thread(caller.pid) => call,
            Some(_) => {
                let fs = Arc::clone(self);
                let spawned = std::thread::Builder::new()
                    .name("clawfs-tool-inner".into())
                    .spawn(move || done(op(&fs)));
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start a thread for a call's own call");
                }
                return;
            }
            None => return done(op(self)),
        };
        let fs = Arc::clone(self);
        let caller = *caller;
        // A call not run is not run later either, but for a refused read, which may be
        // tried again on the same descriptor.
        let job: Job = Box::new(move |turn| match turn {
            Turn::Run => done(op(&fs)),
            Turn::Killed => {
                fs.record_unrun_call(&caller, &path, libc::EINTR, None);
                fs.forgo_call(fh);
                done(Err(errno(libc::EINTR)))
            }
            Turn::Refused => {
                let reason = format!("you have {WAITING_PER_CALLER} tool calls waiting for their turn already: wait for their answers first");
                fs.record_unrun_call(&caller, &path, libc::EAGAIN, Some(reason));
                if step == ToolStep::Flush {
                    fs.forgo_call(fh);
                }
                done(Err(errno(libc::EAGAIN)))
            }
        });
        self.tool_threads.submit(opener, caller.pid, job);
    }

    /// The uid of the opener whose call `step` on the handle `fh` of `ino` would run now
    /// (for an open, `caller`'s if it copies an index), and the call's file for the trail.
    fn runs_tool_call(
        &self,
        caller: &Caller,
        ino: u64,
        fh: u64,
        step: ToolStep,
    ) -> Option<(u32, String)> {
        if !GeneratedInodes::is_generated(ino) {
            return None;
        }
        if step == ToolStep::Open {
            let node = self.generated.node(ino).ok()?;
            return matches!(node, GeneratedNode::IndexView(_))
                .then(|| (caller.uid, node.audit_path()));
        }
        let handle = self.generated.handles.get(fh).ok()?;
        if handle.content.is_some() {
            return None;
        }
        let state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_some() {
            return None;
        }
        let runs = match (&handle.node, step) {
            (GeneratedNode::Call(_), ToolStep::Read) => !state.running,
            (GeneratedNode::Request { .. }, ToolStep::Flush) => state.written(),
            _ => false,
        };
        runs.then(|| (handle.opener.1.caller.uid, handle.node.audit_path()))
    }

    /// Marks the call of the handle `fh` as answered without running it (its reads then find
    /// an empty response).
    fn forgo_call(&self, fh: u64) {
        if let Ok(handle) = self.generated.handles.get(fh) {
            let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.response.is_none() && !state.running {
                state.response = Some(Vec::new());
            }
        }
    }

    /// Records a tool call that was not run: its caller was killed while it waited (EINTR),
    /// or it was refused a place in the queue (EAGAIN, with `refusal`'s reason, also in an
    /// agent's denials file).
    fn record_unrun_call(&self, caller: &Caller, path: &str, errno: i32, refusal: Option<String>) {
        let who = self.identify(caller);
        let ev = clawfs_audit::AuditEvent::new(
            crate::fs::audit_name(&who),
            caller.pid,
            "tool",
            path.to_string(),
        );
        let Some(reason) = refusal else {
            return self.record(
                ev.failed(errno)
                    .reason("the caller was killed while its call waited: not run"),
            );
        };
        let rule = clawfs_policy::rule::TOOL_CALLS;
        self.record(ev.denied(errno, rule, reason.clone()));
        if let clawfs_policy::Identity::Agent(agent) = &who {
            let denial = clawfs_policy::Denial {
                rule,
                reason,
                kind: clawfs_policy::DenyKind::Access,
            };
            if let Ok(path) = clawfs_policy::NsPath::parse(path) {
                self.write_denial(agent, "tool", &path, None, &denial);
            }
        }
    }
}
