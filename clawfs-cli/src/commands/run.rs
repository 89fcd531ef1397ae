//! `clawfs run --agent NAME -- CMD ARGS…`: checks the command line against the store and its
//! policy (who the agent is, which uid it runs as, where, with which quotas and sandbox), then
//! starts CMD as agent NAME — inside the agent's cgroup v2 group, as an unprivileged uid, with
//! no_new_privs — and exits with CMD's status ([`clawfs_sandbox::run::execute`]).
//!
//! Identity comes from the cgroup alone: the child is created in `clawfs/agent-NAME/run-<pid>`
//! while still root, and only then drops to the agent's uid and sets no_new_privs, so neither
//! it nor any descendant can write a `cgroup.procs` to leave. `CLAWFS_AGENT` is set for the
//! agent's information only; the daemon never reads it.

use std::fs;
use std::io;
use std::path::Path;

use anyhow::anyhow;
use clawfs_args::run::RunArgs;
use clawfs_core::store::Store;
use clawfs_sandbox::cgroup;
use clawfs_sandbox::run::{RunSpec, SandboxFor};
use clawfs_store::area::Area;
use clawfs_store::names::{check_system_name, DEFAULT_AGENTS};

use crate::error::Failure;
use crate::mounts;

/// First uid of the placeholder range: agent `i` of the roster runs as `AGENT_UID_BASE + i` until
/// the policy assigns uids.
pub const AGENT_UID_BASE: u32 = 61000;

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

/// Runs `spec` to its end: the command's exit code.
pub fn execute(spec: &RunSpec) -> Result<u8, Failure> {
    clawfs_sandbox::run::execute(spec).map_err(|e| Failure::Other(anyhow!(e)))
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
    let policy = crate::store_ops::installed_policy(&store)?;
    let spec_in_policy = clawfs_policy::AgentName::new(&agent)
        .ok()
        .and_then(|n| policy.agent(&n).cloned())
        .ok_or_else(|| {
            fail(format!(
                "agent {agent:?} is not in the policy ({}); add [agents.{agent}] there",
                clawfs_core::fs::POLICY_FILE
            ))
        })?;
    if crate::commands::estop::read_flag(&store).is_some() {
        return Err(Failure::Other(anyhow!(
            clawfs_sandbox::run::RunError::Estopped
        )));
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
            (false, Some(m)) => Some(SandboxFor {
                store: store.root().to_path_buf(),
                mount: m.clone(),
                policy,
            }),
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

pub fn require_root() -> Result<(), Failure> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(fail(
            "clawfs run must be started as root: it creates the agent's cgroup and then switches to the agent's uid",
        ));
    }
    Ok(())
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
