//! Errors of parsing and compiling a whitelist. Every message names the entry that is wrong, as a
//! path into the JSON document (`syscalls[3]`, `rules.socket.arg0_in[1]`, `deny.ptrace`, ...).

/// Why a whitelist could not be parsed or compiled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not JSON, a missing or misspelt field, a value of the wrong type (serde's message carries the
    /// line and column).
    #[error("seccomp whitelist is malformed: {0}")]
    Json(#[from] serde_json::Error),

    /// A `version` this build does not read.
    #[error("seccomp whitelist: version {found} is not supported (this build reads version 1)")]
    Version {
        /// The version found in the file.
        found: u64,
    },

    /// An entry of `arch` that is not an architecture name this crate knows.
    #[error("seccomp whitelist: {entry}: unknown architecture \"{name}\" (known: {known})")]
    UnknownArch {
        /// Where: `arch[i]`.
        entry: String,
        /// The name found.
        name: String,
        /// The names accepted.
        known: String,
    },

    /// A syscall name libseccomp does not know on any architecture.
    #[error("seccomp whitelist: {entry}: unknown syscall \"{name}\" (libseccomp {libseccomp} does not know it)")]
    UnknownSyscall {
        /// Where: `syscalls[i]`, `rules.NAME`, `deny.NAME`.
        entry: String,
        /// The name found.
        name: String,
        /// The version of the system libseccomp that resolved names.
        libseccomp: String,
    },

    /// A constant (`AF_PACKET`, `CLONE_NEWUSER`, ...) that is neither a known name nor a number.
    #[error("seccomp whitelist: {entry}: unknown constant \"{constant}\" (use a known name or a number such as \"0x5412\")")]
    UnknownConstant {
        /// Where: `rules.NAME.KEY[i]`.
        entry: String,
        /// The text found.
        constant: String,
    },

    /// An action that is not `errno:NAME`, `errno:N`, `kill` or `log`, or one not allowed there.
    #[error("seccomp whitelist: {entry}: bad action \"{action}\": {why}")]
    BadAction {
        /// Where: `default_action`, `deny.NAME`, `rules.NAME.action`.
        entry: String,
        /// The text found.
        action: String,
        /// What is wrong with it.
        why: String,
    },

    /// Any other mistake in a rule or an entry (unknown key, empty list, value too wide, conflict).
    #[error("seccomp whitelist: {entry}: {why}")]
    BadEntry {
        /// Where in the document.
        entry: String,
        /// What is wrong.
        why: String,
    },

    /// The whitelist does not cover the architecture the filter would run on.
    #[error("seccomp whitelist: \"arch\" lists {listed} but this host is {native}: the filter would refuse every syscall")]
    ArchNotCovered {
        /// The architectures listed.
        listed: String,
        /// The host's architecture.
        native: String,
    },

    /// The whitelist uses something the kernel or the system libseccomp cannot do.
    #[error("seccomp: {0}")]
    Unsupported(String),

    /// libseccomp refused an operation while the filter was built.
    #[error("libseccomp: {what}: {source}")]
    Libseccomp {
        /// What was being done.
        what: String,
        /// libseccomp's error.
        #[source]
        source: libseccomp::error::SeccompError,
    },

    /// Reading back the generated BPF program failed.
    #[error("seccomp: exporting the BPF program: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    pub(crate) fn entry(entry: impl Into<String>, why: impl Into<String>) -> Self {
        Error::BadEntry {
            entry: entry.into(),
            why: why.into(),
        }
    }

    pub(crate) fn lib(
        what: impl Into<String>,
    ) -> impl FnOnce(libseccomp::error::SeccompError) -> Self {
        let what = what.into();
        move |source| Error::Libseccomp { what, source }
    }
}
