//! The kernel keyring that holds an unlocked vault's master key and cached per-secret keys.
//!
//! One named keyring per vault, `clawfs:<vault-id>`, linked into root's user keyring (`@u`). The
//! CLI (`clawfs vault unlock`) and the daemon are separate root processes, possibly in different
//! session keyrings (a systemd service gets a private one), but every process of uid 0 resolves
//! the same `@u`, so both find the keyring by searching `@u`. Keys and the keyring grant the
//! possessor everything and the owning uid (0) view/read/search/write/setattr, other uids
//! nothing: agents (non-root uids) can neither find nor read them.
//!
//! `linux-keyutils` handles per-key calls (read, timeout, permissions, invalidate); creating a
//! keyring and searching by type need the raw `add_key`/`keyctl` syscalls because the crate only
//! knows `user` keys.

use std::ffi::CString;
use std::time::Duration;

use linux_keyutils::{Key, KeyError, KeyPermissions, KeySerialId};
use zeroize::Zeroizing;

use super::error::VaultError;

const KEY_SPEC_USER_KEYRING: libc::c_long = -4;
const KEYCTL_SETPERM: libc::c_long = 5;
const KEYCTL_DESCRIBE: libc::c_long = 6;
const KEYCTL_CLEAR: libc::c_long = 7;
const KEYCTL_UNLINK: libc::c_long = 9;
const KEYCTL_SEARCH: libc::c_long = 10;
const KEYCTL_READ: libc::c_long = 11;

/// Possessor: everything. Owner uid: view, read, write, search, link, setattr.
const RING_PERMS: u32 = 0x3f3f_0000;
/// Possessor: everything. Owner uid: view, read, write, search, setattr (no link).
const KEY_PERMS: u32 = 0x3f2f_0000;

/// Description of the unlocked master key (docs/architecture.md §7, P1.4 §3.2 Level 2).
pub const MASTER: &str = "clawos-master";
/// Description of the new master key while a rotation switches secrets over.
pub const MASTER_NEXT: &str = "clawos-master-next";

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn keyring_err(what: &str, e: i32) -> VaultError {
    VaultError::Keyring(format!("{what}: {}", std::io::Error::from_raw_os_error(e)))
}

fn cstring(s: &str) -> Result<CString, VaultError> {
    CString::new(s).map_err(|_| VaultError::Keyring(format!("bad key description {s:?}")))
}

/// Errors that mean "this key is not (or no longer) there".
fn is_absent(e: i32) -> bool {
    matches!(
        e,
        libc::ENOKEY | libc::EKEYEXPIRED | libc::EKEYREVOKED | libc::ENOENT
    )
}

fn key_absent(e: &KeyError) -> bool {
    matches!(
        e,
        KeyError::KeyDoesNotExist
            | KeyError::KeyExpired
            | KeyError::KeyRevoked
            | KeyError::KeyringDoesNotExist
    )
}

fn add_key_raw(ktype: &str, desc: &str, payload: Option<&[u8]>, ring: i64) -> Result<i32, i32> {
    let t = CString::new(ktype).expect("static type");
    let d = CString::new(desc).map_err(|_| libc::EINVAL)?;
    let (ptr, len) = match payload {
        Some(p) => (p.as_ptr(), p.len()),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: add_key(2) with valid NUL-terminated strings and a payload pointer/length pair that
    // describes a live slice (or null/0); the kernel copies everything before returning.
    let r = unsafe { libc::syscall(libc::SYS_add_key, t.as_ptr(), d.as_ptr(), ptr, len, ring) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as i32)
    }
}

fn keyctl(op: libc::c_long, a: libc::c_long, b: libc::c_long, c: libc::c_long) -> Result<i64, i32> {
    // SAFETY: keyctl(2) operations used here take integers or pointers to live buffers/strings
    // that the callers keep alive across the call.
    let r = unsafe { libc::syscall(libc::SYS_keyctl, op, a, b, c, 0 as libc::c_long) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

fn search(ring: i64, ktype: &str, desc: &str) -> Result<Option<i32>, VaultError> {
    let t = CString::new(ktype).expect("static type");
    let d = cstring(desc)?;
    match keyctl(
        KEYCTL_SEARCH,
        ring,
        t.as_ptr() as libc::c_long,
        d.as_ptr() as libc::c_long,
    ) {
        Ok(id) => Ok(Some(id as i32)),
        Err(e) if is_absent(e) => Ok(None),
        Err(e) => Err(keyring_err(&format!("search {desc}"), e)),
    }
}

/// A key's serial number and payload.
pub type KeyPayload = (i32, Zeroizing<Vec<u8>>);

/// A vault's dedicated keyring.
#[derive(Debug, Clone)]
pub struct Keyring {
    id: i32,
    name: String,
}

impl Keyring {
    /// Finds the keyring `name` under `@u`; with `create`, makes it if absent. `Ok(None)` when
    /// it does not exist and `create` is false. Callers that create hold the vault's write lock,
    /// so two processes never create two keyrings of the same name.
    pub fn open(name: &str, create: bool) -> Result<Option<Keyring>, VaultError> {
        if let Some(id) = search(KEY_SPEC_USER_KEYRING, "keyring", name)? {
            return Ok(Some(Keyring {
                id,
                name: name.to_string(),
            }));
        }
        if !create {
            return Ok(None);
        }
        let id = add_key_raw("keyring", name, None, KEY_SPEC_USER_KEYRING)
            .map_err(|e| keyring_err(&format!("create keyring {name}"), e))?;
        keyctl(KEYCTL_SETPERM, id.into(), RING_PERMS.into(), 0)
            .map_err(|e| keyring_err("set keyring permissions", e))?;
        Ok(Some(Keyring {
            id,
            name: name.to_string(),
        }))
    }

    /// The keyring's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The keyring's serial number.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Adds (or atomically replaces the payload of) the `user` key `desc`, with a timeout.
    /// Returns the key's serial number.
    pub fn put(&self, desc: &str, payload: &[u8], timeout: Duration) -> Result<i32, VaultError> {
        let id = add_key_raw("user", desc, Some(payload), self.id.into())
            .map_err(|e| keyring_err(&format!("add {desc}"), e))?;
        let key = Key::from_id(KeySerialId::new(id));
        key.set_perms(KeyPermissions::from_u32(KEY_PERMS))
            .map_err(|e| VaultError::Keyring(format!("set permissions of {desc}: {e}")))?;
        let secs = timeout.as_secs().max(1) as usize;
        key.set_timeout(secs)
            .map_err(|e| VaultError::Keyring(format!("set timeout of {desc}: {e}")))?;
        Ok(id)
    }

    /// Reads the `user` key `desc`; `None` if absent, expired or revoked.
    pub fn get(&self, desc: &str) -> Result<Option<KeyPayload>, VaultError> {
        let Some(id) = search(self.id.into(), "user", desc)? else {
            return Ok(None);
        };
        let key = Key::from_id(KeySerialId::new(id));
        let mut buf = Zeroizing::new(vec![0u8; 64]);
        match key.read(&mut *buf) {
            Ok(n) if n <= buf.len() => {
                buf.truncate(n);
                Ok(Some((id, buf)))
            }
            Ok(n) => Err(VaultError::Keyring(format!(
                "{desc}: unexpected payload size {n}"
            ))),
            Err(e) if key_absent(&e) => Ok(None),
            Err(e) => Err(VaultError::Keyring(format!("read {desc}: {e}"))),
        }
    }

    /// Removes the key `desc` (invalidates it: gone at once for every process).
    pub fn remove(&self, desc: &str) -> Result<(), VaultError> {
        if let Some(id) = search(self.id.into(), "user", desc)? {
            match Key::from_id(KeySerialId::new(id)).invalidate() {
                Ok(()) => {}
                Err(e) if key_absent(&e) => {}
                Err(e) => return Err(VaultError::Keyring(format!("remove {desc}: {e}"))),
            }
        }
        Ok(())
    }

    /// Descriptions of the keys linked in this keyring.
    pub fn descriptions(&self) -> Result<Vec<(i32, String)>, VaultError> {
        let mut ids = vec![0i32; 1024];
        loop {
            let n = keyctl(
                KEYCTL_READ,
                self.id.into(),
                ids.as_mut_ptr() as libc::c_long,
                (ids.len() * 4) as libc::c_long,
            )
            .map_err(|e| keyring_err("list keyring", e))? as usize;
            // KEYCTL_READ returns the full size even when the buffer was too small.
            if n / 4 > ids.len() {
                ids = vec![0i32; n / 4 + 64];
                continue;
            }
            ids.truncate(n / 4);
            break;
        }
        let mut out = Vec::new();
        for id in ids {
            let mut buf = vec![0u8; 512];
            match keyctl(
                KEYCTL_DESCRIBE,
                id.into(),
                buf.as_mut_ptr() as libc::c_long,
                buf.len() as libc::c_long,
            ) {
                Ok(n) => {
                    let n = (n as usize).min(buf.len());
                    let s = String::from_utf8_lossy(&buf[..n]);
                    let s = s.trim_end_matches('\0');
                    // "type;uid;gid;perm;description"
                    if let Some(desc) = s.splitn(5, ';').nth(4) {
                        out.push((id, desc.to_string()));
                    }
                }
                Err(e) if is_absent(e) => {}
                Err(e) => return Err(keyring_err("describe key", e)),
            }
        }
        Ok(out)
    }

    /// Removes every key whose description starts with `prefix`.
    pub fn remove_prefix(&self, prefix: &str) -> Result<usize, VaultError> {
        let mut n = 0;
        for (id, desc) in self.descriptions()? {
            if desc.starts_with(prefix) {
                keyctl(KEYCTL_UNLINK, id.into(), self.id.into(), 0)
                    .or_else(|e| if is_absent(e) { Ok(0) } else { Err(e) })
                    .map_err(|e| keyring_err(&format!("unlink {desc}"), e))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Clears the keyring (master key and every derived key) and unlinks it from `@u`.
    pub fn destroy(self) -> Result<(), VaultError> {
        keyctl(KEYCTL_CLEAR, self.id.into(), 0, 0)
            .or_else(|e| if is_absent(e) { Ok(0) } else { Err(e) })
            .map_err(|e| keyring_err("clear keyring", e))?;
        keyctl(KEYCTL_UNLINK, self.id.into(), KEY_SPEC_USER_KEYRING, 0)
            .or_else(|e| if is_absent(e) { Ok(0) } else { Err(e) })
            .map_err(|e| keyring_err("unlink keyring", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_remove_destroy() {
        let name = format!(
            "clawfs-test:{}",
            hex::encode(super::super::crypto::random_bytes::<8>())
        );
        assert!(Keyring::open(&name, false).unwrap().is_none());
        let ring = Keyring::open(&name, true).unwrap().unwrap();
        let again = Keyring::open(&name, false).unwrap().unwrap();
        assert_eq!(ring.id(), again.id());
        ring.put("a", b"0123", Duration::from_secs(60)).unwrap();
        assert_eq!(&ring.get("a").unwrap().unwrap().1[..], b"0123");
        ring.put("a", b"4567", Duration::from_secs(60)).unwrap();
        assert_eq!(&ring.get("a").unwrap().unwrap().1[..], b"4567");
        ring.put("pre:x", b"1", Duration::from_secs(60)).unwrap();
        ring.put("pre:y", b"2", Duration::from_secs(60)).unwrap();
        assert_eq!(ring.remove_prefix("pre:").unwrap(), 2);
        assert!(ring.get("pre:x").unwrap().is_none());
        ring.remove("a").unwrap();
        assert!(ring.get("a").unwrap().is_none());
        ring.put("b", b"1", Duration::from_secs(60)).unwrap();
        ring.destroy().unwrap();
        assert!(Keyring::open(&name, false).unwrap().is_none());
    }
}
