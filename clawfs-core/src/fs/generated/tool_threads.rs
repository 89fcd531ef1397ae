//! The threads tool calls run on. A call can take seconds (a regular expression over a large
//! workspace); run on the FUSE workers, four slow calls held all of them, and every other
//! request of the host (root's `stat`, other agents' reads) waited behind them. So a request
//! that runs a call is answered from here, and the workers only hand it over.
//!
//! Fair between callers: each uid (agents have uids of their own) runs at most
//! [`RUNNING_PER_CALLER`] call at a time, uids take turns, and one uid may have at most
//! [`WAITING_PER_CALLER`] calls waiting. A waiting call whose caller was killed is dropped
//! without running, as soon as the kill is seen ([`REAP_EVERY`]), not when its turn comes: the
//! kernel lets a killed caller go only once the daemon answers a request it has taken, so until
//! then the caller would stay, unkillable, behind another caller's slow calls. The threads run
//! at a lower priority than the workers, so the CPU a call takes is what the requests being
//! served leave over.

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Calls of one caller that run at once.
pub(crate) const RUNNING_PER_CALLER: usize = 1;
/// Calls of one caller that may wait for their turn; past it a call is refused (EAGAIN).
pub(crate) const WAITING_PER_CALLER: usize = 64;
/// The tool threads' nice value: below the FUSE workers (0).
const NICE: i32 = 5;
/// How often the callers of waiting calls are looked at for a kill, while any call waits.
const REAP_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

thread_local! {
    /// The caller (thread id) whose request this tool thread serves now; 0 when none.
    static SERVING: Cell<u32> = const { Cell::new(0) };
}

/// The caller whose request this thread serves, when it is a tool thread serving one: a call
/// running here may stop once that caller is gone ([`killed`]).
pub(crate) fn serving() -> Option<u32> {
    Some(SERVING.get()).filter(|&pid| pid != 0)
}

/// What becomes of a queued request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Its turn came: run it.
    Run,
    /// Its caller was killed while it waited: answer without running it.
    Killed,
    /// Its caller has [`WAITING_PER_CALLER`] calls waiting already: refused, not queued.
    Refused,
}

/// One request that runs a tool call, told what becomes of it.
pub(crate) type Job = Box<dyn FnOnce(Turn) + Send>;

struct Queued {
    pid: u32,
    job: Job,
}

#[derive(Default)]
struct Caller {
    running: usize,
    waiting: VecDeque<Queued>,
    /// In [`State::turns`].
    queued_turn: bool,
}

#[derive(Default)]
struct State {
    callers: HashMap<u32, Caller>,
    /// Callers with a call that may start, in turn order.
    turns: VecDeque<u32>,
    /// The tool threads' ids: a call's own requests (a WebAssembly tool's file operations
    /// come through the mount from its thread) are never queued behind it.
    tids: HashSet<u32>,
    stopping: bool,
}

impl State {
    /// Gives `uid` a turn if it has a call waiting and room to run it.
    fn take_turn(&mut self, uid: u32) {
        let Some(c) = self.callers.get_mut(&uid) else {
            return;
        };
        if !c.queued_turn && !c.waiting.is_empty() && c.running < RUNNING_PER_CALLER {
            c.queued_turn = true;
            self.turns.push_back(uid);
        }
        if c.running == 0 && c.waiting.is_empty() {
            self.callers.remove(&uid);
        }
    }
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    /// Told when a call is queued: the reaper sleeps on it while nothing waits.
    queued: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The tool threads and their queue.
pub(crate) struct ToolThreads {
    shared: Arc<Shared>,
}

impl ToolThreads {
    /// `n` tool threads (at least one).
    pub(crate) fn start(n: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            ready: Condvar::new(),
            queued: Condvar::new(),
        });
        for i in 0..n.max(1) {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("clawfs-tool-{i}"))
                .spawn(move || serve(&shared))?;
        }
        let reaper = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("clawfs-tool-reap".into())
            .spawn(move || reap(&reaper))?;
        Ok(Self { shared })
    }

    /// Whether `pid` is one of the tool threads (a running call's own request).
    pub(crate) fn is_tool_thread(&self, pid: u32) -> bool {
        self.shared.state().tids.contains(&pid)
    }

    /// Queues `job` for the caller `uid` (thread `pid`), to run when its turn comes; told
    /// [`Turn::Refused`] at once if the caller has too many waiting.
    pub(crate) fn submit(&self, uid: u32, pid: u32, job: Job) {
        let mut state = self.shared.state();
        let caller = state.callers.entry(uid).or_default();
        if caller.waiting.len() >= WAITING_PER_CALLER {
            state.take_turn(uid);
            drop(state);
            return job(Turn::Refused);
        }
        caller.waiting.push_back(Queued { pid, job });
        state.take_turn(uid);
        drop(state);
        self.shared.ready.notify_one();
        self.shared.queued.notify_one();
    }
}

impl Drop for ToolThreads {
    fn drop(&mut self) {
        self.shared.state().stopping = true;
        self.shared.ready.notify_all();
        self.shared.queued.notify_all();
    }
}

/// One tool thread: the next caller's next call, in turn, until the pool stops (calls still
/// waiting then are run first: each holds a caller waiting for its answer).
fn serve(shared: &Shared) {
    let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    // SAFETY: setpriority has no memory preconditions; 0 names this thread on Linux.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) };
    let mut state = shared.state();
    state.tids.insert(tid);
    loop {
        let Some(uid) = state.turns.pop_front() else {
            if state.stopping {
                state.tids.remove(&tid);
                return;
            }
            state = shared
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        let caller = state.callers.get_mut(&uid).expect("a caller with a turn");
        caller.queued_turn = false;
        let Some(Queued { pid, job }) = caller.waiting.pop_front() else {
            state.take_turn(uid);
            continue;
        };
        caller.running += 1;
        state.take_turn(uid);
        drop(state);
        SERVING.set(pid);
        job(match killed(pid) {
            true => Turn::Killed,
            false => Turn::Run,
        });
        SERVING.set(0);
        state = shared.state();
        if let Some(c) = state.callers.get_mut(&uid) {
            c.running -= 1;
        }
        state.take_turn(uid);
        if !state.turns.is_empty() {
            shared.ready.notify_one();
        }
    }
}

/// While calls wait: every [`REAP_EVERY`], the waiting calls whose callers were killed are
/// taken out of the queue and told [`Turn::Killed`] (answered without running), so their
/// callers can go.
fn reap(shared: &Shared) {
    let mut state = shared.state();
    loop {
        if state.stopping {
            return;
        }
        if state.callers.values().all(|c| c.waiting.is_empty()) {
            state = shared
                .queued
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        drop(state);
        std::thread::sleep(REAP_EVERY);
        // The callers are looked at outside the lock (each a read of /proc); a thread has at
        // most one request in flight, so its pid names its waiting call.
        let pids: Vec<u32> = shared
            .state()
            .callers
            .values()
            .flat_map(|c| c.waiting.iter().map(|q| q.pid))
            .collect();
        let gone: HashSet<u32> = pids.into_iter().filter(|&p| killed(p)).collect();
        state = shared.state();
        if gone.is_empty() {
            continue;
        }
        let mut dropped = Vec::new();
        let uids: Vec<u32> = state.callers.keys().copied().collect();
        for uid in uids {
            let Some(c) = state.callers.get_mut(&uid) else {
                continue;
            };
            let (out, kept): (VecDeque<Queued>, VecDeque<Queued>) = std::mem::take(&mut c.waiting)
                .into_iter()
                .partition(|q| gone.contains(&q.pid));
            c.waiting = kept;
            dropped.extend(out);
            // A caller with a turn in line stays: the thread that takes the turn finds nothing
            // waiting and lets it go.
            if !c.queued_turn {
                state.take_turn(uid);
            }
        }
        drop(state);
        for q in dropped {
            (q.job)(Turn::Killed);
        }
        state = shared.state();
    }
}

/// Whether the thread `pid` is gone or has been sent SIGKILL: a killed caller waits, unkillable,
/// for the answer to a request the daemon has taken, so it is still there.
pub(crate) fn killed(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    status.lines().any(|l| {
        let pending = l
            .strip_prefix("SigPnd:")
            .or_else(|| l.strip_prefix("ShdPnd:"));
        pending
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & SIGKILL_BIT != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn callers_take_turns_and_one_caller_runs_one_call_at_a_time() {
        let pool = ToolThreads::start(2).unwrap();
        let (tx, rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        // Caller 1 queues three slow calls, then caller 2 one call.
        for i in 0..3 {
            let tx = tx.clone();
            let release = Arc::clone(&release_rx);
            let job: Job = Box::new(move |_| {
                tx.send(("slow", i)).unwrap();
                let _ = release
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(10));
            });
            pool.submit(1000, 0, job);
        }
        let tx2 = tx.clone();
        pool.submit(1001, 0, Box::new(move |_| tx2.send(("other", 0)).unwrap()));
        // Caller 2 runs while caller 1's first call still runs; caller 1's second waits.
        let mut seen = vec![
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        ];
        seen.sort();
        assert_eq!(seen, vec![("other", 0), ("slow", 0)]);
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        release_tx.send(()).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            ("slow", 1)
        );
        release_tx.send(()).unwrap();
        release_tx.send(()).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            ("slow", 2)
        );
    }

    #[test]
    fn a_caller_may_not_queue_without_bound() {
        let pool = ToolThreads::start(1).unwrap();
        let (block_tx, block_rx) = mpsc::channel::<()>();
        pool.submit(
            7,
            0,
            Box::new(move |_| {
                let _ = block_rx.recv_timeout(Duration::from_secs(10));
            }),
        );
        // Wait until it runs, so that the waiting count is exact.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool
            .shared
            .state()
            .callers
            .get(&7)
            .is_none_or(|c| c.running == 0)
        {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        let (turn_tx, turn_rx) = mpsc::channel();
        for _ in 0..=WAITING_PER_CALLER {
            let turn_tx = turn_tx.clone();
            pool.submit(7, 0, Box::new(move |turn| turn_tx.send(turn).unwrap()));
        }
        // The one past the limit is told at once, before any of the waiting ones runs.
        assert_eq!(turn_rx.try_recv(), Ok(Turn::Refused));
        block_tx.send(()).unwrap();
        for _ in 0..WAITING_PER_CALLER {
            assert_eq!(turn_rx.recv_timeout(Duration::from_secs(10)), Ok(Turn::Run));
        }
    }

    /// A caller killed while its call waits behind another caller's running call is answered
    /// at once, not when the turn comes; the queue goes on as before.
    #[test]
    fn a_waiting_call_of_a_killed_caller_is_answered_before_its_turn() {
        let pool = ToolThreads::start(1).unwrap();
        let (block_tx, block_rx) = mpsc::channel::<()>();
        let (turn_tx, turn_rx) = mpsc::channel();
        let blocker = turn_tx.clone();
        pool.submit(
            7,
            0,
            Box::new(move |turn| {
                blocker.send((7, turn)).unwrap();
                let _ = block_rx.recv_timeout(Duration::from_secs(30));
            }),
        );
        assert_eq!(
            turn_rx.recv_timeout(Duration::from_secs(10)),
            Ok((7, Turn::Run))
        );
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        for (uid, pid) in [(8, child.id()), (8, 0), (9, 0)] {
            let tx = turn_tx.clone();
            pool.submit(
                uid,
                pid,
                Box::new(move |turn| tx.send((uid, turn)).unwrap()),
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // The first call is still running: the killed caller's call is answered anyway.
        assert_eq!(
            turn_rx.recv_timeout(Duration::from_secs(10)),
            Ok((8, Turn::Killed))
        );
        block_tx.send(()).unwrap();
        let mut rest: Vec<_> = (0..2)
            .map(|_| turn_rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        rest.sort_by_key(|(uid, _)| *uid);
        assert_eq!(rest, [(8, Turn::Run), (9, Turn::Run)]);
    }

    #[test]
    fn a_killed_or_vanished_caller_is_seen() {
        assert!(!killed(std::process::id()));
        assert!(killed(u32::MAX >> 2));
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(!killed(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(killed(pid));
    }
}
