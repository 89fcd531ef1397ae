//! POSIX rules a root daemon writing on a caller's behalf would miss: setuid/setgid bits that
//! a write by a non-owner must clear, paths as long as PATH_MAX, a running program truncated
//! through a read-only open.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::common::{errno, Mounted};
use crate::support::{text, TempUser};

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_write_by_someone_else_clears_setuid_and_setgid() {
    for passthrough in [true, false] {
        let m = Mounted::with_args(if passthrough {
            &[]
        } else {
            &["--no-passthrough"]
        });
        m.open_workspace_to_all();
        let user = TempUser::new("sg");
        for (bits, after) in [
            (0o4777, 0o777),
            (0o2777, 0o777),
            (0o6777, 0o777),
            (0o2767, 0o2767),
        ] {
            let f = m.ws().join(format!("f{bits:o}"));
            fs::write(&f, "").unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(bits)).unwrap();
            let out = user.sh(&format!("printf x >> {}", f.display()));
            assert!(out.status.success(), "{}", text(&out));
            assert_eq!(mode(&f), after, "{bits:o}, passthrough {passthrough}");
            // Truncation by someone else clears them too.
            fs::set_permissions(&f, fs::Permissions::from_mode(bits)).unwrap();
            let out = user.sh(&format!(": > {}", f.display()));
            assert!(out.status.success(), "{}", text(&out));
            assert_eq!(
                mode(&f),
                after,
                "truncate {bits:o}, passthrough {passthrough}"
            );
        }
        // The owner (root) writing keeps them.
        let f = m.ws().join("own");
        fs::write(&f, "").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o4755)).unwrap();
        fs::write(&f, "x").unwrap();
        assert_eq!(mode(&f), 0o4755);
    }
}

#[test]
fn paths_up_to_path_max_work_and_one_more_is_enametoolong() {
    let m = Mounted::new();
    let base = m.ws().join("p");
    fs::create_dir(&base).unwrap();
    // Relative to a directory on the mount: PATH_MAX - 1 bytes, as the C suite builds them.
    // Their full backing path is longer than the kernel can name (a page).
    let path_max = libc::PATH_MAX as usize;
    let component = "d".repeat(200);
    let mut rel = String::new();
    while rel.len() + component.len() + 1 < path_max - 1 {
        rel.push_str(&component);
        rel.push('/');
    }
    let full = format!("{rel}{}", "f".repeat(path_max - 1 - rel.len()));
    assert_eq!(full.len(), path_max - 1);
    let script = format!(
        "cd {base} && for c in $(echo {rel} | tr / ' '); do mkdir $c && cd $c || exit 1; done && \
         cd {base} && : > {full} && chmod 0600 {full} && chown 65534 {full} && \
         truncate -s 5 {full} && ln {full} {base}/hard && stat -c %s {base}/hard && \
         (: > {full}x) 2>&1; true",
        base = base.display(),
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(shown.starts_with("5\n"), "{shown}");
    assert!(shown.contains("File name too long"), "{shown}");
    assert_eq!(mode(&base.join("hard")), 0o600);
}

#[test]
fn a_running_program_is_not_truncated_by_a_read_only_open() {
    for args in [&[][..], &["--no-passthrough"][..]] {
        let m = Mounted::with_args(args);
        let prog = m.ws().join("sleep");
        fs::copy("/bin/sleep", &prog).unwrap();
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
        let size = fs::metadata(&prog).unwrap().len();
        let mut child = std::process::Command::new(&prog).arg("10").spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let trunc = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_TRUNC)
            .open(&prog);
        assert_eq!(errno(trunc), libc::ETXTBSY, "{args:?}");
        assert_eq!(
            errno(fs::OpenOptions::new().write(true).open(&prog)),
            libc::ETXTBSY
        );
        assert_eq!(
            fs::metadata(m.backing("workspaces/default/sleep"))
                .unwrap()
                .len(),
            size
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the program died: {args:?}"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
