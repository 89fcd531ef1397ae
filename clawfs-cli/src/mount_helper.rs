//! `mount.fuse.clawfs`: the helper mount(8) runs for a `fuse.clawfs` line of `/etc/fstab`,
//!
//! ```text
//! /var/lib/clawfs  /clawfs  fuse.clawfs  defaults,threads=8  0 0
//! ```
//!
//! as `mount.fuse.clawfs SOURCE MOUNTPOINT [-o OPTIONS] [-n] [-s] [-v]`. The same binary as
//! `clawfs`, installed (or linked) under that name: it becomes `clawfs mount MOUNTPOINT --store
//! SOURCE` with the options mapped to flags (`threads=N`, `busy_poll=MICROSECONDS`,
//! `max_open_per_caller=N`,
//! `attr_timeout=SECONDS`, `no_passthrough`, `no_audit`, `trace_syscalls`). mount(8)'s own options (`defaults`, `rw`, `auto`, `nofail`,
//! `_netdev`, `x-systemd.*`…) are ignored; an unknown option is an error unless `-s` (sloppy).
//! SOURCE `clawfs` or `none` names the default store.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use clawfs_args::Cli;

/// Whether `argv0` names the mount helper.
pub fn is_helper(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "mount.fuse.clawfs" || n == "mount.clawfs")
}

/// mount(8) options that are not ClawFS's to act on.
fn generic(option: &str) -> bool {
    const GENERIC: [&str; 21] = [
        "defaults",
        "rw",
        "auto",
        "noauto",
        "nofail",
        "_netdev",
        "user",
        "users",
        "nouser",
        "owner",
        "group",
        "exec",
        "suid",
        "nosuid",
        "dev",
        "nodev",
        "async",
        "sync",
        "atime",
        "relatime",
        "allow_other",
    ];
    GENERIC.contains(&option)
        || option.starts_with("x-")
        || option.starts_with("comment=")
        || option.starts_with("helper=")
}

/// Why `strictatime` is refused.
pub const STRICTATIME: &str = "strictatime is not supported: reads go to the store's files, whose filesystem updates access times by its own rule (relatime unless it is mounted otherwise); noatime and nodiratime are";

/// The `clawfs mount` arguments for a helper command line (without argv0).
pub fn mount_args(args: &[OsString]) -> Result<Vec<OsString>, String> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut sloppy = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => options.push(
                it.next()
                    .and_then(|o| o.to_str())
                    .ok_or("-o needs an option list")?
                    .to_string(),
            ),
            Some(o) if o.starts_with("-o") => options.push(o[2..].to_string()),
            Some("-s") => sloppy = true,
            Some("-n" | "-v" | "-f") => {}
            Some(o) if o.starts_with('-') => return Err(format!("unknown flag {o}")),
            _ => positional.push(a.clone()),
        }
    }
    let [source, mountpoint] = <[OsString; 2]>::try_from(positional)
        .map_err(|_| "usage: mount.fuse.clawfs SOURCE MOUNTPOINT [-o OPTIONS]".to_string())?;
    let mut out: Vec<OsString> = vec!["clawfs".into(), "mount".into(), mountpoint];
    if source != "clawfs" && source != "none" {
        out.extend(["--store".into(), source]);
    }
    for option in options
        .iter()
        .flat_map(|o| o.split(','))
        .filter(|o| !o.is_empty())
    {
        let (key, value) = match option.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (option, None),
        };
        match (key, value) {
            ("threads", Some(v)) => out.extend(["--threads".into(), v.into()]),
            ("busy_poll", Some(v)) => out.extend(["--busy-poll".into(), v.into()]),
            ("max_open_per_caller", Some(v)) => {
                out.extend(["--max-open-per-caller".into(), v.into()])
            }
            ("attr_timeout", Some(v)) => out.extend(["--attr-timeout".into(), v.into()]),
            ("metrics", Some(v)) => out.extend(["--metrics".into(), v.into()]),
            ("no_passthrough", None) => out.push("--no-passthrough".into()),
            ("no_io_uring", None) => out.push("--no-io-uring".into()),
            ("no_audit", None) => out.push("--no-audit".into()),
            ("trace_syscalls", None) => out.push("--trace-syscalls".into()),
            ("noatime" | "nodiratime", None) => out.extend(["--atime".into(), key.into()]),
            ("strictatime", None) => return Err(STRICTATIME.into()),
            ("ro", None) => return Err("read-only ClawFS mounts are not supported".into()),
            _ if generic(option) => {}
            _ if sloppy => {}
            _ => return Err(format!("unknown option {option:?}")),
        }
    }
    Ok(out)
}

/// Where programs are looked for when `clawfs` is started with no `PATH` (mount(8) runs its
/// helpers so, and so may a service manager): the daemon mounts through `fusermount3`, without
/// which the mount would lack its `fuse.clawfs` type and its unmount on the daemon's death.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Sets `PATH` to [`DEFAULT_PATH`] when it is unset or empty. Call first thing in `main`,
/// while the process has one thread.
pub fn default_path() {
    if std::env::var_os("PATH").is_none_or(|p| p.is_empty()) {
        // Single-threaded still: nothing else reads the environment concurrently.
        std::env::set_var("PATH", DEFAULT_PATH);
    }
}

/// Runs the helper: `clawfs mount` in-process (it returns once the daemon serves the mount).
pub fn main(args: &[OsString]) -> ExitCode {
    let argv = match mount_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mount.fuse.clawfs: {e}");
            return ExitCode::from(1);
        }
    };
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mount.fuse.clawfs: {e}");
            return ExitCode::from(1);
        }
    };
    crate::logging::init();
    crate::run(cli)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Vec<String>, String> {
        let v: Vec<OsString> = s.split_whitespace().map(OsString::from).collect();
        mount_args(&v).map(|a| a.into_iter().map(|s| s.into_string().unwrap()).collect())
    }

    #[test]
    fn fstab_options_become_mount_flags() {
        assert_eq!(
            args("/var/lib/clawfs /clawfs -o rw,defaults,threads=8,no_passthrough,x-systemd.automount").unwrap(),
            ["clawfs", "mount", "/clawfs", "--store", "/var/lib/clawfs", "--threads", "8", "--no-passthrough"]
        );
        assert_eq!(args("clawfs /m").unwrap(), ["clawfs", "mount", "/m"]);
        assert_eq!(
            args("clawfs /m -o busy_poll=0").unwrap(),
            ["clawfs", "mount", "/m", "--busy-poll", "0"]
        );
        assert_eq!(
            args("none /m -onoatime -n").unwrap(),
            ["clawfs", "mount", "/m", "--atime", "noatime"]
        );
        assert_eq!(
            args("none /m -o relatime,nodiratime").unwrap(),
            ["clawfs", "mount", "/m", "--atime", "nodiratime"]
        );
        assert!(args("none /m -o strictatime")
            .unwrap_err()
            .contains("relatime"));
    }

    #[test]
    fn unknown_options_and_bad_lines_are_refused() {
        assert!(args("/s /m -o frobnicate")
            .unwrap_err()
            .contains("frobnicate"));
        assert!(args("/s /m -s -o frobnicate").is_ok());
        assert!(args("/s /m -o ro").unwrap_err().contains("read-only"));
        assert!(args("/s").is_err());
        assert!(args("/s /m /x").is_err());
        assert!(args("/s /m -o").is_err());
        assert!(args("/s /m -z").is_err());
    }

    #[test]
    fn helper_names() {
        assert!(is_helper("/sbin/mount.fuse.clawfs".as_ref()));
        assert!(!is_helper("/usr/local/bin/clawfs".as_ref()));
    }
}
