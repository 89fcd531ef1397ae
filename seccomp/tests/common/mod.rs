//! Helpers of the kernel tests: the C probe (tests/probe.c), filters, filtered commands.
#![allow(dead_code)] // each test binary uses a part

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, OnceLock};

use clawfs_seccomp::{available, Filter, Whitelist};

pub const DEFAULT: &str = include_str!("../../default-whitelist.json");
pub const SIGSYS: i32 = 31;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Errno(i32),
    Signal(i32),
}

pub fn require_seccomp() {
    let a = available();
    assert!(a.usable(), "{a}");
}

/// The probe, compiled once per test binary into cargo's scratch directory for tests (a
/// temporary directory held by a static would never be removed).
pub fn probe() -> &'static Path {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let bin = dir.join("seccomp-probe");
        // Compiled under a name of this process's own and renamed into place, so that test
        // binaries running at once never execute a half-written probe.
        let fresh = dir.join(format!("seccomp-probe.{}", std::process::id()));
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/probe.c");
        let out = Command::new("cc")
            .args(["-O1", "-Wall", "-pthread", "-o"])
            .arg(&fresh)
            .arg(src)
            .output()
            .expect("cc");
        assert!(
            out.status.success(),
            "cc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&fresh, &bin).unwrap();
        bin
    })
}

pub fn compile(text: &str) -> Arc<Filter> {
    Arc::new(Whitelist::parse(text).unwrap().compile().unwrap())
}

pub fn default_filter() -> Arc<Filter> {
    static F: OnceLock<Arc<Filter>> = OnceLock::new();
    F.get_or_init(|| compile(DEFAULT)).clone()
}

/// The default whitelist with some top-level fields replaced.
pub fn variant(change: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(DEFAULT).unwrap();
    change(&mut v);
    v.to_string()
}

pub fn run(filter: Option<&Arc<Filter>>, cmd: &mut Command) -> Output {
    if let Some(f) = filter {
        let f = Arc::clone(f);
        // SAFETY: Filter::load makes system calls only and touches no lock or allocator.
        unsafe {
            cmd.pre_exec(move || f.load());
        }
    }
    cmd.stdin(Stdio::null()).output().expect("spawn")
}

pub fn parse_probe(out: &Output) -> HashMap<String, Outcome> {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "probe line {l:?}");
            let outcome = match (f[1], f[2].parse::<i32>().unwrap_or(-1)) {
                ("signal", sig) => Outcome::Signal(sig),
                ("-1", errno) => Outcome::Errno(errno),
                (_, 0) => Outcome::Ok,
                _ => panic!("probe line {l:?}"),
            };
            (f[0].to_string(), outcome)
        })
        .collect()
}

pub fn run_probe(filter: Option<&Arc<Filter>>, checks: &[&str]) -> HashMap<String, Outcome> {
    let out = run(filter, Command::new(probe()).args(checks));
    assert!(
        out.status.success(),
        "probe {:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got = parse_probe(&out);
    for c in checks {
        assert!(got.contains_key(*c), "no result for {c}: {got:?}");
    }
    got
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
