//! Tool errors: one `thiserror` enum, mapped to the stable JSON error codes in one place.
//!
//! The code strings are a public contract (agents and `vaultctl` match on them); never rename one.
//! Every message is a sentence a model can act on: what went wrong and what to do instead.

use serde_json::{json, Map, Value};

/// Everything a tool call can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The path (or text, or trash entry) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A selector matched more than one thing; `candidates` lists them.
    #[error("{message}")]
    MultipleMatches {
        /// Actionable description.
        message: String,
        /// What matched, so the caller can pick one.
        candidates: Vec<Value>,
    },
    /// The file changed since the caller read it.
    #[error("{path} has changed since you read it: expected sha256 {expected}, found {actual}. Re-read it (info, read_range) and rebuild the edit against the current text.")]
    HashMismatch {
        /// Workspace-relative path.
        path: String,
        /// The hash the caller sent.
        expected: String,
        /// The file's hash now.
        actual: String,
    },
    /// A unified diff did not apply; the file is unchanged.
    #[error("{message}")]
    PatchFailed {
        /// Actionable description.
        message: String,
        /// One line per failing hunk.
        details: Vec<String>,
    },
    /// The file already holds what the patch would make of it (a re-sent patch); nothing was
    /// written.
    #[error("{0}")]
    AlreadyApplied(String),
    /// The caller's policy does not allow this access.
    #[error("{0}")]
    Denied(String),
    /// The path is inside a protected folder (`.git`, `.obsidian`, `.smarthole`, `.clawfs*`).
    #[error("{0}")]
    Protected(String),
    /// An argument is missing, of the wrong type, or out of range.
    #[error("{0}")]
    InvalidArgs(String),
    /// The request, file or result is beyond a documented limit.
    #[error("{0}")]
    TooLarge(String),
    /// No tool of that name.
    #[error("unknown tool '{name}'. Read {registry} (or call list_allowed) for the tool names.")]
    UnknownTool {
        /// The name asked for (at most 64 characters of it).
        name: String,
        /// Where the registry is: under the mount when the root knows it.
        registry: String,
    },
    /// The request is not a UTF-8 JSON object.
    #[error("{0}")]
    InvalidJson(String),
    /// A file was expected, something else was found.
    #[error("{0}")]
    NotAFile(String),
    /// A directory was expected, something else was found.
    #[error("{0}")]
    NotADirectory(String),
    /// The destination already exists.
    #[error("{0}")]
    Exists(String),
    /// The file holds binary data or is not UTF-8, so a text tool cannot work on it.
    #[error("{0}")]
    NotText(String),
    /// The call was stopped before it finished: its caller is gone.
    #[error("{0}")]
    Interrupted(String),
    /// The operating system refused or failed.
    #[error("{context}: {source}")]
    Io {
        /// What the tool was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand for tool results.
pub type ToolResult<T> = Result<T, ToolError>;

/// The errno a failed call is recorded with on the audit trail (and a `semantic_search` read
/// through the mount fails with): every variant matched, so a new one picks its errno on
/// purpose.
impl clawfs_store::ToErrno for ToolError {
    fn errno(&self) -> i32 {
        match self {
            ToolError::NotFound(_) => libc_errno::ENOENT,
            ToolError::TooLarge(_) => libc_errno::EFBIG,
            ToolError::Exists(_) => libc_errno::EEXIST,
            // The file is not what the caller read: try again after reading it anew.
            ToolError::HashMismatch { .. } => libc_errno::ESTALE,
            ToolError::Denied(_) | ToolError::Protected(_) => libc_errno::EACCES,
            ToolError::NotAFile(_) => libc_errno::EISDIR,
            ToolError::NotADirectory(_) => libc_errno::ENOTDIR,
            ToolError::Interrupted(_) => libc_errno::EINTR,
            ToolError::Io { source, .. } => clawfs_store::ToErrno::errno(source),
            ToolError::MultipleMatches { .. }
            | ToolError::PatchFailed { .. }
            | ToolError::AlreadyApplied(_)
            | ToolError::InvalidArgs(_)
            | ToolError::UnknownTool { .. }
            | ToolError::InvalidJson(_)
            | ToolError::NotText(_) => libc_errno::EINVAL,
        }
    }
}

/// The errno values, as the kernel numbers them.
mod libc_errno {
    use rustix::io::Errno;
    pub const ENOENT: i32 = Errno::NOENT.raw_os_error();
    pub const EFBIG: i32 = Errno::FBIG.raw_os_error();
    pub const EEXIST: i32 = Errno::EXIST.raw_os_error();
    pub const ESTALE: i32 = Errno::STALE.raw_os_error();
    pub const EACCES: i32 = Errno::ACCESS.raw_os_error();
    pub const EISDIR: i32 = Errno::ISDIR.raw_os_error();
    pub const ENOTDIR: i32 = Errno::NOTDIR.raw_os_error();
    pub const EINVAL: i32 = Errno::INVAL.raw_os_error();
    pub const EINTR: i32 = Errno::INTR.raw_os_error();
}

impl ToolError {
    /// The stable error code sent as `"error"`. Matches every variant, with no fallback.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::NotFound(_) => "not_found",
            ToolError::MultipleMatches { .. } => "multiple_matches",
            ToolError::HashMismatch { .. } => "hash_mismatch",
            ToolError::PatchFailed { .. } => "patch_failed",
            ToolError::AlreadyApplied(_) => "already_applied",
            ToolError::Denied(_) => "denied",
            ToolError::Protected(_) => "protected",
            ToolError::InvalidArgs(_) => "invalid_args",
            ToolError::TooLarge(_) => "too_large",
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::InvalidJson(_) => "invalid_json",
            ToolError::NotAFile(_) => "not_a_file",
            ToolError::NotADirectory(_) => "not_a_directory",
            ToolError::Exists(_) => "exists",
            ToolError::NotText(_) => "not_text",
            ToolError::Interrupted(_) => "interrupted",
            ToolError::Io { .. } => "io_error",
        }
    }

    /// Wraps an I/O error with what the tool was doing, turning the common kinds into the
    /// specific codes (`not_found`, `denied`, `exists`, …) so callers need not.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> ToolError {
        let context = context.into();
        if crate::beneath::is_changed(&source) {
            return ToolError::Denied(format!("{context}: {source}"));
        }
        match source.kind() {
            std::io::ErrorKind::NotFound => {
                ToolError::NotFound(format!("{context}: no such file or folder."))
            }
            std::io::ErrorKind::PermissionDenied => {
                ToolError::Denied(format!("{context}: permission denied by the filesystem."))
            }
            std::io::ErrorKind::AlreadyExists => {
                ToolError::Exists(format!("{context}: it already exists."))
            }
            std::io::ErrorKind::NotADirectory => ToolError::NotADirectory(format!(
                "{context}: a part of the path is a file, not a folder."
            )),
            std::io::ErrorKind::IsADirectory => {
                ToolError::NotAFile(format!("{context}: it is a folder, not a file."))
            }
            _ => ToolError::Io { context, source },
        }
    }

    /// The JSON error object: `{"ok": false, "error", "message", ...extra fields}`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("ok".into(), Value::Bool(false));
        m.insert("error".into(), Value::String(self.code().into()));
        m.insert(
            "message".into(),
            Value::String(cut(self.to_string(), MESSAGE_CHARS)),
        );
        match self {
            ToolError::MultipleMatches { candidates, .. } => {
                m.insert("candidates".into(), Value::Array(candidates.clone()));
            }
            ToolError::HashMismatch {
                path,
                expected,
                actual,
            } => {
                m.insert("path".into(), json!(cut(path.clone(), 1000)));
                m.insert("expected".into(), json!(expected));
                m.insert("actual".into(), json!(actual));
            }
            ToolError::PatchFailed { details, .. } => {
                let shown: Vec<String> = details
                    .iter()
                    .take(20)
                    .map(|d| cut(d.clone(), 1000))
                    .collect();
                m.insert("details".into(), json!(shown));
            }
            ToolError::Io { source, .. } => {
                if let Some(errno) = source.raw_os_error() {
                    m.insert("errno".into(), json!(errno));
                }
            }
            ToolError::NotFound(_)
            | ToolError::AlreadyApplied(_)
            | ToolError::Denied(_)
            | ToolError::Protected(_)
            | ToolError::InvalidArgs(_)
            | ToolError::TooLarge(_)
            | ToolError::UnknownTool { .. }
            | ToolError::InvalidJson(_)
            | ToolError::NotAFile(_)
            | ToolError::NotADirectory(_)
            | ToolError::Exists(_)
            | ToolError::NotText(_)
            | ToolError::Interrupted(_) => {}
        }
        Value::Object(m)
    }
}

/// Every error code a response can carry, for the registry and docs.
pub const ERROR_CODES: &[&str] = &[
    "not_found",
    "multiple_matches",
    "hash_mismatch",
    "patch_failed",
    "already_applied",
    "denied",
    "protected",
    "invalid_args",
    "too_large",
    "unknown_tool",
    "invalid_json",
    "not_a_file",
    "not_a_directory",
    "exists",
    "not_text",
    "interrupted",
    "io_error",
];

/// The longest error message an answer carries, characters: messages that quote what the
/// caller sent are cut, so that an error answer keeps to a budget as a success does.
const MESSAGE_CHARS: usize = 2000;

/// `text` cut after `max` characters, saying how many were left out.
fn cut(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text,
        Some((at, _)) => {
            let left = text[at..].chars().count();
            format!("{}… ({left} more characters)", &text[..at])
        }
    }
}
