//! An agent run with `clawfs run --sandbox` tries to reach the host around the mount, and to
//! use the kernel interfaces an escape starts with.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::Mounted;
use crate::support::{run_agent_with, text};

fn sandboxed(m: &Mounted, script: &str) -> String {
    text(&run_agent_with(
        m,
        "fs-engine",
        &["--sandbox"],
        &["sh", "-c", script],
    ))
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
    let m = Mounted::new();
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
