//! A call whose caller is gone stops early. A walk over a large tree or a search through a
//! large file can take minutes; if no one waits for the answer, the work is only a thread and
//! a CPU taken from every other caller. The tools ask [`Interrupt::check`] as they go (per
//! entry walked, per megabyte read); the question itself (the daemon reads `/proc`) is asked
//! at most every [`ASK_EVERY`], so the checks cost nothing measurable.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{ToolError, ToolResult};

/// How often the caller is looked for, at most.
pub const ASK_EVERY: Duration = Duration::from_millis(20);

/// Whether the call should stop: its caller is gone.
#[derive(Clone)]
pub struct Interrupt(Arc<Inner>);

struct Inner {
    gone: Box<dyn Fn() -> bool + Send + Sync>,
    started: Instant,
    /// When to ask next, in ns since `started`.
    next_ns: AtomicU64,
    stopped: AtomicBool,
}

impl Interrupt {
    /// An interrupt that stops the call once `gone` says its caller is gone.
    pub fn new(gone: impl Fn() -> bool + Send + Sync + 'static) -> Interrupt {
        Interrupt(Arc::new(Inner {
            gone: Box::new(gone),
            started: Instant::now(),
            next_ns: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        }))
    }

    /// `Err(interrupted)` once the caller is gone (and from then on).
    pub fn check(&self) -> ToolResult<()> {
        let inner = &self.0;
        if !inner.stopped.load(Ordering::Relaxed) {
            let now = inner.started.elapsed().as_nanos() as u64;
            if now < inner.next_ns.load(Ordering::Relaxed) {
                return Ok(());
            }
            inner
                .next_ns
                .store(now + ASK_EVERY.as_nanos() as u64, Ordering::Relaxed);
            if !(inner.gone)() {
                return Ok(());
            }
            inner.stopped.store(true, Ordering::Relaxed);
        }
        Err(ToolError::Interrupted(
            "the call was stopped: its caller is gone (killed or exited), so no one waits for the answer".into(),
        ))
    }
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interrupt")
            .field("stopped", &self.0.stopped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn the_caller_is_asked_at_most_every_interval_and_a_stop_stays() {
        let asked = Arc::new(AtomicUsize::new(0));
        let gone = Arc::new(AtomicBool::new(false));
        let i = Interrupt::new({
            let (asked, gone) = (Arc::clone(&asked), Arc::clone(&gone));
            move || {
                asked.fetch_add(1, Ordering::Relaxed);
                gone.load(Ordering::Relaxed)
            }
        });
        for _ in 0..10_000 {
            i.check().unwrap();
        }
        assert_eq!(asked.load(Ordering::Relaxed), 1);
        gone.store(true, Ordering::Relaxed);
        std::thread::sleep(ASK_EVERY);
        assert!(matches!(i.check(), Err(ToolError::Interrupted(_))));
        gone.store(false, Ordering::Relaxed);
        assert!(i.check().is_err(), "a stopped call stays stopped");
        assert_eq!(asked.load(Ordering::Relaxed), 2);
    }
}
