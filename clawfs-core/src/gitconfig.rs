//! What an agent may put in a git config file (`.git/config`, a submodule's
//! `.git/modules/…/config`): only settings known not to run commands or send git elsewhere
//! than its remotes. Hooks (`core.hooksPath`), command settings (`core.fsmonitor`,
//! `core.sshCommand`, `core.pager`, `alias.*`, `filter.*`, `diff.*.textconv`,
//! `credential.helper`…), redirections (`url.*.insteadOf`, `include.path`, `core.worktree`) and
//! anything not listed here are refused: whoever runs git in the repository later (a person, an
//! admin, another agent) would run them.
//!
//! The parser reads every line on its own, without git's line continuations: a line git takes
//! as a key this parser takes as a key too, so nothing git would apply goes unchecked (a
//! continued value may be read as a key and refused: the safe direction).

/// Settings allowed without a subsection (`[section]` then `key`), as `section.key`, lower case.
const ALLOWED: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.compression",
    "core.abbrev",
    "core.checkstat",
    "core.trustctime",
    "core.untrackedcache",
    "core.preloadindex",
    "user.name",
    "user.email",
    "init.defaultbranch",
    "extensions.objectformat",
    "extensions.refstorage",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "fetch.prune",
    "merge.ff",
    "merge.conflictstyle",
    "gc.auto",
    "index.version",
    "status.showuntrackedfiles",
    "diff.renames",
    "diff.algorithm",
    "commit.verbose",
    "log.date",
];

/// Sections whose every setting, without a subsection, is allowed (display preferences).
const ALLOWED_SECTIONS: &[&str] = &["color", "advice", "column"];

/// Settings allowed in a subsection (`[section "name"]` then `key`), as `section.key`.
const ALLOWED_IN_SUBSECTION: &[&str] = &[
    "remote.url",
    "remote.pushurl",
    "remote.fetch",
    "remote.push",
    "remote.tagopt",
    "remote.prune",
    "remote.mirror",
    "branch.remote",
    "branch.merge",
    "branch.rebase",
    "branch.pushremote",
    "branch.description",
    "submodule.url",
    "submodule.active",
];

/// The settings of `text` an agent may not write, as git names them (`core.hookspath`,
/// `alias.x`); empty if every setting is allowed.
pub fn refused_settings(text: &str) -> Vec<String> {
    let mut refused = Vec::new();
    let mut section = String::new();
    let mut subsection = false;
    for raw in text.lines() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let rest = if let Some(header) = line.strip_prefix('[') {
            let end = header.find(']').unwrap_or(header.len());
            let inside = header[..end].trim();
            let (name, sub) = match inside.split_once(|c: char| c.is_whitespace() || c == '"') {
                Some((n, s)) => (n, !s.trim().is_empty()),
                None => match inside.split_once('.') {
                    // The old `[section.subsection]` form.
                    Some((n, _)) => (n, true),
                    None => (inside, false),
                },
            };
            section = name.to_ascii_lowercase();
            subsection = sub;
            // A key may follow the header on the same line.
            header.get(end + 1..).unwrap_or("").trim_start()
        } else {
            line
        };
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let key: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '=')
            .collect::<String>()
            .to_ascii_lowercase();
        let name = format!("{section}.{key}");
        let allowed = match subsection {
            false => {
                ALLOWED.contains(&name.as_str()) || ALLOWED_SECTIONS.contains(&section.as_str())
            }
            true => ALLOWED_IN_SUBSECTION.contains(&name.as_str()),
        };
        if !allowed && !refused.contains(&name) {
            refused.push(name);
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_git_init_clone_and_config_write_is_allowed() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.org/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[user]\n\tname = Agent\n\temail = a@example.org\n[color]\n\tui = auto\n";
        assert_eq!(refused_settings(text), Vec::<String>::new());
    }

    #[test]
    fn commands_hooks_and_redirections_are_refused_in_any_spelling() {
        for (text, key) in [
            ("[core]\nhooksPath = /tmp/h", "core.hookspath"),
            ("[CORE]\n  HooksPath=/tmp/h", "core.hookspath"),
            ("[core] fsmonitor = /tmp/x", "core.fsmonitor"),
            ("[core]\nsshCommand = sh -c x", "core.sshcommand"),
            ("[alias]\nst = !sh -c x", "alias.st"),
            ("[filter \"lfs\"]\nsmudge = x", "filter.smudge"),
            ("[diff \"bin\"]\ntextconv = x", "diff.textconv"),
            ("[credential]\nhelper = x", "credential.helper"),
            ("[include]\npath = /tmp/c", "include.path"),
            (
                "[url \"https://evil/\"]\ninsteadOf = https://good/",
                "url.insteadof",
            ),
            ("[core.x]\nname = y", "core.name"),
            (
                "[user]\nname = a \\\n[core]\nhooksPath = x",
                "core.hookspath",
            ),
            ("[remote \"o\"]\nuploadpack = sh", "remote.uploadpack"),
            ("[core]\nworktree = /etc", "core.worktree"),
            // It would make git read config.worktree files too.
            (
                "[extensions]\nworktreeConfig = true",
                "extensions.worktreeconfig",
            ),
        ] {
            assert!(
                refused_settings(text).contains(&key.to_string()),
                "{text:?}: {:?}",
                refused_settings(text)
            );
        }
    }
}

/// The lines of an interactive rebase's todo list that run a command (`exec`/`x`), which an agent
/// may not leave for whoever continues the rebase; empty if there are none.
pub fn refused_todo_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim_start)
        .filter(|l| {
            let word = l.split_whitespace().next().unwrap_or("");
            word.eq_ignore_ascii_case("exec") || word.eq_ignore_ascii_case("x")
        })
        .map(|l| l.chars().take(80).collect())
        .collect()
}

#[cfg(test)]
mod todo_tests {
    use super::*;

    #[test]
    fn exec_lines_are_refused_picks_are_not() {
        assert!(refused_todo_lines("pick 1234 a\nfixup 5678 b\n# exec in a comment\n").is_empty());
        assert_eq!(
            refused_todo_lines("pick 1 a\n  exec id\nx touch y\n").len(),
            2
        );
    }
}
