//! Landlock sandbox for agent processes (Linux-only): what an agent may open outside the
//! mount, and which TCP ports it may reach, enforced by the kernel for the agent and everything it
//! starts.
//!
//! The ruleset is built **before fork** ([`Ruleset::build`] opens every path, checks the grants
//! and hands the rules to the kernel) and applied **in the child** between fork and exec
//! ([`Prepared::restrict_self`], called from `pre_exec`). The child step makes four system calls
//! (`fcntl(F_DUPFD_CLOEXEC)`, `prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`, `close`) and
//! does not allocate: the `landlock` crate's `restrict_self` builds its status and errors from
//! plain values (`io::Error::last_os_error()` carries an errno, no box), and the error this module
//! returns there, [`RestrictError`], is `Copy` and converts into an `io::Error` without
//! allocating.
//!
//! # Model
//!
//! Landlock is allow-only: every file-system access right the target ABI knows is *handled*, so
//! anything a [`Sandbox`] does not grant is refused with `EACCES` — whatever the uid, root
//! included. Grants apply to a path and everything beneath it:
//!
//! | list | rights |
//! | --- | --- |
//! | `read_exec` | read files, list directories, execute |
//! | `read` | read files, list directories |
//! | `read_write` | everything (create, write, remove, rename, truncate, execute, ioctl) |
//! | `devices` | read, write, truncate and ioctl on device files (`/dev/null`, ttys) |
//!
//! A grant of a regular file gets only the rights that apply to files. `deny` names paths that no
//! grant may cover (a grant equal to or above one is an error at build time): Landlock cannot
//! deny beneath a grant, so the default `/etc` access is a list of files, and `deny` catches a
//! list that would let `/etc/shadow` or the store back in. Network: `tcp_connect` / `tcp_bind`
//! `None` leave TCP alone, `Some(ports)` allow exactly those ports (`Some(vec![])`: none). With
//! `scope_signals` / `scope_abstract_unix` (ABI 6) the agent cannot signal, or connect to an
//! abstract UNIX socket of, a process outside its own sandbox.
//!
//! # `/proc`
//!
//! Landlock cannot give "each process its own `/proc/self`":
//! - a rule on `/proc/self` is resolved when the rule is built, in the parent, so it names
//!   `/proc/<parent's pid>` — it would expose the parent (`clawfs run`) and not the child.
//!   [`Ruleset::build`] refuses any grant that resolves to `/proc/<pid>` ([`Error::ProcPid`]);
//! - a rule made in the child on `/proc/<child's pid>` would not cover the processes the agent
//!   starts (each has its own `/proc/<pid>` inode);
//! - a rule on `/proc` as a whole gives every process of the sandbox its own entries, but also
//!   other processes' entries that the mode bits and uids allow. Landlock's ptrace scoping (a
//!   sandboxed process may ptrace only processes of its own sandbox) does close `mem`, `syscall`,
//!   the `cwd`/`root`/`exe`/`fd/N` links and `ptrace(2)` itself; **measured on this kernel
//!   (6.18, ABI 7), it does not close `environ` nor `maps`**: a sandboxed root process reads the
//!   `environ` of an unsandboxed root process (and everyone reads `cmdline` and `status`).
//!
//! So the default is [`ProcAccess::System`]: the system-wide information files runtimes read
//! ([`PROC_SYSTEM`]: `/proc/meminfo`, `/proc/cpuinfo`, `/proc/stat`, a few `/proc/sys` values),
//! and no per-process entry at all — not even the agent's own (`ps`, `top`, `pgrep`, reading
//! `/proc/self/status` or listing `/proc/self/fd` fail; `readlink /proc/self/exe`, and `/dev/stdout`
//! or `/dev/fd/N`, which only pass through `/proc` to a file the process already has open, still
//! work). [`ProcAccess::All`] opens the whole of `/proc` for agents that need their own entries
//! and run under a uid of their own (then the mode bits keep other uids' `environ` closed); it is
//! unsafe for an agent run as root or sharing a uid with processes it must not read.
//! [`ProcAccess::None`] closes `/proc` entirely.
//!
//! # Compatibility
//!
//! The rights requested are those of Landlock ABI [`FULL_ABI`]. [`Compat::Auto`] (default) makes
//! them a hard requirement when the running kernel has at least that ABI — build fails rather than
//! drop a right silently — and best effort on older kernels, where [`Prepared::expected`] is
//! [`Enforcement::Partial`] (or [`Enforcement::None`] without Landlock) and
//! [`Report::unenforced`] says what is missing. [`Prepared::restrict_self`] refuses to go on if
//! the kernel enforced less than expected.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

use ::landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, Erratum, NetPort, PathBeneath,
    PathFd, PathFdError, RestrictSelfError, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetError, RulesetStatus, Scope, ABI,
};

/// The Landlock ABI whose rights this module requests: file system rights up to ioctl on devices
/// (ABI 5), TCP bind/connect (ABI 4) and scoping of signals and abstract UNIX sockets (ABI 6). A
/// kernel with at least this ABI enforces a [`Sandbox`] fully. (ABI 7 only adds audit-logging
/// flags; ABI 9's pathname-UNIX-socket right is not requested: not testable here.)
pub const FULL_ABI: u32 = 6;
const LL_ABI: ABI = ABI::V6;

/// System trees agents execute from: read, list and execute. Missing ones are skipped (on merged-
/// /usr systems `/bin`, `/sbin`, `/lib*` are symlinks into `/usr`; the rule lands on the target).
pub const SYSTEM_READ_EXEC: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// What programs read in `/etc`, file by file (never `/etc` as a whole: it holds `shadow`,
/// `gshadow`, `sudoers`, SSH host keys and TLS private keys). A trailing `*` in the last component
/// matches names with that prefix. Missing entries are skipped.
///
/// - users and groups (`ls -l`, `id`, `whoami`, git's author name): `passwd`, `group`;
/// - name service and resolver: `nsswitch.conf`, `host.conf`, `gai.conf`, `hosts`, `hostname`,
///   `resolv.conf`, `services`, `protocols`, `networks`, `netconfig`;
/// - dynamic loader: `ld.so.cache`, `ld.so.conf`, `ld.so.conf.d` (not `ld.so.preload`: add it
///   if the host relies on one);
/// - time and locale: `localtime`, `timezone`, `locale.alias`, `locale.conf`, `default/locale`;
/// - Debian's `alternatives` (symlinks into `/usr`);
/// - TLS trust (HTTPS from git, pip, curl, Python): `ssl/certs`, `ssl/openssl.cnf`,
///   `ca-certificates`, `ca-certificates.conf`, `pki/tls/certs` — not `ssl/private`;
/// - tools' system configuration: `gitconfig`, `python3*`, `ssh/ssh_config`,
///   `ssh/ssh_config.d` (git over SSH; not the host keys), `mime.types`, `magic*` (file(1)),
///   `inputrc`, `terminfo`;
/// - shells: `shells`, `profile`, `profile.d`, `bash.bashrc`, `environment`;
/// - what system is this: `os-release`, `debian_version`, `lsb-release`.
///
/// Left out on purpose: `pip.conf` and `npmrc` (may hold registry credentials), `machine-id`
/// (a stable host identifier), `mtab` (a symlink to `/proc/self/mounts`, resolved in the parent).
/// Add them to [`Sandbox::read`] if a deployment needs them.
pub const ETC_READ: &[&str] = &[
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/networks",
    "/etc/netconfig",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/locale.alias",
    "/etc/locale.conf",
    "/etc/default/locale",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki/tls/certs",
    "/etc/gitconfig",
    "/etc/python3*",
    "/etc/ssh/ssh_config",
    "/etc/ssh/ssh_config.d",
    "/etc/mime.types",
    "/etc/magic*",
    "/etc/inputrc",
    "/etc/terminfo",
    "/etc/shells",
    "/etc/profile",
    "/etc/profile.d",
    "/etc/bash.bashrc",
    "/etc/environment",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/lsb-release",
];

/// Read-only kernel information runtimes look up: CPU count and topology (glibc's `get_nprocs`,
/// Node, the JVM), NUMA nodes, transparent huge pages (Go, jemalloc). Missing ones are skipped.
pub const SYSTEM_READ: &[&str] = &[
    "/sys/devices/system/cpu",
    "/sys/devices/system/node",
    "/sys/kernel/mm/transparent_hugepage",
];

/// System-wide `/proc` files of [`ProcAccess::System`] (missing ones are skipped): CPU and memory
/// figures (`nproc` fallbacks, Node's `os` module, the JVM, `free`), load and uptime, the kernel
/// version and filesystems, and the `/proc/sys` values libraries consult (glibc malloc's
/// `overcommit_memory`, the listen backlog `somaxconn`, libcap's `cap_last_cap`, limits).
pub const PROC_SYSTEM: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys/kernel/osrelease",
    "/proc/sys/kernel/ostype",
    "/proc/sys/kernel/hostname",
    "/proc/sys/kernel/ngroups_max",
    "/proc/sys/kernel/pid_max",
    "/proc/sys/kernel/cap_last_cap",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/net/core/somaxconn",
    "/proc/sys/fs/nr_open",
];

/// Device files an agent may open for reading and writing: the data sinks and sources, the
/// terminal (`/dev/tty`), and pseudo-terminals (`/dev/ptmx`, `/dev/pts`: tools that run commands
/// under a pty; the mode bits still keep other users' terminals closed). `/dev/shm` is not here:
/// it is shared by every process of the host (a channel between agents); add it to
/// [`Sandbox::read_write`] for POSIX semaphores (Python's multiprocessing locks) if needed.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Paths no grant of the default sandbox may cover (the policy refuses grants over them too).
/// Add the store actually used to [`Sandbox::deny`].
pub use clawfs_policy::DEFAULT_DENY;

/// What an agent process may reach. Plain data: build one with [`Sandbox::agent_defaults`] and
/// push the agent's own paths, or fill every field yourself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// Read, list and execute beneath these paths (optional: missing ones are skipped).
    pub read_exec: Vec<PathBuf>,
    /// Read and list beneath these paths (optional).
    pub read: Vec<PathBuf>,
    /// Every right beneath these paths, execute included (required: a missing one is an error).
    /// E.g. `/clawfs/agents/<name>`, `/clawfs/workspaces/<granted>`, a private temp dir.
    pub read_write: Vec<PathBuf>,
    /// Read, write, truncate and ioctl on these device files or directories (optional).
    pub devices: Vec<PathBuf>,
    /// Paths no grant may be equal to or above (checked at build time; a grant *inside* one is
    /// allowed, as a deliberate exception).
    pub deny: Vec<PathBuf>,
    /// Access to `/proc` (see the module documentation).
    pub proc: ProcAccess,
    /// `None`: TCP connect is not restricted; `Some(ports)`: only to these ports.
    pub tcp_connect: Option<Vec<u16>>,
    /// `None`: TCP bind is not restricted; `Some(ports)`: only these ports.
    pub tcp_bind: Option<Vec<u16>>,
    /// Refuse signals to processes outside the sandbox (ABI 6).
    pub scope_signals: bool,
    /// Refuse connections to abstract UNIX sockets created outside the sandbox (ABI 6).
    pub scope_abstract_unix: bool,
    /// What to do when the kernel cannot enforce everything.
    pub compat: Compat,
}

/// How much of `/proc` the sandbox may read (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcAccess {
    /// Nothing under `/proc`.
    None,
    /// The system-wide files of [`PROC_SYSTEM`]; no per-process entry, not even the agent's own.
    System,
    /// Read and list all of `/proc`: the agent's own entries, and other processes' as far as the
    /// mode bits, uids and Landlock's ptrace scoping allow (`environ` and `maps` of same-uid
    /// processes stay readable on this kernel).
    All,
}

/// What to do when the running kernel cannot enforce every right a [`Sandbox`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compat {
    /// Require full enforcement if the kernel has ABI [`FULL_ABI`] or later; best effort (reported
    /// as partial) on older kernels.
    Auto,
    /// Always require full enforcement: build fails on older kernels.
    Require,
    /// Best effort, whatever the kernel (reported, never hidden).
    BestEffort,
}

/// How much of the sandbox the kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Enforcement {
    /// Nothing: Landlock is not available.
    None,
    /// Some rights are not enforced (older kernel); see [`Report::unenforced`].
    Partial,
    /// Everything the sandbox asks for.
    Full,
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Enforcement::None => "not enforced",
            Enforcement::Partial => "partially enforced",
            Enforcement::Full => "fully enforced",
        })
    }
}

/// Result of [`Prepared::restrict_self`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// What the kernel enforces.
    pub enforcement: Enforcement,
    /// `PR_SET_NO_NEW_PRIVS` is set (always, unless the kernel predates it).
    pub no_new_privs: bool,
}

/// Landlock on this host, as reported by [`abi`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Landlock works.
    Available {
        /// The ABI version the kernel reports.
        abi: u32,
        /// Kernel fixes for known Landlock errata (the kernel's bit mask).
        errata: u32,
    },
    /// Landlock cannot be used here.
    NotAvailable {
        /// Why.
        why: String,
    },
}

impl Availability {
    /// The kernel's ABI version, 0 when Landlock is not available.
    pub fn abi_version(&self) -> u32 {
        match self {
            Availability::Available { abi, .. } => *abi,
            Availability::NotAvailable { .. } => 0,
        }
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::Available { abi, errata } => {
                write!(f, "Landlock ABI {abi} (errata fixed: {errata:#x})")
            }
            Availability::NotAvailable { why } => write!(f, "not available on this host: {why}"),
        }
    }
}

/// The Landlock ABI of the running kernel, or why Landlock cannot be used.
pub fn abi() -> Availability {
    // LANDLOCK_CREATE_RULESET_VERSION
    const VERSION: libc::c_uint = 1 << 0;
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            VERSION,
        )
    };
    if v > 0 {
        let errata: u32 = Erratum::current().bits();
        return Availability::Available {
            abi: v as u32,
            errata,
        };
    }
    let e = io::Error::last_os_error();
    let lsm = fs::read_to_string("/sys/kernel/security/lsm")
        .map(|s| format!("; active LSMs: {}", s.trim()))
        .unwrap_or_default();
    let why = match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => format!(
            "Landlock is built into the kernel but not enabled at boot (add \"landlock\" to the \
             lsm= kernel parameter){lsm}"
        ),
        Some(libc::ENOSYS) => format!(
            "the kernel has no Landlock (Linux < 5.13 or built without \
             CONFIG_SECURITY_LANDLOCK), or a seccomp filter hides the system call{lsm}"
        ),
        Some(libc::EPERM) => "a seccomp filter refuses landlock_create_ruleset".to_string(),
        _ => format!("landlock_create_ruleset: {e}"),
    };
    Availability::NotAvailable { why }
}

/// Why a sandbox could not be built (in the parent, before fork).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required path (in `read_write`) does not exist.
    #[error("{}: does not exist (a read-write grant must)", .0.display())]
    Missing(PathBuf),
    /// A path could not be opened or examined.
    #[error("{}: {source}", .path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A pattern with a `*` anywhere but in its last component, or more than one.
    #[error("{}: only one `*`, in the last component, is supported", .0.display())]
    Pattern(PathBuf),
    /// A relative path.
    #[error("{}: sandbox paths must be absolute", .0.display())]
    Relative(PathBuf),
    /// A grant of one process's `/proc/<pid>` directory (e.g. `/proc/self`, resolved in the
    /// builder): it would expose the builder, not the sandboxed process.
    #[error("{}: resolves to {}, a single process's /proc entry (use `proc`)", .path.display(), .resolved.display())]
    ProcPid {
        /// The path as given.
        path: PathBuf,
        /// What it resolves to.
        resolved: PathBuf,
    },
    /// A grant that would cover a denied path.
    #[error("granting {} would expose {}, which is denied", .grant.display(), .denied.display())]
    CoversDenied {
        /// The grant (as resolved).
        grant: PathBuf,
        /// The denied path it covers.
        denied: PathBuf,
    },
    /// Full enforcement was required and the kernel cannot give it.
    #[error("Landlock full enforcement is required, but {0}")]
    Unavailable(Availability),
    /// The `landlock` crate or the kernel refused the ruleset.
    #[error("building the Landlock ruleset: {0}")]
    Ruleset(#[from] RulesetError),
}

/// Which step of [`Prepared::restrict_self`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestrictStep {
    /// Duplicating the ruleset descriptor.
    Duplicate,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs,
    /// `landlock_restrict_self`.
    RestrictSelf,
    /// The kernel enforced less than [`Prepared::expected`] (errno `ENOTSUP`).
    Weaker,
}

/// Why [`Prepared::restrict_self`] failed: `Copy`, built without allocation, and converted into
/// an `io::Error` (for `pre_exec`) without allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestrictError {
    /// The step.
    pub step: RestrictStep,
    /// The errno.
    pub errno: i32,
}

impl fmt::Display for RestrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            RestrictStep::Duplicate => "duplicating the Landlock ruleset descriptor",
            RestrictStep::NoNewPrivs => "setting no_new_privs",
            RestrictStep::RestrictSelf => "landlock_restrict_self",
            RestrictStep::Weaker => "the kernel enforced less of the sandbox than expected",
        };
        write!(f, "{step}: {}", io::Error::from_raw_os_error(self.errno))
    }
}

impl std::error::Error for RestrictError {}

impl From<RestrictError> for io::Error {
    fn from(e: RestrictError) -> io::Error {
        io::Error::from_raw_os_error(e.errno)
    }
}

/// What a grant allows (for [`Report::granted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Read, list, execute.
    ReadExec,
    /// Read, list.
    Read,
    /// Every right.
    ReadWrite,
    /// Device read/write/ioctl.
    Device,
}

/// What [`Ruleset::build`] did, for logs and `clawfs status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Landlock on this host.
    pub availability: Availability,
    /// What [`Prepared::restrict_self`] will give.
    pub expected: Enforcement,
    /// Rules added: the path as given (patterns expanded) and its grant.
    pub granted: Vec<(PathBuf, Grant)>,
    /// Optional paths (or patterns) that did not exist and were skipped.
    pub skipped: Vec<PathBuf>,
    /// What the kernel will not enforce (empty when `expected` is `Full`).
    pub unenforced: Vec<&'static str>,
}

/// Entry point: turns a [`Sandbox`] into a [`Prepared`] ruleset.
#[derive(Debug)]
pub struct Ruleset;

/// A ruleset built in the parent, ready to be applied in a child.
#[derive(Debug)]
pub struct Prepared {
    ruleset: RulesetCreated,
    report: Report,
}

impl Sandbox {
    /// A sandbox that grants nothing at all (not even execution): fill it yourself.
    pub fn empty() -> Sandbox {
        Sandbox {
            read_exec: Vec::new(),
            read: Vec::new(),
            read_write: Vec::new(),
            devices: Vec::new(),
            deny: Vec::new(),
            proc: ProcAccess::None,
            tcp_connect: None,
            tcp_bind: None,
            scope_signals: false,
            scope_abstract_unix: false,
            compat: Compat::Auto,
        }
    }

    /// The defaults for an agent: [`SYSTEM_READ_EXEC`] read+execute, [`ETC_READ`] and
    /// [`SYSTEM_READ`] read, [`DEVICES`], [`PROC_SYSTEM`] ([`ProcAccess::System`]), [`DEFAULT_DENY`],
    /// signals and abstract UNIX sockets scoped, TCP not restricted, [`Compat::Auto`]. Nothing is
    /// writable: push the agent's directories to `read_write` (and e.g. the mount itself to
    /// `read`), the store to `deny`.
    pub fn agent_defaults() -> Sandbox {
        let paths = |l: &[&str]| l.iter().map(PathBuf::from).collect::<Vec<_>>();
        let mut read = paths(ETC_READ);
        read.extend(paths(SYSTEM_READ));
        Sandbox {
            read_exec: paths(SYSTEM_READ_EXEC),
            read,
            read_write: Vec::new(),
            devices: paths(DEVICES),
            deny: paths(DEFAULT_DENY),
            proc: ProcAccess::System,
            tcp_connect: None,
            tcp_bind: None,
            scope_signals: true,
            scope_abstract_unix: true,
            compat: Compat::Auto,
        }
    }

    /// The lowest Landlock ABI that enforces everything this sandbox asks for.
    pub fn needed_abi(&self) -> u32 {
        let mut need = 5; // IoctlDev is the newest file-system right requested.
        if self.tcp_connect.is_some() || self.tcp_bind.is_some() {
            need = need.max(4);
        }
        if self.scope_signals || self.scope_abstract_unix {
            need = need.max(6);
        }
        need
    }

    /// What a kernel with Landlock ABI `abi` (0: none) leaves unenforced of this sandbox.
    pub fn unenforced_on(&self, abi: u32) -> Vec<&'static str> {
        let mut out = Vec::new();
        if abi == 0 {
            out.push("everything: Landlock is not available");
            return out;
        }
        if abi < 2 {
            out.push(
                "control of cross-directory renames and links (ABI 2: refused outright before)",
            );
        }
        if abi < 3 {
            out.push("truncating files (ABI 3)");
        }
        if abi < 4 && self.tcp_connect.is_some() {
            out.push("TCP connect restrictions (ABI 4)");
        }
        if abi < 4 && self.tcp_bind.is_some() {
            out.push("TCP bind restrictions (ABI 4)");
        }
        if abi < 5 {
            out.push("ioctl on device files (ABI 5)");
        }
        if abi < 6 && self.scope_signals {
            out.push("signal scoping (ABI 6)");
        }
        if abi < 6 && self.scope_abstract_unix {
            out.push("abstract UNIX socket scoping (ABI 6)");
        }
        out
    }
}

impl Default for Sandbox {
    /// [`Sandbox::agent_defaults`].
    fn default() -> Sandbox {
        Sandbox::agent_defaults()
    }
}

/// The rights of each kind of grant, for the target ABI.
fn rights(grant: Grant) -> BitFlags<AccessFs> {
    match grant {
        Grant::ReadExec => AccessFs::from_read(LL_ABI),
        Grant::Read => AccessFs::ReadFile | AccessFs::ReadDir,
        Grant::ReadWrite => AccessFs::from_all(LL_ABI),
        Grant::Device => {
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
        }
    }
}

/// `path` with `.` removed and `..` applied lexically (for paths that do not exist).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The path as the kernel will see it: symlinks resolved where it exists.
fn resolved(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| lexical(path))
}

/// Expands a trailing-`*` pattern (`/etc/python3*`); other paths are returned as they are.
fn expand(path: &Path) -> Result<Vec<PathBuf>, Error> {
    if !path.is_absolute() {
        return Err(Error::Relative(path.to_path_buf()));
    }
    let bytes = path.as_os_str().as_encoded_bytes();
    let stars = bytes.iter().filter(|&&b| b == b'*').count();
    if stars == 0 {
        return Ok(vec![path.to_path_buf()]);
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::Pattern(path.to_path_buf()));
    };
    let name = name.to_string_lossy();
    if stars > 1 || !name.contains('*') || parent.as_os_str().as_encoded_bytes().contains(&b'*') {
        return Err(Error::Pattern(path.to_path_buf()));
    }
    let (prefix, suffix) = name.split_once('*').unwrap_or((&name, ""));
    let entries = match fs::read_dir(parent) {
        Ok(e) => e,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return Ok(Vec::new())
        }
        Err(source) => {
            return Err(Error::Open {
                path: parent.to_path_buf(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Open {
            path: parent.to_path_buf(),
            source,
        })?;
        let n = entry.file_name();
        let n = n.to_string_lossy();
        if n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Whether `path` is, or is beneath, one process's `/proc/<pid>` (or `/proc/<pid>/task/<tid>`).
fn is_proc_pid(path: &Path) -> bool {
    let mut c = path.components();
    c.next() == Some(Component::RootDir)
        && c.next() == Some(Component::Normal("proc".as_ref()))
        && c.next().is_some_and(|n| {
            let n = n.as_os_str().as_encoded_bytes();
            !n.is_empty() && n.iter().all(u8::is_ascii_digit)
        })
}

/// Whether the O_PATH descriptor is something other than a directory.
fn is_non_dir(fd: &PathFd, path: &Path) -> Result<bool, Error> {
    let st = rustix::fs::fstat(fd.as_fd()).map_err(|e| Error::Open {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    Ok(st.st_mode & libc::S_IFMT != libc::S_IFDIR)
}

impl Ruleset {
    /// Builds the ruleset for `sandbox` (in the parent, before fork): expands patterns, opens every
    /// path (`O_PATH`), skips missing optional ones, refuses a grant that covers a denied path or a
    /// missing `read_write` path, and adds the rules. The descriptors of the paths are closed
    /// before it returns; the ruleset keeps the rules.
    pub fn build(sandbox: &Sandbox) -> Result<Prepared, Error> {
        let availability = abi();
        let kernel = availability.abi_version();
        let need = sandbox.needed_abi();
        let hard = match sandbox.compat {
            Compat::Require => {
                if kernel < need {
                    return Err(Error::Unavailable(match availability {
                        Availability::Available { abi, .. } => Availability::NotAvailable {
                            why: format!("the kernel has ABI {abi}, {need} is needed"),
                        },
                        other => other,
                    }));
                }
                true
            }
            Compat::Auto => kernel >= need,
            Compat::BestEffort => false,
        };
        let level = if hard {
            CompatLevel::HardRequirement
        } else {
            CompatLevel::BestEffort
        };
        let expected = if kernel == 0 {
            Enforcement::None
        } else if kernel >= need {
            Enforcement::Full
        } else {
            Enforcement::Partial
        };
        let unenforced = if expected == Enforcement::Full {
            Vec::new()
        } else {
            sandbox.unenforced_on(kernel)
        };

        // Collect the grants (patterns expanded, missing optional paths skipped, denied ones
        // refused) before touching the kernel.
        let denied: Vec<PathBuf> = sandbox.deny.iter().map(|d| resolved(d)).collect();
        let mut granted = Vec::new();
        let mut skipped = Vec::new();
        let mut rules: Vec<(PathFd, BitFlags<AccessFs>)> = Vec::new();
        let proc_list: Vec<PathBuf> = match sandbox.proc {
            ProcAccess::None => Vec::new(),
            ProcAccess::System => PROC_SYSTEM.iter().map(PathBuf::from).collect(),
            ProcAccess::All => vec![PathBuf::from("/proc")],
        };
        let lists: [(&[PathBuf], Grant, bool); 5] = [
            (&sandbox.read_exec, Grant::ReadExec, false),
            (&sandbox.read, Grant::Read, false),
            (&proc_list, Grant::Read, false),
            (&sandbox.devices, Grant::Device, false),
            (&sandbox.read_write, Grant::ReadWrite, true),
        ];
        let mut seen = BTreeSet::new();
        for (list, grant, required) in lists {
            for pattern in list {
                let paths = expand(pattern)?;
                if paths.is_empty() {
                    if required {
                        return Err(Error::Missing(pattern.clone()));
                    }
                    skipped.push(pattern.clone());
                    continue;
                }
                for path in paths {
                    let fd = match PathFd::new(&path) {
                        Ok(fd) => fd,
                        Err(PathFdError::OpenCall { source, .. })
                            if matches!(
                                source.raw_os_error(),
                                Some(libc::ENOENT | libc::ENOTDIR)
                            ) =>
                        {
                            if required {
                                return Err(Error::Missing(path));
                            }
                            skipped.push(path);
                            continue;
                        }
                        Err(PathFdError::OpenCall { source, .. }) => {
                            return Err(Error::Open { path, source })
                        }
                        Err(e) => {
                            return Err(Error::Open {
                                path,
                                source: io::Error::other(e),
                            })
                        }
                    };
                    let real = resolved(&path);
                    if is_proc_pid(&real) {
                        return Err(Error::ProcPid {
                            path,
                            resolved: real,
                        });
                    }
                    if let Some(d) = denied.iter().find(|d| d.starts_with(&real)) {
                        return Err(Error::CoversDenied {
                            grant: real,
                            denied: d.clone(),
                        });
                    }
                    let mut access = rights(grant);
                    if is_non_dir(&fd, &path)? {
                        access &= AccessFs::from_file(LL_ABI);
                    }
                    if seen.insert((path.clone(), access.bits())) {
                        granted.push((path, grant));
                        rules.push((fd, access));
                    }
                }
            }
        }

        let mut ruleset = ::landlock::Ruleset::default()
            .set_compatibility(level)
            .handle_access(AccessFs::from_all(LL_ABI))?;
        let mut net = BitFlags::<AccessNet>::EMPTY;
        if sandbox.tcp_connect.is_some() {
            net |= AccessNet::ConnectTcp;
        }
        if sandbox.tcp_bind.is_some() {
            net |= AccessNet::BindTcp;
        }
        if !net.is_empty() {
            ruleset = ruleset.handle_access(net)?;
        }
        let mut scopes = BitFlags::<Scope>::EMPTY;
        if sandbox.scope_signals {
            scopes |= Scope::Signal;
        }
        if sandbox.scope_abstract_unix {
            scopes |= Scope::AbstractUnixSocket;
        }
        if !scopes.is_empty() {
            ruleset = ruleset.scope(scopes)?;
        }
        let mut created = ruleset.create()?;
        for (fd, access) in rules {
            created = created.add_rule(PathBeneath::new(fd, access))?;
        }
        for port in sandbox.tcp_connect.iter().flatten() {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
        for port in sandbox.tcp_bind.iter().flatten() {
            created = created.add_rule(NetPort::new(*port, AccessNet::BindTcp))?;
        }
        Ok(Prepared {
            ruleset: created,
            report: Report {
                availability,
                expected,
                granted,
                skipped,
                unenforced,
            },
        })
    }
}

impl Prepared {
    /// Applies the sandbox to the calling process — call it from `pre_exec`, after fork, before
    /// exec (and after anything that still needs the parent's access, such as joining the cgroup
    /// through a descriptor opened earlier, which keeps working). Sets `no_new_privs`, then
    /// `landlock_restrict_self`. The child is single-threaded there, so the whole process is
    /// covered, and everything it executes inherits the restriction.
    ///
    /// Takes `&self` (a `pre_exec` closure is `FnMut`, and dropping a `Prepared` in the child would
    /// free memory): it duplicates the ruleset descriptor and applies the duplicate, so one
    /// `Prepared` serves any number of children. Async-signal-safe: no allocation, no lock.
    ///
    /// Fails with [`RestrictStep::Weaker`] (`ENOTSUP`) if the kernel enforced less than
    /// [`Prepared::expected`].
    pub fn restrict_self(&self) -> Result<Status, RestrictError> {
        let ruleset = self.ruleset.try_clone().map_err(|e| RestrictError {
            step: RestrictStep::Duplicate,
            errno: e.raw_os_error().unwrap_or(libc::EBADF),
        })?;
        let status = ruleset.restrict_self().map_err(|e| {
            let step = match &e {
                RulesetError::RestrictSelf(RestrictSelfError::SetNoNewPrivsCall { .. }) => {
                    RestrictStep::NoNewPrivs
                }
                _ => RestrictStep::RestrictSelf,
            };
            RestrictError {
                step,
                errno: *::landlock::Errno::from(e),
            }
        })?;
        let enforcement = match status.ruleset {
            RulesetStatus::FullyEnforced => Enforcement::Full,
            RulesetStatus::PartiallyEnforced => Enforcement::Partial,
            _ => Enforcement::None,
        };
        if enforcement < self.report.expected {
            return Err(RestrictError {
                step: RestrictStep::Weaker,
                errno: libc::ENOTSUP,
            });
        }
        Ok(Status {
            enforcement,
            no_new_privs: status.no_new_privs,
        })
    }

    /// What [`Prepared::restrict_self`] will give on this kernel (log it before spawning).
    pub fn expected(&self) -> Enforcement {
        self.report.expected
    }

    /// Optional paths that did not exist and were skipped.
    pub fn skipped(&self) -> &[PathBuf] {
        &self.report.skipped
    }

    /// Everything [`Ruleset::build`] found and did.
    pub fn report(&self) -> &Report {
        &self.report
    }
}
