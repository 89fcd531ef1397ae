//! Test harness: a real ClawFS mounted in a temp dir by the real `clawfs` binary, unmounted and
//! removed on drop (also when the test panics). Every test gets its own store and mount point, so
//! tests run in parallel.
#![allow(dead_code)]

pub mod embed_server;
pub mod juicefs;
pub mod postgres;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The `clawfs` binary under test: the one cargo built for these tests (with the daemon's test
/// hooks, `fault-injection`), so a test never runs an old build.
///
/// `CLAWFS_TEST_BIN=PATH` runs the tests against another build (e.g. to show that an attack
/// test fails on an older one).
pub fn clawfs_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("CLAWFS_TEST_BIN") {
        Some(bin) => bin.to_string_lossy().into_owned(),
        None => env!("CARGO_BIN_EXE_clawfs").to_string(),
    })
}

/// A test that cannot run on this host says so and is skipped; under `CI=true` it fails
/// instead (CI's machine is set up for every test).
pub fn skip(test: &str, why: &str) {
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{test} cannot run here: {why}"
    );
    eprintln!("{test} skipped: {why}");
}

/// Runs `clawfs ARGS` (without cargo's `LD_LIBRARY_PATH`: see [`Mounted::run_command`]).
pub fn clawfs<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(clawfs_bin())
        .env_remove("LD_LIBRARY_PATH")
        .args(args)
        .output()
        .expect("run clawfs")
}

/// `clawfs ARGS --store STORE` for `m`'s store.
pub fn cli(m: &Mounted, args: &[&str]) -> Output {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.extend([OsStr::new("--store"), m.store.as_os_str()]);
    clawfs(all)
}

/// Stdout and stderr of a finished command, together.
pub fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// The standard output of a command that must succeed (else its output is shown).
pub fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A live mount.
pub struct Mounted {
    /// Holds the store and the mount point.
    pub dir: tempfile::TempDir,
    /// The mount point.
    pub mnt: PathBuf,
    /// The backing store.
    pub store: PathBuf,
}

impl Mounted {
    /// A fresh store mounted with default options.
    pub fn new() -> Self {
        Self::with_args(&[])
    }

    /// A fresh store mounted with extra `clawfs mount` arguments.
    pub fn with_args(args: &[&str]) -> Self {
        Self::with_args_env(args, &[])
    }

    /// A fresh store mounted with extra arguments and daemon environment variables.
    pub fn with_args_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("clawfs-test.")
            .tempdir_in("/tmp")
            .expect("temp dir");
        // Other users (tests that switch uid) must be able to reach the mount.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mnt = dir.path().join("mnt");
        let store = dir.path().join("store");
        std::fs::create_dir(&mnt).unwrap();
        let m = Mounted { dir, mnt, store };
        m.mount_env(args, env);
        m
    }

    /// Mounts (again) at the same place.
    pub fn mount(&self, args: &[&str]) {
        self.mount_env(args, &[])
    }

    /// `clawfs mount` at the same place, whatever it answers.
    pub fn try_mount(&self, args: &[&str]) -> Output {
        self.mount_output(args, &[])
    }

    fn mount_output(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut all: Vec<&OsStr> = vec![
            OsStr::new("mount"),
            self.mnt.as_os_str(),
            OsStr::new("--store"),
            self.store.as_os_str(),
        ];
        all.extend(args.iter().map(OsStr::new));
        Command::new(clawfs_bin())
            .args(all)
            .envs(env.iter().copied())
            .output()
            .expect("run clawfs")
    }

    /// Mounts (again) at the same place, with daemon environment variables.
    pub fn mount_env(&self, args: &[&str], env: &[(&str, &str)]) {
        let out = self.mount_output(args, env);
        assert!(
            out.status.success(),
            "clawfs mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Unmounts with `clawfs umount`.
    pub fn umount(&self) -> Output {
        clawfs([OsStr::new("umount"), self.mnt.as_os_str()])
    }

    /// A path under the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// The default workspace.
    pub fn ws(&self) -> PathBuf {
        self.mnt.join("workspaces/default")
    }

    /// The admin opens the default workspace to every user: `workspaces/` searchable, the
    /// workspace world-writable and sticky.
    pub fn open_workspace_to_all(&self) {
        use std::os::unix::fs::PermissionsExt;
        let mode = |m| std::fs::Permissions::from_mode(m);
        std::fs::set_permissions(self.path("workspaces"), mode(0o755)).unwrap();
        std::fs::set_permissions(self.ws(), mode(0o1777)).unwrap();
    }

    /// The backing path of a mount path (relative to the mount).
    pub fn backing(&self, rel: &str) -> PathBuf {
        self.store.join(rel)
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.store.join(".clawfs/daemon.log")).unwrap_or_default()
    }

    /// Whether a ClawFS mount is live at the mount point.
    pub fn is_mounted(&self) -> bool {
        let canonical = std::fs::canonicalize(&self.mnt).unwrap_or_else(|_| self.mnt.clone());
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.get(4) == Some(&canonical.to_str().unwrap()) && l.contains(" - fuse.clawfs ")
            })
    }

    /// `clawfs run --agent AGENT --no-sandbox -- sh -c SCRIPT` against this mount: what the
    /// daemon enforces on its own, with no kernel sandbox in front of it.
    pub fn run_agent(&self, agent: &str, script: &str) -> Output {
        self.run_agent_as(agent, &["--no-sandbox"], script)
    }

    /// `clawfs run --store S --mount M --agent AGENT`, for the caller to add options, the
    /// command, its working directory and its standard streams. Without cargo's
    /// `LD_LIBRARY_PATH` (its build scripts' output folders), which no agent has: under
    /// `--no-sandbox` every program the agent starts would search each of them for its
    /// libraries, and the monitor's per-second limit on recorded opens would drop the opens a
    /// test looks for.
    pub fn run_command(&self, agent: &str) -> Command {
        let mut c = Command::new(clawfs_bin());
        c.env_remove("LD_LIBRARY_PATH");
        c.arg("run")
            .arg("--store")
            .arg(&self.store)
            .arg("--mount")
            .arg(&self.mnt)
            .args(["--agent", agent]);
        c
    }

    /// `clawfs run --agent AGENT OPTIONS… -- sh -c SCRIPT` against the mount (sandboxed unless
    /// the options say `--no-sandbox`).
    pub fn run_agent_as(&self, agent: &str, options: &[&str], script: &str) -> Output {
        self.run_command(agent)
            .args(options)
            .args(["--", "sh", "-c", script])
            .current_dir("/")
            .output()
            .expect("run clawfs run")
    }

    /// CPU ticks the daemon's tool threads (where tool calls run) have used.
    pub fn tool_thread_ticks(&self) -> u64 {
        self.thread_ticks("clawfs-tool")
    }

    /// The `/proc` folders of the daemon's threads whose names start with `prefix`.
    fn threads(&self, prefix: &str) -> Vec<PathBuf> {
        let tasks = format!("/proc/{}/task", self.daemon_pid());
        std::fs::read_dir(tasks)
            .unwrap()
            .flatten()
            .map(|t| t.path())
            .filter(|t| {
                std::fs::read_to_string(t.join("comm"))
                    .unwrap_or_default()
                    .starts_with(prefix)
            })
            .collect()
    }

    /// How many of the daemon's threads have names starting with `prefix`.
    pub fn thread_count(&self, prefix: &str) -> usize {
        self.threads(prefix).len()
    }

    /// CPU ticks the daemon's threads whose names start with `prefix` have used.
    pub fn thread_ticks(&self, prefix: &str) -> u64 {
        self.threads(prefix)
            .into_iter()
            .map(|t| {
                // utime and stime, fields 14 and 15; the name (field 2) has no spaces here.
                let stat = std::fs::read_to_string(t.join("stat")).unwrap_or_default();
                let f: Vec<&str> = stat.split_whitespace().collect();
                let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                tick(13) + tick(14)
            })
            .sum()
    }

    /// Waits until the tool threads have used 10 ticks of CPU more than `before` (from
    /// [`Self::tool_thread_ticks`]): a call is running.
    pub fn wait_for_busy_tool_threads(&self, before: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.tool_thread_ticks() < before + 10 {
            assert!(std::time::Instant::now() < deadline, "no tool call started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The daemon's pid.
    pub fn daemon_pid(&self) -> i32 {
        let info = std::fs::read_to_string(self.store.join(".clawfs/daemon.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&info).unwrap();
        v["pid"].as_i64().unwrap() as i32
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.is_mounted() || std::fs::metadata(&self.mnt).is_err() {
            let out = self.umount();
            if !out.status.success() {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
    }
}

/// The passphrase of the test vaults (`clawfs vault init --sealer passphrase`); each test's vault
/// has its own keyring, named after its random vault id.
pub const VAULT_PASSPHRASE: &str = "correct horse battery staple";

/// `clawfs vault --store STORE ARGS`, with `stdin` as its input when given.
pub fn vault(m: &Mounted, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(clawfs_bin());
    c.arg("vault").arg("--store").arg(&m.store).args(args);
    c.env("CLAWFS_VAULT_PASSPHRASE", VAULT_PASSPHRASE);
    match stdin {
        None => c.output().expect("run clawfs vault"),
        Some(input) => output_with_input(&mut c, input.as_bytes()),
    }
}

/// Runs `c` with `input` on its standard input and captures its output.
pub fn output_with_input(c: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = c
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {:?}: {e}", c.get_program()));
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The errno of an I/O result that must have failed.
pub fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("the call should have been refused")
        .raw_os_error()
        .expect("an OS error")
}

/// Runs a shell command line, asserting success, and returns stdout.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a shell command line as uid/gid 65534 (nobody) and returns its output.
pub fn sh_as_nobody(cmd: &str) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            cmd,
        ])
        .output()
        .unwrap()
}

/// A listing of a tree: relative path → (kind, mode, size, content hash or link target).
pub fn tree(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let mode = md.permissions().mode() & 0o7777;
            let desc = if md.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                format!("dir {mode:o}")
            } else {
                let data = std::fs::read(&p).unwrap_or_default();
                format!("file {mode:o} {} {:x}", md.len(), crc(&data))
            };
            out.push((rel, desc));
            if md.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    walk(root, root, &mut out);
    out
}

fn crc(data: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

/// One agent-tool call on one descriptor: open `tools/call/<tool>` read-write, write the request,
/// read the response on the same descriptor.
pub fn tool_call(m: &Mounted, tool: &str, request: &serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path(&format!("tools/call/{tool}")))
        .unwrap_or_else(|e| panic!("open tools/call/{tool}: {e}"));
    f.write_all(request.to_string().as_bytes()).unwrap();
    let mut out = String::new();
    f.read_to_string(&mut out).unwrap();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{tool}: {e}: {out:?}"))
}

/// A shell command line making one agent-tool call on one descriptor (for callers run through
/// `sh` as another user): the answer is on its stdout. `request` holds no single quote.
pub fn tool_call_script(m: &Mounted, tool: &str, request: &serde_json::Value) -> String {
    let request = request.to_string();
    assert!(
        !request.contains('\''),
        "the request is quoted with ': {request}"
    );
    format!(
        "exec 3<>'{}'; printf '%s' '{request}' >&3; cat <&3",
        m.path(&format!("tools/call/{tool}")).display()
    )
}

/// One agent-tool call through the two-file interface: write `tools/requests/<id>.json` (the
/// request with `"tool"` added), read `tools/responses/<id>.json`, then delete the response.
pub fn tool_request(m: &Mounted, tool: &str, request: &serde_json::Value) -> serde_json::Value {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!(
        "req-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut req = request.clone();
    req.as_object_mut()
        .expect("a request is a JSON object")
        .insert("tool".into(), serde_json::Value::from(tool));
    std::fs::write(
        m.path(&format!("tools/requests/{id}.json")),
        req.to_string(),
    )
    .unwrap_or_else(|e| panic!("write tools/requests/{id}.json: {e}"));
    let resp = m.path(&format!("tools/responses/{id}.json"));
    // The call ran when the request was closed (FLUSH): the response is there now.
    let out = std::fs::read(&resp).unwrap_or_else(|e| panic!("read {}: {e}", resp.display()));
    std::fs::remove_file(&resp).unwrap();
    serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{tool}: {e}: {:?}", String::from_utf8_lossy(&out)))
}

/// A binary of this workspace built next to `clawfs` (e.g. `vaultctl`, from package `package`),
/// built with `cargo build -p <package> --bins` first if it is not there yet.
pub fn workspace_bin(name: &str, package: &str) -> PathBuf {
    let path = Path::new(clawfs_bin()).with_file_name(name);
    if !path.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let release = path.parent().and_then(|d| d.file_name()) == Some(OsStr::new("release"));
        let status = Command::new(cargo)
            .args(["build", "-p", package, "--bins"])
            .args(release.then_some("--release"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p {package} failed");
    }
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// Runs `migrate-pg-to-sqlite ARGS`.
pub fn migrate_pg(args: &[&str]) -> Output {
    Command::new(workspace_bin(
        "migrate-pg-to-sqlite",
        "migrate-pg-to-sqlite",
    ))
    .args(args)
    .output()
    .expect("run migrate-pg-to-sqlite")
}

/// Asserts that `cond` holds now: what a tool changed in the backing store is visible through
/// the mount as soon as the call has answered (the daemon drops the kernel's stale entries).
pub fn at_once(what: &str, cond: impl FnOnce() -> bool) {
    assert!(cond(), "not visible at once: {what}");
}

/// Every audit record of the store so far (the daemon syncs within about a second, so this
/// waits until `until` holds or 5 s passed).
pub fn audit_until(m: &Mounted, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    // Records of refusals the kernel made reach the trail through the activity monitor, in
    // batches: under a loaded machine that takes more than a few seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let out = clawfs([
            OsStr::new("audit"),
            OsStr::new("--store"),
            m.store.as_os_str(),
            OsStr::new("search"),
            OsStr::new("--json"),
        ]);
        assert!(
            out.status.success(),
            "audit search: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if until(&records) || std::time::Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Pins the calling thread (and what it starts from then on) to `cpu`: over FUSE over
/// io_uring its requests then go to that CPU's queue. Allocates nothing and cannot panic, so
/// it may run between fork and exec.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t with one bit set, for the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}
