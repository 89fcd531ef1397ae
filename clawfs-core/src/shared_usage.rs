//! What owners hold in a store that hosts share. No host sees another's changes as they are
//! made, and none takes a lock across hosts per change. Instead:
//!
//! - the store's count (`.clawfs/quota-count.json`) records what each owner held at an
//!   *epoch*, the number of the count; a recount anywhere writes the next one;
//! - each host saves what its daemon changed since that count in its own folder
//!   (`.clawfs/hosts/<h>/quota-usage.json`, [`Saved::changes`]), every 2 s while they change;
//! - what an owner holds is the count plus every host's changes of the same epoch, which each
//!   daemon reads again every 2 s: growth is checked against the other hosts' changes as they
//!   last saved them.
//!
//! A host's changes of an older epoch are in the newer count and are left out.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use clawfs_store::beneath::{self, FileMode};
use clawfs_store::layout::PRIVATE_DIR;
use serde::{Deserialize, Serialize};

use crate::held::{Across, Held, Saved, FORMAT};
use crate::hosts::{self, HostName};
use crate::store::Store;

/// The store's count, in the private area.
pub const COUNT_FILE: &str = "quota-count.json";
/// A host's saved usage, in its folder (the file a store of one host keeps in the private
/// area).
pub const USAGE_FILE: &str = "quota-usage.json";
/// The file in a host's folder (or the private area) by which `clawfs quota rescan` asks the
/// serving daemon for a recount.
pub const RESCAN_FILE: &str = "quota-rescan";
/// The most a usage file may be.
const MAX_FILE: u64 = 64 << 20;

/// The store's count at an epoch.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Count {
    /// Format version: [`FORMAT`].
    pub version: u32,
    /// The number of this count: one more than the count it replaced.
    pub epoch: u64,
    /// What each owner uid held.
    pub by_uid: HashMap<u32, Held>,
    /// The agent each uid belongs to, as known then.
    pub agents: HashMap<u32, String>,
}

/// A shared store's usage as one host reads it.
#[derive(Debug, Default)]
pub struct View {
    /// The count's epoch.
    pub epoch: u64,
    /// The count, and the other hosts' changes of its epoch.
    pub across: Across,
    /// This host's saved usage, when there is one.
    pub own: Option<Saved>,
    /// The agents every file names.
    pub agents: HashMap<u32, String>,
    /// Whether every host's file says its daemon stopped cleanly.
    pub clean: bool,
}

impl View {
    /// The whole store's usage, in the shape a store of one host saves.
    pub fn totals(&self) -> Saved {
        let own = self
            .own
            .as_ref()
            .filter(|o| o.epoch == self.epoch)
            .map(|o| o.changes.clone())
            .unwrap_or_default();
        Saved {
            version: FORMAT,
            clean: self.clean,
            by_uid: self.across.totals(&own),
            agents: self.agents.clone(),
            epoch: self.epoch,
            ..Saved::default()
        }
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(store: &Store, rel: &Path) -> io::Result<Option<T>> {
    match beneath::read(store.root_fd(), rel, MAX_FILE)? {
        None => Ok(None),
        Some(text) => Ok(serde_json::from_slice(&text).ok()),
    }
}

/// The store's count; `None` if there is none yet, an error if it is unreadable (damaged, or
/// of another format): a recount writes a good one.
pub fn read_count(store: &Store) -> io::Result<Option<Count>> {
    let rel = Path::new(PRIVATE_DIR).join(COUNT_FILE);
    let Some(text) = beneath::read(store.root_fd(), &rel, MAX_FILE)? else {
        return Ok(None);
    };
    match serde_json::from_slice::<Count>(&text) {
        Ok(c) if c.version == FORMAT && c.epoch > 0 => Ok(Some(c)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a count of this version: `clawfs quota rescan` counts the store again",
                store.root().join(rel).display()
            ),
        )),
    }
}

/// Reads the shared store's usage as `host` sees it (`None`: a reader that is no host):
/// the count and every host's changes. `None` when there is no count yet. Of the uid → agent
/// pairs the files name, only those `is_agent` (an agent of the policy in force) keeps, on a
/// uid that is neither root's nor the kernel's "no uid": no host's file (nor the count)
/// makes root an agent or names one nobody configured.
pub fn read_view(
    store: &Store,
    host: Option<&HostName>,
    is_agent: &dyn Fn(&str) -> bool,
) -> io::Result<Option<View>> {
    let Some(count) = read_count(store)? else {
        return Ok(None);
    };
    let mut view = View {
        epoch: count.epoch,
        agents: count.agents,
        clean: true,
        across: Across {
            base: count.by_uid,
            others: HashMap::new(),
        },
        own: None,
    };
    for joined in hosts::joined(store.root())? {
        let rel = Path::new(PRIVATE_DIR)
            .join(hosts::HOSTS_DIR)
            .join(joined.name.as_str())
            .join(USAGE_FILE);
        let Some(saved) = read_json::<Saved>(store, &rel)? else {
            continue;
        };
        if saved.version != FORMAT {
            continue;
        }
        for (uid, agent) in &saved.agents {
            view.agents.entry(*uid).or_insert_with(|| agent.clone());
        }
        view.clean &= saved.clean;
        if Some(&joined.name) == host {
            view.own = Some(saved);
        } else if saved.epoch == view.epoch {
            for (uid, d) in saved.changes {
                view.across.others.entry(uid).or_default().add(d);
            }
        }
    }
    view.agents
        .retain(|uid, name| *uid != 0 && *uid != u32::MAX && is_agent(name));
    Ok(Some(view))
}

/// Records a new count of the store, `by_uid`, as the next epoch; answers it.
pub fn write_count(
    store: &Store,
    by_uid: HashMap<u32, Held>,
    agents: HashMap<u32, String>,
) -> io::Result<u64> {
    // After an unreadable count, or the last epoch there is, numbering starts again: every
    // host drops its changes when the epoch it follows changes, whatever the new one is.
    let epoch = read_count(store)
        .ok()
        .flatten()
        .and_then(|c| c.epoch.checked_add(1))
        .unwrap_or(1);
    let count = Count {
        version: FORMAT,
        epoch,
        by_uid,
        agents,
    };
    let json = serde_json::to_vec(&count).expect("a count serialises");
    store.write_beneath(
        Path::new(PRIVATE_DIR),
        COUNT_FILE,
        &json,
        FileMode::mode(0o600),
    )?;
    Ok(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_or_exhausted_count_is_refused_and_numbering_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        Store::init(&root).unwrap();
        let store = Store::open(&root).unwrap();
        assert!(read_count(&store).unwrap().is_none());
        assert_eq!(
            write_count(&store, HashMap::new(), HashMap::new()).unwrap(),
            1
        );
        assert_eq!(
            write_count(&store, HashMap::new(), HashMap::new()).unwrap(),
            2
        );
        let file = root.join(PRIVATE_DIR).join(COUNT_FILE);
        let last = format!(
            r#"{{"version":{FORMAT},"epoch":{},"by_uid":{{}},"agents":{{}}}}"#,
            u64::MAX
        );
        std::fs::write(&file, last).unwrap();
        assert_eq!(
            write_count(&store, HashMap::new(), HashMap::new()).unwrap(),
            1
        );
        std::fs::write(&file, "not a count").unwrap();
        let err = read_count(&store).unwrap_err();
        assert!(err.to_string().contains("quota rescan"), "{err}");
        assert_eq!(
            write_count(&store, HashMap::new(), HashMap::new()).unwrap(),
            1
        );
    }
}
