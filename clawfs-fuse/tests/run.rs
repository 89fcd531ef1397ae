//! `clawfs run` end to end, on real cgroups (no mount needed): the child's group, uid and
//! no_new_privs, that it cannot leave its group, exit codes, signal forwarding, cleanup, refusals,
//! and parallel runs.
//!
//! This file has its own small harness (`harness = false`): started with
//! `CLAWFS_RUN_TEST_HELPER=1`, the test binary *is* `clawfs run` (it parses [`RunArgs`] and calls
//! [`clawfs_fuse::run::run`]), so the tests drive a real separate process they can signal. Tests
//! run in parallel threads; each uses its own store and agent names, since cgroups are host-wide.
//! They need root and cgroup v2; without them every test is reported as ignored, with the reason.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use clawfs_core::cgroup::{agent_of_pid, Cgroup2};
use clawfs_fuse::run::{RunArgs, AGENT_UID_BASE};

const HELPER_ENV: &str = "CLAWFS_RUN_TEST_HELPER";

/// `clawfs run`, as the helper mode of this binary understands it.
#[derive(Parser)]
struct Helper {
    #[command(flatten)]
    run: RunArgs,
}

fn helper_main() -> ExitCode {
    clawfs_fuse::logging::init();
    let args = Helper::parse();
    match clawfs_fuse::run::run(&args.run) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("clawfs: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A `clawfs run` command (once `run` is wired into the CLI this can be
/// `Command::new(env!("CARGO_BIN_EXE_clawfs")).arg("run")`).
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
        let out = Command::new(env!("CARGO_BIN_EXE_clawfs"))
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
        std::fs::write(store.join("system/policy.toml"), policy).unwrap();
        Fixture {
            _dir: dir,
            store,
            cg: Cgroup2::find().unwrap(),
        }
    }

    /// `clawfs run --store S --agent AGENT EXTRA… -- sh -c SCRIPT`.
    fn cmd(&self, agent: &str, extra: &[&str], script: &str) -> Command {
        let mut c = clawfs_run();
        c.arg("--store")
            .arg(&self.store)
            .args(["--agent", agent])
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
    r.read_line(&mut l).unwrap();
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
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is ClawFS mounted"),
        "{}",
        text(&out.stderr)
    );

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
    let quotas = f.store.join("system/cgroup/quotas.json");
    let mut perms = std::fs::metadata(&quotas).unwrap().permissions();
    perms.set_mode(0o644);
    std::fs::set_permissions(&quotas, perms).unwrap();
    std::fs::write(
        &quotas,
        format!(r#"{{"defaults": {{"memory.max": "1073741824"}}, "agents": {{"{agent}": {{"pids.max": "100"}}}}}}"#),
    )
    .unwrap();
    let adir = f.agent_dir(&agent).display().to_string();
    let out = f.run(
        &agent,
        &[],
        &format!("cat {adir}/pids.max 2>/dev/null || echo no-pids; cat {adir}/memory.max 2>/dev/null || echo no-memory"),
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
        }
    }
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
