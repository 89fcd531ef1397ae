//! What `clawfs init` puts in a new store: the six areas with P1.4 §8.1 modes and owners, the
//! agent roster's directories, the default workspace, and the system and spec files. Every
//! step creates only what is missing, so an interrupted init can simply run again.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

use clawfs_store::accounts;

use crate::identity;
use clawfs_store::atomic::atomic_write;
use clawfs_store::names::DEFAULT_AGENTS;

/// The frozen ClawFS specification, served under `specs/p1/`.
pub const SPEC_P1_4: &str = include_str!("../assets/P1.4-clawfs-spec.md");

/// The gid of `clawos-agents`, the group of the agent directories, if it exists.
pub fn agents_group() -> Option<u32> {
    accounts::group_id("clawos-agents")
}

/// The gid of `clawos-users`, the group of the workspaces, if it exists.
pub fn users_group() -> Option<u32> {
    accounts::group_id("clawos-users")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Creates `path` with `mode` if missing and applies mode and (as root) owner.
fn dir(path: &Path, mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
    match fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    set_mode_owner(path, mode, owner)
}

fn set_mode_owner(path: &Path, mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
    if let (Some((uid, gid)), true) = (owner, is_root()) {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Writes a file atomically unless it already exists.
fn file(path: &Path, content: &[u8], mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
    if !path.exists() {
        let dir = path.parent().expect("seed files have a parent");
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("ASCII name");
        atomic_write(dir, name, content, mode)?;
    }
    set_mode_owner(path, mode, owner)
}

fn pretty(v: &serde_json::Value) -> Vec<u8> {
    let mut s = serde_json::to_vec_pretty(v).expect("a Value serialises");
    s.push(b'\n');
    s
}

/// The metadata.json of a new workspace (P1.4 §1.2).
pub fn workspace_metadata(name: &str, owner: &str, now: &str) -> Vec<u8> {
    pretty(&json!({
        "workspace_id": name,
        "created_at": now,
        "updated_at": now,
        "vector_dimension": clawfs_search::DEFAULT_VECTOR_DIMENSION,
        "hnsw_params": { "m": 16, "ef_construction": 200, "ef_search": 50 },
        "owner": owner,
        "encryption_enabled": false
    }))
}

fn quotas() -> serde_json::Value {
    let agents: serde_json::Map<String, serde_json::Value> = DEFAULT_AGENTS
        .iter()
        .map(|a| (a.to_string(), json!({})))
        .collect();
    json!({
        "version": 1,
        "description": "cgroup v2 limits applied by `clawfs run` to each agent's group (P1.5). Per-agent entries override the defaults.",
        "defaults": {
            "memory.max": "1073741824",
            "memory.swap.max": "0",
            "cpu.weight": "50",
            "pids.max": "512"
        },
        "agents": agents
    })
}

/// Lays out the areas and their default content under `root`.
pub fn lay_out(root: &Path) -> io::Result<()> {
    let now = clawfs_store::clock::now_rfc3339();
    let root_owner = Some((0, 0));
    let agents_group = agents_group().unwrap_or(0);
    let users_group = users_group().unwrap_or(0);
    let tools_owner = accounts::user_named("wasm-agent").map_or(0, |a| a.uid);

    // The store is root's alone; the mount shows its root as 0755.
    fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;

    // system/ — 0555, root:root; files 0444.
    let system = root.join("system");
    dir(&system, 0o755, root_owner)?;
    for sub in ["seccomp", "apparmor", "cgroup"] {
        dir(&system.join(sub), 0o755, root_owner)?;
    }
    let system_files: [(&str, Vec<u8>); 3] = [
        (
            "seccomp/whitelist.json",
            clawfs_seccomp::DEFAULT_WHITELIST.as_bytes().to_vec(),
        ),
        (
            "apparmor/clawos-fs",
            clawfs_apparmor::CLAWOS_FS_PROFILE.as_bytes().to_vec(),
        ),
        ("cgroup/quotas.json", pretty(&quotas())),
    ];
    file(
        &system.join("policy.toml"),
        clawfs_policy::DEFAULT_POLICY_TOML.as_bytes(),
        0o444,
        root_owner,
    )?;
    let mut manifest = serde_json::Map::new();
    for (rel, content) in &system_files {
        file(&system.join(rel), content, 0o444, root_owner)?;
        let on_disk = fs::read(system.join(rel))?;
        manifest.insert(
            (*rel).to_string(),
            json!(format!("sha256:{}", hex::encode(Sha256::digest(&on_disk)))),
        );
    }
    file(
        &system.join("manifest.json"),
        &pretty(&json!({ "version": 1, "generated_at": now, "files": manifest })),
        0o444,
        root_owner,
    )?;
    for sub in ["seccomp", "apparmor", "cgroup"] {
        set_mode_owner(&system.join(sub), 0o555, root_owner)?;
    }
    set_mode_owner(&system, 0o555, root_owner)?;

    // agents/ — 0750 root:clawos-agents; one directory per agent of the roster.
    let agents = root.join("agents");
    dir(&agents, 0o750, Some((0, agents_group)))?;
    // Each agent owns its directory. The directories are group-writable by clawos-agents on
    // purpose: POSIX lets every agent try, so that the daemon (not the kernel's mode check)
    // decides, records the refusal and tells the agent why (RULE-001). logs/ is ClawFS's.
    let policy = clawfs_policy::Policy::default_policy();
    for agent in DEFAULT_AGENTS {
        let uid = clawfs_policy::AgentName::new(agent)
            .ok()
            .and_then(|n| policy.agent(&n).and_then(|a| a.run_as()))
            .map_or(0, |(uid, _)| uid);
        let own = Some((uid, agents_group));
        let a = agents.join(agent);
        dir(&a, 0o770, own)?;
        dir(&a.join("logs"), 0o750, Some((0, agents_group)))?;
        dir(&a.join("cache"), 0o750, own)?;
        file(
            &a.join("identity.json"),
            &pretty(&identity::new_identity(agent, &now)),
            0o640,
            own,
        )?;
        file(
            &a.join("state.json"),
            &pretty(&json!({ "agent_id": agent, "status": "idle", "updated_at": now })),
            0o640,
            own,
        )?;
    }

    // tools/ — 0755 wasm-agent:clawos-agents.
    let tools = root.join("tools");
    let tools_owner = Some((tools_owner, agents_group));
    dir(&tools, 0o755, tools_owner)?;
    dir(&tools.join("definitions"), 0o755, tools_owner)?;
    dir(&tools.join("binaries"), 0o755, tools_owner)?;

    // workspaces/ — 0750 root:clawos-users; the default workspace.
    let workspaces = root.join("workspaces");
    dir(&workspaces, 0o750, Some((0, users_group)))?;
    let default = workspaces.join("default");
    // Sticky, like /tmp: members add files and folders, and move or remove only their own.
    dir(&default, 0o1770, Some((0, users_group)))?;
    dir(&default.join("snapshots"), 0o770, Some((0, users_group)))?;
    file(
        &default.join("metadata.json"),
        &workspace_metadata("default", "root", &now),
        0o664,
        Some((0, users_group)),
    )?;

    // vault/ — root's, 0711: traversable so that granted agents reach their secrets at
    // vault/secrets/<name> (served by the daemon, grant-checked), not listable by anyone else.
    let vault = root.join("vault");
    dir(&vault, 0o711, root_owner)?;
    dir(&vault.join("secrets"), 0o700, root_owner)?;
    dir(&vault.join("archive"), 0o700, root_owner)?;

    // specs/ — 0555 (P1.4 says 0444, which would make the directory untraversable); files 0444.
    let specs = root.join("specs");
    dir(&specs, 0o755, root_owner)?;
    dir(&specs.join("p1"), 0o755, root_owner)?;
    file(
        &specs.join("p1/P1.4-clawfs-spec.md"),
        SPEC_P1_4.as_bytes(),
        0o444,
        root_owner,
    )?;
    let spec_sha = hex::encode(Sha256::digest(fs::read(
        specs.join("p1/P1.4-clawfs-spec.md"),
    )?));
    file(
        &specs.join("signatures.json"),
        &pretty(&json!({
            "version": 1,
            "signatures": [{
                "spec_id": "P1.4-clawfs-spec",
                "path": "p1/P1.4-clawfs-spec.md",
                "sha256": spec_sha,
                "signed_by": "clawfs init",
                "signed_at": now,
                "status": "FROZEN"
            }]
        })),
        0o444,
        root_owner,
    )?;
    set_mode_owner(&specs.join("p1"), 0o555, root_owner)?;
    set_mode_owner(&specs, 0o555, root_owner)?;
    Ok(())
}

/// Writes `tools/registry.json` (keeping its published packages; its protocol naming `mount`,
/// where the store is served) and the built-in tools' definitions where they differ from what
/// is there (a new build may add tools).
pub fn write_tool_registry(
    root: &Path,
    mount: &Path,
) -> Result<(), clawfs_integrity::IntegrityError> {
    use std::os::fd::AsFd;
    let fd = rustix::fs::open(
        root,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| clawfs_integrity::IntegrityError::io(root.display().to_string())(e.into()))?;
    let packages = clawfs_integrity::registry::load_packages(fd.as_fd())?;
    clawfs_integrity::registry::write_registry(fd.as_fd(), &packages, mount)
}
