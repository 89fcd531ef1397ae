//! `clawfs specs` (signed documents: keys, drafts, freezing, verification, dual-approved
//! changes) and `clawfs system` (the manifest of `system/`: verify, update).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use clawfs_core::store::Store;
use clawfs_integrity::seal;
use clawfs_integrity::signers::{self, Signers, SIGNERS_FILE};
use clawfs_integrity::specs::{Approved, SpecBook, Status};
use clawfs_integrity::system::{self, Verification};
use clawfs_vault::Vault;

use clawfs_args::integrity::{SpecsCommand, SystemCommand, ToolsCommand};

use crate::error::Failure;
use crate::store_ops::{read_input, refused, seal_after, sealing_key};

fn now() -> String {
    clawfs_store::clock::now_rfc3339()
}

/// The signing key of `signer`, from the vault.
fn signing_key(store: &Store, signer: &str) -> Result<signers::SigningKey, Failure> {
    signers::check_signer_name(signer).map_err(refused)?;
    let vault = Vault::open(store.root(), store.vault_config()).map_err(|e| anyhow!(e))?;
    let secret = vault.get(&signers::vault_secret(signer)).map_err(|e| {
        anyhow!(
            "the signing key of {signer} (vault secret {}): {e}",
            signers::vault_secret(signer)
        )
    })?;
    signers::from_secret(signer, &secret).map_err(refused)
}

/// Runs one `clawfs specs` command on the store at `root`.
pub fn specs(root: &Path, cmd: &SpecsCommand) -> Result<(), Failure> {
    let store = Store::open(root)?;
    let fd = store.root_fd();
    let book = SpecBook::new(fd);
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| Failure::Other(anyhow!(e));
    // What changes the books' marks (a signer, a signed version) is sealed again; drafts and
    // proposals sign nothing.
    let key = match cmd {
        SpecsCommand::Keygen { .. }
        | SpecsCommand::Freeze { .. }
        | SpecsCommand::Approve { .. } => sealing_key(&store)?,
        _ => None,
    };
    match cmd {
        SpecsCommand::Keygen { signer } => {
            signers::check_signer_name(signer).map_err(refused)?;
            let mut trusted = Signers::load(fd).map_err(refused)?;
            let first = trusted.is_empty();
            let key = signers::generate();
            trusted
                .add(signer, &key.verifying_key(), &now())
                .map_err(refused)?;
            let vault = Vault::open(store.root(), store.vault_config()).map_err(|e| anyhow!(e))?;
            vault
                .put(&signers::vault_secret(signer), key.as_bytes())
                .map_err(|e| anyhow!("storing the private key in the vault: {e}"))?;
            let json = clawfs_integrity::to_pretty(&trusted);
            system::install(fd, SIGNERS_FILE, &json, 0o444, &now()).map_err(refused)?;
            writeln!(
                out,
                "{signer} is a trusted signer (private key: vault secret {}; public key: {SIGNERS_FILE})",
                signers::vault_secret(signer)
            )
            .map_err(w)?;
            if first {
                for id in book.sign_unsigned(signer, &key, &now()).map_err(refused)? {
                    writeln!(out, "signed {id} (frozen before any key existed)").map_err(w)?;
                }
            }
        }
        SpecsCommand::Add { file, id, path } => {
            let content = read_input(file)?;
            let rel = match path {
                Some(p) => p.clone(),
                None => file
                    .file_name()
                    .ok_or_else(|| anyhow!("{}: not a file name", file.display()))?
                    .to_string_lossy()
                    .into_owned(),
            };
            book.add(id, &rel, &content, &now()).map_err(refused)?;
            writeln!(out, "added {id} as a draft at specs/{rel}; freeze it with `clawfs specs freeze {id} --as SIGNER`").map_err(w)?;
        }
        SpecsCommand::Freeze { id, signer } => {
            let key = signing_key(&store, signer)?;
            let version = book.freeze(id, signer, &key, &now()).map_err(refused)?;
            writeln!(out, "froze {id} version {version}, signed by {signer}").map_err(w)?;
        }
        SpecsCommand::Propose { id, file } => {
            let content = read_input(file)?;
            let version = book.propose(id, &content, &now()).map_err(refused)?;
            writeln!(out, "proposed version {version} of {id}; two different signers must approve it (`clawfs specs approve {id} --as SIGNER`)").map_err(w)?;
        }
        SpecsCommand::Approve { id, signer } => {
            let key = signing_key(&store, signer)?;
            match book.approve(id, signer, &key, &now()).map_err(refused)? {
                Approved::Waiting(n) => writeln!(
                    out,
                    "{signer} approved the change of {id}; {n} more different signer(s) needed"
                ),
                Approved::Frozen { version, kept_at } => writeln!(
                    out,
                    "froze {id} version {version}; the previous version is kept at specs/{kept_at}"
                ),
            }
            .map_err(w)?;
        }
        SpecsCommand::Verify { json } => {
            let reports = book.verify().map_err(refused)?;
            let bad = reports.iter().filter(|r| r.problem.is_some()).count();
            if *json {
                let v = serde_json::json!({ "ok": bad == 0, "documents": reports });
                writeln!(out, "{v}").map_err(w)?;
            } else {
                for r in &reports {
                    let status = match r.status {
                        Status::Draft => "draft",
                        Status::Frozen => "frozen",
                        Status::Superseded => "superseded",
                    };
                    let verdict = r.problem.as_deref().unwrap_or("ok");
                    let by = match r.signed_by.is_empty() {
                        true => "no signature".to_string(),
                        false => format!("signed by {}", r.signed_by.join(", ")),
                    };
                    writeln!(
                        out,
                        "{}\tv{}\t{status}\t{by}\tspecs/{}\t{verdict}",
                        r.spec_id, r.version, r.path
                    )
                    .map_err(w)?;
                }
            }
            if bad > 0 {
                return Err(Failure::Tampered(format!(
                    "{bad} of {} document(s) of specs/ fail verification",
                    reports.len()
                )));
            }
        }
    }
    seal_after(&store, key)
}

/// Runs one `clawfs tools` command on the store at `root`.
pub fn tools(root: &Path, cmd: &ToolsCommand) -> Result<(), Failure> {
    use clawfs_integrity::registry::{self as registry, Added};
    let store = Store::open(root)?;
    let fd = store.root_fd();
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| Failure::Other(anyhow!(e));
    match cmd {
        ToolsCommand::Add {
            definition,
            binary,
            signer,
        } => {
            let name_of = |p: &Path| -> Result<String, Failure> {
                Ok(p.file_name()
                    .ok_or_else(|| anyhow!("{}: not a file name", p.display()))?
                    .to_string_lossy()
                    .into_owned())
            };
            let def = read_input(definition)?;
            let def_name = name_of(definition)?;
            let wasm = match binary {
                Some(b) => Some((read_input(b)?, name_of(b)?)),
                None => None,
            };
            // Checked before the vault is asked for a key.
            registry::check_definition(&def, &def_name, wasm.as_ref().map(|w| w.1.as_str()))
                .map_err(refused)?;
            let sealing = sealing_key(&store)?;
            let key = signing_key(&store, signer)?;
            // The registry names the mount the store's daemon serves (a daemon serves only a
            // registry that names its mount); the next mount writes it again anyway.
            let mount = store.daemon_info().map_or_else(
                || PathBuf::from(clawfs_store::layout::DEFAULT_MOUNT),
                |d| d.mountpoint,
            );
            let added = registry::add(
                fd,
                (&def, &def_name),
                wasm.as_ref().map(|(b, n)| (b.as_slice(), n.as_str())),
                (signer, &key),
                &now(),
                &mount,
            )
            .map_err(refused)?;
            seal_after(&store, sealing)?;
            match added {
                Added::Published => writeln!(out, "published {def_name}, signed by {signer}"),
                Added::AlreadyPublished => {
                    writeln!(
                        out,
                        "{def_name}: this version is already published; nothing changed"
                    )
                }
            }
            .map_err(w)?;
        }
        ToolsCommand::Run { .. } => {
            return Err(Failure::Other(anyhow!(
                "`clawfs tools run` works through the mount, not on the store"
            )))
        }
        ToolsCommand::List { json } => {
            let (packages, problem) = registry::audited_packages(fd).map_err(refused)?;
            let mut forged = 0;
            for (p, verified) in &packages {
                forged += usize::from(verified.is_err());
                if *json {
                    let mut v = serde_json::to_value(p).expect("serialisable");
                    v["verified"] = verified.is_ok().into();
                    if let Err(why) = verified {
                        v["problem"] = why.as_str().into();
                    }
                    writeln!(out, "{v}")
                } else {
                    writeln!(
                        out,
                        "{}\t{}\t{}\t{}",
                        p.tool_id,
                        p.version,
                        p.wasm_path.as_deref().unwrap_or("(no binary)"),
                        match verified {
                            Ok(()) => format!("signed by {}", p.signed_by),
                            Err(why) => format!("NOT VERIFIED: {why}"),
                        }
                    )
                }
                .map_err(w)?;
            }
            // Listed, but not served: the daemon serves tools/ only when every entry holds.
            match (forged, problem) {
                (0, None) => {}
                (n, problem) => {
                    return Err(Failure::Tampered(format!(
                        "{}{}{}: tools/ serves none of its published files until this is repaired",
                        "tools/registry.json",
                        match n {
                            0 => String::new(),
                            n => format!(": {n} entries fail their signature check"),
                        },
                        problem.map(|p| format!(": {p}")).unwrap_or_default(),
                    )))
                }
            }
        }
    }
    Ok(())
}

/// Runs one `clawfs system` command on the store at `root`.
pub fn system(root: &Path, cmd: &SystemCommand) -> Result<(), Failure> {
    let store = Store::open(root)?;
    let fd = store.root_fd();
    let mut out = std::io::stdout().lock();
    let w = |e: std::io::Error| Failure::Other(anyhow!(e));
    match cmd {
        SystemCommand::Verify { json } => {
            let (verdict, sealed) =
                seal::verify(store.root(), store.vault_config(), store.root_fd())
                    .map_err(refused)?;
            if sealed == seal::SealCheck::Locked {
                eprintln!(
                    "clawfs: the vault is locked: the manifest's seal and the signed books' marks were not checked"
                );
            }
            let differences = match &verdict {
                Verification::Tampered(d) => d.clone(),
                _ => Vec::new(),
            };
            if *json {
                let v = serde_json::json!({
                    "ok": differences.is_empty(),
                    "differences": differences,
                });
                writeln!(out, "{v}").map_err(w)?;
            } else {
                match &verdict {
                    Verification::Intact => writeln!(out, "system/ matches {}", system::MANIFEST),
                    Verification::Tampered(d) => d.iter().try_for_each(|d| writeln!(out, "{d}")),
                }
                .map_err(w)?;
            }
            if !differences.is_empty() {
                return Err(Failure::Tampered(format!(
                    "{} file(s) of system/ differ from {}",
                    differences.len(),
                    system::MANIFEST
                )));
            }
        }
        SystemCommand::Seal => {
            let key = sealing_key(&store)?.ok_or_else(|| {
                anyhow!(
                    "the store has no vault (`clawfs vault init`): there is no key to seal with"
                )
            })?;
            // What is sealed is what the hashes already record: a change is accepted with
            // `system update` first.
            if let Verification::Tampered(d) = system::verify(fd).map_err(refused)? {
                let list = d
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Failure::Tampered(format!(
                    "system/ differs from {}: {list}; record what you have checked with `clawfs system update` first",
                    system::MANIFEST
                )));
            }
            seal_after(&store, Some(key))?;
            writeln!(
                out,
                "sealed {} and the signed books as they are",
                system::MANIFEST
            )
            .map_err(w)?;
        }
        SystemCommand::Update { files, remove, all } => {
            let key = sealing_key(&store)?;
            if *all {
                system::record_all(fd, &now()).map_err(refused)?;
                seal_after(&store, key)?;
                writeln!(
                    out,
                    "recorded every file of system/ in {}",
                    system::MANIFEST
                )
                .map_err(w)?;
                return Ok(());
            }
            for rel in remove {
                system::remove(fd, rel, &now()).map_err(refused)?;
                writeln!(out, "removed system/{rel} and its entry").map_err(w)?;
            }
            let mut policy_changed = false;
            for spec in files {
                let (rel, file) = spec.split_once('=').ok_or_else(|| {
                    anyhow!("'{spec}': give PATH=FILE (e.g. cgroup/quotas.json=./quotas.json)")
                })?;
                let rel = system::check_system_path(rel).map_err(refused)?;
                let content = read_input(Path::new(file))?;
                if file.is_empty() {
                    return Err(anyhow!("'{spec}': give PATH=FILE, FILE not empty").into());
                }
                if rel == "policy.toml" {
                    crate::commands::policy::check_bytes(Path::new(file), &content)?;
                    policy_changed = true;
                }
                if rel.ends_with(".json") {
                    clawfs_integrity::strict_json(&content)
                        .with_context(|| format!("{file}: system/{rel} must be JSON"))?;
                }
                if rel == "signers.json" {
                    Signers::parse(&content)
                        .with_context(|| format!("{file}: not a signers file"))?;
                }
                system::install(fd, &rel, &content, 0o444, &now()).map_err(refused)?;
                writeln!(out, "installed system/{rel} and recorded its SHA-256").map_err(w)?;
            }
            seal_after(&store, key)?;
            if policy_changed {
                match crate::commands::policy::apply_policy(&store)? {
                    crate::commands::policy::Applied::ByDaemon(pid) => {
                        writeln!(out, "policy reloaded by pid {pid}")
                    }
                    crate::commands::policy::Applied::NoDaemon => writeln!(
                        out,
                        "the policy takes effect at the next mount (no daemon serves this store)"
                    ),
                }
                .map_err(w)?;
            }
        }
    }
    Ok(())
}
