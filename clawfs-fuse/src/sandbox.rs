//! The kernel sandbox `clawfs run --sandbox` puts around an agent process, prepared before fork
//! and applied in the child after it has dropped to the agent's uid: Landlock (the agent's part
//! of the mount, a private temporary directory and the system files programs need; never the
//! store) and seccomp (the store's `system/seccomp/whitelist.json`, loaded last). cgroup quotas
//! apply to every run, sandboxed or not.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clawfs_core::area::Area;
use clawfs_core::landlock::{Prepared, Ruleset, Sandbox};
use clawfs_core::policy::{AgentName, Grant, Policy};
use clawfs_core::store::Store;

/// The layers of one sandboxed run, ready to apply in the child.
pub struct Layers {
    /// Landlock's ruleset.
    pub landlock: Prepared,
    /// The seccomp filter.
    pub seccomp: clawfs_seccomp::Filter,
    /// The run's private temporary directory (also its `HOME` and `TMPDIR`).
    pub tmp: TempDir,
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
    /// The private temporary directory.
    #[error("the run's temporary directory: {0}")]
    Tmp(std::io::Error),
    /// The Landlock ruleset.
    #[error("Landlock: {0}")]
    Landlock(#[from] clawfs_core::landlock::Error),
    /// The whitelist file.
    #[error("{path}: {source}")]
    Whitelist {
        /// The file.
        path: String,
        /// What is wrong.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The whitelist, relative to the store.
const WHITELIST: &str = "system/seccomp/whitelist.json";

/// Prepares the sandbox of `agent` (running as `uid`:`gid`) over the mount at `mount`.
pub fn prepare(
    store: &Store,
    policy: &Policy,
    mount: &Path,
    agent: &str,
    (uid, gid): (u32, u32),
) -> Result<Layers, SandboxError> {
    let tmp = private_tmp(agent, uid, gid).map_err(SandboxError::Tmp)?;
    let mut rules = Sandbox::agent_defaults();
    rules.read.push(mount.to_path_buf());
    rules
        .read_write
        .push(mount.join(Area::Agents.dir_name()).join(agent));
    rules.read_write.push(tmp.path().to_path_buf());
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
    rules.deny.push(store.root().to_path_buf());
    let landlock = Ruleset::build(&rules)?;
    let whitelist_error =
        |source: Box<dyn std::error::Error + Send + Sync>| SandboxError::Whitelist {
            path: store.root().join(WHITELIST).display().to_string(),
            source,
        };
    let text = clawfs_core::beneath::read(store.root_fd(), Path::new(WHITELIST), 1 << 20)
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
    })
}

/// The workspaces of the store.
fn workspaces(store: &Store) -> Vec<String> {
    std::fs::read_dir(store.root().join(Area::Workspaces.dir_name()))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A new directory under the system's temporary directory, the agent's alone (0700).
fn private_tmp(agent: &str, uid: u32, gid: u32) -> std::io::Result<TempDir> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = std::env::temp_dir().join(format!("clawfs-{agent}-{}", hex::encode(random)));
    std::fs::create_dir(&dir)?;
    let dir = TempDir(dir);
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}
