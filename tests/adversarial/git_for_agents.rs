//! Agents use git in their own directory and in granted workspaces, but cannot plant what makes
//! git run code or fetch elsewhere: `.git/hooks/`, `.git/config`, `.gitmodules` (any letter
//! case), nor move a prepared folder onto a `.git` name.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::Mounted;
use crate::support::{audit_until, denials, snapshot, text};

/// git with a writable HOME and an identity, without the caller's config.
fn git_env(m: &Mounted) -> String {
    format!(
        "export HOME={}/agents/fs-engine GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
         g() {{ git -c user.name=agent -c user.email=agent@example.invalid \"$@\"; }}",
        m.mnt.display()
    )
}

#[test]
fn an_agent_uses_git_in_its_directory_and_a_granted_workspace() {
    let m = Mounted::new();
    let env = git_env(&m);
    for dir in [m.path("agents/fs-engine/repo"), m.ws().join("repo")] {
        let d = dir.display();
        let out = m.run_agent(
            "fs-engine",
            &format!(
                "{env}
                 set -e
                 mkdir -p {d} && cd {d}
                 g init -q -b main
                 echo hello > a.txt
                 g add a.txt
                 g commit -q -m first
                 g log --oneline
                 g branch side
                 g checkout -q -b feature
                 echo more >> a.txt
                 g commit -q -am second
                 g branch --list
                 g status --short
                 g checkout -q main && echo m > m.txt && g add m.txt && g commit -q -m main2
                 g checkout -q feature && g rebase -q main && g gc -q --quiet
                 test -f m.txt
                 echo done"
            ),
        );
        let o = text(&out);
        assert!(out.status.success(), "{d}: {o}");
        assert!(
            o.contains("first") && o.contains("* feature") && o.contains("side"),
            "{o}"
        );
        assert!(o.trim_end().ends_with("done"), "{o}");
    }
}

#[test]
fn an_agent_cannot_change_hooks_config_or_gitmodules() {
    let m = Mounted::new();
    // The admin's repository in the workspace, with a hook and a config of its own.
    let repo = m.ws().join("guarded");
    fs::create_dir(&repo).unwrap();
    let admin = std::process::Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .current_dir(&repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(admin.status.success(), "{}", text(&admin));
    let hook = repo.join(".git/hooks/pre-commit");
    fs::write(&hook, "#!/bin/sh\necho admin-hook\n").unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(repo.join(".gitmodules"), "").unwrap();
    // Agents may write in the workspace (POSIX below the policy), like the admin's own files.
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&repo)
        .status();
    fs::create_dir_all(m.ws().join("prepared/hooks")).unwrap();
    fs::write(
        m.ws().join("prepared/hooks/post-checkout"),
        "#!/bin/sh\nevil\n",
    )
    .unwrap();
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(m.ws().join("prepared"))
        .status();
    let before = snapshot(&m.backing("workspaces/default/guarded/.git"));
    let gitmodules_before = fs::read(repo.join(".gitmodules")).unwrap();
    let env = git_env(&m);
    let r = repo.display();
    let ws = m.ws();
    let w = ws.display();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "{env}
             cd {r} || exit 9
             cat .git/config >/dev/null && echo read-config
             ls .git/hooks >/dev/null && echo list-hooks
             (echo evil > .git/hooks/pre-commit) 2>/dev/null || echo no-hook-write
             (echo evil > .git/hooks/post-checkout) 2>/dev/null || echo no-hook-create
             (echo evil > .GIT/HOOKS/post-merge) 2>/dev/null || echo no-hook-case
             chmod 644 .git/hooks/pre-commit 2>/dev/null || echo no-hook-chmod
             rm -f .git/hooks/pre-commit 2>/dev/null; test -e .git/hooks/pre-commit && echo no-hook-rm
             (echo '[core] fsmonitor = evil' >> .git/config) 2>/dev/null || echo no-config-write
             (echo evil > .GIT/CONFIG) 2>/dev/null || echo no-config-case
             (echo evil >> .gitmodules) 2>/dev/null || echo no-gitmodules
             (echo evil > sub.GITMODULES.tmp && mv sub.GITMODULES.tmp .GitModules) 2>/dev/null || echo no-gitmodules-case
             mv .git/hooks {w}/stolen-hooks 2>/dev/null || echo no-hooks-move
             mkdir -p {w}/fresh && cd {w}/fresh
             mv {w}/prepared .git 2>/dev/null || echo no-git-move
             mv {w}/prepared .GIT 2>/dev/null || echo no-git-move-case
             echo end"
        ),
    );
    let o = text(&out);
    for want in [
        "read-config",
        "list-hooks",
        "no-hook-write",
        "no-hook-create",
        "no-hook-case",
        "no-hook-chmod",
        "no-hook-rm",
        "no-config-write",
        "no-config-case",
        "no-gitmodules",
        "no-gitmodules-case",
        "no-hooks-move",
        "no-git-move",
        "no-git-move-case",
        "end",
    ] {
        assert!(o.contains(want), "missing {want}: {o}");
    }
    // Nothing in the admin's .git changed, the hook is still the admin's and still executable.
    assert_eq!(
        snapshot(&m.backing("workspaces/default/guarded/.git")),
        before,
        "{o}"
    );
    assert_eq!(
        fs::read(repo.join(".gitmodules")).unwrap(),
        gitmodules_before
    );
    assert!(!repo.join(".git/hooks/post-checkout").exists());
    assert!(!ws.join("fresh/.git").exists() && !ws.join("stolen-hooks").exists());
    assert!(ws.join("prepared/hooks/post-checkout").exists());
    // The refusals are in the agent's denials file and in the audit trail.
    let mine = denials(&m, "fs-engine");
    for end in [
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        "/.gitmodules",
    ] {
        assert!(
            mine.iter().any(|d| d["rule"] == "PROTECTED"
                && d["path"].as_str().is_some_and(|p| p.ends_with(end))),
            "{end} not in denials: {mine:?}"
        );
    }
    let all = audit_until(&m, |a| {
        a.iter().any(|r| {
            r["rule"] == "PROTECTED"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(".git/hooks/pre-commit"))
        })
    });
    assert!(
        all.iter().any(|r| r["rule"] == "PROTECTED"
            && r["result"] == "denied"
            && r["path"]
                .as_str()
                .is_some_and(|p| p.ends_with(".git/hooks/pre-commit"))),
        "no audit record"
    );
    // The denial names the rule and what to do.
    assert!(
        mine.iter().any(|d| d["reason"]
            .as_str()
            .is_some_and(|r| r.contains("hooks") && r.contains("ask an admin"))),
        "{mine:?}"
    );
}

/// `git config` writes `config.lock` and renames it onto `config`. An agent's git keeps working
/// (`git init`, `git config user.name`), but nothing that runs a command or sends git elsewhere
/// lands in a config: not by `git config`, not by renaming a prepared file onto it, not by
/// opening it for writing, not through a descriptor kept open across the rename; the hooks
/// folder cannot be a symlink; and no repository can be made where git would find it under
/// another name than a `.git` folder (bare, a `gitdir:` file, a `.git` symlink), whose config
/// the guard would not see.
#[test]
fn git_config_takes_only_settings_that_run_nothing() {
    let m = Mounted::new();
    let env = git_env(&m);
    let d = m.path("agents/fs-engine/own");
    let d = d.display();
    let keep_open = r#"
import os, time
fd = os.open("k.lock", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"[user]\n\tname = x\n")
try:
    os.rename("k.lock", ".git/config")
    os.write(fd, b"[core]\n\thooksPath = /tmp/evil\n")
    print("kept-open-renamed")
except OSError as e:
    print("kept-open-refused", e.errno)
"#;
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "{env}
             mkdir -p {d} && cd {d} && g init -q || exit 9
             g config user.name agent-set && echo user-name-ok
             g config core.hooksPath /tmp 2>/dev/null || echo no-hookspath
             g config alias.x '!sh -c id' 2>/dev/null || echo no-alias
             printf '[core]\n\tfsmonitor = /tmp/x\n' > c && {{ mv c .git/config 2>/dev/null || echo no-mv-config; }}
             {{ echo '[core]' >> .git/config; }} 2>/dev/null || echo no-append
             {{ echo '[core]' > .git/CONFIG; }} 2>/dev/null || echo no-create-case
             /usr/bin/python3 -c '{keep_open}'
             mkdir -p {d}-bare/.git && {{ ln -s /tmp {d}-bare/.git/hooks 2>/dev/null || echo no-hooks-link; }}
             g config extensions.worktreeConfig true 2>/dev/null || echo no-worktree-config
             {{ echo '[core]' > .git/config.worktree; }} 2>/dev/null || echo no-config-worktree
             {{ echo ../elsewhere > .git/commondir; }} 2>/dev/null || echo no-commondir
             git init -q --bare {d}-bare.git 2>/dev/null || echo no-bare-repo
             mkdir -p {d}-link/real && {{ ln -s real {d}-link/.git 2>/dev/null || echo no-git-symlink; }}
             mkdir -p {d}-file && {{ echo 'gitdir: /tmp/x' > {d}-file/.git; }} 2>/dev/null || echo no-gitdir-file
             {{ echo 'ref: refs/heads/main' > {d}-link/real/HEAD; }} 2>/dev/null || echo no-head-elsewhere
             mkdir -p {d}-prep/hooks && printf '[core]\\n\\tfsmonitor = x\\n' > {d}-prep/config
             mkdir -p .git/modules && {{ mv {d}-prep .git/modules/evil 2>/dev/null || echo no-move-in; }}
             mkdir -p .git/x/objects && echo 'ref: refs/heads/main' > .git/x/HEAD
             {{ mv .git/x {d}-out 2>/dev/null || echo no-move-out; }}
             mkdir -p .git/rebase-merge && printf 'exec id\\n' > .git/rebase-merge/todo.lock
             {{ mv .git/rebase-merge/todo.lock .git/rebase-merge/git-rebase-todo 2>/dev/null || echo no-exec-todo; }}
             {{ echo 'x id' > .git/rebase-merge/git-rebase-todo; }} 2>/dev/null || echo no-todo-write
             rm -rf .git/rebase-merge
             echo end"
        ),
    );
    let o = text(&out);
    for expected in [
        "user-name-ok",
        "no-hookspath",
        "no-alias",
        "no-mv-config",
        "no-append",
        "no-create-case",
        "kept-open-refused",
        "no-hooks-link",
        "no-worktree-config",
        "no-config-worktree",
        "no-commondir",
        "no-bare-repo",
        "no-git-symlink",
        "no-gitdir-file",
        "no-head-elsewhere",
        "no-move-in",
        "no-move-out",
        "no-exec-todo",
        "no-todo-write",
    ] {
        assert!(o.contains(expected), "{expected}: {o}");
    }
    let config = fs::read_to_string(m.backing("agents/fs-engine/own/.git/config")).unwrap();
    assert!(config.contains("agent-set"), "{config}");
    for bad in ["hookspath", "fsmonitor", "alias", "evil"] {
        assert!(
            !config.to_ascii_lowercase().contains(bad),
            "{bad}: {config}"
        );
    }
    // Each refusal is the agent's denial, naming what was refused.
    let d = denials(&m, "fs-engine");
    assert!(
        d.iter().any(|l| l["reason"]
            .as_str()
            .is_some_and(|r| r.contains("core.fsmonitor"))),
        "{d:#?}"
    );
}
