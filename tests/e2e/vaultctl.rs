//! `vaultctl` and `vaultctl-ssh` (tools/vaultctl) against a real mount: the "edit note" loop of
//! docs/vaultctl.md end to end, its exit codes, and the forced-command wrapper's refusals. The
//! binaries are found next to `clawfs` in the target directory, built first if missing.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::common::Mounted;
use serde_json::Value;

fn vaultctl_bin() -> PathBuf {
    crate::common::workspace_bin("vaultctl", "vaultctl")
}

fn ssh_bin() -> PathBuf {
    crate::common::workspace_bin("vaultctl-ssh", "vaultctl")
}

/// What a run printed, parsed, and its exit code.
struct Run {
    json: Value,
    code: i32,
    stderr: String,
}

fn run(cmd: &mut Command, stdin: &str) -> Run {
    let out = crate::common::output_with_input(cmd, stdin.as_bytes());
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {:?}; stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Run {
        json,
        code: out.status.code().expect("exited"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `vaultctl --mount MNT ARGS` with `stdin`.
fn vaultctl(m: &Mounted, args: &[&str], stdin: &str) -> Run {
    let mut cmd = Command::new(vaultctl_bin());
    cmd.arg("--mount").arg(&m.mnt).args(args);
    cmd.env_remove("CLAWFS_MOUNT")
        .env_remove("CLAWFS_WORKSPACE");
    run(&mut cmd, stdin)
}

/// A long note (over the 400 lines after which docs/vaultctl.md's edit-note loop navigates first)
/// in the workspace `notes`.
fn long_note() -> String {
    let mut s = String::from("# Project Plan\n\nOverview text.\n");
    for section in 1..=5 {
        s.push_str(&format!("\n## Section {section}\n\n"));
        for i in 1..=100 {
            if section == 3 && i == 50 {
                s.push_str("- TODO: ship the beta\n");
            } else {
                s.push_str(&format!("Paragraph {section}.{i}.\n"));
            }
        }
    }
    s
}

#[test]
fn the_edit_note_loop_end_to_end() {
    let m = Mounted::new();
    fs::create_dir(m.path("workspaces/notes")).unwrap();
    let notes = m.path("workspaces/notes");
    fs::create_dir(notes.join("Projects")).unwrap();
    let original = long_note();
    fs::write(notes.join("Projects/Project Plan.md"), &original).unwrap();
    let ws = ["--workspace", "notes"];
    let with_ws = |args: &[&str]| -> Vec<String> {
        ws.iter()
            .chain(args.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let go = |args: &[&str], stdin: &str| {
        let args = with_ws(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        vaultctl(&m, &args, stdin)
    };

    // 1. resolve by title (case-insensitive file name)
    let r = go(&["resolve", "--title", "project plan"], "");
    assert_eq!(r.code, 0, "{}", r.json);
    let path = r.json["resolved_path"].as_str().unwrap().to_string();
    assert_eq!(path, "Projects/Project Plan.md");
    let r = go(&["resolve", "--path", "projects/project plan.md"], "");
    assert_eq!(r.json["resolved_path"], path.as_str());

    // 2. info
    let r = go(&["info", &path], "");
    assert_eq!(r.code, 0, "{}", r.json);
    let lines = r.json["lines"].as_u64().unwrap();
    assert!(lines > 400, "{}", r.json);
    let sha = r.json["sha256"].as_str().unwrap().to_string();

    // 3a. outline
    let r = go(&["outline", &path, "--max-headings", "3"], "");
    assert_eq!(r.code, 0, "{}", r.json);
    assert_eq!(r.json["headings"].as_array().unwrap().len(), 3);
    assert_eq!(r.json["headings"][2]["text"], "Section 2");
    assert_eq!(r.json["truncated"], true);

    // 3b. search
    let r = go(
        &[
            "search",
            &path,
            "todo:",
            "-i",
            "--context",
            "2",
            "--max-hits",
            "5",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{}", r.json);
    assert_eq!(r.json["total_hits"], 1);
    let hit = r.json["matches"][0]["line"].as_u64().unwrap();
    assert_eq!(r.json["matches"][0]["text"], "- TODO: ship the beta");
    assert_eq!(r.json["matches"][0]["context_before"][1], "Paragraph 3.49.");

    // 3c. read-range around the hit
    let (start, end) = (hit - 1, hit + 1);
    let r = go(
        &["read-range", &path, &start.to_string(), &end.to_string()],
        "",
    );
    assert_eq!(r.code, 0, "{}", r.json);
    assert_eq!(
        r.json["content"],
        "Paragraph 3.49.\n- TODO: ship the beta\nParagraph 3.51.\n"
    );

    // 4–5. a minimal diff against what was read, applied with the base hash
    let patch = format!(
        "--- a/{path}\n+++ b/{path}\n@@ -{start},3 +{start},4 @@\n Paragraph 3.49.\n-- TODO: ship the beta\n+- DONE: ship the beta\n+- TODO: announce it\n Paragraph 3.51.\n"
    );
    let r = go(&["apply-patch", &path, &sha], &patch);
    assert_eq!(r.code, 0, "{}", r.json);
    let new_sha = r.json["sha256"].as_str().unwrap().to_string();
    assert!(r.json["backup"].as_str().unwrap().contains(".bak."));
    let expected = original.replace(
        "- TODO: ship the beta\n",
        "- DONE: ship the beta\n- TODO: announce it\n",
    );
    assert_eq!(
        fs::read_to_string(notes.join("Projects/Project Plan.md")).unwrap(),
        expected
    );
    let r = go(&["info", &path], "");
    assert_eq!(r.json["sha256"], new_sha.as_str());

    // 6. the same patch again, with its old base or the new one: already applied (exit 1);
    // another patch against the old base: hash mismatch; one whose lines are not there:
    // patch_failed
    for base in [&sha, &new_sha] {
        let r = go(&["apply-patch", &path, base], &patch);
        assert_eq!(
            (r.code, r.json["error"].as_str()),
            (1, Some("already_applied"))
        );
    }
    let other = "@@ -1 +1 @@\n-# Project Plan\n+# The Plan\n";
    let r = go(&["apply-patch", &path, &sha], other);
    assert_eq!(
        (r.code, r.json["error"].as_str()),
        (1, Some("hash_mismatch"))
    );
    assert_eq!(r.json["expected"], sha.as_str());
    assert_eq!(r.json["actual"], new_sha.as_str());
    let r = go(
        &["apply-patch", &path, &new_sha],
        "@@ -1 +1 @@\n-# No Such Title\n+# X\n",
    );
    assert_eq!(
        (r.code, r.json["error"].as_str()),
        (1, Some("patch_failed"))
    );
    assert_eq!(
        fs::read_to_string(notes.join("Projects/Project Plan.md")).unwrap(),
        expected,
        "a failed patch changes nothing"
    );
    // --dry-run checks without writing
    let patch2 = "@@ -1 +1 @@\n-# Project Plan\n+# The Plan\n";
    let r = go(&["apply-patch", &path, &new_sha, "--dry-run"], patch2);
    assert_eq!(r.code, 0, "{}", r.json);
    assert_eq!(r.json["dry_run"], true);
    assert_eq!(
        fs::read_to_string(notes.join("Projects/Project Plan.md")).unwrap(),
        expected
    );

    // head, tail, edit-exact
    let r = go(&["head", &path, "--lines", "1"], "");
    assert_eq!(
        (r.code, r.json["content"].as_str()),
        (0, Some("# Project Plan\n"))
    );
    let r = go(&["tail", &path, "-n", "1"], "");
    assert_eq!(
        (r.code, r.json["content"].as_str()),
        (0, Some("Paragraph 5.100.\n"))
    );
    let r = go(
        &[
            "edit-exact",
            &path,
            &new_sha,
            "--old",
            "Overview text.",
            "--new",
            "Overview, edited.",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{}", r.json);
    let r = go(
        &["edit-exact", &path, &new_sha, "--old", "x", "--new", "y"],
        "",
    );
    assert_eq!(
        (r.code, r.json["error"].as_str()),
        (1, Some("hash_mismatch"))
    );
    let sha3 = go(&["info", &path], "").json["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let r = go(
        &[
            "edit-exact",
            &path,
            &sha3,
            "--old",
            "Paragraph",
            "--new",
            "P",
        ],
        "",
    );
    assert_eq!(
        (r.code, r.json["error"].as_str()),
        (1, Some("multiple_matches"))
    );
}

#[test]
fn exit_codes() {
    let m = Mounted::new();
    fs::write(m.ws().join("a.md"), "# A\n").unwrap();
    // 0: ok
    assert_eq!(vaultctl(&m, &["info", "a.md"], "").code, 0);
    // The mount from the environment.
    let r = run(
        Command::new(vaultctl_bin())
            .args(["info", "a.md"])
            .env("CLAWFS_MOUNT", &m.mnt),
        "",
    );
    assert_eq!(r.code, 0, "{}", r.json);
    // Workspace-absolute and mount-absolute paths work too.
    let abs = m.ws().join("a.md");
    assert_eq!(vaultctl(&m, &["info", abs.to_str().unwrap()], "").code, 0);
    assert_eq!(
        vaultctl(&m, &["info", "/workspaces/default/a.md"], "").code,
        0
    );
    // 1: user errors
    for (args, stdin, code) in [
        (&["info", "missing.md"][..], "", "not_found"),
        (&["info", "../../etc/passwd"], "", "denied"),
        (&["info", ".git/config"], "", "protected"),
        (&["read-range", "a.md", "0", "3"], "", "invalid_args"),
        (&["read-range", "a.md", "one", "3"], "", "invalid_args"),
        (&["frobnicate"], "", "invalid_args"),
        (&[], "", "invalid_args"),
        (&["resolve"], "", "invalid_args"),
        (&["apply-patch", "a.md", "0000"], "", "invalid_args"),
        (
            &["apply-patch", "a.md", "0000"],
            "@@ -1 +1 @@\n-# A\n+# B\n",
            "invalid_args",
        ),
        (
            &["apply-patch", "a.md", &"0".repeat(64)],
            "@@ -1 +1 @@\n-# A\n+# B\n",
            "hash_mismatch",
        ),
        (&["info", "a.md", "--workspace", "nope"], "", "not_found"),
    ] {
        let r = vaultctl(&m, args, stdin);
        assert_eq!(
            (r.code, r.json["error"].as_str()),
            (1, Some(code)),
            "{args:?}: {}",
            r.json
        );
        assert_eq!(r.json["ok"], false);
    }
    // 2: system errors
    let r = run(
        Command::new(vaultctl_bin()).args(["--mount", "/nonexistent", "info", "a.md"]),
        "",
    );
    assert_eq!(
        (r.code, r.json["error"].as_str()),
        (2, Some("mount_unavailable"))
    );
    let plain = m.dir.path().join("not-a-mount");
    fs::create_dir(&plain).unwrap();
    let r = run(
        Command::new(vaultctl_bin())
            .arg("--mount")
            .arg(&plain)
            .args(["info", "a.md"]),
        "",
    );
    assert_eq!(r.code, 2, "{}", r.json);
    // --help is not an error
    let out = Command::new(vaultctl_bin()).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("apply-patch"));
}

/// `vaultctl-ssh` as sshd runs it for a forced command.
fn ssh(m: &Mounted, original: Option<&str>, stdin: &str) -> Run {
    let mut cmd = Command::new(ssh_bin());
    cmd.arg("--mount")
        .arg(&m.mnt)
        .args(["--workspace", "notes"]);
    cmd.env_remove("SSH_ORIGINAL_COMMAND");
    if let Some(c) = original {
        cmd.env("SSH_ORIGINAL_COMMAND", c);
    }
    cmd.env("SSH_CLIENT", "203.0.113.7 50000 22");
    run(&mut cmd, stdin)
}

#[test]
fn vaultctl_ssh_runs_allowed_commands_in_its_workspace() {
    let m = Mounted::new();
    fs::create_dir(m.path("workspaces/notes")).unwrap();
    fs::write(m.path("workspaces/notes/My Note.md"), "# Mine\nold line\n").unwrap();
    fs::write(m.ws().join("Default.md"), "# Default\n").unwrap();
    let r = ssh(&m, Some("vaultctl resolve --title 'my note'"), "");
    assert_eq!(r.code, 0, "{}", r.json);
    assert_eq!(r.json["resolved_path"], "My Note.md");
    let r = ssh(&m, Some(r#"vaultctl info "My Note.md""#), "");
    assert_eq!(r.code, 0, "{}", r.json);
    let sha = r.json["sha256"].as_str().unwrap().to_string();
    // The patch comes on stdin, as over `ssh host vaultctl apply-patch ... <<EOF`.
    let r = ssh(
        &m,
        Some(&format!("vaultctl apply-patch 'My Note.md' {sha}")),
        "@@ -2 +2 @@\n-old line\n+new line\n",
    );
    assert_eq!(r.code, 0, "{}", r.json);
    assert_eq!(
        fs::read_to_string(m.path("workspaces/notes/My Note.md")).unwrap(),
        "# Mine\nnew line\n"
    );
    // Only its workspace: the default one is not reachable.
    let r = ssh(&m, Some("vaultctl info Default.md"), "");
    assert_eq!((r.code, r.json["error"].as_str()), (1, Some("not_found")));
    // Metacharacters inside quotes are plain text.
    let r = ssh(
        &m,
        Some("vaultctl search 'My Note.md' 'line|x; $(id)' --regex"),
        "",
    );
    assert_eq!(r.code, 0, "{}", r.json);
    assert_eq!(r.json["total_hits"], 1);
}

#[test]
fn vaultctl_ssh_refuses_everything_else() {
    let m = Mounted::new();
    fs::create_dir(m.path("workspaces/notes")).unwrap();
    fs::write(m.path("workspaces/notes/n.md"), "# N\n").unwrap();
    fs::write(m.ws().join("Default.md"), "# Default\n").unwrap();
    let canary = m.dir.path().join("pwned");
    let c = canary.display();
    let log = m.dir.path().join("refusals.log");
    for bad in [
        None,
        Some(String::new()),
        Some("bash".into()),
        Some("sh -c 'id'".into()),
        Some(format!("touch {c}")),
        Some(format!("vaultctl info n.md; touch {c}")),
        Some(format!("vaultctl info n.md && touch {c}")),
        Some(format!("vaultctl info n.md || touch {c}")),
        Some(format!("vaultctl info n.md | tee {c}")),
        Some(format!("vaultctl info n.md > {c}")),
        Some(format!("vaultctl info $(touch {c})")),
        Some(format!("vaultctl info `touch {c}`")),
        Some(format!("vaultctl info \"$(touch {c})\"")),
        Some(format!("vaultctl info n.md\ntouch {c}")),
        Some(format!("vaultctl info n.md & touch {c}")),
        Some("vaultctl info 'n.md".into()),
        Some("vaultctl".into()),
        Some("vaultctl shell".into()),
        Some("vaultctl --help".into()),
        Some("/bin/vaultctl info n.md".into()),
        Some("vaultctl info Default.md --workspace default".into()),
        Some("vaultctl info --workspace=default Default.md".into()),
        Some("vaultctl info n.md --mount /".into()),
        Some("vaultctl apply-patch n.md abc --patch-file /etc/passwd".into()),
        Some("vaultctl info *.md".into()),
        Some("vaultctl info ~/.ssh/id_ed25519".into()),
    ] {
        let mut cmd = Command::new(ssh_bin());
        cmd.arg("--mount")
            .arg(&m.mnt)
            .args(["--workspace", "notes", "--log"])
            .arg(&log)
            .env_remove("SSH_ORIGINAL_COMMAND");
        if let Some(b) = &bad {
            cmd.env("SSH_ORIGINAL_COMMAND", b);
        }
        let r = run(&mut cmd, "");
        assert_eq!(r.code, 1, "{bad:?} must be refused: {}", r.json);
        assert_eq!(r.json["error"], "denied", "{bad:?}: {}", r.json);
        assert!(
            r.stderr.contains("vaultctl-ssh: refused"),
            "{bad:?}: stderr {:?}",
            r.stderr
        );
        assert!(!canary.exists(), "{bad:?} ran a command");
    }
    let logged = fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 26, "{logged}");
    assert!(logged.contains("touch"), "{logged}");
    // A refused patch was not applied.
    assert_eq!(
        fs::read_to_string(m.path("workspaces/notes/n.md")).unwrap(),
        "# N\n"
    );
}
