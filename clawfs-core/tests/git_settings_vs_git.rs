//! The git config check against git itself: for every file the check accepts, real `git config
//! --file F --list` must show only settings an agent may set. The files are the attack shapes
//! of a guard that reads config differently from git (continued lines, quoting, subsections,
//! key case, CRLF, byte-order marks, NUL bytes, comments, long lines, includes, remote
//! helpers), written out and then combined at random.

use std::io::Write;
use std::process::Command;

use clawfs_core::git_settings::{allowed, refused_settings};
use proptest::prelude::*;

/// What git applies from `bytes`, as `(section, subsection?, key, value)`; `None` if git
/// refuses the file (then git runs nothing from it either).
fn git_reads(bytes: &[u8]) -> Option<Vec<(String, bool, String, String)>> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    let out = Command::new("git")
        .args(["config", "--no-includes", "--file"])
        .arg(f.path())
        .args(["--list", "--null"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git is installed");
    if !out.status.success() {
        return None;
    }
    let mut settings = Vec::new();
    for entry in out.stdout.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let (name, value) = entry.split_once('\n').unwrap_or((&entry, ""));
        let (section, rest) = name.split_once('.').expect("section.key");
        let (sub, key) = match rest.rsplit_once('.') {
            Some((_, key)) => (true, key),
            None => (false, rest),
        };
        settings.push((section.into(), sub, key.into(), value.into()));
    }
    Some(settings)
}

/// The check and git agree: what the check accepts, git reads as allowed settings only.
fn agree(bytes: &[u8]) -> Result<(), String> {
    let Ok(refused) = refused_settings(bytes, None) else {
        return Ok(());
    };
    if !refused.is_empty() {
        return Ok(());
    }
    let Some(settings) = git_reads(bytes) else {
        return Ok(());
    };
    for (section, sub, key, value) in settings {
        let helper = value.split_once("::").is_some_and(|(t, _)| {
            t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b))
        });
        // Only a remote's or a submodule's URL is fetched from (`color.url` is nothing).
        let fetched = matches!(section.as_str(), "remote" | "submodule") && key.ends_with("url");
        if !allowed(&section, sub, &key) || (fetched && helper) {
            return Err(format!(
                "accepted, but git reads {section}.{key}={value:?} (subsection: {sub}) from {:?}",
                String::from_utf8_lossy(bytes)
            ));
        }
    }
    Ok(())
}

#[test]
fn every_written_attack_shape_is_refused_or_harmless_to_git() {
    let shapes: &[&[u8]] = &[
        // The continuation that took a line reader past `[color]` while git stayed in [core].
        b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\teol = lf \\\n[color]\n\tfsmonitor = \"echo PWNED >&2; false\"\n\thooksPath = /srv/h\n",
        b"[core]\n\teol = \"lf \\\n[color]\"\n\tfsmonitor = x\n",
        b"[include]\n\tpath = /tmp/evil\n",
        b"[includeIf \"gitdir:/\"]\n\tpath = /tmp/evil\n",
        b"[core \"\"]\n\tfsmonitor = x\n",
        b"[Core]\n\tFsMonitor = x\n",
        b"[core.x]\n\tfsmonitor = x\n",
        b"[CORE]\r\n\tsshCommand = x\r\n",
        b"\xef\xbb\xbf[core]\n\tfsmonitor = x\n",
        b"[core]\n\tbare = false\0\n\tfsmonitor = x\n",
        b"[core] fsmonitor = x\n",
        b"[core] # comment\n\thooksPath = x ; comment\n",
        b"[color]\n\tui = auto\n; [core]\n# fsmonitor = x\n",
        b"[user]\n\tname = \"a\\\"b\" \\\n\tfsmonitor = x\n",
        b"[remote \"o\"]\n\turl = ext::sh -c touch% /tmp/pwned\n",
        b"[remote \"o\"]\n\turl = \"ext::sh\"\n",
        b"[submodule \"s\"]\n\turl = fd::7\n",
        b"[submodule \"s\"]\n\tupdate = !sh -c evil\n",
        b"[alias]\n\tst = !sh\n",
        b"[core]\n\tpager = less\n\teditor = vi\n",
        b"[core]\rfsmonitor = x\n",
        b"[ core ]\n\tfsmonitor = x\n",
        b"[core\t\"x\"]\n\tfsmonitor = x\n",
        b"[core]\n\tfsmonitor\n",
        b"[core]\n\tfsmonitor=\n",
        b"[core]\n\tfs\\\nmonitor = x\n",
        b"[url \"https://evil/\"]\n\tinsteadOf = https://good/\n",
        b"[user]\n\tname = x\n[core]\n\trepositoryformatversion = 0\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.org/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n",
    ];
    for shape in shapes {
        agree(shape).unwrap();
    }
    // A very long line, and a value continued over many lines.
    let mut long = b"[user]\n\tname = ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 200_000));
    long.extend_from_slice(b"\n[core]\n\tfsmonitor = x\n");
    agree(&long).unwrap();
    let mut continued = b"[user]\n\tname = a".to_vec();
    for _ in 0..1000 {
        continued.extend_from_slice(b" \\\n[core]");
    }
    continued.extend_from_slice(b"\n\tfsmonitor = x\n");
    agree(&continued).unwrap();
    // The continuation attack itself is refused, not merely harmless.
    assert!(
        refused_settings(shapes[0], None).is_ok_and(|r| r.contains(&"core.fsmonitor".to_string()))
    );
}

/// Pieces of config files, combined at random.
fn piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "[core]",
        "[Core]",
        "[core \"\"]",
        "[core \"x\"]",
        "[core.x]",
        "[color]",
        "[user]",
        "[remote \"o\"]",
        "[include]",
        "[includeIf \"gitdir:/\"]",
        "[alias]",
        "[ core ]",
        "fsmonitor = x",
        "FsMonitor=x",
        "hooksPath = /h",
        "eol = lf",
        "name = a",
        "ui = auto",
        "url = ext::sh",
        "url = https://x/",
        "path = /p",
        "sshCommand = s",
        "fs\\",
        "monitor = y",
        " \\",
        "\\",
        "\"",
        "\\\"",
        "#",
        ";",
        "# [core]",
        " ",
        "\t",
        "=",
        "[",
        "]",
        "\r",
        "\u{feff}",
        "\0",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_files_the_check_accepts_git_reads_as_allowed(
        lines in prop::collection::vec(prop::collection::vec(piece(), 1..4), 1..8),
        crlf in any::<bool>(),
    ) {
        let newline = if crlf { "\r\n" } else { "\n" };
        let text: String = lines.iter().map(|l| l.concat() + newline).collect();
        prop_assert!(agree(text.as_bytes()).is_ok(), "{}", agree(text.as_bytes()).unwrap_err());
    }
}
