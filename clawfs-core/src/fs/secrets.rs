//! `vault/secrets/<name>` through the mount: plaintext to the admin and to agents the policy
//! grants the secret, EACCES to everyone else. Reads decrypt in the daemon (the vault must be
//! unlocked; a locked vault answers ENOKEY); an admin's write is encrypted and stored when the
//! file is closed. Plaintext never touches the store's disk and is never passthrough.

use clawfs_store::ToErrno;
use std::sync::PoisonError;

use super::ClawFs;
use crate::creds::Caller;
use crate::error::{FsError, FsResult};
use crate::generated_files::{Exchange, GeneratedHandle, GeneratedNode};
use clawfs_audit::AuditEvent;
use clawfs_policy::{Access, Identity, NsPath};
use clawfs_vault::Vault;

fn secret_path(name: &str) -> FsResult<NsPath> {
    Ok(NsPath::parse(&format!("/vault/secrets/{name}"))?)
}

impl ClawFs {
    pub(super) fn vault(&self) -> FsResult<&Vault> {
        if let Some(v) = self.vault.get() {
            return Ok(v);
        }
        let v =
            Vault::open(self.store.root(), self.store.vault_config()).map_err(FsError::Vault)?;
        Ok(self.vault.get_or_init(|| v))
    }

    /// Signs the audit trail with the vault's audit key while the vault is unlocked, and stops
    /// when it is locked; called periodically by the daemon (the vault is unlocked and locked by
    /// other processes). Returns whether the trail is signed now.
    pub fn refresh_audit_key(&self) -> bool {
        let key = self.vault().ok().and_then(Vault::audit_key);
        let mut last = self
            .audit_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *last != key {
            if let Some(audit) = self.audit_log() {
                audit.set_hmac_key(key);
            }
            *last = key;
        }
        key.is_some()
    }

    /// Whether a secret is stored under `name`.
    pub(super) fn secret_exists(&self, name: &str) -> bool {
        self.secret_names().iter().any(|n| n == name)
    }

    /// The names of the stored secrets (none when the vault is not set up).
    fn secret_names(&self) -> Vec<String> {
        self.vault()
            .ok()
            .and_then(|v| v.list().ok())
            .unwrap_or_default()
    }

    /// The secret names `caller` may see: all for admins, the granted ones for agents.
    pub(super) fn visible_secrets(&self, caller: &Caller) -> Vec<String> {
        let names = self.secret_names();
        let who = self.identify(caller);
        let policy = self.policy();
        names
            .into_iter()
            .filter(|n| secret_path(n).is_ok_and(|p| policy.check(&who, Access::Read, &p).is_ok()))
            .collect()
    }

    /// Opening a secret: reading decrypts now (after the grant check); writing, for admins,
    /// collects the new value for [`ClawFs::store_secret`].
    pub(super) fn open_secret(
        &self,
        caller: &Caller,
        name: &str,
        writes: bool,
        exchange: &mut Exchange,
    ) -> FsResult<()> {
        let path = secret_path(name)?;
        let access = if writes { Access::Write } else { Access::Read };
        let who = self.decide(caller, "vault:open", access, &path)?;
        if writes {
            if who != Identity::Admin {
                return self.refuse_secret_change(caller, "vault:open", &path);
            }
            exchange.response = None;
            return Ok(());
        }
        let value = self.vault()?.get(name);
        let ev = AuditEvent::new(
            super::audit_name(&who),
            caller.pid,
            "vault:get",
            path.to_string(),
        );
        match value {
            Ok(v) => {
                self.record(ev.bytes(v.len() as u64));
                exchange.response = Some(v.to_vec());
                Ok(())
            }
            Err(e) => {
                let e = FsError::Vault(e);
                self.record(ev.failed(e.errno()).reason(e.to_string()));
                tracing::info!(secret = name, error = %e, "secret not served");
                Err(e)
            }
        }
    }

    /// Stores what an admin wrote to `vault/secrets/<name>` (one trailing newline dropped, as
    /// `echo` adds it), encrypted; called when the file is closed.
    pub(super) fn store_secret(&self, handle: &GeneratedHandle) -> FsResult<()> {
        let GeneratedNode::Secret(name) = &handle.node else {
            return Ok(());
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A read handle holds the plaintext as its response; a write handle that wrote
        // nothing (a shell's copy closed after dup2) stores nothing.
        if state.response.is_some() || !state.written() {
            return Ok(());
        }
        let cut = state.cut;
        let mut value = std::mem::take(&mut state.request);
        if value.last() == Some(&b'\n') {
            value.pop();
        }
        // Done: later flushes of this descriptor store nothing more unless written again.
        state.response = Some(Vec::new());
        drop(state);
        let path = secret_path(name)?;
        let who = self.identify(&handle.caller);
        let ev = AuditEvent::new(
            super::audit_name(&who),
            handle.caller.pid,
            "vault:put",
            path.to_string(),
        );
        if cut.is_some() {
            // Part of the value was refused: storing the rest would keep a secret cut short.
            zeroize::Zeroize::zeroize(&mut value);
            let why = "part of the value was refused (too large): the secret was not stored";
            self.record(ev.failed(libc::EFBIG).reason(why));
            return Err(FsError::Refused {
                errno: libc::EFBIG,
                why,
            });
        }
        let stored = self.vault()?.put(name, &value);
        zeroize::Zeroize::zeroize(&mut value);
        match stored {
            Ok(version) => {
                self.record(ev.reason(format!("version {version}")));
                Ok(())
            }
            Err(e) => {
                let e = FsError::Vault(e);
                self.record(ev.failed(e.errno()).reason(e.to_string()));
                Err(e)
            }
        }
    }

    /// Removing `vault/secrets/<name>` (admins).
    pub(super) fn remove_secret(&self, caller: &Caller, name: &str) -> FsResult<()> {
        let path = secret_path(name)?;
        let who = self.decide(caller, "vault:rm", Access::Delete, &path)?;
        if who != Identity::Admin {
            return self.refuse_secret_change(caller, "vault:rm", &path);
        }
        self.vault()?.remove(name).map_err(FsError::Vault)
    }

    /// Only the admin changes secrets: the refusal is recorded like the policy's.
    fn refuse_secret_change(
        &self,
        caller: &Caller,
        op: &'static str,
        path: &NsPath,
    ) -> FsResult<()> {
        let denial = clawfs_policy::Denial {
            rule: clawfs_policy::rule::VAULT_GRANT,
            reason: format!(
                "only the admin changes secrets ({path}); use `clawfs vault put` as root"
            ),
            kind: clawfs_policy::DenyKind::Access,
        };
        self.refuse(caller, op, path, denial)
    }
}
