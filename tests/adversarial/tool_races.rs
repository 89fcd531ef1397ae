//! An agent races its own tool calls: in a workspace it may write, it swaps a folder with a
//! symlink to a workspace it has no grant on (or to a folder on the host) with
//! `renameat2(RENAME_EXCHANGE)` through the mount, over and over (and makes and removes hard
//! links), while it calls tools on paths
//! through that folder. The daemon resolves and checks a tool's path, then acts on it as root
//! with the agent's fsuid. Acting by a second lookup of the path would follow the swapped-in
//! symlink: reads return the other workspace's files, writes land in it.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::Mounted;
use crate::support::{snapshot, text};

const SECRET: &str = "VICTIM-SECRET-7d1e";
const SECRET_NAME: &str = "victim-only-name-93a0";
const HOST_SECRET: &str = "HOST-SECRET-41bb";

/// The attacker, run as the agent inside the mount. argv: mount, seconds, then the markers that
/// must never appear in a response. A forked child swaps `sub`/`link` and `sub2`/`link2` as fast
/// as it can; the parent calls tools on `race/sub/...` and `race/sub2/...` until the time is up.
/// Prints `LEAK ...` for any response carrying a marker, then a summary line.
const ATTACK: &str = r#"
import ctypes, json, os, sys, time
mnt, secs, marks = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
os.chdir(mnt + "/workspaces/default/race")
deadline = time.time() + secs
racer = os.fork()
if racer == 0:
    n = 0
    while time.time() < deadline:
        for a, b in ((b"sub", b"link"), (b"sub2", b"link2")):
            if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
                print("SWAP-FAILED", os.strerror(ctypes.get_errno()), flush=True)
                os._exit(1)
            n += 1
        # Hard links: a name for a file of this workspace that comes and goes, and one for
        # the victim's file (refused: a link needs write access to its source).
        for src, dst in (("sub/f.txt", "hl.txt"), ("../victim/f.txt", "hl2.txt")):
            try:
                os.link(src, dst)
            except OSError:
                pass
        for name in ("hl.txt", "hl2.txt"):
            try:
                os.unlink(name)
            except OSError:
                pass
    print("swaps", n, flush=True)
    os._exit(0)

def call(tool, req):
    fd = os.open(mnt + "/tools/call/" + tool, os.O_RDWR)
    try:
        os.write(fd, json.dumps(req).encode())
        out = b""
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return out.decode("utf-8", "replace")
            out += chunk
    finally:
        os.close(fd)

requests = []
for d in ("race/sub", "race/sub2"):
    requests += [
        ("read_file", {"path": d + "/f.txt"}),
        ("write_file", {"path": d + "/new.txt", "content": "planted\n"}),
        ("edit_file", {"path": d + "/f.txt", "insert": {"line": 0, "text": "edited"}}),
        ("edit_exact", {"path": d + "/f.txt", "old": "shared line", "new": "shared line"}),
        ("info", {"path": d + "/f.txt"}),
        ("search", {"path": d + "/f.txt", "pattern": "SECRET"}),
        ("read_range", {"path": d + "/F.TXT", "start": 1}),
        ("list_files", {"path": d}),
        ("search_files", {"path": d, "pattern": "SECRET"}),
        ("directory_tree", {"path": d}),
        ("get_file_info", {"path": d}),
        ("create_folder", {"path": d + "/made"}),
        ("move", {"from": d + "/new.txt", "to": d + "/moved.txt"}),
        ("delete", {"path": d + "/moved.txt"}),
    ]
requests.append(("search_files", {"pattern": "SECRET"}))
for name in ("race/hl.txt", "race/hl2.txt"):
    requests += [
        ("read_file", {"path": name}),
        ("write_file", {"path": name, "content": "planted\n"}),
        ("info", {"path": name}),
    ]

calls = reads = 0
codes = {}
while time.time() < deadline:
    for tool, req in requests:
        out = call(tool, req)
        calls += 1
        try:
            code = json.loads(out).get("error", "ok")
        except ValueError:
            code = "bad-json"
        codes[code] = codes.get(code, 0) + 1
        if tool == "read_file" and code == "ok":
            reads += 1
        if any(m in out for m in marks):
            print("LEAK", tool, json.dumps(req), out.strip()[:1000], flush=True)
os.waitpid(racer, 0)
print("calls", calls, "reads", reads, json.dumps(codes, sort_keys=True), flush=True)
"#;

#[test]
fn swapping_a_folder_for_a_symlink_never_takes_a_tool_out_of_the_workspace() {
    let m = Mounted::new();
    let mode = |p: &std::path::Path, bits| {
        fs::set_permissions(p, fs::Permissions::from_mode(bits)).unwrap()
    };
    // Let every user traverse the store, as where the hole was seen: containment must not rest on
    // the store's 0700 (which also makes a lookup by path as the agent fail before any race).
    mode(&m.store, 0o755);
    // A workspace fs-engine has no grant on, open to everyone by POSIX: only the policy guards it.
    let victim = m.path("workspaces/victim");
    fs::create_dir(&victim).unwrap();
    fs::write(victim.join("f.txt"), format!("shared line\n{SECRET}\n")).unwrap();
    fs::write(victim.join(format!("{SECRET_NAME}.md")), SECRET).unwrap();
    mode(&victim, 0o777);
    mode(&victim.join("f.txt"), 0o666);
    // A folder on the host, outside the store, also open to everyone.
    let host = m.dir.path().join("host");
    fs::create_dir(&host).unwrap();
    fs::write(host.join("f.txt"), format!("shared line\n{HOST_SECRET}\n")).unwrap();
    mode(&host, 0o777);
    mode(&host.join("f.txt"), 0o666);
    let script = m.dir.path().join("attack.py");
    fs::write(&script, ATTACK).unwrap();
    mode(&script, 0o644);

    let others = || {
        let mut s = snapshot(&m.backing("agents"));
        s.retain(|l| !l.starts_with("fs-engine"));
        s
    };
    let before = (
        snapshot(&m.backing("workspaces/victim")),
        others(),
        snapshot(&host),
    );

    let mnt = m.mnt.display();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {mnt}/workspaces/default && mkdir race race/sub race/sub2 || exit 9
             printf 'shared line\\ninside\\n' > race/sub/f.txt
             printf 'shared line\\ninside\\n' > race/sub2/f.txt
             ln -s ../../victim race/link && ln -s {host} race/link2 || exit 9
             (cat race/link/f.txt) 2>&1
             python3 {script} {mnt} 5 {SECRET} {SECRET_NAME} {HOST_SECRET} 2>&1",
            host = host.display(),
            script = script.display(),
        ),
    );
    let out = text(&out);
    eprintln!("{out}");
    let after = (
        snapshot(&m.backing("workspaces/victim")),
        others(),
        snapshot(&host),
    );

    // The agent cannot read the victim itself (the premise of the attack).
    assert!(out.contains("f.txt: Permission denied"), "{out}");
    let leaks: Vec<&str> = out.lines().filter(|l| l.starts_with("LEAK")).collect();
    assert!(
        leaks.is_empty(),
        "tool responses leaked:\n{}",
        leaks.join("\n")
    );
    assert_eq!(before.0, after.0, "the ungranted workspace changed: {out}");
    assert_eq!(
        before.1, after.1,
        "another agent's directory changed: {out}"
    );
    assert_eq!(before.2, after.2, "the host folder changed: {out}");
    // The race really ran, and tools really worked between the swaps.
    let number = |key: &str| -> u64 {
        out.split_whitespace()
            .skip_while(|w| *w != key)
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no '{key}' in the attack's output: {out}"))
    };
    assert!(number("swaps") > 1000, "{out}");
    assert!(number("calls") > 200, "{out}");
    assert!(number("reads") > 0, "{out}");
}
