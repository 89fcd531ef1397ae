//! Real-kernel tests of the eBPF programs: run as root. Each test creates its own cgroup v2
//! directory `<cgroup2 mount>/clawfs-ebpf-test-<pid>-<tag>`, removed at the end even on failure.

use std::ffi::CString;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clawfs_ebpf::{
    availability, cgroup2_mount, cgroup_id, Allow, Coverage, EgressFilter, Endpoint, EventKind,
    FileOpenGuard, Monitor, Status,
};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

macro_rules! require_root {
    () => {
        if !is_root() {
            // CI's machine runs every test as root: there a skip is a failure.
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "needs root (CAP_BPF, CAP_SYS_ADMIN, cgroup v2 writes)"
            );
            eprintln!("SKIP: needs root (CAP_BPF, CAP_SYS_ADMIN, cgroup v2 writes)");
            return;
        }
    };
}

/// A cgroup v2 directory for one test, emptied (SIGKILL) and removed when dropped.
struct TestCgroup {
    dir: PathBuf,
    procs: CString,
}

impl TestCgroup {
    fn new(tag: &str) -> TestCgroup {
        let mount = cgroup2_mount().expect("no cgroup2 mount in /proc/self/mountinfo");
        let dir = mount.join(format!("clawfs-ebpf-test-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let procs = CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        TestCgroup { dir, procs }
    }

    fn id(&self) -> u64 {
        cgroup_id(&self.dir).unwrap()
    }

    /// A command whose child moves itself into this cgroup before exec.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args).stdout(std::process::Stdio::null());
        let procs = self.procs.clone();
        // SAFETY: the closure only calls async-signal-safe functions (open, write, close).
        unsafe {
            cmd.pre_exec(move || enter_cgroup(&procs));
        }
        cmd
    }
}

/// Writes "0" to a cgroup.procs: moves the calling process. Async-signal-safe.
fn enter_cgroup(procs: &CString) -> std::io::Result<()> {
    // SAFETY: procs is a valid NUL-terminated path; the buffer is a 1-byte static string.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, b"0".as_ptr().cast(), 1);
        libc::close(fd);
        if n != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if let Ok(s) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
                for pid in s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove {}", self.dir.display());
    }
}

/// Held by the tests that start a monitor: one counts the tracepoints the process holds.
static MONITORS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits until no other test of this file runs a monitor; keep the guard for the test.
fn one_monitor_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    MONITORS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The raw tracepoint links open in this process (as `/proc/self/fdinfo` shows them): each
/// attached raw tracepoint holds one.
fn open_tracepoint_events() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf_link")
                && std::fs::read_to_string(format!("/proc/self/fdinfo/{}", e.file_name().display()))
                    .is_ok_and(|info| info.lines().any(|l| l == "link_type:\traw_tracepoint"))
        })
        .count()
}

/// The ids of the raw tracepoint links in the whole system.
fn raw_tracepoint_links() -> std::collections::HashSet<u32> {
    aya::programs::loaded_links()
        .filter_map(Result::ok)
        .filter(|l| l.link_type().ok() == Some(aya::programs::links::LinkType::RawTracePoint))
        .map(|l| l.id())
        .collect()
}

#[test]
fn a_detached_monitor_reports_nothing_and_holds_no_tracepoint() {
    require_root!();
    let _one = one_monitor_at_a_time();
    let before = open_tracepoint_events();
    let mut monitor = Monitor::start(Coverage::Syscalls).expect("start monitor");
    assert!(!monitor.is_attached(), "loaded, not attached");
    assert_eq!(
        open_tracepoint_events(),
        before,
        "no tracepoint before attach"
    );
    let cg = TestCgroup::new("detached");
    monitor.watch(cg.id(), "agent-test").unwrap();
    let run_cat = || {
        let mut child = cg.command("/bin/cat", &["/etc/hostname"]).spawn().unwrap();
        let pid = child.id();
        assert!(child.wait().unwrap().success());
        pid
    };
    let unseen = run_cat();
    let exec_of = |pid: u32| {
        move |e: &clawfs_ebpf::Event| {
            e.pid == pid
                && matches!(&e.kind, EventKind::Exec { filename } if filename.ends_with("cat"))
        }
    };
    let others = raw_tracepoint_links();
    monitor.attach().unwrap();
    monitor.attach().unwrap(); // twice is once
    assert_eq!(
        open_tracepoint_events(),
        before + 3,
        "the three raw tracepoints"
    );
    let ours: Vec<u32> = raw_tracepoint_links()
        .difference(&others)
        .copied()
        .collect();
    let seen = run_cat();
    let events = monitor
        .collect_until(Duration::from_secs(5), |evs| evs.iter().any(exec_of(seen)))
        .unwrap();
    assert!(
        events.iter().any(exec_of(seen)),
        "attached: the exec is reported"
    );
    assert!(
        !events.iter().any(exec_of(unseen)),
        "the exec before the attach is not"
    );
    monitor.detach().unwrap();
    assert!(!monitor.is_attached());
    assert_eq!(
        open_tracepoint_events(),
        before,
        "detached: no tracepoint left"
    );
    // A child that another test forks at this moment holds copies of the links' descriptors
    // until it execs (they close on exec), and the tracepoints stay attached until then.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ours.iter().any(|id| raw_tracepoint_links().contains(id)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the kernel still holds the links 10 s after detach"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = run_cat();
    let events = monitor
        .collect_until(Duration::from_millis(500), |_| false)
        .unwrap();
    assert!(!events.iter().any(exec_of(after)), "detached: {events:?}");
}

#[test]
fn exec_coverage_reports_execs_and_hooks_no_system_call() {
    require_root!();
    let _one = one_monitor_at_a_time();
    let before = open_tracepoint_events();
    let mut monitor = Monitor::start(Coverage::Exec).expect("start monitor");
    monitor.attach().unwrap();
    assert_eq!(
        open_tracepoint_events(),
        before + 1,
        "sched_process_exec alone: no system call entry or exit hook"
    );
    let cg = TestCgroup::new("exec-only");
    monitor.watch(cg.id(), "agent-test").unwrap();
    // An exec, an open and a connect refused (nothing listens on port 1).
    let mut child = cg
        .command(
            "/usr/bin/python3",
            &[
                "-c",
                "import socket
open('/etc/hostname').read()
try:
 socket.create_connection(('127.0.0.1', 1))
except OSError:
 pass",
            ],
        )
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    let events = monitor
        .collect_until(Duration::from_secs(5), |evs| {
            evs.iter()
                .any(|e| e.pid == pid && matches!(e.kind, EventKind::Exec { .. }))
        })
        .unwrap();
    let ours: Vec<_> = events.iter().filter(|e| e.pid == pid).collect();
    assert!(
        ours.iter().any(
            |e| matches!(&e.kind, EventKind::Exec { filename } if filename.ends_with("python3"))
        ),
        "the exec is reported: {events:?}"
    );
    assert!(
        ours.iter()
            .all(|e| matches!(e.kind, EventKind::Exec { .. })),
        "nothing but execs: {ours:?}"
    );
    monitor.detach().unwrap();
    assert_eq!(open_tracepoint_events(), before);
}

#[test]
fn monitor_reports_exec_open_connect_of_watched_cgroup_only() {
    require_root!();
    let _one = one_monitor_at_a_time();
    let mut monitor = Monitor::start(Coverage::Syscalls).expect("start monitor");
    monitor.attach().expect("attach monitor");
    let cg = TestCgroup::new("monitor");
    monitor.watch(cg.id(), "agent-test").unwrap();

    // Outside the cgroup: the same actions, never reported.
    let outside = Command::new("/bin/cat")
        .arg("/etc/hostname")
        .output()
        .unwrap();
    assert!(outside.status.success());
    let mut s = String::new();
    std::fs::File::open("/etc/hostname")
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();

    let mut child = cg.command("/bin/cat", &["/etc/hostname"]).spawn().unwrap();
    let cat_pid = child.id();
    assert!(child.wait().unwrap().success());
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
    let mut child = cg.command("/bin/bash", &["-c", &script]).spawn().unwrap();
    let bash_pid = child.id();
    assert!(child.wait().unwrap().success());

    let events = monitor
        .collect_until(Duration::from_secs(5), |evs| {
            let exec = evs.iter().any(|e| {
                e.pid == cat_pid
                    && matches!(&e.kind, EventKind::Exec { filename } if filename.ends_with("cat"))
            });
            let open = evs.iter().any(|e| {
                e.pid == cat_pid
                    && e.kind
                        == EventKind::Open {
                            path: "/etc/hostname".into(),
                            errno: 0,
                        }
            });
            let conn = evs.iter().any(|e| {
                e.pid == bash_pid
                    && e.kind
                        == EventKind::Connect {
                            addr: Ipv4Addr::LOCALHOST.into(),
                            port,
                        }
            });
            exec && open && conn
        })
        .unwrap();
    for e in &events {
        eprintln!("{e:?}");
    }
    let has = |pid: u32, f: &dyn Fn(&EventKind) -> bool| {
        events.iter().any(|e| e.pid == pid && f(&e.kind))
    };
    assert!(
        has(
            cat_pid,
            &|k| matches!(k, EventKind::Exec { filename } if filename.ends_with("cat"))
        ),
        "no Exec of cat"
    );
    assert!(
        has(cat_pid, &|k| *k
            == EventKind::Open {
                path: "/etc/hostname".into(),
                errno: 0
            }),
        "no Open of /etc/hostname"
    );
    assert!(
        has(bash_pid, &|k| *k
            == EventKind::Connect {
                addr: Ipv4Addr::LOCALHOST.into(),
                port
            }),
        "no Connect to 127.0.0.1:{port}"
    );
    for e in &events {
        assert_eq!(e.agent, "agent-test");
        assert_eq!(e.cgroup_id, cg.id());
        assert!(
            e.pid == cat_pid || e.pid == bash_pid,
            "event of a process outside the cgroup: {e:?}"
        );
    }

    // Descendant cgroups are reported as the watched agent (clawfs/agent-NAME/run-PID layout).
    let sub = cg.dir.join("run-1");
    std::fs::create_dir(&sub).unwrap();
    let sub_procs = CString::new(
        sub.join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let mut cmd = Command::new("/bin/cat");
    cmd.arg("/etc/hostname").stdout(std::process::Stdio::null());
    // SAFETY: async-signal-safe closure, as above.
    unsafe { cmd.pre_exec(move || enter_cgroup(&sub_procs)) };
    let mut child = cmd.spawn().unwrap();
    let sub_pid = child.id();
    assert!(child.wait().unwrap().success());
    let events = monitor
        .collect_until(Duration::from_secs(5), |evs| {
            evs.iter().any(|e| {
                e.pid == sub_pid
                    && e.kind
                        == EventKind::Open {
                            path: "/etc/hostname".into(),
                            errno: 0,
                        }
            })
        })
        .unwrap();
    std::fs::remove_dir(&sub).unwrap();
    let e = events
        .iter()
        .find(|e| {
            e.pid == sub_pid
                && e.kind
                    == EventKind::Open {
                        path: "/etc/hostname".into(),
                        errno: 0,
                    }
        })
        .expect("no Open event from the descendant cgroup");
    assert_eq!((e.agent.as_str(), e.cgroup_id), ("agent-test", cg.id()));

    // Unwatched: nothing more.
    monitor.unwatch(cg.id()).unwrap();
    let mut child = cg.command("/bin/cat", &["/etc/hostname"]).spawn().unwrap();
    assert!(child.wait().unwrap().success());
    let events = monitor.next_events(Duration::from_millis(300)).unwrap();
    assert!(events.is_empty(), "events after unwatch: {events:?}");
}

/// Forks a child that moves into `procs` (unless None), connects to `addr` and exits with 0 or
/// the connect errno.
fn connect_from_child(procs: Option<&CString>, addr: SocketAddr) -> i32 {
    let SocketAddr::V4(v4) = addr else {
        unreachable!()
    };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(v4.ip().octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: the child only calls async-signal-safe functions before _exit.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            if let Some(p) = procs {
                if enter_cgroup(p).is_err() {
                    libc::_exit(200);
                }
            }
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            if fd < 0 {
                libc::_exit(201);
            }
            let rc = libc::connect(
                fd,
                (&sin as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            let code = if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            libc::_exit(code);
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status));
        libc::WEXITSTATUS(status)
    }
}

#[test]
fn egress_filter_allows_listed_ports_only_inside_the_cgroup() {
    require_root!();
    let cg = TestCgroup::new("net");
    let l1 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let l2 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (a1, a2) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());

    let ports = |p: &[u16]| Allow::To(p.iter().map(|&p| Endpoint::any_host(p)).collect());
    let mut policy = EgressFilter::attach(&cg.dir, ports(&[a1.port()])).expect("attach");
    assert_eq!(
        connect_from_child(Some(&cg.procs), a1),
        0,
        "allowed port refused"
    );
    assert_eq!(
        connect_from_child(Some(&cg.procs), a2),
        libc::EPERM,
        "other port not refused with EPERM"
    );
    // Outside the cgroup both work.
    assert_eq!(connect_from_child(None, a1), 0);
    assert_eq!(connect_from_child(None, a2), 0);
    TcpStream::connect(a2).expect("parent connect to p2");

    // None: not even a socket (the child exits 201 when socket() fails).
    policy.set_allow(Allow::None).unwrap();
    assert_eq!(connect_from_child(Some(&cg.procs), a1), 201);
    policy.set_allow(Allow::All).unwrap();
    assert_eq!(connect_from_child(Some(&cg.procs), a2), 0);
    policy.set_allow(ports(&[a2.port()])).unwrap();
    assert_eq!(connect_from_child(Some(&cg.procs), a1), libc::EPERM);
    assert_eq!(connect_from_child(Some(&cg.procs), a2), 0);

    // IPv6 goes through connect6.
    if let Ok(l6) = TcpListener::bind("[::1]:0") {
        let p6 = l6.local_addr().unwrap().port();
        let script = format!("exec 3<>/dev/tcp/::1/{p6}");
        let out = cg.command("/bin/bash", &["-c", &script]).output().unwrap();
        assert!(
            !out.status.success(),
            "IPv6 connect to a port not allowed succeeded"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Operation not permitted"), "{err}");
        policy.set_allow(ports(&[p6])).unwrap();
        let out = cg.command("/bin/bash", &["-c", &script]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        // CI's machine has an IPv6 loopback: there a skip is a failure.
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "cannot bind [::1]"
        );
        eprintln!("SKIP IPv6 part: cannot bind [::1]");
    }

    // An entry with an address allows that address only: a listener on every address is
    // reached at 127.0.0.1, not at 127.0.0.2.
    let any = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let p3 = any.local_addr().unwrap().port();
    policy
        .set_allow(Allow::To(vec![Endpoint::host(
            Ipv4Addr::LOCALHOST.into(),
            p3,
        )]))
        .unwrap();
    let at = |ip: [u8; 4]| SocketAddr::from((ip, p3));
    assert_eq!(connect_from_child(Some(&cg.procs), at([127, 0, 0, 1])), 0);
    assert_eq!(
        connect_from_child(Some(&cg.procs), at([127, 0, 0, 2])),
        libc::EPERM
    );

    // UDP datagrams sent without a connect go through sendmsg4: refused unless allowed.
    let udp = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let pu = udp.local_addr().unwrap().port();
    let send = format!(
        "import socket, errno\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry:\n s.sendto(b'x', ('127.0.0.1', {pu}))\n print('sent')\nexcept OSError as e:\n print(errno.errorcode[e.errno])"
    );
    let udp_send = || {
        let out = cg
            .command("/usr/bin/python3", &["-c", &send])
            .stdout(std::process::Stdio::piped())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(udp_send(), "EPERM");
    policy.set_allow(ports(&[pu])).unwrap();
    assert_eq!(udp_send(), "sent");

    // Detached when dropped: when the last copy of its link descriptor closes. A child another
    // test of this binary forks at that moment holds a copy until it execs or exits, so the
    // filter may outlive the drop by that long.
    drop(policy);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match connect_from_child(Some(&cg.procs), a1) {
            0 => break,
            libc::EPERM if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => panic!("still filtered 5 s after the drop: {other}"),
        }
    }
}

#[test]
fn availability_reports_each_kind_and_lsm_refusal() {
    require_root!();
    let _one = one_monitor_at_a_time();
    let a = availability();
    eprintln!("{a}");
    assert_eq!(a.monitor, Status::Available);
    assert_eq!(a.egress_filter, Status::Available);
    let lsm_enabled = std::fs::read_to_string("/sys/kernel/security/lsm")
        .map(|s| s.split(',').any(|l| l.trim() == "bpf"))
        .unwrap_or(false);
    match &a.file_open_lsm {
        Status::Available => assert!(lsm_enabled, "LSM loaded although bpf is not an active LSM"),
        Status::Unavailable(why) => {
            eprintln!("BPF LSM not available on this host: {why}");
            assert!(why.contains("lsm/file_open"), "{why}");
        }
    }
    assert!(a.to_string().contains("not available on this host") || a.file_open_lsm.is_available());
}

#[test]
fn file_open_guard_map_fills_and_enforce_reports_refusal() {
    require_root!();
    let mut guard = FileOpenGuard::new().expect("object and map load");
    let tmp = std::env::temp_dir().join(format!("clawfs-ebpf-lsm-{}", std::process::id()));
    std::fs::write(&tmp, b"secret").unwrap();
    guard.deny(&tmp).unwrap();
    guard.deny(Path::new("/etc/hostname")).unwrap();
    assert_eq!(guard.denied_count(), 2);
    guard.allow(Path::new("/etc/hostname")).unwrap();
    assert_eq!(guard.denied_count(), 1);
    match guard.enforce() {
        Ok(()) => {
            // A kernel with BPF LSM: the open is refused.
            let err = std::fs::File::open(&tmp).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EPERM));
            guard.allow(&tmp).unwrap();
            std::fs::File::open(&tmp).unwrap();
        }
        Err(e) => {
            eprintln!(
                "BPF LSM refused (expected on this kernel): {e} (errno {:?})",
                e.raw_os_error()
            );
            assert!(!guard.enforced());
            assert!(e.raw_os_error().is_some(), "refusal without an errno: {e}");
        }
    }
    std::fs::remove_file(&tmp).unwrap();
}

/// Installs a seccomp filter refusing system call `nr` with EPERM (any other passes).
/// Async-signal-safe: the program is on the stack.
fn refuse_syscall(nr: u32) -> std::io::Result<()> {
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments; `prog` points to `filter`, alive for the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[test]
fn monitor_reports_refused_and_seccomp_refused_calls() {
    require_root!();
    let _one = one_monitor_at_a_time();
    let mut monitor = Monitor::start(Coverage::Syscalls).expect("start monitor");
    monitor.attach().expect("attach monitor");
    let cg = TestCgroup::new("refusals");
    monitor.watch(cg.id(), "agent-test").unwrap();

    // A file only root may read, opened by a relative path as nobody: EACCES from the mode bits.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(dir.path().join("secret"), "x").unwrap();
    std::fs::set_permissions(
        dir.path().join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let procs = cg.procs.clone();
    let mut cat = Command::new("/bin/cat");
    cat.arg("secret")
        .current_dir(dir.path())
        .stderr(std::process::Stdio::null());
    // SAFETY: async-signal-safe calls only.
    unsafe {
        cat.pre_exec(move || {
            enter_cgroup(&procs)?;
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cat.spawn().unwrap();
    let cat_pid = child.id();
    assert!(!child.wait().unwrap().success());

    // getppid refused by a seccomp filter: the call never enters.
    let procs = cg.procs.clone();
    let mut py = Command::new("/usr/bin/python3");
    py.args([
        "-c",
        "import os\ntry:\n os.getppid()\nexcept OSError:\n pass",
    ]);
    // SAFETY: async-signal-safe calls only.
    unsafe {
        py.pre_exec(move || {
            enter_cgroup(&procs)?;
            refuse_syscall(libc::SYS_getppid as u32)
        });
    }
    let mut child = py.spawn().unwrap();
    let py_pid = child.id();
    assert!(child.wait().unwrap().success());

    let md = std::fs::metadata(dir.path()).unwrap();
    let kdev = clawfs_ebpf::kernel_dev(std::os::unix::fs::MetadataExt::dev(&md));
    let dir_ino = std::os::unix::fs::MetadataExt::ino(&md);
    let refused = |e: &clawfs_ebpf::Event| {
        e.pid == cat_pid
            && matches!(&e.kind, EventKind::Refused(r)
                if r.errno == libc::EACCES
                    && r.nr == libc::SYS_openat as i32
                    && r.object == clawfs_ebpf::RefusedObject::Path {
                        path: "secret".into(),
                        dirfd: -100,
                        base: Some((kdev, dir_ino)),
                    }
                    && r.span_ns.0 <= r.span_ns.1)
    };
    let seccomp = |e: &clawfs_ebpf::Event| {
        e.pid == py_pid
            && e.kind
                == EventKind::Seccomp {
                    nr: libc::SYS_getppid as i32,
                    errno: libc::EPERM,
                }
    };
    let events = monitor
        .collect_until(Duration::from_secs(5), |evs| {
            evs.iter().any(refused) && evs.iter().any(seccomp)
        })
        .unwrap();
    let shown: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Refused(_) | EventKind::Seccomp { .. }))
        .collect();
    assert!(events.iter().any(refused), "no refused openat: {shown:#?}");
    assert!(events.iter().any(seccomp), "no seccomp refusal: {shown:#?}");
    // Failed lookups (python's many ENOENT) are not refusals.
    assert!(
        shown.iter().all(|e| match &e.kind {
            EventKind::Refused(r) => r.errno == libc::EACCES || r.errno == libc::EPERM,
            _ => true,
        }),
        "{shown:#?}"
    );
}
