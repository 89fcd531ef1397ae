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

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aya::programs::CgroupSockAddr;
use aya::{Ebpf, EbpfLoader};

mod egress;
mod file_guard;
mod monitor;

use egress::EGRESS_PROGRAMS;
pub use egress::{Allow, EgressFilter, Endpoint};
pub use file_guard::{kernel_dev, FileOpenGuard};
pub use monitor::{Coverage, Event, EventKind, Monitor, Refusal, RefusedObject};

pub(crate) static MONITOR_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor.bpf.o"));
pub(crate) static EGRESS_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/egress.bpf.o"));
pub(crate) static FILE_OPEN_LSM_OBJ: &[u8] =
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
    // `EbpfLoader::new` reads the kernel's BTF for the relocations; `Ebpf::load` would read and
    // parse /sys/kernel/btf/vmlinux a second time, a third of every `clawfs run`'s start.
    EbpfLoader::new()
        .load(bytes)
        .map_err(|e| Error::bpf(format!("loading {name}.bpf.o"), &e))
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
    fn objects_built() {
        assert!(BUILD_ERROR.is_empty(), "{BUILD_ERROR}");
        for obj in [MONITOR_OBJ, EGRESS_OBJ, FILE_OPEN_LSM_OBJ] {
            assert_eq!(&obj[..4], b"\x7fELF");
        }
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
