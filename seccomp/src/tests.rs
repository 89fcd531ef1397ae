//! Parsing and validation (no filter is loaded here; see tests/ for the kernel tests).

use super::*;

const DEFAULT: &str = include_str!("../default-whitelist.json");

fn doc(extra: &str) -> String {
    format!(
        r#"{{"version": 1, "description": "t", "arch": ["x86_64"], "default_action": "errno:EPERM",
            "syscalls": ["read", "write", "socket", "ioctl", "clone", "exit_group"]{extra}}}"#
    )
}

fn err(text: &str) -> String {
    match Whitelist::parse(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn default_whitelist_parses_and_compiles() {
    let w = Whitelist::parse(DEFAULT).unwrap();
    assert_eq!(w.default_action(), Action::Errno(libc::EPERM));
    assert!(w.overridden().is_empty(), "{:?}", w.overridden());
    for name in ["execve", "clone", "socket", "ioctl", "openat", "wait4"] {
        assert!(w.syscalls().iter().any(|s| s == name), "{name}");
    }
    for d in ALWAYS_DENIED {
        assert!(!w.syscalls().iter().any(|s| s == d.name), "{}", d.name);
    }
    let f = w.compile().unwrap();
    assert!(
        f.instructions() > 100 && f.instructions() < 4096,
        "{}",
        f.instructions()
    );
    assert!(f.pfc().contains("ioctl"));
    assert_eq!(f.logs_denials(), libseccomp::get_api() >= 3);
}

#[test]
fn every_always_denied_name_is_known_to_libseccomp() {
    for d in ALWAYS_DENIED {
        libseccomp::ScmpSyscall::from_name(d.name).unwrap_or_else(|e| panic!("{}: {e}", d.name));
    }
}

#[test]
fn older_file_without_rules_is_accepted_and_clone3_is_overridden() {
    let w = Whitelist::parse(
        r#"{"version": 1, "description": "old", "arch": ["x86_64"], "default_action": "errno:EPERM",
            "syscalls": ["read", "clone", "clone3", "ptrace"]}"#,
    )
    .unwrap();
    assert_eq!(w.overridden(), ["clone3", "ptrace"]);
    assert_eq!(w.syscalls(), ["read", "clone"]);
    w.compile().unwrap();
}

#[test]
fn actions_parse() {
    assert_eq!(Action::parse("errno:EPERM", "x").unwrap(), Action::Errno(1));
    assert_eq!(Action::parse("errno:38", "x").unwrap(), Action::Errno(38));
    assert_eq!(Action::parse("kill", "x").unwrap(), Action::Kill);
    assert_eq!(Action::parse("log", "x").unwrap(), Action::Log);
    assert_eq!(Action::Errno(38).to_string(), "errno:ENOSYS");
    assert_eq!(Action::Errno(999).to_string(), "errno:999");
}

#[test]
fn rules_and_deny_parse() {
    let w = Whitelist::parse(&doc(
        r#", "rules": {"socket": {"arg0_in": ["AF_UNIX", 2, "0xa"], "action": "kill", "comment": "c"},
                       "ioctl": {"arg1_not_in": ["TIOCSTI"]}},
            "deny": {"ptrace": "kill", "chroot": "errno:EACCES"}"#,
    ))
    .unwrap();
    let socket = &w.rules()["socket"];
    assert_eq!(socket.action, Some(Action::Kill));
    assert_eq!(socket.conditions[0].values, [1, 2, 10]);
    assert_eq!(socket.conditions[0].bits, 32);
    assert_eq!(w.rules()["ioctl"].conditions[0].op, CondOp::NotIn);
    assert_eq!(w.deny()["ptrace"], Action::Kill);
    assert_eq!(w.deny()["chroot"], Action::Errno(libc::EACCES));
    w.compile().unwrap();
}

#[test]
fn malformed_whitelists_name_the_bad_entry() {
    let cases: &[(String, &[&str])] = &[
        ("{\"version\": 1,".to_string(), &["malformed", "line"]),
        (doc(r#", "rule": {}"#), &["unknown field `rule`"]),
        (
            doc("").replace("\"write\"", "\"wirte\""),
            &["syscalls[1]", "unknown syscall \"wirte\""],
        ),
        (
            doc("").replace("errno:EPERM", "deny"),
            &["default_action", "bad action \"deny\""],
        ),
        (
            doc("").replace("errno:EPERM", "errno:EWHAT"),
            &["default_action", "unknown errno name"],
        ),
        (
            doc("").replace("errno:EPERM", "errno:0"),
            &["between 1 and 4095"],
        ),
        (
            doc("").replace("\"version\": 1", "\"version\": 2"),
            &["version 2"],
        ),
        (
            doc("").replace("[\"x86_64\"]", "[\"vax\"]"),
            &["arch[0]", "unknown architecture \"vax\""],
        ),
        (
            doc(r#", "rules": {"socket": {"arg0_in": ["AF_UNIX", "AF_FOO"]}}"#),
            &["rules.socket.arg0_in[1]", "unknown constant \"AF_FOO\""],
        ),
        (
            doc(r#", "rules": {"socket": {"arg0_is": ["AF_UNIX"]}}"#),
            &["rules.socket.arg0_is", "unknown key"],
        ),
        (
            doc(r#", "rules": {"socket": {"arg6_in": ["AF_UNIX"]}}"#),
            &["rules.socket.arg6_in", "unknown key"],
        ),
        (
            doc(r#", "rules": {"socket": {"arg0_in": []}}"#),
            &["rules.socket.arg0_in", "empty"],
        ),
        (
            doc(r#", "rules": {"socket": {"action": "kill"}}"#),
            &["rules.socket", "at least one"],
        ),
        (
            doc(r#", "rules": {"socket": {"arg0_in": ["0x100000000"]}}"#),
            &[
                "rules.socket.arg0_in[0]",
                "does not fit the 32-bit argument 0 of socket",
            ],
        ),
        (
            doc(r#", "rules": {"socket": {"arg0_in": ["AF_UNIX"], "action": "stop"}}"#),
            &["rules.socket.action", "bad action \"stop\""],
        ),
        (
            doc(r#", "rules": {"openat": {"arg2_clear": [1]}}"#),
            &["rules.openat", "not listed in \"syscalls\""],
        ),
        (
            doc(r#", "rules": {"opnet": {"arg2_clear": [1]}}"#),
            &["rules.opnet", "unknown syscall \"opnet\""],
        ),
        (
            doc(r#", "rules": {"clone": {"arg0_clear": [0]}}"#),
            &["rules.clone.arg0_clear[0]", "non-zero"],
        ),
        (
            doc(r#", "deny": {"read": "kill"}"#),
            &["deny.read", "both allowed"],
        ),
        (
            doc(r#", "deny": {"chroot": "log"}"#),
            &["deny.chroot", "bad action \"log\""],
        ),
        (
            doc(r#", "deny": {"chroo": "kill"}"#),
            &["deny.chroo", "unknown syscall"],
        ),
        (
            doc(r#", "rules": {"socket": {"arg0_in": [-1]}}"#),
            &["rules.socket.arg0_in[0]", "non-negative"],
        ),
    ];
    for (text, wants) in cases {
        let msg = err(text);
        for want in *wants {
            assert!(
                msg.contains(want),
                "error {msg:?} lacks {want:?} (input {text})"
            );
        }
    }
}

#[test]
fn a_whitelist_for_another_architecture_does_not_compile() {
    let w = Whitelist::parse(&doc("").replace("[\"x86_64\"]", "[\"aarch64\"]")).unwrap();
    let e = w.compile().unwrap_err().to_string();
    assert!(
        e.contains("aarch64") && e.contains("refuse every syscall"),
        "{e}"
    );
}

#[test]
fn availability_is_reported() {
    let a = available();
    let line = a.to_string();
    assert!(line.starts_with("seccomp "), "{line}");
    if a.usable() {
        assert!(
            a.filter_mode && a.api_level >= 1 && a.libseccomp_version.is_some(),
            "{a:?}"
        );
    } else {
        assert!(line.contains("not available on this host: "), "{line}");
        assert!(!a.problems.is_empty());
    }
}
