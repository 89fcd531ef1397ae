//! Requests on generated files that run a tool call (the first read of `tools/call/<tool>`,
//! the close of `tools/requests/<id>.json`) are answered from the tool threads
//! ([`super::tool_threads`]); every other request is served where it arrived.

use std::sync::{Arc, PoisonError};

use super::tool_threads::{Job, Turn, WAITING_PER_CALLER};
use crate::creds::Caller;
use crate::error::FsResult;
use crate::fs::{errno, ClawFs};
use crate::generated_files::{GeneratedInodes, GeneratedNode};

/// The requests that may run a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStep {
    /// A read (READ).
    Read,
    /// A `close()` (FLUSH).
    Flush,
    /// The last close (RELEASE).
    Release,
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
        // queued behind it.
        if !self.runs_tool_call(ino, fh, step) || self.tool_threads.is_tool_thread(caller.pid) {
            return done(op(self));
        }
        let fs = Arc::clone(self);
        let caller = *caller;
        // A call not run is not run later either (at the release that follows) when its
        // caller was killed; a refused read or close may be tried again. A release is always
        // served: it frees the handle.
        let job: Job = Box::new(move |turn| match turn {
            Turn::Run => done(op(&fs)),
            Turn::Killed => {
                fs.record_unrun_call(&caller, libc::EINTR, None);
                fs.forgo_call(fh);
                match step {
                    ToolStep::Release => done(op(&fs)),
                    _ => done(Err(errno(libc::EINTR))),
                }
            }
            Turn::Refused => {
                let reason = format!("you have {WAITING_PER_CALLER} tool calls waiting for their turn already: wait for their answers first");
                fs.record_unrun_call(&caller, libc::EAGAIN, Some(reason));
                match step {
                    ToolStep::Release => {
                        fs.forgo_call(fh);
                        done(op(&fs))
                    }
                    _ => done(Err(errno(libc::EAGAIN))),
                }
            }
        });
        self.tool_threads.submit(caller.uid, caller.pid, job);
    }

    /// Whether `step` on the handle `fh` of `ino` would run a tool call now.
    fn runs_tool_call(&self, ino: u64, fh: u64, step: ToolStep) -> bool {
        if !GeneratedInodes::is_generated(ino) {
            return false;
        }
        let Ok(handle) = self.generated.handles.get(fh) else {
            return false;
        };
        if handle.content.is_some() {
            return false;
        }
        let state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_some() {
            return false;
        }
        match (&handle.node, step) {
            (GeneratedNode::Call(_), ToolStep::Read) => !state.running,
            (GeneratedNode::Request { .. }, ToolStep::Flush) => {
                !state.request.is_empty() || state.oversized
            }
            (GeneratedNode::Request { .. }, ToolStep::Release) => true,
            _ => false,
        }
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
    fn record_unrun_call(&self, caller: &Caller, errno: i32, refusal: Option<String>) {
        let who = self.identify(caller);
        let ev = clawfs_audit::AuditEvent::new(
            crate::fs::audit_name(&who),
            caller.pid,
            "tool",
            "/tools".to_string(),
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
            if let Ok(tools) = clawfs_policy::NsPath::parse("/tools") {
                self.write_denial(agent, "tool", &tools, None, &denial);
            }
        }
    }
}
