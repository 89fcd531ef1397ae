//! Confining a child at its `exec`: `aa_change_onexec(3)` without libapparmor.

use std::ffi::CString;

use crate::render::{profile_name, RenderError};

/// The interface files, newest first (`/proc/self/attr/exec` is shared by all LSMs, and used by
/// kernels before the per-LSM directory, 5.1).
const ATTR_FILES: [&str; 2] = ["/proc/self/attr/apparmor/exec", "/proc/self/attr/exec"];

/// "Change to this profile at the next exec", prepared before `fork` so that [`OnExec::apply`]
/// allocates nothing and can run in `CommandExt::pre_exec`:
///
/// ```ignore
/// let onexec = OnExec::new("alice")?;           // profile clawfs-agent-alice, already loaded
/// unsafe { cmd.pre_exec(move || onexec.apply()) };
/// ```
///
/// Only meaningful where AppArmor is active and the profile loaded ([`crate::load`]); elsewhere
/// `apply` fails (ENOENT or EINVAL) and the caller must not start the agent as if confined.
#[derive(Debug, Clone)]
pub struct OnExec {
    files: [CString; 2],
    command: Vec<u8>,
}

impl OnExec {
    /// For the profile of `agent` (`clawfs-agent-<agent>`).
    pub fn new(agent: &str) -> Result<OnExec, RenderError> {
        let name = profile_name(agent)?;
        Ok(OnExec {
            files: ATTR_FILES.map(|f| CString::new(f).expect("no NUL")),
            command: format!("exec {name}").into_bytes(),
        })
    }

    /// The bytes written: `exec clawfs-agent-<agent>`.
    pub fn command(&self) -> &[u8] {
        &self.command
    }

    /// Writes the command to the first interface file that exists. Async-signal-safe (open, write,
    /// close only). The change takes effect at this process's next `execve`.
    pub fn apply(&self) -> std::io::Result<()> {
        let mut last = std::io::Error::from_raw_os_error(libc::ENOENT);
        for file in &self.files {
            // SAFETY: `file` is a NUL-terminated path that outlives the call.
            let fd = unsafe { libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                last = std::io::Error::last_os_error();
                continue;
            }
            // SAFETY: `command` is a live buffer of `len` bytes; `fd` is ours.
            let n = unsafe { libc::write(fd, self.command.as_ptr().cast(), self.command.len()) };
            let err = std::io::Error::last_os_error();
            // SAFETY: `fd` was opened above and is closed once.
            unsafe { libc::close(fd) };
            return match n {
                n if n < 0 => Err(err),
                n if n as usize != self.command.len() => {
                    Err(std::io::Error::from_raw_os_error(libc::EIO))
                }
                _ => Ok(()),
            };
        }
        Err(last)
    }
}
