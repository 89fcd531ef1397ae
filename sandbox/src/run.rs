//! Running one agent process: started inside its run's cgroup (created in it: [`crate::spawn`])
//! while still root, then as the agent's unprivileged uid with no_new_privs, in its kernel
//! sandbox ([`crate::layers`]); signals forwarded to it; waited for until every process of the
//! run has exited; the run's group removed. `clawfs run` builds the [`RunSpec`].
//!
//! The command gets a session of its own (no controlling terminal: it cannot inject input into
//! the invoker's terminal with TIOCSTI). Forwarded signals go to its process group while it lives
//! — as a terminal's ^C would — and to every process left in the run's group after it has exited;
//! [`execute`] returns when the last one is gone.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};

use clawfs_policy::Policy;
use clawfs_store::agent_groups::NoCgroup2;
use clawfs_store::area::Area;
use clawfs_store::layout::SETTLE_XATTR;
use rustix::fs::{Mode, OFlags};
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;
use tracing::warn;

use crate::cgroup::{self, Cgroup2, CgroupError, RunGroup, DEFAULT_CONTROLLERS};
use crate::layers::{Layers, SandboxError, StoreDir};
use crate::runs::{RunRecord, RUNS_DIR};
use crate::spawn;

/// What the child answers when it finds the stop (no system call of its answers it).
const ESTOPPED: i32 = libc::ECANCELED;

/// Signals `clawfs run` passes on to the command (to the whole run once the command has exited).
pub const FORWARDED_SIGNALS: [i32; 6] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// Everything needed to start one agent process (`clawfs run` builds it from its command line).
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The agent (its group is `clawfs/agent-<agent>`).
    pub agent: String,
    /// The store the run serves (canonical), as its record says ([`crate::runs`]).
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
    /// The kernel sandbox to apply (`None`: `--no-sandbox`).
    pub sandbox: Option<SandboxFor>,
    /// Programs outside the system directories the sandbox lets the run execute (`clawfs mcp`
    /// runs its own binary as the agent).
    pub programs: Vec<PathBuf>,
    /// The mount the run announces itself to (`<mount>/agents/self`, opened as the agent in its
    /// group before anything of the agent's runs: the daemon attaches its activity monitor
    /// before it answers): a mount of the store, never another store's (that would tell the
    /// wrong monitor). `None`: the store is not mounted (a `--no-sandbox` run), nobody to tell.
    pub mount: Option<PathBuf>,
    /// The store's emergency-stop flag: the child looks for it once it is in its group, before
    /// anything of the agent's runs (`clawfs estop`). `None`: not looked for.
    pub estop_flag: Option<PathBuf>,
}

/// What a run's sandbox is built for: the store (whose whitelist it loads, and which it keeps
/// out of reach), the mount it reaches it through, and the policy in force.
#[derive(Clone, Debug)]
pub struct SandboxFor {
    /// The store directory.
    pub store: PathBuf,
    /// Where the store is mounted.
    pub mount: PathBuf,
    /// The policy installed in the store.
    pub policy: Policy,
}

/// Why a run could not start, or could not be waited for.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No program was given.
    #[error("no command to run")]
    NoCommand,
    /// The agent's name cannot name a group.
    #[error("invalid agent name {0:?}")]
    InvalidAgent(String),
    /// uid or gid 0 without the policy's grant.
    #[error("refusing to run agent {agent} as uid {uid} gid {gid}: root for an agent needs an explicit policy grant")]
    RootRefused {
        /// The agent.
        agent: String,
        /// The uid asked for.
        uid: u32,
        /// The gid asked for.
        gid: u32,
    },
    /// Not started as root.
    #[error("clawfs run must be started as root: it creates the agent's cgroup and then switches to the agent's uid")]
    NotRoot,
    /// No cgroup v2 hierarchy.
    #[error("{0}; clawfs run needs it to give agents an identity")]
    NoCgroup2(#[source] NoCgroup2),
    /// The run's record could not be written.
    #[error("recording the run in {RUNS_DIR}: {0}")]
    Record(#[source] io::Error),
    /// The run's groups could not be set up.
    #[error("setting up the cgroup of agent {agent}: {source}")]
    Group {
        /// The agent.
        agent: String,
        /// What failed.
        #[source]
        source: CgroupError,
    },
    /// The run's groups could not be opened to join them.
    #[error("joining the agent's cgroup: {0}")]
    Join(#[source] CgroupError),
    /// A path holds a NUL byte.
    #[error("the {0} contains a NUL byte")]
    Nul(&'static str),
    /// The program (or its environment) cannot be passed to exec.
    #[error("cannot start {program}: {source}")]
    Program {
        /// The program.
        program: String,
        /// What is wrong.
        #[source]
        source: io::Error,
    },
    /// The sandbox could not be prepared.
    #[error("preparing the sandbox of agent {agent}: {source}")]
    Sandbox {
        /// The agent.
        agent: String,
        /// What failed.
        #[source]
        source: SandboxError,
    },
    /// Signal forwarding could not be set up.
    #[error("installing signal handlers: {0}")]
    Signals(#[source] io::Error),
    /// An emergency stop was found once the child was in its group.
    #[error("an emergency stop is in force (clawfs estop): no agent may start until an admin runs `clawfs estop --clear`")]
    Estopped,
    /// The child could not become the agent's program.
    #[error("cannot start {program} as agent {agent} (uid {uid}, gid {gid}): {source}{announce}")]
    Start {
        /// The program.
        program: String,
        /// The agent.
        agent: String,
        /// Its uid.
        uid: u32,
        /// Its gid.
        gid: u32,
        /// What failed.
        #[source]
        source: io::Error,
        /// Why the announcement failed, when it did.
        announce: String,
    },
    /// The program could not be waited for.
    #[error("waiting for {program}: {source}")]
    Wait {
        /// The program.
        program: String,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The run's group could not be waited for.
    #[error("waiting for the run to end: {0}")]
    Emptying(#[source] CgroupError),
}

/// The shell-style exit code of a finished process: its code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        (None, None) => 1,
    }
}

/// Starts `spec` in its agent's group and waits for it: see the module documentation.
pub fn execute(spec: &RunSpec) -> Result<u8, RunError> {
    if spec.command.is_empty() {
        return Err(RunError::NoCommand);
    }
    if !cgroup::valid_agent(&spec.agent) {
        return Err(RunError::InvalidAgent(spec.agent.clone()));
    }
    if (spec.uid == 0 || spec.gid == 0) && !spec.allow_root {
        return Err(RunError::RootRefused {
            agent: spec.agent.clone(),
            uid: spec.uid,
            gid: spec.gid,
        });
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(RunError::NotRoot);
    }
    let cg = Cgroup2::find().map_err(RunError::NoCgroup2)?;
    // Kept until the group is gone (dropped last): the daemon and `clawfs estop` learn from it whose run this is.
    let _record = RunRecord::create(&spec.store).map_err(RunError::Record)?;
    let (group, report) = RunGroup::create(
        &cg,
        &spec.agent,
        std::process::id(),
        &DEFAULT_CONTROLLERS,
        &spec.limits,
    )
    .map_err(|source| RunError::Group {
        agent: spec.agent.clone(),
        source,
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
    match rustix::fs::getxattr(mount, SETTLE_XATTR, &mut answer) {
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

/// The sandbox layers of `spec`'s run, prepared before the clone.
fn prepare_sandbox(spec: &RunSpec, inputs: &SandboxFor) -> Result<Layers, RunError> {
    let sandbox = |source| RunError::Sandbox {
        agent: spec.agent.clone(),
        source,
    };
    let store = rustix::fs::open(
        &inputs.store,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| sandbox(SandboxError::Store(e.into())))?;
    let layers = crate::layers::prepare(
        StoreDir {
            path: &inputs.store,
            fd: store.as_fd(),
        },
        &inputs.policy,
        &inputs.mount,
        &spec.agent,
        (spec.uid, spec.gid),
        &spec.programs,
    )
    .map_err(sandbox)?;
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

fn spawn_and_wait(spec: &RunSpec, group: &RunGroup) -> Result<u8, RunError> {
    let shown = spec.command[0].to_string_lossy().into_owned();
    // Everything the child needs is prepared here: between clone and exec it may only make
    // async-signal-safe calls (no allocation, no locks).
    let join = RunError::Join;
    let dir = group.run().dir_file().map_err(join)?;
    let procs = group.run().procs_file().map_err(join)?;
    // Hybrid host: the run's groups in the cgroup v1 hierarchies of the controllers (and limits)
    // cgroup v2 lacks here, joined by the child through their `tasks` files.
    let v1_tasks = group
        .v1()
        .iter()
        .map(|g| g.run().tasks_file())
        .collect::<Result<Vec<_>, _>>()
        .map_err(RunError::Join)?;
    let v1_fds: Vec<libc::c_int> = v1_tasks.iter().map(|f| f.as_raw_fd()).collect();
    let cwd = spec
        .cwd
        .as_ref()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .transpose()
        .map_err(|_| RunError::Nul("working directory"))?;
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
        .map_err(|_| RunError::Nul("mount's path"))?;
    let (uid, gid) = (spec.uid, spec.gid);
    let groups: Vec<libc::gid_t> = spec.groups.clone();
    let estop_flag = spec
        .estop_flag
        .as_ref()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .transpose()
        .map_err(|_| RunError::Nul("store's path"))?;

    let layers = match &spec.sandbox {
        Some(inputs) => Some(prepare_sandbox(spec, inputs)?),
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
    let program = spawn::Program::new(&spec.command, env).map_err(|source| RunError::Program {
        program: shown.clone(),
        source,
    })?;
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
        .and_then(|l| crate::layers::attach_network(group.run().path(), &l.network));
    let mut signals = Signals::new(FORWARDED_SIGNALS).map_err(RunError::Signals)?;
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
            return Err(RunError::Estopped);
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
            return Err(RunError::Start {
                program: shown,
                agent: spec.agent.clone(),
                uid,
                gid,
                source: e,
                announce,
            });
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
    let status = status.map_err(|source| RunError::Wait {
        program: shown,
        source,
    })?;
    emptied.map_err(RunError::Emptying)?;
    Ok(exit_code(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
    }
}
