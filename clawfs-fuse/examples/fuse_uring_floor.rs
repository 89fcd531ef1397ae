//! The FUSE round-trip floor over FUSE-over-io_uring: a file system that does no work at all,
//! talking to the kernel through per-CPU io_uring queues instead of read/write on /dev/fuse.
//!
//! `fuse_uring_floor MOUNTPOINT` serves the same tree as `fuse_floor` (one directory holding one
//! 4 KiB file `f`; every other name ENOENT, uncached). It needs root, and the kernel's
//! `fuse.enable_uring` module parameter set (`echo Y > /sys/module/fuse/parameters/enable_uring`);
//! without it the kernel keeps using /dev/fuse and the example says so. `bench/floor.sh` times it
//! beside native ext4, the /dev/fuse floor and ClawFS.
//!
//! fuser has no io_uring transport, so this speaks the FUSE protocol itself for the handful of
//! operations the probes need.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use io_uring::{opcode, squeue, types, IoUring};

const ROOT: u64 = 1;
const FILE: u64 = 2;
const SIZE: u64 = 4096;

// Opcodes and flags from <linux/fuse.h>.
const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_OPEN: u32 = 14;
const FUSE_READ: u32 = 15;
const FUSE_RELEASE: u32 = 18;
const FUSE_FLUSH: u32 = 25;
const FUSE_INIT: u32 = 26;
const FUSE_OPENDIR: u32 = 27;
const FUSE_READDIR: u32 = 28;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_BATCH_FORGET: u32 = 42;

const FUSE_ASYNC_READ: u32 = 1 << 0;
const FUSE_MAX_PAGES: u32 = 1 << 22;
const FUSE_INIT_EXT: u32 = 1 << 30;
const FUSE_OVER_IO_URING_FLAGS2: u32 = 1 << (41 - 32);
const FOPEN_KEEP_CACHE: u32 = 1 << 1;

const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

const IN_HEADER: usize = 40;
const MAX_WRITE: usize = 128 * 1024;
const PAYLOAD: usize = MAX_WRITE + 4096;
/// struct fuse_uring_req_header: in/out header (128), op header (128), ring_ent_in_out (32).
const RING_HEADER: usize = 288;
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
const QUEUE_DEPTH: usize = 8;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// struct fuse_attr (88 bytes).
fn push_attr(out: &mut Vec<u8>, ino: u64) {
    let (mode, size, nlink) = if ino == ROOT {
        (libc::S_IFDIR | 0o755, 0, 2)
    } else {
        (libc::S_IFREG | 0o644, SIZE, 1)
    };
    for v in [ino, size, size.div_ceil(512), 0, 0, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0u32] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Answers one request: Ok(body) or Err(errno). `op` is the opcode's fixed header, `rest` what
/// follows it (names, data).
fn handle(opcode: u32, nodeid: u64, op: &[u8], rest: &[u8]) -> Result<Vec<u8>, i32> {
    let mut out = Vec::with_capacity(128);
    match opcode {
        FUSE_LOOKUP => {
            if nodeid != ROOT || rest.split(|&b| b == 0).next() != Some(b"f") {
                return Err(libc::ENOENT);
            }
            for v in [FILE, 0, 10, 10] {
                out.extend_from_slice(&v.to_le_bytes()); // nodeid, generation, entry/attr valid
            }
            out.extend_from_slice(&[0; 8]); // nsecs
            push_attr(&mut out, FILE);
        }
        FUSE_GETATTR => {
            if nodeid != ROOT && nodeid != FILE {
                return Err(libc::ENOENT);
            }
            out.extend_from_slice(&10u64.to_le_bytes());
            out.extend_from_slice(&[0; 8]);
            push_attr(&mut out, nodeid);
        }
        FUSE_OPEN | FUSE_OPENDIR => {
            out.extend_from_slice(&0u64.to_le_bytes());
            out.extend_from_slice(&FOPEN_KEEP_CACHE.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
        }
        FUSE_READ => {
            let offset = u64_at(op, 8).min(SIZE);
            let size = u64::from(u32_at(op, 16));
            let end = offset.saturating_add(size).min(SIZE);
            out.resize((end - offset) as usize, b'x');
        }
        FUSE_READDIR => {}
        FUSE_RELEASE | FUSE_RELEASEDIR => {}
        _ => return Err(libc::ENOSYS),
    }
    Ok(out)
}

/// Size of the fixed header of the opcodes `handle` reads (the rest is payload).
fn op_header_len(opcode: u32) -> usize {
    match opcode {
        FUSE_GETATTR => 16,
        FUSE_OPEN | FUSE_OPENDIR => 8,
        FUSE_READ | FUSE_READDIR => 40,
        FUSE_RELEASE | FUSE_RELEASEDIR => 24,
        FUSE_FLUSH => 24,
        _ => 0,
    }
}

fn write_reply(dev: &File, unique: u64, result: Result<Vec<u8>, i32>) {
    let (error, body) = match result {
        Ok(body) => (0i32, body),
        Err(e) => (-e, Vec::new()),
    };
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
    msg.extend_from_slice(&error.to_le_bytes());
    msg.extend_from_slice(&unique.to_le_bytes());
    msg.extend_from_slice(&body);
    let _ = (&*dev).write(&msg);
}

/// Serves /dev/fuse: INIT, requests sent before the rings are ready, forgets and interrupts.
fn serve_dev(dev: Arc<File>, on_init: impl FnOnce(bool)) {
    let mut buf = vec![0u8; MAX_WRITE + 4096];
    let mut on_init = Some(on_init);
    loop {
        let n = match (&*dev).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => std::process::exit(0), // ENODEV: unmounted
        };
        let req = &buf[..n];
        let (opcode, unique, nodeid) = (u32_at(req, 4), u64_at(req, 8), u64_at(req, 16));
        let args = &req[IN_HEADER..];
        match opcode {
            FUSE_INIT => {
                let (major, minor, kernel_flags) =
                    (u32_at(args, 0), u32_at(args, 4), u32_at(args, 12));
                let flags2 = if kernel_flags & FUSE_INIT_EXT != 0 {
                    u32_at(args, 16)
                } else {
                    0
                };
                let uring = flags2 & FUSE_OVER_IO_URING_FLAGS2 != 0;
                let mut out = Vec::with_capacity(64);
                for v in [
                    major,
                    minor,
                    128 * 1024,
                    FUSE_ASYNC_READ | FUSE_MAX_PAGES | FUSE_INIT_EXT,
                ] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                out.extend_from_slice(&16u16.to_le_bytes()); // max_background
                out.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
                out.extend_from_slice(&(MAX_WRITE as u32).to_le_bytes());
                out.extend_from_slice(&1u32.to_le_bytes()); // time_gran
                out.extend_from_slice(&((MAX_WRITE / 4096) as u16).to_le_bytes()); // max_pages
                out.extend_from_slice(&0u16.to_le_bytes());
                let flags2_out = if uring { FUSE_OVER_IO_URING_FLAGS2 } else { 0 };
                out.extend_from_slice(&flags2_out.to_le_bytes());
                out.resize(64, 0);
                write_reply(&dev, unique, Ok(out));
                if let Some(f) = on_init.take() {
                    f(uring);
                }
            }
            FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT => {}
            _ => {
                let split = op_header_len(opcode).min(args.len());
                write_reply(
                    &dev,
                    unique,
                    handle(opcode, nodeid, &args[..split], &args[split..]),
                );
            }
        }
    }
}

/// One registered ring entry: the request/reply header area and the payload buffer.
struct Entry {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    iov: [libc::iovec; 2],
}

fn uring_cmd(
    fd: RawFd,
    cmd_op: u32,
    user_data: u64,
    qid: u16,
    commit_id: u64,
    iov: Option<u64>,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_le_bytes());
    cmd[16..18].copy_from_slice(&qid.to_le_bytes());
    let mut op = opcode::UringCmd80::new(types::Fd(fd), cmd_op).cmd(cmd);
    if let Some(addr) = iov {
        op = op.addr(Some(addr));
    }
    let entry = op.build().user_data(user_data);
    if iov.is_none() {
        return entry;
    }
    // The crate cannot set sqe->len, which REGISTER needs to be 2 (header and payload iovecs).
    // SAFETY: Entry128 is repr(C) around the 128-byte io_uring_sqe; len is the u32 at offset 24.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(entry) };
    raw[24..28].copy_from_slice(&2u32.to_le_bytes());
    // SAFETY: the same 128 bytes back into the type they came from.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: plain libc calls on a zeroed cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn serve_queue(fd: RawFd, qid: usize) -> std::io::Result<()> {
    pin_to_cpu(qid);
    let mut ring: IoUring<squeue::Entry128> = IoUring::builder().setup_cqsize(64).build(32)?;
    let mut entries: Vec<Entry> = (0..QUEUE_DEPTH)
        .map(|_| Entry {
            header: vec![0u8; RING_HEADER].into_boxed_slice(),
            payload: vec![0u8; PAYLOAD].into_boxed_slice(),
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 2],
        })
        .collect();
    for (i, e) in entries.iter_mut().enumerate() {
        e.iov = [
            libc::iovec {
                iov_base: e.header.as_mut_ptr().cast(),
                iov_len: RING_HEADER,
            },
            libc::iovec {
                iov_base: e.payload.as_mut_ptr().cast(),
                iov_len: PAYLOAD,
            },
        ];
        let sqe = uring_cmd(
            fd,
            FUSE_IO_URING_CMD_REGISTER,
            i as u64,
            qid as u16,
            0,
            Some(e.iov.as_ptr() as u64),
        );
        // SAFETY: the iovecs and buffers live in `entries` for the life of the ring.
        unsafe {
            ring.submission()
                .push(&sqe)
                .expect("queue depth fits the ring")
        };
    }
    loop {
        ring.submit_and_wait(1)?;
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (i, res) in done {
            if res == -libc::ENOTCONN || res == -libc::ENODEV {
                return Ok(());
            }
            if res < 0 {
                return Err(std::io::Error::from_raw_os_error(-res));
            }
            let e = &mut entries[i as usize];
            let h = &e.header;
            let (opcode, unique, nodeid) = (u32_at(h, 4), u64_at(h, 8), u64_at(h, 16));
            let commit_id = u64_at(h, ENT_IN_OUT + 8);
            let payload_sz = u32_at(h, ENT_IN_OUT + 16) as usize;
            let op = &h[OP_IN..OP_IN + op_header_len(opcode)];
            let result = handle(opcode, nodeid, op, &e.payload[..payload_sz]);
            let (error, len) = match result {
                Ok(body) => {
                    e.payload[..body.len()].copy_from_slice(&body);
                    (0i32, body.len())
                }
                Err(errno) => (-errno, 0),
            };
            e.header[0..4].copy_from_slice(&((16 + len) as u32).to_le_bytes());
            e.header[4..8].copy_from_slice(&error.to_le_bytes());
            e.header[8..16].copy_from_slice(&unique.to_le_bytes());
            e.header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(len as u32).to_le_bytes());
            let sqe = uring_cmd(
                fd,
                FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
                i,
                qid as u16,
                commit_id,
                None,
            );
            // SAFETY: as above; the entry's buffers outlive the ring.
            unsafe { ring.submission().push(&sqe).expect("one SQE per entry") };
        }
    }
}

fn possible_cpus() -> usize {
    // "0-1" or "0": the kernel makes one queue per possible CPU.
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

fn main() -> anyhow::Result<()> {
    let Some(mountpoint) = std::env::args_os().nth(1) else {
        eprintln!("usage: fuse_uring_floor MOUNTPOINT   (serves until unmounted; needs root)");
        std::process::exit(2);
    };
    let dev = Arc::new(
        OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")?,
    );
    let fd = dev.as_raw_fd();
    let target = CString::new(mountpoint.as_bytes())?;
    let opts = CString::new(format!(
        "fd={fd},rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other"
    ))?;
    // SAFETY: valid NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            c"fuse-uring-floor".as_ptr(),
            target.as_ptr(),
            c"fuse".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast(),
        )
    };
    if rc != 0 {
        anyhow::bail!("mount: {}", std::io::Error::last_os_error());
    }
    let queues = possible_cpus();
    serve_dev(Arc::clone(&dev), move |uring| {
        if !uring {
            eprintln!(
                "fuse_uring_floor: kernel did not offer FUSE_OVER_IO_URING; serving /dev/fuse"
            );
            return;
        }
        for qid in 0..queues {
            std::thread::spawn(move || {
                if let Err(e) = serve_queue(fd, qid) {
                    eprintln!("fuse_uring_floor: queue {qid}: {e}");
                }
            });
        }
    });
    Ok(())
}
