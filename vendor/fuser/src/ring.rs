//! FUSE over io_uring: the kernel hands requests to per-CPU queues of registered buffers and
//! takes each reply back with the command that fetches the next request, instead of a `read`
//! and a `writev` on `/dev/fuse` per request.
//!
//! Why: a request from a process on CPU N is queued on queue N, whose thread is pinned to CPU N,
//! so the caller's wait and the daemon's answer happen on one CPU. Over `/dev/fuse` every round
//! trip wakes a daemon thread on whichever CPU it slept, which on a virtual machine whose idle
//! vCPUs halt costs most of the round trip.
//!
//! The kernel keeps sending forgets and interrupts through `/dev/fuse`, and everything until
//! every queue has registered, so the session's `/dev/fuse` threads keep running beside these.
//!
//! Ownership of an entry (a header area and a payload buffer): the kernel's while a fetch is
//! pending; this side's from the completion that carries a request until its reply is
//! committed. A reply may come from any thread (a filesystem that answers later); it is written
//! into the entry by that thread and committed by the queue's own thread, which is the only one
//! that touches its ring: a command left in flight by a thread that exits would be cancelled
//! with it.

use std::io;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::{JoinHandle, Thread, ThreadId};
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use log::{error, warn};
use parking_lot::Mutex;

use crate::Filesystem;
use crate::channel::{Channel, ChannelSender};
use crate::read_buf::FuseReadBuf;
use crate::request::RequestWithSender;
use crate::session::{FilesystemHolder, SessionACL, SessionEventLoop};

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: the in/out header (128 bytes), the operation's own header
/// (128), then `struct fuse_uring_ent_in_out` (flags, commit id, payload size).
const HEADER_LEN: usize = 288;
const OP_IN: usize = 128;
const OP_IN_MAX: usize = 128;
const ENT_IN_OUT: usize = 256;
const COMMIT_ID: usize = ENT_IN_OUT + 8;
const PAYLOAD_SZ: usize = ENT_IN_OUT + 16;
/// `struct fuse_in_header` and `struct fuse_out_header`.
const IN_HEADER_LEN: usize = 40;
const OUT_HEADER_LEN: usize = 16;

/// The `user_data` of the read of the queue's eventfd; entries use their index.
const WAKE: u64 = u64::MAX;

/// Entries of a CPU's first server. A request whose answer comes later (a tool call waiting its
/// turn) holds its entry until then.
const FIRST_DEPTH: usize = 128;
/// Entries of a server added while the CPU's others are held up.
const EXTRA_DEPTH: usize = 32;
/// A server busy with one request this long, or with a quarter of its entries or fewer left
/// (early: a new server's entries do not take requests already waiting in the kernel), is
/// held up.
const HELD_UP_AFTER: Duration = Duration::from_millis(5);
const ENTRIES_LEFT_PART: usize = 4;
/// Servers a CPU may have while its entries are all taken by requests waiting for answers:
/// 128 + 63 × 32 entries, room for 33 callers' 64 waiting tool calls each.
const MAX_SERVERS: usize = 64;
/// How often the watcher looks while requests come, and after how many quiet looks it sleeps
/// until the next request.
const WATCH_EVERY: Duration = Duration::from_millis(2);
const QUIET_LOOKS: u32 = 500;

/// How the rings are set up, decided at the handshake.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingConfig {
    /// The kernel's largest request or reply payload: its `max_write`, `max_pages` pages.
    pub(crate) payload_len: usize,
}

/// Anonymous memory for the entries of one queue, reserved without charging it: a page of
/// header and a payload buffer per entry, touched only as far as requests and replies reach.
#[derive(Debug)]
struct Area {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; who may touch which part when is the entry ownership
// described in the module documentation, enforced by `Queue::held`.
unsafe impl Send for Area {}
// SAFETY: as above.
unsafe impl Sync for Area {}

impl Area {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is involved.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: base.cast(),
            len,
        })
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// One server of a CPU's queue: its entries, registered from its own ring, and what other
/// threads hand its thread. A CPU's queue starts with one server and gains more while all it
/// has are held up ([`Rings`]).
#[derive(Debug)]
pub(crate) struct Queue {
    qid: u16,
    depth: usize,
    payload_len: usize,
    stride: usize,
    /// Per entry, the commit id of the request this side holds in it; 0 when it holds none.
    held: Box<[AtomicU64]>,
    /// Entries answered and waiting for the queue's thread to commit them.
    answered: Mutex<Vec<(u16, u64)>>,
    /// Written by a thread that answers off the queue's thread, to wake it.
    wake: OwnedFd,
    stopping: AtomicBool,
    thread: std::sync::OnceLock<ThreadId>,
    /// Requests begun, odd while one is being served, and when the last one began.
    served: AtomicU64,
    began: AtomicU64,
    /// Entries whose request waits for its answer, those of them handed to the slow-request
    /// threads, and entries whose command failed (the kernel dropped them).
    in_flight: AtomicUsize,
    slow_in_flight: AtomicUsize,
    lost: AtomicUsize,
    watch: Arc<Watch>,
    slow: Arc<SlowJobs>,
    /// Last: unmapped only after everything above that may point into it. `depth` strides,
    /// then a page whose first 8 bytes the kernel's reads of `wake` land in.
    area: Area,
}

const PAGE: usize = 4096;

impl Queue {
    fn new(
        qid: u16,
        depth: usize,
        config: RingConfig,
        (watch, slow): (Arc<Watch>, Arc<SlowJobs>),
    ) -> io::Result<Arc<Self>> {
        let payload_len = config.payload_len.next_multiple_of(PAGE);
        let stride = PAGE + payload_len;
        // SAFETY: plain syscall; the descriptor is owned below.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just returned to us and owned by nothing else.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        Ok(Arc::new(Self {
            qid,
            depth,
            payload_len,
            stride,
            held: (0..depth).map(|_| AtomicU64::new(0)).collect(),
            answered: Mutex::new(Vec::with_capacity(depth)),
            wake,
            stopping: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            served: AtomicU64::new(0),
            began: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            slow_in_flight: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
            watch,
            slow,
            area: Area::new(stride * depth + PAGE)?,
        }))
    }

    fn header(&self, entry: usize) -> *mut u8 {
        debug_assert!(entry < self.depth);
        // SAFETY: within the mapping: entry < depth and the area is depth strides long.
        unsafe { self.area.base.add(entry * self.stride) }
    }

    fn payload(&self, entry: usize) -> *mut u8 {
        // SAFETY: as in `header`; the payload follows the header's page.
        unsafe { self.header(entry).add(PAGE) }
    }

    /// Where the kernel puts what it reads from `wake` (never read here).
    fn bell(&self) -> *mut u8 {
        // SAFETY: the page after the last entry, within the mapping.
        unsafe { self.area.base.add(self.stride * self.depth) }
    }

    /// Takes `entry`, which the kernel filled with the request `commit_id`: its answer goes
    /// through the returned reply.
    fn hold(self: &Arc<Self>, entry: usize, commit_id: u64) -> RingReply {
        self.held[entry].store(commit_id, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        RingReply {
            queue: Arc::clone(self),
            entry: entry as u16,
            commit_id,
        }
    }

    /// Marks the start of serving a request (the watcher looks at it), waking the watcher if
    /// it sleeps.
    fn begin(&self) {
        self.began.store(self.watch.now(), Ordering::Relaxed);
        self.served.fetch_add(1, Ordering::SeqCst);
        if self.watch.sleeping.load(Ordering::SeqCst) && self.watch.sleeping.swap(false, Ordering::SeqCst) {
            if let Some(t) = self.watch.thread.get() {
                t.unpark();
            }
        }
    }

    fn end(&self) {
        self.served.fetch_add(1, Ordering::Release);
    }

    /// Whether this server has been serving one request for [`HELD_UP_AFTER`].
    fn stuck(&self, now: u64) -> bool {
        self.served.load(Ordering::Acquire) % 2 == 1
            && now.saturating_sub(self.began.load(Ordering::Relaxed))
                >= HELD_UP_AFTER.as_nanos() as u64
    }

    /// Whether few of its entries are left: most hold requests waiting for the filesystem's
    /// answer (not those the slow-request threads serve, which answer as fast as the disk
    /// goes), or were dropped by the kernel.
    fn full(&self) -> bool {
        let waiting = self
            .in_flight
            .load(Ordering::Relaxed)
            .saturating_sub(self.slow_in_flight.load(Ordering::Relaxed));
        waiting + self.lost.load(Ordering::Relaxed) + self.depth / ENTRIES_LEFT_PART >= self.depth
    }

    /// Ends the queue's thread at its next wake-up (the session is over).
    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.ring_bell();
    }

    fn ring_bell(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd; it fails only if the counter would overflow,
        // and then a wake-up is pending anyway.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Writes the reply `data` (an out header, then the body) for the request held in `entry`
    /// under `commit_id`, and has the queue's thread commit it. A second answer to the same
    /// request, or one to a request no longer held, is refused.
    pub(crate) fn answer(&self, entry: u16, commit_id: u64, data: &[IoSlice<'_>]) -> io::Result<()> {
        let e = usize::from(entry);
        if self.held[e]
            .compare_exchange(commit_id, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(io::Error::other("reply to a ring request that is not held"));
        }
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let mut out = [0u8; OUT_HEADER_LEN];
        let total: usize = data.iter().map(|s| s.len()).sum();
        let body_len = total.saturating_sub(OUT_HEADER_LEN);
        let header = self.header(e);
        let payload = self.payload(e);
        copy_from_slices(data, 0, &mut out);
        if body_len > self.payload_len {
            // Cannot happen within the negotiated sizes; answer EIO rather than overrun.
            let unique = u64::from_le_bytes(out[8..16].try_into().expect("8 bytes"));
            self.write_reply(header, &error_header(unique, libc::EIO), 0);
        } else {
            // SAFETY: this side owns the entry (the exchange above), the payload buffer is
            // payload_len long, and body_len fits it.
            let body = unsafe { std::slice::from_raw_parts_mut(payload, body_len) };
            copy_from_slices(data, OUT_HEADER_LEN, body);
            self.write_reply(header, &out, body_len);
        }
        self.answered.lock().push((entry, commit_id));
        if self.thread.get() != Some(&std::thread::current().id()) {
            self.ring_bell();
        }
        Ok(())
    }

    fn write_reply(&self, header: *mut u8, out: &[u8; OUT_HEADER_LEN], body_len: usize) {
        // SAFETY: the entry is ours (see `answer`); both writes are within its header page.
        unsafe {
            std::ptr::copy_nonoverlapping(out.as_ptr(), header, OUT_HEADER_LEN);
            std::ptr::copy_nonoverlapping(
                (body_len as u32).to_le_bytes().as_ptr(),
                header.add(PAYLOAD_SZ),
                4,
            );
        }
    }

    /// Copies the request in `entry` into `buf` the way `/dev/fuse` delivers it: the in header,
    /// the operation's header, then the payload. Returns its length, or `None` if the sizes
    /// the kernel wrote do not add up.
    fn take_request(&self, entry: usize, buf: &mut [u8]) -> Option<(usize, u64)> {
        let mut fixed = [0u8; HEADER_LEN];
        // SAFETY: the completion gave this side the entry; the header page holds HEADER_LEN.
        unsafe { std::ptr::copy_nonoverlapping(self.header(entry), fixed.as_mut_ptr(), HEADER_LEN) };
        let len = u32::from_le_bytes(fixed[0..4].try_into().ok()?) as usize;
        let commit_id = u64::from_le_bytes(fixed[COMMIT_ID..COMMIT_ID + 8].try_into().ok()?);
        let payload_sz =
            u32::from_le_bytes(fixed[PAYLOAD_SZ..PAYLOAD_SZ + 4].try_into().ok()?) as usize;
        let op_len = len.checked_sub(IN_HEADER_LEN + payload_sz)?;
        if op_len > OP_IN_MAX || payload_sz > self.payload_len || len > buf.len() {
            return None;
        }
        buf[..IN_HEADER_LEN].copy_from_slice(&fixed[..IN_HEADER_LEN]);
        buf[IN_HEADER_LEN..IN_HEADER_LEN + op_len].copy_from_slice(&fixed[OP_IN..OP_IN + op_len]);
        // SAFETY: as above; payload_sz is within the payload buffer (checked).
        let payload = unsafe { std::slice::from_raw_parts(self.payload(entry), payload_sz) };
        buf[IN_HEADER_LEN + op_len..len].copy_from_slice(payload);
        Some((len, commit_id))
    }
}

/// Copies the bytes of `slices` from offset `skip` on into `dst` (as many as fit).
fn copy_from_slices(slices: &[IoSlice<'_>], mut skip: usize, dst: &mut [u8]) {
    let mut at = 0;
    for s in slices {
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        let src = &s[skip..];
        skip = 0;
        let n = src.len().min(dst.len() - at);
        dst[at..at + n].copy_from_slice(&src[..n]);
        at += n;
        if at == dst.len() {
            return;
        }
    }
}

/// The reply path of one request served from a ring entry. Copies may exist (one per reply
/// object made for the request); only the first answer is committed.
#[derive(Debug, Clone)]
pub(crate) struct RingReply {
    queue: Arc<Queue>,
    entry: u16,
    commit_id: u64,
}

impl RingReply {
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        self.queue.answer(self.entry, self.commit_id, data)
    }

    /// Answers the request `unique` with `errno` alone.
    fn fail(&self, unique: u64, errno: i32) {
        let out = error_header(unique, errno);
        let _ = self.send(&[IoSlice::new(&out)]);
    }
}

/// A `FUSE_IO_URING_CMD_*` command for `entry` of queue `qid`.
fn command(dev: RawFd, op: u32, entry: u64, qid: u16, commit_id: u64) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_le_bytes());
    cmd[16..18].copy_from_slice(&qid.to_le_bytes());
    opcode::UringCmd80::new(types::Fd(dev), op)
        .cmd(cmd)
        .build()
        .user_data(entry)
}

/// REGISTER: hands the kernel an entry's two buffers (an iovec pair at `iov`).
fn register(dev: RawFd, entry: u64, qid: u16, iov: *const libc::iovec) -> squeue::Entry128 {
    let sqe = command(dev, CMD_REGISTER, entry, qid, 0);
    // The crate cannot set addr together with len, which REGISTER needs (2 iovecs).
    // SAFETY: Entry128 is repr(C) around the 128-byte io_uring_sqe: addr is the u64 at offset
    // 16, len the u32 at offset 24.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[16..24].copy_from_slice(&(iov as u64).to_le_bytes());
    raw[24..28].copy_from_slice(&2u32.to_le_bytes());
    // SAFETY: the same 128 bytes back into the type they came from.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn pin_to_cpu(cpu: usize) {
    if cpu >= libc::CPU_SETSIZE as usize {
        return;
    }
    // SAFETY: plain libc calls on a zeroed cpu_set_t. Failing (a CPU this process may not
    // use) leaves the thread where the scheduler puts it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The kernel makes one queue per possible CPU and uses the rings once each has an entry.
fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .rsplit(['-', ','])
                .next()
                .and_then(|n| n.parse::<usize>().ok())
        })
        .map_or(1, |last| last + 1)
}

struct Ring {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
}

impl Ring {
    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: every buffer a queued command points to lives in the queue's area (its
            // entries, its bell), which outlives the ring.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.submit()?;
        }
    }

    /// Submits what is queued; the kernel being short of memory or busy is waited out.
    fn submit(&mut self) -> io::Result<()> {
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if transient(&e) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return Err(e),
            }
        }
    }

    /// Queues the commits of the requests answered so far; whether there were any.
    fn commit_answered(&mut self, queue: &Queue, dev: RawFd) -> io::Result<bool> {
        let answered = std::mem::take(&mut *queue.answered.lock());
        let any = !answered.is_empty();
        for (entry, commit_id) in answered {
            self.push(&command(dev, CMD_COMMIT_AND_FETCH, u64::from(entry), queue.qid, commit_id))?;
        }
        Ok(any)
    }
}

/// An io_uring_enter failure that passes: interrupted, or the kernel short of memory or busy.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY | libc::ENOMEM)
    )
}

impl<FS: Filesystem> SessionEventLoop<FS> {
    /// Serves queue `queue` until the connection ends or the session stops it.
    fn serve_ring(&self, queue: &Arc<Queue>, dev: RawFd, ch: ChannelSender) -> io::Result<()> {
        let qid = queue.qid;
        pin_to_cpu(usize::from(qid));
        let _ = queue.thread.set(std::thread::current().id());
        let slots = (queue.depth + 1).next_power_of_two() as u32;
        let mut ring = Ring {
            ring: IoUring::builder().setup_cqsize(slots * 2).build(slots)?,
        };
        let iovs: Vec<[libc::iovec; 2]> = (0..queue.depth)
            .map(|e| {
                [
                    libc::iovec {
                        iov_base: queue.header(e).cast(),
                        iov_len: HEADER_LEN,
                    },
                    libc::iovec {
                        iov_base: queue.payload(e).cast(),
                        iov_len: queue.payload_len,
                    },
                ]
            })
            .collect();
        for (e, iov) in iovs.iter().enumerate() {
            ring.push(&register(dev, e as u64, qid, iov.as_ptr()))?;
        }
        let listen = |ring: &mut Ring| {
            let read = opcode::Read::new(types::Fd(queue.wake.as_raw_fd()), queue.bell(), 8)
                .build()
                .user_data(WAKE);
            ring.push(&read.into())
        };
        listen(&mut ring)?;
        let mut buf = FuseReadBuf::new();
        let buf = buf.as_mut();
        let mut done: Vec<(u64, i32)> = Vec::with_capacity(slots as usize * 2);
        loop {
            match ring.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if transient(&e) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(ring.ring.completion().map(|c| (c.user_data(), c.result())));
            for (i, &(user_data, res)) in done.iter().enumerate() {
                // Each answer goes back as soon as it is made, not after the whole batch: its
                // caller waits for it, and its entry takes the CPU's next request.
                if i > 0 && ring.commit_answered(queue, dev)? {
                    ring.submit()?;
                }
                if user_data == WAKE {
                    if queue.stopping.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    listen(&mut ring)?;
                    continue;
                }
                match res {
                    0 => {}
                    r if r == -libc::ENOTCONN || r == -libc::ENODEV => return Ok(()),
                    // This entry's command failed and the kernel holds it no more; the
                    // server's other entries and the requests it fetched are still served.
                    r => {
                        error!(
                            "io_uring queue {qid}: entry {user_data}: {}",
                            io::Error::from_raw_os_error(-r)
                        );
                        queue.lost.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
                queue.begin();
                // A handler that panics answers EIO (its reply objects do, as they drop); the
                // server goes on serving its CPU.
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.serve_entry(queue, user_data as usize, buf, &ch)
                }));
                if served.is_err() {
                    error!("io_uring queue {qid}: a request's handler panicked; answered EIO");
                }
                queue.end();
            }
            ring.commit_answered(queue, dev)?;
        }
    }

    fn serve_entry(&self, queue: &Arc<Queue>, entry: usize, buf: &mut [u8], ch: &ChannelSender) {
        let Some((len, commit_id)) = queue.take_request(entry, buf) else {
            error!("ring queue {}: a request whose sizes do not add up", queue.qid);
            return refuse(queue, entry);
        };
        let reply = queue.hold(entry, commit_id);
        if may_take_long(&buf[..len]) {
            // Copied out (8-byte aligned, as requests are parsed in place) for a thread that
            // may wait: this one serves its CPU's other requests meanwhile.
            let mut owned = vec![0u64; len.div_ceil(8)];
            // SAFETY: `owned` holds at least len bytes; u64 has no invalid bit patterns.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(owned.as_mut_ptr().cast::<u8>(), len) };
            bytes.copy_from_slice(&buf[..len]);
            queue.slow_in_flight.fetch_add(1, Ordering::Relaxed);
            return queue.slow.push(SlowJob {
                request: owned,
                len,
                reply,
                ch: ch.clone(),
            });
        }
        self.dispatch_ring(ch.clone(), reply, &buf[..len]);
    }

    /// Dispatches the request `bytes` (in `/dev/fuse` layout), answered through `reply`; one
    /// that does not parse is answered EIO.
    fn dispatch_ring(&self, ch: ChannelSender, reply: RingReply, bytes: &[u8]) {
        let unparsed = reply.clone();
        match RequestWithSender::from_ring(ch, reply, bytes) {
            Some(req) => req.dispatch(self),
            None => {
                warn!("ring queue {}: a request that does not parse", unparsed.queue.qid);
                let unique = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
                unparsed.fail(unique, libc::EIO);
            }
        }
    }
}

/// Answers an entry whose request could not be read at all: its commit id and unique are the
/// kernel's, read without trusting the rest.
fn refuse(queue: &Arc<Queue>, entry: usize) {
    let mut fixed = [0u8; HEADER_LEN];
    // SAFETY: the entry is ours (its completion arrived); the header page holds HEADER_LEN.
    unsafe { std::ptr::copy_nonoverlapping(queue.header(entry), fixed.as_mut_ptr(), HEADER_LEN) };
    let unique = u64::from_le_bytes(fixed[8..16].try_into().expect("8 bytes"));
    let commit_id =
        u64::from_le_bytes(fixed[COMMIT_ID..COMMIT_ID + 8].try_into().expect("8 bytes"));
    queue.hold(entry, commit_id).fail(unique, libc::EIO);
}

fn error_header(unique: u64, errno: i32) -> [u8; OUT_HEADER_LEN] {
    let mut out = [0u8; OUT_HEADER_LEN];
    out[0..4].copy_from_slice(&(OUT_HEADER_LEN as u32).to_le_bytes());
    out[4..8].copy_from_slice(&(-errno).to_le_bytes());
    out[8..16].copy_from_slice(&unique.to_le_bytes());
    out
}

/// What the serving threads share with the watcher.
#[derive(Debug)]
struct Watch {
    start: Instant,
    /// The watcher sleeps until the next request begins.
    sleeping: AtomicBool,
    thread: std::sync::OnceLock<Thread>,
}

impl Watch {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

struct Server {
    queue: Arc<Queue>,
    thread: JoinHandle<io::Result<()>>,
}

/// The queues of a session: a server per possible CPU to begin with, more for a CPU whose
/// servers are all held up (a request that takes long, entries all waiting for answers), up to
/// `max_per_queue`. Each server serves one request at a time, so without this a slow request
/// would hold up every later request from its CPU; a new server's entries are the kernel's
/// first choice (it hands out the entry made available last), so the CPU's next requests go to
/// it.
pub(crate) struct Rings<FS: Filesystem> {
    config: RingConfig,
    ch: Channel,
    filesystem: Arc<FilesystemHolder<FS>>,
    allowed: SessionACL,
    session_owner: nix::unistd::Uid,
    max_per_queue: usize,
    watch: Arc<Watch>,
    servers: Mutex<Vec<Server>>,
    stopping: AtomicBool,
    watcher: Mutex<Option<JoinHandle<()>>>,
    slow: Arc<SlowJobs>,
    slow_threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<FS: Filesystem + Send + Sync + 'static> Rings<FS> {
    /// Starts a server per possible CPU and the watcher.
    pub(crate) fn start(
        config: RingConfig,
        ch: Channel,
        filesystem: Arc<FilesystemHolder<FS>>,
        (allowed, session_owner): (SessionACL, nix::unistd::Uid),
        max_per_queue: usize,
    ) -> io::Result<Arc<Self>> {
        let rings = Arc::new(Self {
            config,
            ch,
            filesystem,
            allowed,
            session_owner,
            max_per_queue: max_per_queue.max(1),
            watch: Arc::new(Watch {
                start: Instant::now(),
                sleeping: AtomicBool::new(false),
                thread: std::sync::OnceLock::new(),
            }),
            servers: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            watcher: Mutex::new(None),
            slow: Arc::new(SlowJobs::default()),
            slow_threads: Mutex::new(Vec::new()),
        });
        for i in 0..max_per_queue.max(2) {
            let event_loop = rings.event_loop(format!("fuser-slow-{i}"));
            let jobs = Arc::clone(&rings.slow);
            let t = std::thread::Builder::new()
                .name(format!("fuser-slow-{i}"))
                .spawn(move || event_loop.serve_slow(&jobs))?;
            rings.slow_threads.lock().push(t);
        }
        let cpus = possible_cpus();
        for qid in 0..cpus {
            rings.add_server(qid as u16, FIRST_DEPTH)?;
        }
        let me = Arc::clone(&rings);
        let watcher = std::thread::Builder::new()
            .name("fuser-watch".into())
            .spawn(move || me.watch_servers())?;
        let _ = rings.watch.thread.set(watcher.thread().clone());
        *rings.watcher.lock() = Some(watcher);
        log::info!("serving over io_uring: {cpus} queues");
        Ok(rings)
    }

    fn event_loop(&self, thread_name: String) -> SessionEventLoop<FS> {
        SessionEventLoop {
            thread_name,
            filesystem: Arc::clone(&self.filesystem),
            ch: self.ch.clone(),
            allowed: self.allowed,
            session_owner: self.session_owner,
            busy_poll: None,
        }
    }

    fn add_server(&self, qid: u16, depth: usize) -> io::Result<()> {
        let queue = Queue::new(
            qid,
            depth,
            self.config,
            (Arc::clone(&self.watch), Arc::clone(&self.slow)),
        )?;
        let event_loop = self.event_loop(format!("fuser-ring-{qid}"));
        let dev = std::os::fd::AsFd::as_fd(&self.ch).as_raw_fd();
        let sender = self.ch.sender();
        let q = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name(format!("fuser-ring-{qid}"))
            .spawn(move || {
                let served = event_loop.serve_ring(&q, dev, sender);
                if let Err(e) = &served {
                    error!("io_uring queue {qid} stopped: {e}");
                }
                served
            })?;
        self.servers.lock().push(Server { queue, thread });
        Ok(())
    }

    /// Every [`WATCH_EVERY`] while requests come: adds a server to each CPU whose servers are
    /// all held up. Sleeps while no request comes.
    fn watch_servers(&self) {
        let mut quiet = 0u32;
        let mut last_served = 0u64;
        loop {
            if quiet >= QUIET_LOOKS {
                self.watch.sleeping.store(true, Ordering::SeqCst);
                // A request that began before the flag was up would not wake us: look once more.
                if self.total_served().0 == last_served {
                    std::thread::park();
                }
                self.watch.sleeping.store(false, Ordering::SeqCst);
                quiet = 0;
            } else {
                std::thread::sleep(WATCH_EVERY);
            }
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            let (served, busy) = self.total_served();
            if served == last_served && !busy {
                quiet += 1;
            } else {
                quiet = 0;
            }
            last_served = served;
            let now = self.watch.now();
            let held_up: Vec<u16> = {
                let servers = self.servers.lock();
                // Per CPU: servers, all held up (stuck or full), all full.
                let mut by_queue: std::collections::BTreeMap<u16, (usize, bool, bool)> =
                    std::collections::BTreeMap::new();
                for s in servers.iter() {
                    let e = by_queue.entry(s.queue.qid).or_insert((0, true, true));
                    let full = s.queue.full();
                    e.0 += 1;
                    e.1 &= full || s.queue.stuck(now);
                    e.2 &= full;
                }
                // Slow requests get up to `--threads` servers per CPU; entries held by requests
                // waiting for answers (tool calls of many callers), which cost a thread that
                // sleeps, up to MAX_SERVERS.
                by_queue
                    .into_iter()
                    .filter(|(_, (n, held_up, full))| {
                        (*held_up && *n < self.max_per_queue) || (*full && *n < MAX_SERVERS)
                    })
                    .map(|(qid, _)| qid)
                    .collect()
            };
            for qid in held_up {
                match self.add_server(qid, EXTRA_DEPTH) {
                    Ok(()) => log::info!("io_uring queue {qid}: its servers are held up; added one"),
                    Err(e) => warn!("io_uring queue {qid}: cannot add a server: {e}"),
                }
            }
        }
    }

    /// The servers' begin and end marks summed (a change says requests came), and whether any
    /// server is serving one now.
    fn total_served(&self) -> (u64, bool) {
        self.servers.lock().iter().fold((0u64, false), |(sum, busy), s| {
            let n = s.queue.served.load(Ordering::SeqCst);
            (sum.wrapping_add(n), busy || n % 2 == 1)
        })
    }

    /// Stops the servers and the watcher (the connection is gone) and waits for them.
    pub(crate) fn stop(&self) -> io::Result<()> {
        self.stopping.store(true, Ordering::Release);
        if let Some(t) = self.watch.thread.get() {
            t.unpark();
        }
        if let Some(w) = self.watcher.lock().take() {
            let _ = w.join();
        }
        // The servers first: they hand requests to the slow-request threads, which then serve
        // what is left before they end.
        let servers = std::mem::take(&mut *self.servers.lock());
        for s in &servers {
            s.queue.stop();
        }
        let mut panicked = false;
        for s in servers {
            panicked |= s.thread.join().is_err();
        }
        self.slow.stop();
        for t in std::mem::take(&mut *self.slow_threads.lock()) {
            panicked |= t.join().is_err();
        }
        match panicked {
            true => Err(io::Error::other("an io_uring thread panicked")),
            false => Ok(()),
        }
    }
}

/// Opcodes served off a queue's thread: they wait for the disk (`FSYNC`, `FSYNCDIR`,
/// `FALLOCATE`, `COPY_FILE_RANGE`), or move at least [`LARGE_IO`] bytes (`READ`, `WRITE`).
const FSYNC: u32 = 20;
const FSYNCDIR: u32 = 30;
const FALLOCATE: u32 = 43;
const COPY_FILE_RANGE: u32 = 47;
const READ: u32 = 15;
const WRITE: u32 = 16;
const LARGE_IO: usize = 256 * 1024;

/// Whether the request in `req` (`/dev/fuse` layout) is one a queue's thread hands on.
fn may_take_long(req: &[u8]) -> bool {
    let word = |at: usize| {
        req.get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    match word(4) {
        FSYNC | FSYNCDIR | FALLOCATE | COPY_FILE_RANGE => true,
        // struct fuse_read_in: fh, offset, then the size.
        READ => word(IN_HEADER_LEN + 16) as usize >= LARGE_IO,
        WRITE => req.len() >= LARGE_IO,
        _ => false,
    }
}

/// A request handed on by a queue's thread, with where its answer goes.
struct SlowJob {
    request: Vec<u64>,
    len: usize,
    reply: RingReply,
    ch: ChannelSender,
}

/// Requests that may take long, waiting for a slow-request thread.
#[derive(Default)]
struct SlowJobs {
    jobs: Mutex<std::collections::VecDeque<SlowJob>>,
    ready: parking_lot::Condvar,
    stopping: AtomicBool,
}

impl std::fmt::Debug for SlowJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowJobs").finish_non_exhaustive()
    }
}

impl SlowJobs {
    fn push(&self, job: SlowJob) {
        self.jobs.lock().push_back(job);
        self.ready.notify_one();
    }

    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _guard = self.jobs.lock();
        self.ready.notify_all();
    }

    fn next(&self) -> Option<SlowJob> {
        let mut jobs = self.jobs.lock();
        loop {
            if let Some(job) = jobs.pop_front() {
                return Some(job);
            }
            if self.stopping.load(Ordering::Acquire) {
                return None;
            }
            self.ready.wait(&mut jobs);
        }
    }
}

impl<FS: Filesystem> SessionEventLoop<FS> {
    /// Serves handed-on requests until the session stops.
    fn serve_slow(&self, jobs: &SlowJobs) {
        while let Some(job) = jobs.next() {
            // SAFETY: the job's buffer holds `len` bytes it was filled with.
            let bytes =
                unsafe { std::slice::from_raw_parts(job.request.as_ptr().cast::<u8>(), job.len) };
            let queue = Arc::clone(&job.reply.queue);
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.dispatch_ring(job.ch, job.reply, bytes)
            }));
            if served.is_err() {
                error!("a slow request's handler panicked; answered EIO");
            }
            queue.slow_in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
