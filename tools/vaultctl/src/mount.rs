//! One tool call through the mount: open `<mount>/tools/call/<tool>` read-write, write the JSON
//! request, read the JSON response on the same descriptor (docs/architecture.md §6).

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{Exit, Outcome};

/// The largest request the daemon accepts on a call file (its `max_request_bytes`); a larger
/// write fails with `EFBIG`.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// A ClawFS mount as vaultctl uses it.
#[derive(Debug, Clone)]
pub struct Mount {
    root: PathBuf,
}

/// A call that did not produce a tool response.
#[derive(Debug)]
pub enum CallError {
    /// `<mount>/tools/call` is not there: not mounted, wrong `--mount`, or the daemon is gone.
    Unavailable { mount: PathBuf, cause: String },
    /// The request is over the size the daemon takes.
    TooLarge { bytes: usize },
    /// Opening, writing or reading the call file failed.
    Io { what: String, err: std::io::Error },
    /// The response is not a JSON object.
    BadResponse { detail: String },
}

impl CallError {
    /// The JSON error vaultctl prints for it, and its exit status.
    pub fn into_outcome(self) -> Outcome {
        match self {
            CallError::Unavailable { mount, cause } => Outcome::error(
                Exit::System,
                "mount_unavailable",
                format!(
                    "no ClawFS mount at {} ({cause}); pass --mount DIR or set CLAWFS_MOUNT",
                    mount.display()
                ),
            ),
            CallError::TooLarge { bytes } => Outcome::error(
                Exit::User,
                "too_large",
                format!(
                    "the request is {bytes} bytes; the tool files take at most {MAX_REQUEST_BYTES}"
                ),
            ),
            CallError::Io { what, err } => {
                Outcome::error(Exit::System, "io_error", format!("{what}: {err}"))
            }
            CallError::BadResponse { detail } => Outcome::error(
                Exit::System,
                "bad_response",
                format!("the daemon's answer is not a JSON object: {detail}"),
            ),
        }
    }
}

impl Mount {
    /// The mount at `root` (not checked until the first call).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Mount { root: root.into() }
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Calls `tool` with `request` (a JSON object) and returns the raw response and its parsed
    /// form.
    pub fn call(&self, tool: &str, request: &Value) -> Result<(Vec<u8>, Value), CallError> {
        let body = serde_json::to_vec(request).expect("JSON serialises");
        if body.len() > MAX_REQUEST_BYTES {
            return Err(CallError::TooLarge { bytes: body.len() });
        }
        let calls = self.root.join("tools/call");
        match std::fs::metadata(&calls) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(CallError::Unavailable {
                    mount: self.root.clone(),
                    cause: format!("{} is not a directory", calls.display()),
                })
            }
            Err(e) => {
                return Err(CallError::Unavailable {
                    mount: self.root.clone(),
                    cause: format!("{}: {e}", calls.display()),
                })
            }
        }
        let path = calls.join(tool);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|err| CallError::Io {
                what: format!("opening {}", path.display()),
                err,
            })?;
        if let Err(err) = file.write_all(&body) {
            if err.raw_os_error() == Some(libc::EFBIG) {
                return Err(CallError::TooLarge { bytes: body.len() });
            }
            return Err(CallError::Io {
                what: format!("writing the request to {}", path.display()),
                err,
            });
        }
        let mut raw = Vec::new();
        file.read_to_end(&mut raw).map_err(|err| CallError::Io {
            what: format!("reading the response from {}", path.display()),
            err,
        })?;
        match serde_json::from_slice::<Value>(&raw) {
            Ok(v) if v.is_object() => {
                if raw.last() != Some(&b'\n') {
                    raw.push(b'\n');
                }
                Ok((raw, v))
            }
            Ok(_) => Err(CallError::BadResponse {
                detail: String::from_utf8_lossy(&raw).chars().take(200).collect(),
            }),
            Err(e) => Err(CallError::BadResponse {
                detail: format!(
                    "{e}: {:?}",
                    String::from_utf8_lossy(&raw)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            }),
        }
    }
}
