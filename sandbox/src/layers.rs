//! The kernel sandbox `clawfs run` puts around an agent process (unless `--no-sandbox`), prepared
//! before the clone and applied in the child: AppArmor where the host has it (the agent's
//! profile from its exec on), then, after it has dropped to the agent's uid, Landlock (the
//! agent's part of the mount, a private temporary directory and the system files programs need;
//! never the store) and seccomp (the store's `system/seccomp/whitelist.json`, loaded last); the
//! eBPF egress filter on its cgroup. cgroup quotas apply to every run, sandboxed or not.
//!
//! The agent's `[agents.NAME.sandbox]` policy section adds to this: `read` paths (read-only),
//! `network` (Landlock's TCP connect rule, by port) and `require` (layers without which the run
//! refuses to start), see `policy/README.md`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::cgroup::{Cgroup2, CgroupV1, DEFAULT_CONTROLLERS};
use crate::landlock::{Compat, Prepared, Ruleset, Sandbox};
use clawfs_policy::{AgentName, Grant, Layer, Network, Policy, SandboxSpec};
use clawfs_store::area::Area;
use std::os::fd::BorrowedFd;

/// The layers of one sandboxed run, ready to apply in the child.
pub struct Layers {
    /// Landlock's ruleset.
    pub landlock: Prepared,
    /// The seccomp filter.
    pub seccomp: clawfs_seccomp::Filter,
    /// The run's private temporary directory (also its `HOME` and `TMPDIR`).
    pub tmp: TempDir,
    /// The agent's own view of the host's shared temporary places (see [`PrivateTmp`]).
    pub private_tmp: PrivateTmp,
    /// The TCP ports the policy allows (`None`: unrestricted): Landlock's rule.
    pub tcp_connect: Option<Vec<u16>>,
    /// What the policy allows on the network, addresses resolved now: the cgroup-level rule of
    /// [`attach_network`], which also covers UDP, binds and the cloud metadata addresses.
    pub network: clawfs_ebpf::Allow,
    /// The agent's AppArmor profile, loaded, to enter at exec (`None`: AppArmor is not active
    /// here, which `clawfs sandbox check` reports).
    pub apparmor: Option<clawfs_apparmor::OnExec>,
}

/// Attaches the eBPF network filter `allow` to the run's cgroup v2 leaf `leaf`, before the
/// child joins it: TCP and UDP connects and UDP datagrams by address and port (Landlock's TCP
/// rule under it knows ports only), binds, new IPv4/IPv6 sockets under `"none"`, and the cloud
/// metadata addresses whatever the setting (unless an allow list names them); detached when the
/// returned value is dropped. Where eBPF is not available (not root with CAP_BPF, programs not
/// built, old kernel) it is skipped with a warning: Landlock's TCP rules still apply, UDP and
/// the metadata addresses are then open.
pub fn attach_network(
    leaf: &Path,
    allow: &clawfs_ebpf::Allow,
) -> Option<clawfs_ebpf::EgressFilter> {
    match clawfs_ebpf::EgressFilter::attach(leaf, allow.clone()) {
        Ok(p) => {
            tracing::debug!(leaf = %leaf.display(), ?allow, "eBPF network filter attached");
            Some(p)
        }
        Err(e) => {
            tracing::warn!(leaf = %leaf.display(), error = %e, "eBPF network filter not applied: TCP is limited by port (Landlock); UDP and the cloud metadata addresses are not limited");
            None
        }
    }
}

/// What a `network` setting allows, host names resolved now (a name that does not resolve
/// allows nothing, with a warning).
pub fn endpoints(network: &Network) -> clawfs_ebpf::Allow {
    use clawfs_ebpf::{Allow, Endpoint};
    let list = match network {
        Network::All => return Allow::All,
        Network::None => return Allow::None,
        Network::Allow(list) => list,
    };
    let mut out = Vec::new();
    for e in list {
        let Some(host) = &e.host else {
            out.push(Endpoint::any_host(e.port));
            continue;
        };
        match (host.parse::<std::net::IpAddr>(), e.prefix) {
            (Ok(addr), Some(prefix)) => out.push(Endpoint {
                addr: Some(addr),
                prefix,
                port: e.port,
            }),
            (Ok(addr), None) => out.push(Endpoint::host(addr, e.port)),
            (Err(_), _) => match std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), e.port))
            {
                Ok(addrs) => out.extend(addrs.map(|a| Endpoint::host(a.ip(), e.port))),
                Err(err) => {
                    tracing::warn!(host, error = %err, "network allow list: the host does not resolve; it allows nothing")
                }
            },
        }
    }
    out.sort();
    out.dedup();
    Allow::To(out)
}

/// A directory removed, with what is in it, when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Why the sandbox could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The store could not be opened.
    #[error("the store: {0}")]
    Store(#[source] std::io::Error),
    /// The private temporary directory.
    #[error("the run's temporary directory: {0}")]
    Tmp(std::io::Error),
    /// The Landlock ruleset.
    #[error("Landlock: {0}")]
    Landlock(#[from] crate::landlock::Error),
    /// The whitelist file.
    #[error("{path}: {source}")]
    Whitelist {
        /// The file.
        path: String,
        /// What is wrong.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A layer the policy's `require` names is not available.
    #[error(
        "the policy requires the {layer} layer ([agents.{agent}.sandbox] require), but {why}; refusing to start without it"
    )]
    Required {
        /// The agent.
        agent: String,
        /// The missing layer.
        layer: Layer,
        /// Why it is not available.
        why: String,
    },
    /// The policy restricts the network and Landlock cannot enforce it here.
    #[error(
        "[agents.{agent}.sandbox] network restricts TCP connections, but {why}; refusing to start with the network open"
    )]
    Network {
        /// The agent.
        agent: String,
        /// Why it cannot be enforced.
        why: String,
    },
    /// The agent's AppArmor profile could not be rendered or loaded.
    #[error("AppArmor profile of agent {agent}: {why}")]
    AppArmor {
        /// The agent.
        agent: String,
        /// What failed.
        why: String,
    },
    /// A `read` path of the policy may not be granted.
    #[error("[agents.{agent}.sandbox] read: {path}: {why}")]
    ReadPath {
        /// The agent.
        agent: String,
        /// The path.
        path: String,
        /// Why it is refused.
        why: String,
    },
}

/// The store a run is prepared for: its directory, and a descriptor of it.
#[derive(Clone, Copy, Debug)]
pub struct StoreDir<'a> {
    /// The store directory (canonical).
    pub path: &'a Path,
    /// A descriptor of it: what is read of the store is read beneath it.
    pub fd: BorrowedFd<'a>,
}

/// The whitelist, relative to the store.
const WHITELIST: &str = "system/seccomp/whitelist.json";

/// Prepares the sandbox of `agent` (running as `uid`:`gid`) over the mount at `mount`;
/// `programs` may be executed besides the system's.
pub fn prepare(
    store: StoreDir<'_>,
    policy: &Policy,
    mount: &Path,
    agent: &str,
    (uid, gid): (u32, u32),
    programs: &[PathBuf],
) -> Result<Layers, SandboxError> {
    let spec = AgentName::new(agent)
        .ok()
        .and_then(|n| policy.agent(&n).map(|a| a.sandbox.clone()))
        .unwrap_or_default();
    let mut rules = Sandbox::agent_defaults();
    for path in &spec.read {
        check_read_path(store, agent, path)?;
        rules.read.push(path.clone());
    }
    for program in programs {
        check_read_path(store, agent, program)?;
        rules.read_exec.push(program.clone());
    }
    rules.tcp_connect = spec.network.tcp_connect_ports();
    rules.tcp_bind = spec.network.tcp_bind_ports();
    let landlock_abi = crate::landlock::abi();
    if rules.tcp_connect.is_some() && landlock_abi.abi_version() < 4 {
        return Err(SandboxError::Network {
            agent: agent.to_string(),
            why: match &landlock_abi {
                crate::landlock::Availability::NotAvailable { why } => {
                    format!("Landlock is not available: {why}")
                }
                available => {
                    format!("the kernel has {available}, and TCP rules need ABI 4 (Linux 6.7)")
                }
            },
        });
    }
    check_required(store, agent, &spec, &rules, &landlock_abi)?;
    if spec.require.contains(&Layer::Landlock) {
        rules.compat = Compat::Require;
    }
    let tmp = private_tmp(agent, uid, gid).map_err(SandboxError::Tmp)?;
    rules.read.push(mount.to_path_buf());
    rules
        .read_write
        .push(mount.join(Area::Agents.dir_name()).join(agent));
    rules.read_write.push(tmp.path().to_path_buf());
    // The agent tools are file calls: a call descriptor is opened read-write, a request file
    // created, a response removed (the daemon decides each call as the agent).
    for dir in ["call", "requests", "responses"] {
        rules
            .read_write
            .push(mount.join(Area::Tools.dir_name()).join(dir));
    }
    if let Ok(name) = AgentName::new(agent) {
        for ws in workspaces(store) {
            if policy.workspace_grant(&name, &ws) == Grant::ReadWrite {
                let dir = mount.join(Area::Workspaces.dir_name()).join(&ws);
                if dir.is_dir() {
                    rules.read_write.push(dir);
                }
            }
        }
    }
    rules.deny.push(store.path.to_path_buf());
    let apparmor = apparmor_layer(&apparmor_inputs(
        store.path,
        agent,
        mount,
        &rules,
        tmp.path(),
    ))?;
    let private_tmp = PrivateTmp::new(
        rules
            .read
            .iter()
            .chain(&rules.read_write)
            .chain(&rules.read_exec)
            .map(PathBuf::as_path),
    )
    .map_err(SandboxError::Tmp)?;
    let landlock = Ruleset::build(&rules)?;
    let whitelist_error =
        |source: Box<dyn std::error::Error + Send + Sync>| SandboxError::Whitelist {
            path: store.path.join(WHITELIST).display().to_string(),
            source,
        };
    let text = clawfs_store::beneath::read(store.fd, Path::new(WHITELIST), 1 << 20)
        .map_err(|e| whitelist_error(Box::new(e)))?
        .ok_or_else(|| whitelist_error("missing".into()))?;
    let text = String::from_utf8(text).map_err(|e| whitelist_error(Box::new(e)))?;
    let seccomp = clawfs_seccomp::Whitelist::parse(&text)
        .and_then(|w| w.compile())
        .map_err(|e| whitelist_error(Box::new(e)))?;
    Ok(Layers {
        landlock,
        seccomp,
        tmp,
        private_tmp,
        tcp_connect: rules.tcp_connect.clone(),
        network: endpoints(&spec.network),
        apparmor,
    })
}

/// The AppArmor profile inputs of a run: the same paths as its Landlock rules.
pub fn apparmor_inputs(
    store: &Path,
    agent: &str,
    mount: &Path,
    rules: &Sandbox,
    tmp: &Path,
) -> clawfs_apparmor::ProfileInputs {
    let own_dir = mount.join(Area::Agents.dir_name()).join(agent);
    clawfs_apparmor::ProfileInputs {
        agent: agent.to_string(),
        mount: mount.to_path_buf(),
        read_write: rules
            .read_write
            .iter()
            .filter(|p| p.starts_with(mount) && **p != own_dir)
            .cloned()
            .collect(),
        own_dir,
        read_only: rules
            .read
            .iter()
            .filter(|p| *p != mount && !Sandbox::agent_defaults().read.contains(p))
            .cloned()
            .collect(),
        store: store.to_path_buf(),
        tmp: tmp.to_path_buf(),
        network: match &rules.tcp_connect {
            Some(ports) if ports.is_empty() => clawfs_apparmor::Network::Deny,
            _ => clawfs_apparmor::Network::Allow,
        },
    }
}

/// Renders and loads the agent's profile where AppArmor is active; `None` elsewhere.
fn apparmor_layer(
    inputs: &clawfs_apparmor::ProfileInputs,
) -> Result<Option<clawfs_apparmor::OnExec>, SandboxError> {
    if !clawfs_apparmor::availability().usable() {
        return Ok(None);
    }
    let refuse = |why: String| SandboxError::AppArmor {
        agent: inputs.agent.clone(),
        why,
    };
    let profile = clawfs_apparmor::render(inputs).map_err(|e| refuse(e.to_string()))?;
    clawfs_apparmor::load(&profile).map_err(|e| refuse(e.to_string()))?;
    clawfs_apparmor::OnExec::new(&inputs.agent)
        .map(Some)
        .map_err(|e| refuse(e.to_string()))
}

/// Refuses a policy `read` path that is the store, inside it or above it (the policy parser
/// already refused relative paths, `/`, `/etc` and the default deny list, but not the store this
/// run uses).
fn check_read_path(store: StoreDir<'_>, agent: &str, path: &Path) -> Result<(), SandboxError> {
    let refuse = |why: String| SandboxError::ReadPath {
        agent: agent.to_string(),
        path: path.display().to_string(),
        why,
    };
    if !path.is_absolute() {
        return Err(refuse("not an absolute path".to_string()));
    }
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let store_root = real(store.path);
    for p in [path.to_path_buf(), real(path)] {
        if p.starts_with(&store_root) || store_root.starts_with(&p) {
            return Err(refuse(format!(
                "would expose the store {}, which agents reach only through the mount",
                store_root.display()
            )));
        }
    }
    Ok(())
}

/// Checks every layer the policy's `require` names.
fn check_required(
    store: StoreDir<'_>,
    agent: &str,
    spec: &SandboxSpec,
    rules: &Sandbox,
    landlock: &crate::landlock::Availability,
) -> Result<(), SandboxError> {
    for &layer in &spec.require {
        let missing = match layer {
            Layer::Landlock => {
                let abi = landlock.abi_version();
                if abi == 0 {
                    Some(format!("Landlock is {landlock}"))
                } else if abi < rules.needed_abi() {
                    Some(format!(
                        "the kernel's Landlock ABI {abi} leaves unenforced: {}",
                        rules.unenforced_on(abi).join(", ")
                    ))
                } else {
                    None
                }
            }
            Layer::Seccomp => {
                let a = clawfs_seccomp::available();
                (!a.usable()).then(|| a.to_string())
            }
            Layer::Cgroup => cgroup_in_force(store, agent).err(),
            Layer::Apparmor => {
                let a = clawfs_apparmor::availability();
                (!a.usable()).then(|| a.to_string())
            }
        };
        if let Some(why) = missing {
            return Err(SandboxError::Required {
                agent: agent.to_string(),
                layer,
                why,
            });
        }
    }
    Ok(())
}

/// Whether the agent's cgroup, which `clawfs run` set up before the sandbox is prepared, has
/// every controller ClawFS uses and every limit of `system/cgroup/quotas.json` in force (the
/// same conditions under which the setup report has no warning).
fn cgroup_in_force(store: StoreDir<'_>, agent: &str) -> Result<(), String> {
    let cg = Cgroup2::cached().map_err(|e| format!("cgroup v2 is not usable: {e}"))?;
    let dir = cg.agent_dir(agent);
    let enabled = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|e| format!("the agent's cgroup {} cannot be read: {e}", dir.display()))?;
    let enabled: Vec<&str> = enabled.split_whitespace().collect();
    let v1 = CgroupV1::find_all().unwrap_or_default();
    let through_v1 = |c: &str| v1.iter().any(|h| h.has(c) && h.agent_dir(agent).is_dir());
    let mut missing: Vec<&str> = DEFAULT_CONTROLLERS
        .iter()
        .copied()
        .filter(|c| !enabled.contains(c) && !through_v1(c))
        .collect();
    let limits = crate::cgroup::load_quotas(store.path, agent).map_err(|e| e.to_string())?;
    let mut not_enforced = Vec::new();
    for key in limits.keys() {
        let controller = key.split('.').next().unwrap_or_default();
        if !dir.join(key).exists() && !through_v1(controller) {
            not_enforced.push(key.as_str());
        }
    }
    missing.dedup();
    if missing.is_empty() && not_enforced.is_empty() {
        return Ok(());
    }
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!(
            "controllers not enabled for the agent's group: {}",
            missing.join(", ")
        ));
    }
    if !not_enforced.is_empty() {
        parts.push(format!("limits not enforced: {}", not_enforced.join(", ")));
    }
    Err(format!(
        "cgroup limits are not fully in force ({})",
        parts.join("; ")
    ))
}

/// The workspaces of the store.
fn workspaces(store: StoreDir<'_>) -> Vec<String> {
    std::fs::read_dir(store.path.join(Area::Workspaces.dir_name()))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The host's shared temporary folders, hidden from a sandboxed agent.
const SHARED_TMP: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// The most paths a run keeps under the shared temporary folders (its private directory, the
/// mount, its `read` paths there).
const MAX_KEPT: usize = 16;

/// The host's shared temporary folders as a sandboxed agent sees them, in a mount namespace of
/// its own: each is an empty tmpfs, with only what its Landlock rules reach there (its private
/// directory, the mount, its `read` paths) put back at the same paths. Landlock keeps the
/// agent out of the rest, but not an inotify watch, which would name the files every other
/// user and agent makes there and report their activity. The namespace is entered while the
/// child is still root (no user namespace needed); mounts of the host still reach it (a slave
/// of the host's), its own never leave it.
pub struct PrivateTmp {
    /// The shared folders there are, covered in this order.
    covered: Vec<std::ffi::CString>,
    /// The kept paths (none below another), each with the folders to make, outermost first,
    /// on the tmpfs before it is put back, and whether it is a file (a program run from there:
    /// its mount point is an empty file).
    kept: Vec<Kept>,
    /// Mounts the namespace lets go of, deepest first: those the tmpfs would only hide, and
    /// every other ClawFS mount. A copy held here would keep that mount's connection, and its
    /// daemon, alive after the host unmounts it.
    detached: Vec<std::ffi::CString>,
}

/// A path [`PrivateTmp`] puts back: where, the folders to make for it, and whether it is a file.
struct Kept {
    path: std::ffi::CString,
    dirs: Vec<std::ffi::CString>,
    file: bool,
}

impl PrivateTmp {
    /// Covers the shared temporary folders, keeping the paths of `reach` below them (those that
    /// exist: Landlock grants nothing on a missing path either).
    fn new<'a>(reach: impl IntoIterator<Item = &'a Path>) -> std::io::Result<PrivateTmp> {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::other(format!("{} holds a NUL byte", p.display())))
        };
        let shared: Vec<&Path> = SHARED_TMP
            .iter()
            .map(Path::new)
            .filter(|p| p.is_dir() && !p.is_symlink())
            .collect();
        let reach: Vec<&Path> = reach.into_iter().collect();
        let mut kept: Vec<PathBuf> = reach
            .iter()
            .copied()
            .filter(|p| shared.iter().any(|s| p.starts_with(s) && p != s))
            .filter(|p| p.symlink_metadata().is_ok())
            .map(Path::to_path_buf)
            .collect();
        kept.sort();
        kept.dedup();
        let outermost: Vec<PathBuf> = kept
            .iter()
            .filter(|p| !kept.iter().any(|q| q != *p && p.starts_with(q)))
            .cloned()
            .collect();
        if outermost.len() > MAX_KEPT {
            return Err(std::io::Error::other(format!(
                "more than {MAX_KEPT} sandbox paths under the shared temporary folders"
            )));
        }
        let kept = outermost
            .iter()
            .map(|k| {
                let base = shared.iter().find(|s| k.starts_with(s)).expect("filtered");
                let file = !k.is_dir();
                let mut dirs: Vec<std::ffi::CString> = k
                    .ancestors()
                    .skip(usize::from(file))
                    .take_while(|a| a != base)
                    .map(c)
                    .collect::<std::io::Result<_>>()?;
                dirs.reverse();
                Ok(Kept {
                    path: c(k)?,
                    dirs,
                    file,
                })
            })
            .collect::<std::io::Result<_>>()?;
        let mounts = clawfs_store::mountinfo::read().unwrap_or_default();
        let mut detached: Vec<PathBuf> = mounts
            .into_iter()
            .filter(|m| {
                let p = &m.mount_point;
                let hidden = shared.iter().any(|s| p.starts_with(s) && p != s);
                let other_clawfs = clawfs_store::mountinfo::is_clawfs(m)
                    && !reach.iter().any(|r| p.starts_with(r) || r.starts_with(p));
                hidden || other_clawfs
            })
            .map(|m| m.mount_point)
            .collect();
        detached.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        detached.dedup();
        Ok(PrivateTmp {
            covered: shared.into_iter().map(c).collect::<std::io::Result<_>>()?,
            kept,
            detached: detached
                .iter()
                .map(|p| c(p))
                .collect::<std::io::Result<_>>()?,
        })
    }

    /// Enters the namespace. Between clone and exec: system calls on data prepared before,
    /// no allocation.
    pub fn enter(&self) -> std::io::Result<()> {
        const OPEN_TREE_CLONE: libc::c_uint = 1;
        const AT_RECURSIVE: libc::c_uint = 0x8000;
        const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
        let check = |r: libc::c_long| match r {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        };
        let none = std::ptr::null::<libc::c_char>();
        let mut trees: [libc::c_int; MAX_KEPT] = [-1; MAX_KEPT];
        // SAFETY: every pointer is null or a NUL-terminated string that outlives the call; the
        // descriptors are this function's own.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS).into())?;
            check(
                libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                )
                .into(),
            )?;
            // Detached copies of what is kept, taken before their folders are covered.
            for (i, Kept { path, .. }) in self.kept.iter().enumerate() {
                let fd = libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
                );
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                trees[i] = fd as libc::c_int;
            }
            // Gone from this namespace only; one already gone (or not a mount) is no matter.
            for mount in &self.detached {
                libc::umount2(mount.as_ptr(), libc::MNT_DETACH);
            }
            for dir in &self.covered {
                check(
                    libc::mount(
                        c"tmpfs".as_ptr(),
                        dir.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        c"size=16m,mode=0755".as_ptr().cast(),
                    )
                    .into(),
                )?;
            }
            for (i, Kept { path, dirs, file }) in self.kept.iter().enumerate() {
                for d in dirs {
                    if libc::mkdir(d.as_ptr(), 0o755) != 0
                        && *libc::__errno_location() != libc::EEXIST
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if *file {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                        0o644,
                    );
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
                check(libc::syscall(
                    libc::SYS_move_mount,
                    trees[i],
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ))?;
                libc::close(trees[i]);
            }
        }
        Ok(())
    }
}

/// A new directory under the system's temporary directory, the agent's alone (0700).
fn private_tmp(agent: &str, uid: u32, gid: u32) -> std::io::Result<TempDir> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(std::io::Error::other)?;
    let dir = std::env::temp_dir().join(format!("clawfs-{agent}-{}", hex::encode(random)));
    std::fs::create_dir(&dir)?;
    let dir = TempDir(dir);
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_of_a_run_has_its_landlock_paths_and_passes_apparmor_parser() {
        let mount = Path::new("/clawfs");
        let mut rules = Sandbox::agent_defaults();
        rules.read.push(PathBuf::from("/opt/data"));
        rules.read.push(mount.to_path_buf());
        for p in ["agents/a", "workspaces/default", "tools/call"] {
            rules.read_write.push(mount.join(p));
        }
        rules.read_write.push(PathBuf::from("/tmp/clawfs-a-0011"));
        rules.tcp_connect = Some(Vec::new());
        let inputs = apparmor_inputs(
            Path::new("/var/lib/clawfs"),
            "a",
            mount,
            &rules,
            Path::new("/tmp/clawfs-a-0011"),
        );
        assert_eq!(inputs.own_dir, mount.join("agents/a"));
        assert_eq!(
            inputs.read_write,
            [mount.join("workspaces/default"), mount.join("tools/call")]
        );
        assert_eq!(inputs.read_only, [PathBuf::from("/opt/data")]);
        assert_eq!(inputs.network, clawfs_apparmor::Network::Deny);
        let profile = clawfs_apparmor::render(&inputs).unwrap();
        assert!(profile.contains("/var/lib/clawfs"), "{profile}");
        if !clawfs_apparmor::availability().can_check() {
            println!(
                "apparmor_parser -Q not run: {}",
                clawfs_apparmor::availability()
            );
            return;
        }
        clawfs_apparmor::check(&profile).unwrap();
    }

    /// What a run's namespace puts back under the shared temporary folders: paths that exist
    /// (a missing one would fail the run's start), a program file as a file.
    #[test]
    fn the_private_tmp_keeps_what_exists_and_programs_as_files() {
        let dir = tempfile::Builder::new()
            .prefix("clawfs-kept.")
            .tempdir_in("/tmp")
            .unwrap();
        let program = dir.path().join("bin/tool");
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let missing = dir.path().join("not-there");
        let t = PrivateTmp::new([program.as_path(), missing.as_path()]).unwrap();
        let kept: Vec<(String, bool)> = t
            .kept
            .iter()
            .map(|k| (k.path.to_string_lossy().into_owned(), k.file))
            .collect();
        assert_eq!(kept, vec![(program.display().to_string(), true)]);
        let dirs: Vec<String> = t.kept[0]
            .dirs
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            dirs,
            vec![
                dir.path().display().to_string(),
                dir.path().join("bin").display().to_string()
            ]
        );
    }
}
