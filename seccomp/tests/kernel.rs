//! Filters loaded for real: `Command` + `pre_exec(Filter::load)`, then a C probe (tests/probe.c)
//! or everyday tools run in the filtered child. Needs a kernel with seccomp filters, cc, and for
//! the tools test sh, python3, git, make. The control runs (probe without a filter) assume root.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use clawfs_seccomp::Filter;
use common::*;

const REFUSED: &[&str] = &[
    "ptrace",
    "mount",
    "umount2",
    "pivot_root",
    "fsopen",
    "open_tree",
    "move_mount",
    "unshare_user",
    "unshare_net",
    "setns",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "perf_event_open",
    "userfaultfd",
    "process_vm_readv",
    "finit_module",
    "delete_module",
    "clone_newnet",
    "clone_newuser",
    "clone_newns",
    "socket_packet",
    "tiocsti",
    "tiocsti_hi",
    "personality_32",
    "chroot",
];

#[test]
fn refused_syscalls_fail_with_eperm() {
    require_seccomp();
    let filtered = run_probe(Some(&default_filter()), REFUSED);
    for c in REFUSED {
        assert_eq!(
            filtered[*c],
            Outcome::Errno(libc::EPERM),
            "{c} under the filter"
        );
    }
    // The control: without the filter, none of them fails with EPERM (as root), so the EPERM
    // above is the filter's.
    if is_root() {
        let control = run_probe(None, REFUSED);
        for c in REFUSED {
            assert_ne!(
                control[*c],
                Outcome::Errno(libc::EPERM),
                "{c} without the filter"
            );
        }
    } else {
        eprintln!("not root: control run skipped");
    }
}

#[test]
fn clone3_fails_with_enosys_so_glibc_falls_back_to_clone() {
    require_seccomp();
    let got = run_probe(
        Some(&default_filter()),
        &["clone3", "thread", "fork", "clone_plain"],
    );
    assert_eq!(got["clone3"], Outcome::Errno(libc::ENOSYS));
    // pthread_create (glibc >= 2.34 tries clone3 first) and fork still work.
    assert_eq!(got["thread"], Outcome::Ok);
    assert_eq!(got["fork"], Outcome::Ok);
    assert_eq!(got["clone_plain"], Outcome::Ok);
}

#[test]
fn argument_rules_allow_what_they_should() {
    require_seccomp();
    let got = run_probe(
        Some(&default_filter()),
        &[
            "socket_unix",
            "socket_inet",
            "socket_inet6",
            "socket_netlink",
            "socket_inet_hi",
            "tcgets",
            "fionread",
            "personality_query",
            "personality_linux",
            "getpid",
        ],
    );
    for ok in [
        "socket_unix",
        "socket_inet",
        "socket_inet6",
        "socket_netlink",
        // the kernel reads socket's family as an int: AF_INET with junk above bit 31 is AF_INET
        "socket_inet_hi",
        "fionread",
        "personality_query",
        "personality_linux",
        "getpid",
    ] {
        assert_eq!(got[ok], Outcome::Ok, "{ok}");
    }
    // Other ioctls reach the kernel (a pipe is not a terminal).
    assert_eq!(got["tcgets"], Outcome::Errno(libc::ENOTTY));
}

#[test]
fn calls_from_a_foreign_abi_kill() {
    require_seccomp();
    // x32 syscall numbers (bit 30) are another ABI on the same architecture: the filter kills.
    let got = run_probe(Some(&default_filter()), &["x32_getpid", "getpid"]);
    assert_eq!(got["x32_getpid"], Outcome::Signal(SIGSYS));
    assert_eq!(got["getpid"], Outcome::Ok);
}

#[test]
fn kill_action_kills_with_sigsys() {
    require_seccomp();
    // default_action kill: an unlisted syscall kills the process.
    let kill_all = compile(&variant(|v| v["default_action"] = "kill".into()));
    let out = run(
        Some(&kill_all),
        Command::new(probe()).args(["--nofork", "getpid", "chroot", "getpid"]),
    );
    assert_eq!(out.status.signal(), Some(SIGSYS), "{:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "getpid 0 0\n");
    // ... and so do the always-denied ones and refused clone flags.
    let got = run_probe(
        Some(&kill_all),
        &["ptrace", "clone_newuser", "clone3", "getpid"],
    );
    assert_eq!(got["ptrace"], Outcome::Signal(SIGSYS));
    assert_eq!(got["clone_newuser"], Outcome::Signal(SIGSYS));
    assert_eq!(got["clone3"], Outcome::Errno(libc::ENOSYS));
    assert_eq!(got["getpid"], Outcome::Ok);

    // Per entry: a "deny" action and a rule's action; the rest keeps EPERM.
    let mixed = compile(&variant(|v| {
        v["deny"] = serde_json::json!({"ptrace": "kill", "chroot": "errno:EACCES"});
        v["rules"]["socket"]["action"] = "kill".into();
        v["rules"]["ioctl"]["action"] = "kill".into();
    }));
    let got = run_probe(
        Some(&mixed),
        &[
            "ptrace",
            "chroot",
            "socket_packet",
            "socket_inet",
            "tiocsti_hi",
            "tcgets",
            "mount",
            "clone_newnet",
        ],
    );
    assert_eq!(got["ptrace"], Outcome::Signal(SIGSYS));
    assert_eq!(got["chroot"], Outcome::Errno(libc::EACCES));
    assert_eq!(got["socket_packet"], Outcome::Signal(SIGSYS));
    assert_eq!(got["socket_inet"], Outcome::Ok);
    assert_eq!(got["tiocsti_hi"], Outcome::Signal(SIGSYS));
    assert_eq!(got["tcgets"], Outcome::Errno(libc::ENOTTY));
    assert_eq!(got["mount"], Outcome::Errno(libc::EPERM));
    assert_eq!(got["clone_newnet"], Outcome::Errno(libc::EPERM));
}

#[test]
fn log_mode_allows_unlisted_calls_but_still_refuses_the_always_denied() {
    require_seccomp();
    let audit = compile(&variant(|v| v["default_action"] = "log".into()));
    let got = run_probe(
        Some(&audit),
        &[
            "chroot",
            "socket_packet",
            "ptrace",
            "clone_newnet",
            "clone3",
            "getpid",
        ],
    );
    // chroot is not listed: allowed (and logged), so the kernel answers ENOENT.
    assert_eq!(got["chroot"], Outcome::Errno(libc::ENOENT));
    assert_eq!(got["socket_packet"], Outcome::Ok);
    assert_eq!(got["ptrace"], Outcome::Errno(libc::EPERM));
    assert_eq!(got["clone_newnet"], Outcome::Errno(libc::EPERM));
    assert_eq!(got["clone3"], Outcome::Errno(libc::ENOSYS));
    assert_eq!(got["getpid"], Outcome::Ok);
}

#[test]
fn the_filter_survives_exec_and_is_inherited() {
    require_seccomp();
    let out = run(
        Some(&default_filter()),
        Command::new("sh").args(["-c", "grep '^Seccomp' /proc/self/status"]),
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Seccomp:\t2"), "{text}");
    let programs = default_filter().programs();
    assert!(
        text.contains(&format!("Seccomp_filters:\t{programs}")),
        "{text}"
    );
}

fn sh(filter: &Arc<Filter>, dir: &Path, script: &str) -> String {
    let out = run(
        Some(filter),
        Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .env("HOME", dir),
    );
    assert!(
        out.status.success(),
        "{script}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn default_whitelist_runs_everyday_tools() {
    require_seccomp();
    let f = default_filter();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // sh, without the sh -c wrapper of the helper.
    let out = run(Some(&f), Command::new("sh").args(["-c", "echo ok"]));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");

    // coreutils
    std::fs::write(d.join("words"), "pear\napple\nfig\n").unwrap();
    assert_eq!(sh(&f, d, "sort words"), "apple\nfig\npear\n");
    assert_eq!(sh(&f, d, "cat words | wc -l"), "3\n");
    assert!(sh(&f, d, "ls -la").contains("words"));
    sh(
        &f,
        d,
        "mkdir -p a/b && cp words a/b/ && mv a/b/words a/w && ln -s a/w l && chmod 600 a/w \
         && cat l >/dev/null && rm -r a l && touch t && stat t >/dev/null && date >/dev/null",
    );

    // python3 (via whatever python3 is on PATH: a pyenv shim is a bash script), threads, a child
    let py = sh(
        &f,
        d,
        "python3 -c 'print(1)' && python3 -c '\nimport threading, subprocess, socket\n\
         t = threading.Thread(target=lambda: None); t.start(); t.join()\n\
         print(subprocess.run([\"echo\", \"sub\"], capture_output=True, text=True).stdout.strip())\n\
         socket.socket(socket.AF_INET).close()\nprint(\"py-ok\")'",
    );
    assert_eq!(py, "1\nsub\npy-ok\n");

    // git
    let log = sh(
        &f,
        d,
        "mkdir repo && cd repo && git init -q && git config user.name agent \
         && git config user.email agent@example.com && echo hi > f && git add f \
         && git commit -qm first && git log --format=%s",
    );
    assert_eq!(log, "first\n");

    // make + cc
    let proj = d.join("proj");
    std::fs::create_dir(&proj).unwrap();
    std::fs::write(
        proj.join("hello.c"),
        "#include <stdio.h>\nint main(void) { printf(\"hello\\n\"); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("Makefile"),
        "hello: hello.o\n\tcc -o hello hello.o\nhello.o: hello.c\n\tcc -O2 -c hello.c\n",
    )
    .unwrap();
    sh(&f, &proj, "make -s");
    assert_eq!(sh(&f, &proj, "./hello"), "hello\n");
}

#[test]
fn a_whitelist_without_seccomp_still_loads_both_programs() {
    require_seccomp();
    // The second program is loaded before the policy, so `seccomp` need not be whitelisted.
    let f = compile(&variant(|v| {
        let list = v["syscalls"].as_array_mut().unwrap();
        list.retain(|s| s != "seccomp");
    }));
    assert_eq!(f.programs(), 2);
    let got = run_probe(Some(&f), &["getpid", "clone3", "thread"]);
    assert_eq!(got["getpid"], Outcome::Ok);
    assert_eq!(got["clone3"], Outcome::Errno(libc::ENOSYS));
    assert_eq!(got["thread"], Outcome::Ok);
}
