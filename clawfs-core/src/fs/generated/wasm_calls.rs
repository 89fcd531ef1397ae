//! Published WebAssembly tools called through `tools/call/<tool_id>`: the daemon runs the
//! newest signed version of the tool as its caller.
//!
//! - **Integrity.** The registry entry's signature must hold; the binary is read by descriptor
//!   beneath the store and compiled only if its SHA-256 is the one signed.
//! - **Reach.** The folders its capabilities name are opened through the mount, on this thread,
//!   with the caller's filesystem credentials, and every request the tool's file operations make
//!   there is taken as the caller's own ([`ClawFs::identify`] knows the thread as the caller
//!   while the call runs): the policy (protected names and the git guard included), quotas and
//!   the audit trail apply to the tool exactly as to the caller. A folder the caller's policy
//!   does not give it is refused before the tool runs. Hosts: those its capabilities name,
//!   and for an agent only those its own sandbox's network setting allows too.
//! - **Limits.** Memory and time from the definition, output [`clawfs_wasm::OUTPUT_LIMIT`]; at most
//!   the mount's FUSE threads but one calls at once, so a FUSE thread is always left to serve the tools' own file
//!   operations.
//! - **Audit.** One record per call: `tool:<id>`, the binary's path, what it was given, how
//!   long it ran, and its outcome.

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use clawfs_agent_tools::{ToolError, ToolResult};
use clawfs_integrity::registry::{self, Package};
use clawfs_policy::{Identity, NsPath};
use clawfs_wasm::{Access, Call, Capabilities, Outbound, Preopen, Runtime, WasmError};
use serde_json::Value;

use super::super::ClawFs;
use crate::creds::{AsCaller, Credentials};

/// The largest binary the daemon reads for a call.
const MAX_BINARY: u64 = 256 << 20;

/// The runtime (made at the first call) and how many calls may run at once.
pub(crate) struct WasmTools {
    runtime: OnceLock<Result<Runtime, String>>,
    running: AtomicUsize,
    /// Calls at once (see [`crate::fs::ClawFsBuilder::tool_slots`]).
    slots: usize,
    /// The uids with a call running: one each, so that no one caller holds every slot.
    callers: std::sync::Mutex<std::collections::HashSet<u32>>,
    /// The registry's packages with their signatures checked, as of the registry and signers
    /// files' status (read again when either changes).
    registry: std::sync::Mutex<Option<(RegistryStamp, Arc<registry::Audited>)>>,
}

/// What says the registry or its signers changed: each file's inode, size and times.
type RegistryStamp = [(u64, i64, i64, i64, i64, i64); 2];

/// A caller's running call, ended when dropped.
struct OwnCall<'a> {
    tools: &'a WasmTools,
    uid: u32,
}

impl Drop for OwnCall<'_> {
    fn drop(&mut self) {
        self.tools
            .callers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.uid);
    }
}

impl WasmTools {
    /// At most `slots` calls at once.
    pub(crate) fn with_slots(slots: usize) -> Self {
        Self {
            runtime: OnceLock::new(),
            running: AtomicUsize::new(0),
            slots,
            callers: Default::default(),
            registry: Default::default(),
        }
    }

    /// `uid`'s one running call, unless it has one already.
    fn own_call(&self, uid: u32) -> Option<OwnCall<'_>> {
        let fresh = self
            .callers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid);
        // Made only when this call holds the uid: a guard's drop gives it back.
        fresh.then(|| OwnCall { tools: self, uid })
    }

    fn runtime(&self) -> Result<&Runtime, String> {
        self.runtime
            .get_or_init(|| Runtime::new().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// The caller's umask on this thread (and the helper threads it starts) while a tool runs:
/// the daemon serves with none (the kernel masks what callers create before asking it), so
/// without it what a tool creates would be 0666 and 0777. The thread's filesystem attributes
/// are its own from the first call on (`unshare(CLONE_FS)`); the umask goes back to the
/// daemon's when dropped.
struct CallerUmask(rustix::fs::Mode);

impl CallerUmask {
    fn enter(umask: u32) -> std::io::Result<CallerUmask> {
        // SAFETY: only the filesystem attributes (root, working folder, umask) are unshared;
        // the descriptor table stays the process's.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS)? };
        let mask = rustix::fs::Mode::from_raw_mode(umask & 0o777);
        Ok(CallerUmask(rustix::process::umask(mask)))
    }
}

impl Drop for CallerUmask {
    fn drop(&mut self) {
        rustix::process::umask(self.0);
    }
}

/// One running call's slot, given back when dropped.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ClawFs {
    /// The registry's packages, each with whether its signature holds, and what breaks the
    /// registry's rules if anything: read and checked again only when `tools/registry.json` or
    /// `system/signers.json` changed.
    fn signed_registry(&self) -> ToolResult<Arc<registry::Audited>> {
        let root = self.store.root_fd();
        let stamp_of = |rel: &str| {
            rustix::fs::statat(root, rel, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).map_or(
                (0, -1, 0, 0, 0, 0),
                |st| {
                    (
                        st.st_ino,
                        st.st_size,
                        st.st_mtime,
                        st.st_mtime_nsec as i64,
                        st.st_ctime,
                        st.st_ctime_nsec as i64,
                    )
                },
            )
        };
        let stamp = [
            stamp_of("tools/registry.json"),
            stamp_of(clawfs_integrity::signers::SIGNERS_FILE),
        ];
        let mut cached = self.wasm.registry.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, audited)) = cached.as_ref() {
            if *at == stamp {
                return Ok(Arc::clone(audited));
            }
        }
        let audited = Arc::new(
            registry::audited_packages(root)
                .map_err(|e| ToolError::io("reading the registry", std::io::Error::other(e)))?,
        );
        *cached = Some((stamp, Arc::clone(&audited)));
        Ok(audited)
    }

    /// The published tools that have a binary, by id.
    pub(in crate::fs) fn published_tools(&self) -> Vec<String> {
        let Ok(audited) = self.signed_registry() else {
            return Vec::new();
        };
        let mut ids: Vec<String> = audited
            .0
            .iter()
            .filter(|(p, _)| p.wasm_path.is_some())
            .map(|(p, _)| p.tool_id.clone())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Whether `name` is a published tool with a binary (and not a built-in one).
    pub(in crate::fs) fn is_published_tool(&self, name: &str) -> bool {
        !clawfs_agent_tools::TOOL_NAMES.contains(&name)
            && self.published_tools().iter().any(|t| t == name)
    }

    /// Runs the published tool `tool` for its caller on `request` and records the call.
    pub(super) fn call_wasm(
        &self,
        (who, creds): (&Identity, &Credentials),
        tool: &str,
        request: &[u8],
    ) -> ToolResult<Value> {
        let started = std::time::Instant::now();
        let mut used = String::new();
        let mut binary = format!("/tools/binaries/{tool}");
        let result = self.run_wasm((who, creds), tool, request, &mut used, &mut binary);
        let mut ev = clawfs_audit::AuditEvent::new(
            super::super::audit_name(who),
            creds.caller.pid,
            format!("tool:{tool}"),
            binary,
        )
        .target(format!("{used}; {} ms", started.elapsed().as_millis()));
        match &result {
            Ok(_) => {}
            Err(e @ ToolError::Denied(_)) => {
                ev = ev.denied(
                    libc::EACCES,
                    clawfs_policy::rule::TOOL_DENIED,
                    e.to_string(),
                );
            }
            Err(e) => {
                ev = ev
                    .failed(clawfs_store::ToErrno::errno(e))
                    .reason(format!("{}: {e}", e.code()));
            }
        }
        self.record(ev);
        result
    }

    fn run_wasm(
        &self,
        (who, creds): (&Identity, &Credentials),
        tool: &str,
        request: &[u8],
        used: &mut String,
        binary: &mut String,
    ) -> ToolResult<Value> {
        let failed = |why: String| ToolError::Io {
            context: tool.to_string(),
            source: std::io::Error::other(why),
        };
        let mount = self
            .mountpoint
            .clone()
            .ok_or_else(|| failed("the store is served without a mount point".into()))?;
        let package = self.signed_package(tool)?;
        let (Some(wasm_path), Some(_)) = (&package.wasm_path, &package.wasm_hash) else {
            return Err(ToolError::NotFound(format!(
                "{tool} {} has no WebAssembly binary",
                package.version
            )));
        };
        *binary = format!("/tools/{wasm_path}");
        *used = format!("version {}", package.version);
        let wasm = clawfs_store::beneath::read(
            self.store.root_fd(),
            Path::new(&format!("tools/{wasm_path}")),
            MAX_BINARY,
        )
        .map_err(|e| ToolError::io(format!("reading {binary}"), e))?
        .ok_or_else(|| ToolError::NotFound(format!("{binary} is missing from the store")))?;
        let caps = Capabilities::parse(&package.capabilities)
            .map_err(|e| failed(format!("{} {}: {e}: not run", tool, package.version)))?;
        // A slot, and the caller's one call, before anything reaches the mount: the folders
        // are opened through it, and the tool's own file operations go through it, each a
        // request only another FUSE thread can answer. With at most threads − 1 calls at
        // that point, one thread is always free to answer them.
        let slots = &self.wasm.running;
        let max = self.wasm.slots;
        if max == 0 {
            return Err(failed(
                "this mount serves with one FUSE thread, and a tool's own file operations need another: mount with --threads 2 or more".into(),
            ));
        }
        if slots.fetch_add(1, Ordering::AcqRel) >= max {
            slots.fetch_sub(1, Ordering::AcqRel);
            return Err(failed(format!(
                "{max} WebAssembly tool calls are running already; try again when one ends"
            )));
        }
        let _slot = Slot(slots);
        let _own = self.wasm.own_call(creds.caller.uid).ok_or_else(|| {
            failed("you have a WebAssembly tool call running already; one at a time".into())
        })?;

        let policy = self.policy();
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let mut preopens = Vec::new();
        for f in &caps.folders {
            let guest = f.guest();
            let path = NsPath::parse(&guest)
                .map_err(|e| ToolError::InvalidArgs(format!("{guest}: {e}")))?;
            let access = match f.access {
                Access::Read => clawfs_policy::Access::Read,
                Access::ReadWrite => clawfs_policy::Access::Write,
            };
            policy.check(who, access, &path).map_err(|d| {
                ToolError::Denied(format!(
                    "{tool} {} needs to {} {guest}, which you may not: {} (not run)",
                    package.version,
                    if f.access == Access::Read {
                        "read"
                    } else {
                        "write"
                    },
                    d.reason
                ))
            })?;
            // Through the mount, by real folders only: a symlink on the way could lead the
            // daemon's thread anywhere it can reach (its own descriptors included).
            let rel = Path::new("workspaces").join(&f.rel);
            let dir = {
                let _as = AsCaller::enter_with(creds)
                    .map_err(|e| ToolError::io("starting the call", e))?;
                let _delegated = self.delegate(tid, creds, who);
                Preopen::beneath(&mount, &rel, guest.clone(), f.access)
            };
            preopens.push(dir.map_err(|e| {
                ToolError::Denied(format!(
                    "{guest} could not be opened for {tool} as you ({e}; it must be a folder, reached through folders only): not run"
                ))
            })?);
        }
        let outbound = self.tool_hosts(who, &caps)?;
        *used = describe(&package, &preopens, &outbound);
        let runtime = self.wasm.runtime().map_err(failed)?;
        let _delegated = self.delegate(tid, creds, who);
        let _as = AsCaller::enter_with(creds).map_err(|e| ToolError::io("starting the call", e))?;
        let _umask =
            CallerUmask::enter(creds.umask).map_err(|e| ToolError::io("starting the call", e))?;
        let call = Call::of_package(&package, &wasm, request, preopens, outbound)
            .ok_or_else(|| failed("it has no WebAssembly binary".into()))?;
        let done = runtime.run(call);
        let done = done.map_err(|e| match e {
            WasmError::Preopen { .. } => ToolError::Denied(format!("{e} (not run)")),
            WasmError::Output { .. } => ToolError::TooLarge(e.to_string()),
            e => failed(e.to_string()),
        })?;
        if !done.contacted.is_empty() || !done.refused.is_empty() {
            let list = |a: &[std::net::SocketAddr]| {
                a.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            used.push_str(&format!(
                "; connected {}; refused {}",
                list(&done.contacted),
                list(&done.refused)
            ));
        }
        if done.exit_code != 0 {
            let said = String::from_utf8_lossy(&done.stderr);
            return Err(failed(format!(
                "{tool} {} exited with status {}: {}",
                package.version,
                done.exit_code,
                said.trim()
            )));
        }
        match serde_json::from_slice::<Value>(&done.output) {
            Ok(v) => Ok(v),
            Err(e) => Err(failed(format!(
                "{tool} {} answered something that is not JSON ({e})",
                package.version
            ))),
        }
    }

    /// The newest version of `tool` whose signature holds; a newest one whose signature does
    /// not is refused, never passed over for an older one.
    fn signed_package(&self, tool: &str) -> ToolResult<Package> {
        let audited = self.signed_registry()?;
        let (packages, problem) = (&audited.0, &audited.1);
        if let Some(problem) = problem {
            return Err(ToolError::Denied(format!(
                "the tool registry does not hold ({problem}): no published tool runs"
            )));
        }
        let (package, verified) = packages
            .iter()
            .filter(|(p, _)| p.tool_id == tool && p.wasm_path.is_some())
            .reduce(|a, b| {
                if registry::newer(&b.0.version, &a.0.version) {
                    b
                } else {
                    a
                }
            })
            .cloned()
            .ok_or_else(|| ToolError::NotFound(format!("no published tool {tool}")))?;
        verified.map_err(|why| {
            ToolError::Denied(format!(
                "{tool} {}: its signature does not hold ({why}): not run",
                package.version
            ))
        })?;
        Ok(package)
    }

    /// The addresses a call may connect to: the capabilities' hosts, resolved now, and for an
    /// agent only those its sandbox's network setting allows as well.
    fn tool_hosts(&self, who: &Identity, caps: &Capabilities) -> ToolResult<Vec<Outbound>> {
        let sandbox = match who {
            Identity::Agent(a) => self
                .policy()
                .agent(a)
                .map(|s| s.sandbox.network.clone())
                .unwrap_or(clawfs_policy::Network::None),
            _ => clawfs_policy::Network::All,
        };
        let mut out = Vec::new();
        for (host, port) in &caps.outbound {
            let found = Outbound::resolve(host, *port)
                .map_err(|e| ToolError::io(format!("resolving {host}"), e))?;
            out.extend(
                found
                    .into_iter()
                    .filter_map(|o| narrowed(&sandbox, host, o)),
            );
        }
        Ok(out)
    }
}

/// `o` as the agent's own network setting lets it through (with the port it names, if the
/// capability named none), or `None`.
fn narrowed(sandbox: &clawfs_policy::Network, host: &str, o: Outbound) -> Option<Outbound> {
    match sandbox {
        clawfs_policy::Network::All => Some(o),
        clawfs_policy::Network::None => None,
        clawfs_policy::Network::Allow(list) => list.iter().find_map(|e| {
            let port_ok = o.port.is_none_or(|p| p == e.port);
            let host_ok = match (&e.host, e.prefix) {
                (None, _) => true,
                (Some(h), None) => h == host || h.parse::<IpAddr>().ok() == Some(o.ip),
                (Some(h), Some(len)) => h
                    .parse::<IpAddr>()
                    .is_ok_and(|net| same_prefix(net, o.ip, len)),
            };
            (port_ok && host_ok).then_some(Outbound {
                ip: o.ip,
                port: Some(e.port),
            })
        }),
    }
}

fn same_prefix(net: IpAddr, ip: IpAddr, len: u8) -> bool {
    let bits = |a: IpAddr| match a {
        IpAddr::V4(v) => (u128::from(u32::from(v)) << 96, 32u32),
        IpAddr::V6(v) => (u128::from(v), 128u32),
    };
    let ((n, nw), (i, iw)) = (bits(net), bits(ip));
    if nw != iw {
        return false;
    }
    let len = u32::from(len).min(nw);
    len == 0 || (n ^ i) >> (128 - len) == 0
}

/// What a call is given, for its audit record.
fn describe(package: &Package, preopens: &[Preopen], outbound: &[Outbound]) -> String {
    let mut parts = vec![format!("version {}", package.version)];
    for p in preopens {
        let how = match p.access {
            Access::Read => "reads",
            Access::ReadWrite => "writes",
        };
        parts.push(format!("{how} {}", p.guest));
    }
    if !outbound.is_empty() {
        let hosts: Vec<String> = outbound
            .iter()
            .map(|o| match o.port {
                Some(p) => format!("{}:{p}", o.ip),
                None => o.ip.to_string(),
            })
            .collect();
        parts.push(format!("may connect {}", hosts.join(" ")));
    }
    parts.join("; ")
}
