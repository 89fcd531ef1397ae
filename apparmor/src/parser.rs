//! The host side: is AppArmor active, is `apparmor_parser` here, and running it.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The kernel feature ABI profiles are checked against when the kernel's own features cannot be
/// read (AppArmor inactive): the `abi <abi/3.0>` the template declares.
pub const FEATURES_FILE: &str = "/etc/apparmor.d/abi/3.0";

const ENABLED: &str = "/sys/module/apparmor/parameters/enabled";
const SECURITYFS: &str = "/sys/kernel/security/apparmor";

/// What this host offers: enforcement needs the kernel module enabled *and* its securityfs
/// interface; checking and loading need `apparmor_parser`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// `/sys/module/apparmor/parameters/enabled` reads `Y`.
    pub kernel_enabled: bool,
    /// `/sys/kernel/security/apparmor` exists (securityfs mounted, AppArmor the/a major LSM).
    pub securityfs: bool,
    /// Path and first version line of `apparmor_parser`, if found.
    pub parser: Option<(PathBuf, String)>,
}

impl Availability {
    /// The kernel enforces AppArmor.
    pub fn active(&self) -> bool {
        self.kernel_enabled && self.securityfs
    }

    /// Profiles can be loaded and applied: active and a parser.
    pub fn usable(&self) -> bool {
        self.active() && self.parser.is_some()
    }

    /// Profiles can at least be checked ([`check`]).
    pub fn can_check(&self) -> bool {
        self.parser.is_some()
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parser = match &self.parser {
            Some((p, v)) => format!("{v} at {}", p.display()),
            None => "apparmor_parser not found (package apparmor)".to_string(),
        };
        if self.usable() {
            return write!(f, "AppArmor is active; {parser}");
        }
        let mut why = Vec::new();
        if !self.kernel_enabled {
            why.push(format!(
                "AppArmor is not enabled in this kernel ({ENABLED} is not Y)"
            ));
        } else if !self.securityfs {
            why.push(format!("{SECURITYFS} is missing (securityfs not mounted?)"));
        }
        if self.parser.is_none() {
            why.push(parser.clone());
        }
        write!(f, "not available on this host: {}", why.join("; "))?;
        if self.parser.is_some() {
            write!(f, " ({parser}: profiles can be checked, not loaded)")?;
        }
        Ok(())
    }
}

/// Where `apparmor_parser` is: `$PATH`, then `/usr/sbin` and `/sbin` (not on a user's `$PATH`).
pub fn parser_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("apparmor_parser"))
        .find(|p| p.is_file())
}

/// Whether this host can enforce, load and check profiles.
pub fn availability() -> Availability {
    let kernel_enabled = std::fs::read_to_string(ENABLED).is_ok_and(|v| v.trim() == "Y");
    let securityfs = Path::new(SECURITYFS).is_dir();
    let parser = parser_path().map(|p| {
        let version = Command::new(&p)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "apparmor_parser (version unknown)".to_string());
        (p, version)
    });
    Availability {
        kernel_enabled,
        securityfs,
        parser,
    }
}

/// A profile `apparmor_parser` refused, or could not be run.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// No `apparmor_parser` on this host.
    #[error("apparmor_parser not found (install the apparmor package)")]
    NoParser,
    /// Writing the temporary file or running the parser failed.
    #[error("running apparmor_parser: {0}")]
    Io(#[from] std::io::Error),
    /// The parser refused the profile. `line` is 1-based in the profile text (the parser reports
    /// no column); `text` is that line of the profile (empty if the error is in an include).
    #[error("apparmor_parser refused the profile{}: {message}{}",
        .line.map(|l| format!(" at line {l}")).unwrap_or_default(),
        if .text.is_empty() { String::new() } else { format!(" (line: {:?})", .text) })]
    Refused {
        line: Option<usize>,
        text: String,
        message: String,
    },
}

/// Writes `profile` to a temporary file and runs `apparmor_parser` on it with `args`.
fn run_parser(profile: &str, args: &[&str]) -> Result<(), CheckError> {
    let parser = parser_path().ok_or(CheckError::NoParser)?;
    let mut file = tempfile::Builder::new()
        .prefix("clawfs-apparmor-")
        .suffix(".profile")
        .tempfile()?;
    file.write_all(profile.as_bytes())?;
    file.flush()?;
    let out = Command::new(parser)
        .args(args)
        .arg(file.path())
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    let mut message = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if message.is_empty() {
        message = format!("exit status {}", out.status);
    }
    // "AppArmor parser error for /tmp/x in profile /tmp/x at line 5: syntax error, ..."
    let name = file.path().display().to_string();
    let line = message
        .split(" at line ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok());
    // The error is in our file (not an include) when the parser names it as the profile file.
    let in_profile = message.contains(&format!("in profile {name} at line"));
    let text = match (line, in_profile) {
        (Some(l), true) => profile
            .lines()
            .nth(l.saturating_sub(1))
            .unwrap_or("")
            .trim()
            .to_string(),
        _ => String::new(),
    };
    let message = message
        .lines()
        .map(|l| l.replace(&name, "<profile>"))
        .collect::<Vec<_>>()
        .join("; ");
    Err(CheckError::Refused {
        line,
        text,
        message,
    })
}

/// Compiles `profile` without loading it (`apparmor_parser -Q -K`), against the kernel's features
/// when AppArmor is active, else against [`FEATURES_FILE`]. Works on hosts without AppArmor.
pub fn check(profile: &str) -> Result<(), CheckError> {
    let mut args = vec!["-Q", "-K"];
    if !availability().active() && Path::new(FEATURES_FILE).exists() {
        args.extend(["--features-file", FEATURES_FILE]);
    }
    run_parser(profile, &args)
}

/// Loads (or replaces) `profile` in the kernel: `apparmor_parser -r -K` (no cache written).
/// Needs root (CAP_MAC_ADMIN) and an active AppArmor; [`check`] it first for a clearer error.
/// Then start the agent under it with [`crate::OnExec`].
pub fn load(profile: &str) -> Result<(), CheckError> {
    run_parser(profile, &["-r", "-K"])
}
