//! `clawfs search` (through the mount, as the caller) and `clawfs index` (the store's indexes).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use clawfs_core::store::Store;
use clawfs_search::{EmbedderChoice, Indexer};

use clawfs_args::search::{IndexCommand, SearchArgs};

use crate::error::Failure;

/// `clawfs search`: runs the `semantic_search` tool through the mount, so the query runs as
/// the caller and shows only what the caller may read.
pub fn search(a: &SearchArgs) -> Result<(), Failure> {
    let mount = match (&a.store.store, &a.mount) {
        // The daemon at the mount serves whichever store it serves, as the caller.
        (None, Some(m)) => m.clone(),
        (store, requested) => crate::mounts::served_mount(store, requested.as_deref())?,
    };
    let call = mount.join("tools/call/semantic_search");
    let mut request = serde_json::json!({
        "workspace": a.workspace,
        "query": a.query,
        "mode": a.mode,
        "limit": a.limit,
    });
    if let Some(p) = &a.path {
        request["path"] = p.clone().into();
    }
    if !a.tags.is_empty() {
        request["tags"] = a.tags.clone().into();
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&call)
        .with_context(|| {
            format!(
                "{}: is ClawFS mounted at {}?",
                call.display(),
                mount.display()
            )
        })?;
    f.write_all(request.to_string().as_bytes())
        .context("sending the query")?;
    let mut out = Vec::new();
    f.read_to_end(&mut out).context("reading the answer")?;
    let v: serde_json::Value = serde_json::from_slice(&out).context("the answer is not JSON")?;
    if v["ok"] != serde_json::Value::Bool(true) {
        return Err(anyhow!(
            "{}: {}",
            v["error"].as_str().unwrap_or("error"),
            v["message"].as_str().unwrap_or("search failed")
        )
        .into());
    }
    if let Some(note) = v["note"].as_str() {
        eprintln!("clawfs search: warning: {note}");
    }
    let hits = v["hits"].as_array().cloned().unwrap_or_default();
    for h in &hits {
        if a.json {
            crate::output::print_json(h).context("writing to stdout")?;
            continue;
        }
        println!(
            "{:.3}  {}:{}-{}{}",
            h["score"].as_f64().unwrap_or(0.0),
            h["path"].as_str().unwrap_or("?"),
            h["line_start"],
            h["line_end"],
            match h["heading"].as_str() {
                Some(s) if !s.is_empty() => format!("  ({s})"),
                _ => String::new(),
            }
        );
        println!("       {}", h["snippet"].as_str().unwrap_or(""));
    }
    if hits.is_empty() && !a.json {
        eprintln!("no matches");
    }
    Ok(())
}

/// The database of `workspace`'s index that commands read: in a store that hosts share, the
/// copy the holder of its lease published (its working index is on that host's local disk).
pub fn index_db(store: &Store, workspace: &str) -> PathBuf {
    let dir = clawfs_search::index::index_dir(&store.private_dir(), workspace);
    match store.is_shared() {
        true => dir.join(clawfs_search::lease::PUBLISHED),
        false => dir.join(clawfs_search::index::DB_FILE),
    }
}

/// `clawfs index`.
pub fn index(store_root: &Path, cmd: &IndexCommand) -> Result<(), Failure> {
    let store = Store::open(store_root)?;
    if let IndexCommand::Rebuild { workspace } = cmd {
        if let Some(d) = store.serving_daemon() {
            // The serving daemon owns the indexes: it rescans (SIGUSR1), in the background.
            crate::commands::mount::refresh_daemon(&store)?;
            println!(
                "the daemon serving {} (pid {}) is re-indexing every workspace in the background",
                d.mountpoint.display(),
                d.pid
            );
            return Ok(());
        }
        if store.is_shared() {
            return Err(anyhow!(
                "in a store that hosts share, the daemon holding each workspace's index \
                 rebuilds it: mount this host and run `clawfs index rebuild` again"
            )
            .into());
        }
        let _lock = store.lock()?;
        let embedder = EmbedderChoice::for_store(store_root).map_err(|e| anyhow!(e))?;
        let indexer = Indexer::new(store_root, embedder, false).map_err(|e| anyhow!(e))?;
        let names = match workspace {
            Some(w) => vec![w.clone()],
            None => indexer.workspace_names().map_err(|e| anyhow!(e))?,
        };
        for ws in names {
            let bar = indicatif::ProgressBar::new(0).with_message(ws.clone());
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg:12} {bar:40} {pos}/{len} files {elapsed}",
                )
                .expect("a valid template"),
            );
            let r = indexer
                .rebuild(&ws, &mut |done, total| {
                    bar.set_length(total);
                    bar.set_position(done);
                })
                .map_err(|e| anyhow!("{ws}: {e}"))?;
            bar.finish();
            println!(
                "{ws}: {} indexed, {} unchanged, {} removed, {} unreadable",
                r.updated, r.unchanged, r.removed, r.failed
            );
        }
        indexer.stop();
        return Ok(());
    }
    let IndexCommand::Status { json } = cmd else {
        unreachable!("rebuild handled above")
    };
    let indexer = Indexer::new(store_root, EmbedderChoice::None, false).map_err(|e| anyhow!(e))?;
    for ws in indexer.workspace_names().map_err(|e| anyhow!(e))? {
        let path = index_db(&store, &ws);
        let report = match path.exists() {
            false => serde_json::json!({"workspace": ws, "indexed": false}),
            true => {
                let db = clawfs_search::index::IndexDb::open(&path, &ws)
                    .map_err(|e| anyhow!("{ws}: {e}"))?;
                let (chunks, files) = db.counts().map_err(|e| anyhow!(e))?;
                serde_json::json!({
                    "workspace": ws,
                    "indexed": true,
                    "files": files,
                    "chunks": chunks,
                    "embedder": db.meta("embedder").ok().flatten(),
                    "dimension": db.meta("dimension").ok().flatten().and_then(|d| d.parse::<u64>().ok()),
                })
            }
        };
        if *json {
            crate::output::print_json(&report).context("writing to stdout")?;
        } else {
            println!(
                "{}: {} files, {} chunks, embedder {}",
                ws,
                report["files"].as_u64().unwrap_or(0),
                report["chunks"].as_u64().unwrap_or(0),
                report["embedder"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("none (text only)")
            );
        }
    }
    Ok(())
}
