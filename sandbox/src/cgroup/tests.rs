//! The cgroup code against mountinfo samples and a real hierarchy.
use super::group::*;
use super::v1::*;
use super::*;

const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
const UNIFIED: &str = "\
25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
";

#[test]
fn finds_the_cgroup2_mount() {
    let cg = Cgroup2::from_mountinfo(HYBRID).unwrap();
    assert_eq!(cg.mount_point(), Path::new("/sys/fs/cgroup/unified"));
    let cg = Cgroup2::from_mountinfo(UNIFIED).unwrap();
    assert_eq!(cg.mount_point(), Path::new("/sys/fs/cgroup"));
    assert_eq!(
        cg.agent_dir("fs-engine"),
        Path::new("/sys/fs/cgroup/clawfs/agent-fs-engine")
    );
    assert_eq!(
        Cgroup2::from_mountinfo("1 2 0:3 / /with\\040space rw - cgroup2 none rw\n")
            .unwrap()
            .mount_point(),
        Path::new("/with space")
    );
    assert!(Cgroup2::from_mountinfo(&HYBRID.replace("cgroup2", "tmpfs")).is_none());
    assert!(Cgroup2::from_mountinfo("").is_none());
}

#[test]
fn agent_group_dir_layout() {
    assert_eq!(
        agent_group_dir(Path::new("/sys/fs/cgroup/unified"), "a1"),
        Path::new("/sys/fs/cgroup/unified/clawfs/agent-a1")
    );
}

#[test]
fn agent_of_cgroup_file_contents() {
    let cg = Cgroup2::new("/sys/fs/cgroup", "/");
    let file = |v2: &str| format!("12:pids:/\n4:memory:/x\n0::{v2}\n");
    let cases = [
        ("/clawfs/agent-fs-engine", Some("fs-engine")),
        ("/clawfs/agent-fs-engine/run-1234", Some("fs-engine")),
        ("/clawfs/agent-a/run-1/nested/deeper", Some("a")),
        // A sub-group the agent (or anyone) made to look like another agent stays the outer one.
        ("/clawfs/agent-a/run-1/clawfs/agent-b", Some("a")),
        ("/", None),
        ("/clawfs", None),
        ("/clawfs/run-1", None),
        ("/clawfs/agent-", None),
        ("/clawfs/agent-Bad_Name", None),
        ("/clawfsx/agent-a", None),
        ("/user.slice/clawfs/agent-a", None),
        ("/user.slice/user-1000.slice/clawfs/agent-a/run-1", None),
    ];
    for (path, want) in cases {
        assert_eq!(
            cg.agent_of_cgroup_file(&file(path)).as_deref(),
            want,
            "{path}"
        );
    }
    // Only the v2 line counts.
    assert_eq!(
        cg.agent_of_cgroup_file("4:memory:/clawfs/agent-a\n0::/\n"),
        None
    );
    assert_eq!(
        cg.agent_of_cgroup_file("0::/clawfs/agent-a\n"),
        Some("a".into())
    );
    assert_eq!(cg.agent_of_cgroup_file(""), None);
    // A hierarchy whose mount shows a sub-tree: paths are anchored at its root.
    let sub = Cgroup2::new("/sys/fs/cgroup", "/machine/ct1");
    assert_eq!(
        sub.agent_of_cgroup_file("0::/machine/ct1/clawfs/agent-a/run-9\n"),
        Some("a".into())
    );
    assert_eq!(sub.agent_of_cgroup_file("0::/clawfs/agent-a\n"), None);
    assert_eq!(
        sub.agent_of_cgroup_file("0::/machine/ct1x/clawfs/agent-a\n"),
        None
    );
}

#[test]
fn limit_keys() {
    for ok in [
        "memory.max",
        "pids.max",
        "cpu.max",
        "memory.swap.max",
        "io.bfq.weight",
    ] {
        check_limit_key(ok).unwrap();
    }
    for bad in [
        "cgroup.procs",
        "cgroup.subtree_control",
        "memory",
        ".max",
        "memory.",
        "../cgroup.procs",
        "memory.max/x",
        "Memory.max",
        "memory.max ",
    ] {
        assert!(check_limit_key(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn setup_warning_names_what_is_missing() {
    let mut r = SetupReport::default();
    assert_eq!(r.warning(), None);
    r.controllers
        .not_enabled
        .push(("memory".into(), "not offered".into()));
    r.limits
        .skipped
        .push(("memory.max".into(), "no memory.max here".into()));
    let w = r.warning().unwrap();
    assert!(w.contains("controllers not enabled: memory"), "{w}");
    assert!(
        w.contains("not enforced: memory.max (no memory.max here)"),
        "{w}"
    );
    assert_eq!(r.v1_summary(), None);

    // memory comes from cgroup v1: only what is still not in force is named.
    let mut r = SetupReport::default();
    for c in ["memory", "pids", "cpu"] {
        r.controllers
            .not_enabled
            .push((c.into(), "not offered".into()));
    }
    r.v1.enabled = vec!["memory".into(), "pids".into()];
    r.v1.not_enabled = vec![("cpu".into(), "create …: read-only file system".into())];
    r.limits.applied = vec!["memory.max".into(), "pids.max".into()];
    r.v1_limits = vec![("pids.max".into(), "pids.max=20".into())];
    let w = r.warning().unwrap();
    assert!(
        w.contains("controllers not enabled: cpu (cpu: not offered; cgroup v1: create"),
        "{w}"
    );
    assert!(!w.contains("memory") && !w.contains("pids"), "{w}");
    let s = r.v1_summary().unwrap();
    assert!(s.contains("through cgroup v1: memory, pids"), "{s}");
    assert!(s.contains("pids.max as pids.max=20"), "{s}");
    r.controllers.not_enabled.retain(|(c, _)| c != "cpu");
    assert_eq!(r.warning(), None);
}

const HYBRID_FULL: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:32 /machine /srv/memory rw,relatime - cgroup cgroup rw,memory
51 23 0:36 /sub /srv/pids rw,relatime - cgroup cgroup rw,pids
";

#[test]
fn finds_the_cgroup_v1_hierarchies() {
    let all = CgroupV1::all_from_mountinfo(HYBRID_FULL);
    // One per hierarchy (the bind mounts of a sub-tree are the same ones), none for systemd.
    assert_eq!(
        all,
        vec![
            CgroupV1::new("/sys/fs/cgroup/cpu,cpuacct", "/", &["cpu", "cpuacct"]),
            CgroupV1::new("/sys/fs/cgroup/memory", "/", &["memory"]),
            CgroupV1::new("/sys/fs/cgroup/pids", "/", &["pids"]),
        ]
    );
    // The root-mounted one wins even when a sub-tree mount comes first.
    let reordered = "\
50 23 0:32 /machine /srv/memory rw - cgroup cgroup rw,memory
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
    assert_eq!(
        CgroupV1::all_from_mountinfo(reordered),
        vec![CgroupV1::new("/sys/fs/cgroup/memory", "/", &["memory"])]
    );
    assert_eq!(
        all[2].agent_dir("a"),
        Path::new("/sys/fs/cgroup/pids/clawfs/agent-a")
    );
    assert!(all[0].has("cpu") && !all[0].has("memory"));
    assert!(CgroupV1::all_from_mountinfo(UNIFIED).is_empty());
    let cg = Cgroup2::from_mountinfo(HYBRID_FULL).unwrap();
    assert_eq!(cg.mount_point(), Path::new("/sys/fs/cgroup/unified"));
}

#[test]
fn identity_is_the_v2_line_only() {
    let cg = Cgroup2::new("/sys/fs/cgroup/unified", "/");
    let pids = CgroupV1::new("/sys/fs/cgroup/pids", "/", &["pids"]);
    let file = |v2: &str, v1: &str| {
        format!("9:name=systemd:/\n8:pids:{v1}\n4:memory:{v1}\n1:cpu,cpuacct:{v1}\n0::{v2}\n")
    };
    let run = "/clawfs/agent-a/run-7";
    // What `clawfs run` does on a hybrid host: the same layout everywhere.
    assert_eq!(
        cg.agent_of_cgroup_file(&file(run, run)).as_deref(),
        Some("a")
    );
    assert_eq!(pids.agent_of_path(run).as_deref(), Some("a"));
    // The v2 line decides; v1 lines never name anyone (a child still root in pre_exec is in
    // its v1 groups before its v2 one).
    assert_eq!(
        cg.agent_of_cgroup_file(&file(run, "/clawfs/agent-b/run-7"))
            .as_deref(),
        Some("a")
    );
    assert_eq!(cg.agent_of_cgroup_file(&file("/", run)), None);
    // v1 paths are anchored like v2 ones.
    let sub = CgroupV1::new("/srv/pids", "/ct1", &["pids"]);
    assert_eq!(
        sub.agent_of_path("/ct1/clawfs/agent-a/run-1").as_deref(),
        Some("a")
    );
    assert_eq!(sub.agent_of_path("/clawfs/agent-a/run-1"), None);
}

#[test]
fn v1_translations() {
    let limits = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let writes = |key: &str, l: &BTreeMap<String, String>| -> Vec<(&'static str, String)> {
        match v1_limit(key, l) {
            V1Limit::Writes(w) => w.into_iter().map(|w| (w.file, w.value)).collect(),
            other => panic!("{key}: {other:?}"),
        }
    };
    let l = limits(&[
        ("pids.max", "20"),
        ("memory.max", "64M"),
        ("memory.swap.max", "0"),
        ("cpu.max", "50000 100000"),
        ("cpu.weight", "50"),
    ]);
    assert_eq!(writes("pids.max", &l), [("pids.max", "20".into())]);
    assert_eq!(
        writes("memory.max", &l),
        [
            ("memory.memsw.limit_in_bytes", "-1".into()),
            ("memory.limit_in_bytes", "67108864".into())
        ]
    );
    match v1_limit("memory.max", &l) {
        V1Limit::Writes(w) => assert!(w[0].optional && !w[1].optional),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        writes("memory.swap.max", &l),
        [("memory.memsw.limit_in_bytes", "67108864".into())]
    );
    assert_eq!(
        writes("cpu.max", &l),
        [
            ("cpu.cfs_period_us", "100000".into()),
            ("cpu.cfs_quota_us", "50000".into())
        ]
    );
    assert_eq!(writes("cpu.weight", &l), [("cpu.shares", "512".into())]);

    let l = limits(&[
        ("pids.max", "max"),
        ("memory.max", "1073741824"),
        ("memory.swap.max", "1G"),
        ("cpu.max", "max"),
        ("cpu.weight", "1"),
    ]);
    assert_eq!(writes("pids.max", &l), [("pids.max", "max".into())]);
    assert_eq!(
        writes("memory.swap.max", &l),
        [("memory.memsw.limit_in_bytes", "2147483648".into())]
    );
    assert_eq!(writes("cpu.max", &l), [("cpu.cfs_quota_us", "-1".into())]);
    assert_eq!(writes("cpu.weight", &l), [("cpu.shares", "10".into())]);
    let l = limits(&[("memory.max", "max"), ("memory.swap.max", "max")]);
    assert_eq!(
        writes("memory.max", &l)[1],
        ("memory.limit_in_bytes", "-1".into())
    );
    assert_eq!(
        writes("memory.swap.max", &l),
        [("memory.memsw.limit_in_bytes", "-1".into())]
    );

    // Swap alone cannot be limited in v1; nor can what v1 does not have.
    for l in [
        limits(&[("memory.swap.max", "0")]),
        limits(&[("memory.swap.max", "0"), ("memory.max", "max")]),
    ] {
        assert!(matches!(
            v1_limit("memory.swap.max", &l),
            V1Limit::NoEquivalent(_)
        ));
    }
    let l = limits(&[("memory.high", "1G"), ("pids.peak", "1")]);
    assert!(matches!(
        v1_limit("memory.high", &l),
        V1Limit::NoEquivalent(_)
    ));
    assert!(matches!(
        v1_limit("pids.peak", &l),
        V1Limit::NoEquivalent(_)
    ));

    for (key, value) in [
        ("pids.max", "-1"),
        ("pids.max", "lots"),
        ("memory.max", "1X"),
        ("memory.max", ""),
        ("memory.max", "99999999999E"),
        ("cpu.max", "fast"),
        ("cpu.max", "max 1 2"),
        ("cpu.max", "50000 often"),
        ("cpu.weight", "0"),
        ("cpu.weight", "10001"),
    ] {
        assert!(
            matches!(v1_limit(key, &limits(&[(key, value)])), V1Limit::Invalid(_)),
            "{key} {value:?}"
        );
    }
    let l = limits(&[("memory.max", "lots"), ("memory.swap.max", "0")]);
    assert!(matches!(
        v1_limit("memory.swap.max", &l),
        V1Limit::Invalid(_)
    ));
    assert_eq!(parse_bytes("2k"), Some(2048));
    assert_eq!(parse_bytes("3"), Some(3));
    assert_eq!(parse_bytes("M"), None);
}

/// A host where a test cannot run says so and the test is skipped; under `CI=true` it fails
/// instead (CI's machine runs every test as root, with cgroup v2).
fn skip(why: &str) {
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "cannot run: {why}"
    );
    eprintln!("SKIP: {why}");
}

/// On the real hierarchy (root only; otherwise reported and skipped): a run group, a process
/// moved in and named by `agent_of_pid`, waiting for it to leave, removal.
#[test]
fn run_group_lifecycle() {
    let cg = match Cgroup2::find() {
        Ok(cg) => cg,
        Err(e) => return skip(&e.to_string()),
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("needs root");
    }
    let agent = format!("core-test-{}", std::process::id());
    let limits = BTreeMap::from([("pids.max".to_string(), "50".to_string())]);
    let (group, report) = RunGroup::create(&cg, &agent, 1, &DEFAULT_CONTROLLERS, &limits).unwrap();
    // Either in force or reported, never silently dropped.
    assert_eq!(
        report.limits.applied.len() + report.limits.skipped.len() + report.limits.failed.len(),
        1
    );
    assert_eq!(group.agent().path(), cg.agent_dir(&agent));
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    group.run().add_pid(sleeper.id()).unwrap();
    assert_eq!(group.run().pids().unwrap(), vec![sleeper.id()]);
    assert_eq!(agent_of_pid(sleeper.id()).unwrap(), Some(agent.clone()));
    // Hybrid host: the controllers cgroup v2 lacks come from v1 (this limit too), in the
    // same layout, root-owned.
    for g in group.v1() {
        assert!(g.agent().path().ends_with(format!("clawfs/agent-{agent}")));
        assert!(g
            .run()
            .path()
            .ends_with(format!("clawfs/agent-{agent}/run-1")));
        g.run().add_pid(sleeper.id()).unwrap();
        assert!(g.run().has_processes().unwrap());
        let meta = fs::metadata(g.run().path().join("cgroup.procs")).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
        assert_eq!(std::os::unix::fs::MetadataExt::mode(&meta) & 0o022, 0);
        if g.controllers().iter().any(|c| c == "pids") {
            assert!(report.limits.applied.contains(&"pids.max".to_string()));
            let v = fs::read_to_string(g.agent().path().join("pids.max")).unwrap();
            assert_eq!(v.trim(), "50");
        }
    }
    if !report.controllers.enabled.iter().any(|c| c == "pids") && CgroupV1::find("pids").is_some() {
        assert!(
            group
                .v1()
                .iter()
                .any(|g| g.controllers().iter().any(|c| c == "pids")),
            "{report:?}"
        );
    }
    let v1_agents: Vec<PathBuf> = group
        .v1()
        .iter()
        .map(|g| g.agent().path().to_path_buf())
        .collect();
    assert!(group.run().is_populated().unwrap());
    assert!(group.agent().is_populated().unwrap());
    assert!(matches!(
        group.run().wait_empty(Some(Duration::from_millis(100))),
        Err(CgroupError::Timeout { .. })
    ));
    // Busy: nothing removed, no error.
    assert!(!group.agent().remove().unwrap());
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    group
        .run()
        .wait_empty(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(group.remove().unwrap());
    assert!(!cg.agent_dir(&agent).exists());
    for dir in v1_agents {
        assert!(!dir.exists(), "{}", dir.display());
    }
}

#[test]
fn this_process_is_no_agent() {
    assert_eq!(agent_of_pid(std::process::id()).unwrap(), None);
    assert!(agent_of_pid(u32::MAX).is_err());
}
