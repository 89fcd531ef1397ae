//! The arguments of `clawfs mount`.

use std::path::PathBuf;

use clap::Args;

use crate::StoreArg;

/// Arguments of `clawfs mount`.
#[derive(Debug, Clone, Args)]
pub struct MountArgs {
    /// Where to mount (an existing, empty directory).
    pub mountpoint: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
    /// Stay attached to the terminal instead of running in the background.
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Serve file I/O through the daemon instead of kernel FUSE passthrough.
    #[arg(long)]
    pub no_passthrough: bool,
    /// Worker threads serving requests.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    /// Microseconds one worker keeps watching for the next request after each one, at idle
    /// priority, before it sleeps; 0 turns it off. Saves a sleeping worker's wake-up on each
    /// round trip of a busy caller, using only CPU time no other thread wants
    /// (docs/architecture.md).
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub busy_poll: u32,
    /// Serve requests only through /dev/fuse, even when the kernel offers FUSE over io_uring
    /// (its fuse.enable_uring parameter, which `scripts/setup.sh` turns on). With io_uring,
    /// each CPU has a queue served by a thread on that CPU, so a caller's round trip stays on
    /// its CPU (docs/architecture.md).
    #[arg(long)]
    pub no_io_uring: bool,
    /// Open files and folders one caller (a uid other than root) may hold through the mount at
    /// once; past it, opens fail with EMFILE (audited, rule OPEN-FILES). Each holds one of the
    /// daemon's descriptors, so no caller can take them from the others or from the daemon,
    /// which also keeps a reserve for its own files and a share for root (ENFILE when callers
    /// together hold the rest). 0: no limit per caller [default: 8192, at most an eighth of
    /// what callers other than root may hold together].
    #[arg(long, value_name = "N")]
    pub max_open_per_caller: Option<u64>,
    /// Do not record the audit trail (for measuring its cost; policy decisions still apply).
    #[arg(long)]
    pub no_audit: bool,
    /// Also record what agent processes do outside ClawFS's own requests: their opens outside
    /// the mount, their connects, and the system calls the kernel refused them (file modes and
    /// ACLs, Landlock, seccomp, the network filter). This hooks every system call of the host
    /// while an agent runs, which then takes the kernel's slower path (a loop of system calls
    /// ~1.6x as long); without it, only agents' execs are hooked, at no cost to other calls.
    #[arg(long)]
    pub trace_syscalls: bool,
    /// Seconds the kernel may cache names and attributes [default: 10, or 1 in a store that
    /// hosts share, where another host's changes show after at most this long].
    #[arg(long, value_name = "SECONDS")]
    pub attr_timeout: Option<f64>,
    /// Do not index the workspaces (semantic_search and `clawfs search` then find nothing; for
    /// measuring indexing's cost).
    #[arg(long)]
    pub no_search: bool,
    /// Serve even if system/ differs from vault/system-manifest.json (recorded on the audit
    /// trail); without it such a store is refused (exit 5).
    #[arg(long)]
    pub allow_tampered_system: bool,
    /// Access times: as the store's filesystem keeps them (relatime, normally), never updated
    /// by reads (noatime), or not by listing folders (nodiratime). strictatime is not offered.
    #[arg(long, value_enum, default_value_t = AtimeArg::Relatime)]
    pub atime: AtimeArg,
    /// Serve Prometheus metrics at http://ADDR/metrics (OpenMetrics text): a PORT listens on
    /// the loopback address only, HOST:PORT where it says. Off by default; nothing is
    /// recorded without it.
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Serve as this host of a store that hosts share (see `clawfs host`); default: the
    /// CLAWFS_HOST environment variable, else the name `clawfs host join --local` recorded in
    /// /etc/clawfs/host. A host that has not joined the store is refused.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

/// `clawfs mount --atime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AtimeArg {
    /// The store's filesystem's rule.
    Relatime,
    /// Reads never update access times.
    Noatime,
    /// Listing a folder never updates its access time.
    Nodiratime,
}

/// `--metrics`: `PORT` (loopback) or `HOST:PORT`.
fn metrics_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("{s:?} is neither a port (9567, on the loopback address) nor HOST:PORT (127.0.0.1:9567, [::1]:9567)")
    })
}
