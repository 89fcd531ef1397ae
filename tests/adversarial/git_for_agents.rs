//! Agents use git as people do: a repository an agent owns is its own business (git itself
//! refuses to run in a repository owned by someone else), so it clones, builds, commits and
//! removes it freely. In a repository someone else owns, it cannot plant what makes its owner's
//! git run code or fetch elsewhere: `.git/hooks/`, `.git/config` (checked with git's own
//! grammar), the top-level `.gitmodules` (any letter case), nor move a prepared folder onto a
//! `.git` name or its own repository under someone else's.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::Mounted;
use crate::support::{audit_until, denials, snapshot, text};

/// git with a writable HOME and an identity, without the caller's config. An automatic gc
/// runs in the foreground: one left running in the background would make the test's own
/// `git gc` refuse to start.
fn git_env(m: &Mounted) -> String {
    format!(
        "export HOME={}/agents/fs-engine GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
         g() {{ git -c user.name=agent -c user.email=agent@example.invalid -c gc.autoDetach=false \"$@\"; }}",
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
            .is_some_and(|r| r.contains("hooks") && r.contains("ask the repository's owner"))),
        "{mine:?}"
    );
}

/// What the issue's admin did to a repository: let the agents' group write it
/// (`chgrp -R clawos-users; chmod -R g+rwX`).
fn share_with_agents(dir: &Path) {
    for cmd in [
        &["chgrp", "-R", "clawos-users"][..],
        &["chmod", "-R", "g+rwX"],
    ] {
        let st = std::process::Command::new(cmd[0])
            .args(&cmd[1..])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "{cmd:?}");
    }
}

/// Waits for the audit record of a denied `operation` whose `field` (`path` or `target`) ends
/// with `suffix`.
fn denied_on(m: &Mounted, operation: &str, field: &str, suffix: &str) {
    audit_until(m, |all| {
        all.iter().any(|r| {
            r["operation"] == operation
                && r["result"] == "denied"
                && r[field].as_str().is_some_and(|p| p.ends_with(suffix))
        })
    });
}

/// A config as `git init` writes it, which an agent may put in place.
const CLEAN_CONFIG: &str =
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n";

/// Waits for more than `n` audited refusals that `matches`; all the audit records then.
fn refused_more_than(
    m: &Mounted,
    n: usize,
    matches: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    audit_until(m, |all| {
        all.iter()
            .filter(|r| r["result"] == "denied" && matches(r))
            .count()
            > n
    })
}

/// Runs `script` as fs-engine with [`git_env`]'s git (`g`), which must succeed.
fn agent_git(m: &Mounted, script: &str) {
    let out = m.run_agent_as("fs-engine", &[], &format!("{}\n{script}", git_env(m)));
    assert!(out.status.success(), "{}", text(&out));
}

/// Runs the Python `script` as fs-engine after [`crate::support::PROBE`]'s `probe` and `exchange`, and checks
/// that it printed each line of `want`.
fn probes_as_agent(m: &Mounted, script: &str, want: &[&str]) {
    let out = crate::support::python_as_agent(m, &format!("{}{script}", crate::support::PROBE));
    for line in want {
        assert!(out.lines().any(|l| l == *line), "missing {line}: {out:?}");
    }
}

/// Root's repository `shared` in the default workspace, of `files` more files, which the
/// agents' group may write.
fn shared_repository(m: &Mounted, files: usize) -> std::path::PathBuf {
    let repo = m.ws().join("shared");
    real_repository(&repo, files);
    share_with_agents(&repo);
    repo
}

/// git run by root (the admin), with no config of its own, in `dir`. No automatic gc: a
/// commit of more than 6,700 loose objects would start one in the background, which packs and
/// removes them while an agent's clone is copying them.
fn root_git(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args([
            "-c",
            "user.name=admin",
            "-c",
            "user.email=admin@example.invalid",
            "-c",
            "gc.auto=0",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap()
}

/// A repository with what real ones carry, made by root with real git at `dir`: a C program
/// and its Makefile, vendored dependencies with `.gitmodules` of their own, git's hook samples,
/// and `files` more files.
fn real_repository(dir: &Path, files: usize) {
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(
        dir.join("Makefile"),
        "hello: src/hello.c\n\tcc -o $@ $<\nclean:\n\trm -f hello\n",
    )
    .unwrap();
    fs::write(
        dir.join("src/hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello from make\"); return 0; }\n",
    )
    .unwrap();
    for v in [
        "vendor/github.com/tetratelabs/wazero",
        "vendor/golang.org/x/sys",
    ] {
        fs::create_dir_all(dir.join(v)).unwrap();
        fs::write(
            dir.join(v).join(".gitmodules"),
            "[submodule \"site\"]\n\tpath = site\n\turl = https://example.invalid/site.git\n",
        )
        .unwrap();
    }
    for i in 0..files {
        let d = dir.join(format!("pkg/{:03}", i % 100));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-q", "-m", "initial"],
    ] {
        let out = root_git(dir, args);
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
    }
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir)
        .status();
}

/// The agent, in the default sandbox, clones a real repository (4,000 files, objects in all
/// 256 of `objects/`' folders, nested `.gitmodules`, hook samples), builds it with make,
/// commits, branches, rebases, adds a hook and a `hooksPath` of its own, runs gc, and removes
/// it: in a granted workspace and in its own directory. Root's git then refuses the agent's
/// repository, whatever its config says.
#[test]
fn an_agent_clones_builds_and_removes_a_real_repository() {
    let m = Mounted::new();
    let src = m.ws().join("upstream");
    real_repository(&src, 4_000);
    let marker = m.dir.path().join("root-ran-the-agents-command");
    let env = git_env(&m);
    for dir in [m.ws(), m.path("agents/fs-engine")] {
        let d = dir.display();
        let script = format!(
            "{env}
             set -e
             cd {d}
             # The source stands for a remote: a local clone of a repository root owns needs
             # safe.directory, which git takes only from global config.
             printf '[safe]\n\tdirectory = *\n' > $HOME/clone.cfg
             GIT_CONFIG_GLOBAL=$HOME/clone.cfg g clone -q {src} t
             cd t
             test -f vendor/github.com/tetratelabs/wazero/.gitmodules
             ls .git/hooks/*.sample >/dev/null
             make -s && ./hello
             echo change >> pkg/000/f0.txt && g commit -qam change
             g checkout -qb side && echo s > s.txt && g add s.txt && g commit -qm side
             g checkout -q main && echo '# more' >> Makefile && g commit -qam main2
             g checkout -q side && g rebase -q main
             printf '#!/bin/sh\\necho own-hook-ran\\n' > .git/hooks/pre-commit
             chmod +x .git/hooks/pre-commit
             echo y > y && g add y && g commit -qm hooked
             g config core.hooksPath .git/hooks
             g config core.fsmonitor 'touch {marker}; false'
             printf '[submodule \"x\"]\\n\\tpath = x\\n\\turl = https://example.invalid/x\\n' > .gitmodules
             g add .gitmodules && g commit -qm gitmodules
             g gc -q
             echo commits=$(g log --oneline | wc -l)
             echo kept",
            src = src.display(),
            marker = marker.display(),
        );
        let out = m.run_agent_as("fs-engine", &[], &script);
        let o = text(&out);
        assert!(out.status.success(), "{d}: {o}");
        for want in ["hello from make", "own-hook-ran", "commits=6", "kept"] {
            assert!(o.contains(want), "{d}: {want}: {o}");
        }
        // Root's git refuses a repository the agent owns: nothing of the agent's config runs.
        let root = root_git(&dir.join("t"), &["status", "--short"]);
        assert!(!root.status.success(), "{}", text(&root));
        assert!(text(&root).contains("dubious ownership"), "{}", text(&root));
        assert!(!marker.exists());
        let out = m.run_agent_as(
            "fs-engine",
            &[],
            &format!("cd {d} && rm -rf t && echo removed"),
        );
        assert!(out.status.success(), "{d}: {}", text(&out));
        assert!(!dir.join("t").exists(), "{d}: the clone is still there");
    }
    let backing = m.backing("workspaces/default/t");
    assert!(!backing.exists(), "{} left in the store", backing.display());
}

/// What an agent writes, as a file it renames onto the config of a repository root owns and
/// lets the agents' group write: every shape a reader other than git's own could misplace.
const CONFIG_ATTACKS: &[&[u8]] = &[
    // The continuation: git keeps `[color]` inside core.eol's value and stays in [core].
    b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\teol = lf \\\n[color]\n\tfsmonitor = \"touch MARKER; false\"\n\thooksPath = /srv/h\n",
    b"[core]\n\tbare = false\n[include]\n\tpath = /tmp/evil.cfg\n",
    b"[core]\n\tbare = false\n[includeIf \"gitdir:/\"]\n\tpath = /tmp/evil.cfg\n",
    b"[core \"\"]\n\tfsmonitor = touch MARKER\n",
    b"[Core]\n\tbare = false\n\tFsMonitor = touch MARKER\n",
    b"[core.x]\n\tfsmonitor = touch MARKER\n",
    b"[core]\r\n\tbare = false\r\n\tsshCommand = touch MARKER\r\n",
    b"\xef\xbb\xbf[core]\n\tfsmonitor = touch MARKER\n",
    b"[core]\n\tbare = false\0\n\tfsmonitor = touch MARKER\n",
    // A backslash in a comment continues nothing: fsmonitor is core's.
    b"[core] # [color]\n\tbare = false ; \\\n\tfsmonitor = touch MARKER\n",
    b"[core]\n\tbare = \"a\\\"b\" ; \\\n\tpager = touch MARKER\n",
    b"[remote \"origin\"]\n\turl = ext::sh -c touch% MARKER\n",
    b"[submodule \"s\"]\n\tupdate = !touch MARKER\n",
    b"[alias]\n\tst = !touch MARKER\n",
    b"[core]\n\teditor = touch MARKER\n",
];

/// `.gitmodules` entries that would make git run something or fetch through a helper.
const GITMODULES_ATTACKS: &[&[u8]] = &[
    b"[submodule \"s\"]\n\tpath = s\n\turl = https://example.invalid/s\n\tupdate = !touch MARKER\n",
    b"[submodule \"s\"]\n\tpath = s\n\turl = ext::sh -c touch% MARKER\n",
];

/// In a repository root owns and lets the agents' group write (`chgrp -R clawos-users; chmod
/// -R g+rwX`), the agent's git works (status, commit, `git config user.name`), but no config
/// shape, top-level `.gitmodules` or hook it tries lands, each refusal is audited, and root's
/// git afterwards runs nothing of the agent's.
#[test]
fn a_shared_repository_keeps_its_config_hooks_and_gitmodules() {
    let m = Mounted::new();
    let repo = m.ws().join("shared");
    real_repository(&repo, 10);
    let marker = m.dir.path().join("PWNED");
    let staging = m.ws().join("attacks");
    fs::create_dir(&staging).unwrap();
    let with_marker = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .replace("MARKER", &marker.display().to_string())
            .into_bytes()
    };
    for (i, shape) in CONFIG_ATTACKS.iter().enumerate() {
        fs::write(staging.join(format!("config-{i}")), with_marker(shape)).unwrap();
    }
    for (i, shape) in GITMODULES_ATTACKS.iter().enumerate() {
        fs::write(staging.join(format!("gitmodules-{i}")), with_marker(shape)).unwrap();
    }
    let mut long = b"[user]\n\tname = ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 300_000));
    long.extend_from_slice(b"\n[core]\n\tfsmonitor = x\n");
    fs::write(staging.join("config-long"), long).unwrap();
    share_with_agents(&repo);
    share_with_agents(&staging);
    let before_hooks = snapshot(&m.backing("workspaces/default/shared/.git/hooks"));
    let env = git_env(&m);
    let r = repo.display();
    let s = staging.display();
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "{env}
             cd {r} || exit 9
             G() {{ g -c safe.directory='*' \"$@\"; }}
             G status --short >/dev/null && echo status-ok
             echo agent >> README && G add README && G commit -qm by-agent && echo commit-ok
             G config user.name agent-set && echo user-name-ok
             G config core.hooksPath /tmp 2>/dev/null || echo refused-hookspath
             G config core.fsmonitor 'touch x' 2>/dev/null || echo refused-fsmonitor
             for f in {s}/config-*; do
               cp $f .git/config.new && {{ mv .git/config.new .git/config 2>/dev/null || echo refused-$(basename $f); }}
               rm -f .git/config.new
             done
             for f in {s}/gitmodules-*; do
               {{ cat $f > .gitmodules; }} 2>/dev/null || echo refused-$(basename $f)
               cp $f gm.new && {{ mv gm.new .GitModules 2>/dev/null || echo refused-mv-$(basename $f); }}
               rm -f gm.new
             done
             (echo evil > .git/hooks/post-checkout) 2>/dev/null || echo refused-hook
             rm -f .git/hooks/pre-commit.sample 2>/dev/null; test -e .git/hooks/pre-commit.sample && echo refused-hook-rm
             (echo '[core]' >> .git/config) 2>/dev/null || echo refused-append
             mkdir -p vendor/new && echo '[submodule]' > vendor/new/.gitmodules && echo nested-gitmodules-ok
             echo end"
        ),
    );
    let o = text(&out);
    let mut want: Vec<String> = [
        "status-ok",
        "commit-ok",
        "user-name-ok",
        "refused-hookspath",
        "refused-fsmonitor",
        "refused-config-long",
        "refused-hook",
        "refused-hook-rm",
        "refused-append",
        "nested-gitmodules-ok",
        "end",
    ]
    .map(String::from)
    .to_vec();
    want.extend((0..CONFIG_ATTACKS.len()).map(|i| format!("refused-config-{i}\n")));
    want.extend((0..GITMODULES_ATTACKS.len()).map(|i| format!("refused-gitmodules-{i}\n")));
    want.extend((0..GITMODULES_ATTACKS.len()).map(|i| format!("refused-mv-gitmodules-{i}\n")));
    for w in &want {
        assert!(o.contains(w.as_str()), "missing {w:?}: {o}");
    }
    // What landed is git's own config plus the name the agent may set.
    let config = fs::read_to_string(repo.join(".git/config")).unwrap();
    assert!(config.contains("agent-set"), "{config}");
    for bad in [
        "hookspath",
        "fsmonitor",
        "include",
        "sshcommand",
        "pager",
        "editor",
        "ext::",
    ] {
        assert!(
            !config.to_ascii_lowercase().contains(bad),
            "{bad}: {config}"
        );
    }
    assert_eq!(
        snapshot(&m.backing("workspaces/default/shared/.git/hooks")),
        before_hooks
    );
    assert!(!fs::read_to_string(repo.join(".gitmodules"))
        .unwrap_or_default()
        .contains("MARKER"));
    // Root's git in the repository runs nothing of the agent's.
    for args in [&["status"][..], &["log", "-1"], &["submodule", "status"]] {
        let _ = root_git(&repo, args);
    }
    assert!(!marker.exists(), "root ran the agent's command");
    // Every attempt is the agent's denial and an audited refusal.
    let mine = denials(&m, "fs-engine");
    let refused_configs = mine
        .iter()
        .filter(|d| {
            d["rule"] == "PROTECTED"
                && d["target"]
                    .as_str()
                    .is_some_and(|t| t.ends_with(".git/config"))
        })
        .count();
    assert!(
        refused_configs > CONFIG_ATTACKS.len(),
        "{refused_configs} config refusals: {mine:#?}"
    );
    let all = refused_more_than(&m, CONFIG_ATTACKS.len(), |r| {
        r["rule"] == "PROTECTED"
            && r["target"]
                .as_str()
                .is_some_and(|t| t.ends_with(".git/config"))
    });
    assert!(all.iter().any(|r| r["result"] == "denied"
        && r["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("shared/.gitmodules"))));
}

/// A repository of the agent's own is guarded where someone else's git would reach it: nested
/// in a shared repository (whose git recurses into submodules with `GIT_DIR` set, skipping the
/// ownership check), or moved under one. A `.git` moved into place must be the agent's, and a
/// bare repository may be made only in a folder of its own.
#[test]
fn an_agents_repository_under_someone_elses_stays_guarded() {
    let m = Mounted::new();
    let repo = m.ws().join("shared");
    real_repository(&repo, 3);
    let prepared = m.ws().join("prepared");
    fs::create_dir_all(prepared.join("hooks")).unwrap();
    fs::write(prepared.join("config"), "[core]\n\tfsmonitor = x\n").unwrap();
    fs::write(prepared.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    share_with_agents(&repo);
    share_with_agents(&prepared);
    let env = git_env(&m);
    let (r, w) = (repo.display(), m.ws());
    let w = w.display();
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "{env}
             mkdir {r}/inner && cd {r}/inner && g init -q && echo nested-init-ok
             printf '[core]\\n\\tfsmonitor = x\\n' > c && {{ mv c .git/config 2>/dev/null || echo refused-nested-config; }}
             (echo x > .git/hooks/post-checkout) 2>/dev/null || echo refused-nested-hook
             (echo 'gitdir: /tmp' > {r}/other-gitfile/.git) 2>/dev/null; mkdir -p {r}/gf && {{ (echo 'gitdir: /tmp' > {r}/gf/.git) 2>/dev/null || echo refused-gitfile; }}
             git init -q --bare {r}/bare.git 2>/dev/null || echo refused-bare-in-shared
             mkdir {w}/mine && cd {w}/mine && g init -q && g config core.fsmonitor x && echo own-config-ok
             cd {w} && {{ mv {w}/mine {r}/vendored 2>/dev/null || echo refused-move-under; }}
             mkdir -p {w}/deep/a/b && mv {w}/mine {w}/deep/a/b/mine && {{ mv {w}/deep {r}/deep 2>/dev/null || echo refused-deep-move-under; }}
             mkdir {w}/own && {{ mv {w}/prepared {w}/own/.git 2>/dev/null || echo refused-foreign-dotgit; }}
             ln -s /tmp {w}/own/.git 2>/dev/null || echo refused-dotgit-symlink
             mkdir {w}/own-bare && git init -q --bare {w}/own-bare && echo own-bare-ok
             echo end"
        ),
    );
    let o = text(&out);
    for want in [
        "nested-init-ok",
        "refused-nested-config",
        "refused-nested-hook",
        "refused-gitfile",
        "refused-bare-in-shared",
        "own-config-ok",
        "refused-move-under",
        "refused-deep-move-under",
        "refused-foreign-dotgit",
        "refused-dotgit-symlink",
        "own-bare-ok",
        "end",
    ] {
        assert!(o.contains(want), "missing {want}: {o}");
    }
    assert!(!repo.join("vendored").exists() && !repo.join("deep").exists());
    assert!(!m.ws().join("own/.git").exists() && prepared.join("config").exists());
    let inner = fs::read_to_string(repo.join("inner/.git/config")).unwrap();
    assert!(!inner.contains("fsmonitor"), "{inner}");
    // The bare repository the agent made in its own folder is one root's git refuses.
    let root = root_git(&m.ws().join("own-bare"), &["log"]);
    assert!(text(&root).contains("dubious ownership"), "{}", text(&root));
}

/// A submodule's git dir in a shared repository (`.git/modules/<name>/`) is a git dir of its
/// own, which the superproject's git enters with `GIT_DIR` set (no ownership check): a
/// `commondir` or `gitdir` planted there would send root's `git status` to a repository the
/// agent owns, and run its config. Found by a red-team round.
#[test]
fn a_submodules_git_dir_cannot_be_sent_to_the_agents_repository() {
    let m = Mounted::new();
    let lib = m.ws().join("lib-upstream");
    real_repository(&lib, 2);
    let repo = m.ws().join("shared");
    real_repository(&repo, 2);
    let out = root_git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap(),
            "lib",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = root_git(&repo, &["commit", "-qm", "lib"]);
    assert!(out.status.success(), "{}", text(&out));
    share_with_agents(&repo);
    let marker = m.dir.path().join("PWNED-by-commondir");
    let env = git_env(&m);
    let evil = m.path("agents/fs-engine/evil");
    let (r, e) = (repo.display(), evil.display());
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "{env}
             mkdir -p {e} && cd {e} && g init -q && g commit -q --allow-empty -m x
             g config core.fsmonitor 'touch {marker}; false'
             cd {r}
             (echo {e}/.git > .git/modules/lib/commondir) 2>/dev/null || echo refused-commondir
             (echo {e}/.git > .git/Modules/lib/CommonDir) 2>/dev/null || echo refused-commondir-case
             (echo {e}/.git > .git/modules/lib/gitdir) 2>/dev/null || echo refused-gitdir
             mkdir -p .git/modules/lib/worktrees/x
             (echo {e}/.git > .git/modules/lib/worktrees/x/commondir) 2>/dev/null || echo refused-worktree-commondir
             echo {e}/.git > c && {{ mv c .git/modules/lib/commondir 2>/dev/null || echo refused-mv-commondir; }}
             echo end",
            marker = marker.display()
        ),
    );
    let o = text(&out);
    for want in [
        "refused-commondir\n",
        "refused-commondir-case",
        "refused-gitdir",
        "refused-worktree-commondir",
        "refused-mv-commondir",
        "end",
    ] {
        assert!(o.contains(want), "missing {want}: {o}");
    }
    for args in [&["status"][..], &["diff"], &["submodule", "status"]] {
        let _ = root_git(&repo, args);
    }
    assert!(!marker.exists(), "root ran the agent's command");
    assert!(!repo.join(".git/modules/lib/commondir").exists());
}

/// In a shared repository the state of an operation in progress (`.git/rebase-merge`,
/// `rebase-apply`, `sequencer`) is its owner's: a planted merge strategy (git runs
/// `git-merge-<strategy>`, a path) or todo list would run when root continues. No symlink may
/// be made or moved into its `.git` either: as `.git/modules/<name>` it sends root's `git
/// submodule update` to the agent's repository, as `.git/rebase-merge` to a todo list of the
/// agent's, or to a folder of root's that `git rebase --quit` then empties. Found by a
/// red-team round.
#[test]
fn a_shared_repositorys_operation_state_and_symlinks_are_the_owners() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let marker = m.dir.path().join("PWNED-by-state");
    let env = git_env(&m);
    let own = m.path("agents/fs-engine/own");
    let (r, o) = (repo.display(), own.display());
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "{env}
             mkdir -p {o}/rmx && cd {o} && g init -q && g commit -q --allow-empty -m x
             printf 'exec touch {marker}\\n' > {o}/rmx/git-rebase-todo
             cd {r}
             mkdir -p git-merge-x && printf '#!/bin/sh\\ntouch {marker}\\n' > git-merge-x/evil && chmod +x git-merge-x/evil
             mkdir .git/rebase-merge 2>/dev/null || echo refused-rebase-merge
             mkdir .git/Sequencer 2>/dev/null || echo refused-sequencer
             mkdir .git/rebase-apply 2>/dev/null || echo refused-rebase-apply
             mkdir -p {o}/state && echo x/evil > {o}/state/strategy
             mv {o}/state .git/rebase-merge 2>/dev/null || echo refused-move-state
             ln -s {o}/rmx .git/rebase-merge 2>/dev/null || echo refused-link-rebase-merge
             mkdir -p .git/modules && {{ ln -s {o}/.git .git/modules/lib 2>/dev/null || echo refused-link-module; }}
             ln -s {o}/.git {o}/mod-link && {{ mv {o}/mod-link .git/modules/lib 2>/dev/null || echo refused-move-link; }}
             ln {o}/mod-link .git/modules/lib 2>/dev/null || echo refused-hardlink-link
             echo end",
            marker = marker.display()
        ),
    );
    let out_text = text(&out);
    for want in [
        "refused-rebase-merge",
        "refused-sequencer",
        "refused-rebase-apply",
        "refused-move-state",
        "refused-link-rebase-merge",
        "refused-link-module",
        "refused-move-link",
        "refused-hardlink-link",
        "end",
    ] {
        assert!(out_text.contains(want), "missing {want}: {out_text}");
    }
    for args in [
        &["status"][..],
        &["rebase", "--continue"],
        &["cherry-pick", "--continue"],
        &["submodule", "update", "--init"],
        &["rebase", "--quit"],
    ] {
        let _ = root_git(&repo, args);
    }
    assert!(!marker.exists(), "root ran the agent's command");
    assert!(!repo.join(".git/rebase-merge").exists());
    assert!(fs::symlink_metadata(repo.join(".git/modules/lib")).is_err());
}

/// The `move` and `restore` tools carry a folder as a rename through the mount does: an agent's
/// own repository goes under a repository someone else owns by neither. Found by a red-team
/// round: the tools checked only the two paths, and root's `git status` in the shared
/// repository then ran the moved repository's `core.fsmonitor` as root.
#[test]
fn the_tools_do_not_carry_an_agents_repository_under_someone_elses() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 3);
    let w = m.ws();
    agent_git(
        &m,
        &format!(
            "for d in mine gone; do mkdir {w}/$d && cd {w}/$d && g init -q && g config core.fsmonitor x || exit 1; done
             mkdir {w}/plain && echo hi > {w}/plain/f",
            w = w.display()
        ),
    );
    let call = |tool: &str, request: serde_json::Value| -> serde_json::Value {
        let out = m.run_agent_as(
            "fs-engine",
            &[],
            &crate::common::tool_call_script(&m, tool, &request),
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{tool}: {e}: {}", text(&out)))
    };
    let before = snapshot(&repo);
    let moved = call(
        "move",
        serde_json::json!({"from": "mine", "to": "shared/vendored"}),
    );
    assert_eq!(moved["error"], "denied", "{moved}");
    let deleted = call("delete", serde_json::json!({"path": "gone"}));
    let id = deleted["trash_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{deleted}"))
        .to_string();
    let restored = call(
        "restore",
        serde_json::json!({"trash_id": id, "to": "shared/restored"}),
    );
    assert_eq!(restored["error"], "denied", "{restored}");
    assert_eq!(snapshot(&repo), before, "the shared repository changed");
    assert!(w.join("mine/.git/config").exists());
    // What may go there still does: a folder without a repository; and the repository goes
    // anywhere no one else's is.
    let plain = call(
        "move",
        serde_json::json!({"from": "plain", "to": "shared/plain"}),
    );
    assert!(plain["error"].is_null(), "{plain}");
    let own = call("move", serde_json::json!({"from": "mine", "to": "mine2"}));
    assert!(own["error"].is_null(), "{own}");
    let all = audit_until(&m, |all| {
        ["tool:move", "tool:restore"].iter().all(|op| {
            all.iter()
                .any(|r| r["operation"] == *op && r["result"] == "denied")
        })
    });
    assert!(
        denials(&m, "fs-engine")
            .iter()
            .filter(|d| d.to_string().contains("tool:"))
            .count()
            >= 2,
        "{all:?}"
    );
}

/// The look through a folder moving under someone else's repository is no window: an agent
/// thread renames a prepared `xgit` onto `.git` inside the folder while another thread's move
/// of it is being looked through, at several points of the look. Found by a red-team round:
/// the `.git` landed in a part already looked through, and the move carried it under root's
/// repository. Now the rename onto `.git` waits for the move and is decided under the
/// repository, where it is refused.
#[test]
fn a_git_made_while_its_folder_is_moved_under_someone_elses_does_not_land() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 3);
    let before = snapshot(&repo);
    let (folder, dest) = (m.ws().join("f/F"), repo.join("F"));
    // The look goes through the folder's entries last listed first: the prepared repository
    // goes in the folder looked through first, so that the rest of the look (9 × 1,500
    // folders) comes after it.
    let script = format!(
        r#"
import os, threading, time
F, DEST = {folder:?}, {dest:?}
for i in range(10):
    os.makedirs(F + "/c%d" % i)
first = os.listdir(F)[-1]
for c in os.listdir(F):
    if c != first:
        for j in range(1500):
            os.mkdir(F + "/" + c + "/d%04d" % j)
prep = F + "/" + first + "/xgit"
for d in ("objects", "refs/heads", "hooks"):
    os.makedirs(prep + "/" + d)
open(prep + "/HEAD", "w").write("ref: refs/heads/main\n")
open(prep + "/config", "w").write("[core]\n\tfsmonitor = touch /tmp/carried\n")
t0 = time.monotonic(); os.rename(F, DEST); took = time.monotonic() - t0
os.rename(DEST, F)
print("look %.0f ms" % (took * 1000), flush=True)
for frac in (0.1, 0.25, 0.4, 0.55, 0.7, 0.85) * 2:
    moved = {{}}
    def move():
        try:
            os.rename(F, DEST); moved["ok"] = True
        except OSError as e:
            moved["ok"] = False
    t = threading.Thread(target=move); t.start()
    time.sleep(frac * took)
    try:
        os.rename(F + "/" + first + "/xgit", F + "/" + first + "/.git"); made = "made"
    except OSError as e:
        made = "refused " + os.strerror(e.errno)
    t.join()
    if os.path.isdir(DEST + "/" + first + "/.git"):
        print("CARRIED at %.2f" % frac, flush=True)
        break
    print("at %.2f: move %s, .git %s" % (frac, moved["ok"], made), flush=True)
    if moved["ok"]:
        os.rename(DEST, F)
    if os.path.isdir(F + "/" + first + "/.git"):
        os.rename(F + "/" + first + "/.git", F + "/" + first + "/xgit")
print("end", flush=True)
"#
    );
    let out = crate::support::python_as_agent(&m, &script);
    assert!(out.contains("end") && !out.contains("CARRIED"), "{out}");
    // A try whose move landed had its `.git` refused: decided after the move, under the
    // repository.
    assert!(out.contains("move True, .git refused"), "{out}");
    assert_eq!(snapshot(&repo), before, "the shared repository changed");
    audit_until(&m, |all| {
        all.iter().any(|r| {
            r["operation"] == "rename"
                && r["result"] == "denied"
                && r["target"]
                    .as_str()
                    .is_some_and(|p| p.contains("/shared/F/") && p.ends_with("/.git"))
        })
    });
}

/// Where the moved folder comes from does not spare it the look: a repository under another's
/// `.git` may still be one whose config was never guarded. Found by a red-team round, in two
/// shapes: (1) one agent renames its repository into root's by descriptor while a second
/// thread keeps moving the repository's parent folder, so the path decided on was not where
/// the folder was; (2) two agents: one makes a repository in a shared folder, the other a
/// `.git` above it, and the first then moves its repository into root's as if from under a
/// guarded one; (3) an agent moves its repository into a repository of its own that it made
/// inside root's, as if under one it owns. Root's own submodules still move within root's
/// repository.
#[test]
fn a_repository_moved_from_anywhere_is_looked_through() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 3);
    fs::create_dir_all(repo.join("vendor/sub")).unwrap();
    assert!(root_git(&repo.join("vendor/sub"), &["init", "-q"])
        .status
        .success());
    share_with_agents(&repo.join("vendor"));
    let w = m.ws();
    agent_git(
        &m,
        &format!(
            "mkdir -p {w}/mine/repo {w}/p/inner {w}/mine2 {r}/nested && chmod 777 {w}/p || exit 1
             for r in {w}/mine/repo {w}/p/inner {w}/mine2; do g init -q $r && g -C $r config core.fsmonitor 'touch /tmp/carried' || exit 1; done
             g init -q {r}/nested",
            w = w.display(),
            r = repo.display(),
        ),
    );
    let other = m.run_agent_as(
        "build-engine",
        &[],
        &format!("mkdir {}/p/.git", w.display()),
    );
    assert!(other.status.success(), "{}", text(&other));
    let before = snapshot(&repo);
    let script = format!(
        r#"
import os, threading
W, R = {w:?}, {r:?}
os.chdir(W)
mine = os.open("mine", os.O_RDONLY | os.O_DIRECTORY)
shared = os.open(R, os.O_RDONLY | os.O_DIRECTORY)
stop = False
def toggle():
    while not stop:
        try:
            os.rename("mine", "minex"); os.rename("minex", "mine")
        except OSError:
            pass
t = threading.Thread(target=toggle); t.start()
landed = 0
for i in range(400):
    try:
        os.rename("repo", "landed", src_dir_fd=mine, dst_dir_fd=shared)
        landed += 1
        os.rename("landed", "repo", src_dir_fd=shared, dst_dir_fd=mine)
    except OSError:
        pass
stop = True; t.join()
print("landed", landed)
probe("coop", lambda: os.rename(W + "/p/inner", R + "/coop"))
probe("nested", lambda: os.rename(W + "/mine2", R + "/nested/mine2"))
probe("submodule", lambda: os.rename(R + "/vendor/sub", R + "/vendor/moved"))
"#,
        w = w.display().to_string(),
        r = repo.display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &["landed 0", "coop EROFS", "nested EROFS", "submodule ok"],
    );
    let after: Vec<String> = snapshot(&repo)
        .into_iter()
        .filter(|l| !l.starts_with("vendor/"))
        .collect();
    let before: Vec<String> = before
        .into_iter()
        .filter(|l| !l.starts_with("vendor/"))
        .collect();
    assert_eq!(
        after, before,
        "the shared repository changed outside vendor/"
    );
    assert!(!repo.join("landed").exists() && !repo.join("coop").exists());
    assert!(repo.join("vendor/moved/.git").is_dir());
}

/// What decides by a path decides where the operation acts: an agent holding a descriptor of
/// root's `.git/hooks` (or root's repository's top) creates a hook (or `.gitmodules`) through
/// it while a second thread keeps exchanging root's repository with a look-alike of its own,
/// so that the path looked up by name shows the agent's repository. Found by a red-team round
/// (a shared folder root made writable to all, without the sticky bit): root's next commit ran
/// the hook. And the tools write no `HEAD`, which would make root's folder a bare repository.
#[test]
fn names_moved_under_an_operation_do_not_change_its_decision() {
    let m = Mounted::new();
    let shared = m.ws().join("open");
    fs::create_dir_all(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
    for (repo, args) in [
        ("proj", &["init", "-q"][..]),
        ("proj2", &["init", "-q", "--shared=group"]),
    ] {
        fs::create_dir_all(shared.join(repo)).unwrap();
        assert!(root_git(&shared.join(repo), args).status.success());
        share_with_agents(&shared.join(repo));
    }
    let script = format!(
        r##"
import ctypes, os, threading
S = {s:?}
libc = ctypes.CDLL(None, use_errno=True)
def exchange(a, b):
    libc.renameat2(-100, (S + "/" + a).encode(), -100, (S + "/" + b).encode(), 2)
os.makedirs(S + "/fake2/.git/hooks"); os.makedirs(S + "/fake/.git")
hooks = os.open(S + "/proj2/.git/hooks", os.O_RDONLY | os.O_DIRECTORY)
top = os.open(S + "/proj", os.O_RDONLY | os.O_DIRECTORY)
stop = False
def toggle():
    while not stop:
        exchange("proj2", "fake2"); exchange("proj", "fake")
t = threading.Thread(target=toggle); t.start()
made = {{"hook": 0, "gitmodules": 0}}
for i in range(400):
    for what, d, name in (("hook", hooks, "post-commit"), ("gitmodules", top, ".gitmodules")):
        try:
            fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o755, dir_fd=d)
            os.write(fd, b"#!/bin/sh\nid > /tmp/ran\n"); os.close(fd)
            made[what] += 1
        except OSError:
            pass
stop = True; t.join()
print("hook", made["hook"], "gitmodules", made["gitmodules"])
"##,
        s = shared.display().to_string(),
    );
    let out = crate::support::python_as_agent(&m, &script);
    assert!(out.contains("hook 0 gitmodules 0"), "{out}");
    // Wherever the exchanges left root's repositories, nothing of the agent's is in them.
    for name in ["proj", "proj2", "fake", "fake2"] {
        let dir = shared.join(name);
        let roots = fs::symlink_metadata(dir.join(".git"))
            .is_ok_and(|md| std::os::unix::fs::MetadataExt::uid(&md) == 0);
        if roots {
            assert!(!dir.join(".gitmodules").exists(), "{name}/.gitmodules");
            assert!(!dir.join(".git/hooks/post-commit").exists(), "{name} hook");
        }
    }
    let call = crate::common::tool_call_script(
        &m,
        "write_file",
        &serde_json::json!({"path": "open/HEAD", "content": "ref: refs/heads/main\n"}),
    );
    let answer = m.run_agent_as("fs-engine", &[], &call);
    let answer: serde_json::Value = serde_json::from_slice(&answer.stdout).unwrap();
    assert_eq!(answer["error"], "denied", "{answer}");
    assert!(!shared.join("HEAD").exists());
}

/// Git's config in a repository someone else owns is checked at its rename and keeps the one
/// name it was checked under. Found by a red-team round: the agent kept a second hard link to
/// the clean file it renamed onto `.git/config`, then edited that link with the tools, which
/// write the store directly; root's next `git status` ran the agent's `core.fsmonitor`.
#[test]
fn git_config_keeps_the_one_name_it_was_checked_under() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let config = repo.join(".git/config");
    let clean = CLEAN_CONFIG;
    let script = format!(
        r#"
import os
W, G = {w:?}, {g:?}
open(W + "/m3", "w").write({clean:?})
os.link(W + "/m3", G + "/config.lock")
probe("two-names", lambda: os.rename(G + "/config.lock", G + "/config"))
os.unlink(G + "/config.lock")
open(G + "/config.lock", "w").write({clean:?})
probe("one-name", lambda: os.rename(G + "/config.lock", G + "/config"))
probe("link-after", lambda: os.link(G + "/config", W + "/m4"))
"#,
        w = m.ws().display().to_string(),
        g = repo.join(".git").display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &["two-names EROFS", "one-name ok", "link-after EPERM"],
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(&config).unwrap().nlink(), 1);
    // The tools find no other name of it to write.
    let call = crate::common::tool_call_script(
        &m,
        "write_file",
        &serde_json::json!({"path": "m3", "content": "[core]\n\tfsmonitor = touch /tmp/x\n", "overwrite": true}),
    );
    let answer = m.run_agent_as("fs-engine", &[], &call);
    assert!(answer.status.success(), "{}", text(&answer));
    assert_eq!(fs::read_to_string(&config).unwrap(), clean);
    denied_on(&m, "rename", "target", "/shared/.git/config");
}

/// git writes a config as `config.lock`, closes it and at once renames it onto `config`; the
/// kernel sends the close's RELEASE after `close` returns, so the rename (checked, in someone
/// else's repository, with the file sealed against writers) can arrive before it. That rename
/// was refused as "open for writing" under load: an agent's `git config` in the full suite.
/// Here the agent does it a thousand times while it keeps the daemon busy listing the
/// repository; every rename lands, and the last config is the one in place.
#[test]
fn an_agents_config_renamed_right_after_its_close_lands() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let git = repo.join(".git");
    let clean = CLEAN_CONFIG;
    let script = format!(
        r#"
import os, subprocess
R, G, CLEAN = {r:?}, {g:?}, {clean:?}
busy = [subprocess.Popen(["sh", "-c", "while :; do ls -laR \"$0\" >/dev/null 2>&1; done", R]) for _ in range(2)]
refused = []
try:
    for i in range(1000):
        with open(G + "/config.lock", "w") as f:
            f.write(CLEAN + "[user]\n\tname = round %d\n" % i)
        try:
            os.rename(G + "/config.lock", G + "/config")
        except OSError as e:
            refused.append(e.errno)
            os.unlink(G + "/config.lock")
finally:
    for b in busy:
        b.kill(); b.wait()
print("refused", len(refused), sorted(set(refused)))
"#,
        r = repo.display().to_string(),
        g = git.display().to_string(),
    );
    let out = crate::support::python_as_agent(&m, &script);
    assert!(out.lines().any(|l| l == "refused 0 []"), "{out}");
    assert_eq!(
        fs::read_to_string(git.join("config")).unwrap(),
        format!("{clean}[user]\n\tname = round 999\n")
    );
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "{}\ncd {} || exit 9
             for i in $(seq 1 30); do g -c safe.directory='*' config user.email kept$i@example.invalid || exit 1; done",
            git_env(&m),
            repo.display()
        ),
    );
    assert!(out.status.success(), "{}", text(&out));
    let config = fs::read_to_string(git.join("config")).unwrap();
    assert!(
        config.contains("email = kept30@example.invalid"),
        "{config}"
    );
}

/// A rename onto git's config of a file still open for writing waits (for a release that
/// may be on its way) on a thread of its own: an agent that keeps its `config.lock` files open
/// and renames them at once (in four folders: the kernel lets one rename per folder through
/// at a time) holds up no thread serving requests. With two `/dev/fuse` threads and four such
/// renames waiting in the daemon, root still lists and makes files; the renames are then
/// refused, each audited.
#[test]
fn renames_waiting_for_a_writers_release_hold_up_no_one() {
    let m = Mounted::with_args(&["--no-io-uring", "--threads", "2"]);
    let repo = shared_repository(&m, 2);
    let git = repo.join(".git");
    for sub in ["s1", "s2", "s3"] {
        fs::create_dir_all(git.join("modules").join(sub)).unwrap();
    }
    share_with_agents(&git.join("modules"));
    let script = format!(
        r#"
import errno, os, threading
G = {g:?}
dirs = [G] + [G + "/modules/" + s for s in ("s1", "s2", "s3")]
held = []
for d in dirs:
    f = open(d + "/config.lock", "w")
    f.write("[core]\n\tbare = false\n"); f.flush()
    held.append(f)
got = []
def rename(d):
    try:
        os.rename(d + "/config.lock", d + "/config"); got.append("ok")
    except OSError as e:
        got.append(errno.errorcode[e.errno])
ts = [threading.Thread(target=rename, args=(d,)) for d in dirs]
for t in ts: t.start()
for t in ts: t.join()
for f in held: f.close()
print("renames", " ".join(sorted(got)))
"#,
        g = git.display().to_string(),
    );
    let mut agent = m
        .run_command("fs-engine")
        .args(["--", "python3", "-c", &script])
        .current_dir("/")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while m.thread_count("rename-wait") < 4 {
        if agent.try_wait().unwrap().is_some() || std::time::Instant::now() > deadline {
            let _ = agent.kill();
            let out = agent.wait_with_output().unwrap();
            panic!(
                "the renames were not put off ({} waiting): {} {:?}",
                m.thread_count("rename-wait"),
                text(&out),
                crate::support::denials(&m, "fs-engine")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Both request threads are free for root while the four wait.
    assert!(fs::read_dir(&repo).unwrap().count() > 0);
    fs::write(m.ws().join("roots-note"), "made meanwhile\n").unwrap();
    assert_eq!(
        m.thread_count("rename-wait"),
        4,
        "root's requests waited for a rename"
    );
    let out = agent.wait_with_output().unwrap();
    assert!(
        text(&out).contains("renames EROFS EROFS EROFS EROFS"),
        "{}",
        text(&out)
    );
    assert_eq!(
        fs::read_to_string(m.ws().join("roots-note")).unwrap(),
        "made meanwhile\n"
    );
    refused_more_than(&m, 3, |r| {
        r["operation"] == "rename"
            && r["reason"]
                .as_str()
                .is_some_and(|w| w.contains("is open for writing"))
    });
}

/// An agent that renames its open `config.lock` and closes it only while the rename waits
/// (a red-team round closed it just before the wait ended, over and over) kept root's `.git`
/// folder locked: the kernel holds it while the rename waits, and root's `git commit` took
/// 11.5 s. A release that comes late was not on its way: that wait counts as in vain, and the
/// agent's next such renames are decided at once (refused while the file is open).
#[test]
fn a_config_closed_during_the_wait_pauses_the_agents_waits() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let script = format!(
        r#"
import errno, os, threading
G, CLEAN = {g:?}, {clean:?}
got = []
for i in range(10):
    fd = os.open(G + "/config.lock", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, CLEAN.encode())
    closer = threading.Timer(0.15, os.close, (fd,)); closer.start()
    try:
        os.rename(G + "/config.lock", G + "/config"); got.append("ok")
    except OSError as e:
        got.append(errno.errorcode[e.errno])
    closer.join()
    if os.path.exists(G + "/config.lock"): os.unlink(G + "/config.lock")
print("ok", got.count("ok"), "refused", got.count("EROFS"))
"#,
        g = repo.join(".git").display().to_string(),
        clean = CLEAN_CONFIG,
    );
    let out = crate::support::python_as_agent(&m, &script);
    let counts: Vec<usize> = out
        .lines()
        .find_map(|l| l.strip_prefix("ok "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        matches!(counts[..], [ok, refused] if ok <= 1 && ok + refused == 10),
        "{out}"
    );
}

/// Root's git writes a config (or `.gitmodules`) as a lock file it then renames into place,
/// unchecked: in a repository shared with the agents' group (`git init --shared=group`) the
/// lock file is group-writable. Found by a red-team round: the agent opened root's
/// `config.lock` for appending, kept the descriptor across root's rename, and wrote
/// `core.fsmonitor` into root's config. Agents write only lock files of their own there, and
/// no remote defined the old way (`.git/remotes/<name>`, a URL git still reads). Nor a
/// submodule's `.git` file made group-writable with the rest (`chmod -R g+rwX`), which the next
/// review pointed at the agent's own repository: root's `git status` ran its fsmonitor. Nor
/// rename a file of its own onto root's lock, or remove root's lock and make its own (the
/// next review, while root's `git commit -a` held `index.lock` with its editor open).
#[test]
fn an_agent_cannot_write_roots_lock_or_gitdir_files() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let git = repo.join(".git");
    for (lock, of) in [
        (git.join("config.lock"), git.join("config")),
        (git.join("index.lock"), git.join("index")),
        (repo.join(".gitmodules.lock"), repo.join(".gitmodules")),
    ] {
        if of.exists() {
            fs::copy(&of, &lock).unwrap();
        } else {
            fs::write(&lock, "").unwrap();
        }
        share_with_agents(&lock);
    }
    fs::create_dir_all(git.join("remotes")).unwrap();
    share_with_agents(&git.join("remotes"));
    fs::create_dir_all(repo.join("sub")).unwrap();
    fs::write(repo.join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
    share_with_agents(&repo.join("sub"));
    let before = snapshot(&repo);
    let script = format!(
        r#"
import os
G, R = {g:?}, {r:?}
probe("config-lock", lambda: os.open(G + "/config.lock", os.O_WRONLY | os.O_APPEND))
probe("gitmodules-lock", lambda: os.open(R + "/.gitmodules.lock", os.O_WRONLY | os.O_APPEND))
probe("truncate", lambda: os.truncate(G + "/config.lock", 0))
probe("legacy-remote", lambda: open(G + "/remotes/evil", "w"))
probe("gitdir-file", lambda: os.open(R + "/sub/.git", os.O_WRONLY | os.O_TRUNC))
probe("gitdir-truncate", lambda: os.truncate(R + "/sub/.git", 0))
probe("index-lock", lambda: os.open(G + "/index.lock", os.O_WRONLY | os.O_APPEND))
open(R + "/mine", "w").write("[core]\n\tbare = false\n")
probe("rename-onto-index-lock", lambda: os.rename(R + "/mine", G + "/index.lock"))
probe("rename-onto-config-lock", lambda: os.rename(R + "/mine", G + "/config.lock"))
probe("rename-onto-gitmodules-lock", lambda: os.rename(R + "/mine", R + "/.gitmodules.lock"))
probe("unlink-index-lock", lambda: os.unlink(G + "/index.lock"))
probe("unlink-config-lock", lambda: os.unlink(G + "/config.lock"))
probe("rename-lock-away", lambda: os.rename(G + "/index.lock", R + "/taken"))
os.unlink(R + "/mine")
"#,
        g = git.display().to_string(),
        r = repo.display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "config-lock EROFS",
            "gitmodules-lock EROFS",
            "truncate EROFS",
            "legacy-remote EROFS",
            "gitdir-file EROFS",
            "gitdir-truncate EROFS",
            "index-lock EROFS",
            "rename-onto-index-lock EROFS",
            "rename-onto-config-lock EROFS",
            "rename-onto-gitmodules-lock EROFS",
            "unlink-index-lock EROFS",
            "unlink-config-lock EROFS",
            "rename-lock-away EROFS",
        ],
    );
    assert_eq!(snapshot(&repo), before, "root's repository changed");
    // Its own lock file, as git makes one, the agent still writes: git config works in a
    // repository it owns, and a checked config still goes into root's.
    agent_git(
        &m,
        &format!(
            "mkdir {w}/mine && cd {w}/mine && g init -q && g config user.name x
             printf '[core]\\n\\tbare = false\\n' > {g}/config.lock.tmp && mv {g}/config.lock.tmp {g}/config",
            w = m.ws().display(),
            g = git.display(),
        ),
    );
    denied_on(&m, "open", "path", "/shared/.git/config.lock");
}

/// git does not check the paths of an index it reads: an entry `.git/hooks/post-checkout` in
/// the index of a repository shared with the agents' group (which an agent writes: `git add`
/// needs it) was written by root's next `git checkout -- .`, past the config's check. Found by
/// a red-team round. The index is put in place only by a rename whose entries the daemon
/// checks; a genuine one (the agent's `git add`) still lands.
#[test]
fn an_agent_cannot_put_a_git_path_in_a_shared_repositorys_index() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let git = repo.join(".git");
    let w = m.ws();
    // The attacker's index: what git writes for `xgit/hooks/post-checkout`, renamed to
    // `.git/…` (same length) and summed again, so git reads it as an index.
    let marker = m.dir.path().join("PWNED");
    agent_git(
        &m,
        &format!(
            "cd {r} || exit 9
             G() {{ g -c safe.directory='*' \"$@\"; }}
             printf '#!/bin/sh\\ntouch {marker}\\n' > {w}/hook
             blob=$(G hash-object -w {w}/hook)
             GIT_INDEX_FILE={w}/evil-index G update-index --add --cacheinfo 100755,$blob,xgit/hooks/post-checkout
             GIT_INDEX_FILE={w}/evil-config G update-index --add --cacheinfo 100644,$blob,XGIT/config
             GIT_INDEX_FILE={w}/evil-up G update-index --add --cacheinfo 100644,$blob,xx/up",
            r = repo.display(),
            w = w.display(),
            marker = marker.display(),
        ),
    );
    let before = snapshot(&git.join("hooks"));
    let index_before = fs::read(git.join("index")).unwrap();
    let script = format!(
        r#"
import hashlib, os, shutil
W, G = {w:?}, {g:?}
def patched(name, old, new):
    b = bytearray(open(W + "/" + name, "rb").read())
    at = b.find(old)
    b[at:at + len(new)] = new
    b[-20:] = hashlib.sha1(bytes(b[:-20])).digest()
    open(W + "/" + name + ".patched", "wb").write(b)
    return W + "/" + name + ".patched"
for name, old, new in [("evil-index", b"xgit/", b".git/"), ("evil-config", b"XGIT/", b".GIT/"), ("evil-up", b"xx/up", b"../up")]:
    shutil.copy(patched(name, old, new), G + "/index.lock")
    probe("rename-" + name, lambda: os.rename(G + "/index.lock", G + "/index"))
    os.unlink(G + "/index.lock")
probe("write-in-place", lambda: os.open(G + "/index", os.O_WRONLY))
probe("create-other", lambda: os.open(G + "/worktrees-x-index", os.O_WRONLY | os.O_CREAT))
probe("shared-index", lambda: os.open(G + "/sharedindex.0123", os.O_WRONLY | os.O_CREAT))
"#,
        w = w.display().to_string(),
        g = git.display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "rename-evil-index EROFS",
            "rename-evil-config EROFS",
            "rename-evil-up EROFS",
            "write-in-place EROFS",
            "create-other ok",
            "shared-index EROFS",
        ],
    );
    assert_eq!(fs::read(git.join("index")).unwrap(), index_before);
    // Root's checkout writes nothing into .git, and runs nothing.
    let out = root_git(&repo, &["checkout", "--", "."]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(snapshot(&git.join("hooks")), before);
    assert!(!marker.exists(), "root's checkout ran the agent's hook");
    // A genuine index, written by the agent's own git, lands; root sees the agent's file.
    agent_git(
        &m,
        &format!(
            "cd {r} && echo new > by-agent.txt && g -c safe.directory='*' add by-agent.txt",
            r = repo.display()
        ),
    );
    let status = root_git(&repo, &["status", "--short"]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("A  by-agent.txt"),
        "{}",
        text(&status)
    );
    audit_until(&m, |all| {
        all.iter().any(|r| {
            r["operation"] == "rename"
                && r["result"] == "denied"
                && r["reason"]
                    .as_str()
                    .is_some_and(|why| why.contains("'.git/hooks/post-checkout'"))
        })
    });
}

/// git makes hook samples with its templates, so an agent may make a `*.sample` in a shared
/// repository's hooks folder; one it kept open for writing became a hook when root renamed
/// it into use, and the agent's next write was what root's git ran. Found by a red-team round.
/// Someone else's file becomes a hook only once nothing has it open for writing, and no agent
/// opens it for writing after.
#[test]
fn a_hook_sample_held_open_by_an_agent_does_not_become_a_hook() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let hooks = repo.join(".git/hooks");
    let (ready, go) = (m.ws().join("ready"), m.ws().join("go"));
    let marker = m.dir.path().join("PWNED");
    let script = format!(
        r##"
import os, time
H, READY, GO = {h:?}, {ready:?}, {go:?}
f = open(H + "/evil.sample", "w")
f.write("#!/bin/sh\nexit 0\n"); f.flush()
open(READY, "w").close()
while not os.path.exists(GO):
    time.sleep(0.02)
f.seek(0); f.write("#!/bin/sh\ntouch {marker}\n"); f.close()
"##,
        h = hooks.display().to_string(),
        ready = ready.display().to_string(),
        go = go.display().to_string(),
        marker = marker.display(),
    );
    let mut agent = m
        .run_command("fs-engine")
        .args(["--", "python3", "-c", &script])
        .current_dir("/")
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while !ready.exists() {
        assert!(
            waited.elapsed().as_secs() < 60 && agent.try_wait().unwrap().is_none(),
            "the agent did not make its sample"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let renamed = fs::rename(hooks.join("evil.sample"), hooks.join("pre-commit"));
    fs::write(&go, "").unwrap();
    assert!(agent.wait().unwrap().success());
    assert_eq!(
        renamed.map_err(|e| e.raw_os_error()),
        Err(Some(libc::ETXTBSY)),
        "root made a hook of a file the agent still writes"
    );
    assert!(!hooks.join("pre-commit").exists());
    // Closed, it may become a hook (root's choice, with what it holds now), and the agent
    // cannot write it any more.
    fs::rename(hooks.join("evil.sample"), hooks.join("pre-commit")).unwrap();
    fs::write(hooks.join("pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    let h = hooks.display().to_string();
    probes_as_agent(
        &m,
        &format!(
            "probe('write-hook', lambda: os.open({:?}, os.O_WRONLY))\n",
            format!("{h}/pre-commit")
        ),
        &["write-hook EROFS"],
    );
    let commit = root_git(&repo, &["commit", "-q", "--allow-empty", "-m", "x"]);
    assert!(commit.status.success(), "{}", text(&commit));
    assert!(!marker.exists(), "root's git ran what the agent wrote");
    denied_on(&m, "rename", "target", "/.git/hooks/pre-commit");
}

/// A hook sample the agent made as a second name of a file of its own became root's hook when
/// root renamed it into use, and the agent then rewrote it by its other name with the
/// `write_file` tool (which writes the store directly). Found by a red-team round. An agent
/// makes no second name in someone else's hooks folder, and someone else's file with two
/// names does not become a hook.
#[test]
fn a_hook_has_one_name_the_agent_cannot_write() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let hooks = repo.join(".git/hooks");
    let w = m.ws();
    let script = format!(
        "open({w:?} + '/mine', 'w').write('#!/bin/sh\\nexit 0\\n')\n\
         probe('link-sample', lambda: os.link({w:?} + '/mine', {h:?} + '/post-commit.sample'))\n\
         probe('link-hook', lambda: os.link({w:?} + '/mine', {h:?} + '/post-commit'))\n",
        w = w.display().to_string(),
        h = hooks.display().to_string(),
    );
    probes_as_agent(&m, &script, &["link-sample EROFS", "link-hook EROFS"]);
    // Someone else's file with a second name (made here by root for the agent) stays a sample.
    use std::os::unix::fs::{chown, MetadataExt};
    let agent_uid = fs::metadata(w.join("mine")).unwrap().uid();
    fs::write(hooks.join("two.sample"), "#!/bin/sh\nexit 0\n").unwrap();
    chown(hooks.join("two.sample"), Some(agent_uid), None).unwrap();
    fs::hard_link(hooks.join("two.sample"), w.join("two")).unwrap();
    let renamed = fs::rename(hooks.join("two.sample"), hooks.join("post-commit"));
    assert_eq!(
        renamed.map_err(|e| e.raw_os_error()),
        Err(Some(libc::EPERM))
    );
    assert!(!hooks.join("post-commit").exists());
    // With one name it may (root's choice); the agent cannot write it after.
    fs::remove_file(w.join("two")).unwrap();
    fs::rename(hooks.join("two.sample"), hooks.join("post-commit")).unwrap();
    probes_as_agent(
        &m,
        &format!(
            "probe('write-hook', lambda: os.open({:?}, os.O_WRONLY))\n",
            hooks.join("post-commit").display().to_string()
        ),
        &["write-hook EROFS"],
    );
    denied_on(&m, "link", "target", "/.git/hooks/post-commit.sample");
}

/// Root's `git checkout` makes a folder and then a file in it; an agent that swapped the new
/// folder for a symlink to `.git/hooks` (or to a folder outside the mount) in between had
/// root's git write a hook there. Found by a red-team round (won within three swaps). An
/// agent's symlink in someone else's repository, made or moved there, leads within the
/// workspace, to no `.git` in any spelling, and through no symlink.
#[test]
fn an_agents_symlinks_in_a_shared_repository_lead_nowhere_git_would_write_for_root() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    std::os::unix::fs::symlink("src", repo.join("root-link")).unwrap();
    let before = snapshot(&repo.join(".git"));
    let w = m.ws();
    let script = format!(
        r#"
R, W = {r:?}, {w:?}
for name, target in [
    ("hooks", ".git/hooks"), ("hooks-case", ".GIT/hooks"), ("hooks-ntfs", "git~1/hooks"),
    ("up-hooks", "src/../.git/hooks"), ("cron", "/etc/cron.d"), ("out", "../../../../etc"),
    ("via-root-link", "root-link/x"), ("empty", ""),
]:
    probe("symlink-" + name, lambda: os.symlink(target, R + "/d-" + name))
probe("symlink-inside", lambda: os.symlink("src/main.c", R + "/d-inside"))
probe("symlink-sibling", lambda: os.symlink("../other", R + "/d-sibling"))
os.symlink("/etc/cron.d", W + "/own-link")
probe("move-in", lambda: os.rename(W + "/own-link", R + "/d-moved"))
os.mkdir(R + "/folder")
"#,
        r = repo.display().to_string(),
        w = w.display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "symlink-hooks EPERM",
            "symlink-hooks-case EPERM",
            "symlink-hooks-ntfs EPERM",
            "symlink-up-hooks EPERM",
            "symlink-cron EPERM",
            "symlink-out EPERM",
            "symlink-via-root-link EPERM",
            "symlink-inside ok",
            "symlink-sibling ok",
            "move-in EROFS",
        ],
    );
    // An exchange of a folder with a symlink, as the race made it.
    let exchange = format!(
        r#"
R, W = {r:?}, {w:?}
probe("exchange", lambda: exchange(W + "/own-link", R + "/folder"))
"#,
        r = repo.display().to_string(),
        w = w.display().to_string(),
    );
    probes_as_agent(&m, &exchange, &["exchange EROFS"]);
    assert!(repo.join("folder").is_dir() && !repo.join("folder").is_symlink());
    for n in ["d-hooks", "d-cron", "d-out", "d-moved", "d-via-root-link"] {
        assert!(fs::symlink_metadata(repo.join(n)).is_err(), "{n} was made");
    }
    assert_eq!(snapshot(&repo.join(".git")), before);
    denied_on(&m, "symlink", "path", "/shared/d-hooks");
}

/// git reads indexes under names of its own: `git stash pop` of untracked files writes
/// `.git/index.stash.<pid>` and checks out what it lists. An agent watching `.git` renamed an
/// index listing `.git/hooks/pre-commit` onto it in between (five wins in five), and root's
/// next commit ran the hook. Found by a red-team round. Whatever its name, a file in someone
/// else's `.git` that is an index is checked when renamed there and never rewritten in place;
/// someone else's lock files are theirs alone.
#[test]
fn an_index_under_any_name_in_a_shared_repository_is_checked() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let git = repo.join(".git");
    let w = m.ws();
    // Root's git mid-stash: its temporary index, and a lock it is writing, group-writable as
    // everything in a shared repository.
    let stash = git.join("index.stash.4242");
    let out = std::process::Command::new("git")
        .args(["read-tree", "HEAD"])
        .current_dir(&repo)
        .env("GIT_INDEX_FILE", &stash)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    fs::copy(&stash, git.join("next-index-4242.lock")).unwrap();
    for f in [&stash, &git.join("next-index-4242.lock")] {
        share_with_agents(f);
    }
    let stash_before = fs::read(&stash).unwrap();
    let marker = m.dir.path().join("PWNED");
    agent_git(
        &m,
        &format!(
            "cd {r} || exit 9
             printf '#!/bin/sh\\ntouch {marker}\\n' > {w}/hook
             blob=$(g -c safe.directory='*' hash-object -w {w}/hook)
             GIT_INDEX_FILE={w}/evil-index g -c safe.directory='*' update-index --add --cacheinfo 100755,$blob,xgit/hooks/pre-commit",
            r = repo.display(),
            w = w.display(),
            marker = marker.display(),
        ),
    );
    let hooks_before = snapshot(&git.join("hooks"));
    let script = format!(
        r#"
import hashlib, os, shutil
W, G = {w:?}, {g:?}
b = bytearray(open(W + "/evil-index", "rb").read())
at = b.find(b"xgit/"); b[at:at + 1] = b"."
b[-20:] = hashlib.sha1(bytes(b[:-20])).digest()
open(W + "/evil", "wb").write(b)
def put(name):
    shutil.copy(W + "/evil", G + "/mine.tmp")
    try:
        os.rename(G + "/mine.tmp", G + "/" + name)
    finally:
        if os.path.exists(G + "/mine.tmp"): os.unlink(G + "/mine.tmp")
probe("rename-onto-stash-index", lambda: put("index.stash.4242"))
probe("rename-new-name", lambda: put("tmpidx"))
probe("rename-onto-roots-lock", lambda: put("next-index-4242.lock"))
probe("write-stash-index", lambda: os.open(G + "/index.stash.4242", os.O_WRONLY))
probe("truncate-stash-index", lambda: os.truncate(G + "/index.stash.4242", 0))
probe("write-roots-lock", lambda: os.open(G + "/next-index-4242.lock", os.O_WRONLY))
probe("unlink-roots-lock", lambda: os.unlink(G + "/next-index-4242.lock"))
open(G + "/notes.tmp", "w").write("not an index\n")
probe("rename-other-file", lambda: os.rename(G + "/notes.tmp", G + "/notes"))
"#,
        w = w.display().to_string(),
        g = git.display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "rename-onto-stash-index EROFS",
            "rename-new-name EROFS",
            "rename-onto-roots-lock EROFS",
            "write-stash-index EROFS",
            "truncate-stash-index EROFS",
            "write-roots-lock EROFS",
            "unlink-roots-lock EROFS",
            "rename-other-file ok",
        ],
    );
    assert_eq!(fs::read(&stash).unwrap(), stash_before);
    // What root's stash does next with its index writes nothing into .git.
    let out = std::process::Command::new("git")
        .args(["checkout-index", "--all", "--force"])
        .current_dir(&repo)
        .env("GIT_INDEX_FILE", &stash)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(snapshot(&git.join("hooks")), hooks_before);
    assert!(!marker.exists());
    // The agent's own git still works there.
    agent_git(
        &m,
        &format!(
            "cd {r} && echo x > by-agent && g -c safe.directory='*' add by-agent && g -c safe.directory='*' commit -qm by-agent && g -c safe.directory='*' stash list >/dev/null",
            r = repo.display()
        ),
    );
    denied_on(&m, "open", "path", "/.git/index.stash.4242");
}

/// git replays recorded conflict resolutions (rerere) after every commit once `.git/rr-cache`
/// exists, onto the paths `.git/MERGE_RR` names, wherever they are: an agent that wrote a
/// resolution of root's `.git/config` adding `core.fsmonitor`, and a `MERGE_RR` naming it,
/// had root's `git commit -a` rewrite the config ("Resolved '.git/config' using previous
/// resolution"), and root's next `git status` ran the command; a path outside the mount was
/// rewritten the same way, and a root-only file copied where the agent could read it. Found
/// by a red-team round. rerere's state is its owner's, as a rebase's is.
#[test]
fn rerere_state_in_a_shared_repository_is_the_owners() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let git = repo.join(".git");
    let config_before = fs::read(git.join("config")).unwrap();
    // Root has rerere on in one case: its rr-cache exists, group-writable.
    fs::create_dir(git.join("rr-cache")).unwrap();
    share_with_agents(&git.join("rr-cache"));
    let id = "0123456789abcdef0123456789abcdef01234567";
    let script = format!(
        r#"
G = {g:?}
probe("mkdir-resolution", lambda: os.mkdir(G + "/rr-cache/{id}"))
probe("merge-rr", lambda: open(G + "/MERGE_RR", "w").write("{id}.-1\t.git/config\0"))
open(G + "/MERGE_RR.lock", "w").write("{id}.-1\t.git/config\0")
probe("merge-rr-rename", lambda: os.rename(G + "/MERGE_RR.lock", G + "/MERGE_RR"))
probe("rmdir-rr-cache", lambda: os.rmdir(G + "/rr-cache"))
probe("mkdir-rr-cache", lambda: os.mkdir(G + "/RR-cache"))
"#,
        g = git.display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "mkdir-resolution EROFS",
            "merge-rr EROFS",
            "merge-rr-rename EROFS",
            "rmdir-rr-cache ok",
            "mkdir-rr-cache EROFS",
        ],
    );
    assert!(!git.join("MERGE_RR").exists());
    fs::write(repo.join("src/changed-by-root.c"), "int x;\n").unwrap();
    let add = root_git(&repo, &["add", "src/changed-by-root.c"]);
    assert!(add.status.success(), "{}", text(&add));
    let commit = root_git(&repo, &["commit", "-q", "-a", "-m", "root"]);
    assert!(commit.status.success(), "{}", text(&commit));
    assert_eq!(fs::read(git.join("config")).unwrap(), config_before);
    denied_on(&m, "create", "path", "/.git/MERGE_RR");
}

/// A folder moved into or within someone else's repository brings its symlinks along: one
/// made where symlinks are the agent's business (its own folder), or deep in the repository
/// where `../../../../../x` stays in the workspace, leads out of it (or into `.git/hooks`)
/// where the folder lands, and root's `git checkout` wrote through it when the agent swapped
/// the folder for one of root's. Found by a red-team round (won on the first run). Every
/// symlink in a moved folder is judged where it lands, as a symlink made there is.
#[test]
fn symlinks_inside_a_moved_folder_are_judged_where_they_land() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    fs::create_dir(repo.join("roots")).unwrap();
    share_with_agents(&repo.join("roots"));
    let before = snapshot(&repo.join(".git"));
    let script = format!(
        r#"
R, O = {r:?}, {o:?}
hooks = R + "/.git/hooks"
os.makedirs(O + "/k")
os.symlink(hooks, O + "/k/e")
probe("move-in-absolute", lambda: os.rename(O + "/k", R + "/k"))
os.makedirs(O + "/k2/sub")
os.symlink("../../../../../../etc", O + "/k2/sub/e")
probe("move-in-climbing", lambda: os.rename(O + "/k2", R + "/k2"))
deep = R + "/l1/l2/l3/l4"
os.makedirs(deep + "/k3")
probe("make-deep", lambda: os.symlink("../../../../../../z", deep + "/k3/e"))
probe("move-up", lambda: os.rename(deep + "/k3", R + "/k3"))
probe("exchange-with-roots", lambda: exchange(deep + "/k3", R + "/roots"))
os.makedirs(R + "/fine/sub")
os.symlink("../x", R + "/fine/sub/e")
probe("move-fine", lambda: os.rename(R + "/fine", R + "/l1/fine"))
"#,
        r = repo.display().to_string(),
        o = m.ws().join("own").display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "move-in-absolute EROFS",
            "move-in-climbing EROFS",
            "make-deep ok",
            "move-up EROFS",
            "exchange-with-roots EROFS",
            "move-fine ok",
        ],
    );
    assert!(!repo.join("k").exists() && !repo.join("k2").exists() && !repo.join("k3").exists());
    assert_eq!(snapshot(&repo.join(".git")), before);
    denied_on(&m, "rename", "target", "/shared/k");
}

/// Three more ways a symlink or a git dir reached root's repository, found by a red-team
/// round: a hard link gives a deep symlink (`../../../../x`, inside the workspace from there) a
/// second name at the repository's top, where it leads out; the `move` tool carried one the
/// same way (root's checkout wrote through both); and a linked worktree keeps its submodules'
/// git dirs at `.git/worktrees/<x>/modules/<name>/`, whose config and hooks root's git in the
/// worktree runs.
#[test]
fn links_tools_and_worktree_git_dirs_carry_nothing_past_the_guard() {
    let m = Mounted::new();
    let repo = shared_repository(&m, 2);
    let wt_modules = repo.join(".git/worktrees/wt/modules/sm");
    fs::create_dir_all(wt_modules.join("hooks")).unwrap();
    fs::write(wt_modules.join("config"), "[core]\n\tbare = false\n").unwrap();
    share_with_agents(&repo.join(".git/worktrees"));
    let before = snapshot(&repo.join(".git"));
    let script = format!(
        r#"
R, M = {r:?}, {m:?}
os.makedirs(R + "/z/a/b")
os.symlink("../../../../outside", R + "/z/a/b/s")
probe("link-up", lambda: os.link(R + "/z/a/b/s", R + "/d1", follow_symlinks=False))
probe("link-same-depth", lambda: os.link(R + "/z/a/b/s", R + "/z/a/b/s2", follow_symlinks=False))
probe("wt-sub-config", lambda: open(M + "/config", "a").write("[core]\n\tfsmonitor = x\n"))
probe("wt-sub-hook", lambda: open(M + "/hooks/post-checkout", "w"))
probe("wt-sub-new-config", lambda: open({n:?}, "w"))
"#,
        r = repo.display().to_string(),
        m = wt_modules.display().to_string(),
        n = repo
            .join(".git/worktrees/wt/modules/other/config")
            .display()
            .to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "link-up EPERM",
            "link-same-depth ok",
            "wt-sub-config EROFS",
            "wt-sub-hook EROFS",
        ],
    );
    assert!(fs::symlink_metadata(repo.join("d1")).is_err());
    let moved = m.run_agent_as(
        "fs-engine",
        &[],
        &crate::common::tool_call_script(
            &m,
            "move",
            &serde_json::json!({"from": "shared/z/a/b/s", "to": "shared/d2"}),
        ),
    );
    let moved: serde_json::Value =
        serde_json::from_slice(&moved.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&moved)));
    assert_eq!(moved["error"], "denied", "{moved}");
    assert!(fs::symlink_metadata(repo.join("d2")).is_err());
    assert_eq!(snapshot(&repo.join(".git")), before);
    denied_on(&m, "link", "target", "/shared/d1");
}

/// Root's repositories whose git dir is not named `.git` — a bare one the agents push to
/// (`git init --bare --shared=group`) and a worktree's `--separate-git-dir` — are git dirs by
/// what they hold: the agent writes neither hooks nor config there, by hand, through git, or
/// through the tools; cannot remove the `HEAD` that makes them one; and still pushes its work.
#[test]
fn a_git_dir_under_any_name_keeps_its_hooks_and_config() {
    let m = Mounted::new();
    let (bare, wt, sep) = (
        m.ws().join("shared.git"),
        m.ws().join("wt"),
        m.ws().join("wt-git"),
    );
    for (dir, args) in [
        (
            m.ws(),
            vec!["init", "-q", "--bare", "--shared=group", "shared.git"],
        ),
        (
            m.ws(),
            vec!["init", "-q", "--separate-git-dir=wt-git", "wt"],
        ),
    ] {
        let out = root_git(&dir, &args);
        assert!(out.status.success(), "{}", text(&out));
    }
    fs::write(wt.join("README"), "root's\n").unwrap();
    for args in [&["add", "README"][..], &["commit", "-qm", "root"]] {
        assert!(root_git(&wt, args).status.success());
    }
    for dir in [&bare, &wt, &sep] {
        share_with_agents(dir);
    }
    let kept = |dir: &Path| {
        (
            snapshot(&dir.join("hooks")),
            fs::read(dir.join("config")).unwrap(),
        )
    };
    let before = (kept(&bare), kept(&sep));
    let script = format!(
        r#"
B, S, W, A = {b:?}, {s:?}, {w:?}, {a:?}
probe("bare-hook", lambda: open(B + "/hooks/post-receive", "w"))
probe("bare-config", lambda: open(B + "/config", "a").write("[core]\n\tfsmonitor = x\n"))
probe("bare-head", lambda: os.unlink(B + "/HEAD"))
probe("bare-head-away", lambda: os.rename(B + "/HEAD", B + "/HEAD.old"))
os.makedirs(A + "/hooks")
probe("bare-hooks-in", lambda: os.rename(A + "/hooks", B + "/info/hooks"))
probe("sep-config", lambda: open(S + "/config", "a").write("[core]\n\thooksPath = /tmp\n"))
probe("sep-hook", lambda: open(S + "/hooks/pre-commit", "w"))
probe("wt-link", lambda: os.symlink("../shared.git/hooks", W + "/l"))
probe("wt-file", lambda: open(W + "/notes", "w").write("mine\n"))
"#,
        b = bare.display().to_string(),
        s = sep.display().to_string(),
        w = wt.display().to_string(),
        a = m.ws().join("prep").display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "bare-hook EROFS",
            "bare-config EROFS",
            "bare-head EROFS",
            "bare-head-away EROFS",
            "bare-hooks-in EROFS",
            "sep-config EROFS",
            "sep-hook EROFS",
            "wt-link EPERM",
            "wt-file ok",
        ],
    );
    // git's own way to the config is checked as at a `.git`; a push is the agent's to make.
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!(
            "{}\ng --git-dir={b} config core.fsmonitor 'touch /tmp/owned'; echo config=$?\n\
             cd $HOME && printf '[safe]\\n\\tdirectory = *\\n' > safe && G() {{ GIT_CONFIG_GLOBAL=$HOME/safe g \"$@\"; }} && G clone -q {b} mine && cd mine && echo x > x && G add x \
             && G commit -qm agent && G push -q origin HEAD:main && echo pushed",
            git_env(&m),
            b = bare.display()
        ),
    );
    let said = text(&out);
    assert!(
        said.contains("config=") && !said.contains("config=0"),
        "{said}"
    );
    assert!(said.contains("pushed"), "{said}");
    for (path, bad) in [
        ("shared.git/hooks/post-update", "tool-hook"),
        ("shared.git/config", "tool-config"),
    ] {
        let reply = m.run_agent_as(
            "fs-engine",
            &[],
            &crate::common::tool_call_script(
                &m,
                "write_file",
                &serde_json::json!({"path": path, "content": "#!/bin/sh\ntouch /tmp/x\n"}),
            ),
        );
        let reply: serde_json::Value = serde_json::from_slice(&reply.stdout)
            .unwrap_or_else(|e| panic!("{bad} {e}: {}", text(&reply)));
        assert_eq!(reply["error"], "denied", "{bad}: {reply}");
    }
    assert_eq!((kept(&bare), kept(&sep)), before);
    assert!(bare.join("HEAD").exists());
    let log = root_git(&bare, &["log", "--format=%an", "main"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout).trim(), "agent");
    denied_on(&m, "create", "path", "/shared.git/hooks/post-receive");
    denied_on(&m, "rename", "target", "/shared.git/config");
}

/// An agent cannot shape a folder of root's into a git dir with hooks of its own (a `hooks/`
/// in root's `.git/refs/tags/`, which root's own `git fetch` of a tag named `HEAD` would make
/// a git dir) nor send root's `git push` to a path on this machine of its choosing (a new
/// `pushurl`): root's push runs the receiving repository's hooks as root.
#[test]
fn root_is_not_sent_to_push_into_a_git_dir_the_agent_shaped() {
    let m = Mounted::new();
    let ws = m.ws();
    for args in [
        &["init", "-q", "--bare", "--shared=group", "proj.git"][..],
        &["clone", "-q", "proj.git", "rootclone"],
    ] {
        let out = root_git(&ws, args);
        assert!(out.status.success(), "{}", text(&out));
    }
    let clone = ws.join("rootclone");
    fs::write(clone.join("a"), "root's\n").unwrap();
    for args in [
        &["add", "a"][..],
        &["commit", "-qm", "root"],
        &["push", "-q", "origin", "HEAD:master"],
    ] {
        let out = root_git(&clone, args);
        assert!(out.status.success(), "{}", text(&out));
    }
    for dir in ["proj.git", "rootclone"] {
        share_with_agents(&ws.join(dir));
    }
    let config_before = fs::read(clone.join(".git/config")).unwrap();
    let tags = clone.join(".git/refs/tags");
    let script = format!(
        r#"
T, C = {t:?}, {c:?}
probe("plant-hooks", lambda: os.makedirs(T + "/hooks"))
probe("plant-hook-file", lambda: open(T + "/hooks", "w"))
cfg = open(C + "/config").read() + "[remote \"origin\"]\n\tpushurl = " + T + "\n"
open(C + "/config.tmp", "w").write(cfg)
probe("pushurl", lambda: os.rename(C + "/config.tmp", C + "/config"))
probe("plant-config", lambda: open(T + "/config", "w"))
probe("tag-head", lambda: open(T + "/HEAD", "w"))
probe("alternates", lambda: open(C + "/objects/info/alternates", "w"))
legacy = "[remote.Tools]\n\turl = https://example.org/x.git\n[branch \"master\"]\n\tpushRemote = Tools\n"
open(C + "/config.tmp", "w").write(open(C + "/config").read() + legacy)
probe("legacy-remote", lambda: os.rename(C + "/config.tmp", C + "/config"))
slash = "[remote \"" + T + "\"]\n\turl = https://example.org/x.git\n[branch \"master\"]\n\tremote = " + T + "\n"
open(C + "/config.tmp", "w").write(open(C + "/config").read() + slash)
probe("slash-remote", lambda: os.rename(C + "/config.tmp", C + "/config"))
"#,
        t = tags.display().to_string(),
        c = clone.join(".git").display().to_string(),
    );
    probes_as_agent(
        &m,
        &script,
        &[
            "plant-hooks EROFS",
            "plant-hook-file EROFS",
            "pushurl EROFS",
            "plant-config EROFS",
            "tag-head EROFS",
            "alternates EROFS",
            "legacy-remote EROFS",
            "slash-remote EROFS",
        ],
    );
    assert_eq!(fs::read(clone.join(".git/config")).unwrap(), config_before);
    assert!(!tags.join("hooks").exists());
    // Root's ordinary day after: fetch, commit, push, to its own repository.
    fs::write(clone.join("a"), "more\n").unwrap();
    for args in [
        &["fetch", "-q"][..],
        &["commit", "-qam", "work"],
        &["push", "-q", "origin", "master"],
    ] {
        let out = root_git(&clone, args);
        assert!(out.status.success(), "{}", text(&out));
    }
    denied_on(&m, "rename", "target", "/rootclone/.git/config");
    denied_on(&m, "mkdir", "path", "/rootclone/.git/refs/tags/hooks");
}
