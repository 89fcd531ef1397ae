//! `clawfs quota`: what each agent holds (bytes and files it owns, as the daemon counts them)
//! against its quota; `clawfs quota rescan` recounts it from the store — by the serving daemon
//! when one serves it, else here, with a progress bar.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use clawfs_core::held::{Held, Saved};
use clawfs_core::shared_usage;
use clawfs_core::store::Store;
use clawfs_policy::Quota;

use crate::error::Failure;

/// Where the daemon keeps the counts, and where a recount is asked of it (the gate's names).
use clawfs_core::shared_usage::{RESCAN_FILE, USAGE_FILE};
/// How long a serving daemon may take to recount a large store.
const RESCAN_TIMEOUT: Duration = Duration::from_secs(3600);

/// `clawfs quota [--json]`.
pub fn show(store_root: &Path, json: bool) -> Result<(), Failure> {
    let store = Store::open(store_root)?;
    let saved = read_saved(&store)?;
    let policy = crate::store_ops::installed_policy(&store)?;
    let rows: Vec<Row> = policy
        .agents()
        .map(|spec| {
            let mut uids: Vec<u32> = saved
                .agents
                .iter()
                .filter(|(_, agent)| *agent == spec.name.as_str())
                .map(|(uid, _)| *uid)
                .collect();
            uids.sort_unstable();
            Row {
                agent: spec.name.as_str().to_string(),
                uids,
                held: held_by(&saved, spec.name.as_str()),
                limit: spec.quota,
            }
        })
        .collect();
    if json {
        let agents: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "agent": r.agent,
                    "uids": r.uids,
                    "bytes": r.held.bytes,
                    "bytes_limit": limit_json(r.limit.bytes),
                    "files": r.held.files,
                    "files_limit": limit_json(r.limit.files),
                })
            })
            .collect();
        let doc = serde_json::json!({
            "store": store_root,
            "counted_while_serving": !saved.clean,
            "agents": agents,
        });
        crate::output::print_json(&doc).context("writing to stdout")?;
        return Ok(());
    }
    let mut table = format!(
        "{:<20} {:>12} {:>12} {:>5} {:>10} {:>10}\n",
        "AGENT", "BYTES", "LIMIT", "USE%", "FILES", "LIMIT"
    );
    for r in &rows {
        let pct = match r.limit.bytes {
            Quota::UNLIMITED | 0 => "-".to_string(),
            l => format!("{}", r.held.bytes.saturating_mul(100) / l),
        };
        table.push_str(&format!(
            "{:<20} {:>12} {:>12} {:>5} {:>10} {:>10}\n",
            r.agent,
            crate::output::human_bytes(r.held.bytes),
            limit_text(r.limit.bytes, crate::output::human_bytes),
            pct,
            r.held.files,
            limit_text(r.limit.files, |n| n.to_string()),
        ));
    }
    crate::output::print_text(&table).context("writing to stdout")?;
    Ok(())
}

/// `clawfs quota rescan`.
pub fn rescan(store_root: &Path) -> Result<(), Failure> {
    let store = Store::open(store_root)?;
    match store.lock() {
        Ok(_lock) => rescan_here(&store)?,
        Err(clawfs_core::store::StoreError::Locked { by: Some(d), .. }) => {
            match store.serving_daemon() {
                Some(live) => ask_daemon(&store, live.pid)?,
                None => {
                    return Err(anyhow!(
                        "the store's daemon record (pid {}) names no ClawFS daemon of this \
                         machine serving it; nothing was asked",
                        d.pid
                    )
                    .into())
                }
            }
        }
        Err(e) => return Err(e.into()),
    }
    show(store_root, false)
}

/// Recounts an unserved store here, with a progress bar, and saves the counts as clean.
fn rescan_here(store: &Store) -> Result<(), Failure> {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos} files counted {elapsed}")
            .expect("a valid template"),
    );
    let spill = clawfs_core::xattr_spill::Spill::new(&store.private_dir());
    let by_uid = clawfs_core::held::rescan(store.root_fd(), &spill, &mut |n| bar.set_position(n))
        .context("counting the store")?;
    bar.finish();
    let previous = read_saved(store).unwrap_or_default();
    let mut saved = Saved {
        version: clawfs_core::held::FORMAT,
        clean: true,
        by_uid,
        agents: previous.agents,
        ..Saved::default()
    };
    if store.is_shared() {
        // The store's next count; this host has changed nothing since.
        saved.epoch = shared_usage::write_count(store, saved.by_uid.clone(), saved.agents.clone())
            .context("saving the count")?;
    }
    let json = serde_json::to_vec(&saved).expect("usage serialises");
    store
        .write_beneath(
            &store.host_rel(),
            USAGE_FILE,
            &json,
            clawfs_store::beneath::FileMode::mode(0o600),
        )
        .context("saving the counts")?;
    Ok(())
}

/// Asks the daemon `pid` serving `store` to recount (a request file and SIGHUP), and waits.
fn ask_daemon(store: &Store, pid: u32) -> Result<(), Failure> {
    store
        .write_beneath(
            &store.host_rel(),
            RESCAN_FILE,
            b"{}",
            clawfs_store::beneath::FileMode::mode(0o600),
        )
        .context("asking the daemon to recount")?;
    // SAFETY: sending SIGHUP to the daemon recorded for this store.
    if unsafe { libc::kill(pid as i32, libc::SIGHUP) } != 0 {
        return Err(anyhow!(
            "signalling the daemon (pid {pid}): {}",
            std::io::Error::last_os_error()
        )
        .into());
    }
    let bar = indicatif::ProgressBar::new_spinner()
        .with_message(format!("the daemon (pid {pid}) is counting the store"));
    let request = store.host_dir().join(RESCAN_FILE);
    let deadline = Instant::now() + RESCAN_TIMEOUT;
    while request.exists() {
        if Instant::now() > deadline {
            return Err(
                anyhow!("the daemon (pid {pid}) did not finish counting within an hour").into(),
            );
        }
        bar.tick();
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
    Ok(())
}

/// The agent whose files `uid` owns, as the daemon last counted them (none when it holds
/// nothing, or no count can be read).
pub fn agent_holding(store_root: &Path, uid: u32) -> Option<String> {
    let saved = read_saved(&Store::open(store_root).ok()?).ok()?;
    let held = saved.by_uid.get(&uid)?;
    (held.files > 0 || held.bytes > 0)
        .then(|| saved.agents.get(&uid).cloned())
        .flatten()
}

/// What the agent `agent` holds, over all its uids.
pub(crate) fn held_by(saved: &Saved, agent: &str) -> Held {
    let mut held = Held::default();
    for (uid, _) in saved.agents.iter().filter(|(_, a)| *a == agent) {
        let h = saved.by_uid.get(uid).copied().unwrap_or_default();
        held.bytes = held.bytes.saturating_add(h.bytes);
        held.files = held.files.saturating_add(h.files);
    }
    held
}

/// The counts the serving daemon saved last (every few seconds while they change); in a store
/// that hosts share, the store's count plus every host's changes since.
pub(crate) fn read_saved(store: &Store) -> Result<Saved, Failure> {
    if store.is_shared() {
        let policy = crate::store_ops::installed_policy(store)?;
        let is_agent = |name: &str| policy.agents().any(|a| a.name.as_str() == name);
        let view = shared_usage::read_view(store, store.host(), &is_agent)
            .context("reading the hosts' quota usage")?;
        return Ok(view.map(|v| v.totals()).unwrap_or_default());
    }
    let path: PathBuf = store.host_dir().join(USAGE_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a usage file of this version", path.display()))
            .map_err(Failure::from),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Saved::default()),
        Err(e) => Err(anyhow!("{}: {e}", path.display()).into()),
    }
}

struct Row {
    agent: String,
    uids: Vec<u32>,
    held: Held,
    limit: Quota,
}

fn limit_json(n: u64) -> serde_json::Value {
    match n {
        Quota::UNLIMITED => serde_json::Value::Null,
        n => n.into(),
    }
}

fn limit_text(n: u64, f: impl Fn(u64) -> String) -> String {
    match n {
        Quota::UNLIMITED => "unlimited".into(),
        n => f(n),
    }
}
