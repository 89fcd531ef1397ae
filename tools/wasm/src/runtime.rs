//! The engine, its compiled tools, and one call from start to end.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ResourceTable};
use wasmtime::{Config, Engine, Module, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::output::Capped;

/// How often the engine's clock ticks while calls run: the resolution of a call's time limit.
const TICK: Duration = Duration::from_millis(10);
/// Compiled tools kept at most (by binary hash); past it the cache starts again.
const CACHED: usize = 64;
/// What a tool may write on stderr (its error message), at most.
const STDERR_LIMIT: usize = 64 * 1024;
/// Instances, memories and tables a tool may make (a command component makes a few).
const INSTANCES: usize = 64;
/// Helper threads a call's executor may start for file streams at most.
const HELPERS: usize = 4;
/// Table elements a tool may grow a table to.
const TABLE_ELEMENTS: usize = 1_000_000;
/// What one table element costs, counted in the call's memory limit: a pointer.
const TABLE_ELEMENT_BYTES: usize = 8;
/// Handles a call may hold at once (open files and folders, streams, sockets, pollables):
/// each open file or socket is a descriptor of the daemon.
const HANDLES: usize = 1_000;

/// Why a tool did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The bytes are not those of the hash the registry signed.
    #[error("the binary is not the one the registry signed (SHA-256 {found}, signed {expected}): not run")]
    Tampered {
        /// The signed hash.
        expected: String,
        /// The bytes' hash.
        found: String,
    },
    /// Not a WebAssembly tool this runtime can run.
    #[error("not a WebAssembly tool: {0}")]
    Malformed(String),
    /// Asked for more memory than its limit.
    #[error("the tool asked for more memory than its limit of {limit_mb} MiB and was stopped")]
    Memory {
        /// The limit, MiB.
        limit_mb: u64,
    },
    /// Ran past its time limit.
    #[error("the tool ran longer than its limit of {seconds} s and was stopped")]
    Timeout {
        /// The limit, seconds.
        seconds: u64,
    },
    /// Wrote more than its output limit.
    #[error("the tool's output passed its limit of {limit} bytes and it was stopped")]
    Output {
        /// The limit, bytes.
        limit: usize,
    },
    /// Held more handles at once than a call may.
    #[error("the tool held more than its limit of {limit} handles (open files, folders, streams, sockets) and was stopped")]
    Handles {
        /// The limit.
        limit: usize,
    },
    /// Stopped by a trap (a bug in the tool, or a call WASI refused it fatally).
    #[error("the tool stopped: {0}")]
    Trap(String),
    /// A folder of its capabilities could not be opened for it.
    #[error("{guest} could not be opened for the tool: {reason}")]
    Preopen {
        /// The folder, as the tool sees it.
        guest: String,
        /// Why.
        reason: String,
    },
    /// The runtime itself could not be set up.
    #[error("the WebAssembly runtime could not start: {0}")]
    Setup(String),
}

/// What a call may use at most.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Linear memory, all memories together, bytes.
    pub memory_mb: u64,
    /// Wall time from instantiation to the end.
    pub timeout_seconds: u64,
    /// Bytes of output (stdout).
    pub output_bytes: usize,
    /// The share of one CPU the tool may use, percent (1–100): past it, it is paused.
    pub cpu_percent: u64,
}

/// How a preopened folder may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read files and list folders.
    Read,
    /// Also create, write, rename and remove.
    ReadWrite,
}

/// A folder the tool is given, open.
#[derive(Debug)]
pub struct Preopen {
    /// The folder, opened with [`Preopen::beneath`] (or by the caller as carefully).
    pub dir: OwnedFd,
    /// Its name for the tool (`/workspaces/notes`).
    pub guest: String,
    /// What the tool may do in it.
    pub access: Access,
}

impl Preopen {
    /// Opens `rel` beneath the folder `root` as a directory, through real directories only:
    /// no symlink, no `..` above `root`, no `/proc` magic link and no other mount on the way.
    /// (A name the caller controls must not lead the daemon, or a tool, anywhere else.)
    pub fn beneath(
        root: &Path,
        rel: &Path,
        guest: String,
        access: Access,
    ) -> std::io::Result<Preopen> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let root = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let dir = rustix::fs::openat2(
            &root,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV,
        )?;
        Ok(Preopen { dir, guest, access })
    }
}

/// A destination the tool may connect to over TCP: an address, and a port or any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outbound {
    /// The address.
    pub ip: IpAddr,
    /// The port, or `None` for any.
    pub port: Option<u16>,
}

impl Outbound {
    /// The addresses `host` (a name or an address) has now, with `port`.
    pub fn resolve(host: &str, port: Option<u16>) -> std::io::Result<Vec<Outbound>> {
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (host, port.unwrap_or(0))
                .to_socket_addrs()?
                .map(|a| a.ip())
                .collect(),
        };
        Ok(ips.into_iter().map(|ip| Outbound { ip, port }).collect())
    }

    fn allows(&self, addr: SocketAddr) -> bool {
        self.ip == addr.ip() && self.port.is_none_or(|p| p == addr.port())
    }
}

/// The longest answer a published tool may give, bytes.
pub const OUTPUT_LIMIT: usize = 16 << 20;

/// One run of a tool.
pub struct Call<'a> {
    /// The tool's id (its `argv[0]`).
    pub tool: &'a str,
    /// The binary.
    pub wasm: &'a [u8],
    /// Its SHA-256, hex, as the signed registry gives it.
    pub sha256: &'a str,
    /// The request, given on stdin.
    pub input: &'a [u8],
    /// The folders it is given.
    pub preopens: Vec<Preopen>,
    /// Where it may connect.
    pub outbound: Vec<Outbound>,
    /// Environment variables it sees.
    pub env: Vec<(String, String)>,
    /// Its limits.
    pub limits: Limits,
}

impl<'a> Call<'a> {
    /// A run of the published `package`: its id, the environment it is told
    /// (`CLAWFS_TOOL`, `CLAWFS_TOOL_VERSION`), the hash its registry entry signs (the binary
    /// `wasm` must have it) and the limits its definition declares; `None` if it has no binary.
    pub fn of_package(
        package: &'a clawfs_integrity::registry::Package,
        wasm: &'a [u8],
        input: &'a [u8],
        preopens: Vec<Preopen>,
        outbound: Vec<Outbound>,
    ) -> Option<Self> {
        let hash = package.wasm_hash.as_deref()?;
        Some(Call {
            tool: &package.tool_id,
            wasm,
            sha256: hash.strip_prefix("sha256:").unwrap_or(hash),
            input,
            preopens,
            outbound,
            env: vec![
                ("CLAWFS_TOOL".into(), package.tool_id.clone()),
                ("CLAWFS_TOOL_VERSION".into(), package.version.clone()),
            ],
            limits: Limits {
                memory_mb: package.memory_limit_mb,
                timeout_seconds: package.timeout_seconds,
                output_bytes: OUTPUT_LIMIT,
                cpu_percent: package.cpu_quota_percent,
            },
        })
    }
}

/// A run that reached its end.
#[derive(Debug)]
pub struct Finished {
    /// Its exit code (0: success).
    pub exit_code: i32,
    /// What it wrote on stdout.
    pub output: Vec<u8>,
    /// What it wrote on stderr (at most 64 KiB).
    pub stderr: Vec<u8>,
    /// Connections it was allowed.
    pub contacted: Vec<SocketAddr>,
    /// Connections it was refused.
    pub refused: Vec<SocketAddr>,
    /// How long it ran.
    pub elapsed: Duration,
}

#[derive(Clone)]
enum Compiled {
    Component(Component),
    Module(Module),
}

/// The engine and its compiled tools. One per daemon; calls may run at once.
pub struct Runtime {
    engine: Engine,
    compiled: Mutex<HashMap<String, Compiled>>,
    components: wasmtime::component::Linker<P2State>,
    modules: wasmtime::Linker<P1State>,
    clock: Clock,
}

impl Runtime {
    /// A runtime with its own engine.
    pub fn new() -> Result<Self, WasmError> {
        let setup = |e: wasmtime::Error| WasmError::Setup(format!("{e:#}"));
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).map_err(setup)?;
        // Asynchronous WASI: every wait of a tool in the host (a sleep, a poll, a socket, a
        // stream) is a future the call's deadline can end.
        let mut components = wasmtime::component::Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut components).map_err(setup)?;
        let mut modules = wasmtime::Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut modules, |s: &mut P1State| &mut s.wasi)
            .map_err(setup)?;
        // WASI's own `poll_oneoff` sleeps on this thread (not in the executor) for as long as
        // a tool asks: this one never sleeps past the call's deadline.
        modules.allow_shadowing(true);
        modules
            .func_wrap("wasi_snapshot_preview1", "poll_oneoff", poll_oneoff)
            .map_err(setup)?;
        let clock = Clock::start(engine.clone())
            .map_err(|e| WasmError::Setup(format!("the clock thread: {e}")))?;
        Ok(Self {
            engine,
            compiled: Mutex::default(),
            components,
            modules,
            clock,
        })
    }

    /// Whether the tool of `sha256` is compiled already.
    pub fn is_compiled(&self, sha256: &str) -> bool {
        self.lock().contains_key(sha256)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Compiled>> {
        lock(&self.compiled)
    }

    /// The compiled tool of `sha256`, compiled now if it is not yet. The bytes must be those
    /// of the hash: nothing else is ever compiled under it.
    fn compiled(&self, sha256: &str, wasm: &[u8]) -> Result<Compiled, WasmError> {
        if let Some(c) = self.lock().get(sha256) {
            return Ok(c.clone());
        }
        let found = hex::encode(Sha256::digest(wasm));
        if !found.eq_ignore_ascii_case(sha256) {
            return Err(WasmError::Tampered {
                expected: sha256.to_string(),
                found,
            });
        }
        let malformed = |e: wasmtime::Error| WasmError::Malformed(format!("{e:#}"));
        // The preamble: the magic, then a version word whose third byte says module (0) or
        // component (1). Only binaries: a text file is not a tool.
        let compiled = match wasm.get(..8) {
            Some([0, b'a', b's', b'm', _, _, 0, 0]) => {
                Compiled::Module(Module::from_binary(&self.engine, wasm).map_err(malformed)?)
            }
            Some([0, b'a', b's', b'm', _, _, 1, 0]) => {
                Compiled::Component(Component::from_binary(&self.engine, wasm).map_err(malformed)?)
            }
            _ => {
                return Err(WasmError::Malformed(
                    "the file does not start as a WebAssembly binary does".into(),
                ))
            }
        };
        let mut cache = self.lock();
        if cache.len() >= CACHED {
            cache.clear();
        }
        cache.insert(sha256.to_ascii_lowercase(), compiled.clone());
        Ok(compiled)
    }

    /// Runs `call` on this thread to its end, or until a limit stops it. Filesystem calls the
    /// tool makes run on this thread too, with its credentials.
    pub fn run(&self, call: Call<'_>) -> Result<Finished, WasmError> {
        let compiled = self.compiled(call.sha256, call.wasm)?;
        let stdout = Capped::new(call.limits.output_bytes);
        let stderr = Capped::new(STDERR_LIMIT);
        let mut wasi = WasiCtxBuilder::new();
        // Before the preopens, which take it: every filesystem call on this thread.
        wasi.allow_blocking_current_thread(true);
        wasi.stdin(MemoryInputPipe::new(call.input.to_vec()))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .arg(call.tool);
        for (k, v) in &call.env {
            wasi.env(k, v);
        }
        if !call.outbound.is_empty() {
            let hosts: Vec<String> = call
                .outbound
                .iter()
                .map(|o| match o.port {
                    Some(p) => SocketAddr::new(o.ip, p).to_string(),
                    None => o.ip.to_string(),
                })
                .collect();
            wasi.env("CLAWFS_HOSTS", hosts.join(" "));
        }
        for p in &call.preopens {
            let perms = match p.access {
                Access::Read => FsPerms::ReadOnly,
                Access::ReadWrite => FsPerms::ReadWrite,
            };
            // The folder as opened, reopened through its descriptor's own link: the same
            // directory, whatever its name leads to now.
            let own = format!("/proc/self/fd/{}", p.dir.as_raw_fd());
            wasi.preopened_dir(&own, &p.guest, perms)
                .map_err(|e| WasmError::Preopen {
                    guest: p.guest.clone(),
                    reason: format!("{e:#}"),
                })?;
        }
        let network = Network::default();
        if call.outbound.is_empty() {
            wasi.allow_tcp(false).allow_udp(false);
        } else {
            let (allowed, seen) = (call.outbound.clone(), network.clone());
            // No name lookups: a lookup is a message to whatever resolver answers. The tool is
            // told the addresses its hosts had when the call began (`CLAWFS_HOSTS`).
            wasi.allow_tcp(true)
                .allow_udp(false)
                .allow_ip_name_lookup(false)
                .socket_addr_check(move |addr, used| {
                    let ok = match used {
                        SocketAddrUse::TcpConnect => allowed.iter().any(|a| a.allows(addr)),
                        // The implicit bind before a connect: to the wildcard, local only.
                        SocketAddrUse::TcpBind => addr.ip().is_unspecified(),
                        _ => false,
                    };
                    if matches!(used, SocketAddrUse::TcpConnect) {
                        seen.note(addr, ok);
                    }
                    Box::pin(async move { ok })
                });
        }
        let limiter = Limiter {
            memory: usize::try_from(call.limits.memory_mb.saturating_mul(1 << 20))
                .unwrap_or(usize::MAX),
            used: 0,
            hit: Arc::default(),
        };
        let hit = Arc::clone(&limiter.hit);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(call.limits.timeout_seconds);
        let pace = Pace {
            started,
            deadline,
            cpu_percent: call.limits.cpu_percent.clamp(1, 100),
            timed_out: Arc::default(),
        };
        let timed_out = Arc::clone(&pace.timed_out);
        let _watched = self.clock.watch(deadline);
        // The call's own executor, on this thread. File streams run on its helper threads,
        // made by this one (so with the caller's credentials), watched by the clock like it.
        let executor = self
            .clock
            .executor(deadline)
            .map_err(|e| WasmError::Setup(format!("the call's executor: {e}")))?;
        let run = async {
            match compiled {
                Compiled::Component(component) => {
                    let mut table = ResourceTable::new();
                    table.set_max_capacity(HANDLES);
                    let state = P2State {
                        wasi: wasi.build(),
                        table,
                        limiter,
                    };
                    let mut store = Store::new(&self.engine, state);
                    store.limiter(|s| &mut s.limiter);
                    pace.install(&mut store);
                    let cmd = Command::instantiate_async(&mut store, &component, &self.components)
                        .await?;
                    let r = cmd.wasi_cli_run().call_run(&mut store).await?;
                    Ok(i32::from(r.is_err()))
                }
                Compiled::Module(module) => {
                    let mut p1 = wasi.build_p1();
                    p1.ctx().table.set_max_capacity(HANDLES);
                    let state = P1State {
                        wasi: p1,
                        limiter,
                        deadline,
                        timed_out: Arc::clone(&timed_out),
                    };
                    let mut store = Store::new(&self.engine, state);
                    store.limiter(|s| &mut s.limiter);
                    pace.install(&mut store);
                    let instance = self.modules.instantiate_async(&mut store, &module).await?;
                    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
                    start.call_async(&mut store, ()).await?;
                    Ok(0)
                }
            }
        };
        let outcome: wasmtime::Result<i32> = executor
            .block_on(async { tokio::time::timeout_at(deadline.into(), run).await })
            .unwrap_or_else(|_elapsed| {
                timed_out.store(true, Ordering::Relaxed);
                Err(Trap::Interrupt.into())
            });
        // Helpers still blocked in the host end on their own, interrupted by the clock.
        executor.shutdown_background();
        let elapsed = started.elapsed();
        let exit_code = match outcome {
            Ok(code) => code,
            Err(e) => match e.downcast_ref::<I32Exit>() {
                Some(exit) => exit.0,
                None if hit.load(Ordering::Relaxed) => {
                    return Err(WasmError::Memory {
                        limit_mb: call.limits.memory_mb,
                    })
                }
                None if stdout.overflowed() => {
                    return Err(WasmError::Output {
                        limit: call.limits.output_bytes,
                    })
                }
                None if timed_out.load(Ordering::Relaxed)
                    || e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) =>
                {
                    return Err(WasmError::Timeout {
                        seconds: call.limits.timeout_seconds,
                    })
                }
                None if format!("{e:#}").contains("resource table has no free keys") => {
                    return Err(WasmError::Handles { limit: HANDLES })
                }
                None => return Err(WasmError::Trap(format!("{e:#}"))),
            },
        };
        if stdout.overflowed() {
            // It went on after a refused write: its answer is cut, so it is no answer.
            return Err(WasmError::Output {
                limit: call.limits.output_bytes,
            });
        }
        let (contacted, refused) = network.taken();
        Ok(Finished {
            exit_code,
            output: stdout.contents(),
            stderr: stderr.contents(),
            contacted,
            refused,
            elapsed,
        })
    }
}

/// The connections a call asked for: allowed, and refused.
#[derive(Clone, Default)]
struct Network(Arc<Mutex<(Vec<SocketAddr>, Vec<SocketAddr>)>>);

impl Network {
    fn note(&self, addr: SocketAddr, allowed: bool) {
        let mut seen = lock(&self.0);
        let list = if allowed { &mut seen.0 } else { &mut seen.1 };
        if list.len() < 64 && !list.contains(&addr) {
            list.push(addr);
        }
    }

    fn taken(&self) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        std::mem::take(&mut *lock(&self.0))
    }
}

/// Refuses growth past the call's memory: all its memories and tables together (a table
/// element counted as [`TABLE_ELEMENT_BYTES`]); remembers that it did, so the error can say so.
struct Limiter {
    memory: usize,
    used: usize,
    hit: Arc<AtomicBool>,
}

impl Limiter {
    /// Takes `more` bytes of the budget, or refuses.
    fn take(&mut self, more: usize) -> wasmtime::Result<bool> {
        match self
            .used
            .checked_add(more)
            .filter(|total| *total <= self.memory)
        {
            Some(total) => {
                self.used = total;
                Ok(true)
            }
            None => {
                self.hit.store(true, Ordering::Relaxed);
                Err(wasmtime::format_err!("memory limit reached"))
            }
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.take(desired.saturating_sub(current))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > TABLE_ELEMENTS {
            return Ok(false);
        }
        self.take(
            desired
                .saturating_sub(current)
                .saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn instances(&self) -> usize {
        INSTANCES
    }

    fn tables(&self) -> usize {
        INSTANCES
    }

    fn memories(&self) -> usize {
        INSTANCES
    }
}

struct P2State {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
}

impl WasiView for P2State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

struct P1State {
    wasi: WasiP1Ctx,
    limiter: Limiter,
    deadline: Instant,
    timed_out: Arc<AtomicBool>,
}

/// WASI preview 1 `poll_oneoff`, with a sleep bounded by the call's deadline. Descriptors a tool
/// can poll (its stdio pipes, files and folders) are always ready, so a poll with any of them
/// answers at once with those; a poll of clocks alone sleeps until the earliest, or until the
/// deadline, which stops the tool.
fn poll_oneoff(
    mut caller: wasmtime::Caller<'_, P1State>,
    subscriptions: i32,
    events: i32,
    count: i32,
    nevents: i32,
) -> wasmtime::Result<i32> {
    // WASI errno values.
    const FAULT: i32 = 21;
    const INVAL: i32 = 28;
    const SUBSCRIPTION: usize = 48;
    const EVENT: usize = 32;
    let Some(wasmtime::Extern::Memory(memory)) = caller.get_export("memory") else {
        return Ok(FAULT);
    };
    let (subs, out, n, counted) = (
        subscriptions as u32 as usize,
        events as u32 as usize,
        count as u32 as usize,
        nevents as u32 as usize,
    );
    if n == 0 {
        return Ok(INVAL);
    }
    let Some(bytes) = subs
        .checked_add(n.saturating_mul(SUBSCRIPTION))
        .and_then(|end| memory.data(&caller).get(subs..end))
        .map(<[u8]>::to_vec)
    else {
        return Ok(FAULT);
    };
    let u64_at =
        |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    // (userdata, kind, nanoseconds to wait for a clock)
    let mut subs_read = Vec::with_capacity(n);
    for sub in bytes.chunks_exact(SUBSCRIPTION) {
        let userdata = u64_at(sub, 0);
        match sub[8] {
            0 => {
                let clock = u32::from_le_bytes(sub[16..20].try_into().expect("4 bytes"));
                let timeout = u64_at(sub, 24);
                let absolute =
                    u16::from_le_bytes(sub[40..42].try_into().expect("2 bytes")) & 1 == 1;
                let now = match clock {
                    0 => std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64),
                    1..=3 => {
                        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
                        (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
                    }
                    _ => return Ok(INVAL),
                };
                let wait = if absolute {
                    timeout.saturating_sub(now)
                } else {
                    timeout
                };
                subs_read.push((userdata, 0u8, wait));
            }
            kind @ (1 | 2) => subs_read.push((userdata, kind, 0)),
            _ => return Ok(INVAL),
        }
    }
    let ready: Vec<(u64, u8)> = if subs_read.iter().any(|s| s.1 != 0) {
        subs_read
            .iter()
            .filter(|s| s.1 != 0)
            .map(|s| (s.0, s.1))
            .collect()
    } else {
        let wait = subs_read.iter().map(|s| s.2).min().unwrap_or(0);
        let left = caller
            .data()
            .deadline
            .saturating_duration_since(Instant::now());
        if Duration::from_nanos(wait) >= left {
            std::thread::sleep(left);
            caller.data().timed_out.store(true, Ordering::Relaxed);
            return Err(Trap::Interrupt.into());
        }
        std::thread::sleep(Duration::from_nanos(wait));
        subs_read
            .iter()
            .filter(|s| s.2 <= wait)
            .map(|s| (s.0, 0))
            .collect()
    };
    let mut written = Vec::with_capacity(ready.len() * EVENT);
    for (userdata, kind) in &ready {
        let mut event = [0u8; EVENT];
        event[..8].copy_from_slice(&userdata.to_le_bytes());
        event[10] = *kind;
        written.extend_from_slice(&event);
    }
    let data = memory.data_mut(&mut caller);
    let (Some(events_room), true) = (
        out.checked_add(written.len())
            .filter(|end| *end <= data.len()),
        counted.checked_add(4).is_some_and(|end| end <= data.len()),
    ) else {
        return Ok(FAULT);
    };
    data[out..events_room].copy_from_slice(&written);
    data[counted..counted + 4].copy_from_slice(&(ready.len() as u32).to_le_bytes());
    Ok(0)
}

/// Keeps a call to its time and its share of the CPU, each time the engine's clock ticks in it
/// (every [`TICK`]): stops it at its deadline, and pauses it while it has used more CPU time
/// than its share of the time it has run.
struct Pace {
    started: Instant,
    deadline: Instant,
    cpu_percent: u64,
    timed_out: Arc<AtomicBool>,
}

impl Pace {
    fn install<T>(&self, store: &mut Store<T>) {
        let (started, deadline, percent) = (self.started, self.deadline, self.cpu_percent);
        let timed_out = Arc::clone(&self.timed_out);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            let now = Instant::now();
            if now >= deadline {
                timed_out.store(true, Ordering::Relaxed);
                return Ok(UpdateDeadline::Interrupt);
            }
            if percent < 100 {
                let used = thread_cpu_time();
                let allowed = now.duration_since(started) * percent as u32 / 100;
                if used > allowed {
                    // Paused until its share catches up with what it used, at most to its end.
                    let wait = (used - allowed) * 100 / percent as u32;
                    std::thread::sleep(wait.min(deadline.saturating_duration_since(now)));
                }
            }
            Ok(UpdateDeadline::Continue(1))
        });
    }
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Advances the engine's epoch every [`TICK`] while at least one call runs, and sleeps
/// otherwise: an idle daemon pays nothing for it. A call still running past its deadline is
/// also sent [`WAKE`] every tick: a tool blocked in the host (opening a FIFO, a slow read)
/// never reaches the epoch check until its system call returns, and the signal ends the wait
/// (`EINTR`, which the tool sees as an error, and the next check stops it).
struct Clock {
    calls: Arc<Mutex<Vec<Watched>>>,
    thread: std::thread::Thread,
}

/// The signal that interrupts a call blocked in a system call past its deadline. Nothing else
/// in the process uses it; its handler does nothing, without `SA_RESTART`.
const WAKE: libc::c_int = libc::SIGURG;

struct Watched {
    id: u64,
    thread: libc::pthread_t,
    deadline: Instant,
}

impl Clock {
    fn start(engine: Engine) -> std::io::Result<Self> {
        install_wake_handler()?;
        let calls: Arc<Mutex<Vec<Watched>>> = Arc::default();
        let watched = Arc::clone(&calls);
        let handle = std::thread::Builder::new()
            .name("wasm-clock".into())
            .spawn(move || loop {
                if lock(&watched).is_empty() {
                    std::thread::park();
                    continue;
                }
                std::thread::sleep(TICK);
                engine.increment_epoch();
                let now = Instant::now();
                // Under the lock: a call leaves the list (and its thread goes on) only after
                // this has signalled it, so a signal never reaches a thread that has ended.
                for w in lock(&watched).iter().filter(|w| now >= w.deadline) {
                    // SAFETY: the thread is alive: it is in the list, which it leaves (under
                    // this lock) before its call returns.
                    unsafe { libc::pthread_kill(w.thread, WAKE) };
                }
            })?;
        Ok(Self {
            calls,
            thread: handle.thread().clone(),
        })
    }

    /// Ticks, and watches this thread's call for `deadline`, until the guard is dropped.
    fn watch(&self, deadline: Instant) -> Running<'_> {
        let id = watch_this_thread(&self.calls, &self.thread, deadline);
        Running { clock: self, id }
    }

    /// An executor for a call on this thread, whose helper threads (file streams) the clock
    /// watches for `deadline` from their start to their end, as it watches the call's own.
    fn executor(&self, deadline: Instant) -> std::io::Result<tokio::runtime::Runtime> {
        thread_local! {
            static HELPER: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
        }
        let (calls, clock) = (Arc::clone(&self.calls), self.thread.clone());
        let ended = Arc::clone(&self.calls);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(HELPERS)
            .on_thread_start(move || {
                HELPER.set(Some(watch_this_thread(&calls, &clock, deadline)));
            })
            .on_thread_stop(move || {
                if let Some(id) = HELPER.take() {
                    lock(&ended).retain(|w| w.id != id);
                }
            })
            .build()
    }
}

/// Puts this thread on the clock's list until `deadline` (and after it, until it leaves the
/// list: the clock signals it each tick past it); wakes the clock. The thread's entry id.
fn watch_this_thread(
    calls: &Mutex<Vec<Watched>>,
    clock: &std::thread::Thread,
    deadline: Instant,
) -> u64 {
    static IDS: AtomicUsize = AtomicUsize::new(0);
    let id = IDS.fetch_add(1, Ordering::Relaxed) as u64;
    lock(calls).push(Watched {
        id,
        // SAFETY: pthread_self has no preconditions.
        thread: unsafe { libc::pthread_self() },
        deadline,
    });
    clock.unpark();
    id
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs a handler for [`WAKE`] that does nothing, so that the signal interrupts a
/// blocking system call (no `SA_RESTART`) without ending the process.
fn install_wake_handler() -> std::io::Result<()> {
    extern "C" fn wake(_: libc::c_int) {}
    static DONE: std::sync::OnceLock<std::io::Result<()>> = std::sync::OnceLock::new();
    let done = DONE.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler is an async-signal-safe no-op.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = wake as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            if libc::sigaction(WAKE, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    });
    match done {
        Ok(()) => Ok(()),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
    }
}

struct Running<'a> {
    clock: &'a Clock,
    id: u64,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.clock.calls).retain(|w| w.id != self.id);
    }
}
