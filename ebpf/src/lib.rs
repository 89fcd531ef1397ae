//! eBPF monitoring and egress filter for ClawFS agents.
//!
//! The programs are C (`src/bpf/*.bpf.c`), compiled by `build.rs` with clang and loaded with aya:
//! - [`Monitor`]: raw tracepoints on exec and, with [`Coverage::Syscalls`], on every system
//!   call's entry and exit (opens, connects, the calls the kernel refused, and those seccomp
//!   refused), reporting [`Event`]s of the processes whose cgroup v2 (or an ancestor) is watched;
//! - [`EgressFilter`]: `cgroup/connect4`, `connect6`, `sendmsg4` and `sendmsg6` on an agent's
//!   cgroup, refusing connections and UDP datagrams to destinations not allowed with EPERM;
//! - [`FileOpenGuard`]: a BPF LSM `file_open` program denying opens of listed inodes, where the
//!   kernel allows BPF LSM (refused at load on many kernels; [`availability`] says so).

use std::collections::HashMap as StdHashMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, MapData, RingBuf};
use aya::programs::raw_trace_point::RawTracePointLinkId;
use aya::programs::{
    CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, CgroupSock, CgroupSockAddr, Lsm,
    RawTracePoint,
};
use aya::{Btf, Ebpf};

static MONITOR_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor.bpf.o"));
static EGRESS_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/egress.bpf.o"));
static FILE_OPEN_LSM_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/file_open_lsm.bpf.o"));
const BUILD_ERROR: &str = env!("CLAWFS_EBPF_BUILD_ERROR");

/// Errors of this crate. Kernel refusals keep the syscall error and the verifier log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The eBPF objects could not be compiled when this crate was built.
    #[error("eBPF programs not built: {0}")]
    NotBuilt(String),
    /// The kernel (or aya) refused a step: loading the object, a program, attaching it.
    #[error("{step}: {detail}")]
    Bpf {
        /// What was being done.
        step: String,
        /// The error and its causes.
        detail: String,
    },
    /// A file system operation failed (tracefs, cgroup directory).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    fn bpf(step: impl Into<String>, e: &dyn std::error::Error) -> Self {
        Error::Bpf {
            step: step.into(),
            detail: chain(e),
        }
    }

    fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// The OS error code at the root of this error, if any (e.g. `EPERM` for a refused LSM load).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Bpf { detail, .. } => {
                // The chain is formatted; recover the errno from "(os error N)".
                let start = detail.rfind("(os error ")? + "(os error ".len();
                let end = detail[start..].find(')')? + start;
                detail[start..end].parse().ok()
            }
            Error::NotBuilt(_) => None,
        }
    }
}

/// Formats an error with its sources, aya errors being terse at the top ("`bpf_prog_load` failed").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

fn load_object(name: &str, bytes: &[u8]) -> Result<Ebpf, Error> {
    if !BUILD_ERROR.is_empty() || bytes.is_empty() {
        return Err(Error::NotBuilt(BUILD_ERROR.to_string()));
    }
    Ebpf::load(bytes).map_err(|e| Error::bpf(format!("loading {name}.bpf.o"), &e))
}

/// The cgroup id of a cgroup v2 directory, as returned by `bpf_get_current_cgroup_id`: the
/// directory's inode number.
pub fn cgroup_id(cgroup_dir: &Path) -> io::Result<u64> {
    Ok(std::fs::metadata(cgroup_dir)?.ino())
}

/// The mount point of the cgroup v2 hierarchy, from `/proc/self/mountinfo`.
pub fn cgroup2_mount() -> Option<PathBuf> {
    clawfs_store::mountinfo::read()
        .ok()?
        .into_iter()
        .find(|m| m.fstype == "cgroup2")
        .map(|m| m.mount_point)
}

/// What an agent process did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A successful execve (sched_process_exec): the file executed.
    Exec {
        /// Path given to execve.
        filename: String,
    },
    /// An open(2), openat(2), openat2(2) or creat(2) that returned, unless the kernel refused it
    /// with EACCES or EPERM (that is a [`EventKind::Refused`]).
    Open {
        /// Path as passed (relative paths are relative to the dirfd); empty if unreadable.
        path: String,
        /// 0 if it succeeded, else the errno it failed with.
        errno: i32,
    },
    /// A connect(2) attempt to an IPv4 or IPv6 address.
    Connect {
        /// Destination address.
        addr: IpAddr,
        /// Destination port.
        port: u16,
    },
    /// A connect(2) attempt to a Unix socket (abstract sockets show an empty path).
    ConnectUnix {
        /// sun_path.
        path: String,
    },
    /// A path system call or a connect that the kernel refused with EACCES or EPERM (file mode
    /// bits, Landlock, a cgroup network program…), seen when it returned.
    Refused(Refusal),
    /// A system call refused by seccomp: it returned an error without having entered.
    Seccomp {
        /// The system call number (of the native architecture).
        nr: i32,
        /// The errno it returned.
        errno: i32,
    },
}

/// A system call the kernel refused ([`EventKind::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The system call number (of the native architecture).
    pub nr: i32,
    /// EACCES or EPERM.
    pub errno: i32,
    /// What it was refused on.
    pub object: RefusedObject,
    /// `CLOCK_MONOTONIC` nanoseconds when the call entered and when it returned.
    pub span_ns: (u64, u64),
}

/// What a refused system call was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusedObject {
    /// A path, as passed.
    Path {
        /// The path argument (possibly relative).
        path: String,
        /// The directory descriptor it is relative to (`AT_FDCWD`, -100: the working directory).
        dirfd: i32,
        /// For a relative path, the directory it is relative to (the working directory or the
        /// `dirfd`): its device (kernel encoding, `major << 20 | minor`) and inode number.
        base: Option<(u32, u64)>,
    },
    /// A connect to an IPv4 or IPv6 destination.
    Inet {
        /// Destination address.
        addr: IpAddr,
        /// Destination port.
        port: u16,
    },
    /// A connect to a Unix socket.
    Unix {
        /// sun_path.
        path: String,
    },
}

/// An event of a watched agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Name given to [`Monitor::watch`].
    pub agent: String,
    /// The watched cgroup id the process is in (directly or below).
    pub cgroup_id: u64,
    /// Process id (thread group id).
    pub pid: u32,
    /// The calling thread.
    pub tid: u32,
    /// What happened.
    pub kind: EventKind,
}

const EV_EXEC: u32 = 1;
const EV_OPEN: u32 = 2;
const EV_CONNECT: u32 = 3;
const EV_REFUSED: u32 = 4;
const EV_SECCOMP: u32 = 5;
const PATH_LEN: usize = 256;

/// Mirror of `struct clawfs_event` (src/bpf/common.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct RawEvent {
    cgroup_id: u64,
    pid: u32,
    kind: u32,
    agent: u32,
    family: u16,
    port: u16,
    addr: [u8; 16],
    path: [u8; PATH_LEN],
    tid: u32,
    nr: i32,
    err: i32,
    base_dev: u32,
    base_ino: u64,
    start_ns: u64,
    end_ns: u64,
    dirfd: i32,
    _pad: u32,
}

fn c_str(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl RawEvent {
    fn parse(bytes: &[u8]) -> Option<RawEvent> {
        if bytes.len() < std::mem::size_of::<RawEvent>() {
            return None;
        }
        // SAFETY: the length was checked, RawEvent is plain old data valid for any bit pattern,
        // and read_unaligned has no alignment requirement.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<RawEvent>()) })
    }

    fn destination(&self) -> Option<(IpAddr, u16)> {
        match i32::from(self.family) {
            libc::AF_INET => {
                let a = [self.addr[0], self.addr[1], self.addr[2], self.addr[3]];
                Some((IpAddr::V4(Ipv4Addr::from(a)), self.port))
            }
            libc::AF_INET6 => Some((IpAddr::V6(Ipv6Addr::from(self.addr)), self.port)),
            _ => None,
        }
    }

    fn kind(&self) -> Option<EventKind> {
        Some(match self.kind {
            EV_EXEC => EventKind::Exec {
                filename: c_str(&self.path),
            },
            EV_OPEN => EventKind::Open {
                path: c_str(&self.path),
                errno: self.err,
            },
            EV_CONNECT => match self.destination() {
                Some((addr, port)) => EventKind::Connect { addr, port },
                None if i32::from(self.family) == libc::AF_UNIX => EventKind::ConnectUnix {
                    path: c_str(&self.path[..108]),
                },
                None => return None,
            },
            EV_REFUSED => EventKind::Refused(Refusal {
                nr: self.nr,
                errno: self.err,
                object: if self.family != 0 {
                    match self.destination() {
                        Some((addr, port)) => RefusedObject::Inet { addr, port },
                        None => RefusedObject::Unix {
                            path: c_str(&self.path[..108]),
                        },
                    }
                } else {
                    RefusedObject::Path {
                        path: c_str(&self.path),
                        dirfd: self.dirfd,
                        base: (self.base_ino != 0).then_some((self.base_dev, self.base_ino)),
                    }
                },
                span_ns: (self.start_ns, self.end_ns),
            }),
            EV_SECCOMP => EventKind::Seccomp {
                nr: self.nr,
                errno: self.err,
            },
            _ => return None,
        })
    }
}

/// Exec/open/connect monitoring of watched cgroups. Detaches when dropped.
///
/// With [`Coverage::Syscalls`], its raw tracepoints on system call entry and exit run for every
/// system call of the host while attached (and send every call through the kernel's slower
/// entry path), so they are attached only while agents may run: see [`Monitor::attach`] and
/// [`Monitor::detach`].
pub struct Monitor {
    bpf: Ebpf,
    coverage: Coverage,
    /// The attached tracepoints' links, in [`TRACEPOINTS`] order; empty while detached.
    links: Vec<RawTracePointLinkId>,
    watched: HashMap<MapData, u64, u32>,
    gen: Array<MapData, u32>,
    lost: Array<MapData, u64>,
    /// Thread id → its system call in progress (`struct inflight`, 32 bytes): cleared at
    /// attach, since what it holds from an earlier attachment is stale.
    inflight: HashMap<MapData, u32, [u8; 32]>,
    /// Per agent index, the LOST count already reported.
    lost_seen: Vec<u64>,
    events: RingBuf<MapData>,
    agents: Vec<String>,
    by_cgroup: StdHashMap<u64, u32>,
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Monitor")
            .field("agents", &self.agents)
            .field("watched", &self.by_cgroup)
            .field("coverage", &self.coverage)
            .field("attached", &self.is_attached())
            .finish()
    }
}

/// What a [`Monitor`] hooks, and so what it reports and what it costs the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Execs only (`sched_process_exec`): runs on exec, costs the host's system calls nothing.
    Exec,
    /// Execs, and every system call's entry and exit: opens, connects, the calls the kernel
    /// refused and those seccomp refused. While attached, every system call of the host takes
    /// the kernel's slower entry and exit path (a loop of `read`/`write` takes ~1.6× as long).
    Syscalls,
}

/// The monitor's programs and their raw tracepoints. A system call's enter comes before its
/// exit, so that a call that entered before the attach is never judged by its exit alone (that
/// is the mark of a call seccomp refused); detaching goes in reverse.
const TRACEPOINTS: [(&str, &str); 3] = [
    ("clawfs_exec", "sched_process_exec"),
    ("clawfs_sys_enter", "sys_enter"),
    ("clawfs_sys_exit", "sys_exit"),
];

impl Coverage {
    /// The programs of [`TRACEPOINTS`] this coverage attaches.
    fn tracepoints(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Coverage::Exec => &TRACEPOINTS[..1],
            Coverage::Syscalls => &TRACEPOINTS,
        }
    }
}

impl Monitor {
    /// Loads the programs of `coverage`. Nothing is reported until it is attached
    /// ([`Monitor::attach`]) and a group watched ([`Monitor::watch`]).
    pub fn start(coverage: Coverage) -> Result<Monitor, Error> {
        let mut bpf = load_object("monitor", MONITOR_OBJ)?;
        for (prog, _) in coverage.tracepoints() {
            let p: &mut RawTracePoint = program(&mut bpf, prog)?;
            p.load()
                .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
        }
        let watched = take_map(&mut bpf, "WATCHED")?;
        let gen = take_map(&mut bpf, "GEN")?;
        let lost = take_map(&mut bpf, "LOST")?;
        let inflight = take_map(&mut bpf, "INFLIGHT")?;
        let events = take_map(&mut bpf, "EVENTS")?;
        Ok(Monitor {
            bpf,
            coverage,
            links: Vec::new(),
            watched,
            gen,
            lost,
            inflight,
            lost_seen: Vec::new(),
            events,
            agents: Vec::new(),
            by_cgroup: StdHashMap::new(),
        })
    }

    /// Attaches the tracepoints (nothing if attached already): watched groups are reported from
    /// now on. Attaches all or none.
    pub fn attach(&mut self) -> Result<(), Error> {
        if self.is_attached() {
            return Ok(());
        }
        let stale: Vec<u32> = self.inflight.keys().filter_map(Result::ok).collect();
        for tid in stale {
            let _ = self.inflight.remove(&tid);
        }
        for (prog, name) in self.coverage.tracepoints() {
            let attached = program::<RawTracePoint>(&mut self.bpf, prog).and_then(|p| {
                p.attach(name)
                    .map_err(|e| Error::bpf(format!("attaching {prog} to {name}"), &e))
            });
            match attached {
                Ok(link) => self.links.push(link),
                Err(e) => {
                    let _ = self.detach();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Detaches the tracepoints (nothing if detached): the host's system calls cost what they
    /// cost without the monitor, and nothing is reported until [`Monitor::attach`].
    pub fn detach(&mut self) -> Result<(), Error> {
        let mut first_error = None;
        while let Some(link) = self.links.pop() {
            let (prog, _) = self.coverage.tracepoints()[self.links.len()];
            let detached = program::<RawTracePoint>(&mut self.bpf, prog).and_then(|p| {
                p.detach(link)
                    .map_err(|e| Error::bpf(format!("detaching {prog}"), &e))
            });
            if let Err(e) = detached {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether the tracepoints are attached.
    pub fn is_attached(&self) -> bool {
        !self.links.is_empty()
    }

    /// Reports the processes of cgroup `cgroup_id` (see [`cgroup_id`]) and of its descendants (up
    /// to 12 levels deep) as `agent`.
    pub fn watch(&mut self, cgroup_id: u64, agent: &str) -> Result<(), Error> {
        let index = match self.agents.iter().position(|a| a == agent) {
            Some(i) => i,
            None => {
                self.agents.push(agent.to_string());
                self.agents.len() - 1
            }
        } as u32;
        self.watched
            .insert(cgroup_id, index, 0)
            .map_err(|e| Error::bpf(format!("watching cgroup {cgroup_id}"), &e))?;
        self.by_cgroup.insert(cgroup_id, index);
        self.forget_verdicts();
        Ok(())
    }

    /// The events lost in the kernel since the last call, per agent: the ring buffer was full
    /// (the daemon read too slowly for the rate of events).
    pub fn lost_events(&mut self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (i, agent) in self.agents.iter().enumerate() {
            let Ok(total) = self.lost.get(&(i as u32), 0) else {
                continue;
            };
            if self.lost_seen.len() <= i {
                self.lost_seen.resize(i + 1, 0);
            }
            let new = total.saturating_sub(self.lost_seen[i]);
            self.lost_seen[i] = total;
            if new > 0 {
                out.push((agent.clone(), new));
            }
        }
        out
    }

    /// Makes the programs' cached verdicts (which cgroups are watched) stale, after WATCHED
    /// changed: the generation they carry moves on.
    fn forget_verdicts(&mut self) {
        let now = self.gen.get(&0, 0).unwrap_or(0);
        let _ = self.gen.set(0, now.wrapping_add(1), 0);
    }

    /// Stops reporting cgroup `cgroup_id`.
    pub fn unwatch(&mut self, cgroup_id: u64) -> Result<(), Error> {
        self.by_cgroup.remove(&cgroup_id);
        let removed = match self.watched.remove(&cgroup_id) {
            Ok(()) => Ok(()),
            Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(Error::bpf(format!("unwatching cgroup {cgroup_id}"), &e)),
        };
        self.forget_verdicts();
        removed
    }

    /// A descriptor of the event ring buffer that polls readable while events wait: a
    /// duplicate, so that a thread can wait on it without holding the monitor (the ring buffer
    /// lives as long as the descriptor does).
    pub fn events_fd(&self) -> Result<OwnedFd, Error> {
        self.events
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("duplicating the event ring buffer's descriptor", e))
    }

    /// The events queued so far, waiting up to `timeout` for the first one.
    pub fn next_events(&mut self, timeout: Duration) -> Result<Vec<Event>, Error> {
        let mut out = self.drain();
        if out.is_empty() && !timeout.is_zero() {
            let mut pfd = libc::pollfd {
                fd: self.events.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: pfd is a valid pollfd for the duration of the call, count 1.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(Error::io("polling the event ring buffer", e));
                }
            }
            out = self.drain();
        }
        Ok(out)
    }

    /// Collects events until `until` returns true for the events collected so far, or `timeout`.
    pub fn collect_until(
        &mut self,
        timeout: Duration,
        mut until: impl FnMut(&[Event]) -> bool,
    ) -> Result<Vec<Event>, Error> {
        let deadline = Instant::now() + timeout;
        let mut all = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            all.extend(self.next_events(left.min(Duration::from_millis(100)))?);
            if until(&all) || left.is_zero() {
                return Ok(all);
            }
        }
    }

    fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(item) = self.events.next() {
            let Some(raw) = RawEvent::parse(&item) else {
                continue;
            };
            let Some(kind) = raw.kind() else { continue };
            let agent = self
                .agents
                .get(raw.agent as usize)
                .cloned()
                .unwrap_or_default();
            out.push(Event {
                agent,
                cgroup_id: raw.cgroup_id,
                pid: raw.pid,
                tid: raw.tid,
                kind,
            });
        }
        out
    }
}

/// The program `name` of `bpf`, as its kind `T` (a tracepoint, a cgroup program, …).
fn program<'a, T>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, Error>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    bpf.program_mut(name)
        .ok_or_else(|| Error::Bpf {
            step: format!("program {name}"),
            detail: "missing".into(),
        })?
        .try_into()
        .map_err(|e| Error::bpf(format!("program {name}"), &e))
}

fn take_map<T>(bpf: &mut Ebpf, name: &str) -> Result<T, Error>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = bpf.take_map(name).ok_or_else(|| Error::Bpf {
        step: format!("map {name}"),
        detail: "missing".into(),
    })?;
    T::try_from(map).map_err(|e| Error::bpf(format!("map {name}"), &e))
}

/// What an agent may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// Every destination but the cloud metadata addresses; binding is allowed.
    All,
    /// Only these destinations, TCP or UDP, IPv4 or IPv6 (connects and UDP datagrams); no
    /// binding: nothing listens or receives on a port it chose.
    To(Vec<Endpoint>),
    /// Nothing: no IPv4 or IPv6 socket can be made at all, so nothing is sent or received
    /// (Unix sockets are not affected).
    None,
}

/// The cloud metadata addresses, refused unless an allow list names them.
pub const METADATA: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];

/// One allowed destination: a port on any host, on one address, or on a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    /// The address (of the network, when `prefix` is shorter than the address); `None` for any
    /// host.
    pub addr: Option<IpAddr>,
    /// How many leading bits of `addr` must match: 32 (IPv4) or 128 (IPv6) for one address.
    pub prefix: u8,
    /// The port.
    pub port: u16,
}

impl Endpoint {
    /// `port` on any host.
    pub fn any_host(port: u16) -> Endpoint {
        Endpoint {
            addr: None,
            prefix: 0,
            port,
        }
    }

    /// `port` on the one address `addr`.
    pub fn host(addr: IpAddr, port: u16) -> Endpoint {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Endpoint {
            addr: Some(addr),
            prefix,
            port,
        }
    }

    /// Whether this is exactly the one address `addr` (any port).
    fn names(&self, addr: IpAddr) -> bool {
        self.addr == Some(addr) && self.prefix == if addr.is_ipv4() { 32 } else { 128 }
    }

    fn key(&self) -> Key<[u8; 20]> {
        let mut data = [0u8; 20];
        data[..2].copy_from_slice(&self.port.to_be_bytes());
        let (addr, bits) = match self.addr {
            None => ([0; 16], 0),
            Some(IpAddr::V4(a)) => (
                a.to_ipv6_mapped().octets(),
                96 + u32::from(self.prefix.min(32)),
            ),
            Some(IpAddr::V6(a)) => (a.octets(), u32::from(self.prefix.min(128))),
        };
        data[2..18].copy_from_slice(&addr);
        Key::new(16 + bits, data)
    }
}

/// Flags of the MODE map (mirror of `MODE_*` in `egress.bpf.c`).
const MODE_ALLOW_ALL: u32 = 1;
const MODE_NO_BIND: u32 = 2;
const MODE_NO_SOCKET: u32 = 4;
const MODE_METADATA_V4: u32 = 8;
const MODE_METADATA_V6: u32 = 16;

/// The programs of [`EgressFilter`] that judge an address, in `egress.bpf.o`.
const EGRESS_PROGRAMS: [&str; 6] = [
    "clawfs_connect4",
    "clawfs_connect6",
    "clawfs_sendmsg4",
    "clawfs_sendmsg6",
    "clawfs_bind4",
    "clawfs_bind6",
];

/// connect4/connect6, sendmsg4/sendmsg6, bind4/bind6, sock_create and an ingress program (which
/// drops connections opened to the agent unless it may bind) attached to one cgroup v2 directory with BPF links (which always coexist with other programs: filters of
/// ancestor cgroups also apply, and all must allow). Detached when dropped.
pub struct EgressFilter {
    _bpf: Ebpf,
    mode: Array<MapData, u32>,
    allowed: LpmTrie<MapData, [u8; 20], u8>,
    allow: Allow,
    cgroup_dir: PathBuf,
}

impl fmt::Debug for EgressFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressFilter")
            .field("cgroup_dir", &self.cgroup_dir)
            .field("allow", &self.allow)
            .finish()
    }
}

impl EgressFilter {
    /// Loads the programs, fills its allow list and attaches them to `cgroup_dir` (a cgroup v2 dir).
    pub fn attach(cgroup_dir: &Path, allow: Allow) -> Result<EgressFilter, Error> {
        let cgroup = File::open(cgroup_dir)
            .map_err(|e| Error::io(format!("opening cgroup {}", cgroup_dir.display()), e))?;
        let mut bpf = load_object("egress", EGRESS_OBJ)?;
        let mode = take_map(&mut bpf, "MODE")?;
        let allowed = take_map(&mut bpf, "ALLOWED")?;
        let mut filter = EgressFilter {
            _bpf: bpf,
            mode,
            allowed,
            allow: Allow::None,
            cgroup_dir: cgroup_dir.to_path_buf(),
        };
        // The allow list is in place before the programs see any connect.
        filter.set_allow(allow)?;
        let attach_failed = |prog: &str, e: &dyn std::error::Error| {
            Error::bpf(format!("attaching {prog} to {}", cgroup_dir.display()), e)
        };
        // With bpf_link (kernel >= 5.7) the attach flags must be 0 (`Single`); links are
        // multi-attach by nature. Older kernels fall back to a single exclusive attachment.
        for prog in EGRESS_PROGRAMS {
            let p: &mut CgroupSockAddr = program(&mut filter._bpf, prog)?;
            p.load()
                .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
            p.attach(cgroup.as_fd(), CgroupAttachMode::Single)
                .map_err(|e| attach_failed(prog, &e))?;
        }
        let prog = "clawfs_sock_create";
        let p: &mut CgroupSock = program(&mut filter._bpf, prog)?;
        p.load()
            .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
        p.attach(cgroup.as_fd(), CgroupAttachMode::Single)
            .map_err(|e| attach_failed(prog, &e))?;
        let prog = "clawfs_ingress";
        let p: &mut CgroupSkb = program(&mut filter._bpf, prog)?;
        p.load()
            .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
        p.attach(
            cgroup.as_fd(),
            CgroupSkbAttachType::Ingress,
            CgroupAttachMode::Single,
        )
        .map_err(|e| attach_failed(prog, &e))?;
        Ok(filter)
    }

    /// Replaces the allow list, live.
    pub fn set_allow(&mut self, allow: Allow) -> Result<(), Error> {
        let map_err = |e: aya::maps::MapError| Error::bpf("updating the egress filter", &e);
        let list = |a: &Allow| -> Vec<Endpoint> {
            match a {
                Allow::To(list) => list.clone(),
                _ => Vec::new(),
            }
        };
        let (old, new) = (list(&self.allow), list(&allow));
        for e in &new {
            self.allowed.insert(&e.key(), 1u8, 0).map_err(map_err)?;
        }
        let mut flags = match allow {
            Allow::All => MODE_ALLOW_ALL,
            Allow::To(_) => MODE_NO_BIND,
            Allow::None => MODE_NO_SOCKET | MODE_NO_BIND,
        };
        for (addr, flag) in METADATA
            .into_iter()
            .zip([MODE_METADATA_V4, MODE_METADATA_V6])
        {
            if new.iter().any(|e| e.names(addr)) {
                flags |= flag;
            }
        }
        self.mode.set(0, flags, 0).map_err(map_err)?;
        for e in old.iter().filter(|e| !new.contains(e)) {
            match self.allowed.remove(&e.key()) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        self.allow = allow;
        Ok(())
    }

    /// The allow list in force.
    pub fn allow(&self) -> &Allow {
        &self.allow
    }
}

/// Key of the LSM's DENY_INODES map (mirror of `struct inode_key`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InodeKey {
    dev: u64,
    ino: u64,
}

// SAFETY: repr(C), two u64, no padding: any bit pattern is valid.
unsafe impl aya::Pod for InodeKey {}

/// The BPF LSM `file_open` program: opens of denied inodes fail with EPERM once enforced.
///
/// [`FileOpenGuard::new`] creates the map (works wherever eBPF maps do); [`FileOpenGuard::enforce`]
/// loads and attaches the program, which kernels without BPF LSM refuse.
pub struct FileOpenGuard {
    bpf: Ebpf,
    deny: HashMap<MapData, InodeKey, u8>,
    enforced: bool,
}

impl fmt::Debug for FileOpenGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileOpenGuard")
            .field("enforced", &self.enforced)
            .finish()
    }
}

/// A device number (`st_dev`) in the kernel's own encoding, `major << 20 | minor`: what eBPF
/// programs read from `super_block.s_dev`, unlike the userspace `dev_t`.
pub fn kernel_dev(dev: u64) -> u32 {
    (libc::major(dev) << 20) | libc::minor(dev)
}

fn inode_key(path: &Path) -> io::Result<InodeKey> {
    let md = std::fs::metadata(path)?;
    Ok(InodeKey {
        dev: u64::from(kernel_dev(md.dev())),
        ino: md.ino(),
    })
}

impl FileOpenGuard {
    /// Loads the object and creates its map, without loading the program.
    pub fn new() -> Result<FileOpenGuard, Error> {
        let mut bpf = load_object("file_open_lsm", FILE_OPEN_LSM_OBJ)?;
        let deny = take_map(&mut bpf, "DENY_INODES")?;
        Ok(FileOpenGuard {
            bpf,
            deny,
            enforced: false,
        })
    }

    /// Denies opens of the inode `path` resolves to (effective once enforced).
    pub fn deny(&mut self, path: &Path) -> Result<(), Error> {
        let key = inode_key(path).map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        self.deny
            .insert(key, 1u8, 0)
            .map_err(|e| Error::bpf(format!("denying {}", path.display()), &e))
    }

    /// Allows `path`'s inode again.
    pub fn allow(&mut self, path: &Path) -> Result<(), Error> {
        let key = inode_key(path).map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        match self.deny.remove(&key) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(e) => Err(Error::bpf(format!("allowing {}", path.display()), &e)),
        }
    }

    /// Number of denied inodes.
    pub fn denied_count(&self) -> usize {
        self.deny.keys().filter(|k| k.is_ok()).count()
    }

    /// Loads the LSM program against the kernel BTF and attaches it. Refused (EPERM) where BPF LSM
    /// is not enabled.
    pub fn enforce(&mut self) -> Result<(), Error> {
        if self.enforced {
            return Ok(());
        }
        let btf =
            Btf::from_sys_fs().map_err(|e| Error::bpf("reading /sys/kernel/btf/vmlinux", &e))?;
        let p: &mut Lsm = program(&mut self.bpf, "clawfs_file_open")?;
        p.load("file_open", &btf)
            .map_err(|e| Error::bpf("loading the BPF LSM program lsm/file_open", &e))?;
        p.attach()
            .map_err(|e| Error::bpf("attaching the BPF LSM program lsm/file_open", &e))?;
        self.enforced = true;
        Ok(())
    }

    /// Whether [`FileOpenGuard::enforce`] succeeded.
    pub fn enforced(&self) -> bool {
        self.enforced
    }
}

/// Whether a kind of program works on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Loaded (and, for the monitor, attached) in the probe.
    Available,
    /// Not available on this host, with the reason.
    Unavailable(String),
}

impl Status {
    /// True if available.
    pub fn is_available(&self) -> bool {
        matches!(self, Status::Available)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Available => f.write_str("available"),
            Status::Unavailable(why) => write!(f, "not available on this host: {why}"),
        }
    }
}

/// What [`availability`] found, per program kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// Tracepoint monitoring (exec, openat, connect) with the ring buffer.
    pub monitor: Status,
    /// cgroup/connect4, connect6, sendmsg4, sendmsg6 (loaded, not attached, in the probe).
    pub egress_filter: Status,
    /// BPF LSM file_open.
    pub file_open_lsm: Status,
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "monitor (tracepoints exec, connect, system call entry and exit: opens, refusals, seccomp refusals): {}",
            self.monitor
        )?;
        writeln!(
            f,
            "egress filter (cgroup/connect4, connect6, sendmsg4, sendmsg6): {}",
            self.egress_filter
        )?;
        write!(
            f,
            "file-open enforcement (BPF LSM file_open): {}",
            self.file_open_lsm
        )
    }
}

fn status(r: Result<(), Error>) -> Status {
    match r {
        Ok(()) => Status::Available,
        Err(e) => Status::Unavailable(e.to_string()),
    }
}

/// Probes each program kind by loading it (the monitor is also attached and detached, with
/// nothing watched). Needs root (CAP_BPF,
/// CAP_PERFMON, CAP_SYS_ADMIN).
pub fn availability() -> Availability {
    let monitor = status(Monitor::start(Coverage::Syscalls).and_then(|mut m| {
        m.attach()?;
        m.detach()
    }));
    let egress_filter = status((|| {
        let mut bpf = load_object("egress", EGRESS_OBJ)?;
        for prog in EGRESS_PROGRAMS {
            let p: &mut CgroupSockAddr = program(&mut bpf, prog)?;
            p.load()
                .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
        }
        Ok(())
    })());
    let file_open_lsm = status(FileOpenGuard::new().and_then(|mut g| g.enforce()));
    Availability {
        monitor,
        egress_filter,
        file_open_lsm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_event_layout_matches_c() {
        assert_eq!(std::mem::size_of::<RawEvent>(), 344);
    }

    #[test]
    fn objects_built() {
        assert!(BUILD_ERROR.is_empty(), "{BUILD_ERROR}");
        for obj in [MONITOR_OBJ, EGRESS_OBJ, FILE_OPEN_LSM_OBJ] {
            assert_eq!(&obj[..4], b"\x7fELF");
        }
    }

    #[test]
    fn parses_connect_event() {
        let mut raw = RawEvent {
            cgroup_id: 7,
            pid: 42,
            kind: EV_CONNECT,
            agent: 0,
            family: libc::AF_INET as u16,
            port: 8080,
            addr: [0; 16],
            path: [0; PATH_LEN],
            tid: 42,
            nr: 0,
            err: 0,
            base_dev: 0,
            base_ino: 0,
            start_ns: 0,
            end_ns: 0,
            dirfd: -100,
            _pad: 0,
        };
        raw.addr[..4].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(
            raw.kind(),
            Some(EventKind::Connect {
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port: 8080
            })
        );
    }

    #[test]
    fn error_errno() {
        let e = Error::Bpf {
            step: "x".into(),
            detail: "`bpf_prog_load` failed: Operation not permitted (os error 1)".into(),
        };
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    }
}
