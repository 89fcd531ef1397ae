//! The seccomp-BPF filter of ClawFS agent processes (docs/sandbox.md).
//!
//! ```no_run
//! use std::os::unix::process::CommandExt;
//! use std::process::Command;
//!
//! let text = std::fs::read_to_string("/clawfs/system/seccomp/whitelist.json")?;
//! let whitelist = clawfs_seccomp::Whitelist::parse(&text)?; // validate: errors name the entry
//! let filter = whitelist.compile()?; // before fork: libseccomp builds the BPF program
//! let mut cmd = Command::new("sh");
//! // SAFETY: Filter::load only makes system calls (no allocation, no lock).
//! unsafe { cmd.pre_exec(move || filter.load()) }; // in the child, last, before exec
//! let status = cmd.status()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Whatever the whitelist says, the syscalls of [`ALWAYS_DENIED`] are refused and `clone` may not
//! set the namespace flags of [`NAMESPACE_CLONE_FLAGS`]. See README.md for the file format.

mod avail;
mod compile;
mod constants;
mod error;
mod whitelist;

pub use avail::{available, Availability};

/// The whitelist a new store gets (`system/seccomp/whitelist.json`).
pub const DEFAULT_WHITELIST: &str = include_str!("../default-whitelist.json");
pub use compile::Filter;
pub use error::Error;
pub use whitelist::{Action, CondOp, Condition, Rule, Whitelist};

/// A syscall refused whatever the whitelist says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlwaysDenied {
    /// The syscall.
    pub name: &'static str,
    /// A fixed errno, or `None` for the whitelist's refusal (`default_action`, or EPERM when that
    /// is `log`; a `deny` entry of the whitelist may choose `kill` or another errno instead).
    pub errno: Option<i32>,
    /// Why it is refused.
    pub why: &'static str,
}

const fn denied(name: &'static str, why: &'static str) -> AlwaysDenied {
    AlwaysDenied {
        name,
        errno: None,
        why,
    }
}

/// Syscalls no agent process may make, whatever the whitelist says.
pub const ALWAYS_DENIED: &[AlwaysDenied] = &[
    denied("ptrace", "inspect and control other processes (read their memory, secrets, keys)"),
    denied("process_vm_readv", "read another process's memory"),
    denied("process_vm_writev", "write another process's memory"),
    denied("pidfd_getfd", "steal a file descriptor from another process (ptrace-equivalent)"),
    denied("mount", "change the mount table (hide or replace /clawfs, bind over files)"),
    denied("umount2", "unmount /clawfs or the views built for the agent"),
    denied("pivot_root", "change the root filesystem"),
    denied("move_mount", "new mount API: move mounts"),
    denied("fsopen", "new mount API: create a filesystem context"),
    denied("fsmount", "new mount API: create a mount"),
    denied("fsconfig", "new mount API: configure a filesystem context"),
    denied("open_tree", "new mount API: clone mount trees"),
    denied("mount_setattr", "new mount API: change mount flags (e.g. drop read-only)"),
    denied("open_by_handle_at", "open files by handle, bypassing path checks (the 'shocker' escape)"),
    denied("unshare", "new namespaces: a user namespace grants capabilities inside it and a large kernel attack surface"),
    denied("setns", "join another process's namespaces"),
    denied("bpf", "load eBPF programs and maps"),
    denied("perf_event_open", "performance counters: side channels, kernel attack surface"),
    denied("keyctl", "the kernel keyring holds the vault's keys"),
    denied("add_key", "the kernel keyring holds the vault's keys"),
    denied("request_key", "the kernel keyring holds the vault's keys"),
    denied("io_uring_setup", "io_uring performs I/O without syscalls the filter can see"),
    denied("io_uring_enter", "io_uring performs I/O without syscalls the filter can see"),
    denied("io_uring_register", "io_uring performs I/O without syscalls the filter can see"),
    denied("kexec_load", "replace the running kernel"),
    denied("kexec_file_load", "replace the running kernel"),
    denied("init_module", "load kernel modules"),
    denied("finit_module", "load kernel modules"),
    denied("delete_module", "unload kernel modules"),
    denied("userfaultfd", "stall the kernel in page faults: a classic exploitation primitive"),
    AlwaysDenied {
        name: "clone3",
        errno: Some(libc::ENOSYS),
        why: "its flags live in a struct in memory that seccomp cannot read, so namespace flags \
              cannot be filtered; ENOSYS (not EPERM) makes glibc fall back to clone(), whose flags \
              the filter checks",
    },
];

/// The always-denied entry of a syscall, if it is one.
pub fn always_denied(name: &str) -> Option<&'static AlwaysDenied> {
    ALWAYS_DENIED.iter().find(|d| d.name == name)
}

/// `clone` flags that create namespaces. A `clone` with any of them set is refused (with the
/// whitelist's refusal), whatever the whitelist says: CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET,
/// CLONE_NEWPID, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP.
pub const NAMESPACE_CLONE_FLAGS: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP) as u64;

#[cfg(test)]
mod tests;

/// The name of system call `nr` of the native architecture, if libseccomp knows it.
pub fn syscall_name(nr: i32) -> Option<String> {
    libseccomp::ScmpSyscall::from(nr).get_name().ok()
}

/// Why the sandbox's filter refuses system call `name`, in one sentence for the agent.
pub fn refusal_reason(name: &str) -> String {
    match always_denied(name) {
        Some(d) => format!(
            "the sandbox's seccomp filter refuses {name} to every agent ({})",
            d.why
        ),
        None => format!(
            "the sandbox's seccomp filter refuses {name}: it is not in system/seccomp/whitelist.json, or not with these arguments"
        ),
    }
}
