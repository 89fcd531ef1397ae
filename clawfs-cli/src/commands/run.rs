//! `clawfs run --agent NAME -- CMD ARGS…` (CLI layer): starts CMD as agent NAME — inside the agent's
//! cgroup v2 group, as an unprivileged uid, with no_new_privs — forwards signals to it, waits for
//! every process of the run to exit, removes the run's group and exits with CMD's status.
//!
//! Identity comes from the cgroup alone: the child is created in `clawfs/agent-NAME/run-<pid>`
//! ([`clawfs_sandbox::spawn`]), while still root, and only then drops to the agent's uid and sets
//! no_new_privs, so neither it nor any descendant can write a `cgroup.procs` to leave. `CLAWFS_AGENT` is set for the agent's information only; the daemon never reads it.
//!
//! The command gets a session of its own (no controlling terminal: it cannot inject input into
//! the invoker's terminal with TIOCSTI). Forwarded signals go to its process group while it lives
//! — as a terminal's ^C would — and to every process left in the run's group after it has exited;
//! `clawfs run` returns when the last one is gone.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::anyhow;
use clawfs_core::store::Store;
use clawfs_sandbox::cgroup::{self, Cgroup2, RunGroup, DEFAULT_CONTROLLERS};
use clawfs_store::area::Area;
use clawfs_store::names::{check_system_name, DEFAULT_AGENTS};
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;
use tracing::warn;

use crate::error::Failure;
use crate::mounts;
use clawfs_args::run::RunArgs;
use clawfs_sandbox::runs::{RunRecord, RUNS_DIR};
use clawfs_sandbox::spawn;

/// First uid of the placeholder range: agent `i` of the roster runs as `AGENT_UID_BASE + i` until
/// the policy assigns uids.
pub const AGENT_UID_BASE: u32 = 61000;

/// Why a run does not start while an emergency stop is in force.
const ESTOP_IN_FORCE: &str = "an emergency stop is in force (clawfs estop): no agent may start until an admin runs `clawfs estop --clear`";
/// What the child answers when it finds the stop (no system call of its answers it).
const ESTOPPED: i32 = libc::ECANCELED;

/// Signals `clawfs run` passes on to the command (to the whole run once the command has exited).
pub const FORWARDED_SIGNALS: [i32; 6] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// Everything needed to start one agent process; [`run`] builds it from the command line, the
/// policy layer may build it itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// The agent (its group is `clawfs/agent-<agent>`).
    pub agent: String,
    /// The store the run serves (canonical), as its record says ([`clawfs_sandbox::runs`]).
    pub store: PathBuf,
    /// The uid the command runs as.
    pub uid: u32,
    /// The gid the command runs as.
    pub gid: u32,
    /// Supplementary groups: the ClawFS groups whose directories agents work in.
    pub groups: Vec<u32>,
    /// Allow uid or gid 0. Only an explicit policy decision should set this.
    pub allow_root: bool,
    /// Working directory, entered after dropping privileges (so as the agent); `None`: unchanged.
    pub cwd: Option<PathBuf>,
    /// Program and arguments.
    pub command: Vec<OsString>,
    /// Extra environment variables (`CLAWFS_AGENT` is always set).
    pub env: Vec<(OsString, OsString)>,
    /// cgroup interface files to write in the agent's group (`memory.max` → `1073741824`, …).
    pub limits: BTreeMap<String, String>,
    /// The kernel sandbox to apply (`None`: `--no-sandbox`): the store and the mount it is built
    /// for.
    pub sandbox: Option<(PathBuf, PathBuf)>,
    /// Programs outside the system directories the sandbox lets the run execute (`clawfs mcp`
    /// runs its own binary as the agent).
    pub programs: Vec<PathBuf>,
    /// The mount the run announces itself to (`<mount>/agents/self`, opened as the agent in its
    /// group before anything of the agent's runs: the daemon attaches its activity monitor
    /// before it answers): a mount of the store, never another store's (that would tell the
    /// wrong monitor). `None`: the store is not mounted (a `--no-sandbox` run), nobody to tell.
    pub mount: Option<PathBuf>,
    /// The store's emergency-stop flag: the child looks for it once it is in its group, before
    /// anything of the agent's runs (see [`crate::commands::estop`]). `None`: not looked for.
    pub estop_flag: Option<PathBuf>,
}

fn fail(msg: impl std::fmt::Display) -> Failure {
    Failure::Other(anyhow!("{msg}"))
}

/// `clawfs run`: returns the command's exit code (128 + N if it was killed by signal N).
pub fn run(args: &RunArgs) -> Result<u8, Failure> {
    // First, so that an unprivileged caller is told the real reason rather than "cannot read the
    // store".
    require_root()?;
    let spec = spec_from_args(args)?;
    execute(&spec)
}

/// Checks the command line against the store and builds the [`RunSpec`].
pub fn spec_from_args(args: &RunArgs) -> Result<RunSpec, Failure> {
    let agent = check_system_name(args.agent.as_ref())
        .map_err(|e| fail(format!("--agent: {e}")))?
        .to_string();
    let store = Store::open(&mounts::store_for(
        &args.store.store,
        args.mount.as_deref(),
    )?)?;
    let agents = store.root().join(Area::Agents.dir_name());
    if !agents.join(&agent).is_dir() {
        return Err(fail(format!(
            "unknown agent {agent:?}: no {} (known: {})",
            agents.join(&agent).display(),
            roster(store.root()).join(", ")
        )));
    }
    // The policy in force decides who may run and as which uid.
    let policy = installed_policy(&store)?;
    let spec_in_policy = clawfs_policy::AgentName::new(&agent)
        .ok()
        .and_then(|n| policy.agent(&n).cloned())
        .ok_or_else(|| {
            fail(format!(
                "agent {agent:?} is not in the policy ({}); add [agents.{agent}] there",
                clawfs_core::fs::POLICY_FILE
            ))
        })?;
    if crate::commands::estop::read_flag(store.root()).is_some() {
        return Err(fail(ESTOP_IN_FORCE));
    }
    if args.no_sandbox && !spec_in_policy.sandbox.require.is_empty() {
        return Err(fail(format!(
            "--no-sandbox refused: the policy requires sandbox layers for agent {agent} ([agents.{agent}.sandbox] require)"
        )));
    }
    let (uid, gid) = match (&args.user, spec_in_policy.run_as()) {
        (Some(u), _) => {
            let ids = parse_user(u).map_err(|e| fail(format!("--user {u}: {e}")))?;
            check_own_ids(store.root(), &policy, &agent, ids)
                .map_err(|e| fail(format!("--user {u}: {e}")))?;
            ids
        }
        (None, Some(ids)) => ids,
        (None, None) => {
            let uid = placeholder_uid(store.root(), &agent);
            (uid, uid)
        }
    };
    ensure_identity(&store, &agent, uid)?;
    let groups = [
        clawfs_core::seed::agents_group(),
        clawfs_core::seed::users_group(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let workspace = match &args.workspace {
        None => None,
        Some(ws) => {
            let ws =
                check_system_name(ws.as_ref()).map_err(|e| fail(format!("--workspace: {e}")))?;
            if !store
                .root()
                .join(Area::Workspaces.dir_name())
                .join(ws)
                .is_dir()
            {
                return Err(fail(format!("unknown workspace {ws:?}")));
            }
            Some(ws)
        }
    };
    // The sandbox and --workspace work through the mount; a --no-sandbox run without a
    // workspace can run while the store is not mounted.
    let mount = match mounts::mount_of_store(
        store.root(),
        store.daemon_info().map(|d| d.mountpoint).as_deref(),
        args.mount.as_deref(),
    ) {
        Ok(m) => Some(m),
        Err(mounts::MountError::NotMounted { .. })
            if args.no_sandbox && args.workspace.is_none() =>
        {
            None
        }
        Err(e) => return Err(e.into()),
    };
    if let (false, Some(mount)) = (args.no_sandbox, &mount) {
        let own = mount.join(Area::Agents.dir_name()).join(&agent);
        if !own.is_dir() {
            return Err(fail(format!(
                "{} is not there, although ClawFS serves {} at {}: the sandbox is built around the agent's directory; --no-sandbox runs outside it",
                own.display(),
                store.root().display(),
                mount.display()
            )));
        }
    }
    let cwd = match workspace {
        None => None,
        Some(ws) => {
            let dir = mount
                .as_ref()
                .expect("found: a run with --workspace needs the mount")
                .join(Area::Workspaces.dir_name())
                .join(ws);
            if !dir.is_dir() {
                return Err(fail(format!(
                    "{} is not there: you may not reach the workspace through the mount",
                    dir.display(),
                )));
            }
            Some(dir)
        }
    };
    Ok(RunSpec {
        store: store.root().to_path_buf(),
        limits: cgroup::load_quotas(store.root(), &agent).map_err(fail)?,
        agent,
        uid,
        gid,
        groups,
        allow_root: spec_in_policy.allow_root,
        cwd,
        command: args.command.clone(),
        env: Vec::new(),
        sandbox: match (args.no_sandbox, &mount) {
            (false, Some(m)) => Some((store.root().to_path_buf(), m.clone())),
            _ => None,
        },
        programs: Vec::new(),
        mount,
        estop_flag: Some(crate::commands::estop::flag_file(store.root())),
    })
}

/// The agents of a store: its `agents/` directories, sorted.
pub fn roster(store: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(store.join(Area::Agents.dir_name()))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A deterministic unprivileged uid for `agent` until the policy provides one:
/// [`AGENT_UID_BASE`] + its index in the default roster (P1.4 §2.2), then the store's other agents
/// in name order after those.
pub fn placeholder_uid(store: &Path, agent: &str) -> u32 {
    if let Some(i) = DEFAULT_AGENTS.iter().position(|a| *a == agent) {
        return AGENT_UID_BASE + i as u32;
    }
    let others: Vec<String> = roster(store)
        .into_iter()
        .filter(|a| !DEFAULT_AGENTS.contains(&a.as_str()))
        .collect();
    let i = others
        .iter()
        .position(|a| a == agent)
        .unwrap_or(others.len());
    AGENT_UID_BASE + (DEFAULT_AGENTS.len() + i) as u32
}

/// Parses `--user`: `UID`, `UID:GID`, `NAME` or `NAME:GROUP`. Without a group: the user's
/// primary group, or GID = UID for a uid without an account.
pub fn parse_user(s: &str) -> Result<(u32, u32), String> {
    use clawfs_store::accounts;
    let (user, group) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let (uid, primary) = match user.parse::<u32>() {
        Ok(uid) => (uid, accounts::user_of(uid).map_or(uid, |a| a.gid)),
        Err(_) => {
            let a = accounts::user_named(user).ok_or("no such user")?;
            (a.uid, a.gid)
        }
    };
    let gid = match group {
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => accounts::group_id(g).ok_or("no such group")?,
        },
    };
    Ok((uid, gid))
}

/// The shell-style exit code of a finished process: its code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        (None, None) => 1,
    }
}

pub fn require_root() -> Result<(), Failure> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(fail(
            "clawfs run must be started as root: it creates the agent's cgroup and then switches to the agent's uid",
        ));
    }
    Ok(())
}

/// Starts `spec` in its agent's group and waits for it: see the module documentation.
pub fn execute(spec: &RunSpec) -> Result<u8, Failure> {
    if spec.command.is_empty() {
        return Err(fail("no command to run"));
    }
    if !cgroup::valid_agent(&spec.agent) {
        return Err(fail(format!("invalid agent name {:?}", spec.agent)));
    }
    if (spec.uid == 0 || spec.gid == 0) && !spec.allow_root {
        return Err(fail(format!(
            "refusing to run agent {} as uid {} gid {}: root for an agent needs an explicit policy grant",
            spec.agent, spec.uid, spec.gid
        )));
    }
    require_root()?;
    let cg = Cgroup2::find().map_err(|e| {
        fail(format!(
            "{e}; clawfs run needs it to give agents an identity"
        ))
    })?;
    // Kept until the group is gone (dropped last): the daemon and `clawfs estop` learn from it whose run this is.
    let _record = RunRecord::create(&spec.store)
        .map_err(|e| fail(format!("recording the run in {}: {e}", RUNS_DIR)))?;
    let (group, report) = RunGroup::create(
        &cg,
        &spec.agent,
        std::process::id(),
        &DEFAULT_CONTROLLERS,
        &spec.limits,
    )
    .map_err(|e| {
        fail(format!(
            "setting up the cgroup of agent {}: {e}",
            spec.agent
        ))
    })?;
    if let Some(w) = report.warning() {
        warn!(agent = %spec.agent, "quotas not fully in force: {w}");
    }
    if let Some(v1) = report.v1_summary() {
        tracing::debug!(agent = %spec.agent, "hybrid cgroup host: {v1}");
    }
    let result = spawn_and_wait(spec, &group);
    // Whatever happened, nothing of this run may be left in its leaf before it is removed.
    if let Err(e) = group.run().wait_empty(None) {
        warn!(error = %e, "waiting for the run's group to empty");
    }
    if let Some(mount) = &spec.mount {
        settle(mount);
    }
    if let Err(e) = group.remove() {
        warn!(error = %e, "removing the run's cgroup");
    }
    result
}

/// Asks the daemon serving `mount` to put on record what the run did before it returns (its
/// monitor reads the kernel's reports of the run's refusals a little later than they happen);
/// while the run's group and this process still exist, so that the daemon can tell whose run it
/// was. A daemon that does not answer in time is only warned about.
fn settle(mount: &Path) {
    let mut answer = [0u8; 16];
    match rustix::fs::getxattr(mount, clawfs_core::fs::SETTLE_XATTR, &mut answer) {
        Ok(n) if &answer[..n] == b"settled" => {}
        Ok(_) => {
            warn!(mount = %mount.display(), "the run's last refusals may reach the audit trail after it returns: the daemon's monitor did not catch up in time")
        }
        Err(e) => {
            warn!(mount = %mount.display(), error = %e, "asking the daemon to record the run's last activity")
        }
    }
}

/// The caller's environment variables a sandboxed run keeps (everything else is dropped).
const SANDBOX_ENV: [&str; 9] = [
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME",
];

/// The policy in force: the one installed in the store, refused if it was changed behind
/// ClawFS's back (as the daemon refuses it).
pub(crate) fn installed_policy(store: &Store) -> Result<clawfs_policy::Policy, Failure> {
    clawfs_core::fs::installed_policy(store.root_fd()).map_err(|errors| {
        fail(
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        )
    })
}

/// The sandbox layers of `spec`'s run, prepared before the clone.
fn prepare_sandbox(
    spec: &RunSpec,
    store: &Path,
    mount: &Path,
) -> Result<clawfs_sandbox::layers::Layers, Failure> {
    let store = Store::open(store)?;
    let policy = installed_policy(&store)?;
    let layers = clawfs_sandbox::layers::prepare(
        clawfs_sandbox::layers::StoreDir {
            path: store.root(),
            fd: store.root_fd(),
        },
        &policy,
        mount,
        &spec.agent,
        (spec.uid, spec.gid),
        &spec.programs,
    )
    .map_err(|e| {
        fail(format!(
            "preparing the sandbox of agent {}: {e}",
            spec.agent
        ))
    })?;
    tracing::debug!(agent = %spec.agent, landlock = ?layers.landlock.report(), "sandbox prepared");
    Ok(layers)
}

/// Waits for `pid` to exit without reaping it, so that its pid cannot be reused while a
/// forwarded signal may still be sent to it.
fn wait_exited(pid: libc::pid_t) -> io::Result<()> {
    loop {
        // SAFETY: siginfo_t is plain data; all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`, which outlives the call.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn spawn_and_wait(spec: &RunSpec, group: &RunGroup) -> Result<u8, Failure> {
    let shown = spec.command[0].to_string_lossy().into_owned();
    // Everything the child needs is prepared here: between clone and exec it may only make
    // async-signal-safe calls (no allocation, no locks).
    let join = |e: cgroup::CgroupError| fail(format!("joining the agent's cgroup: {e}"));
    let dir = group.run().dir_file().map_err(join)?;
    let procs = group.run().procs_file().map_err(join)?;
    // Hybrid host: the run's groups in the cgroup v1 hierarchies of the controllers (and limits)
    // cgroup v2 lacks here, joined by the child through their `tasks` files.
    let v1_tasks = group
        .v1()
        .iter()
        .map(|g| g.run().tasks_file())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("joining the agent's cgroup v1 groups: {e}")))?;
    let v1_fds: Vec<libc::c_int> = v1_tasks.iter().map(|f| f.as_raw_fd()).collect();
    let cwd = spec
        .cwd
        .as_ref()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .transpose()
        .map_err(|_| fail("working directory contains a NUL byte"))?;
    let announce_path = spec
        .mount
        .as_ref()
        .map(|m| m.join(Area::Agents.dir_name()).join("self"));
    // Where a ClawFS answers at the mount, the run must reach it: an agent the monitor has not
    // heard of would run unrecorded until the daemon's next look at the agent groups.
    let must_announce = announce_path.as_ref().is_some_and(|p| p.exists());
    let announce = announce_path
        .as_ref()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .transpose()
        .map_err(|_| fail("the mount's path contains a NUL byte"))?;
    let (uid, gid) = (spec.uid, spec.gid);
    let groups: Vec<libc::gid_t> = spec.groups.clone();
    let estop_flag = spec
        .estop_flag
        .as_ref()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .transpose()
        .map_err(|_| fail("the store's path contains a NUL byte"))?;

    let layers = match &spec.sandbox {
        Some((store, mount)) => Some(prepare_sandbox(spec, store, mount)?),
        None => None,
    };
    // A sandboxed run without a working directory of its own stays where it was started, as
    // its namespace shows that path (see step 4).
    let stay = match (&cwd, &layers) {
        (None, Some(l)) => {
            let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).ok();
            let here = std::env::current_dir().ok().and_then(|d| c(&d));
            here.zip(c(l.tmp.path()))
        }
        _ => None,
    };
    let mut env: BTreeMap<OsString, OsString> = match &layers {
        // A sandboxed agent gets no token the operator's shell happens to hold: only the
        // variables programs need to run, and its own HOME and TMPDIR.
        Some(l) => SANDBOX_ENV
            .iter()
            .filter_map(|k| Some((OsString::from(k), std::env::var_os(k)?)))
            .chain([
                ("HOME".into(), l.tmp.path().into()),
                ("TMPDIR".into(), l.tmp.path().into()),
            ])
            .collect(),
        None => std::env::vars_os().collect(),
    };
    env.extend(spec.env.iter().cloned());
    env.insert("CLAWFS_AGENT".into(), spec.agent.clone().into());
    let program = spawn::Program::new(&spec.command, env)
        .map_err(|e| fail(format!("cannot start {shown}: {e}")))?;
    let in_child = || -> io::Result<()> {
        let check = |r: libc::c_int| {
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // 0. A session of its own: the command has no controlling terminal, so it cannot push
        //    input into the terminal of whoever started it (TIOCSTI needs the tty to be the
        //    caller's controlling one); terminal signals reach `clawfs run`, which forwards them.
        // SAFETY: setsid has no arguments; the new child is not a group leader.
        if unsafe { libc::setsid() } < 0 {
            return Err(io::Error::last_os_error());
        }
        // 0b. A stop recorded after `clawfs run` looked: the child is in its group now, so a
        //     stop recorded after this look finds it there and kills it (`clawfs estop` writes
        //     the flag before it looks for groups).
        if let Some(flag) = &estop_flag {
            // SAFETY: `flag` is a NUL-terminated string that lives as long as the closure;
            // faccessat is async-signal-safe.
            if unsafe { libc::faccessat(libc::AT_FDCWD, flag.as_ptr(), libc::F_OK, 0) } == 0 {
                return Err(io::Error::from_raw_os_error(ESTOPPED));
            }
        }
        // 1. The child was created in the run's cgroup v2 group, which names it the agent; it
        //    joins the run's cgroup v1 groups, if any, while still root (they are root-owned: it
        //    cannot leave them either).
        for &fd in &v1_fds {
            // SAFETY: `fd` is open (the parent keeps `v1_tasks` until spawn returns); the buffer
            // is a static one-byte string.
            if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        // 1b. AppArmor, where the host has it: the agent's profile from its exec on (written
        //     while still root, before Landlock closes /proc/self/attr).
        if let Some(onexec) = layers.as_ref().and_then(|l| l.apparmor.as_ref()) {
            onexec.apply()?;
        }
        // 1c. The host's /tmp, /var/tmp and /dev/shm covered but for what its Landlock rules
        //     reach there, in a mount namespace of its own (needs root).
        if let Some(l) = &layers {
            l.private_tmp.enter()?;
        }
        // 2. Drop privileges: the ClawFS groups only, then gid, then uid (all capabilities go).
        // SAFETY: plain syscalls with valid arguments; the list outlives the call.
        unsafe {
            check(libc::setgroups(groups.len(), groups.as_ptr()))?;
            check(libc::setgid(gid))?;
            check(libc::setuid(uid))?;
        }
        // 3. No set-uid binary or file capability can give privileges back.
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) has no memory arguments.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        // 3b. Announce the agent to the daemon: its activity monitor is attached before the
        //     open returns. Where no ClawFS answers (a --no-sandbox run without a mount) there
        //     is nobody to tell; O_NONBLOCK: a FIFO there cannot hold the run.
        if let Some(announce) = &announce {
            // SAFETY: `announce` is a NUL-terminated string that lives as long as the closure;
            // open and close are async-signal-safe.
            unsafe {
                let fd = libc::open(
                    announce.as_ptr(),
                    libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
                );
                if fd >= 0 {
                    libc::close(fd);
                } else if must_announce {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        // 4. Enter the working directory as the agent, so the daemon checks the agent's access.
        if let Some(dir) = &cwd {
            // SAFETY: `dir` is a NUL-terminated string that lives as long as the closure.
            check(unsafe { libc::chdir(dir.as_ptr()) })?;
        } else if let Some((here, fallback)) = &stay {
            // The inherited working directory is the host's folder, whatever now covers its
            // path: it is entered again by path in the agent's namespace (the mount, say), or
            // else the run starts in its private directory.
            // SAFETY: both are NUL-terminated strings that live as long as the closure.
            if unsafe { libc::chdir(here.as_ptr()) } != 0 {
                // SAFETY: as above.
                check(unsafe { libc::chdir(fallback.as_ptr()) })?;
            }
        }
        // 5. Landlock: from here on the process reaches only its part of the mount, its
        //    temporary directory and the system files programs need.
        if let Some(l) = &layers {
            l.landlock.restrict_self()?;
        }
        // 6. Nothing the caller had open reaches the agent but stdin, stdout and stderr: an
        //    inherited descriptor (a root shell's file, a tool call it opened) would act with
        //    the rights of whoever opened it.
        // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only marks descriptors close-on-exec.
        let marked = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if marked != 0 {
            return Err(io::Error::last_os_error());
        }
        // 7. seccomp, last: after it only whitelisted system calls work.
        if let Some(l) = &layers {
            l.seccomp.load()?;
        }
        Ok(())
    };

    // Registered before the child exists, so that a signal arriving in between is not lost: it
    // waits in `signals` and is forwarded once the forwarder starts.
    // The cgroup-level network layer of a sandboxed run, on its leaf before the child joins it,
    // detached when this function returns (the run has ended; its group is removed after).
    let _network = layers
        .as_ref()
        .and_then(|l| clawfs_sandbox::layers::attach_network(group.run().path(), &l.network));
    let mut signals = Signals::new(FORWARDED_SIGNALS)
        .map_err(|e| fail(format!("installing signal handlers: {e}")))?;
    let handle = signals.handle();
    let cgroup = spawn::Cgroup {
        dir: dir.as_fd(),
        procs: procs.as_fd(),
    };
    // SAFETY: `in_child` makes only async-signal-safe system calls on data prepared above.
    let pid = match unsafe { spawn::spawn(&program, cgroup, in_child) } {
        Ok(pid) => pid,
        Err(e) if e.raw_os_error() == Some(ESTOPPED) => {
            handle.close();
            return Err(fail(ESTOP_IN_FORCE));
        }
        Err(e) => {
            handle.close();
            let announce = match (&announce_path, must_announce) {
                (Some(path), true) if e.raw_os_error() == Some(libc::EPERM) => format!(
                    " (the daemon refused the agent's announcement at {}: its uid owns files counted for another agent; see the audit trail, rule ONE-UID)",
                    path.display()
                ),
                (Some(path), true) => format!(
                    " (before it starts, the agent announces itself by opening {}: it must be able to reach the mount)",
                    path.display()
                ),
                _ => String::new(),
            };
            return Err(fail(format!(
                "cannot start {shown} as agent {} (uid {uid}, gid {gid}): {e}{announce}",
                spec.agent
            )));
        }
    };
    drop((dir, procs, v1_tasks));

    // `Some(pid)` while the child is alive and unreaped; the forwarder signals under this lock.
    let alive = Arc::new(Mutex::new(Some(pid)));
    let forwarder = {
        let alive = Arc::clone(&alive);
        let leaf = group.run().clone();
        std::thread::spawn(move || {
            for sig in signals.forever() {
                let guard = alive.lock().unwrap_or_else(PoisonError::into_inner);
                let targets = match *guard {
                    // The command's process group (it leads it, see setsid above), as a terminal
                    // would signal it; valid while the command is unreaped.
                    Some(pid) => vec![-pid],
                    // The command is gone but some of its descendants are not: signal them.
                    None => leaf
                        .pids()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|p| p as libc::pid_t)
                        .collect(),
                };
                for p in targets {
                    // SAFETY: kill has no memory arguments; `p` is our unreaped child's group
                    // or a member of the run's cgroup.
                    unsafe { libc::kill(p, sig) };
                }
            }
        })
    };

    let waited = wait_exited(pid);
    *alive.lock().unwrap_or_else(PoisonError::into_inner) = None;
    let status = waited.and_then(|()| spawn::wait(pid));
    // Stragglers (background jobs of the command) keep the run alive, and receive forwarded
    // signals, until they exit.
    let emptied = group.run().wait_empty(None);
    handle.close();
    let _ = forwarder.join();
    let status = status.map_err(|e| fail(format!("waiting for {shown}: {e}")))?;
    emptied.map_err(|e| fail(format!("waiting for the run to end: {e}")))?;
    Ok(exit_code(status))
}

/// Creates the agent's identity.json on its first run (P1.4 §5.4), owned by the agent. The
/// agent's directory is the agent's to write: reached by descriptor, no symlink followed.
fn ensure_identity(store: &Store, agent: &str, uid: u32) -> Result<(), Failure> {
    let dir = Path::new(Area::Agents.dir_name()).join(agent);
    let shown = store.root().join(&dir).join("identity.json");
    match clawfs_store::beneath::open(
        store.root_fd(),
        &dir.join("identity.json"),
        rustix::fs::OFlags::PATH,
        0,
    ) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(format!("{}: {e}", shown.display()))),
    }
    let doc = clawfs_core::identity::new_identity(agent, &clawfs_store::clock::now_rfc3339());
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("a Value serialises");
    bytes.push(b'\n');
    let how = clawfs_store::beneath::FileMode {
        mode: 0o640,
        owner: Some((uid, clawfs_core::seed::agents_group().unwrap_or(0))),
    };
    store
        .write_beneath(&dir, "identity.json", &bytes, how)
        .map_err(|e| fail(format!("creating {}: {e}", shown.display())))
}

/// One agent, one uid: `--user` may not name a uid or gid that is another agent's (its ids in
/// the policy, or its placeholder ids when the policy gives none; the owner of its directory;
/// the uid of a process running as it now; a uid whose files are counted for it). Sharing them would let one agent ptrace or signal
/// the other, or read what the other's group may read. (Root is refused later, unless the
/// policy says `allow_root`.)
fn check_own_ids(
    store: &Path,
    policy: &clawfs_policy::Policy,
    agent: &str,
    (uid, gid): (u32, u32),
) -> Result<(), String> {
    for other in roster(store).into_iter().filter(|a| a != agent) {
        let placeholder = placeholder_uid(store, &other);
        let (o_uid, o_gid) = clawfs_policy::AgentName::new(&other)
            .ok()
            .and_then(|n| policy.agent(&n).and_then(|s| s.run_as()))
            .unwrap_or((placeholder, placeholder));
        let owner = fs::metadata(store.join(Area::Agents.dir_name()).join(&other))
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .filter(|&u| u != 0);
        if o_uid == uid || owner == Some(uid) {
            return Err(format!(
                "uid {uid} is agent {other}'s; give {agent} a uid of its own"
            ));
        }
        if o_gid == gid && gid != 0 {
            return Err(format!(
                "gid {gid} is agent {other}'s; give {agent} a group of its own"
            ));
        }
    }
    // The files a uid owns are counted for the agent it last acted as: a uid that holds an
    // other agent's files would hand them, and their quota, to this one.
    if let Some(other) = crate::commands::quota::agent_holding(store, uid).filter(|a| a != agent) {
        return Err(format!(
            "uid {uid} owns files counted for agent {other} (clawfs quota); give {agent} a uid of its own, or remove those files and run clawfs quota rescan"
        ));
    }
    // Root is refused on its own (below); a run's child is still root for a moment, inside its
    // agent's group, before it drops to its uid.
    if let Some(other) = running_agent_with_uid(uid)
        .filter(|a| a != agent)
        .filter(|_| uid != 0)
    {
        return Err(format!(
            "uid {uid} is running as agent {other} now; give {agent} a uid of its own"
        ));
    }
    Ok(())
}

/// The agent a live process with real or effective uid `uid` runs as, if any.
fn running_agent_with_uid(uid: u32) -> Option<String> {
    let procs = fs::read_dir("/proc").ok()?;
    procs.filter_map(Result::ok).find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let status = fs::read_to_string(e.path().join("status")).ok()?;
        let ids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        if !ids.contains(&uid) {
            return None;
        }
        cgroup::agent_of_pid(pid).ok().flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_specs() {
        assert_eq!(parse_user("1234:99").unwrap(), (1234, 99));
        assert_eq!(parse_user("4000000").unwrap(), (4000000, 4000000));
        assert_eq!(parse_user("root").unwrap(), (0, 0));
        assert_eq!(parse_user("0:root").unwrap(), (0, 0));
        assert!(parse_user("no-such-user-xyz").is_err());
        assert!(parse_user("1:no-such-group-xyz").is_err());
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
    }

    #[test]
    fn placeholder_uids_are_stable_and_unprivileged() {
        let dir = tempfile::tempdir().unwrap();
        for a in ["zeta", "alpha", "fs-engine"] {
            fs::create_dir_all(dir.path().join("agents").join(a)).unwrap();
        }
        let fs_engine = DEFAULT_AGENTS
            .iter()
            .position(|a| *a == "fs-engine")
            .unwrap();
        assert_eq!(
            placeholder_uid(dir.path(), "fs-engine"),
            AGENT_UID_BASE + fs_engine as u32
        );
        assert_eq!(placeholder_uid(dir.path(), "alpha"), AGENT_UID_BASE + 8);
        assert_eq!(placeholder_uid(dir.path(), "zeta"), AGENT_UID_BASE + 9);
    }
}
