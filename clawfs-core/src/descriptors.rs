//! The daemon's descriptors held for callers. Every open file and folder of the mount holds
//! one of the store's descriptors in the daemon, so a caller that opens enough of them could
//! take the daemon's whole `RLIMIT_NOFILE`: every caller would then get EMFILE, and the daemon
//! could no longer read its emergency stop flag, save its state or rotate its audit trail.
//!
//! So each open charges its caller's uid (agents have uids of their own): one uid may hold at
//! most [`DescriptorLimits::per_caller`] (root is not limited), callers other than root
//! together at most [`DescriptorLimits::others`], which leaves root a share no one else can
//! take, and all callers at most [`DescriptorLimits::callers`], which leaves a reserve for the
//! daemon's own files. A [`Charge`] is released when the open it pays for is dropped,
//! whatever path that takes.

use crate::per_caller::{Ledger, Taken};

/// Descriptors kept back for the daemon's own files (store, audit trail, indexes, caches,
/// tool calls), at most a quarter of its limit.
pub const RESERVE: u64 = 8192;
/// Descriptors kept for root beyond what other callers may hold, at most an eighth of the
/// limit: agents at their limits do not lock the admin out.
pub const ROOT_SHARE: u64 = 8192;
/// Opens one uid may hold through the mount by default (`clawfs mount --max-open-per-caller`),
/// at most an eighth of what callers other than root may hold together: it takes eight
/// callers at their limits to leave the others (not root) nothing.
pub const DEFAULT_PER_CALLER: u64 = 8192;
/// What the daemon raises its own `RLIMIT_NOFILE` to when it may (2^20, the kernel's default
/// `fs.nr_open`): descriptor tables grow only as they are used.
const WANTED_NOFILE: u64 = 1 << 20;

/// How many descriptors callers may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorLimits {
    /// Held by one uid other than root; 0: no limit per caller.
    pub per_caller: u64,
    /// Held by callers other than root together.
    pub others: u64,
    /// Held by all callers together.
    pub callers: u64,
}

impl DescriptorLimits {
    /// The limits for a daemon whose `RLIMIT_NOFILE` is `nofile`: all of it but the daemon's
    /// reserve for callers, less root's share for callers other than root, and `per_caller`
    /// for each (default: [`DEFAULT_PER_CALLER`], at most an eighth of theirs).
    pub fn for_nofile(nofile: u64, per_caller: Option<u64>) -> Self {
        let callers = nofile - RESERVE.min(nofile / 4);
        let others = callers - ROOT_SHARE.min(nofile / 8);
        Self {
            per_caller: per_caller.unwrap_or(DEFAULT_PER_CALLER.min(others / 8)),
            others,
            callers,
        }
    }

    /// The limits for this process, by its `RLIMIT_NOFILE` now.
    pub fn for_this_process(per_caller: Option<u64>) -> Self {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(WANTED_NOFILE);
        Self::for_nofile(nofile, per_caller)
    }
}

/// Raises this process's `RLIMIT_NOFILE` as far as it may (to 2^20 with `CAP_SYS_RESOURCE`,
/// else to its hard limit) and returns the soft limit now in force.
pub fn raise_nofile() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let now = getrlimit(Resource::Nofile);
    let hard = now.maximum.unwrap_or(WANTED_NOFILE);
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(WANTED_NOFILE);
    let wanted = WANTED_NOFILE.min(nr_open).max(hard);
    let raised = Rlimit {
        current: Some(wanted),
        maximum: Some(wanted),
    };
    if let Err(e) = setrlimit(Resource::Nofile, raised) {
        tracing::warn!(
            wanted,
            hard,
            "cannot raise the open-file limit ({e}: no CAP_SYS_RESOURCE?): callers share what the hard limit allows"
        );
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(hard),
                maximum: now.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(hard)
}

/// Why a caller may not hold one more descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// The caller holds its limit (EMFILE).
    Caller {
        /// The limit it holds.
        limit: u64,
    },
    /// Callers together hold theirs (ENFILE): the rest is the daemon's, or root's.
    Daemon {
        /// The limit they hold.
        limit: u64,
    },
}

/// One descriptor held for a caller; released when dropped.
pub type Charge = Taken;

/// Descriptors held for callers, by uid (cheap to clone: one count shared by all clones).
#[derive(Clone)]
pub struct Descriptors {
    limits: DescriptorLimits,
    held: Ledger,
}

impl Descriptors {
    /// An empty count under `limits`.
    pub fn new(limits: DescriptorLimits) -> Self {
        Self {
            limits,
            held: Ledger::default(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> DescriptorLimits {
        self.limits
    }

    /// One more descriptor for `uid`, held until the charge is dropped; refused when `uid`
    /// (not root) holds its limit or callers together hold theirs.
    pub fn charge(&self, uid: u32) -> Result<Charge, Exhausted> {
        let limits = self.limits;
        self.held.take(uid, 1, |held| {
            if held.all >= limits.callers {
                return Err(Exhausted::Daemon {
                    limit: limits.callers,
                });
            }
            if uid != 0 && held.all - held.root >= limits.others {
                return Err(Exhausted::Daemon {
                    limit: limits.others,
                });
            }
            if uid != 0 && limits.per_caller != 0 && held.mine >= limits.per_caller {
                return Err(Exhausted::Caller {
                    limit: limits.per_caller,
                });
            }
            Ok(())
        })
    }

    /// Descriptors `uid` holds now.
    pub fn held_by(&self, uid: u32) -> u64 {
        self.held.held_by(uid)
    }

    /// Descriptors all callers hold now.
    pub fn total(&self) -> u64 {
        self.held.total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_is_held_to_its_limit_and_gets_it_back_as_it_closes() {
        let d = Descriptors::new(DescriptorLimits {
            per_caller: 2,
            others: 10,
            callers: 10,
        });
        let a = d.charge(1000).unwrap();
        let _b = d.charge(1000).unwrap();
        assert_eq!(d.charge(1000).unwrap_err(), Exhausted::Caller { limit: 2 });
        // Another caller is not affected, nor root.
        let _c = d.charge(1001).unwrap();
        let _r = (0..5).map(|_| d.charge(0).unwrap()).collect::<Vec<_>>();
        drop(a);
        assert_eq!(d.held_by(1000), 1);
        let _a = d.charge(1000).unwrap();
        assert_eq!(d.total(), 8);
    }

    #[test]
    fn callers_together_leave_the_reserve_and_roots_share_alone() {
        let d = Descriptors::new(DescriptorLimits {
            per_caller: 0,
            others: 3,
            callers: 5,
        });
        let held = (1..=3)
            .map(|uid| d.charge(uid).unwrap())
            .collect::<Vec<_>>();
        assert_eq!(d.charge(4).unwrap_err(), Exhausted::Daemon { limit: 3 });
        // Root still opens, up to the daemon's reserve.
        let root = (0..2).map(|_| d.charge(0).unwrap()).collect::<Vec<_>>();
        assert_eq!(d.charge(0).unwrap_err(), Exhausted::Daemon { limit: 5 });
        drop(held);
        drop(root);
        assert_eq!(d.total(), 0);
        assert_eq!(d.held_by(1), 0);
    }

    #[test]
    fn limits_follow_the_daemons_own() {
        let big = DescriptorLimits::for_nofile(1 << 20, None);
        assert_eq!(big.callers, (1 << 20) - RESERVE);
        assert_eq!(big.others, (1 << 20) - RESERVE - ROOT_SHARE);
        assert_eq!(big.per_caller, DEFAULT_PER_CALLER);
        // A host where the daemon may not raise its limit: one agent takes an eighth.
        let small = DescriptorLimits::for_nofile(20_000, None);
        assert_eq!((small.callers, small.others), (15_000, 12_500));
        assert_eq!(small.per_caller, 1_562);
        assert_eq!(DescriptorLimits::for_nofile(20_000, Some(9)).per_caller, 9);
    }
}
