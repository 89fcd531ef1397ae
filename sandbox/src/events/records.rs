//! What an event becomes on the audit trail: an activity record, a refusal (with the rule that
//! refused it, and the namespace path where it was in the mount), or nothing.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use clawfs_audit::AuditEvent;
use clawfs_ebpf::{Event, EventKind, Refusal, RefusedObject};

use super::{Out, Shared, RULE_KERNEL, RULE_NETWORK, RULE_SECCOMP};

/// What to record of `ev`, if anything (see the module documentation).
pub(super) fn to_out(shared: &Shared, ev: &Event) -> Option<Out> {
    match &ev.kind {
        EventKind::Refused(r) => refusal(shared, ev, r),
        EventKind::Seccomp { nr, errno } => {
            // ENOSYS tells the program to fall back (clone3 -> clone): nothing was refused.
            if *errno == libc::ENOSYS {
                return None;
            }
            let name = clawfs_seccomp::syscall_name(*nr).unwrap_or_else(|| format!("syscall-{nr}"));
            let reason = clawfs_seccomp::refusal_reason(&name);
            Some(Out::Refusal(
                AuditEvent::new(&ev.agent, ev.pid, name, "").denied(*errno, RULE_SECCOMP, reason),
            ))
        }
        _ => to_record(&ev.agent, ev, &shared.mountpoint).map(Out::Record),
    }
}

/// What to record of a call the kernel refused: a denial on the mount or of the network; an
/// open refused elsewhere is activity, recorded with its errno.
fn refusal(shared: &Shared, ev: &Event, r: &Refusal) -> Option<Out> {
    let op = clawfs_seccomp::syscall_name(r.nr).unwrap_or_else(|| format!("syscall-{}", r.nr));
    match &r.object {
        RefusedObject::Inet { addr, port } => {
            // A datagram sent to an address is UDP; a connect is taken for TCP (the event does
            // not say which socket type made it).
            let scheme = if matches!(op.as_str(), "connect" | "bind" | "socket") {
                "tcp"
            } else {
                "udp"
            };
            let dest = match addr {
                std::net::IpAddr::V4(a) => format!("{scheme}://{a}:{port}"),
                std::net::IpAddr::V6(a) => format!("{scheme}://[{a}]:{port}"),
            };
            let setting = format!("[agents.{}.sandbox] network in the policy", ev.agent);
            let reason = match op.as_str() {
                "bind" => format!(
                    "the agent's network setting does not allow it to listen or receive on {dest}: only \"all\" does ({setting})"
                ),
                "socket" => format!(
                    "the agent's network setting is \"none\": it may not open an IPv4 or IPv6 socket ({setting})"
                ),
                _ => format!("the agent's egress filter does not allow connecting to {dest} ({setting})"),
            };
            Some(Out::Refusal(
                AuditEvent::new(&ev.agent, ev.pid, op, dest).denied(r.errno, RULE_NETWORK, reason),
            ))
        }
        RefusedObject::Unix { .. } => None,
        RefusedObject::Path { path, dirfd, base } => {
            let Some(ns) = in_mount(shared, ev, path, *dirfd, *base) else {
                let is_open = matches!(op.as_str(), "open" | "openat" | "openat2" | "creat");
                return (is_open
                    && path.starts_with('/')
                    && !Path::new(path).starts_with(&shared.mountpoint))
                .then(|| {
                    Out::Record(
                        AuditEvent::new(&ev.agent, ev.pid, "open", path.clone()).failed(r.errno),
                    )
                });
            };
            // The kernel names the calling thread in a FUSE request.
            if shared.fs.answered_refusal(ev.tid, r.span_ns) {
                return None;
            }
            // Where the kernel enforced the policy itself (the ACLs of agent folders,
            // workspaces and secrets), the record says which rule and why, as the daemon would.
            if let Some((fuse_op, denial)) = policy_refusal(shared, ev, &op, &ns) {
                let reason = format!("the kernel refused {op}: {}", denial.reason);
                return Some(Out::Refusal(
                    AuditEvent::new(&ev.agent, ev.pid, fuse_op, ns).denied(
                        r.errno,
                        denial.rule,
                        reason,
                    ),
                ));
            }
            let reason = format!(
                "the kernel refused {op} before it reached ClawFS: the permissions of the file or of a directory on its path do not allow it (in a sandboxed run, its Landlock rules may refuse it too)"
            );
            Some(Out::Refusal(
                AuditEvent::new(&ev.agent, ev.pid, op, ns).denied(r.errno, RULE_KERNEL, reason),
            ))
        }
    }
}

/// The policy's own refusal of the system call `op` on `ns` by the event's agent, if the
/// policy refuses it, with the name of the operation the daemon would have seen: the kernel
/// applied the policy from the ACLs ClawFS reports. The access is the call's: an open of a
/// name that is not there would have created it.
fn policy_refusal(
    shared: &Shared,
    ev: &Event,
    op: &str,
    ns: &str,
) -> Option<(String, clawfs_policy::Denial)> {
    use clawfs_policy::{Access, AgentName, Identity, NsPath};
    let path = NsPath::parse(ns).ok()?;
    // Looked for in the store, never through the mount this daemon serves.
    let exists =
        || clawfs_store::tree::stat(shared.fs.store_fd(), ns.trim_start_matches('/')).is_ok();
    let (access, fuse_op) = match op {
        "open" | "openat" | "openat2" | "creat" if !exists() => (Access::Create, "create"),
        "open" | "openat" | "openat2" => (Access::Read, "open"),
        "mkdir" | "mkdirat" => (Access::Create, "mkdir"),
        "link" | "linkat" => (Access::Create, "link"),
        "mknod" | "mknodat" | "symlink" | "symlinkat" => (Access::Create, op),
        "rename" | "renameat" | "renameat2" => (Access::Delete, "rename"),
        "unlink" | "unlinkat" | "rmdir" => (Access::Delete, op),
        "chmod" | "fchmodat" | "fchmodat2" | "chown" | "lchown" | "fchownat" | "truncate"
        | "utimensat" | "setxattr" | "lsetxattr" | "removexattr" | "lremovexattr" => {
            (Access::Write, op)
        }
        _ => (Access::Read, op),
    };
    let who = Identity::Agent(AgentName::new(&ev.agent).ok()?);
    let denial = shared.fs.policy().check(&who, access, &path).err()?;
    Some((fuse_op.to_string(), denial))
}

/// The namespace path of a refused path, if it is in the mount. A relative path is made absolute
/// from the directory it was relative to, as the kernel saw it (its device and inode, read at the
/// call): a node of this mount gives its namespace path; a directory elsewhere is found in
/// `/proc` (the process's working directory or `dirfd`) if the process is still there and that
/// is still the same directory. The symlinks of the existing part are then followed, as the
/// kernel did: a refusal reached through `openat(fd of "/", "…/mnt/…")` or through a link to a
/// directory in the mount is placed too.
fn in_mount(
    shared: &Shared,
    ev: &Event,
    path: &str,
    dirfd: i32,
    base: Option<(u32, u64)>,
) -> Option<String> {
    let absolute = if path.starts_with('/') {
        // The caller's /proc/self, not the daemon's.
        let own = if let Some(rest) = path.strip_prefix("/proc/thread-self/") {
            format!("/proc/{}/task/{}/{rest}", ev.pid, ev.tid)
        } else if let Some(rest) = path.strip_prefix("/proc/self/") {
            format!("/proc/{}/{rest}", ev.pid)
        } else {
            path.to_string()
        };
        PathBuf::from(own)
    } else {
        let (dev, ino) = base?;
        let mount_dev = *shared.mount_dev.get_or_init(|| {
            clawfs_store::mountinfo::mount_at(&shared.mountpoint)
                .ok()
                .flatten()
                .map(|m| clawfs_ebpf::kernel_dev(m.dev))
        });
        let dir = if mount_dev == Some(dev) {
            let ns = shared.fs.ns_path_of_ino(ino)?;
            shared.mountpoint.join(ns.trim_start_matches('/'))
        } else {
            let link = if dirfd == libc::AT_FDCWD {
                format!("/proc/{}/task/{}/cwd", ev.pid, ev.tid)
            } else {
                format!("/proc/{}/fd/{dirfd}", ev.pid)
            };
            let dir = std::fs::read_link(link).ok()?;
            let md = std::fs::metadata(&dir).ok()?;
            (clawfs_ebpf::kernel_dev(md.dev()) == dev && md.ino() == ino).then_some(dir)?
        };
        dir.join(path)
    };
    let resolved = normalize(Path::new("/"), &resolve_links(&absolute).to_string_lossy())?;
    let rest = resolved.strip_prefix(&shared.mountpoint).ok()?;
    Some(format!("/{}", rest.display()))
}

/// `path` with the symlinks of its longest existing ancestor resolved (`canonicalize`), the rest
/// (what did not exist: the file refused creation) appended as it is.
fn resolve_links(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// `base` joined with `path`, `.` and `..` resolved by name (no file system access); `None` if
/// `..` climbs above `/`.
fn normalize(base: &Path, path: &str) -> Option<PathBuf> {
    let mut out = base.to_path_buf();
    for c in Path::new(path).components() {
        match c {
            std::path::Component::RootDir => out = PathBuf::from("/"),
            std::path::Component::CurDir | std::path::Component::Prefix(_) => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            std::path::Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

/// The audit record of `ev`, or `None` for an open the daemon audits itself (see the module
/// documentation).
pub fn to_record(agent: &str, ev: &Event, mountpoint: &Path) -> Option<AuditEvent> {
    let (op, path) = match &ev.kind {
        EventKind::Exec { filename } => ("exec", filename.clone()),
        EventKind::Connect { addr, port } => (
            "connect",
            match addr {
                std::net::IpAddr::V4(a) => format!("tcp://{a}:{port}"),
                std::net::IpAddr::V6(a) => format!("tcp://[{a}]:{port}"),
            },
        ),
        EventKind::ConnectUnix { path } => ("connect", path.clone()),
        EventKind::Open { path, errno } => {
            let p = Path::new(path);
            if !p.is_absolute() || p.starts_with(mountpoint) {
                return None;
            }
            let ev = AuditEvent::new(agent, ev.pid, "open", path.clone());
            return Some(if *errno == 0 { ev } else { ev.failed(*errno) });
        }
        EventKind::Refused(_) | EventKind::Seccomp { .. } => return None,
    };
    Some(AuditEvent::new(agent, ev.pid, op, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind) -> Event {
        Event {
            agent: "a".into(),
            cgroup_id: 1,
            pid: 7,
            tid: 7,
            kind,
        }
    }

    #[test]
    fn opens_in_the_mount_or_relative_are_dropped() {
        let mp = Path::new("/mnt/claw");
        let open = |p: &str| {
            to_record(
                "a",
                &ev(EventKind::Open {
                    path: p.into(),
                    errno: 0,
                }),
                mp,
            )
        };
        assert!(open("/mnt/claw/agents/a/x").is_none());
        assert!(open("x/y").is_none());
        assert!(open("").is_none());
        let r = open("/etc/hostname").unwrap();
        assert_eq!(
            (r.operation.as_ref(), r.path.as_str()),
            ("open", "/etc/hostname")
        );
        assert!(open("/mnt/clawx/y").is_some());
    }

    #[test]
    fn normalize_resolves_dots_by_name() {
        let n = |b: &str, p: &str| normalize(Path::new(b), p).map(|p| p.display().to_string());
        assert_eq!(n("/agents/a", "x/./y").as_deref(), Some("/agents/a/x/y"));
        assert_eq!(n("/agents/a", "../b/f").as_deref(), Some("/agents/b/f"));
        assert_eq!(n("/agents", "../../etc"), None);
        assert_eq!(n("/x", "/etc/../tmp").as_deref(), Some("/tmp"));
    }

    #[test]
    fn connect_paths() {
        let mp = Path::new("/m");
        let r = to_record(
            "a",
            &ev(EventKind::Connect {
                addr: "127.0.0.1".parse().unwrap(),
                port: 80,
            }),
            mp,
        )
        .unwrap();
        assert_eq!(r.path, "tcp://127.0.0.1:80");
        let r = to_record(
            "a",
            &ev(EventKind::Connect {
                addr: "::1".parse().unwrap(),
                port: 443,
            }),
            mp,
        )
        .unwrap();
        assert_eq!(r.path, "tcp://[::1]:443");
    }
}
