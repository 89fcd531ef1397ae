//! Runs the WebAssembly tools of the ClawFS registry (`tools/binaries/<id>-vX.Y.Z.wasm`).
//!
//! A tool is a WASI command: a component of the `wasi:cli/command` world (WASI preview 2), or a
//! core module exporting `_start` (WASI preview 1). It reads its request (JSON) on stdin and
//! writes its answer (JSON) on stdout; exit code 0 is success. What it may reach is exactly what
//! its call is given ([`Call`]): the folders preopened for it, read-only or read-write, and the
//! hosts it may connect to. It has no other files, no environment but what it is given, and no
//! way to start a process. Memory, time and output are bounded per call ([`Limits`]); a tool that
//! passes a limit is stopped and the error names the limit.
//!
//! Compiled code is kept per SHA-256 of the binary, so a call does not compile again. The
//! caller checks the binary against the signed registry before it asks for a run; this crate
//! checks that the bytes it compiles are the bytes of that hash.

mod capabilities;
mod output;
mod runtime;

pub use capabilities::{Capabilities, Folder, WORKSPACES};
pub use runtime::{
    Access, Call, Finished, Limits, Outbound, Preopen, Runtime, WasmError, OUTPUT_LIMIT,
};
