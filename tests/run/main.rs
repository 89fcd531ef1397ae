//! `clawfs run` end to end, on real cgroups (no mount needed): the child's group, uid and
//! no_new_privs, that it cannot leave its group, exit codes, signal forwarding, cleanup, refusals,
//! parallel runs, and quotas in force (cgroup v2, or the cgroup v1 fallback on hybrid hosts): a
//! fork bomb, a memory hog, cpu.max.
//!
//! This file has its own small harness (`harness = false`): started with
//! `CLAWFS_RUN_TEST_HELPER=1`, the test binary *is* `clawfs run` (it parses [`RunArgs`] and calls
//! [`clawfs_cli::commands::run::run`]), so the tests drive a real separate process they can signal. Tests
//! run in parallel threads; each uses its own store and agent names, since cgroups are host-wide.
//! They need root and cgroup v2; without them every test is reported as ignored, with the reason.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

use clap::Parser;
use clawfs_args::run::RunArgs;
use clawfs_cli::commands::run::AGENT_UID_BASE;
use clawfs_sandbox::cgroup::{agent_of_pid, Cgroup2, CgroupV1, DEFAULT_CONTROLLERS};

const HELPER_ENV: &str = "CLAWFS_RUN_TEST_HELPER";

/// `clawfs run`, as the helper mode of this binary understands it.
#[derive(Parser)]
struct Helper {
    #[command(flatten)]
    run: RunArgs,
}

fn helper_main() -> ExitCode {
    clawfs_cli::logging::init();
    let args = Helper::parse();
    match clawfs_cli::commands::run::run(&args.run) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("clawfs: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A `clawfs run` command (once `run` is wired into the CLI this can be
/// `Command::new(common::clawfs_bin()).arg("run")`).
fn clawfs_run() -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.env(HELPER_ENV, "1");
    c
}

/// A fresh store in a temp dir, with one extra agent per name in `agents`.
struct Fixture {
    _dir: tempfile::TempDir,
    store: PathBuf,
    cg: Cgroup2,
}

fn unique(tag: &str) -> String {
    format!("t{}-{tag}", std::process::id())
}

impl Fixture {
    fn new(agents: &[&str]) -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("clawfs-run.")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let store = dir.path().join("store");
        let out = Command::new(common::clawfs_bin())
            .arg("init")
            .arg("--store")
            .arg(&store)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        // Each extra agent gets a directory and a place in the store's policy, with the uid
        // after the default roster's.
        let mut policy = std::fs::read_to_string(store.join("system/policy.toml")).unwrap();
        for (i, a) in agents.iter().enumerate() {
            std::fs::create_dir(store.join("agents").join(a)).unwrap();
            let uid = AGENT_UID_BASE + 9 + i as u32;
            policy.push_str(&format!("\n[agents.{a}]\nuid = {uid}\ngid = {uid}\n"));
        }
        // Installed as an admin installs it (recorded in the system manifest): `clawfs run`
        // refuses a policy edited in the store by hand.
        let file = dir.path().join("policy.toml");
        std::fs::write(&file, policy).unwrap();
        let out = Command::new(common::clawfs_bin())
            .args(["system", "update", "--store"])
            .arg(&store)
            .arg(format!("policy.toml={}", file.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        Fixture {
            _dir: dir,
            store,
            cg: Cgroup2::find().unwrap(),
        }
    }

    /// `clawfs run --store S --agent AGENT EXTRA… -- sh -c SCRIPT`.
    /// A run of the store, which is not mounted here: the cgroup layer alone (`--no-sandbox`;
    /// the sandbox is built around a mount and tested through one in tests/adversarial).
    fn cmd(&self, agent: &str, extra: &[&str], script: &str) -> Command {
        let mut c = clawfs_run();
        c.arg("--store")
            .arg(&self.store)
            .args(["--agent", agent, "--no-sandbox"])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .current_dir("/");
        c
    }

    fn run(&self, agent: &str, extra: &[&str], script: &str) -> Output {
        self.cmd(agent, extra, script).output().unwrap()
    }

    fn agent_dir(&self, agent: &str) -> PathBuf {
        self.cg.agent_dir(agent)
    }

    /// Replaces the store's quotas.json.
    fn set_quotas(&self, json: &str) {
        let quotas = self.store.join("system/cgroup/quotas.json");
        let mut perms = std::fs::metadata(&quotas).unwrap().permissions();
        perms.set_mode(0o644);
        std::fs::set_permissions(&quotas, perms).unwrap();
        std::fs::write(&quotas, json).unwrap();
    }

    /// A world-readable file in the fixture's directory (for the agent to run).
    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self._dir.path().join(name);
        std::fs::write(&p, contents).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    }

    /// Where the agent's group for `controller` is: the v2 agent group when cgroup v2 offers the
    /// controller, else the agent group in the v1 hierarchy that has it; `None` when neither.
    fn limits_dir(&self, agent: &str, controller: &str) -> Option<PathBuf> {
        let offered = std::fs::read_to_string(self.cg.mount_point().join("cgroup.controllers"))
            .unwrap_or_default();
        if offered.split_whitespace().any(|c| c == controller) {
            return Some(self.agent_dir(agent));
        }
        CgroupV1::find(controller).map(|h| h.agent_dir(agent))
    }
}

/// The v1 hierarchies `clawfs run` may use here (those with one of its controllers).
fn v1_hierarchies() -> Vec<CgroupV1> {
    CgroupV1::find_all()
        .unwrap()
        .into_iter()
        .filter(|h| DEFAULT_CONTROLLERS.iter().any(|c| h.has(c)))
        .collect()
}

/// Why `controller` cannot be tested here (in neither cgroup v2 nor a v1 hierarchy), if so.
fn lacks_controller(controller: &str) -> Option<String> {
    let cg = Cgroup2::find().ok()?;
    let offered =
        std::fs::read_to_string(cg.mount_point().join("cgroup.controllers")).unwrap_or_default();
    if offered.split_whitespace().any(|c| c == controller) || CgroupV1::find(controller).is_some() {
        return None;
    }
    Some(format!(
        "the {controller} controller is neither offered by cgroup v2 ({}) nor mounted as cgroup v1",
        cg.mount_point().display()
    ))
}

/// A python3 the agent can run (not one under root's home), if the host has one.
fn python3() -> Option<&'static str> {
    ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

/// No group of `agent` is left in cgroup v2 or in any v1 hierarchy.
fn assert_groups_gone(f: &Fixture, agent: &str) {
    assert!(!f.agent_dir(agent).exists());
    for h in v1_hierarchies() {
        assert!(
            !h.agent_dir(agent).exists(),
            "{} left behind",
            h.agent_dir(agent).display()
        );
    }
}

/// The supplementary groups `clawfs run` gives an agent, as `id -G` lists them after the
/// primary group (sorted, each with a leading space).
fn clawfs_groups() -> String {
    let mut gids: Vec<u32> = [
        clawfs_core::seed::agents_group(),
        clawfs_core::seed::users_group(),
    ]
    .into_iter()
    .flatten()
    .collect();
    gids.sort_unstable();
    gids.iter().map(|g| format!(" {g}")).collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The cgroup v2 path in `cat /proc/self/cgroup` output.
fn v2_line(out: &str) -> &str {
    out.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no 0:: line in {out:?}"))
}

fn spawn_piped(mut c: Command) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

fn read_line(r: &mut impl BufRead) -> String {
    let mut l = String::new();
    let n = r.read_line(&mut l).unwrap();
    assert!(n > 0, "the run's output ended early");
    l.trim_end().to_string()
}

fn finish(mut child: Child, mut rest: impl Read) -> (Option<i32>, String, String) {
    let mut out = String::new();
    rest.read_to_string(&mut out).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (child.wait().unwrap().code(), out, err)
}

// ---------------------------------------------------------------------------------------------

fn child_is_agent_in_its_group_unprivileged_with_no_new_privs() {
    let agent = unique("ident");
    let f = Fixture::new(&[&agent]);
    let mut c = f.cmd(
        &agent,
        &[],
        "cat /proc/self/cgroup; echo uid=$(id -u) gid=$(id -g) groups=$(id -G); \
         grep NoNewPrivs /proc/self/status; echo agent=$CLAWFS_AGENT; \
         echo sid=$(cut -d' ' -f6 /proc/$$/stat) tty=$(cut -d' ' -f7 /proc/$$/stat); \
         echo pid=$$; read _; exit 0",
    );
    c.stdin(Stdio::piped());
    let (mut child, mut out) = spawn_piped(c);
    let stdin = child.stdin.take().unwrap();
    let helper = child.id();
    let mut lines = Vec::new();
    loop {
        let l = read_line(&mut out);
        if let Some(pid) = l.strip_prefix("pid=") {
            // While the child lives, the daemon's lookup names it; `clawfs run` itself is nobody.
            let pid: u32 = pid.parse().unwrap();
            assert_eq!(agent_of_pid(pid).unwrap().as_deref(), Some(agent.as_str()));
            assert_eq!(agent_of_pid(helper).unwrap(), None);
            // A session of its own, without a controlling terminal.
            assert!(lines.contains(&format!("sid={pid} tty=0")), "{lines:?}");
            break;
        }
        assert!(!l.is_empty(), "early end: {lines:?}");
        lines.push(l);
    }
    let all = lines.join("\n") + "\n";
    assert_eq!(
        v2_line(&all),
        format!("/clawfs/agent-{agent}/run-{helper}"),
        "{all}"
    );
    // The only extra agent of this store: the first uid after the default roster.
    let uid = AGENT_UID_BASE + 9;
    let groups = format!("{uid}{}", clawfs_groups());
    assert!(
        all.contains(&format!("uid={uid} gid={uid} groups={groups}\n")),
        "{all} (wanted groups={groups})"
    );
    assert!(all.contains("NoNewPrivs:\t1"), "{all}");
    assert!(all.contains(&format!("agent={agent}")), "{all}");
    assert!(f.agent_dir(&agent).join(format!("run-{helper}")).is_dir());
    drop(stdin);
    let (code, _, err) = finish(child, out);
    assert_eq!(code, Some(0), "{err}");
    assert!(!f.agent_dir(&agent).exists());
}

fn explicit_user_and_gid() {
    let agent = unique("user");
    let f = Fixture::new(&[&agent]);
    let out = f.run(
        &agent,
        &["--user", "12345:23456"],
        "echo $(id -u) $(id -g) $(id -G)",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("12345 23456 23456{}", clawfs_groups())
    );
}

fn root_is_refused() {
    let agent = unique("root");
    let f = Fixture::new(&[&agent]);
    for user in ["0", "0:0", "1000:0", "root"] {
        let out = f.run(&agent, &["--user", user], "echo ran");
        assert_eq!(out.status.code(), Some(1), "{user}");
        assert!(
            text(&out.stderr).contains("refusing to run agent"),
            "{}",
            text(&out.stderr)
        );
        assert!(!text(&out.stdout).contains("ran"));
    }
    assert!(!f.agent_dir(&agent).exists());
}

fn cannot_leave_its_group() {
    let agent = unique("escape");
    let f = Fixture::new(&[&agent]);
    let root = f.cg.mount_point().display().to_string();
    let adir = f.agent_dir(&agent).display().to_string();
    let script = format!(
        "for p in {root}/cgroup.procs {root}/clawfs/cgroup.procs {adir}/cgroup.procs; do \
           if echo $$ > $p; then echo moved-to=$p; else echo refused=$p; fi; \
         done; \
         if mkdir {adir}/evil 2>/dev/null; then echo made-subgroup; fi; \
         if echo max > {adir}/pids.max 2>/dev/null; then echo raised-limit; fi; \
         cat /proc/self/cgroup"
    );
    let out = f.run(&agent, &[], &script);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stdout.contains("moved-to"), "{stdout}");
    assert_eq!(stdout.matches("refused=").count(), 3, "{stdout}");
    // EACCES, as the shell reports it, for each attempt.
    assert_eq!(
        stderr.matches("cgroup.procs: Permission denied").count(),
        3,
        "{stderr}"
    );
    assert!(!stdout.contains("made-subgroup") && !stdout.contains("raised-limit"));
    assert!(
        v2_line(&stdout).starts_with(&format!("/clawfs/agent-{agent}/run-")),
        "{stdout}"
    );
    assert!(!f.agent_dir(&agent).exists());
}

fn exit_codes_propagate() {
    let agent = unique("exit");
    let f = Fixture::new(&[&agent]);
    assert_eq!(f.run(&agent, &[], "exit 7").status.code(), Some(7));
    assert_eq!(f.run(&agent, &[], "true").status.code(), Some(0));
    assert_eq!(f.run(&agent, &[], "kill -KILL $$").status.code(), Some(137));
    assert_eq!(f.run(&agent, &[], "kill -TERM $$").status.code(), Some(143));
    let out = f.run(&agent, &[], "exec /no/such/program");
    assert_eq!(out.status.code(), Some(127));
    assert!(!f.agent_dir(&agent).exists());
}

fn signals_are_forwarded() {
    let agent = unique("signal");
    let f = Fixture::new(&[&agent]);
    let (child, mut out) = spawn_piped(f.cmd(
        &agent,
        &[],
        "trap 'echo got-USR1' USR1; trap 'echo got-TERM; exit 42' TERM; echo ready; \
         while :; do sleep 0.05; done",
    ));
    assert_eq!(read_line(&mut out), "ready");
    let helper = child.id() as i32;
    // SAFETY: kill has no memory arguments.
    unsafe { libc::kill(helper, libc::SIGUSR1) };
    assert_eq!(read_line(&mut out), "got-USR1");
    // SAFETY: as above.
    unsafe { libc::kill(helper, libc::SIGTERM) };
    let (code, rest, err) = finish(child, out);
    assert_eq!(code, Some(42), "{err}");
    assert_eq!(rest.trim(), "got-TERM");
    assert!(!f.agent_dir(&agent).exists());
}

fn group_outlives_the_command_until_its_last_process() {
    let agent = unique("straggler");
    let f = Fixture::new(&[&agent]);
    let start = Instant::now();
    let out = f.run(&agent, &[], "(sleep 0.6; echo late) & echo started; exit 3");
    assert!(start.elapsed() >= Duration::from_millis(600));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "started\nlate\n");
    assert!(!f.agent_dir(&agent).exists());
}

fn refusals() {
    let agent = unique("known");
    let f = Fixture::new(&[&agent]);
    let out = f.run("no-such-agent", &[], "echo ran");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("unknown agent \"no-such-agent\""), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!text(&out.stdout).contains("ran"));

    let out = f.run("Bad_Name", &[], "echo ran");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--agent"),
        "{}",
        text(&out.stderr)
    );

    let out = f.run(&agent, &["--workspace", "nope"], "echo ran");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown workspace"));

    let missing_mount = f.store.parent().unwrap().join("no-mount");
    let out = f.run(
        &agent,
        &[
            "--workspace",
            "default",
            "--mount",
            missing_mount.to_str().unwrap(),
        ],
        "echo ran",
    );
    // A mount that does not serve the store: exit 3, naming both.
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(err.contains("is not a ClawFS mount"), "{err}");
    assert!(err.contains(missing_mount.to_str().unwrap()), "{err}");
    assert!(err.contains(f.store.to_str().unwrap()), "{err}");

    // Not a store.
    let mut c = clawfs_run();
    let out = c
        .args([
            "--store",
            "/nonexistent-store",
            "--agent",
            &agent,
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));

    // Not root.
    let mut c = clawfs_run();
    let store = f.store.to_str().unwrap();
    c.args(["--store", store, "--agent", &agent, "--", "true"])
        .current_dir("/");
    std::os::unix::process::CommandExt::uid(&mut c, 65534);
    std::os::unix::process::CommandExt::gid(&mut c, 65534);
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("must be started as root"),
        "{}",
        text(&out.stderr)
    );

    // A malformed quotas file stops the run before anything starts.
    let quotas = f.store.join("system/cgroup/quotas.json");
    let mut perms = std::fs::metadata(&quotas).unwrap().permissions();
    perms.set_mode(0o644);
    std::fs::set_permissions(&quotas, perms).unwrap();
    std::fs::write(&quotas, r#"{"defaults": {"cgroup.procs": "1"}}"#).unwrap();
    let out = f.run(&agent, &[], "echo ran");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("quotas.json"),
        "{}",
        text(&out.stderr)
    );
    assert!(!text(&out.stdout).contains("ran"));
    assert!(!f.agent_dir(&agent).exists());
}

fn quotas_are_applied_or_reported() {
    let agent = unique("quota");
    let f = Fixture::new(&[&agent]);
    f.set_quotas(&format!(
        r#"{{"defaults": {{"memory.max": "1073741824"}}, "agents": {{"{agent}": {{"pids.max": "100"}}}}}}"#
    ));
    // Where each limit is in force: the v2 file, or its v1 form in the v1 hierarchy.
    let where_ = |controller: &str, v2: &str, v1: &str| {
        let v2_file = f.agent_dir(&agent).join(v2);
        let v1_file = CgroupV1::find(controller).map(|h| h.agent_dir(&agent).join(v1));
        format!(
            "cat {} 2>/dev/null || cat {} 2>/dev/null || echo no-{controller}",
            v2_file.display(),
            v1_file.unwrap_or(v2_file.clone()).display()
        )
    };
    let out = f.run(
        &agent,
        &[],
        &format!(
            "{}; {}",
            where_("pids", "pids.max", "pids.max"),
            where_("memory", "memory.max", "memory.limit_in_bytes")
        ),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Each limit is either in force or named in the warning.
    for (key, want, missing) in [
        ("pids.max", "100", "no-pids"),
        ("memory.max", "1073741824", "no-memory"),
    ] {
        if stdout.contains(missing) {
            assert!(
                stderr.contains("not enforced") && stderr.contains(key),
                "{stderr}"
            );
        } else {
            assert!(stdout.contains(want), "{stdout}");
            assert!(!stderr.contains(key), "{stderr}");
        }
    }
    assert_groups_gone(&f, &agent);
}

/// 200 `sleep 5` children, counting the forks that fail; then kills them all.
const FORK_BOMB: &str = r#"import os
kids, failed = [], 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        try:
            os.execvp("sleep", ["sleep", "5"])
        finally:
            os._exit(127)
    kids.append(pid)
print("forked=%d failed=%d" % (len(kids), failed), flush=True)
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
"#;

/// `pids.max = 20` stops a fork bomb: forks fail, the bomb ends, the run ends, the host can still
/// fork.
fn fork_bomb_is_stopped_by_pids_max() {
    if let Some(why) = lacks_controller("pids") {
        common::skip("fork_bomb_is_stopped_by_pids_max", &why);
        return;
    }
    let agent = unique("forkbomb");
    let f = Fixture::new(&[&agent]);
    f.set_quotas(&format!(
        r#"{{"agents": {{"{agent}": {{"pids.max": 20}}}}}}"#
    ));
    let start = Instant::now();
    let out = match python3() {
        Some(py) => {
            let bomb = f.file("bomb.py", FORK_BOMB);
            f.run(&agent, &[], &format!("{py} {}; echo rc=$?", bomb.display()))
        }
        // No python3: the shell's own loop (dash gives up at the first failed fork; the
        // sleeps it started end within 5 s).
        None => f.run(
            &agent,
            &[],
            "i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); echo forked=$i; done",
        ),
    };
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    let forked: u32 = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("forked="))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .max()
        .unwrap_or_else(|| panic!("{stdout} {stderr}"));
    assert!(forked < 20, "{stdout}");
    if python3().is_some() {
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let failed: u32 = stdout
            .split("failed=")
            .nth(1)
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"));
        assert_eq!(forked + failed, 200, "{stdout}");
        assert!(failed >= 180, "{stdout}");
        assert!(stdout.contains("rc=0"), "{stdout} {stderr}");
    } else {
        assert_ne!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("fork"), "{stderr}");
    }
    assert!(!stderr.contains("pids.max"), "limit not in force: {stderr}");
    assert_groups_gone(&f, &agent);
    // The host is fine.
    assert!(Command::new("true").status().unwrap().success());
}

/// `memory.max = 64M` stops a process that allocates 256 MB: it is killed or gets ENOMEM.
fn memory_hog_is_stopped_by_memory_max() {
    if let Some(why) = lacks_controller("memory") {
        common::skip("memory_hog_is_stopped_by_memory_max", &why);
        return;
    }
    let agent = unique("memhog");
    let f = Fixture::new(&[&agent]);
    // No swap either, or the hog would only be slowed down on a host that has some.
    f.set_quotas(&format!(
        r#"{{"agents": {{"{agent}": {{"memory.max": 67108864, "memory.swap.max": 0}}}}}}"#
    ));
    let hog = match python3() {
        Some(py) => {
            format!("{py} -c \"b = b'x' * (256 << 20); print('allocated', len(b))\"; echo rc=$?")
        }
        None => "(x=$(head -c 268435456 /dev/zero | tr '\\0' x); echo allocated ${#x}); echo rc=$?"
            .to_string(),
    };
    let start = Instant::now();
    let out = f.run(&agent, &[], &hog);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(start.elapsed() < Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stdout.contains("allocated"), "{stdout}");
    // SIGKILL by the OOM killer (137), or MemoryError (1).
    assert!(
        stdout.contains("rc=137") || stderr.contains("MemoryError"),
        "{stdout} {stderr}"
    );
    assert!(
        !stderr.contains("memory.max"),
        "limit not in force: {stderr}"
    );
    assert_groups_gone(&f, &agent);
}

/// Reads a cgroup file, trimmed.
fn read_trim(p: &std::path::Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// While a run lives: its limits are where they should be (cpu.max as cgroup v2's `cpu.max` or
/// v1's `cpu.cfs_quota_us`/`cpu.cfs_period_us`), it is in the agent's groups of every hierarchy
/// used, all root-owned; after it, every group is gone.
fn limits_are_set_while_the_run_lives() {
    let agent = unique("limits");
    let f = Fixture::new(&[&agent]);
    f.set_quotas(&format!(
        r#"{{"agents": {{"{agent}": {{"cpu.max": "50000 100000", "pids.max": 100, "memory.max": 536870912}}}}}}"#
    ));
    let mut c = f.cmd(
        &agent,
        &[],
        "cat /proc/self/cgroup; echo pid=$$; read _; exit 0",
    );
    c.stdin(Stdio::piped());
    let (mut child, mut out) = spawn_piped(c);
    let stdin = child.stdin.take().unwrap();
    let helper = child.id();
    let mut lines = String::new();
    let pid: u32 = loop {
        let l = read_line(&mut out);
        assert!(!l.is_empty(), "early end: {lines}");
        if let Some(p) = l.strip_prefix("pid=") {
            break p.parse().unwrap();
        }
        lines.push_str(&l);
        lines.push('\n');
    };
    let leaf = format!("/clawfs/agent-{agent}/run-{helper}");
    assert_eq!(v2_line(&lines), leaf, "{lines}");
    assert_eq!(agent_of_pid(pid).unwrap().as_deref(), Some(agent.as_str()));

    // cpu.max, as cgroup v2 or v1 has it.
    match f.limits_dir(&agent, "cpu") {
        None => eprintln!("cpu.max not checked: {}", lacks_controller("cpu").unwrap()),
        Some(dir) if dir == f.agent_dir(&agent) => {
            assert_eq!(read_trim(&dir.join("cpu.max")), "50000 100000")
        }
        Some(dir) => {
            assert_eq!(read_trim(&dir.join("cpu.cfs_quota_us")), "50000");
            assert_eq!(read_trim(&dir.join("cpu.cfs_period_us")), "100000");
        }
    }
    for (controller, v2, v1, want) in [
        ("pids", "pids.max", "pids.max", "100"),
        ("memory", "memory.max", "memory.limit_in_bytes", "536870912"),
    ] {
        match f.limits_dir(&agent, controller) {
            None => eprintln!(
                "{v2} not checked: {}",
                lacks_controller(controller).unwrap()
            ),
            Some(dir) if dir == f.agent_dir(&agent) => {
                assert_eq!(read_trim(&dir.join(v2)), want)
            }
            Some(dir) => assert_eq!(read_trim(&dir.join(v1)), want),
        }
    }

    // In each v1 hierarchy used, the run is in its leaf, and every file that moves processes is
    // root's and not writable by others, up to the hierarchy's root.
    for h in v1_hierarchies() {
        let run_dir = h.agent_dir(&agent).join(format!("run-{helper}"));
        if !run_dir.exists() {
            // cgroup v2 provides this hierarchy's controllers.
            continue;
        }
        let line = lines
            .lines()
            .find(|l| {
                l.split(':')
                    .nth(1)
                    .is_some_and(|list| list.split(',').any(|c| h.has(c)))
            })
            .unwrap_or_else(|| panic!("no line for {:?} in {lines}", h.controllers()));
        assert!(line.ends_with(&format!(":{leaf}")), "{line}");
        for dir in [
            h.mount_point().to_path_buf(),
            h.base_dir(),
            h.agent_dir(&agent),
            run_dir.clone(),
        ] {
            for file in ["cgroup.procs", "tasks"] {
                let meta = std::fs::metadata(dir.join(file)).unwrap();
                assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
                assert_eq!(
                    meta.permissions().mode() & 0o022,
                    0,
                    "{}",
                    dir.join(file).display()
                );
            }
            let meta = std::fs::metadata(&dir).unwrap();
            assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
            assert_eq!(meta.permissions().mode() & 0o022, 0, "{}", dir.display());
        }
        let procs = read_trim(&run_dir.join("cgroup.procs"));
        assert!(
            procs.lines().any(|p| p == pid.to_string()),
            "{procs} / {pid}"
        );
    }
    drop(stdin);
    let (code, _, err) = finish(child, out);
    assert_eq!(code, Some(0), "{err}");
    let all_there = DEFAULT_CONTROLLERS
        .iter()
        .all(|c| lacks_controller(c).is_none());
    if all_there {
        assert!(!err.contains("not fully in force"), "{err}");
    }
    assert_groups_gone(&f, &agent);
}

/// On a hybrid host, the agent can no more leave its cgroup v1 groups than its v2 one.
fn cannot_leave_its_v1_groups() {
    let agent = unique("v1escape");
    let f = Fixture::new(&[&agent]);
    let used: Vec<CgroupV1> = v1_hierarchies()
        .into_iter()
        .filter(|h| {
            let offered = std::fs::read_to_string(f.cg.mount_point().join("cgroup.controllers"))
                .unwrap_or_default();
            h.controllers().iter().any(|c| {
                DEFAULT_CONTROLLERS.contains(&c.as_str())
                    && !offered.split_whitespace().any(|o| o == c)
            })
        })
        .collect();
    if used.is_empty() {
        eprintln!(
            "cannot_leave_its_v1_groups skipped: no v1 groups here \
             (cgroup v2 provides memory, pids and cpu)"
        );
        return;
    }
    f.set_quotas(&format!(
        r#"{{"agents": {{"{agent}": {{"pids.max": 50}}}}}}"#
    ));
    let mut script = String::new();
    let mut attempts = 0;
    for h in &used {
        let (root, base, adir) = (
            h.mount_point().display().to_string(),
            h.base_dir().display().to_string(),
            h.agent_dir(&agent).display().to_string(),
        );
        for p in [
            format!("{root}/cgroup.procs"),
            format!("{root}/tasks"),
            format!("{base}/cgroup.procs"),
            format!("{adir}/cgroup.procs"),
            format!("{adir}/tasks"),
        ] {
            attempts += 1;
            script.push_str(&format!(
                "if echo $$ > {p}; then echo moved-to={p}; else echo refused={p}; fi; "
            ));
        }
        script.push_str(&format!(
            "if mkdir {adir}/evil 2>/dev/null; then echo made-subgroup; fi; \
             for l in pids.max memory.limit_in_bytes cpu.cfs_quota_us; do \
               if [ -e {adir}/$l ] && {{ echo -1 > {adir}/$l; }} 2>/dev/null; then \
                 echo raised-limit=$l; fi; \
             done; "
        ));
    }
    script.push_str("cat /proc/self/cgroup");
    let out = f.run(&agent, &[], &script);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stdout.contains("moved-to"), "{stdout}");
    assert_eq!(stdout.matches("refused=").count(), attempts, "{stdout}");
    assert_eq!(
        stderr.matches(": Permission denied").count(),
        attempts,
        "{stderr}"
    );
    assert!(
        !stdout.contains("made-subgroup") && !stdout.contains("raised-limit"),
        "{stdout}"
    );
    // Still in its leaves, in every hierarchy used.
    for h in &used {
        let line = stdout
            .lines()
            .find(|l| {
                l.split(':')
                    .nth(1)
                    .is_some_and(|list| list.split(',').any(|c| h.has(c)))
            })
            .unwrap_or_else(|| panic!("no line for {:?} in {stdout}", h.controllers()));
        assert!(
            line.contains(&format!(":/clawfs/agent-{agent}/run-")),
            "{line}"
        );
    }
    assert_groups_gone(&f, &agent);
}

fn parallel_runs_of_different_and_same_agents() {
    let (a, b) = (unique("par-a"), unique("par-b"));
    let f = Fixture::new(&[&a, &b]);
    let script = "cat /proc/self/cgroup; read _; exit 0";
    let start = |agent: &str| {
        let mut c = f.cmd(agent, &[], script);
        c.stdin(Stdio::piped());
        let (mut child, mut out) = spawn_piped(c);
        let stdin = child.stdin.take().unwrap();
        let mut lines = String::new();
        loop {
            let l = read_line(&mut out);
            lines.push_str(&l);
            lines.push('\n');
            if l.starts_with("0::") {
                break;
            }
        }
        (child, out, stdin, lines)
    };
    let (ca, oa, ia, la) = start(&a);
    let (cb, ob, ib, lb) = start(&b);
    let (ca2, oa2, ia2, la2) = start(&a);
    assert_eq!(v2_line(&la), format!("/clawfs/agent-{a}/run-{}", ca.id()));
    assert_eq!(v2_line(&lb), format!("/clawfs/agent-{b}/run-{}", cb.id()));
    assert_eq!(v2_line(&la2), format!("/clawfs/agent-{a}/run-{}", ca2.id()));
    // One run of `a` ends: the agent's group stays for the other.
    let first = f.agent_dir(&a).join(format!("run-{}", ca.id()));
    assert!(first.is_dir());
    drop(ia);
    assert_eq!(finish(ca, oa).0, Some(0));
    assert!(f.agent_dir(&a).exists());
    assert!(!first.exists());
    drop(ia2);
    assert_eq!(finish(ca2, oa2).0, Some(0));
    assert!(!f.agent_dir(&a).exists());
    assert!(f.agent_dir(&b).exists());
    drop(ib);
    assert_eq!(finish(cb, ob).0, Some(0));
    assert!(!f.agent_dir(&b).exists());
}

fn default_agent_gets_its_roster_uid() {
    // A default-roster agent shares its group name with any other store on the host, so this
    // test only reads its own leaf.
    let f = Fixture::new(&[]);
    let out = f.run("fs-engine", &[], "id -u; cat /proc/self/cgroup");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // The uid the default policy gives fs-engine.
    assert_eq!(stdout.lines().next(), Some("61006"));
    assert!(v2_line(&stdout).starts_with("/clawfs/agent-fs-engine/run-"));
}

// ---------------------------------------------------------------------------------------------

const TESTS: &[(&str, fn())] = &[
    (
        "child_is_agent_in_its_group_unprivileged_with_no_new_privs",
        child_is_agent_in_its_group_unprivileged_with_no_new_privs,
    ),
    ("explicit_user_and_gid", explicit_user_and_gid),
    ("root_is_refused", root_is_refused),
    ("cannot_leave_its_group", cannot_leave_its_group),
    ("exit_codes_propagate", exit_codes_propagate),
    ("signals_are_forwarded", signals_are_forwarded),
    (
        "group_outlives_the_command_until_its_last_process",
        group_outlives_the_command_until_its_last_process,
    ),
    ("refusals", refusals),
    (
        "quotas_are_applied_or_reported",
        quotas_are_applied_or_reported,
    ),
    (
        "parallel_runs_of_different_and_same_agents",
        parallel_runs_of_different_and_same_agents,
    ),
    (
        "default_agent_gets_its_roster_uid",
        default_agent_gets_its_roster_uid,
    ),
    (
        "fork_bomb_is_stopped_by_pids_max",
        fork_bomb_is_stopped_by_pids_max,
    ),
    (
        "memory_hog_is_stopped_by_memory_max",
        memory_hog_is_stopped_by_memory_max,
    ),
    (
        "limits_are_set_while_the_run_lives",
        limits_are_set_while_the_run_lives,
    ),
    ("cannot_leave_its_v1_groups", cannot_leave_its_v1_groups),
];

fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root".into());
    }
    Cgroup2::find().err().map(|e| e.to_string())
}

/// A libtest-like runner: `NAME…` filters by substring, `--exact` matches whole names, `--list`
/// lists; other flags are accepted and ignored. Prints libtest's summary line.
fn main() -> ExitCode {
    if std::env::var_os(HELPER_ENV).is_some() {
        return helper_main();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exact = args.iter().any(|a| a == "--exact");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let selected: Vec<&(&str, fn())> = TESTS
        .iter()
        .filter(|(name, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filtered = TESTS.len() - selected.len();
    println!("\nrunning {} tests", selected.len());
    let start = Instant::now();
    if let Some(why) = unavailable() {
        for (name, _) in &selected {
            println!("test {name} ... ignored, {why}");
        }
        println!(
            "\ntest result: ok. 0 passed; 0 failed; {} ignored; 0 measured; {filtered} filtered out; finished in {:.2}s\n",
            selected.len(),
            start.elapsed().as_secs_f64()
        );
        return ExitCode::SUCCESS;
    }
    let handles: Vec<_> = selected
        .iter()
        .map(|&&(name, f)| {
            (
                name,
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(f)
                    .unwrap(),
            )
        })
        .collect();
    let mut failed = Vec::new();
    for (name, h) in handles {
        match h.join() {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(name);
            }
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {filtered} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len(),
        start.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}
