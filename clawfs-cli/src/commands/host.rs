//! `clawfs host join | list`: the hosts that share a store, each with its own daemon over its
//! own mount of the distributed file system that holds the store (see docs/multi-host.md).

use std::path::Path;

use anyhow::Context;
use clawfs_args::HostCommand;
use clawfs_core::hosts::{self, HostName};
use clawfs_core::Store;

use crate::error::Failure;

/// Runs one `clawfs host` subcommand against the store at `store_root`.
pub fn run(store_root: &Path, cmd: &HostCommand) -> Result<(), Failure> {
    let store = Store::open(store_root)?;
    match cmd {
        HostCommand::Join { name, local } => join(&store, name, *local),
        HostCommand::List { json } => list(&store, *json),
    }
}

fn join(store: &Store, name: &str, local: bool) -> Result<(), Failure> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(anyhow::anyhow!(
            "clawfs host join must run as root: it changes the store's private area"
        )
        .into());
    }
    let host = HostName::new(name).map_err(anyhow::Error::new)?;
    // A daemon serving the store alone keeps its files where a store of one host keeps them.
    let alone = (!store.is_shared()).then(|| store.daemon_info()).flatten();
    let joined = hosts::join(store.root(), &host).with_context(|| {
        format!(
            "recording host {host} in {}",
            hosts::hosts_dir(store.root()).display()
        )
    })?;
    match joined {
        true => println!("host {host} joined store {}", store.root().display()),
        false => println!(
            "host {host} had already joined store {}",
            store.root().display()
        ),
    }
    // A vault sealed by the store's own key file before hosts shared it: that file is now on a
    // volume every host reads.
    let key_file = store.private_dir().join("host.key");
    let sealed_here =
        std::fs::read_to_string(store.root().join("vault/master-key.enc")).is_ok_and(|t| {
            t.contains("\"sealer\":\"host-key\"") || t.contains("\"sealer\": \"host-key\"")
        });
    if sealed_here && key_file.exists() {
        eprintln!(
            "clawfs: warning: the vault's master key is sealed by {}, on the volume every host \
             reads: any host can unseal it. On the host that holds the key, move that file to \
             {} (outside the store) and remove it from the store, or rotate the key to a TPM or \
             passphrase seal (docs/multi-host.md, \"The vault\").",
            key_file.display(),
            clawfs_vault::hosts::local_key_file("HOST").display()
        );
    }
    if local {
        hosts::set_local_host(&host)
            .with_context(|| format!("writing {}", hosts::LOCAL_HOST_FILE))?;
        println!("this machine is host {host} ({})", hosts::LOCAL_HOST_FILE);
    }
    if let Some(d) = alone {
        println!(
            "note: the daemon (pid {}) at {} serves the store alone until it is mounted again as a host (clawfs mount --host NAME)",
            d.pid,
            d.mountpoint.display()
        );
    }
    Ok(())
}

fn list(store: &Store, json: bool) -> Result<(), Failure> {
    let joined = hosts::joined(store.root()).context("listing the hosts")?;
    let now = hosts::unix_now();
    let rows: Vec<serde_json::Value> = joined
        .iter()
        .map(|j| {
            let daemon = std::fs::read(hosts::host_dir(store.root(), &j.name).join("daemon.json"))
                .ok()
                .and_then(|t| serde_json::from_slice::<clawfs_core::store::DaemonInfo>(&t).ok());
            let lease = daemon.as_ref().and_then(|d| d.renewed_at).map(|at| {
                serde_json::json!({
                    "renewed_seconds_ago": now.saturating_sub(at),
                    "holds": hosts::lease_holds(at, now),
                })
            });
            serde_json::json!({
                "host": j.name,
                "joined_at": j.joined_at,
                "joined_from": j.joined_from,
                "this_machine": store.host() == Some(&j.name),
                "daemon": daemon.as_ref().map(|d| serde_json::json!({
                    "pid": d.pid,
                    "machine": d.machine,
                    "mountpoint": d.mountpoint,
                    "started_at": d.started_at,
                    "version": d.version,
                })),
                "lease": lease,
            })
        })
        .collect();
    if json {
        crate::output::print_json(&rows).context("writing to stdout")?;
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "no host has joined store {}: one daemon serves it (clawfs host join NAME to share it)",
            store.root().display()
        );
        return Ok(());
    }
    println!("{:<16} {:<26} {:<10} SERVED BY", "HOST", "JOINED", "LEASE");
    for r in &rows {
        let lease = match (&r["lease"]["holds"], &r["lease"]["renewed_seconds_ago"]) {
            (serde_json::Value::Bool(true), ago) => format!("{ago}s ago"),
            (serde_json::Value::Bool(false), _) => "expired".into(),
            _ => "-".into(),
        };
        let served = match &r["daemon"] {
            serde_json::Value::Null => "-".to_string(),
            d => format!(
                "pid {} on {} at {}",
                d["pid"],
                d["machine"].as_str().unwrap_or("?"),
                d["mountpoint"].as_str().unwrap_or("?")
            ),
        };
        let mark = if r["this_machine"] == true { "*" } else { "" };
        println!(
            "{:<16} {:<26} {:<10} {served}",
            format!("{}{mark}", r["host"].as_str().unwrap_or("?")),
            r["joined_at"].as_str().unwrap_or("?"),
            lease
        );
    }
    Ok(())
}
