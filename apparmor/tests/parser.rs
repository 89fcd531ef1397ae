//! The rendered profiles against the real `apparmor_parser -Q` (compile only: AppArmor need not be
//! active). Skipped, with the reason printed, where apparmor_parser is missing; a failure under
//! `CI=true`, whose machine installs it.

use clawfs_apparmor::{
    availability, check, render, render_template, CheckError, Network, OnExec, ProfileInputs,
    TEMPLATE,
};

fn parser_or_skip(test: &str) -> bool {
    if clawfs_apparmor::parser_path().is_none() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "{test}: apparmor_parser not found (apt-get install apparmor)"
        );
        eprintln!("SKIP {test}: apparmor_parser not found (apt-get install apparmor)");
        return false;
    }
    true
}

fn inputs(agent: &str, network: Network) -> ProfileInputs {
    ProfileInputs {
        agent: agent.into(),
        mount: "/mnt/claw fs".into(),
        own_dir: format!("/mnt/claw fs/agents/{agent}").into(),
        read_write: vec![
            "/mnt/claw fs/workspaces/shared".into(),
            "/mnt/claw fs/workspaces/proj-2".into(),
        ],
        read_only: vec!["/opt/models".into()],
        store: "/var/lib/clawfs/store".into(),
        tmp: format!("/tmp/clawfs-{agent}-77").into(),
        network,
    }
}

#[test]
fn rendered_profiles_pass_the_parser() {
    if !parser_or_skip("rendered_profiles_pass_the_parser") {
        return;
    }
    for (agent, net) in [
        ("alice", Network::Deny),
        ("bob", Network::Allow),
        ("agent_7.v2-beta", Network::Deny),
    ] {
        let p = render(&inputs(agent, net)).unwrap();
        check(&p).unwrap_or_else(|e| panic!("{agent}: {e}\n{p}"));
    }
    let minimal = ProfileInputs {
        read_write: vec![],
        read_only: vec![],
        ..inputs("carol", Network::Deny)
    };
    check(&render(&minimal).unwrap()).unwrap();
}

#[test]
fn malicious_inputs_are_refused_before_the_parser() {
    let mut i = inputs("mallory", Network::Deny);
    i.agent = "x { /** rwx, } profile y".into();
    assert!(render(&i).is_err());
    let mut i = inputs("mallory", Network::Deny);
    i.read_write.push("/w\" rwx,\n  \"/**".into());
    assert!(render(&i).is_err());
    let mut i = inputs("mallory", Network::Deny);
    i.store = "/var/lib/clawfs/*".into();
    assert!(render(&i).is_err());
}

#[test]
fn a_broken_template_is_caught_with_its_line() {
    if !parser_or_skip("a_broken_template_is_caught_with_its_line") {
        return;
    }
    // A rule without its trailing comma, on a known line.
    let broken = TEMPLATE.replacen("  deny ptrace,", "  deny ptrace", 1);
    let p = render_template(&broken, &inputs("alice", Network::Deny)).unwrap();
    let ptrace_line = p.lines().position(|l| l == "  deny ptrace").unwrap() + 1;
    match check(&p) {
        Err(CheckError::Refused { line, message, .. }) => {
            eprintln!("{message}");
            // The parser reports the line where the missing comma becomes an error: this or the
            // next rule.
            let line = line.expect("a line number");
            assert!(
                line == ptrace_line || line == ptrace_line + 1,
                "line {line}, expected {ptrace_line}: {message}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A broken rule: an unknown permission.
    let broken = TEMPLATE.replacen("  /usr/ r,", "  /usr/ rq,", 1);
    let p = render_template(&broken, &inputs("alice", Network::Deny)).unwrap();
    let want = p.lines().position(|l| l == "  /usr/ rq,").unwrap() + 1;
    let err = check(&p).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, CheckError::Refused { line: Some(l), ref text, .. } if l == want && text == "/usr/ rq,"),
        "{msg}"
    );
    assert!(msg.contains(&format!("at line {want}")), "{msg}");
}

#[test]
fn availability_on_this_host() {
    let a = availability();
    let text = a.to_string();
    eprintln!("{text}");
    if a.active() {
        assert!(!text.starts_with("not available"), "{text}");
        return;
    }
    assert!(text.starts_with("not available on this host: "), "{text}");
    // Nowhere to switch profile: applying must fail, never pretend.
    let onexec = OnExec::new("alice").unwrap();
    assert_eq!(onexec.command(), b"exec clawfs-agent-alice");
    assert!(onexec.apply().is_err());
}
