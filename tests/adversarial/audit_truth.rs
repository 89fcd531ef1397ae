//! The trail must say what happened: an operation that failed, a tool call that was refused,
//! a create over quota are never recorded "ok"; every refusal reaches the agent's denials.

use crate::common::Mounted;
use crate::support::{agent_policy, audit_until, denials, python_as_agent, records, text, PROBE};

#[test]
fn failures_are_recorded_with_their_errno_not_as_ok() {
    let m = Mounted::new();
    let mnt = m.mnt.display();
    // rmdir of a non-empty directory: allowed by the policy, refused by the filesystem.
    let out = m.run_agent(
        "fs-engine",
        &format!("cd {mnt}/agents/fs-engine && mkdir d && touch d/f && rmdir d 2>&1; true"),
    );
    assert!(text(&out).contains("not empty"), "{}", text(&out));
    let all = audit_until(&m, |a| !records(a, "rmdir", "/fs-engine/d").is_empty());
    let rmdir = records(&all, "rmdir", "/fs-engine/d");
    assert_eq!(rmdir.len(), 1, "{rmdir:?}");
    assert_eq!(rmdir[0]["result"], "error", "{rmdir:?}");
    assert_eq!(rmdir[0]["errno"], libc::ENOTEMPTY, "{rmdir:?}");
}

#[test]
fn a_create_over_quota_has_one_record_and_it_is_the_refusal() {
    let m = Mounted::new();
    // Its directory, cache/, identity.json and state.json are its own: four files already.
    agent_policy(&m, "fs-engine", "quota = { files = 6 }");
    let mnt = m.mnt.display();
    let out = m.run_agent(
        "fs-engine",
        &format!("cd {mnt}/agents/fs-engine && touch a b && touch c 2>&1; true"),
    );
    assert!(text(&out).contains("quota"), "{}", text(&out));
    let all = audit_until(&m, |a| a.iter().any(|r| r["rule"] == "QUOTA"));
    let c: Vec<_> = all
        .iter()
        .filter(|r| r["path"] == "/agents/fs-engine/c")
        .collect();
    assert!(!c.is_empty(), "no record of c");
    assert!(c.iter().all(|r| r["result"] != "ok"), "{c:?}");
    assert!(denials(&m, "fs-engine")
        .iter()
        .any(|d| d["rule"] == "QUOTA" && d["path"] == "/agents/fs-engine/c"));
}

#[test]
fn refused_and_failed_tool_calls_are_not_ok_and_reach_the_denials() {
    let m = Mounted::new();
    let mnt = m.mnt.display();
    std::fs::create_dir_all(m.ws().join(".git")).unwrap();
    std::fs::write(m.ws().join(".git/config"), "[core]\n").unwrap();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "exec 3<>{mnt}/tools/call/read_file; echo '{{\"path\":\".git/config\"}}' >&3; cat <&3; exec 3>&-
             exec 3<>{mnt}/tools/call/read_file; echo '{{\"path\":\"no-such-file.md\"}}' >&3; cat <&3; exec 3>&-
             echo > {mnt}/tools/requests/empty.json; cat {mnt}/tools/responses/empty.json"
        ),
    );
    let out = text(&out);
    assert!(out.contains("\"protected\""), "{out}");
    assert!(out.contains("\"not_found\""), "{out}");
    let all = audit_until(&m, |a| {
        a.iter()
            .filter(|r| {
                r["operation"]
                    .as_str()
                    .is_some_and(|o| o.starts_with("tool:"))
            })
            .count()
            >= 3
    });
    let tools: Vec<_> = all
        .iter()
        .filter(|r| {
            r["agent"] == "fs-engine"
                && r["operation"]
                    .as_str()
                    .is_some_and(|o| o.starts_with("tool:"))
        })
        .collect();
    assert_eq!(tools.len(), 3, "{tools:?}");
    assert!(tools.iter().all(|r| r["result"] != "ok"), "{tools:?}");
    assert_eq!(tools[0]["result"], "denied", "{tools:?}");
    assert_eq!(
        tools[0]["target"], "/workspaces/default/.git/config",
        "the record names the file, as a namespace path: {tools:?}"
    );
    assert_eq!(tools[1]["errno"], libc::ENOENT, "{tools:?}");
    assert!(
        denials(&m, "fs-engine")
            .iter()
            .any(|d| d["operation"] == "tool:read_file"),
        "{:?}",
        denials(&m, "fs-engine")
    );
}

/// Names that are not UTF-8 are on the trail byte for byte (escaped `\xNN`, a backslash
/// doubled): two files whose names differ in such bytes never share a record's path.
#[test]
fn names_that_are_not_utf8_are_recorded_exactly() {
    let m = crate::common::Mounted::new();
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "cd {}/workspaces/default && echo a > \"$(printf 'x\\377.md')\" && echo b > \"$(printf 'x\\376.md')\" && echo c > 'x\\xff.md'",
            m.mnt.display()
        ),
    );
    assert!(out.status.success(), "{}", crate::support::text(&out));
    let all = crate::support::audit_until(&m, |_| true);
    let created: Vec<&str> = all
        .iter()
        .filter(|r| r["operation"] == "create" && r["agent"] == "fs-engine")
        .filter_map(|r| r["path"].as_str())
        .collect();
    for want in [
        "/workspaces/default/x\\xff.md",
        "/workspaces/default/x\\xfe.md",
        "/workspaces/default/x\\\\xff.md",
    ] {
        assert!(created.contains(&want), "{want} not in {created:?}");
    }
}

/// What ClawFS refuses in the tool folders by its own rules, before any policy decision, is on
/// the trail and in the agent's denials like every other refusal: an agent that probes
/// `tools/requests/` and `tools/responses/` with folders, links, FIFOs, renames, bad request
/// names and a `chmod` of its response leaves a record of each, with the errno it
/// got, and changes nothing.
#[test]
fn refusals_in_the_tool_folders_are_recorded_and_change_nothing() {
    let m = Mounted::new();
    let mnt = m.mnt.display();
    let script = format!(
        r#"
import errno, os
t = "{mnt}/tools"
with open(t + "/requests/r1.json", "w") as f:
    f.write('{{"tool":"list_allowed"}}')
resp = t + "/responses/r1.json"
mode = os.stat(resp).st_mode
probe("mkdir", lambda: os.mkdir(t + "/requests/d"))
probe("symlink", lambda: os.symlink("x", t + "/requests/s.json"))
probe("mkfifo", lambda: os.mkfifo(t + "/requests/f.json"))
probe("badname", lambda: open(t + "/requests/bad name", "w"))
probe("link", lambda: os.link(resp, t + "/requests/h.json"))
probe("rename", lambda: os.rename(resp, t + "/requests/m.json"))
probe("chmod", lambda: os.chmod(resp, 0o777))
made = [n for n in ["d", "s.json", "f.json", "bad name", "h.json", "m.json"] if os.path.lexists(t + "/requests/" + n)]
print("left", made, os.stat(resp).st_mode == mode)
"#
    );
    let out = python_as_agent(&m, &format!("{PROBE}{script}"));
    let got = |what: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{what} ")))
            .unwrap_or_else(|| panic!("{what}: {out}"))
            .to_string()
    };
    let expected = [
        ("mkdir", "EPERM", "mkdir", "/tools/requests"),
        ("symlink", "EPERM", "symlink", "/tools/requests"),
        ("mkfifo", "EPERM", "mknod", "/tools/requests"),
        ("badname", "EINVAL", "create", "/tools/requests"),
        ("link", "EPERM", "link", "/tools/responses"),
        ("rename", "EPERM", "rename", "/tools/responses"),
        ("chmod", "EPERM", "setattr", "/tools/responses"),
    ];
    for (what, errno, _, _) in expected {
        assert_eq!(got(what), errno, "{what}: {out}");
    }
    assert_eq!(
        got("left"),
        "[] True",
        "something was made or changed: {out}"
    );

    let errno_of = |name: &str| match name {
        "EPERM" => libc::EPERM,
        _ => libc::EINVAL,
    };
    let all = audit_until(&m, |a| {
        a.iter().filter(|r| r["rule"] == "NAMESPACE").count() >= expected.len()
    });
    let trail_denials = denials(&m, "fs-engine");
    for (what, errno, op, path) in expected {
        let rec: Vec<_> = all
            .iter()
            .filter(|r| r["operation"] == op && r["rule"] == "NAMESPACE")
            .collect();
        assert_eq!(rec.len(), 1, "{what}: {rec:?}");
        assert_eq!(rec[0]["agent"], "fs-engine", "{what}: {rec:?}");
        assert_eq!(rec[0]["result"], "denied", "{what}: {rec:?}");
        assert_eq!(rec[0]["errno"], errno_of(errno), "{what}: {rec:?}");
        assert_eq!(rec[0]["path"], path, "{what}: {rec:?}");
        assert!(
            trail_denials
                .iter()
                .any(|d| d["operation"] == op && d["rule"] == "NAMESPACE"),
            "{what} is not in the agent's denials: {trail_denials:?}"
        );
    }
}

/// The trail says what the agent got, for refusals of what it wrote: a truncation of its
/// identity file by path (refused: EPERM, rule NAMESPACE) or through a descriptor (the empty
/// document is refused at close: EINVAL, rule IDENTITY-SCHEMA, the file unchanged), a document
/// that does not validate (EINVAL on the record as for the writer), one changed by
/// `copy_file_range` or `fallocate` instead of a write (validated all the same), a tool call
/// refused as too large whose caller closes it without reading the answer or clears it by
/// truncation, and a request written far past the size limit (refused as too large, not as
/// over the caller's share).
#[test]
fn refused_writes_are_recorded_as_the_caller_got_them() {
    let m = Mounted::new();
    let mnt = m.mnt.display();
    let identity = m.backing("agents/fs-engine/identity.json");
    let before = std::fs::read(&identity).unwrap();
    let script = format!(
        r#"
import errno, os
me = "{mnt}/agents/fs-engine/identity.json"
probe("truncate", lambda: os.truncate(me, 0))
def ftruncate():
    fd = os.open(me, os.O_WRONLY)
    os.ftruncate(fd, 0)
    os.close(fd)
probe("ftruncate", ftruncate)
def bad():
    fd = os.open(me, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"{{not json")
    os.close(fd)
probe("invalid", bad)
src = "{mnt}/agents/fs-engine/notjson"
with open(src, "w") as f:
    f.write("not json")
def cfr():
    s = os.open(src, os.O_RDONLY)
    fd = os.open(me, os.O_RDWR)
    os.copy_file_range(s, fd, 8, 0, 0)
    os.close(s)
    os.close(fd)
probe("cfr", cfr)
def falloc():
    fd = os.open(me, os.O_RDWR)
    os.posix_fallocate(fd, 0, 1 << 20)
    os.close(fd)
probe("falloc", falloc)
def cleared():
    fd = os.open("{mnt}/tools/call/info", os.O_RDWR)
    try:
        os.pwrite(fd, b"x", 5 << 20)
    finally:
        os.ftruncate(fd, 0)
        os.close(fd)
probe("cleared", cleared)
def unread_call():
    fd = os.open("{mnt}/tools/call/info", os.O_RDWR)
    try:
        for _ in range(6):
            os.write(fd, b" " * (1 << 20))
    finally:
        os.close(fd)
probe("unread", unread_call)
def far():
    fd = os.open("{mnt}/tools/requests/far.json", os.O_WRONLY | os.O_CREAT)
    try:
        os.pwrite(fd, b"{{}}", 1 << 30)
    finally:
        os.close(fd)
probe("far", far)
"#
    );
    let out = python_as_agent(&m, &format!("{PROBE}{script}"));
    for (what, got) in [
        ("truncate", "EPERM"),
        ("ftruncate", "EINVAL"),
        ("invalid", "EINVAL"),
        ("cfr", "EINVAL"),
        ("falloc", "EINVAL"),
        ("unread", "EFBIG"),
        ("cleared", "EFBIG"),
        ("far", "EFBIG"),
    ] {
        assert!(out.contains(&format!("{what} {got}")), "{what}: {out}");
    }
    assert_eq!(std::fs::read(&identity).unwrap(), before, "{out}");

    let all = audit_until(&m, |a| {
        a.iter().filter(|r| r["rule"] == "IDENTITY-SCHEMA").count() >= 4
            && a.iter().filter(|r| r["operation"] == "tool:info").count() >= 2
            && a.iter().any(|r| r["operation"] == "tool:?")
    });
    let setattr = records(&all, "setattr", "/agents/fs-engine/identity.json");
    assert!(
        setattr.iter().any(|r| r["result"] == "denied"
            && r["rule"] == "NAMESPACE"
            && r["errno"] == libc::EPERM),
        "{setattr:?}"
    );
    let matching = |key: &str, value: &str| -> Vec<&serde_json::Value> {
        all.iter().filter(|r| r[key] == value).collect()
    };
    let schema = matching("rule", "IDENTITY-SCHEMA");
    assert_eq!(schema.len(), 4, "{schema:?}");
    assert!(
        schema.iter().all(|r| r["errno"] == libc::EINVAL),
        "{schema:?}"
    );
    let info = matching("operation", "tool:info");
    assert_eq!(info.len(), 2, "{info:?}");
    assert!(info.iter().all(|r| r["errno"] == libc::EFBIG), "{info:?}");
    let far: Vec<_> = matching("operation", "tool:?")
        .into_iter()
        .filter(|r| r["errno"] == libc::EFBIG)
        .collect();
    assert_eq!(far.len(), 1, "{far:?}");
    assert!(
        far[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("larger than")),
        "{far:?}"
    );
    let d = denials(&m, "fs-engine");
    assert!(
        d.iter()
            .any(|r| r["rule"] == "NAMESPACE" && r["operation"] == "setattr"),
        "{d:?}"
    );
}
