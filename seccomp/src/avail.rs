//! Is seccomp usable on this host, and how much of it.

use std::fmt;

/// What this host offers. [`Availability::usable`] says whether filters can be installed; when
/// they cannot, [`Availability::problems`] says why. Display gives a one-line summary.
#[derive(Debug, Clone)]
pub struct Availability {
    /// The `Seccomp:` field of `/proc/self/status`: 0 (no filter on this process), 1 (strict
    /// mode), 2 (this process is already filtered). `None`: the field is missing (a kernel built
    /// without CONFIG_SECCOMP) or the file is unreadable.
    pub kernel_status: Option<u32>,
    /// `Seccomp_filters:` of `/proc/self/status`: how many filters this process already runs under.
    pub filters_in_effect: Option<u32>,
    /// The kernel accepts seccomp filters (CONFIG_SECCOMP_FILTER), probed without installing one.
    pub filter_mode: bool,
    /// `/proc/sys/kernel/seccomp/actions_avail`.
    pub kernel_actions: Vec<String>,
    /// `/proc/sys/kernel/seccomp/actions_logged`: the actions the kernel logs.
    pub actions_logged: Vec<String>,
    /// The version of the system libseccomp (`None` if it could not be asked).
    pub libseccomp_version: Option<String>,
    /// libseccomp's API level for this kernel (`seccomp_api_get`): 1 basic, 2 TSYNC, 3 log action
    /// and SECCOMP_FILTER_FLAG_LOG and kill-process, 4 SSB flag, 5 user notification, 6 TSYNC_ESRCH.
    pub api_level: u32,
    /// Denials can be logged (SECCOMP_FILTER_FLAG_LOG, API level >= 3).
    pub log_flag: bool,
    /// The kernel can kill the whole process (SECCOMP_RET_KILL_PROCESS).
    pub kill_process: bool,
    /// Why filters cannot be used here; empty when they can.
    pub problems: Vec<String>,
}

impl Availability {
    /// Whether a filter can be installed on this host.
    pub fn usable(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lib = self.libseccomp_version.as_deref().unwrap_or("unknown");
        if self.usable() {
            write!(
                f,
                "seccomp available: libseccomp {lib}, API level {}, kernel actions [{}], denials {}logged",
                self.api_level,
                self.kernel_actions.join(" "),
                if self.log_flag { "" } else { "not " }
            )?;
            if self.kernel_status == Some(2) {
                write!(
                    f,
                    " (this process already runs under {} filter(s); new filters stack on them)",
                    self.filters_in_effect.unwrap_or(0)
                )?;
            }
            Ok(())
        } else {
            write!(
                f,
                "seccomp not available on this host: {} (libseccomp {lib}, API level {})",
                self.problems.join("; "),
                self.api_level
            )
        }
    }
}

fn status_field(status: &str, field: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().parse().ok())
}

fn words(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action)`: Ok if the kernel knows the action.
fn action_avail(action: u32) -> Result<(), i32> {
    // SAFETY: the kernel reads one u32 from a valid pointer to a local.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Probes the kernel and the system libseccomp. Cheap; touches no filter.
pub fn available() -> Availability {
    let mut problems = Vec::new();

    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kernel_status = status_field(&status, "Seccomp:");
    let filters_in_effect = status_field(&status, "Seccomp_filters:");
    if kernel_status.is_none() {
        problems.push(if status.is_empty() {
            "/proc/self/status is unreadable (is /proc mounted?)".to_string()
        } else {
            "the kernel has no seccomp support (no \"Seccomp:\" line in /proc/self/status: CONFIG_SECCOMP is off)".to_string()
        });
    }
    if kernel_status == Some(1) {
        problems.push("this process runs in seccomp strict mode".to_string());
    }

    let filter_mode = match action_avail(libc::SECCOMP_RET_ALLOW) {
        Ok(()) => true,
        Err(e) => {
            let why = match e {
                libc::ENOSYS => "the seccomp() system call does not exist (kernel older than 3.17, or refused by an outer filter with ENOSYS)".to_string(),
                libc::EINVAL => "the kernel refuses seccomp filters (CONFIG_SECCOMP_FILTER is off)".to_string(),
                libc::EPERM | libc::EACCES => "seccomp() is refused to this process (an outer sandbox forbids it)".to_string(),
                e => format!("seccomp(SECCOMP_GET_ACTION_AVAIL) failed: {}", std::io::Error::from_raw_os_error(e)),
            };
            problems.push(why);
            false
        }
    };

    let libseccomp_version = libseccomp::ScmpVersion::current()
        .ok()
        .map(|v| v.to_string());
    if libseccomp_version.is_none() {
        problems.push("the system libseccomp did not report its version".to_string());
    }
    let api_level = libseccomp::get_api();
    if api_level < 1 {
        problems
            .push("libseccomp reports API level 0 (it found no usable kernel support)".to_string());
    }

    let kernel_actions = words("/proc/sys/kernel/seccomp/actions_avail");
    let actions_logged = words("/proc/sys/kernel/seccomp/actions_logged");
    let kill_process = action_avail(libc::SECCOMP_RET_KILL_PROCESS).is_ok();

    Availability {
        kernel_status,
        filters_in_effect,
        filter_mode,
        kernel_actions,
        actions_logged,
        libseccomp_version,
        api_level,
        log_flag: api_level >= 3,
        kill_process,
        problems,
    }
}
