//! `tracing` setup: human-readable on stderr, JSON Lines when `CLAWFS_LOG=json`. The level comes
//! from `CLAWFS_LOG_LEVEL` (an env-filter directive), default `info`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Safe to call once per process.
pub fn init() {
    let filter =
        EnvFilter::try_from_env("CLAWFS_LOG_LEVEL").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("CLAWFS_LOG").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
