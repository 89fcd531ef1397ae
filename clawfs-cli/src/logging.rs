//! `tracing` setup: human-readable on stderr, JSON Lines when `CLAWFS_LOG=json`. The level comes
//! from `CLAWFS_LOG_LEVEL` (an env-filter directive), default `info`.
//!
//! A background daemon's stderr is a file in the store: when that disk is full a log line is
//! dropped, never the daemon (the standard error macros panic when they cannot write).

use std::io::{IsTerminal, Write};

use tracing_subscriber::EnvFilter;

/// Stderr that drops what it cannot write.
struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Installs the global subscriber. Safe to call once per process.
pub fn init() {
    let filter =
        EnvFilter::try_from_env("CLAWFS_LOG_LEVEL").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("CLAWFS_LOG").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .with_writer(|| LossyStderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
