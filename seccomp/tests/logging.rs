//! Refusals reach the kernel's audit log. A test binary of its own: without auditd the records go
//! to the kernel log through printk's rate limit (10 per 5 s), which the other tests would use up.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use clawfs_seccomp::{available, Filter};
use common::*;

fn kernel_log() -> Option<String> {
    let out = Command::new("dmesg").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn spawn(filter: &Arc<Filter>, checks: &[&str]) -> u32 {
    let f = Arc::clone(filter);
    let mut cmd = Command::new(probe());
    cmd.arg("--nofork").args(checks).stdout(Stdio::null());
    // SAFETY: Filter::load makes system calls only and touches no lock or allocator.
    unsafe {
        cmd.pre_exec(move || f.load());
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Whether the kernel log has a seccomp record (type 1326) of `pid` for `syscall` with `code`.
fn record(log: &str, pid: u32, syscall: u32, code: &str) -> bool {
    log.lines().any(|l| {
        l.contains("type=1326")
            && l.contains(&format!(" pid={pid} "))
            && l.contains(&format!(" syscall={syscall} "))
            && l.contains(&format!(" code={code}"))
    })
}

#[test]
fn refusals_are_logged_and_the_clone3_answer_is_not() {
    require_seccomp();
    let filter = default_filter();
    assert_eq!(filter.logs_denials(), available().log_flag);
    assert!(
        filter.logs_denials(),
        "this host cannot log refusals: {}",
        available()
    );
    if kernel_log().is_none() {
        eprintln!("dmesg is not readable here: the kernel log cannot be checked");
        return;
    }
    let kill_all = compile(&variant(|v| v["default_action"] = "kill".into()));
    // 435 clone3 (ENOSYS, quiet), 161 chroot (EPERM, logged: the audit code is the action
    // without its errno), then a kill.
    for attempt in 0..3 {
        let errno_pid = spawn(&filter, &["clone3", "chroot"]);
        let kill_pid = spawn(&kill_all, &["chroot"]);
        for _ in 0..20 {
            let log = kernel_log().unwrap();
            if record(&log, errno_pid, 161, "0x50000") && record(&log, kill_pid, 161, "0x80000000")
            {
                assert!(
                    !record(&log, errno_pid, 435, "0x50000"),
                    "the clone3 ENOSYS answer was logged"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("attempt {attempt}: records not found (printk rate limit?), waiting 6 s");
        std::thread::sleep(Duration::from_secs(6));
    }
    panic!("no seccomp audit records in the kernel log after 3 attempts");
}
