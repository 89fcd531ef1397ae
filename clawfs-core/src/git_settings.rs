//! What an agent may put in a git config file (`.git/config`, a submodule's
//! `.git/modules/…/config`): only settings known not to run commands or send git elsewhere
//! than its remotes. Hooks (`core.hooksPath`), command settings (`core.fsmonitor`,
//! `core.sshCommand`, `core.pager`, `alias.*`, `filter.*`, `diff.*.textconv`,
//! `credential.helper`…), redirections (`url.*.insteadOf`, `include.path`, `core.worktree`) and
//! anything not listed here are refused: whoever runs git in the repository later (a person, an
//! admin, another agent) would run them.
//!
//! The file is parsed with git's own grammar (gitoxide's `gix-config`), and
//! `tests/adversarial/git_for_agents.rs` checks every file this accepts against what `git config
//! --list` itself reads from it.

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

/// Why a git config file was refused as a whole, before any setting was read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unplaceable {
    /// git's own parser could not read it; nothing in it can be placed with certainty.
    #[error("git could not read it as a config file ({0})")]
    Syntax(String),
    /// Bytes git and any other reader may take differently: NUL, a lone carriage return, a
    /// byte-order mark other than UTF-8's.
    #[error("it holds {0}, which git config files do not")]
    Bytes(&'static str),
    /// A setting before any `[section]`, which git refuses.
    #[error("it has a setting before any [section]")]
    NoSection,
}

/// Settings that say where git pushes or fetches: a value naming a path on this machine (a
/// local path, `file://`) sends whoever runs `git push` there into a repository whose hooks
/// then run as them, one the agent shaped (a folder of the owner's that became a git dir
/// later, when the owner's git wrote a `HEAD` into it).
const PLACES: &[&str] = &[
    "remote.url",
    "remote.pushurl",
    "submodule.url",
    "branch.remote",
    "branch.pushremote",
];

/// One setting of a git config file, as git reads it.
#[derive(Debug, PartialEq, Eq)]
struct Setting {
    /// Lower case.
    section: String,
    /// As written; `Some` for `[section "sub"]`, `[section ""]` and `[section.sub]`.
    subsection: Option<Vec<u8>>,
    /// Lower case.
    key: String,
    /// Normalized as git does (quotes and escapes resolved).
    value: Vec<u8>,
}

impl Setting {
    /// `section.key`, as the refusals name it.
    fn name(&self) -> String {
        format!("{}.{}", self.section, self.key)
    }
}

/// The settings of a git config file an agent may not write, as git names them
/// (`core.hookspath`, `alias.x`, `remote.url` for a remote helper's URL); empty if every setting
/// is allowed. The file is read by gitoxide's implementation of git's own grammar (continued
/// lines, quoting, comments, legacy `[section.sub]` headers), so the settings checked are the
/// settings git applies; a file it cannot read is refused whole. A setting that sends git to a
/// path on this machine ([`PLACES`]) is allowed only as it was in the file `replaced`.
pub fn refused_settings(bytes: &[u8], replaced: Option<&[u8]>) -> Result<Vec<String>, Unplaceable> {
    let new = settings(bytes)?;
    let old = replaced.and_then(|b| settings(b).ok()).unwrap_or_default();
    // Remotes the file defines: a branch's `remote` naming one is a name, not a path. git
    // takes a name for a remote only if it could be one (no `/`, not empty, `.` or `..`);
    // any other it reads as a URL, whatever section the file has of that name.
    let nickname = |n: &[u8]| !n.is_empty() && n != b"." && n != b".." && !n.contains(&b'/');
    let remotes: Vec<&[u8]> = new
        .iter()
        .filter(|s| s.section == "remote" && s.key == "url")
        .filter_map(|s| s.subsection.as_deref())
        .filter(|n| nickname(n))
        .collect();
    let mut refused: Vec<String> = Vec::new();
    for s in &new {
        let name = s.name();
        let here = PLACES.contains(&name.as_str())
            && !(name.starts_with("branch.")
                && (s.value == b"." || remotes.contains(&s.value.as_slice())))
            && on_this_machine(&s.value)
            && !old.contains(s);
        let ok = allowed(&s.section, s.subsection.is_some(), &s.key)
            && allowed_value(&name, &s.value)
            && !here;
        if !ok && !refused.contains(&name) {
            refused.push(name);
        }
    }
    Ok(refused)
}

/// Whether git takes `value`, a remote's URL, for a repository on this machine (gitoxide's
/// `gix-url`, which reads URLs as git does: a path, `file://`, not `host:path`); what it
/// cannot read counts as one.
fn on_this_machine(value: &[u8]) -> bool {
    use bstr::ByteSlice;
    gix_url::parse(value.as_bstr()).map_or(true, |url| url.scheme == gix_url::Scheme::File)
}

/// Every setting of a git config file, read with git's grammar.
fn settings(bytes: &[u8]) -> Result<Vec<Setting>, Unplaceable> {
    use gix_config::parse::{EventRef, Events};
    if bytes.contains(&0) {
        return Err(Unplaceable::Bytes("a NUL byte"));
    }
    if bytes.starts_with(&[0xfe, 0xff]) || bytes.starts_with(&[0xff, 0xfe]) {
        return Err(Unplaceable::Bytes("a UTF-16 byte-order mark"));
    }
    if bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\r' && bytes.get(i + 1) != Some(&b'\n'))
    {
        return Err(Unplaceable::Bytes(
            "a carriage return not followed by a line feed",
        ));
    }
    let events = Events::from_bytes(bytes, None).map_err(|e| Unplaceable::Syntax(e.to_string()))?;
    if events
        .frontmatter()
        .any(|e| matches!(e, EventRef::SectionValueName(_)))
    {
        return Err(Unplaceable::NoSection);
    }
    let mut out = Vec::new();
    for section in events.sections() {
        let EventRef::SectionHeader {
            name,
            separator,
            subsection_name,
        } = section.header()
        else {
            continue;
        };
        let section_name = name.to_string().to_ascii_lowercase();
        // `[core ""]` and `[core.x]` are subsections: their keys are not `core.KEY` to git.
        // A legacy `[section.Sub]` header names subsection `sub`: git lowers its case.
        let legacy = separator.as_ref().is_some_and(|s| s.to_vec() == b".");
        let subsection = (subsection_name.is_some() || separator.is_some()).then(|| {
            let name = subsection_name.map(|s| s.to_vec()).unwrap_or_default();
            match legacy {
                true => name.to_ascii_lowercase(),
                false => name,
            }
        });
        let mut key: Option<String> = None;
        let mut value: Vec<u8> = Vec::new();
        let mut finish = |key: &mut Option<String>, value: &mut Vec<u8>| {
            if let Some(k) = key.take() {
                out.push(Setting {
                    section: section_name.clone(),
                    subsection: subsection.clone(),
                    key: k,
                    value: gix_config::value::normalize(value.as_slice()).to_vec(),
                });
            }
            value.clear();
        };
        for event in section.body() {
            match event {
                EventRef::SectionValueName(k) => {
                    finish(&mut key, &mut value);
                    key = Some(k.to_string().to_ascii_lowercase());
                }
                EventRef::Value(v) | EventRef::ValueNotDone(v) | EventRef::ValueDone(v) => {
                    value.extend_from_slice(v)
                }
                _ => {}
            }
        }
        finish(&mut key, &mut value);
    }
    Ok(out)
}

/// Whether `section.key` (in a subsection or not) may be set by an agent.
pub fn allowed(section: &str, subsection: bool, key: &str) -> bool {
    let name = format!("{section}.{key}");
    match subsection {
        false => ALLOWED.contains(&name.as_str()) || ALLOWED_SECTIONS.contains(&section),
        true => ALLOWED_IN_SUBSECTION.contains(&name.as_str()),
    }
}

/// Whether an allowed setting's value is harmless: a remote's or submodule's URL may not name a
/// remote helper (`ext::sh -c …`, `fd::…`, any `TRANSPORT::`), which git runs as a program.
fn allowed_value(name: &str, value: &[u8]) -> bool {
    if !matches!(name, "remote.url" | "remote.pushurl" | "submodule.url") {
        return true;
    }
    let value = String::from_utf8_lossy(value);
    match value.split_once("::") {
        Some((transport, _)) => !transport
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b)),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_git_cannot_place_is_refused_whole() {
        for text in [
            &b"[core]\nbare = false\0\n"[..],
            b"fsmonitor = x\n[core]\n",
            b"[core\nfsmonitor = x\n",
            b"[core]\rfsmonitor = x\n",
            b"\xff\xfe[\x00c\x00",
        ] {
            assert!(
                refused_settings(text, None).is_err(),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn what_git_init_clone_and_config_write_is_allowed() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.org/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[user]\n\tname = Agent\n\temail = a@example.org\n[color]\n\tui = auto\n";
        assert_eq!(
            refused_settings(text.as_bytes(), None),
            Ok(Vec::<String>::new())
        );
    }

    #[test]
    fn a_new_path_on_this_machine_to_push_to_is_refused() {
        let was =
            b"[remote \"origin\"]\n\turl = /srv/proj.git\n[branch \"main\"]\n\tremote = origin\n";
        for (text, key) in [
            (
                "[remote \"origin\"]\n\tpushurl = /srv/w/x/.git/refs/tags",
                "remote.pushurl",
            ),
            ("[remote \"origin\"]\n\turl = ../elsewhere", "remote.url"),
            ("[remote \"origin\"]\n\turl = file:///srv/x", "remote.url"),
            ("[remote \"o\"]\n\turl = tags", "remote.url"),
            (
                "[branch \"main\"]\n\tpushRemote = /srv/x",
                "branch.pushremote",
            ),
            // Not a remote the file defines: git takes it for a path.
            ("[branch \"main\"]\n\tremote = tags", "branch.remote"),
            ("[submodule \"s\"]\n\turl = /srv/s", "submodule.url"),
            ("[remote \"Origin\"]\n\turl = /srv/proj.git", "remote.url"),
            // git reads a remote name with a `/` as a path, whatever the file defines.
            (
                "[remote \"/srv/evil.git\"]\n\turl = https://example.org/x.git\n[branch \"main\"]\n\tremote = /srv/evil.git",
                "branch.remote",
            ),
            // git lowers a legacy header's subsection: no remote `Tools` is defined.
            (
                "[remote.Tools]\n\turl = https://example.org/x.git\n[branch \"main\"]\n\tpushRemote = Tools",
                "branch.pushremote",
            ),
        ] {
            let refused = refused_settings(text.as_bytes(), Some(was));
            assert!(
                refused.as_ref().is_ok_and(|r| r.contains(&key.to_string())),
                "{text:?}: {refused:?}"
            );
        }
        for text in [
            // As it was, a remote the file defines, the repository itself, the network.
            "[remote \"origin\"]\n\turl = /srv/proj.git\n[branch \"main\"]\n\tremote = origin\n",
            "[branch \"main\"]\n\tremote = .\n",
            "[remote \"gh\"]\n\turl = https://example.org/r.git\n\tpushurl = git@example.org:r.git\n[branch \"x\"]\n\tpushRemote = gh\n",
            "[remote \"s\"]\n\turl = ssh://example.org/srv/r.git\n",
        ] {
            assert_eq!(
                refused_settings(text.as_bytes(), Some(was)),
                Ok(Vec::<String>::new()),
                "{text:?}"
            );
        }
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
            // git continues `eol`'s value over `[color]`, so fsmonitor is core's.
            (
                "[core]\n\teol = lf \\\n[color]\n\tfsmonitor = \"echo x\"\n",
                "core.fsmonitor",
            ),
            ("[remote \"o\"]\nurl = ext::sh -c evil", "remote.url"),
            ("[submodule \"s\"]\nurl = \"fd::3\"", "submodule.url"),
            ("[submodule \"s\"]\nupdate = !evil", "submodule.update"),
            ("[core \"\"]\nfsmonitor = x", "core.fsmonitor"),
            ("[Core]\r\nFsMonitor = x\r\n", "core.fsmonitor"),
            ("\u{feff}[core]\nfsmonitor = x", "core.fsmonitor"),
            ("[includeIf \"gitdir:/\"]\npath = /tmp/c", "includeif.path"),
            ("[remote \"o\"]\nuploadpack = sh", "remote.uploadpack"),
            ("[core]\nworktree = /etc", "core.worktree"),
            // It would make git read config.worktree files too.
            (
                "[extensions]\nworktreeConfig = true",
                "extensions.worktreeconfig",
            ),
        ] {
            let refused = refused_settings(text.as_bytes(), None);
            assert!(
                refused.as_ref().is_ok_and(|r| r.contains(&key.to_string())),
                "{text:?}: {refused:?}"
            );
        }
    }
}
