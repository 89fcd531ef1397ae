//! How requests reach the daemon: FUSE over io_uring when the kernel offers it (one queue per
//! CPU, its thread pinned there), `/dev/fuse` otherwise or with `--no-io-uring`.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::json;

use crate::common::{pin_to_cpu, skip, tool_call, Mounted};

const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the kernel offers FUSE over io_uring to mounting daemons.
fn uring_offered() -> bool {
    fs::read_to_string(URING_PARAM).is_ok_and(|v| v.trim() == "Y")
}

/// Context switches of the daemon's request-serving threads, summed by thread name (a CPU's
/// queue may have several servers).
fn switches(m: &Mounted) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let tasks = format!("/proc/{}/task", m.daemon_pid());
    for t in fs::read_dir(tasks).unwrap().flatten() {
        let name = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let name = name.trim().to_string();
        if !name.starts_with("fuser-") {
            continue;
        }
        let status = fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let n: u64 = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        *out.entry(name).or_insert(0) += n;
    }
    out
}

fn possible_cpus() -> usize {
    let s = fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    let last = s.trim().rsplit(['-', ',']).next().unwrap();
    last.parse::<usize>().unwrap() + 1
}

/// Files made, written, renamed, read back, listed and removed; misses looked up; a tool call
/// (answered from a tool thread, not the thread that took the request).
fn a_little_of_everything(m: &Mounted) {
    let dir = m.ws().join("t");
    fs::create_dir(&dir).unwrap();
    for i in 0..300 {
        let data = format!("file {i}\n").repeat(i + 1);
        fs::write(dir.join(format!("f{i}")), &data).unwrap();
        fs::rename(dir.join(format!("f{i}")), dir.join(format!("g{i}"))).unwrap();
        fs::set_permissions(dir.join(format!("g{i}")), fs::Permissions::from_mode(0o640)).unwrap();
    }
    for i in 0..300 {
        let data = fs::read_to_string(dir.join(format!("g{i}"))).unwrap();
        assert_eq!(data, format!("file {i}\n").repeat(i + 1));
        assert!(!dir.join(format!("missing{i}")).exists());
    }
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 300);
    // A large write and read (many pages in one request).
    let big: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
    fs::write(dir.join("big"), &big).unwrap();
    assert!(fs::read(dir.join("big")).unwrap() == big);
    fs::write(m.ws().join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let v = tool_call(
        m,
        "read_range",
        &json!({"path": "a.txt", "start": 2, "end": 3}),
    );
    assert_eq!(v["ok"], true, "{v}");
    assert!(v.to_string().contains("two"), "{v}");
    fs::remove_dir_all(&dir).unwrap();
    assert!(!dir.exists());
}

#[test]
fn requests_are_served_from_a_queue_per_cpu_when_the_kernel_offers_io_uring() {
    if !uring_offered() {
        return skip(
            "requests_are_served_from_a_queue_per_cpu_when_the_kernel_offers_io_uring",
            "the fuse module's enable_uring parameter is off (scripts/setup.sh turns it on)",
        );
    }
    let m = Mounted::new();
    let before = switches(&m);
    let queues: Vec<&String> = before
        .keys()
        .filter(|n| n.starts_with("fuser-ring-"))
        .collect();
    assert_eq!(queues.len(), possible_cpus(), "{before:?}");
    a_little_of_everything(&m);
    let after = switches(&m);
    let delta = |ring: bool| -> u64 {
        after
            .iter()
            // The watcher looks every few ms while requests come: it serves none.
            .filter(|(n, _)| n.starts_with("fuser-ring-") == ring && *n != "fuser-watch")
            .map(|(n, v)| v - before.get(n).copied().unwrap_or(0))
            .sum()
    };
    let (ring, dev) = (delta(true), delta(false));
    // Each of the ~2,000 requests above woke a queue's thread; /dev/fuse carried only forgets.
    assert!(
        ring >= 1000,
        "queues' threads switched {ring} times, /dev/fuse's {dev}"
    );
    assert!(
        ring > 4 * dev,
        "queues' threads switched {ring} times, /dev/fuse's {dev}"
    );
    // Idle, the queues' threads and their watcher sleep.
    std::thread::sleep(Duration::from_secs(2));
    let before = m.thread_ticks("fuser-");
    std::thread::sleep(Duration::from_secs(1));
    let used = m.thread_ticks("fuser-") - before;
    assert!(used < 10, "idle request threads used {used} ticks in 1 s");
    assert!(m.umount().status.success());
}

#[test]
fn a_slow_request_does_not_hold_up_its_cpus_queue() {
    if !uring_offered() {
        return skip(
            "a_slow_request_does_not_hold_up_its_cpus_queue",
            "the fuse module's enable_uring parameter is off (scripts/setup.sh turns it on)",
        );
    }
    // The daemon takes 3 s over every lookup of "slow" (a test hook).
    let m = Mounted::with_args_env(&[], &[("CLAWFS_FAULT_SLOW_LOOKUP", "slow=3000")]);
    fs::create_dir(m.ws().join("busy")).unwrap();
    fs::create_dir(m.ws().join("other")).unwrap();
    let servers_of_cpu0 = || {
        let tasks = format!("/proc/{}/task", m.daemon_pid());
        fs::read_dir(tasks)
            .unwrap()
            .flatten()
            .filter(|t| {
                fs::read_to_string(t.path().join("comm")).unwrap_or_default() == "fuser-ring-0\n"
            })
            .count()
    };
    // One server at first; a loaded machine may have added one already, for a request of the
    // mount's own that its thread was kept from finishing for 5 ms (by design: it counts as
    // held up).
    let first = servers_of_cpu0();
    assert!(first >= 1, "CPU 0's queue has no server");
    // Both callers on CPU 0: their requests share its queue.
    let slow = std::thread::spawn({
        let p = m.ws().join("busy/slow");
        move || {
            pin_to_cpu(0).unwrap();
            fs::metadata(p).is_err()
        }
    });
    pin_to_cpu(0).unwrap();
    crate::posix::creates_and_lists_while(&m.ws().join("other"), &slow);
    // While one server waits on the slow lookup, another served the rest.
    let n = servers_of_cpu0();
    assert!(
        n >= 2 && n >= first,
        "CPU 0's queue has {n} servers (first {first}): one added"
    );
    assert!(slow.join().unwrap());
    assert!(m.umount().status.success());
}

#[test]
fn no_io_uring_serves_dev_fuse_alone() {
    let m = Mounted::with_args(&["--no-io-uring"]);
    let before = switches(&m);
    assert!(
        before.keys().all(|n| !n.starts_with("fuser-ring-")),
        "{before:?}"
    );
    a_little_of_everything(&m);
    let after = switches(&m);
    let served: u64 = after.iter().map(|(n, v)| v - before[n]).sum();
    assert!(served >= 1000, "/dev/fuse threads switched {served} times");
    assert!(m.umount().status.success());
}
