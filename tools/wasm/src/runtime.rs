//! The engine, its compiled tools, and one call from start to end.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ResourceTable};
use wasmtime::{Config, Engine, Module, ResourceLimiter, Store, Trap};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::bindings::sync::Command;
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
/// Table elements a tool may grow a table to.
const TABLE_ELEMENTS: usize = 1_000_000;

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
}

/// How a preopened folder may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read files and list folders.
    Read,
    /// Also create, write, rename and remove.
    ReadWrite,
}

/// A folder the tool is given.
#[derive(Debug, Clone)]
pub struct Preopen {
    /// Where it is opened from, on the host.
    pub host: PathBuf,
    /// Its name for the tool (`/workspaces/notes`).
    pub guest: String,
    /// What the tool may do in it.
    pub access: Access,
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
        let mut components = wasmtime::component::Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut components).map_err(setup)?;
        let mut modules = wasmtime::Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut modules, |s: &mut P1State| &mut s.wasi)
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
        self.compiled.lock().unwrap_or_else(|e| e.into_inner())
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
        for p in &call.preopens {
            let perms = match p.access {
                Access::Read => FsPerms::ReadOnly,
                Access::ReadWrite => FsPerms::ReadWrite,
            };
            wasi.preopened_dir(&p.host, &p.guest, perms)
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
            wasi.allow_tcp(true)
                .allow_udp(false)
                .allow_ip_name_lookup(true)
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
            hit: Arc::default(),
        };
        let hit = Arc::clone(&limiter.hit);
        let ticks = call
            .limits
            .timeout_seconds
            .saturating_mul(1000)
            .div_ceil(TICK.as_millis() as u64)
            .max(1);
        let _ticking = self.clock.running();
        let started = Instant::now();
        let outcome = match compiled {
            Compiled::Component(component) => {
                let state = P2State {
                    wasi: wasi.build(),
                    table: ResourceTable::new(),
                    limiter,
                };
                let mut store = Store::new(&self.engine, state);
                store.limiter(|s| &mut s.limiter);
                store.set_epoch_deadline(ticks);
                store.epoch_deadline_trap();
                Command::instantiate(&mut store, &component, &self.components)
                    .and_then(|cmd| cmd.wasi_cli_run().call_run(&mut store))
                    .map(|r| i32::from(r.is_err()))
            }
            Compiled::Module(module) => {
                let state = P1State {
                    wasi: wasi.build_p1(),
                    limiter,
                };
                let mut store = Store::new(&self.engine, state);
                store.limiter(|s| &mut s.limiter);
                store.set_epoch_deadline(ticks);
                store.epoch_deadline_trap();
                self.modules
                    .instantiate(&mut store, &module)
                    .and_then(|i| i.get_typed_func::<(), ()>(&mut store, "_start"))
                    .and_then(|start| start.call(&mut store, ()))
                    .map(|()| 0)
            }
        };
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
                None if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                    return Err(WasmError::Timeout {
                        seconds: call.limits.timeout_seconds,
                    })
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
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let list = if allowed { &mut seen.0 } else { &mut seen.1 };
        if list.len() < 64 && !list.contains(&addr) {
            list.push(addr);
        }
    }

    fn taken(&self) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Refuses growth past the call's memory; remembers that it did, so the error can say so.
struct Limiter {
    memory: usize,
    hit: Arc<AtomicBool>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory {
            self.hit.store(true, Ordering::Relaxed);
            return Err(wasmtime::format_err!("memory limit reached"));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS)
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
}

/// Advances the engine's epoch every [`TICK`] while at least one call runs, and sleeps
/// otherwise: an idle daemon pays nothing for it.
struct Clock {
    running: Arc<AtomicUsize>,
    thread: std::thread::Thread,
}

impl Clock {
    fn start(engine: Engine) -> std::io::Result<Self> {
        let running = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&running);
        let handle = std::thread::Builder::new()
            .name("wasm-clock".into())
            .spawn(move || loop {
                if count.load(Ordering::Acquire) == 0 {
                    std::thread::park();
                    continue;
                }
                std::thread::sleep(TICK);
                engine.increment_epoch();
            })?;
        Ok(Self {
            running,
            thread: handle.thread().clone(),
        })
    }

    /// Ticks until the guard is dropped.
    fn running(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::AcqRel);
        self.thread.unpark();
        Running(self)
    }
}

struct Running<'a>(&'a Clock);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}
