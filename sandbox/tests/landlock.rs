//! `clawfs_sandbox::landlock` against the real kernel: every check runs a child process (`Command` +
//! `pre_exec`) under the sandbox; the test process itself is never restricted. Run as root, so that
//! a refusal comes from Landlock and not from the mode bits. Temp dirs and listeners are RAII
//! values, removed or closed when a test ends, failed or not; every child is waited for.
//!
//! A counting global allocator checks, in every child, that `Prepared::restrict_self` allocates
//! nothing between fork and exec.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use clawfs_sandbox::landlock::{
    abi, Availability, Compat, Enforcement, Error, Prepared, ProcAccess, Ruleset, Sandbox, FULL_ABI,
};
use tempfile::TempDir;

/// Counts allocations and frees (process-wide; after fork, the child's copy is its own).
struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Removes a path when dropped (for things a failing sandbox might have let a child create).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A directory the sandbox may write, and the default agent sandbox around it.
struct Setup {
    allowed: TempDir,
    prepared: Arc<Prepared>,
}

fn setup(tweak: impl FnOnce(&mut Sandbox)) -> Setup {
    let allowed = tempfile::Builder::new()
        .prefix("clawfs-ll-allowed-")
        .tempdir()
        .unwrap();
    let mut sandbox = Sandbox::agent_defaults();
    sandbox.read_write.push(allowed.path().to_path_buf());
    tweak(&mut sandbox);
    let prepared = Ruleset::build(&sandbox).expect("build the sandbox");
    assert_eq!(
        prepared.expected(),
        Enforcement::Full,
        "{:?}",
        prepared.report()
    );
    Setup {
        allowed,
        prepared: Arc::new(prepared),
    }
}

/// A directory outside the sandbox, with a world-readable file in it.
fn outside() -> (TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("clawfs-ll-outside-")
        .tempdir()
        .unwrap();
    let file = dir.path().join("public.txt");
    std::fs::write(&file, "public\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, file)
}

impl Setup {
    fn dir(&self) -> &Path {
        self.allowed.path()
    }

    /// Runs `argv` under the sandbox, HOME in the allowed dir, a minimal environment.
    fn run(&self, argv: &[&str]) -> Output {
        let prepared = Arc::clone(&self.prepared);
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.dir())
            .env("LANG", "C")
            .current_dir(self.dir())
            .stdin(Stdio::null());
        let pre_exec = move || -> io::Result<()> {
            let before = ALLOCS.load(Ordering::Relaxed);
            let status = prepared.restrict_self()?;
            if ALLOCS.load(Ordering::Relaxed) != before {
                return Err(io::Error::from_raw_os_error(libc::EPROTO));
            }
            if status.enforcement != Enforcement::Full || !status.no_new_privs {
                return Err(io::Error::from_raw_os_error(libc::ENOTSUP));
            }
            Ok(())
        };
        // SAFETY: restrict_self makes only system calls on data prepared before fork, and does not
        // allocate; the closure builds no error that allocates.
        unsafe { cmd.pre_exec(pre_exec) };
        cmd.output().expect("spawn the sandboxed child")
    }

    fn sh(&self, script: &str) -> Output {
        self.run(&["/bin/sh", "-c", script])
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[track_caller]
fn assert_ok(out: &Output) -> String {
    assert!(out.status.success(), "expected success\n{}", show(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Failed, and with EACCES (what Landlock answers), not some other error.
#[track_caller]
fn assert_denied(out: &Output) {
    assert!(!out.status.success(), "expected a refusal\n{}", show(out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "expected EACCES\n{}",
        show(out)
    );
}

#[test]
fn abi_is_reported_and_the_default_sandbox_is_fully_enforced() {
    let availability = abi();
    let Availability::Available { abi, .. } = availability else {
        panic!("Landlock must be available on this host: {availability}");
    };
    assert!(abi >= FULL_ABI, "kernel ABI {abi} < {FULL_ABI}");
    // The counting allocator is in place (the children's no-allocation check relies on it).
    let before = ALLOCS.load(Ordering::Relaxed);
    drop(std::hint::black_box(Box::new(1u64)));
    assert!(ALLOCS.load(Ordering::Relaxed) >= before + 2);
    let s = setup(|_| {});
    let report = s.prepared.report();
    assert!(report.unenforced.is_empty(), "{report:?}");
    assert!(report
        .granted
        .iter()
        .any(|(p, _)| p == Path::new("/etc/passwd")));
    assert!(!report
        .granted
        .iter()
        .any(|(p, _)| p.starts_with("/etc/shadow") || p == Path::new("/etc")));
}

#[test]
fn shell_runs_and_reads_passwd_and_devices() {
    let s = setup(|_| {});
    let out = assert_ok(
        &s.sh("echo hello; cat /etc/passwd; echo x >/dev/null; head -c 8 /dev/urandom | wc -c"),
    );
    assert!(out.starts_with("hello\n"), "{out}");
    assert!(out.contains("root:x:0:0"), "{out}");
    assert!(out.trim_end().ends_with('8'), "{out}");
    // One Prepared serves several children.
    assert_ok(&s.sh("cat /etc/group >/dev/null"));
}

#[test]
fn shadow_and_etc_listing_are_denied() {
    let s = setup(|_| {});
    assert_denied(&s.sh("cat /etc/shadow"));
    assert_denied(&s.sh("cat /etc/gshadow"));
    assert_denied(&s.sh("ls /etc"));
}

#[test]
fn world_readable_file_outside_is_denied() {
    let s = setup(|_| {});
    let (_other, file) = outside();
    assert!(std::fs::read(&file).is_ok(), "the parent can read it");
    assert_denied(&s.sh(&format!("cat {}", file.display())));
    assert_denied(&s.sh("ls /tmp"));
}

#[test]
fn writing_in_the_allowed_dir_works() {
    let s = setup(|_| {});
    let out = assert_ok(&s.sh(
        "set -e; echo data > f; cat f; mkdir d; mv f d/g; ln -s g d/link; \
         printf 'x' >> d/g; cat d/link; : > d/g; rm -r d; echo done > kept",
    ));
    assert_eq!(out, "data\ndata\nx", "{out}");
    assert_eq!(
        std::fs::read_to_string(s.dir().join("kept")).unwrap(),
        "done\n"
    );
}

#[test]
fn writing_outside_is_denied() {
    let s = setup(|_| {});
    let (other, file) = outside();
    let target = other.path().join("new.txt");
    assert_denied(&s.sh(&format!("echo x > {}", target.display())));
    assert!(!target.exists());
    assert_denied(&s.sh(&format!("echo x >> {}", file.display())));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "public\n");
    assert_denied(&s.sh(&format!("rm {}", file.display())));
    assert!(file.exists());
    let in_tmp = RemoveOnDrop(format!("/tmp/clawfs-ll-escape-{}", std::process::id()).into());
    assert_denied(&s.sh(&format!("mkdir {}", in_tmp.0.display())));
    assert!(!in_tmp.0.exists());
}

#[test]
fn root_home_is_denied() {
    let s = setup(|_| {});
    assert_denied(&s.sh("ls /root"));
}

/// Python's `connect_ex` prints the errno of each connect: 0 or 13 (EACCES).
const CONNECT: &str = r#"
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket()
    s.settimeout(5)
    print(s.connect_ex(("127.0.0.1", int(p))))
    s.close()
"#;

fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

#[test]
fn tcp_connect_only_to_the_allowed_port() {
    let (_a, pa) = listener();
    let (_b, pb) = listener();
    let s = setup(|sb| sb.tcp_connect = Some(vec![pa]));
    let out = assert_ok(&s.run(&[
        "/usr/bin/python3",
        "-c",
        CONNECT,
        &pa.to_string(),
        &pb.to_string(),
    ]));
    assert_eq!(out, "0\n13\n");
}

#[test]
fn tcp_connect_none_allowed() {
    let (_a, pa) = listener();
    let s = setup(|sb| sb.tcp_connect = Some(vec![]));
    let out = assert_ok(&s.run(&["/usr/bin/python3", "-c", CONNECT, &pa.to_string()]));
    assert_eq!(out, "13\n");
}

#[test]
fn tcp_unrestricted_by_default_and_bind_restricted_on_request() {
    let (_a, pa) = listener();
    let bind = r#"
import socket
s = socket.socket()
try:
    s.bind(("127.0.0.1", 0))
    print(0)
except OSError as e:
    print(e.errno)
"#;
    let open = setup(|_| {});
    assert_eq!(
        assert_ok(&open.run(&["/usr/bin/python3", "-c", CONNECT, &pa.to_string()])),
        "0\n"
    );
    assert_eq!(
        assert_ok(&open.run(&["/usr/bin/python3", "-c", bind])),
        "0\n"
    );
    let closed = setup(|sb| sb.tcp_bind = Some(vec![]));
    assert_eq!(
        assert_ok(&closed.run(&["/usr/bin/python3", "-c", bind])),
        "13\n"
    );
}

#[test]
fn python_and_git_run() {
    let s = setup(|_| {});
    assert_eq!(
        assert_ok(&s.run(&["/usr/bin/python3", "-c", "print(1)"])),
        "1\n"
    );
    // Subprocesses, TLS trust store, temp files in the allowed dir.
    assert_eq!(
        assert_ok(&s.run(&[
            "/usr/bin/python3",
            "-c",
            "import os, ssl, subprocess, tempfile\n\
             ctx = ssl.create_default_context()\n\
             assert ctx.cert_store_stats()['x509_ca'] > 0\n\
             subprocess.run(['true'], check=True)\n\
             tempfile.NamedTemporaryFile(dir='.').close()\n\
             print(os.cpu_count() > 0)",
        ])),
        "True\n"
    );
    let out = assert_ok(&s.sh("git --version"));
    assert!(out.starts_with("git version "), "{out}");
    assert_ok(
        &s.sh("set -e; git init -q repo; cd repo; echo a > a; git add a; \
         git -c user.name=t -c user.email=t@e commit -qm one; git log --oneline | wc -l"),
    );
}

/// An unsandboxed root process started by the test (killed and reaped when dropped).
struct Neighbour(std::process::Child);

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn neighbour() -> Neighbour {
    let n = Neighbour(
        Command::new("/bin/sleep")
            .arg("60")
            .env("CLAWFS_LL_SECRET", "s3cret")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Control: the test process (root, unsandboxed) reads its environ (once exec has happened).
    let path = format!("/proc/{}/environ", n.0.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !String::from_utf8_lossy(&std::fs::read(&path).unwrap()).contains("s3cret") {
        assert!(std::time::Instant::now() < deadline, "no s3cret in {path}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    n
}

#[test]
fn other_processes_proc_entries_are_denied() {
    let neighbour = neighbour();
    let pid = neighbour.0.id();
    let s = setup(|_| {});
    let me = std::process::id();
    for target in [pid, me, 1] {
        for entry in ["environ", "maps", "status", "cmdline"] {
            assert_denied(&s.sh(&format!("cat /proc/{target}/{entry}")));
        }
        assert_denied(&s.sh(&format!("ls /proc/{target}/fd")));
        assert_denied(&s.sh(&format!("cat /proc/{target}/root/etc/passwd")));
    }
    assert_denied(&s.sh("ls /proc"));
    // The default has no per-process entry at all, its own included ...
    assert_denied(&s.sh("cat /proc/self/status"));
    // ... but system figures, and what only passes through /proc to an open file, work.
    let out = assert_ok(&s.sh(
        "cat /proc/meminfo /proc/cpuinfo /proc/sys/vm/overcommit_memory >/dev/null; \
         nproc >/dev/null; readlink /proc/self/exe >/dev/null; echo via-dev-stdout >/dev/stdout",
    ));
    assert_eq!(out, "via-dev-stdout\n");
}

#[test]
fn proc_all_gives_own_entries_and_ptrace_scoping_still_holds() {
    let neighbour = neighbour();
    let pid = neighbour.0.id();
    let s = setup(|sb| sb.proc = ProcAccess::All);
    // Its own entries, and those of the processes it starts, are readable.
    let out = assert_ok(&s.sh(
        "cat /proc/self/status >/dev/null; cat /proc/$$/environ >/dev/null; \
         ls /proc/self/fd >/dev/null; sh -c 'cat /proc/$PPID/maps' >/dev/null; ls /proc >/dev/null; \
         echo ok",
    ));
    assert_eq!(out, "ok\n");
    // Ptrace-scoped entries of a process outside the sandbox stay closed, even as root. (Its
    // environ and maps do not, on this kernel: see the module documentation.)
    assert_denied(&s.sh(&format!("head -c1 /proc/{pid}/mem")));
    let out = s.sh(&format!("cat /proc/{pid}/syscall"));
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "expected EPERM\n{}",
        show(&out)
    );
    assert_denied(&s.sh(&format!("ls /proc/{pid}/cwd/")));
    assert_denied(&s.sh(&format!("cat /proc/{pid}/root/etc/passwd")));
    assert_denied(&s.sh(&format!("readlink /proc/{pid}/exe || cat /proc/{pid}/exe")));
    assert_denied(&s.sh(&format!("cat /proc/{pid}/fd/0")));
    let environ = s.sh(&format!("cat /proc/{pid}/environ"));
    eprintln!(
        "ProcAccess::All: another root process's environ is {} (see the module documentation)",
        if environ.status.success() {
            "readable"
        } else {
            "closed"
        }
    );
}

#[test]
fn proc_none_closes_proc() {
    let s = setup(|sb| sb.proc = ProcAccess::None);
    assert_denied(&s.sh("cat /proc/meminfo"));
    assert_denied(&s.sh("cat /proc/self/status"));
    assert_denied(&s.sh("cat /proc/1/environ"));
}

#[test]
fn a_proc_self_grant_is_refused() {
    // Resolved in the builder, it would name the builder's /proc/<pid>, not the child's.
    for path in ["/proc/self", "/proc/thread-self/", "/proc/1/environ"] {
        let mut sb = Sandbox::agent_defaults();
        sb.read.push(path.into());
        match Ruleset::build(&sb) {
            Err(Error::ProcPid { .. }) => {}
            other => panic!("{path}: {other:?}"),
        }
    }
}

#[test]
fn signals_are_scoped_to_the_sandbox() {
    let s = setup(|_| {});
    let me = std::process::id();
    let out = s.sh(&format!("kill -0 {me}"));
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not permitted"),
        "expected EPERM\n{}",
        show(&out)
    );
    assert_ok(&s.sh("sleep 10 & pid=$!; kill $pid; wait $pid; test $? -ne 0"));
}

#[test]
fn build_refuses_grants_that_cover_denied_paths() {
    for broad in ["/etc", "/", "/etc/../etc/ssl"] {
        let mut sb = Sandbox::agent_defaults();
        sb.read.push(broad.into());
        match Ruleset::build(&sb) {
            Err(Error::CoversDenied { .. }) => {}
            other => panic!("{broad}: {other:?}"),
        }
    }
    // A store beneath an agent's read-write grant.
    let dir = TempDir::new().unwrap();
    std::fs::create_dir(dir.path().join("store")).unwrap();
    let mut sb = Sandbox::agent_defaults();
    sb.read_write.push(dir.path().to_path_buf());
    sb.deny.push(dir.path().join("store"));
    assert!(matches!(
        Ruleset::build(&sb),
        Err(Error::CoversDenied { .. })
    ));
}

#[test]
fn missing_paths_are_skipped_or_refused() {
    let dir = TempDir::new().unwrap();
    let mut sb = Sandbox::agent_defaults();
    sb.read_write.push(dir.path().to_path_buf());
    sb.read.push("/nonexistent-clawfs-ll".into());
    sb.read.push("/nonexistent-clawfs-ll-dir/x*".into());
    let prepared = Ruleset::build(&sb).unwrap();
    let skipped = prepared.skipped();
    assert!(
        skipped.contains(&PathBuf::from("/nonexistent-clawfs-ll")),
        "{skipped:?}"
    );
    assert!(
        skipped.contains(&PathBuf::from("/nonexistent-clawfs-ll-dir/x*")),
        "{skipped:?}"
    );
    // Patterns expand: /etc/python3* (if any python is installed, /etc/python3 exists here).
    assert!(prepared
        .report()
        .granted
        .iter()
        .any(|(p, _)| p.starts_with("/etc/python3")));

    sb.read_write.push(dir.path().join("missing"));
    assert!(matches!(Ruleset::build(&sb), Err(Error::Missing(_))));
    let mut bad = Sandbox::empty();
    bad.read.push("relative/path".into());
    assert!(matches!(Ruleset::build(&bad), Err(Error::Relative(_))));
    let mut bad = Sandbox::empty();
    bad.read.push("/etc/*/x".into());
    assert!(matches!(Ruleset::build(&bad), Err(Error::Pattern(_))));
}

#[test]
fn abstract_unix_sockets_outside_are_scoped() {
    let name = format!("clawfs-ll-{}", std::process::id());
    let _listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let connect = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\n\
         try:\n    s.connect('\\0{name}'); print(0)\n\
         except OSError as e:\n    print(e.errno)\n"
    );
    let scoped = setup(|_| {});
    assert_eq!(
        assert_ok(&scoped.run(&["/usr/bin/python3", "-c", &connect])),
        format!("{}\n", libc::EPERM)
    );
    let open = setup(|sb| sb.scope_abstract_unix = false);
    assert_eq!(
        assert_ok(&open.run(&["/usr/bin/python3", "-c", &connect])),
        "0\n"
    );
}

#[test]
fn compat_modes_and_what_older_kernels_leave_out() {
    let dir = TempDir::new().unwrap();
    for compat in [Compat::Auto, Compat::Require, Compat::BestEffort] {
        let mut sb = Sandbox::agent_defaults();
        sb.read_write.push(dir.path().to_path_buf());
        sb.tcp_connect = Some(vec![443]);
        sb.compat = compat;
        let prepared = Ruleset::build(&sb).unwrap();
        assert_eq!(prepared.expected(), Enforcement::Full, "{compat:?}");
    }
    let mut sb = Sandbox::agent_defaults();
    sb.tcp_connect = Some(vec![]);
    assert_eq!(sb.needed_abi(), FULL_ABI);
    assert!(sb.unenforced_on(FULL_ABI).is_empty());
    let on_v3 = sb.unenforced_on(3);
    for missing in ["TCP connect", "ioctl", "signal scoping", "abstract UNIX"] {
        assert!(on_v3.iter().any(|m| m.contains(missing)), "{on_v3:?}");
    }
    assert!(sb.unenforced_on(0)[0].contains("not available"));
    sb.scope_signals = false;
    sb.scope_abstract_unix = false;
    assert_eq!(sb.needed_abi(), 5);
}
