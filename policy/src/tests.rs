//! Tests of the policy: the shipped default, every rule's allow and deny path, moves, quotas,
//! and the one-pass error report.

use super::*;
use clawfs_store::names::DEFAULT_AGENTS;

const ALL: [Access; 5] = [
    Access::Read,
    Access::List,
    Access::Write,
    Access::Create,
    Access::Delete,
];
const WRITES: [Access; 3] = [Access::Write, Access::Create, Access::Delete];

const TEST_POLICY: &str = r#"
version = 1
users = "posix"
admins = [1500]

[defaults]
protected = [".git", ".obsidian", ".smarthole"]
quota = { bytes = "1GiB", files = 100000 }
workspaces = { default = "read" }

[agents.fs-engine]
uid = 61006
gid = 61006
workspaces = { default = "read-write", project-alpha = "read" }
secrets = ["openai-api-key"]
quota = { bytes = "512MiB" }

[agents.observability]
uid = 61007
read_agents = ["fs-engine"]

[agents.wasm-agent]
uid = 61005
tools = "read-write"
workspaces = { "*" = "read", default = "none" }

[uids]
1001 = "fs-engine"
"#;

fn policy() -> Policy {
    Policy::parse(TEST_POLICY).unwrap_or_else(|e| panic!("test policy invalid: {e:?}"))
}

fn p(s: &str) -> NsPath {
    NsPath::parse(s).unwrap()
}

fn agent(name: &str) -> Identity {
    Identity::Agent(AgentName::new(name).unwrap())
}

#[track_caller]
fn allowed(pol: &Policy, who: &Identity, access: Access, path: &str) {
    if let Err(d) = pol.check(who, access, &p(path)) {
        panic!("{who} {access} {path} refused: {d:?}");
    }
}

#[track_caller]
fn denied(pol: &Policy, who: &Identity, access: Access, path: &str, rule: &str, kind: DenyKind) {
    match pol.check(who, access, &p(path)) {
        Ok(()) => panic!("{who} {access} {path} allowed, expected {rule}"),
        Err(d) => {
            assert_eq!(
                (d.rule, d.kind),
                (rule, kind),
                "{who} {access} {path}: {d:?}"
            );
            assert!(
                d.reason.ends_with(&format!("({rule})")),
                "reason must cite its rule: {}",
                d.reason
            );
        }
    }
}

fn parse_errors(text: &str) -> Vec<PolicyError> {
    match Policy::parse(text) {
        Ok(_) => panic!("policy accepted:\n{text}"),
        Err(e) => e,
    }
}

// ------------------------------------------------------------------------------------------
// The default policy and identities
// ------------------------------------------------------------------------------------------

#[test]
fn default_policy_parses_with_the_roster() {
    let pol = Policy::default_policy();
    let names: Vec<&str> = pol.agents().map(|a| a.name.as_str()).collect();
    let mut roster = DEFAULT_AGENTS.to_vec();
    roster.sort();
    assert_eq!(names, roster);
    let mut uids: Vec<u32> = pol.agents().map(|a| a.uid.unwrap()).collect();
    uids.dedup();
    assert_eq!(uids.len(), 8);
    for a in pol.agents() {
        assert!(!a.allow_root);
        assert_ne!(a.run_as(), Some((0, 0)));
        assert_eq!(
            a.quota,
            Quota {
                bytes: 1 << 30,
                files: 100_000
            }
        );
    }
    assert_eq!(pol.users(), UsersMode::Posix);
    assert_eq!(pol.protected(), [".git", ".obsidian", ".smarthole"]);
    let fs = AgentName::new("fs-engine").unwrap();
    assert_eq!(pol.workspace_grant(&fs, "default"), Grant::ReadWrite);
    assert_eq!(pol.workspace_grant(&fs, "project-alpha"), Grant::None);
    let obs = agent("observability");
    allowed(&pol, &obs, Access::Read, "/agents/fs-engine/state.json");
    denied(
        &pol,
        &obs,
        Access::Write,
        "/agents/fs-engine/state.json",
        rule::RULE_001,
        DenyKind::Access,
    );
    denied(
        &pol,
        &agent("fs-engine"),
        Access::Read,
        "/agents/observability/state.json",
        rule::AGENT_READ,
        DenyKind::Access,
    );
}

#[test]
fn identities_follow_rules_two_then_three() {
    let pol = policy();
    let fs = Identity::Agent(AgentName::new("fs-engine").unwrap());
    assert_eq!(pol.identity_for_uid(61006, 1000), fs);
    assert_eq!(pol.identity_for_uid(1001, 1000), fs);
    assert_eq!(pol.identity_for_uid(61007, 1000), agent("observability"));
    assert_eq!(pol.identity_for_uid(0, 1000), Identity::Admin);
    assert_eq!(pol.identity_for_uid(1000, 1000), Identity::Admin);
    assert_eq!(pol.identity_for_uid(1500, 1000), Identity::Admin);
    assert_eq!(
        pol.identity_for_uid(4242, 1000),
        Identity::User { uid: 4242 }
    );
    // A mapped uid is the agent even when it owns the store: rule 2 comes before rule 3.
    assert_eq!(pol.identity_for_uid(1001, 1001), fs);
    assert_eq!(
        pol.agent_for_uid(61005).map(AgentName::as_str),
        Some("wasm-agent")
    );
}

#[test]
fn agent_names_are_validated() {
    assert!(AgentName::new("fs-engine").is_ok());
    for bad in ["", "FS", "fs_engine", "-fs", "self", "a/b", ".."] {
        assert!(AgentName::new(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn agent_spec_queries() {
    let pol = policy();
    let fs = AgentName::new("fs-engine").unwrap();
    let spec = pol.agent(&fs).unwrap();
    assert_eq!(spec.run_as(), Some((61006, 61006)));
    assert_eq!(
        pol.secrets_for(&fs).collect::<Vec<_>>(),
        vec!["openai-api-key"]
    );
    assert_eq!(
        pol.quota(&fs),
        Quota {
            bytes: 512 << 20,
            files: 100_000
        }
    );
    let obs = AgentName::new("observability").unwrap();
    assert_eq!(pol.agent(&obs).unwrap().run_as(), Some((61007, 61007)));
    assert_eq!(pol.secrets_for(&obs).count(), 0);
    let ghost = AgentName::new("ghost").unwrap();
    assert!(pol.agent(&ghost).is_none());
    assert_eq!(pol.quota(&ghost), Quota::NONE);
    assert_eq!(pol.agents().len(), 3);
}

// ------------------------------------------------------------------------------------------
// Admins and ordinary users
// ------------------------------------------------------------------------------------------

#[test]
fn admins_get_posix_only() {
    let pol = policy();
    for path in [
        "/",
        "/vault/master-key.enc",
        "/agents/fs-engine/logs/agent-2026-01-01.log",
        "/workspaces/default/.git/config",
        "/system/policy.toml",
    ] {
        for a in ALL {
            allowed(&pol, &Identity::Admin, a, path);
        }
    }
}

#[test]
fn users_modes() {
    let user = Identity::User { uid: 4242 };
    let posix = policy();
    for a in ALL {
        allowed(&posix, &user, a, "/workspaces/default/.git/HEAD");
        allowed(&posix, &user, a, "/agents/fs-engine/notes.md");
    }

    let ro =
        Policy::parse(&TEST_POLICY.replace("users = \"posix\"", "users = \"read-only\"")).unwrap();
    assert_eq!(ro.users(), UsersMode::ReadOnly);
    for path in [
        "/workspaces/default/a.md",
        "/agents/fs-engine",
        "/tools/x",
        "/vault",
    ] {
        allowed(&ro, &user, Access::Read, path);
        allowed(&ro, &user, Access::List, path);
        for a in WRITES {
            denied(&ro, &user, a, path, rule::USERS_MODE, DenyKind::ReadOnly);
        }
    }
    allowed(&ro, &user, Access::List, "/");
    allowed(&ro, &user, Access::Read, "/specs/p1/P1.4-clawfs-spec.md");

    let none =
        Policy::parse(&TEST_POLICY.replace("users = \"posix\"", "users = \"none\"")).unwrap();
    for path in [
        "/workspaces",
        "/workspaces/default/a.md",
        "/agents/x",
        "/vault/secrets",
    ] {
        for a in ALL {
            denied(&none, &user, a, path, rule::USERS_MODE, DenyKind::Access);
        }
    }
    allowed(&none, &user, Access::List, "/");
    allowed(&none, &user, Access::Read, "/system/policy.toml");
    allowed(&none, &user, Access::List, "/specs");
    // Admins are untouched by the users mode.
    allowed(
        &none,
        &Identity::Admin,
        Access::Write,
        "/workspaces/default/a.md",
    );
}

// ------------------------------------------------------------------------------------------
// Agents
// ------------------------------------------------------------------------------------------

#[test]
fn unknown_agents_are_refused_everything() {
    let pol = policy();
    let ghost = agent("ghost");
    for a in ALL {
        denied(&pol, &ghost, a, "/", rule::UNKNOWN_AGENT, DenyKind::Access);
        denied(
            &pol,
            &ghost,
            a,
            "/agents/ghost/x",
            rule::UNKNOWN_AGENT,
            DenyKind::Access,
        );
    }
}

#[test]
fn mount_root_and_area_roots() {
    let pol = policy();
    let fs = agent("fs-engine");
    for path in [
        "/",
        "/agents",
        "/workspaces",
        "/vault",
        "/tools",
        "/system",
        "/specs",
    ] {
        allowed(&pol, &fs, Access::List, path);
        allowed(&pol, &fs, Access::Read, path);
    }
    for a in WRITES {
        denied(&pol, &fs, a, "/", rule::NAMESPACE, DenyKind::Permission);
        denied(
            &pol,
            &fs,
            a,
            "/extra",
            rule::NAMESPACE,
            DenyKind::Permission,
        );
        denied(
            &pol,
            &fs,
            a,
            "/workspaces",
            rule::NAMESPACE,
            DenyKind::Permission,
        );
        denied(
            &pol,
            &fs,
            a,
            "/vault",
            rule::NAMESPACE,
            DenyKind::Permission,
        );
        denied(
            &pol,
            &fs,
            a,
            "/tools",
            rule::NAMESPACE,
            DenyKind::Permission,
        );
        denied(&pol, &fs, a, "/agents", rule::RULE_001, DenyKind::Access);
        denied(
            &pol,
            &fs,
            a,
            "/system",
            rule::READ_ONLY_ROOT,
            DenyKind::ReadOnly,
        );
    }
    denied(
        &pol,
        &fs,
        Access::Read,
        "/extra",
        rule::NAMESPACE,
        DenyKind::Permission,
    );
}

#[test]
fn own_directory_is_read_write() {
    let pol = policy();
    let fs = agent("fs-engine");
    for path in [
        "/agents/fs-engine/state.json",
        "/agents/fs-engine/identity.json",
        "/agents/fs-engine/cache/a/b",
        "/agents/fs-engine/denials-notes.md",
        "/agents/fs-engine/logsbook",
    ] {
        for a in ALL {
            allowed(&pol, &fs, a, path);
        }
    }
    for a in [Access::Read, Access::List, Access::Write] {
        allowed(&pol, &fs, a, "/agents/fs-engine");
    }
    for a in [Access::Create, Access::Delete] {
        denied(
            &pol,
            &fs,
            a,
            "/agents/fs-engine",
            rule::RULE_001,
            DenyKind::Permission,
        );
    }
}

#[test]
fn own_logs_and_denials_are_read_only() {
    let pol = policy();
    let fs = agent("fs-engine");
    for path in [
        "/agents/fs-engine/logs",
        "/agents/fs-engine/logs/agent-2026-01-01.log",
        "/agents/fs-engine/denials",
    ] {
        allowed(&pol, &fs, Access::Read, path);
        allowed(&pol, &fs, Access::List, path);
        for a in WRITES {
            denied(&pol, &fs, a, path, rule::AGENT_LOGS, DenyKind::Permission);
        }
    }
}

#[test]
fn other_agents_directories() {
    let pol = policy();
    let fs = agent("fs-engine");
    let obs = agent("observability");
    // fs-engine has no read_agents: nothing of observability's.
    for a in [Access::Read, Access::List] {
        denied(
            &pol,
            &fs,
            a,
            "/agents/observability/state.json",
            rule::AGENT_READ,
            DenyKind::Access,
        );
        denied(
            &pol,
            &fs,
            a,
            "/agents/observability",
            rule::AGENT_READ,
            DenyKind::Access,
        );
    }
    for a in WRITES {
        denied(
            &pol,
            &fs,
            a,
            "/agents/observability/state.json",
            rule::RULE_001,
            DenyKind::Access,
        );
        denied(
            &pol,
            &fs,
            a,
            "/agents/newcomer",
            rule::RULE_001,
            DenyKind::Access,
        );
    }
    // observability reads fs-engine (read_agents) but writes nothing there, logs included.
    allowed(
        &pol,
        &obs,
        Access::Read,
        "/agents/fs-engine/logs/agent-2026-01-01.log",
    );
    allowed(&pol, &obs, Access::List, "/agents/fs-engine");
    for a in WRITES {
        denied(
            &pol,
            &obs,
            a,
            "/agents/fs-engine/notes.md",
            rule::RULE_001,
            DenyKind::Access,
        );
    }
    denied(
        &pol,
        &obs,
        Access::Read,
        "/agents/wasm-agent/state.json",
        rule::AGENT_READ,
        DenyKind::Access,
    );
    // read_other_agents opens every agent to every agent, for reading only.
    let open = Policy::parse(
        &TEST_POLICY.replace("[defaults]\n", "[defaults]\nread_other_agents = true\n"),
    )
    .unwrap();
    allowed(&open, &fs, Access::Read, "/agents/observability/state.json");
    allowed(&open, &fs, Access::List, "/agents/unlisted-agent");
    denied(
        &open,
        &fs,
        Access::Write,
        "/agents/observability/state.json",
        rule::RULE_001,
        DenyKind::Access,
    );
}

#[test]
fn self_file_is_readable() {
    let pol = policy();
    let fs = agent("fs-engine");
    allowed(&pol, &fs, Access::Read, "/agents/self");
    for a in WRITES {
        denied(
            &pol,
            &fs,
            a,
            "/agents/self",
            rule::NAMESPACE,
            DenyKind::Permission,
        );
    }
}

#[test]
fn system_and_specs_are_read_only() {
    let pol = policy();
    let fs = agent("fs-engine");
    for path in [
        "/system/policy.toml",
        "/system/seccomp/whitelist.json",
        "/specs/p1/P1.4-clawfs-spec.md",
        "/specs/signatures.json",
    ] {
        allowed(&pol, &fs, Access::Read, path);
        allowed(&pol, &fs, Access::List, path);
        for a in WRITES {
            denied(&pol, &fs, a, path, rule::READ_ONLY_ROOT, DenyKind::ReadOnly);
        }
    }
}

#[test]
fn tools_are_read_only_but_callable() {
    let pol = policy();
    let fs = agent("fs-engine");
    for path in [
        "/tools/registry.json",
        "/tools/definitions/tool-search.json",
        "/tools/call",
        "/tools/call/search",
        "/tools/responses/42.json",
    ] {
        allowed(&pol, &fs, Access::Read, path);
        allowed(&pol, &fs, Access::List, path);
    }
    for a in WRITES {
        denied(
            &pol,
            &fs,
            a,
            "/tools/registry.json",
            rule::READ_ONLY_ROOT,
            DenyKind::ReadOnly,
        );
        denied(
            &pol,
            &fs,
            a,
            "/tools/definitions/tool-x.json",
            rule::READ_ONLY_ROOT,
            DenyKind::ReadOnly,
        );
        denied(
            &pol,
            &fs,
            a,
            "/tools/call",
            rule::READ_ONLY_ROOT,
            DenyKind::ReadOnly,
        );
        allowed(&pol, &fs, a, "/tools/requests/42.json");
    }
    allowed(&pol, &fs, Access::Write, "/tools/call/search");
    for a in [Access::Create, Access::Delete] {
        denied(
            &pol,
            &fs,
            a,
            "/tools/call/search",
            rule::READ_ONLY_ROOT,
            DenyKind::ReadOnly,
        );
    }
    allowed(&pol, &fs, Access::Delete, "/tools/responses/42.json");
    for a in [Access::Create, Access::Write] {
        denied(
            &pol,
            &fs,
            a,
            "/tools/responses/42.json",
            rule::READ_ONLY_ROOT,
            DenyKind::ReadOnly,
        );
    }
    // tools = "read-write" (wasm-agent here) opens the rest of /tools, not the area root.
    let wasm = agent("wasm-agent");
    for a in WRITES {
        allowed(&pol, &wasm, a, "/tools/binaries/x-v1.0.0.wasm");
        denied(
            &pol,
            &wasm,
            a,
            "/tools",
            rule::NAMESPACE,
            DenyKind::Permission,
        );
    }
}

#[test]
fn workspace_grants() {
    let pol = policy();
    let fs = agent("fs-engine");
    let obs = agent("observability");
    let wasm = agent("wasm-agent");
    // read-write
    for a in ALL {
        allowed(&pol, &fs, a, "/workspaces/default/notes/Project Plan.md");
    }
    for a in [Access::Read, Access::List, Access::Write] {
        allowed(&pol, &fs, a, "/workspaces/default");
    }
    // read
    for who in [&fs, &obs] {
        let ws = if *who == fs {
            "/workspaces/project-alpha/a.md"
        } else {
            "/workspaces/default/a.md"
        };
        allowed(&pol, who, Access::Read, ws);
        allowed(&pol, who, Access::List, ws);
        for a in WRITES {
            denied(&pol, who, a, ws, rule::WORKSPACE_GRANT, DenyKind::ReadOnly);
        }
    }
    // none (no entry, no "*", nothing in [defaults] for it)
    for a in ALL {
        denied(
            &pol,
            &fs,
            a,
            "/workspaces/project-beta/a.md",
            rule::WORKSPACE_GRANT,
            DenyKind::Access,
        );
    }
    for a in [Access::Read, Access::List] {
        denied(
            &pol,
            &fs,
            a,
            "/workspaces/project-beta",
            rule::WORKSPACE_GRANT,
            DenyKind::Access,
        );
    }
    // "*" covers unnamed workspaces; an explicit "none" beats both "*" and [defaults].
    allowed(&pol, &wasm, Access::Read, "/workspaces/project-beta/a.md");
    denied(
        &pol,
        &wasm,
        Access::Read,
        "/workspaces/default/a.md",
        rule::WORKSPACE_GRANT,
        DenyKind::Access,
    );
    // Whole workspaces are created and removed by admins and users only.
    for a in [Access::Create, Access::Delete] {
        denied(
            &pol,
            &fs,
            a,
            "/workspaces/default",
            rule::WORKSPACE_ROOT,
            DenyKind::Permission,
        );
        denied(
            &pol,
            &fs,
            a,
            "/workspaces/new-one",
            rule::WORKSPACE_ROOT,
            DenyKind::Permission,
        );
    }
}

#[test]
fn vault_grants() {
    let pol = policy();
    let fs = agent("fs-engine");
    let obs = agent("observability");
    for who in [&fs, &obs] {
        allowed(&pol, who, Access::List, "/vault");
        allowed(&pol, who, Access::List, "/vault/secrets");
    }
    allowed(&pol, &fs, Access::Read, "/vault/secrets/openai-api-key");
    allowed(&pol, &fs, Access::Read, "/vault/secrets/openai-api-key.enc");
    for (who, path) in [
        (&fs, "/vault/secrets/github-pat"),
        (&fs, "/vault/secrets/github-pat.enc"),
        (&obs, "/vault/secrets/openai-api-key"),
        (&fs, "/vault/master-key.enc"),
        (&fs, "/vault/archive/old.enc"),
        (&fs, "/vault/archive"),
        (&fs, "/vault/secrets/openai-api-key/x"),
    ] {
        denied(
            &pol,
            who,
            Access::Read,
            path,
            rule::VAULT_GRANT,
            DenyKind::Access,
        );
    }
    for a in WRITES {
        denied(
            &pol,
            &fs,
            a,
            "/vault/secrets/openai-api-key",
            rule::VAULT_GRANT,
            DenyKind::Access,
        );
        denied(
            &pol,
            &fs,
            a,
            "/vault/secrets",
            rule::VAULT_GRANT,
            DenyKind::Access,
        );
    }
    denied(
        &pol,
        &fs,
        Access::List,
        "/vault/secrets/openai-api-key",
        rule::VAULT_GRANT,
        DenyKind::Access,
    );
}

#[test]
fn protected_names_in_every_case() {
    let pol = policy();
    let fs = agent("fs-engine");
    // `.git` is guarded rather than protected: see `git_guard_*` below.
    let variants = [
        ".obsidian",
        ".Obsidian",
        ".OBSIDIAN",
        ".smarthole",
        ".SmartHole",
        ".SMARTHOLE",
        ".clawfs",
        ".ClawFS",
        ".CLAWFS-index",
        ".clawfs.db",
    ];
    for v in variants {
        for path in [
            format!("/workspaces/default/{v}"),
            format!("/workspaces/default/{v}/config"),
            format!("/workspaces/default/sub/{v}/x"),
            format!("/agents/fs-engine/{v}/HEAD"),
            format!("/tools/{v}"),
        ] {
            for a in ALL {
                denied(&pol, &fs, a, &path, rule::PROTECTED, DenyKind::Permission);
            }
        }
    }
    // Only whole components match.
    for path in [
        "/workspaces/default/.gitignore",
        "/workspaces/default/git/x",
        "/workspaces/default/my.git",
        "/workspaces/default/obsidian",
        "/workspaces/default/x.clawfs",
    ] {
        for a in ALL {
            allowed(&pol, &fs, a, path);
        }
    }
    assert_eq!(pol.protected_match(".GIT"), Some(".git"));
    assert_eq!(pol.protected_match(".clawfs-x"), Some(".clawfs"));
    assert_eq!(pol.protected_match("git"), None);
    // An empty list leaves only ClawFS's own names.
    let bare = Policy::parse(&TEST_POLICY.replace(
        "protected = [\".git\", \".obsidian\", \".smarthole\"]",
        "protected = []",
    ))
    .unwrap();
    allowed(&bare, &fs, Access::Read, "/workspaces/default/.git/config");
    denied(
        &bare,
        &fs,
        Access::Read,
        "/workspaces/default/.ClawFS",
        rule::PROTECTED,
        DenyKind::Permission,
    );
    // Without [defaults] protected, the three usual names apply.
    let implicit = Policy::parse("version = 1\n[agents.a]\nuid = 5000\n").unwrap();
    assert_eq!(implicit.protected(), [".git", ".obsidian", ".smarthole"]);
}

// ------------------------------------------------------------------------------------------
// Moves, links, quotas
// ------------------------------------------------------------------------------------------

#[test]
fn moves_need_delete_at_source_and_create_at_destination() {
    let pol = policy();
    let fs = agent("fs-engine");
    let mv = |from: &str, to: &str| pol.check_move(&fs, &p(from), &p(to));
    assert!(mv("/agents/fs-engine/a", "/agents/fs-engine/b").is_ok());
    assert!(mv("/workspaces/default/a", "/agents/fs-engine/a").is_ok());
    assert!(mv("/agents/fs-engine/a", "/workspaces/default/a").is_ok());
    let cases = [
        // out of a read-only workspace
        (
            "/workspaces/project-alpha/a",
            "/agents/fs-engine/a",
            rule::WORKSPACE_GRANT,
        ),
        // into another agent's directory
        (
            "/agents/fs-engine/a",
            "/agents/observability/a",
            rule::RULE_001,
        ),
        // out of another agent's directory
        (
            "/agents/observability/a",
            "/agents/fs-engine/a",
            rule::RULE_001,
        ),
        // into or out of logs
        (
            "/agents/fs-engine/a",
            "/agents/fs-engine/logs/a",
            rule::AGENT_LOGS,
        ),
        (
            "/agents/fs-engine/logs/agent-2026-01-01.log",
            "/agents/fs-engine/a",
            rule::AGENT_LOGS,
        ),
        // onto the denials file
        (
            "/agents/fs-engine/a",
            "/agents/fs-engine/denials",
            rule::AGENT_LOGS,
        ),
        // into or out of a protected folder, whatever its case
        (
            "/workspaces/default/a",
            "/workspaces/default/.Git/HOOKS/a",
            rule::PROTECTED,
        ),
        (
            "/workspaces/default/.OBSIDIAN/a",
            "/workspaces/default/a",
            rule::PROTECTED,
        ),
        // renaming a whole workspace
        (
            "/workspaces/default",
            "/workspaces/renamed",
            rule::WORKSPACE_ROOT,
        ),
        // into the vault or read-only roots
        ("/agents/fs-engine/a", "/vault/secrets/a", rule::VAULT_GRANT),
        (
            "/agents/fs-engine/a",
            "/system/policy.toml",
            rule::READ_ONLY_ROOT,
        ),
    ];
    for (from, to, rule) in cases {
        let d = mv(from, to).expect_err(&format!("{from} -> {to} allowed"));
        assert_eq!(d.rule, rule, "{from} -> {to}: {d:?}");
    }
    // Admins move anything (POSIX decides).
    assert!(pol
        .check_move(
            &Identity::Admin,
            &p("/workspaces/default"),
            &p("/workspaces/x")
        )
        .is_ok());
}

#[test]
fn links_need_write_at_source() {
    let pol = policy();
    let fs = agent("fs-engine");
    let ln = |from: &str, to: &str| pol.check_link(&fs, &p(from), &p(to));
    assert!(ln("/workspaces/default/a", "/agents/fs-engine/a").is_ok());
    // A link to a read-only file would make it writable through the new name.
    let d = ln("/workspaces/project-alpha/a", "/agents/fs-engine/a").unwrap_err();
    assert_eq!(
        (d.rule, d.kind),
        (rule::WORKSPACE_GRANT, DenyKind::ReadOnly)
    );
    let d = ln("/agents/fs-engine/logs/l", "/agents/fs-engine/a").unwrap_err();
    assert_eq!(d.rule, rule::AGENT_LOGS);
    let d = ln("/agents/fs-engine/a", "/agents/observability/a").unwrap_err();
    assert_eq!(d.rule, rule::RULE_001);
}

#[test]
fn quotas() {
    let pol = policy();
    let fs = agent("fs-engine");
    let q = |bytes, files| Quota { bytes, files };
    let limit = 512 << 20;
    assert!(pol.check_quota(&fs, q(0, 0), q(limit, 1)).is_ok());
    assert!(pol
        .check_quota(&fs, q(limit - 10, 99_999), q(10, 1))
        .is_ok());
    let d = pol
        .check_quota(&fs, q(limit - 10, 0), q(11, 0))
        .unwrap_err();
    assert_eq!((d.rule, d.kind), (rule::QUOTA, DenyKind::Quota));
    let d = pol.check_quota(&fs, q(0, 100_000), q(0, 1)).unwrap_err();
    assert_eq!((d.rule, d.kind), (rule::QUOTA, DenyKind::Quota));
    // Over quota already (lowered by a reload): shrinking and deleting still work.
    assert!(pol.check_quota(&fs, q(limit * 2, 200_000), q(0, 0)).is_ok());
    // No overflow at the top of the range.
    assert!(pol.check_quota(&fs, q(u64::MAX, 0), q(1, 0)).is_err());
    // Admins and users have no ClawFS quota.
    assert!(pol
        .check_quota(&Identity::Admin, q(u64::MAX, u64::MAX), q(1, 1))
        .is_ok());
    assert!(pol
        .check_quota(&Identity::User { uid: 7 }, q(u64::MAX, 0), q(1, 0))
        .is_ok());
    // Unlimited fields.
    let free = Policy::parse("version = 1\n[agents.a]\nuid = 5000\nquota = { bytes = \"unlimited\", files = \"unlimited\" }\n").unwrap();
    assert!(free
        .check_quota(&agent("a"), q(u64::MAX - 1, u64::MAX - 1), q(0, 0))
        .is_ok());
    assert_eq!(free.quota(&AgentName::new("a").unwrap()), Quota::NONE);
}

#[test]
fn denial_reasons_are_actionable() {
    let pol = policy();
    let d = pol
        .check(
            &agent("fs-engine"),
            Access::Write,
            &p("/agents/observability/x"),
        )
        .unwrap_err();
    assert!(d.reason.contains("/agents/fs-engine/"), "{}", d.reason);
    assert_eq!(d.to_string(), d.reason);
    let d = pol
        .check(
            &agent("fs-engine"),
            Access::Write,
            &p("/workspaces/default/.Git/config"),
        )
        .unwrap_err();
    assert!(d.reason.contains(".Git"), "{}", d.reason);
}

// ------------------------------------------------------------------------------------------
// Parsing and error reports
// ------------------------------------------------------------------------------------------

#[track_caller]
fn one_error(text: &str, line: usize, needle: &str) {
    let errs = parse_errors(text);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].line, line, "{errs:#?}");
    assert!(
        errs[0].message.contains(needle),
        "{:?} lacks {needle:?}",
        errs[0].message
    );
}

#[test]
fn each_mistake_is_reported_where_it_is() {
    one_error("users = \"posix\"\n", 1, "missing `version = 1`");
    one_error("version = 2\n", 1, "unsupported policy version");
    one_error("version = 1\ncolour = \"red\"\n", 2, "unknown key 'colour'");
    one_error(
        "version = 1\nusers = \"everyone\"\n",
        2,
        "expected \"posix\", \"read-only\" or \"none\"",
    );
    one_error(
        "version = 1\nusers = 3\n",
        2,
        "must be a string, not integer",
    );
    one_error(
        "version = 1\nadmins = [-1]\n",
        2,
        "between 0 and 4294967294",
    );
    one_error(
        "version = 1\n[defaults]\nquota = { bytes = \"1G\" }\n",
        3,
        "invalid size",
    );
    one_error(
        "version = 1\n[defaults]\nquota = { byts = 1 }\n",
        3,
        "unknown key 'byts'",
    );
    one_error(
        "version = 1\n[defaults]\nprotected = [\"a/b\"]\n",
        3,
        "single file or folder",
    );
    one_error(
        "version = 1\n[defaults]\nprotected = [\".git\", \".GIT\"]\n",
        3,
        "listed twice",
    );
    one_error(
        "version = 1\n[agents.Bad_Name]\n",
        2,
        "agent name 'Bad_Name' is invalid",
    );
    one_error("version = 1\n[agents.self]\n", 2, "reserved");
    one_error("version = 1\n[agents.a]\nuid = 0\n", 3, "allow_root");
    one_error(
        "version = 1\n[agents.a]\nuid = 5\ngid = 0\n",
        4,
        "allow_root",
    );
    one_error(
        "version = 1\n[agents.a]\nuid = 5\nwhatever = 1\n",
        4,
        "unknown key 'whatever' in [agents.a]",
    );
    one_error(
        "version = 1\n[agents.a]\nworkspaces = { default = \"write\" }\n",
        3,
        "unknown access level \"write\"",
    );
    one_error(
        "version = 1\n[agents.a]\nworkspaces = { Project = \"read\" }\n",
        3,
        "workspace name 'Project'",
    );
    one_error(
        "version = 1\n[agents.a]\nworkspaces = { vault = \"read\" }\n",
        3,
        "reserved",
    );
    one_error(
        "version = 1\n[agents.a]\ntools = \"none\"\n",
        3,
        "expected \"read\" or \"read-write\"",
    );
    one_error(
        "version = 1\n[agents.a]\nsecrets = [\"My Key\"]\n",
        3,
        "secret id 'My Key'",
    );
    one_error(
        "version = 1\n[agents.a]\nread_agents = [\"b\"]\n",
        3,
        "unknown agent 'b'",
    );
    one_error(
        "version = 1\n[agents.a]\nuid = 5000\n[agents.b]\nuid = 5000\n",
        5,
        "already agent a's uid",
    );
    one_error(
        "version = 1\n[agents.a]\nuid = 5000\n[uids]\n1001 = \"b\"\n",
        5,
        "unknown agent 'b'",
    );
    one_error("version = 1\n[agents.a]\n[uids]\n0 = \"a\"\n", 4, "uid 0");
    one_error(
        "version = 1\n[agents.a]\n[uids]\nalice = \"a\"\n",
        4,
        "not a uid",
    );
    one_error(
        "version = 1\n[agents.a]\nuid = 5000\n[agents.b]\nuid = 5001\n[uids]\n5000 = \"b\"\n",
        7,
        "agent a's uid",
    );
    one_error(
        "version = 1\nadmins = [5000]\n[agents.a]\nuid = 5000\n",
        2,
        "also agent a's uid",
    );
    one_error("version = 1\nversion = 1\n", 2, "TOML syntax");
    one_error(
        "version = 1\n[agents]\nfs-engine = 3\n",
        3,
        "must be a table",
    );
}

#[test]
fn root_is_allowed_when_the_policy_says_so() {
    let pol =
        Policy::parse("version = 1\n[agents.a]\nuid = 0\ngid = 0\nallow_root = true\n").unwrap();
    let a = pol.agent(&AgentName::new("a").unwrap()).unwrap();
    assert!(a.allow_root);
    assert_eq!(a.run_as(), Some((0, 0)));
    // Root outside an agent cgroup is still the admin: uid 0 never maps to an agent.
    assert_eq!(pol.identity_for_uid(0, 1000), Identity::Admin);
    assert_eq!(pol.agent_for_uid(0), None);
}

#[test]
fn five_mistakes_give_five_errors_with_lines() {
    let text = r#"version = 1
users = "sometimes"

[defaults]
quota = { bytes = "lots" }

[agents.Fs-Engine]
uid = 61006

[agents.observability]
uid = 0
workspaces = { default = "write" }
"#;
    let errs = parse_errors(text);
    let lines: Vec<usize> = errs.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 5, 7, 11, 12], "{errs:#?}");
    assert_eq!((errs[0].line, errs[0].column), (2, 9));
    assert!(errs[0].message.contains("users mode"));
    assert!(errs[1].message.contains("invalid size"));
    assert!(errs[2].message.contains("agent name 'Fs-Engine'"));
    assert!(errs[3].message.contains("allow_root"));
    assert!(errs[4].message.contains("unknown access level"));
    assert_eq!(errs[0].to_string(), format!("2:9: {}", errs[0].message));
}

#[test]
fn integers_in_any_toml_spelling() {
    let pol = Policy::parse(
        "version = 1\n[agents.a]\nuid = 61_001\ngid = 0xEE49\nquota = { bytes = 1_000, files = 0o17 }\n",
    )
    .unwrap();
    let a = pol.agent(&AgentName::new("a").unwrap()).unwrap();
    assert_eq!(a.run_as(), Some((61001, 61001)));
    assert_eq!(
        a.quota,
        Quota {
            bytes: 1000,
            files: 15
        }
    );
}

#[test]
fn load_reports_io_and_invalid_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    assert!(matches!(
        Policy::load(&missing),
        Err(PolicyLoadError::Io { .. })
    ));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "version = 1\nusers = \"x\"\nfoo = 1\n").unwrap();
    match Policy::load(&bad) {
        Err(PolicyLoadError::Invalid { errors, path }) => {
            assert_eq!(path, bad);
            assert_eq!(errors.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    let good = dir.path().join("good.toml");
    std::fs::write(&good, DEFAULT_POLICY_TOML).unwrap();
    assert_eq!(Policy::load(&good).unwrap(), Policy::default_policy());
}

// ------------------------------------------------------------------------------------------
// Properties: no input panics the parser or the decision
// ------------------------------------------------------------------------------------------

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC{0,400}") {
            let _ = Policy::parse(&text);
        }

        /// The default policy with one line replaced by junk: errors have real positions.
        #[test]
        fn edited_default_reports_positions(line in 0usize..60, junk in "[ -~]{0,40}") {
            let mut lines: Vec<&str> = DEFAULT_POLICY_TOML.lines().collect();
            let at = line.min(lines.len() - 1);
            lines[at] = &junk;
            let text = lines.join("\n");
            if let Err(errs) = Policy::parse(&text) {
                prop_assert!(!errs.is_empty());
                for e in errs {
                    prop_assert!(e.line >= 1 && e.line <= lines.len().max(1) + 1, "{e:?}");
                    prop_assert!(e.column >= 1);
                }
            }
        }

        #[test]
        fn check_never_panics(
            parts in proptest::collection::vec("[a-zA-Z0-9 ._-]{1,12}", 0..6),
            who in 0usize..5,
            access in 0usize..5,
        ) {
            let pol = policy();
            let ids = [
                Identity::Admin,
                Identity::User { uid: 9 },
                agent("fs-engine"),
                agent("observability"),
                agent("ghost"),
            ];
            if let Ok(path) = NsPath::from_components(parts.iter().map(String::as_str)) {
                let _ = pol.check(&ids[who], ALL[access], &path);
            }
        }

        /// Any letter case of a protected name is refused, anywhere below a workspace.
        #[test]
        fn protected_in_any_case(mask in any::<u16>(), which in 0usize..4, depth in 0usize..3) {
            let base = [".git", ".obsidian", ".smarthole", ".clawfs-index"][which];
            let name: String = base
                .chars()
                .enumerate()
                .map(|(i, c)| if mask & (1 << (i % 16)) != 0 { c.to_ascii_uppercase() } else { c })
                .collect();
            let mut path = p("/workspaces/default");
            for _ in 0..depth {
                path = path.join("sub").unwrap();
            }
            let path = path.join(&name).unwrap();
            // `.git` is readable; its hooks are what stay protected in any case.
            let (path, access) = match which {
                0 => (path.join("HOOKS").unwrap().join("x").unwrap(), Access::Write),
                _ => (path, Access::Read),
            };
            let d = policy().check(&agent("fs-engine"), access, &path).unwrap_err();
            prop_assert_eq!(d.rule, rule::PROTECTED);
        }
    }
}

// ------------------------------------------------------------------------------------------
// [agents.NAME.sandbox]
// ------------------------------------------------------------------------------------------

fn sandbox_of(text: &str, name: &str) -> SandboxSpec {
    let pol = Policy::parse(text).unwrap_or_else(|e| panic!("{e:?}"));
    pol.agent(&AgentName::new(name).unwrap())
        .unwrap()
        .sandbox
        .clone()
}

#[test]
fn sandbox_section_parses() {
    let text = r#"version = 1

[agents.fs-engine]
uid = 61006

[agents.fs-engine.sandbox]
read = ["/opt/tools", "/usr/share/dict/"]
network = ["127.0.0.1:8080", "localhost:5432", ":443", "[::1]:8080"]
require = ["landlock", "seccomp", "cgroup"]

[agents.other]
uid = 61007
sandbox = { network = "none" }

[agents.third]
uid = 61008
sandbox = { network = "all", require = [] }
"#;
    let s = sandbox_of(text, "fs-engine");
    assert_eq!(
        s.read,
        [
            PathBuf::from("/opt/tools"),
            PathBuf::from("/usr/share/dict")
        ]
    );
    assert_eq!(
        s.network,
        Network::Allow(vec![
            Endpoint {
                host: Some("127.0.0.1".into()),
                prefix: None,
                port: 8080
            },
            Endpoint {
                host: Some("localhost".into()),
                prefix: None,
                port: 5432
            },
            Endpoint {
                host: None,
                prefix: None,
                port: 443
            },
            Endpoint {
                host: Some("::1".into()),
                prefix: None,
                port: 8080
            },
        ])
    );
    assert_eq!(s.network.tcp_connect_ports(), Some(vec![443, 5432, 8080]));
    assert_eq!(
        s.require.iter().copied().collect::<Vec<_>>(),
        [Layer::Landlock, Layer::Seccomp, Layer::Cgroup]
    );
    let other = sandbox_of(text, "other");
    assert_eq!(other.network, Network::None);
    assert_eq!(other.network.tcp_connect_ports(), Some(vec![]));
    let third = sandbox_of(text, "third");
    assert_eq!(third.network, Network::All);
    assert_eq!(third.network.tcp_connect_ports(), None);
    assert!(third.require.is_empty());
}

#[test]
fn sandbox_defaults_when_absent() {
    for a in Policy::default_policy().agents() {
        assert_eq!(a.sandbox, SandboxSpec::default(), "{}", a.name);
    }
    assert_eq!(SandboxSpec::default().network, Network::All);
    assert_eq!(SandboxSpec::default().network.tcp_connect_ports(), None);
}

#[test]
fn sandbox_mistakes_are_reported_with_line_and_column() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("colour = \"red\"", 5, 1, "unknown key 'colour'"),
        ("read = [\"opt/tools\"]", 5, 9, "absolute path"),
        ("read = [\"/\"]", 5, 9, "whole host"),
        ("read = [\"/etc\"]", 5, 9, "/etc"),
        ("read = [\"/etc/\"]", 5, 9, "/etc"),
        ("read = [\"/opt/../etc\"]", 5, 9, "'..'"),
        ("read = [\"/var/lib/clawfs\"]", 5, 9, "/var/lib/clawfs"),
        ("read = [\"/etc/ssl\"]", 5, 9, "/etc/ssl/private"),
        ("read = [\"/opt\", \"/opt\"]", 5, 17, "twice"),
        ("read = \"/opt\"", 5, 8, "must be an array"),
        ("read = [3]", 5, 9, "must be a string"),
        (
            "network = \"some\"",
            5,
            11,
            "unknown [agents.fs-engine.sandbox] network",
        ),
        ("network = 443", 5, 11, "network must be"),
        ("network = [\"127.0.0.1\"]", 5, 12, "no port"),
        ("network = [\"a:0\"]", 5, 12, "1 to 65535"),
        ("network = [\"a:70000\"]", 5, 12, "1 to 65535"),
        ("network = [\"a:http\"]", 5, 12, "1 to 65535"),
        ("network = [\"::1:80\"]", 5, 12, "brackets"),
        ("network = [\"[nope]:80\"]", 5, 12, "IPv6"),
        ("network = [\"bad host:80\"]", 5, 12, "not a host name"),
        ("network = [\"10.0.0.0/33:80\"]", 5, 12, "prefix length"),
        (
            "network = [\"fd00::/8:80\"]",
            5,
            12,
            "not a network address",
        ),
        (
            "network = [\"[10.0.0.0/8]:80\"]",
            5,
            12,
            "not a network address",
        ),
        ("network = [443]", 5, 12, "must be a string"),
        (
            "require = [\"selinux\"]",
            5,
            12,
            "unknown sandbox layer \"selinux\"",
        ),
        ("require = \"landlock\"", 5, 11, "must be an array"),
    ];
    for (line, l, c, needle) in cases {
        let text =
            format!("version = 1\n\n[agents.fs-engine]\n[agents.fs-engine.sandbox]\n{line}\n");
        let errs = parse_errors(&text);
        assert_eq!(errs.len(), 1, "{line}: {errs:?}");
        let e = &errs[0];
        assert_eq!((e.line, e.column), (*l, *c), "{line}: {e}");
        assert!(e.message.contains(needle), "{line}: {e}");
    }
    let errs = parse_errors("version = 1\n[agents.a]\nsandbox = 1\n");
    assert_eq!((errs[0].line, errs[0].column), (3, 11), "{errs:?}");
    assert!(errs[0].message.contains("must be a table"), "{errs:?}");
}

#[test]
fn apparmor_is_a_known_layer() {
    let text = "version = 1\n[agents.a]\nsandbox = { require = [\"apparmor\"] }\n";
    let s = sandbox_of(text, "a");
    assert!(s.require.contains(&Layer::Apparmor));
}

// ------------------------------------------------------------------------------------------
// The git guard: agents use git, but hooks, config and .gitmodules are read-only
// ------------------------------------------------------------------------------------------

#[test]
fn git_guard_lets_agents_use_git() {
    let pol = policy();
    let fs = agent("fs-engine");
    for dir in [
        "/agents/fs-engine",
        "/workspaces/default",
        "/workspaces/default/sub",
    ] {
        for git in [".git", ".GIT", ".Git"] {
            allowed(&pol, &fs, Access::Create, &format!("{dir}/{git}"));
            for rest in [
                "HEAD",
                "index.lock",
                "config.lock",
                "objects/ab/cdef",
                "refs/heads/main",
                "refs/heads/index",
                "logs/refs/heads/index",
                "modules/m/refs/heads/index",
                "logs/HEAD",
                "info/exclude",
                "info/attributes",
                "description",
            ] {
                for a in ALL {
                    allowed(&pol, &fs, a, &format!("{dir}/{git}/{rest}"));
                }
            }
            for rest in ["hooks", "hooks/pre-commit", "config", "config.lock"] {
                for a in [Access::Read, Access::List] {
                    allowed(&pol, &fs, a, &format!("{dir}/{git}/{rest}"));
                }
            }
            // What `git init` writes: the hooks folder, its inert samples, a new config.
            allowed(&pol, &fs, Access::Create, &format!("{dir}/{git}/hooks"));
            allowed(
                &pol,
                &fs,
                Access::Create,
                &format!("{dir}/{git}/Hooks/pre-commit.sample"),
            );
            // A config is made by renaming a finished file onto it (its settings are checked
            // then), never created in place.
            denied(
                &pol,
                &fs,
                Access::Create,
                &format!("{dir}/{git}/config"),
                rule::PROTECTED,
                DenyKind::ReadOnly,
            );
            let who = Identity::Agent(AgentName::new("fs-engine").unwrap());
            let to = NsPath::parse(&format!("{dir}/{git}/config")).unwrap();
            let from = NsPath::parse(&format!("{dir}/{git}/config.lock")).unwrap();
            assert!(pol.is_git_config(&to, &SomeoneElsesFiles), "{to}");
            assert!(!pol.is_git_config(&from, &SomeoneElsesFiles), "{from}");
            assert!(pol.check_move(&who, &from, &to).is_ok(), "{to}");
            // So is an index (its entries are checked then), and it is never written in place.
            for index in [
                "index",
                "INDEX",
                "sharedindex.0123abcd",
                "worktrees/w/index",
                "modules/m/index",
                "modules/a/b/index",
            ] {
                for a in [Access::Create, Access::Write] {
                    denied(
                        &pol,
                        &fs,
                        a,
                        &format!("{dir}/{git}/{index}"),
                        rule::PROTECTED,
                        DenyKind::ReadOnly,
                    );
                }
                for a in [Access::Read, Access::Delete] {
                    allowed(&pol, &fs, a, &format!("{dir}/{git}/{index}"));
                }
                let to = NsPath::parse(&format!("{dir}/{git}/{index}")).unwrap();
                // git writes a shared index as a temporary `sharedindex_XXXXXX`.
                let lock = match index.starts_with("sharedindex") {
                    true => "sharedindex_a1b2c3".to_string(),
                    false => format!("{index}.lock"),
                };
                let from = NsPath::parse(&format!("{dir}/{git}/{lock}")).unwrap();
                assert!(pol.is_git_index(&to, &SomeoneElsesFiles), "{to}");
                assert!(!pol.is_git_index(&from, &SomeoneElsesFiles), "{from}");
                assert!(pol.check_move(&who, &from, &to).is_ok(), "{to}");
            }
            // A linked worktree's git dir holds its own submodules' git dirs.
            for guarded in [
                "worktrees/wt/modules/sm/config",
                "worktrees/wt/modules/sm/hooks/post-checkout",
                "worktrees/wt/rebase-merge/git-rebase-todo",
                "worktrees/wt/MERGE_RR",
            ] {
                for a in [Access::Create, Access::Write] {
                    denied(
                        &pol,
                        &fs,
                        a,
                        &format!("{dir}/{git}/{guarded}"),
                        rule::PROTECTED,
                        DenyKind::ReadOnly,
                    );
                }
            }
            for (hook, active) in [
                ("worktrees/wt/modules/sm/hooks/pre-commit", true),
                ("hooks/pre-commit", true),
                ("HOOKS/post-checkout", true),
                ("modules/a/b/hooks/pre-commit", true),
                ("hooks/pre-commit.sample", false),
                ("hooks/x/pre-commit", false),
                ("hooks", false),
                ("refs/heads/hooks", false),
            ] {
                let p = NsPath::parse(&format!("{dir}/{git}/{hook}")).unwrap();
                assert_eq!(
                    pol.is_active_git_hook(&p, &SomeoneElsesFiles),
                    active,
                    "{p}"
                );
            }
            for not_index in ["refs/heads/index", "logs/refs/heads/index", "objects/index"] {
                let p = NsPath::parse(&format!("{dir}/{git}/{not_index}")).unwrap();
                assert!(!pol.is_git_index(&p, &SomeoneElsesFiles), "{p}");
            }
        }
    }
    // The grants still apply inside .git.
    denied(
        &pol,
        &fs,
        Access::Write,
        "/workspaces/project-alpha/.git/HEAD",
        rule::WORKSPACE_GRANT,
        DenyKind::ReadOnly,
    );
    denied(
        &pol,
        &fs,
        Access::Create,
        "/agents/observability/.git",
        rule::RULE_001,
        DenyKind::Access,
    );
}

#[test]
fn git_guard_keeps_hooks_config_and_gitmodules_read_only() {
    let pol = policy();
    let fs = agent("fs-engine");
    let ro = |a: Access, path: &str| {
        denied(&pol, &fs, a, path, rule::PROTECTED, DenyKind::ReadOnly);
    };
    for dir in ["/agents/fs-engine", "/workspaces/default/sub"] {
        for (git, hooks, config) in [
            (".git", "hooks", "config"),
            (".GIT", "HOOKS", "CONFIG"),
            (".Git", "Hooks", "Config"),
        ] {
            for a in WRITES {
                for f in ["pre-commit", "post-checkout", "x/y", "pre-commit.sample/x"] {
                    ro(a, &format!("{dir}/{git}/{hooks}/{f}"));
                }
            }
            for a in [Access::Write, Access::Delete] {
                ro(a, &format!("{dir}/{git}/{hooks}"));
                ro(a, &format!("{dir}/{git}/{hooks}/pre-commit.sample"));
                ro(a, &format!("{dir}/{git}/{config}"));
            }
            // Submodules' own git dirs are guarded the same way.
            ro(
                Access::Create,
                &format!("{dir}/{git}/modules/m/{hooks}/pre-commit"),
            );
            ro(Access::Write, &format!("{dir}/{git}/MODULES/a/b/{config}"));
            // A branch named config is not the config file.
            allowed(
                &pol,
                &fs,
                Access::Write,
                &format!("{dir}/{git}/refs/heads/{config}"),
            );
        }
        for name in [".gitmodules", ".GITMODULES", ".GitModules"] {
            for a in WRITES {
                ro(a, &format!("{dir}/{name}"));
            }
            allowed(&pol, &fs, Access::Read, &format!("{dir}/{name}"));
        }
    }
    // Other protected names inside .git keep full protection.
    denied(
        &pol,
        &fs,
        Access::Read,
        "/workspaces/default/.git/.obsidian",
        rule::PROTECTED,
        DenyKind::Permission,
    );
    // The reason says what to do.
    let d = pol
        .check(&fs, Access::Write, &p("/workspaces/default/.git/config"))
        .unwrap_err();
    assert!(d.reason.contains("repository's owner"), "{d:?}");
    // Admins are not guarded.
    for a in ALL {
        allowed(
            &pol,
            &Identity::Admin,
            a,
            "/workspaces/default/.git/hooks/pre-commit",
        );
        allowed(&pol, &Identity::Admin, a, "/workspaces/default/.gitmodules");
    }
}

#[test]
fn git_guard_refuses_moves_onto_or_out_of_git_names() {
    let pol = policy();
    let fs = agent("fs-engine");
    let mv = |from: &str, to: &str| pol.check_move(&fs, &p(from), &p(to));
    let d = "/workspaces/default";
    for (from, to) in [
        (format!("{d}/prepared"), format!("{d}/.git")),
        (format!("{d}/prepared"), format!("{d}/.GIT")),
        (format!("{d}/.git"), format!("{d}/old-git")),
        (format!("{d}/.Git"), format!("{d}/.git")),
        (format!("{d}/prepared"), format!("{d}/.git/hooks")),
        (format!("{d}/prepared"), format!("{d}/.git/HOOKS")),
        (format!("{d}/.git/hooks"), format!("{d}/h")),
        (format!("{d}/x"), format!("{d}/.git/hooks/pre-commit")),
        (format!("{d}/.git/config"), format!("{d}/x")),
        (format!("{d}/x"), format!("{d}/.gitmodules")),
    ] {
        let e = mv(&from, &to).expect_err(&format!("{from} -> {to} allowed"));
        assert_eq!(e.rule, rule::PROTECTED, "{from} -> {to}: {e:?}");
    }
    // git's own renames inside .git.
    assert!(mv(&format!("{d}/.git/index.lock"), &format!("{d}/.git/index")).is_ok());
    assert!(mv(&format!("{d}/.git/HEAD.lock"), &format!("{d}/.git/HEAD")).is_ok());
    assert!(mv(
        &format!("{d}/.git/config.lock"),
        &format!("{d}/.git/config")
    )
    .is_ok());
    // Admins move .git folders freely.
    assert!(pol
        .check_move(
            &Identity::Admin,
            &p(&format!("{d}/x")),
            &p(&format!("{d}/.git"))
        )
        .is_ok());
    // Links reach the same content: none onto hooks, samples included (a second name would
    // write the hook once its owner renames the sample into use).
    for hook in ["pre-commit", "pre-commit.sample", "x.SAMPLE"] {
        assert!(pol
            .check_link(
                &fs,
                &p(&format!("{d}/x")),
                &p(&format!("{d}/.git/hooks/{hook}"))
            )
            .is_err());
    }
    // Someone else's lock files are theirs: not removed, renamed away or replaced.
    let theirs = SomeoneElsesFiles;
    for lock in [".git/index.lock", ".git/config.lock", ".gitmodules.lock"] {
        let lock = p(&format!("{d}/{lock}"));
        for (access, onto) in [
            (Access::Write, false),
            (Access::Delete, false),
            (Access::Create, true),
        ] {
            assert!(
                pol.check_as(&fs, access, &lock, onto, &theirs).is_err(),
                "{lock} {access:?}"
            );
        }
        assert!(pol.check_in(&fs, Access::Read, &lock, &theirs).is_ok());
    }
}

/// Repositories as a caller sees someone else's: every file in them is theirs.
struct SomeoneElsesFiles;

impl GitRepos for SomeoneElsesFiles {
    fn foreign_git_above(&self, _: &NsPath) -> bool {
        true
    }
    fn at_repo_top(&self, _: &NsPath) -> bool {
        true
    }
    fn owns_folder(&self, _: &NsPath) -> bool {
        false
    }
    fn owns_file(&self, _: &NsPath) -> bool {
        false
    }
    fn git_dirs(&self, _: &NsPath) -> Vec<usize> {
        Vec::new()
    }
}

#[test]
fn git_guard_follows_the_protected_list() {
    let fs = agent("fs-engine");
    // Without .git in `protected`, .git is an ordinary folder.
    let bare = Policy::parse(&TEST_POLICY.replace(
        "protected = [\".git\", \".obsidian\", \".smarthole\"]",
        "protected = [\".obsidian\"]",
    ))
    .unwrap();
    for a in ALL {
        allowed(&bare, &fs, a, "/workspaces/default/.git/hooks/pre-commit");
        allowed(&bare, &fs, a, "/workspaces/default/.gitmodules");
    }
    assert!(bare
        .check_move(
            &fs,
            &p("/workspaces/default/x"),
            &p("/workspaces/default/.git")
        )
        .is_ok());
    // Listed in another case, it is still the guard.
    let upper = Policy::parse(&TEST_POLICY.replace("[\".git\",", "[\".GIT\",")).unwrap();
    allowed(&upper, &fs, Access::Write, "/workspaces/default/.git/HEAD");
    denied(
        &upper,
        &fs,
        Access::Write,
        "/workspaces/default/.git/config",
        rule::PROTECTED,
        DenyKind::ReadOnly,
    );
}

/// Repositories as a caller that owns every folder and every `.git` sees them.
struct AllMine;

impl GitRepos for AllMine {
    fn foreign_git_above(&self, _: &NsPath) -> bool {
        false
    }
    fn at_repo_top(&self, _: &NsPath) -> bool {
        true
    }
    fn owns_folder(&self, _: &NsPath) -> bool {
        true
    }
    fn owns_file(&self, _: &NsPath) -> bool {
        true
    }
    fn git_dirs(&self, _: &NsPath) -> Vec<usize> {
        Vec::new()
    }
}

#[test]
fn in_a_repository_it_owns_an_agent_changes_hooks_config_and_gitmodules_freely() {
    let pol = policy();
    let fs = agent("fs-engine");
    for path in [
        "/workspaces/default/t/.git/hooks/pre-receive.sample",
        "/workspaces/default/t/.git/config",
        "/workspaces/default/t/.gitmodules",
        "/workspaces/default/t/vendor/x/.gitmodules",
        "/workspaces/default/bare/HEAD",
        "/agents/fs-engine/t/.git/hooks/post-checkout",
    ] {
        for access in [Access::Write, Access::Delete, Access::Create] {
            assert!(
                pol.check_in(&fs, access, &p(path), &AllMine).is_ok(),
                "{path} {access:?}"
            );
        }
    }
    assert!(pol
        .check_move_in(
            &fs,
            &p("/workspaces/default/t/.git"),
            &p("/workspaces/default/u/.git"),
            &AllMine
        )
        .is_ok());
    // The same calls, with every repository someone else's, are refused.
    for path in [
        "/workspaces/default/t/.git/config",
        "/workspaces/default/t/.gitmodules",
    ] {
        assert!(
            pol.check_in(&fs, Access::Write, &p(path), &EveryRepoForeign)
                .is_err(),
            "{path}"
        );
    }
    // A hard link named .git is never the agent's to make.
    assert!(pol
        .check_link_in(
            &fs,
            &p("/workspaces/default/f"),
            &p("/workspaces/default/t/.git"),
            &AllMine
        )
        .is_err());
}

#[test]
fn networks_parse_with_their_prefix_and_only_all_may_bind() {
    let p = Policy::parse(
        "version = 1\n[agents.a]\nuid = 61001\n[agents.a.sandbox]\nnetwork = [\"10.0.0.0/8:5432\", \"[fd00::/8]:443\"]\n",
    )
    .unwrap();
    let a = p.agent(&AgentName::new("a").unwrap()).unwrap();
    assert_eq!(
        a.sandbox.network,
        Network::Allow(vec![
            Endpoint {
                host: Some("10.0.0.0".into()),
                prefix: Some(8),
                port: 5432
            },
            Endpoint {
                host: Some("fd00::".into()),
                prefix: Some(8),
                port: 443
            },
        ])
    );
    assert_eq!(a.sandbox.network.tcp_bind_ports(), Some(vec![]));
    assert_eq!(Network::None.tcp_bind_ports(), Some(vec![]));
    assert_eq!(Network::All.tcp_bind_ports(), None);
}

#[test]
fn backup_retention_is_read_from_the_defaults_and_checked() {
    assert_eq!(policy().backups(), BackupRetention::default());
    let set = Policy::parse("version = 1\n[defaults]\nbackups = { keep = 3, max_age_days = 7 }\n")
        .unwrap();
    assert_eq!(
        set.backups(),
        BackupRetention {
            keep: 3,
            max_age_days: 7
        }
    );
    let only_keep = Policy::parse("version = 1\n[defaults]\nbackups = { keep = 2 }\n").unwrap();
    assert_eq!(only_keep.backups().max_age_days, 30);
    one_error(
        "version = 1\n[defaults]\nbackups = { keep = 0 }\n",
        3,
        "keep must be an integer from 1",
    );
    one_error(
        "version = 1\n[defaults]\nbackups = { keep = 2, forever = true }\n",
        3,
        "forever",
    );
    one_error(
        "version = 1\n[defaults]\nbackups = { max_age_days = \"a month\" }\n",
        3,
        "max_age_days",
    );
}

/// Someone else's bare repository at `/workspaces/default/shared.git`, a git dir by what it
/// holds (component 2 of the paths in it).
struct SomeoneElsesBareRepo;

impl GitRepos for SomeoneElsesBareRepo {
    fn foreign_git_above(&self, _: &NsPath) -> bool {
        true
    }
    fn at_repo_top(&self, _: &NsPath) -> bool {
        false
    }
    fn owns_folder(&self, _: &NsPath) -> bool {
        false
    }
    fn owns_file(&self, _: &NsPath) -> bool {
        false
    }
    fn git_dirs(&self, path: &NsPath) -> Vec<usize> {
        match path.get(2) == Some("shared.git") && path.depth() > 3 {
            true => vec![2],
            false => Vec::new(),
        }
    }
}

#[test]
fn a_git_dir_of_another_name_is_guarded_as_a_git_folder() {
    let pol = policy();
    let fs = agent("fs-engine");
    let bare = SomeoneElsesBareRepo;
    let at = |s: &str| p(&format!("/workspaces/default/shared.git/{s}"));
    let refused = |access: Access, s: &str| {
        let d = pol
            .check_in(&fs, access, &at(s), &bare)
            .expect_err(&format!("{access} {s} allowed"));
        assert_eq!(d.rule, rule::PROTECTED, "{access} {s}: {d:?}");
    };
    for s in [
        "config",
        "hooks/post-receive",
        "hooks/pre-push",
        "config.lock",
    ] {
        for access in [Access::Write, Access::Delete] {
            refused(access, s);
        }
    }
    refused(Access::Write, "index");
    refused(Access::Create, "hooks/post-update");
    refused(Access::Create, "commondir");
    refused(Access::Create, "rebase-merge/git-rebase-todo");
    refused(Access::Write, "BISECT_START");
    refused(Access::Create, "refs/tags/hooks");
    refused(Access::Create, "refs/tags/hooks/pre-receive");
    refused(Access::Create, "refs/tags/config");
    refused(Access::Create, "refs/tags/HEAD");
    refused(Access::Create, "refs/heads/x/HEAD");
    refused(Access::Create, "refs/heads/x/config");
    for ok in [
        "logs/HEAD",
        "refs/remotes/origin/HEAD",
        "logs/refs/remotes/origin/HEAD",
        "refs/heads/config",
        "logs/refs/heads/hooks",
    ] {
        assert!(
            pol.check_in(
                &fs,
                Access::Create,
                &p(&format!("/workspaces/default/t/.git/{ok}")),
                &SomeoneElsesFiles
            )
            .is_ok(),
            "{ok}"
        );
    }
    refused(Access::Write, "objects/info/alternates");
    refused(Access::Create, "objects/info/http-alternates");
    refused(Access::Delete, "HEAD");
    refused(Access::Write, "refs/heads/main.lock");
    // What a push writes is the agent's, and git's own ways of making hooks and config.
    for (access, s) in [
        (Access::Create, "objects/ab/cdef"),
        (Access::Write, "refs/heads/main"),
        (Access::Write, "HEAD"),
        (Access::Create, "hooks/pre-push.sample"),
        (Access::Read, "config"),
        (Access::Read, "hooks/post-receive"),
    ] {
        assert!(
            pol.check_in(&fs, access, &at(s), &bare).is_ok(),
            "{access} {s}"
        );
    }
    assert!(pol
        .check_move_in(&fs, &p("/workspaces/default/c"), &at("config"), &bare)
        .is_ok());
    assert!(pol.is_git_config(&at("config"), &bare));
    assert!(pol.is_git_index(&at("index"), &bare));
    assert!(pol.is_active_git_hook(&at("hooks/post-receive"), &bare));
    assert!(pol.is_in_git_dir(&at("objects/ab"), &bare));
    assert!(!pol.is_git_ref_or_log(&at("objects/ab"), &bare));
    assert!(pol.is_git_ref_or_log(&at("refs/heads/index"), &bare));
    assert!(pol
        .check_move_in(&fs, &p("/workspaces/default/h"), &at("hooks"), &bare)
        .is_err());
    assert!(pol
        .check_link_in(&fs, &p("/workspaces/default/h"), &at("hooks/x"), &bare)
        .is_err());
    // The folder itself is no path in a git dir, and a folder holding no HEAD is none.
    assert!(!pol.is_in_git_dir(&p("/workspaces/default/shared.git"), &bare));
    let plain = p("/workspaces/default/other.git/config");
    assert!(pol.check_in(&fs, Access::Write, &plain, &bare).is_ok());
    assert!(!pol.is_git_config(&plain, &bare));
}
