//! The arguments of `clawfs vault`.

use std::time::Duration;

use clap::{Subcommand, ValueEnum};

/// `--sealer` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SealerArg {
    /// TPM 2.0 (`/dev/tpmrm0`, `--tcti`, or TPM2TOOLS_TCTI/TCTI).
    Tpm,
    /// An admin passphrase (PBKDF2-HMAC-SHA256, 600,000 iterations).
    Passphrase,
    /// A root-only key file: `<store>/.clawfs/host.key`, or on a host of a store that hosts
    /// share `/etc/clawfs/vault-HOST.key` (the folder: CLAWFS_VAULT_KEY_DIR).
    HostKey,
}

/// The `clawfs vault` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum VaultCommand {
    /// Create the master key and seal it (default: TPM if reachable, else passphrase if
    /// CLAWFS_VAULT_PASSPHRASE is set, else host key). Leaves the vault unlocked.
    Init {
        /// Which sealer protects the master key.
        #[arg(long, value_enum)]
        sealer: Option<SealerArg>,
        /// TPM TCTI, e.g. `device:/dev/tpmrm0` or `swtpm:host=127.0.0.1,port=2321`.
        #[arg(long)]
        tcti: Option<String>,
        /// Bind the TPM-sealed key to these SHA-256 PCRs (comma-separated indices, e.g. 0,2,7).
        #[arg(long, value_delimiter = ',')]
        pcrs: Vec<u8>,
    },
    /// Unseal the master key into the kernel keyring (finishing an interrupted rotation first).
    Unlock {
        /// How long the key stays in the keyring: seconds, or with a unit (90s, 30m, 8h).
        #[arg(long, default_value = "1h", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Remove the master key and every cached derived key from the kernel keyring.
    Lock,
    /// Sealer, locked or unlocked, number of secrets, key id and generation.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Store a secret read from stdin (one trailing newline is dropped unless --raw).
    Put {
        /// Secret name ([a-z0-9-]+).
        name: String,
        /// Keep stdin byte for byte.
        #[arg(long)]
        raw: bool,
    },
    /// Print a secret to stdout.
    Get {
        /// Secret name.
        name: String,
    },
    /// List secret names.
    List,
    /// Remove a secret.
    Rm {
        /// Secret name.
        name: String,
    },
    /// Let AGENT read secret NAME (edits system/policy.toml; the daemon serving the store
    /// applies it at once).
    Grant {
        /// Agent name.
        agent: String,
        /// Secret name.
        name: String,
    },
    /// Withdraw AGENT's access to secret NAME.
    Revoke {
        /// Agent name.
        agent: String,
        /// Secret name.
        name: String,
    },
    /// Re-encrypt every secret under a new master key; archive the old one for 30 days.
    Rotate,
    /// On a host of a store that hosts share: create this host's key pair for the vault, its
    /// private half sealed here (default: TPM if reachable, else passphrase if
    /// CLAWFS_VAULT_PASSPHRASE is set, else a key file). Prints the fingerprint an admin
    /// compares before `add-host` on a host that has the master key.
    HostKey {
        /// Which sealer protects this host's private key.
        #[arg(long, value_enum)]
        sealer: Option<SealerArg>,
        /// TPM TCTI, e.g. `device:/dev/tpmrm0` or `swtpm:host=127.0.0.1,port=2321`.
        #[arg(long)]
        tcti: Option<String>,
    },
    /// Give HOST the master key, wrapped to the key it made with `host-key` (run on a host
    /// where the vault is unlocked). Prints the fingerprint granted to.
    AddHost {
        /// The host.
        host: String,
    },
    /// Take the master key from HOST: its key and grant go, and the key is rotated at once (so
    /// that a copy of its old grant opens nothing new); the other hosts get the new key.
    RemoveHost {
        /// The host.
        host: String,
    },
    /// TPM sealer: accept the vault's current state as its latest (a backup put back on purpose,
    /// a lost TPM rollback counter) and unlock; every other copy is refused from then on.
    RebindCounter,
}

/// `90`, `90s`, `30m`, `8h`, `1d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1),
        Some((i, 'm')) => (&s[..i], 60),
        Some((i, 'h')) => (&s[..i], 3600),
        Some((i, 'd')) => (&s[..i], 86400),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: want seconds or a number with s, m, h or d"))?;
    if n == 0 {
        return Err("the timeout must be positive".into());
    }
    Ok(Duration::from_secs(n.saturating_mul(mult)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("h").is_err());
    }
}
