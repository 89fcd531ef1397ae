//! An agent run with `clawfs run` (sandboxed, the default) tries to reach the host around the mount, and to
//! use the kernel interfaces an escape starts with.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::Mounted;
use crate::support::{audit_until, denials, run_agent_with, text};

fn sandboxed(m: &Mounted, script: &str) -> String {
    text(&run_agent_with(m, "fs-engine", &[], &["sh", "-c", script]))
}

#[test]
fn a_sandboxed_agent_reaches_its_part_of_the_mount_and_little_else() {
    let m = Mounted::new();
    let host = m.dir.path().join("host-file");
    fs::write(&host, "host secret\n").unwrap();
    fs::set_permissions(&host, fs::Permissions::from_mode(0o644)).unwrap();
    let mnt = m.mnt.display();
    let out = sandboxed(
        &m,
        &format!(
            "cat /etc/shadow >/dev/null 2>&1 || echo shadow-refused
             cat {host} 2>/dev/null || echo host-refused
             ls {store} >/dev/null 2>&1 || echo store-refused
             cat {mnt}/agents/kernel-engine/identity.json >/dev/null 2>&1 || echo other-agent-refused
             echo mine > {mnt}/agents/fs-engine/mine.txt && echo own-dir-ok
             echo w > {mnt}/workspaces/default/w.txt && echo workspace-ok
             echo t > $TMPDIR/t && echo tmp-ok",
            host = host.display(),
            store = m.store.display(),
        ),
    );
    for expected in [
        "shadow-refused",
        "host-refused",
        "store-refused",
        "other-agent-refused",
        "own-dir-ok",
        "workspace-ok",
        "tmp-ok",
    ] {
        assert!(out.contains(expected), "{expected}: {out}");
    }
    assert!(!out.contains("host secret"), "{out}");
}

#[test]
fn a_sandboxed_agent_cannot_use_escape_system_calls() {
    let m = Mounted::with_args(&["--trace-syscalls"]);
    let probe = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = getattr(libc, name)(*args)
    print(name, "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()])
call("ptrace", 0, 0, 0, 0)
call("unshare", 0x10000000)
call("mount", b"none", b"/tmp", b"tmpfs", 0, None)
call("syscall", 321, 0, 0, 0)          # bpf
call("syscall", 250, 0, 0, 0)          # keyctl
call("syscall", 425, 8, 0)             # io_uring_setup
"#;
    let out = sandboxed(&m, &format!("/usr/bin/python3 -c '{probe}' 2>&1"));
    for name in ["ptrace", "unshare", "mount", "syscall"] {
        assert!(out.contains(&format!("{name} EPERM")), "{name}: {out}");
    }
    assert!(!out.contains(" ok"), "{out}");
    assert_eq!(out.matches("syscall EPERM").count(), 3, "{out}");

    // The errno alone does not say why: each refusal is explained in the agent's denials file
    // and on the audit trail, by name.
    let monitor = clawfs_ebpf::availability().monitor;
    if !monitor.is_available() {
        println!("denials of seccomp refusals not checked: eBPF monitor {monitor}");
        return;
    }
    let names = [
        "ptrace",
        "unshare",
        "mount",
        "bpf",
        "keyctl",
        "io_uring_setup",
    ];
    let seccomp = |r: &serde_json::Value, name: &str| {
        r["operation"] == name && r["rule"] == "SECCOMP" && r["agent"] == "fs-engine"
    };
    let all = audit_until(&m, |all| {
        names
            .iter()
            .all(|n| all.iter().any(|r| seccomp(r, n) && r["errno"] == 1))
    });
    let file = denials(&m, "fs-engine");
    for name in names {
        assert!(
            all.iter()
                .any(|r| seccomp(r, name) && r["result"] == "denied"),
            "no SECCOMP denial of {name} on the trail"
        );
        let line = file
            .iter()
            .find(|d| d["operation"] == name && d["rule"] == "SECCOMP")
            .unwrap_or_else(|| {
                panic!("no SECCOMP denial of {name} in the denials file: {file:#?}")
            });
        assert!(line["reason"].as_str().unwrap().contains(name), "{line}");
    }
}

#[test]
fn git_python_and_a_c_build_run_in_the_sandbox() {
    let m = Mounted::new();
    let out = sandboxed(
        &m,
        "cd $HOME && git init -q repo && cd repo && echo hi > f && git add f && \
         git -c user.name=a -c user.email=a@b commit -q -m first && echo git-ok
         /usr/bin/python3 -c 'print(\"python-ok\")'
         cd $HOME && printf 'int main(void){return 0;}\\n' > m.c && \
         printf 'm: m.c\\n\\tcc -o m m.c\\n' > Makefile && make -s && ./m && echo build-ok",
    );
    for expected in ["git-ok", "python-ok", "build-ok"] {
        assert!(out.contains(expected), "{expected}: {out}");
    }
}

#[test]
fn no_side_door_to_the_network_or_to_other_processes() {
    let m = Mounted::new();
    crate::support::agent_policy(&m, "fs-engine", "sandbox = { network = \"none\" }");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // A process of the agent's uid outside the sandbox.
    let mut victim = std::process::Command::new("setpriv")
        .args([
            "--reuid=61006",
            "--regid=61006",
            "--clear-groups",
            "sleep",
            "30",
        ])
        .spawn()
        .unwrap();
    let probe = format!(
        r#"
import resource, socket
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, "refused", e.errno)
attempt("mptcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(("127.0.0.1", {port})))
attempt("fastopen", lambda: socket.socket().sendto(b"x", 0x20000000, ("127.0.0.1", {port})))
attempt("tcp", lambda: socket.socket().connect(("127.0.0.1", {port})))
attempt("prlimit", lambda: resource.prlimit({victim}, resource.RLIMIT_CPU, (1, 1)))
"#,
        victim = victim.id()
    );
    let out = sandboxed(
        &m,
        &format!("SECRET_TOKEN=x; /usr/bin/python3 -c '{probe}' 2>&1; env"),
    );
    let _ = victim.kill();
    let _ = victim.wait();
    for name in ["mptcp", "fastopen", "tcp", "prlimit"] {
        assert!(out.contains(&format!("{name} refused")), "{name}: {out}");
    }
    drop(listener);
}

#[test]
fn a_sandboxed_agent_gets_no_caller_secrets_and_can_call_tools() {
    let m = Mounted::new();
    let out = std::process::Command::new(crate::common::clawfs_bin())
        .args([
            "run",
            "--store",
            m.store.to_str().unwrap(),
            "--mount",
            m.mnt.to_str().unwrap(),
        ])
        .args(["--agent", "fs-engine", "--", "sh", "-c"])
        .arg(format!(
            "env; exec 3<>{}/tools/call/list_allowed && printf '{{}}' >&3 && cat <&3",
            m.mnt.display()
        ))
        .env("CALLER_API_TOKEN", "sk-caller-secret")
        .output()
        .unwrap();
    let out = text(&out);
    assert!(!out.contains("sk-caller-secret"), "{out}");
    assert!(out.contains("\"ok\":true"), "{out}");
}
