//! The template and its safe renderer.

use std::path::{Path, PathBuf};

/// The per-agent profile template. Placeholders: `{{agent}}`, `{{profile}}`, `{{mount}}`,
/// `{{own_dir}}`, `{{tmp}}`, `{{store}}` (single values, inside quotes where they are paths) and
/// `{{read_write}}`, `{{read_only}}`, `{{network}}` (whole lines of rules).
pub const TEMPLATE: &str = include_str!("../templates/agent.profile");

/// The prefix of every agent profile's name.
pub const PROFILE_PREFIX: &str = "clawfs-agent-";

/// The longest agent name accepted (the profile name is `clawfs-agent-` + name).
const MAX_AGENT: usize = 64;

/// Network access of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Every address family.
    Allow,
    /// UNIX sockets only: `inet`, `inet6` (and everything else) denied.
    Deny,
}

/// What the profile of one agent is made of (the same inputs as the Landlock layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileInputs {
    /// The agent's name (`[A-Za-z0-9_.-]`, starting with a letter or digit).
    pub agent: String,
    /// The ClawFS mount point: readable.
    pub mount: PathBuf,
    /// The agent's own directory (usually `<mount>/agents/<agent>`): read-write.
    pub own_dir: PathBuf,
    /// Workspaces granted read-write.
    pub read_write: Vec<PathBuf>,
    /// Further read-only paths.
    pub read_only: Vec<PathBuf>,
    /// The backing store: denied, whatever else allows.
    pub store: PathBuf,
    /// The agent's private temporary directory: read-write.
    pub tmp: PathBuf,
    /// Network access.
    pub network: Network,
}

/// A name or path the renderer refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// An agent name that cannot be a profile name.
    #[error("agent name {name:?} refused: {reason}")]
    Agent { name: String, reason: &'static str },
    /// A path that cannot be written into the profile as it is.
    #[error("{what} {path:?} refused: {reason}")]
    Path {
        what: &'static str,
        path: String,
        reason: &'static str,
    },
    /// A placeholder of the template that the renderer does not know (a broken template).
    #[error("template: unknown placeholder {0:?}")]
    Placeholder(String),
}

/// The profile name of `agent`: `clawfs-agent-<agent>` (validated).
pub fn profile_name(agent: &str) -> Result<String, RenderError> {
    validate_agent(agent)?;
    Ok(format!("{PROFILE_PREFIX}{agent}"))
}

/// Checks that `agent` can be part of a profile name.
pub fn validate_agent(agent: &str) -> Result<(), RenderError> {
    let refuse = |reason| {
        Err(RenderError::Agent {
            name: agent.to_string(),
            reason,
        })
    };
    let Some(first) = agent.chars().next() else {
        return refuse("empty");
    };
    if agent.len() > MAX_AGENT {
        return refuse("longer than 64 bytes");
    }
    if !first.is_ascii_alphanumeric() {
        return refuse("must start with a letter or digit");
    }
    if !agent
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return refuse("only letters, digits, '_', '-' and '.' are allowed");
    }
    Ok(())
}

/// Checks that `path` can be written, quoted, into a profile and means exactly itself: absolute,
/// normal components only, valid UTF-8, and none of `"` `\` `*?[]{}^` `@` `#` `,` nor control
/// characters. Returns it as a string without a trailing `/`.
pub fn validate_path(what: &'static str, path: &Path) -> Result<String, RenderError> {
    let shown = path.to_string_lossy().into_owned();
    let refuse = |reason| {
        Err(RenderError::Path {
            what,
            path: shown.clone(),
            reason,
        })
    };
    let Some(s) = path.to_str() else {
        return refuse("not valid UTF-8");
    };
    if !s.starts_with('/') {
        return refuse("not absolute");
    }
    if s.split('/').any(|c| c == "." || c == "..") {
        return refuse("'.' or '..' components");
    }
    if s.contains("//") || s.ends_with("/.") {
        return refuse("not in normal form");
    }
    if let Some(c) = s.chars().find(|c| {
        c.is_control()
            || matches!(
                c,
                '"' | '\\' | '*' | '?' | '[' | ']' | '{' | '}' | '^' | '@' | '#' | ','
            )
    }) {
        return match c {
            '"' | '\\' => refuse("quote or backslash"),
            '@' => refuse("'@' (AppArmor variables)"),
            c if c.is_control() => refuse("newline or control character"),
            _ => refuse("globbing or syntax metacharacter (*?[]{}^#,)"),
        };
    }
    let trimmed = s.trim_end_matches('/');
    if trimmed.is_empty() {
        return refuse("the root directory");
    }
    Ok(trimmed.to_string())
}

/// Renders the profile of `inputs` from [`TEMPLATE`].
pub fn render(inputs: &ProfileInputs) -> Result<String, RenderError> {
    render_template(TEMPLATE, inputs)
}

/// Renders `template` (see [`TEMPLATE`] for the placeholders) with `inputs`. Every name and path
/// is validated first; an unknown `{{placeholder}}` is an error.
pub fn render_template(template: &str, inputs: &ProfileInputs) -> Result<String, RenderError> {
    let profile = profile_name(&inputs.agent)?;
    let mount = validate_path("mount point", &inputs.mount)?;
    let own_dir = validate_path("agent directory", &inputs.own_dir)?;
    let tmp = validate_path("temporary directory", &inputs.tmp)?;
    let store = validate_path("store", &inputs.store)?;
    let mut read_write = String::new();
    for p in &inputs.read_write {
        let p = validate_path("read-write path", p)?;
        read_write.push_str(&format!("  \"{p}/\" rw,\n  \"{p}/**\" rwklmix,\n"));
    }
    let mut read_only = String::new();
    for p in &inputs.read_only {
        let p = validate_path("read-only path", p)?;
        read_only.push_str(&format!("  \"{p}\" r,\n  \"{p}/\" r,\n  \"{p}/**\" r,\n"));
    }
    let network = match inputs.network {
        Network::Allow => "  network,\n",
        Network::Deny => "  network unix,\n  deny network inet,\n  deny network inet6,\n",
    };
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(RenderError::Placeholder(after.chars().take(20).collect()));
        };
        let key = &after[..end];
        // Block placeholders stand alone on their line: drop that line's newline with them.
        let mut next = &after[end + 2..];
        let block = |s: &str, next: &mut &str| {
            *next = next.strip_prefix('\n').unwrap_or(next);
            s.to_string()
        };
        let value = match key {
            "agent" => inputs.agent.clone(),
            "profile" => profile.clone(),
            "mount" => mount.clone(),
            "own_dir" => own_dir.clone(),
            "tmp" => tmp.clone(),
            "store" => store.clone(),
            "read_write" => block(&read_write, &mut next),
            "read_only" => block(&read_only, &mut next),
            "network" => block(network, &mut next),
            other => return Err(RenderError::Placeholder(other.to_string())),
        };
        out.push_str(&value);
        rest = next;
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(agent: &str) -> ProfileInputs {
        ProfileInputs {
            agent: agent.into(),
            mount: "/clawfs".into(),
            own_dir: format!("/clawfs/agents/{agent}").into(),
            read_write: vec!["/clawfs/workspaces/shared".into()],
            read_only: vec!["/opt/tools".into()],
            store: "/var/lib/clawfs/store".into(),
            tmp: format!("/tmp/clawfs-{agent}-1234").into(),
            network: Network::Deny,
        }
    }

    #[test]
    fn renders_every_placeholder() {
        let p = render(&inputs("alice")).unwrap();
        assert!(!p.contains("{{"), "{p}");
        assert!(p.contains("profile clawfs-agent-alice flags="));
        assert!(p.contains("deny \"/var/lib/clawfs/store/**\" rwklmx,"));
        assert!(p.contains("\"/clawfs/workspaces/shared/**\" rwklmix,"));
        assert!(p.contains("\"/opt/tools/**\" r,"));
        assert!(p.contains("deny network inet,"));
        let q = render(&ProfileInputs {
            network: Network::Allow,
            ..inputs("bob")
        })
        .unwrap();
        assert!(q.contains("\n  network,\n") && !q.contains("deny network"));
    }

    #[test]
    fn refuses_bad_agent_names() {
        for name in [
            "",
            "-x",
            ".x",
            "a b",
            "a\"b",
            "a{b}",
            "x flags=(complain)",
            "a\nprofile evil { /** rwx, }",
            "a/b",
            "a,b",
            &"a".repeat(65),
        ] {
            assert!(
                matches!(render(&inputs(name)), Err(RenderError::Agent { .. })),
                "{name:?}"
            );
        }
    }

    #[test]
    fn refuses_bad_paths() {
        let bad = [
            "relative/dir",
            "/a/../etc",
            "/a/./b",
            "/a//b",
            "/",
            "/a\"/** rwx, \"/b",
            "/a\nb",
            "/a\\b",
            "/a*",
            "/a?",
            "/a[b]",
            "/a{b,c}",
            "/a^b",
            "/a@{HOME}",
            "/a#b",
            "/a,b",
        ];
        for b in bad {
            let mut i = inputs("alice");
            i.read_write.push(b.into());
            assert!(
                matches!(render(&i), Err(RenderError::Path { .. })),
                "read_write {b:?}"
            );
            let mut i = inputs("alice");
            i.store = b.into();
            assert!(
                matches!(render(&i), Err(RenderError::Path { .. })),
                "store {b:?}"
            );
            let mut i = inputs("alice");
            i.mount = b.into();
            assert!(
                matches!(render(&i), Err(RenderError::Path { .. })),
                "mount {b:?}"
            );
        }
    }

    #[test]
    fn allows_ordinary_paths() {
        let mut i = inputs("agent_1.v2-x");
        i.read_write.push("/srv/work space/ünïcode/".into());
        let p = render(&i).unwrap();
        assert!(p.contains("\"/srv/work space/ünïcode/**\" rwklmix,"));
    }

    #[test]
    fn unknown_placeholder_is_an_error() {
        assert_eq!(
            render_template("x {{nope}} y", &inputs("a")),
            Err(RenderError::Placeholder("nope".into()))
        );
        assert!(render_template("x {{agent", &inputs("a")).is_err());
    }
}
