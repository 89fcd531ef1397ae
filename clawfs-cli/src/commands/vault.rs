//! `clawfs vault …`: the vault's command line over `clawfs_vault`, plus `grant`/`revoke`,
//! which edit the agents' `secrets` lists in `<store>/system/policy.toml` (formatting and
//! comments preserved).

use std::io::{self, IsTerminal, Read, Write};
use std::path::Path;

use anyhow::{anyhow, Context as _};
use clawfs_vault::{
    check_secret_name, SealerChoice, SealerKind, Vault, VaultConfig, VaultError, VaultStatus,
};
use zeroize::Zeroizing;

use clawfs_args::vault::{SealerArg, VaultCommand};

use crate::error::Failure;

/// Environment variable holding the vault passphrase (else it is prompted on the terminal).
pub const PASSPHRASE_ENV: &str = "CLAWFS_VAULT_PASSPHRASE";

fn fail(e: VaultError) -> Failure {
    Failure::Other(anyhow!(e))
}

/// The passphrase from `CLAWFS_VAULT_PASSPHRASE`, else the terminal (twice when `confirm`).
fn passphrase(confirm: bool) -> Result<Zeroizing<String>, Failure> {
    if let Ok(p) = std::env::var(PASSPHRASE_ENV) {
        return Ok(Zeroizing::new(p));
    }
    if !io::stdin().is_terminal() && !Path::new("/dev/tty").exists() {
        return Err(
            anyhow!("a passphrase is needed: set {PASSPHRASE_ENV} or run on a terminal").into(),
        );
    }
    let p = Zeroizing::new(
        rpassword::prompt_password("Vault passphrase: ").context("reading the passphrase")?,
    );
    if confirm {
        if p.is_empty() {
            return Err(anyhow!("the passphrase must not be empty").into());
        }
        let again = Zeroizing::new(
            rpassword::prompt_password("Again: ").context("reading the passphrase")?,
        );
        if *again != *p {
            return Err(anyhow!("the passphrases differ").into());
        }
    }
    Ok(p)
}

/// The passphrase if this vault's sealer needs one: this host's own key's sealer when it has
/// one (a store that hosts share), else the master key's.
fn passphrase_if_needed(vault: &Vault) -> Result<Option<Zeroizing<String>>, Failure> {
    let st = vault.status().map_err(fail)?;
    let own = st
        .hosts
        .iter()
        .find(|h| Some(&h.host) == vault.config().host.as_ref())
        .map(|h| h.sealer);
    match own.unwrap_or(st.sealer) {
        Some(SealerKind::Passphrase) => passphrase(false).map(Some),
        _ => Ok(None),
    }
}

/// Runs one `clawfs vault` command on the store at `store_root`.
pub fn run(store_root: &Path, cmd: &VaultCommand) -> Result<(), Failure> {
    let store = clawfs_core::store::Store::open(store_root).ok();
    if let Some(s) = store
        .as_ref()
        .filter(|s| s.is_shared() && s.host().is_none())
    {
        return Err(anyhow!(
            "hosts share the store at {}: say which host this is (CLAWFS_HOST or /etc/clawfs/host); \
             each host keeps its own seal of the vault's key",
            s.root().display()
        )
        .into());
    }
    if let Some(s) = store.as_ref().filter(|s| s.is_shared()) {
        if let Some(h) = s.host() {
            joined_or_refused(s.root(), h.as_str())?;
        }
    }
    let config = store.map(|s| s.vault_config()).unwrap_or_default();
    run_with(store_root, cmd, config, &mut io::stdout().lock())
}

/// [`run`] with a vault configuration and an output stream (tests).
pub fn run_with(
    store_root: &Path,
    cmd: &VaultCommand,
    mut config: VaultConfig,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let w = |e: io::Error| Failure::Other(anyhow!(e));
    if let VaultCommand::Init { tcti, pcrs, .. } = cmd {
        if tcti.is_some() {
            config.tcti = tcti.clone();
        }
        config.pcrs = pcrs.clone();
    }
    if let VaultCommand::HostKey { tcti, .. } = cmd {
        if tcti.is_some() {
            config.tcti = tcti.clone();
        }
    }
    if let VaultCommand::Unlock { timeout } = cmd {
        config.unlock_timeout = *timeout;
    }
    match cmd {
        VaultCommand::Grant { agent, name } => return grant(store_root, agent, name, true, out),
        VaultCommand::Revoke { agent, name } => return grant(store_root, agent, name, false, out),
        _ => {}
    }
    let vault = Vault::open(store_root, config).map_err(fail)?;
    match cmd {
        VaultCommand::Init { sealer, .. } => {
            let (choice, pass) = sealer_choice(*sealer)?;
            let st = vault
                .init(choice, pass.as_deref().map(|s| s.as_str()))
                .map_err(fail)?;
            writeln!(out, "vault initialised; {}", describe(&st)).map_err(w)?;
            // From now on the system manifest is sealed with the vault's key.
            let sealed = seal_as_it_is(store_root, None)?;
            if !sealed.is_empty() {
                writeln!(out, "{sealed}").map_err(w)?;
            }
        }
        VaultCommand::Unlock { timeout } => {
            let pass = passphrase_if_needed(&vault)?;
            let st = vault
                .unlock(pass.as_deref().map(|s| s.as_str()))
                .map_err(fail)?;
            writeln!(
                out,
                "vault unlocked for {}s; {}",
                timeout.as_secs(),
                describe(&st)
            )
            .map_err(w)?;
        }
        VaultCommand::Lock => {
            vault.lock().map_err(fail)?;
            writeln!(out, "vault locked").map_err(w)?;
        }
        VaultCommand::Status { json } => {
            let st = vault.status().map_err(fail)?;
            if *json {
                crate::output::json_line(out, &st).map_err(w)?;
            } else {
                writeln!(out, "{}", describe(&st)).map_err(w)?;
            }
        }
        VaultCommand::Put { name, raw } => {
            check_secret_name(name).map_err(fail)?;
            let mut value = Zeroizing::new(Vec::new());
            io::stdin()
                .read_to_end(&mut value)
                .context("reading the secret from stdin")?;
            if !raw && value.last() == Some(&b'\n') {
                value.pop();
                if value.last() == Some(&b'\r') {
                    value.pop();
                }
            }
            let version = vault.put(name, &value).map_err(fail)?;
            writeln!(out, "stored {name} (version {version})").map_err(w)?;
        }
        VaultCommand::Get { name } => {
            let value = vault.get(name).map_err(fail)?;
            out.write_all(&value).map_err(w)?;
            out.flush().map_err(w)?;
        }
        VaultCommand::List => {
            for name in vault.list().map_err(fail)? {
                writeln!(out, "{name}").map_err(w)?;
            }
        }
        VaultCommand::Rm { name } => {
            vault.remove(name).map_err(fail)?;
            writeln!(out, "removed {name}").map_err(w)?;
        }
        VaultCommand::Rotate => {
            let before = seal_key(store_root);
            let pass = passphrase_if_needed(&vault)?;
            let r = vault
                .rotate(pass.as_deref().map(|s| s.as_str()), &|_| {})
                .map_err(fail)?;
            if let Some(rec) = &r.recovered {
                writeln!(out, "an interrupted rotation was {rec} first").map_err(w)?;
            }
            writeln!(
                out,
                "rotated {} secrets to {} (generation {}) in {:.1}s on {} threads",
                r.secrets,
                r.new_key_id,
                r.generation,
                r.elapsed.as_secs_f64(),
                r.threads
            )
            .map_err(w)?;
            if !r.hosts.is_empty() {
                writeln!(out, "hosts given the new key: {}", r.hosts.join(", ")).map_err(w)?;
            }
            for (host, why) in &r.hosts_skipped {
                writeln!(
                    out,
                    "host {host}: not given the new key ({why}); run `clawfs vault add-host {host}`"
                )
                .map_err(w)?;
            }
            let sealed = seal_as_it_is(store_root, Some(before))?;
            if !sealed.is_empty() {
                writeln!(out, "{sealed}").map_err(w)?;
            }
        }
        VaultCommand::HostKey { sealer, .. } => {
            let host = vault.config().host.clone().ok_or_else(|| {
                anyhow!("no host: this store is not shared by hosts, or this host is unnamed (CLAWFS_HOST, /etc/clawfs/host)")
            })?;
            joined_or_refused(store_root, &host)?;
            let (choice, pass) = sealer_choice(*sealer)?;
            let public = vault
                .create_host_key(&host, choice, pass.as_deref().map(|s| s.as_str()))
                .map_err(fail)?;
            writeln!(
                out,
                "host {host}: vault key {} created; on a host where the vault is unlocked, check \
                 this fingerprint and run `clawfs vault add-host {host}`",
                public.fingerprint
            )
            .map_err(w)?;
        }
        VaultCommand::AddHost { host } => {
            joined_or_refused(store_root, host)?;
            let public = vault.add_host(host).map_err(fail)?;
            writeln!(
                out,
                "host {host} given the master key, wrapped to its key {}",
                public.fingerprint
            )
            .map_err(w)?;
        }
        VaultCommand::RemoveHost { host } => {
            let before = seal_key(store_root);
            let pass = passphrase_if_needed(&vault)?;
            let r = vault
                .remove_host(host, pass.as_deref().map(|s| s.as_str()), &|_| {})
                .map_err(fail)?;
            writeln!(
                out,
                "host {host} no longer has the vault's key; rotated to {} (generation {}), so \
                 that any copy of its grant opens nothing new",
                r.new_key_id, r.generation
            )
            .map_err(w)?;
            if !r.hosts.is_empty() {
                writeln!(out, "hosts given the new key: {}", r.hosts.join(", ")).map_err(w)?;
            }
            let sealed = seal_as_it_is(store_root, Some(before))?;
            if !sealed.is_empty() {
                writeln!(out, "{sealed}").map_err(w)?;
            }
        }
        VaultCommand::RebindCounter => {
            let st = vault.rebind_counter(None).map_err(fail)?;
            writeln!(out, "vault state accepted as the latest; {}", describe(&st)).map_err(w)?;
        }
        VaultCommand::Grant { .. } | VaultCommand::Revoke { .. } => unreachable!("handled above"),
    }
    Ok(())
}

/// The key the system manifest is sealed with now, before a rotation changes it: the seal is
/// checked under it, and made again under the new one.
fn seal_key(store_root: &Path) -> Option<[u8; 32]> {
    let s = clawfs_core::store::Store::open(store_root).ok()?;
    clawfs_integrity::seal::key_of(s.root(), s.vault_config())
        .ok()
        .flatten()
}

/// Refuses a host that has not joined the store (`clawfs host join`).
fn joined_or_refused(store_root: &Path, host: &str) -> Result<(), Failure> {
    let joined = clawfs_core::hosts::HostName::new(host)
        .is_ok_and(|h| clawfs_core::hosts::has_joined(store_root, &h));
    match joined {
        true => Ok(()),
        false => Err(anyhow!(
            "host {host} has not joined the store at {} (`clawfs host join {host}` first)",
            store_root.display()
        )
        .into()),
    }
}

/// The sealer `--sealer` picks, and the passphrase it needs (the passphrase sealer asks for
/// one, twice on a terminal; with no choice, `CLAWFS_VAULT_PASSPHRASE` if set picks it).
fn sealer_choice(
    sealer: Option<SealerArg>,
) -> Result<(SealerChoice, Option<Zeroizing<String>>), Failure> {
    let choice = match sealer {
        None => SealerChoice::Auto,
        Some(SealerArg::Tpm) => SealerChoice::Kind(SealerKind::Tpm),
        Some(SealerArg::Passphrase) => SealerChoice::Kind(SealerKind::Passphrase),
        Some(SealerArg::HostKey) => SealerChoice::Kind(SealerKind::HostKey),
    };
    let pass = match sealer {
        Some(SealerArg::Passphrase) => Some(passphrase(true)?),
        None => std::env::var(PASSPHRASE_ENV).ok().map(Zeroizing::new),
        _ => None,
    };
    Ok((choice, pass))
}

/// One line about the vault's state.
pub fn describe(st: &VaultStatus) -> String {
    if !st.initialized {
        return "vault not initialised (run `clawfs vault init`)".into();
    }
    let sealer = match st.sealer {
        Some(SealerKind::Tpm) => {
            let pcrs = if st.pcrs.is_empty() {
                "no PCR binding".to_string()
            } else {
                let l: Vec<String> = st.pcrs.iter().map(|p| p.to_string()).collect();
                format!("PCRs {}", l.join(","))
            };
            let counter = st
                .rollback_counter
                .map(|i| format!(", rollback counter {i:#010x}"))
                .unwrap_or_default();
            format!(
                "sealed by TPM 2.0 ({}, {pcrs}{counter})",
                st.tcti.as_deref().unwrap_or("?")
            )
        }
        Some(k) => format!("sealed by {k}"),
        None => "sealer unknown".into(),
    };
    let mut s = format!(
        "{sealer}; {}; {} secret{}; key {} generation {}",
        if st.unlocked { "unlocked" } else { "locked" },
        st.secrets,
        if st.secrets == 1 { "" } else { "s" },
        st.key_id.as_deref().unwrap_or("?"),
        st.generation.unwrap_or(0)
    );
    if let Some(r) = &st.rotation {
        s.push_str(&format!(
            "; an interrupted rotation ({r}) will be finished by the next unlock or rotate"
        ));
    }
    for h in &st.hosts {
        let sealer = h.sealer.map_or("?", |k| k.as_str());
        match h.granted_generation {
            Some(g) => s.push_str(&format!(
                "\nhost {}: key {} sealed by {sealer}, granted generation {g}",
                h.host, h.fingerprint
            )),
            None => s.push_str(&format!(
                "\nhost {}: key {} sealed by {sealer}, not granted yet",
                h.host, h.fingerprint
            )),
        }
    }
    s
}

/// Adds (`grant`) or removes NAME in `[agents.AGENT] secrets` of `<store>/system/policy.toml`,
/// keeping the file's formatting; the result must pass the policy checker before it is written.
/// Seals the system manifest with the vault's key if system/ matches its hashes and, when
/// `checked_with` is given (a rotation), the seal held under the key before: what a forger left
/// is never sealed. Says what it did.
fn seal_as_it_is(
    store_root: &Path,
    checked_with: Option<Option<[u8; 32]>>,
) -> Result<String, Failure> {
    use clawfs_integrity::{seal, system};
    // A vault outside a ClawFS store (a bare directory) has no system/ to seal.
    let Ok(store) = clawfs_core::store::Store::open(store_root) else {
        return Ok(String::new());
    };
    let fd = store.root_fd();
    let not_sealed = |why: String| {
        Ok(format!(
            "{} NOT sealed: {why}; check system/ and run `clawfs system seal`",
            system::MANIFEST
        ))
    };
    let Some(manifest) = system::load(fd).map_err(|e| anyhow::anyhow!(e))? else {
        return not_sealed("there is no manifest".into());
    };
    if let system::Verification::Tampered(d) = system::verify(fd).map_err(|e| anyhow::anyhow!(e))? {
        return not_sealed(format!(
            "system/ differs from it ({} difference(s))",
            d.len()
        ));
    }
    match checked_with {
        Some(None) => {
            return not_sealed(
                "the vault was locked before the rotation, so the old seal could not be checked"
                    .into(),
            )
        }
        Some(Some(old)) => {
            let d = seal::check(fd, &manifest, &old).map_err(|e| anyhow::anyhow!(e))?;
            if !d.is_empty() && d != [system::Difference::NotSealed] {
                return not_sealed(format!(
                    "its seal did not hold before the rotation ({})",
                    d[0]
                ));
            }
        }
        None => {}
    }
    let key = crate::store_ops::sealing_key(&store)?
        .ok_or_else(|| anyhow::anyhow!("the vault has no key to seal with"))?;
    crate::store_ops::seal_after(&store, Some(key))?;
    Ok(format!("{} sealed with the vault's key", system::MANIFEST))
}

fn grant(
    store_root: &Path,
    agent: &str,
    name: &str,
    add: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    check_secret_name(name).map_err(fail)?;
    let dir = store_root.join("system");
    let path = dir.join("policy.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        anyhow!(
            "{}: {e} (the policy file is installed by `clawfs init`)",
            path.display()
        )
    })?;
    let new =
        edit_policy(&text, agent, name, add).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let Some(new) = new else {
        let what = if add { "already has" } else { "does not have" };
        writeln!(out, "{agent} {what} {name}; policy unchanged").map_err(|e| anyhow!(e))?;
        return Ok(());
    };
    if let Err(errors) = clawfs_policy::Policy::parse(&new) {
        let msgs: Vec<String> = errors.iter().map(|e| e.message.clone()).collect();
        return Err(anyhow!(
            "{}: the edited policy would be invalid: {}",
            path.display(),
            msgs.join("; ")
        )
        .into());
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path)
            .context("policy metadata")?
            .permissions(),
    ) & 0o7777;
    let store = clawfs_core::store::Store::open(store_root)?;
    let key = crate::store_ops::sealing_key(&store)?;
    // Installed with its hash recorded in the system manifest, sealed again.
    clawfs_integrity::system::install(
        store.root_fd(),
        "policy.toml",
        new.as_bytes(),
        mode,
        &clawfs_store::clock::now_rfc3339(),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    crate::store_ops::seal_after(&store, key)?;
    let verb = if add { "granted" } else { "revoked" };
    let to = if add { "to" } else { "from" };
    // What the running daemon enforces changes now, not at the next reload.
    let state = match crate::commands::policy::apply_policy(&store)? {
        crate::commands::policy::Applied::ByDaemon(pid) => {
            format!("in force now (the daemon serving the store, pid {pid}, reloaded its policy)")
        }
        crate::commands::policy::Applied::NoDaemon => {
            "no daemon serves this store; the next mount applies it".to_string()
        }
    };
    writeln!(out, "{verb} {name} {to} {agent}; {state}").map_err(|e| anyhow!(e))?;
    Ok(())
}

/// The policy text with NAME added to or removed from `[agents.AGENT] secrets`; `None` when
/// nothing changes.
pub fn edit_policy(
    text: &str,
    agent: &str,
    name: &str,
    add: bool,
) -> anyhow::Result<Option<String>> {
    let mut doc: toml_edit::DocumentMut = text.parse().context("does not parse as TOML")?;
    let table = doc
        .get_mut("agents")
        .and_then(|a| a.as_table_like_mut())
        .and_then(|a| a.get_mut(agent))
        .and_then(|t| t.as_table_like_mut())
        .ok_or_else(|| anyhow!("no agent {agent:?} ([agents.{agent}])"))?;
    let present = table
        .get("secrets")
        .and_then(|s| s.as_array())
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(name)));
    if present == add {
        return Ok(None);
    }
    if table.get("secrets").is_none() {
        table.insert("secrets", toml_edit::value(toml_edit::Array::new()));
    }
    let arr = table
        .get_mut("secrets")
        .and_then(|s| s.as_array_mut())
        .ok_or_else(|| anyhow!("[agents.{agent}] secrets is not an array"))?;
    let one_line = !arr.to_string().contains('\n');
    if add {
        arr.push(name);
    } else {
        arr.retain(|v| v.as_str() != Some(name));
    }
    if one_line {
        // Normalise the spacing between items; multi-line arrays keep their layout.
        arr.fmt();
    }
    Ok(Some(doc.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "version = 1\n\n# The roster.\n[agents.fs-engine] # files\nuid = 61006\n\n# Observability.\n[agents.observability]\nuid = 61007\nsecrets = [\"a\"] # granted\n";

    #[test]
    fn grant_and_revoke_keep_formatting() {
        let t = edit_policy(POLICY, "fs-engine", "openai-api-key", true)
            .unwrap()
            .unwrap();
        assert!(
            t.contains("[agents.fs-engine] # files\nuid = 61006\nsecrets = [\"openai-api-key\"]\n"),
            "{t}"
        );
        assert!(
            t.contains("# Observability.\n[agents.observability]"),
            "{t}"
        );
        assert!(edit_policy(&t, "fs-engine", "openai-api-key", true)
            .unwrap()
            .is_none());
        let t2 = edit_policy(&t, "observability", "b", true)
            .unwrap()
            .unwrap();
        assert!(t2.contains("secrets = [\"a\", \"b\"] # granted"), "{t2}");
        let t3 = edit_policy(&t2, "observability", "a", false)
            .unwrap()
            .unwrap();
        assert!(t3.contains("secrets = [\"b\"] # granted"), "{t3}");
        assert!(edit_policy(&t3, "observability", "zzz", false)
            .unwrap()
            .is_none());
        assert!(edit_policy(POLICY, "nobody", "a", true).is_err());
        clawfs_policy::Policy::parse(&t3).unwrap();
    }

    #[test]
    fn default_policy_grant_is_valid() {
        let t = edit_policy(
            clawfs_policy::DEFAULT_POLICY_TOML,
            "fs-engine",
            "openai-api-key",
            true,
        )
        .unwrap()
        .unwrap();
        let p = clawfs_policy::Policy::parse(&t).unwrap();
        assert_eq!(p.agents().len(), 8);
    }

    #[test]
    fn cli_round_trip_with_host_key() {
        let d = tempfile::tempdir().unwrap();
        let run = |cmd: VaultCommand| {
            let mut out = Vec::new();
            run_with(d.path(), &cmd, VaultConfig::default(), &mut out)
                .map(|()| String::from_utf8(out).unwrap())
        };
        let o = run(VaultCommand::Init {
            sealer: Some(SealerArg::HostKey),
            tcti: None,
            pcrs: vec![],
        })
        .unwrap();
        assert!(o.contains("sealed by host-key; unlocked"), "{o}");
        let v = Vault::open(d.path(), VaultConfig::default()).unwrap();
        v.put("k", b"v").unwrap();
        assert_eq!(run(VaultCommand::Get { name: "k".into() }).unwrap(), "v");
        assert_eq!(run(VaultCommand::List).unwrap(), "k\n");
        let o = run(VaultCommand::Status { json: true }).unwrap();
        let j: serde_json::Value = serde_json::from_str(&o).unwrap();
        assert_eq!(j["sealer"], "host-key");
        assert_eq!(j["secrets"], 1);
        assert!(run(VaultCommand::Rotate)
            .unwrap()
            .contains("rotated 1 secrets"));
        run(VaultCommand::Lock).unwrap();
        assert!(run(VaultCommand::Get { name: "k".into() })
            .unwrap_err()
            .to_string()
            .contains("locked"));
        run(VaultCommand::Unlock {
            timeout: std::time::Duration::from_secs(60),
        })
        .unwrap();
        run(VaultCommand::Rm { name: "k".into() }).unwrap();
        assert_eq!(run(VaultCommand::List).unwrap(), "");
        // No policy file in a bare store: the error says where it should be.
        let e = run(VaultCommand::Grant {
            agent: "fs-engine".into(),
            name: "k".into(),
        })
        .unwrap_err();
        assert!(e.to_string().contains("system/policy.toml"), "{e}");
        run(VaultCommand::Lock).unwrap();
    }
}
