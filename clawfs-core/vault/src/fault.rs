//! Crash injection for rotation and rollback-counter tests (feature `fault-injection`, on for
//! this crate's tests only): with `CLAWFS_VAULT_FAULT_AFTER=N` in the environment the process
//! aborts (no unwinding, no cleanup — like `kill -9`) right after the
//! N-th durable step. Steps: those of a rotation (`RotationStep`), and, in a TPM-sealed vault,
//! "new manifest written, TPM counter not yet incremented" in `put`, `rm`, `rotate` (after its
//! `Done`) and `rebind_counter`.

use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the step after which to abort.
pub const FAULT_ENV: &str = "CLAWFS_VAULT_FAULT_AFTER";

static STEPS: AtomicU64 = AtomicU64::new(0);

#[cfg(feature = "fault-injection")]
fn limit() -> Option<u64> {
    static LIMIT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| std::env::var(FAULT_ENV).ok()?.parse().ok())
}

/// Counts one durable step; aborts the process if it is the configured one.
pub fn step() {
    let n = STEPS.fetch_add(1, Ordering::SeqCst) + 1;
    // Read only in test builds: the environment of a vault command never aborts it.
    #[cfg(feature = "fault-injection")]
    if limit() == Some(n) {
        eprintln!("{FAULT_ENV}={n}: aborting");
        std::process::abort();
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = n;
}

/// Steps counted so far in this process.
pub fn steps() -> u64 {
    STEPS.load(Ordering::SeqCst)
}
