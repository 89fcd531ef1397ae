//! `clawfs identity verify`.

use std::path::{Path, PathBuf};

use anyhow::Context;

use clawfs_core::store::Store;
use clawfs_store::area::Area;

use crate::error::Failure;
use crate::mounts::store_path;

/// `clawfs identity verify [AGENT]`: every identity file's checksum against its content.
pub fn identity_verify(store: &Option<PathBuf>, agent: Option<&str>) -> Result<(), Failure> {
    let store = Store::open(&store_path(store))?;
    let agents_dir = store.root().join(Area::Agents.dir_name());
    let mut names: Vec<String> = match agent {
        Some(a) => vec![a.to_string()],
        None => std::fs::read_dir(&agents_dir)
            .with_context(|| format!("listing {}", agents_dir.display()))?
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
    };
    names.sort();
    let mut bad = 0;
    for name in &names {
        // The agent's directory is the agent's: read by descriptor, no symlink followed, a
        // FIFO or device refused, at most the largest identity document.
        let rel = Path::new(Area::Agents.dir_name())
            .join(name)
            .join("identity.json");
        let read = clawfs_store::beneath::read(
            store.root_fd(),
            &rel,
            clawfs_core::fs::MAX_IDENTITY_BYTES + 1,
        );
        let verdict = match read {
            Err(e) => Err(e.to_string()),
            Ok(None) => Err("no identity.json".to_string()),
            Ok(Some(bytes)) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Err(e) => Err(format!("not valid JSON: {e}")),
                Ok(doc) if clawfs_core::identity::verify(&doc) => Ok(()),
                Ok(doc) => Err(format!(
                    "checksum mismatch: the file says {}, its content hashes to {}",
                    doc["checksum"],
                    clawfs_core::identity::checksum(&doc)
                )),
            },
        };
        match verdict {
            Ok(()) => println!("{name}: ok"),
            Err(why) => {
                bad += 1;
                println!("{name}: BAD: {why}");
            }
        }
    }
    if bad > 0 {
        return Err(Failure::Other(anyhow::anyhow!(
            "{bad} of {} identity files do not verify",
            names.len()
        )));
    }
    Ok(())
}
