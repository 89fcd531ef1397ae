//! The errno a caller gets for an error.

/// An error that knows the errno a caller of the filesystem gets for it. Each crate implements
/// it next to its error types, matching every variant (no fallback), so that a new variant
/// picks its errno on purpose.
pub trait ToErrno {
    /// The errno (`libc::E*`).
    fn errno(&self) -> i32;
}

impl ToErrno for std::io::Error {
    fn errno(&self) -> i32 {
        self.raw_os_error().unwrap_or(libc::EIO)
    }
}
