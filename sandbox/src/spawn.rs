//! Starting an agent's process inside its cgroup from its first instruction.
//!
//! `clone3(CLONE_INTO_CGROUP)` creates the child directly in the run's cgroup v2 group. Moving a
//! process afterwards with a `cgroup.procs` write would take the kernel's global threadgroup
//! lock for writing, which waits for an RCU grace period: 5 to 20 ms of every start-up on the
//! hosts measured. (Cgroup v1 groups are joined by the child writing to their `tasks` files,
//! which does not take that lock: see [`crate::cgroup::Group::tasks_file`].) Kernels
//! without `clone3` or `CLONE_INTO_CGROUP` get a `fork` whose child writes `cgroup.procs`.
//!
//! Between clone and exec the child runs only the caller's `in_child` hook, then `execvpe`: all
//! of it async-signal-safe, on data prepared before the clone. A failure of either is sent to the
//! parent as an errno through a close-on-exec pipe, so [`spawn`] returns it as its own error.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// `CLONE_INTO_CGROUP` (Linux 5.7), as clone3 takes it.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// A program, its arguments and its whole environment, as `execvpe` takes them. Built before the
/// clone: the child may not allocate.
pub struct Program {
    path: CString,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{s:?} contains a NUL byte"),
        )
    })
}

impl Program {
    /// `command[0]` is looked up in the `PATH` of this process if it has no `/`, as a shell
    /// would; `env` is the child's entire environment.
    pub fn new(
        command: &[OsString],
        env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> io::Result<Program> {
        let first = command
            .first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
        let path = c_string(first)?;
        let args = command
            .iter()
            .map(|a| c_string(a))
            .collect::<io::Result<Vec<_>>>()?;
        let vars = env
            .into_iter()
            .map(|(k, v)| {
                let mut kv = k;
                kv.push("=");
                kv.push(v);
                c_string(&kv)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let pointers = |strings: &[CString]| {
            strings
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let argv = pointers(&args);
        let envp = pointers(&vars);
        let mut strings = args;
        strings.extend(vars);
        Ok(Program {
            path,
            _strings: strings,
            argv,
            envp,
        })
    }
}

/// Where the child goes: the cgroup v2 directory (for `CLONE_INTO_CGROUP`) and its
/// `cgroup.procs`, opened for writing (for kernels without it).
#[derive(Clone, Copy)]
pub struct Cgroup<'a> {
    /// The group's directory.
    pub dir: BorrowedFd<'a>,
    /// The group's `cgroup.procs`.
    pub procs: BorrowedFd<'a>,
}

/// Starts `program` in `cgroup`, after `in_child` has run in the child. Returns the child's pid
/// once `execvpe` has succeeded, or the error of `in_child` or of `execvpe` (the child is then
/// reaped).
///
/// # Safety
/// `in_child` runs between clone and exec in a copy of a possibly multi-threaded process: it may
/// make only async-signal-safe calls (no allocation, no locks), on data prepared before.
pub unsafe fn spawn(
    program: &Program,
    cgroup: Cgroup<'_>,
    mut in_child: impl FnMut() -> io::Result<()>,
) -> io::Result<libc::pid_t> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors, owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };

    let mut joined_at_clone = true;
    let pid = match clone_into(cgroup.dir) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG)
            ) =>
        {
            joined_at_clone = false;
            // SAFETY: fork has no arguments; the child below keeps to async-signal-safe calls.
            match unsafe { libc::fork() } {
                -1 => return Err(io::Error::last_os_error()),
                pid => pid,
            }
        }
        other => other?,
    };
    if pid == 0 {
        let procs = cgroup.procs.as_raw_fd();
        let errno = child(program, joined_at_clone, procs, &mut in_child);
        let bytes = errno.to_ne_bytes();
        // SAFETY: write and _exit are async-signal-safe; the buffer is on the stack.
        unsafe {
            libc::write(write_end.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        }
    }
    drop(write_end);
    match read_errno(&read_end) {
        Ok(None) => Ok(pid),
        Ok(Some(errno)) => {
            let _ = wait(pid);
            Err(io::Error::from_raw_os_error(errno))
        }
        Err(e) => {
            let _ = wait(pid);
            Err(e)
        }
    }
}

/// clone3 into the cgroup; `Ok(0)` in the child.
fn clone_into(cgroup_dir: BorrowedFd<'_>) -> io::Result<libc::pid_t> {
    // SAFETY: clone_args is plain data; all-zero is its "nothing requested" value.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = libc::SIGCHLD as u64;
    args.cgroup = cgroup_dir.as_raw_fd() as u64;
    // SAFETY: `args` is a valid clone_args of the size passed; without CLONE_VM the child gets a
    // copy of the address space, as with fork, and continues from here with its own stack.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as libc::pid_t)
}

/// The child's part: returns the errno of what failed (it only returns on failure).
fn child(
    program: &Program,
    joined_at_clone: bool,
    procs: RawFd,
    in_child: &mut impl FnMut() -> io::Result<()>,
) -> i32 {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // The child starts with the default disposition of SIGPIPE and no blocked signal, as it would
    // from a shell (the Rust runtime ignores SIGPIPE; handlers are reset by exec anyway).
    // SAFETY: sigset_t is plain data, filled by sigemptyset; signal and sigprocmask are
    // async-signal-safe.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            return errno();
        }
        if libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR {
            return errno();
        }
    }
    // SAFETY: `procs` is open for writing in the parent until spawn returns; static buffer.
    if !joined_at_clone && unsafe { libc::write(procs, b"0".as_ptr().cast(), 1) } != 1 {
        return errno();
    }
    if let Err(e) = in_child() {
        return e.raw_os_error().unwrap_or(libc::EIO);
    }
    // SAFETY: the strings and the NULL-terminated pointer arrays live in `program`, which the
    // parent keeps until spawn returns.
    unsafe {
        libc::execvpe(
            program.path.as_ptr(),
            program.argv.as_ptr(),
            program.envp.as_ptr(),
        )
    };
    errno()
}

/// Reads the child's errno: `None` when the pipe closes empty (exec succeeded).
fn read_errno(pipe: &OwnedFd) -> io::Result<Option<i32>> {
    let mut buf = [0u8; 4];
    loop {
        // SAFETY: reads at most 4 bytes into `buf`.
        let n = unsafe { libc::read(pipe.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return Ok(None),
            4 => return Ok(Some(i32::from_ne_bytes(buf))),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            _ => return Err(io::Error::other("short read of the child's exec status")),
        }
    }
}

/// Reaps `pid` and returns its status.
pub fn wait(pid: libc::pid_t) -> io::Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: writes only `status`.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(ExitStatus::from_raw(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_refuses_nul_bytes_and_empty_commands() {
        assert!(Program::new(&[], []).is_err());
        assert!(Program::new(&["a\0b".into()], []).is_err());
        assert!(Program::new(&["true".into()], [("K\0".into(), "v".into())]).is_err());
        let p = Program::new(&["echo".into(), "x".into()], [("K".into(), "v".into())]).unwrap();
        assert_eq!((p.argv.len(), p.envp.len()), (3, 2));
        assert!(p.argv[2].is_null() && p.envp[1].is_null());
    }
}
