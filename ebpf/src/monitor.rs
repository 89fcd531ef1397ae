//! [`Monitor`]: raw tracepoints on exec and, with [`Coverage::Syscalls`], on every system call's
//! entry and exit, reporting [`Event`]s of the processes whose cgroup v2 (or an ancestor) is
//! watched.

use std::collections::HashMap as StdHashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap, MapData, RingBuf};
use aya::programs::raw_trace_point::RawTracePointLinkId;
use aya::programs::RawTracePoint;
use aya::Ebpf;

use crate::{load_object, program, take_map, Error, MONITOR_OBJ};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_event_layout_matches_c() {
        assert_eq!(std::mem::size_of::<RawEvent>(), 344);
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
}
