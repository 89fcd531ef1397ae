//! `vaultctl-ssh`: the SSH forced-command wrapper (docs/vaultctl.md, "Over SSH").
//!
//! sshd runs it instead of whatever the client asked for, with the client's command line in
//! `$SSH_ORIGINAL_COMMAND`. It accepts only `vaultctl <allowed subcommand> <args>`, split with
//! POSIX shell quoting rules but never run by a shell: unquoted shell syntax (`;`, `|`, `&`,
//! redirections, `$`, backquotes, globs, comments, newlines) is refused rather than taken
//! literally, so a command means the same thing here as it would to a shell. The mount and the
//! workspace are fixed by the wrapper's own arguments (set in `authorized_keys`); the client may
//! not choose them, nor make vaultctl read a local file (`--patch-file`).

use std::fmt;

/// The vaultctl subcommands a remote client may run.
pub const ALLOWED_SUBCOMMANDS: &[&str] = &[
    "resolve",
    "info",
    "outline",
    "search",
    "read-range",
    "head",
    "tail",
    "apply-patch",
    "edit-exact",
];

/// vaultctl's options before the subcommand that a client may give.
const CLIENT_GLOBAL_OPTIONS: &[&str] = &["--pretty"];

/// Options only the wrapper's owner may set.
const FORBIDDEN_OPTIONS: &[&str] = &["--mount", "--workspace", "--patch-file"];

/// The longest command line accepted.
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `$SSH_ORIGINAL_COMMAND` is unset: an interactive login or `ssh host` with no command.
    NoCommand,
    /// Over [`MAX_COMMAND_BYTES`].
    TooLong(usize),
    /// A control character (other than a newline or tab inside quotes).
    ControlCharacter(usize),
    /// Unquoted shell syntax: a second command, a pipe, a redirection, an expansion, a glob.
    Metacharacter(char, usize),
    /// `$` or a backquote inside double quotes, where a shell would expand it.
    Expansion(char, usize),
    /// Unbalanced quotes or a trailing backslash.
    BadQuoting(String),
    /// The program is not `vaultctl`.
    NotVaultctl(String),
    /// No subcommand, or one not in [`ALLOWED_SUBCOMMANDS`].
    Subcommand(String),
    /// An option reserved to the wrapper's owner.
    ForbiddenOption(String),
    /// An option where the subcommand must come.
    OptionFirst(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoCommand => write!(
                f,
                "no command: this key may only run `vaultctl <subcommand> ...`, not a shell"
            ),
            Refusal::TooLong(n) => {
                write!(f, "command is {n} bytes, over {MAX_COMMAND_BYTES}")
            }
            Refusal::ControlCharacter(at) => write!(f, "control character at byte {at}"),
            Refusal::Metacharacter(c, at) => write!(
                f,
                "shell syntax {c:?} at byte {at} is not allowed (one vaultctl command only; \
                 quote the argument if {c:?} is meant literally)"
            ),
            Refusal::Expansion(c, at) => write!(
                f,
                "{c:?} at byte {at} inside double quotes would be expanded by a shell; \
                 use single quotes"
            ),
            Refusal::BadQuoting(e) => write!(f, "cannot split the command: {e}"),
            Refusal::NotVaultctl(p) => write!(f, "only vaultctl may run here, not {p:?}"),
            Refusal::Subcommand(s) if s.is_empty() => write!(
                f,
                "missing subcommand; allowed: {}",
                ALLOWED_SUBCOMMANDS.join(", ")
            ),
            Refusal::Subcommand(s) => write!(
                f,
                "subcommand {s:?} is not allowed; allowed: {}",
                ALLOWED_SUBCOMMANDS.join(", ")
            ),
            Refusal::ForbiddenOption(o) => {
                write!(f, "option {o:?} is set by the server, not by the client")
            }
            Refusal::OptionFirst(o) => write!(
                f,
                "option {o:?} comes after the subcommand: `vaultctl <subcommand> [options] ...`; subcommands: {}",
                ALLOWED_SUBCOMMANDS.join(", ")
            ),
        }
    }
}

/// Checks an `$SSH_ORIGINAL_COMMAND` value and returns vaultctl's arguments after the program
/// name (the subcommand first).
pub fn check_command(command: Option<&str>) -> Result<Vec<String>, Refusal> {
    let command = command.ok_or(Refusal::NoCommand)?;
    if command.len() > MAX_COMMAND_BYTES {
        return Err(Refusal::TooLong(command.len()));
    }
    scan_quoting(command)?;
    let words = shell_words::split(command).map_err(|e| Refusal::BadQuoting(e.to_string()))?;
    let mut words = words.into_iter();
    match words.next() {
        Some(p) if p == "vaultctl" => {}
        Some(p) => return Err(Refusal::NotVaultctl(p)),
        None => return Err(Refusal::NoCommand),
    }
    let args: Vec<String> = words.collect();
    // Options the server fixes are named as such wherever they are, before the subcommand is
    // looked at: `vaultctl --workspace other info x` is a forbidden option, not a subcommand.
    for a in &args {
        for opt in FORBIDDEN_OPTIONS {
            if a == opt
                || a.strip_prefix(opt)
                    .is_some_and(|rest| rest.starts_with('='))
            {
                return Err(Refusal::ForbiddenOption(opt.to_string()));
            }
        }
    }
    match args
        .iter()
        .find(|a| !CLIENT_GLOBAL_OPTIONS.contains(&a.as_str()))
    {
        Some(sub) if ALLOWED_SUBCOMMANDS.contains(&sub.as_str()) => {}
        Some(opt) if opt.starts_with('-') => return Err(Refusal::OptionFirst(opt.clone())),
        Some(sub) => return Err(Refusal::Subcommand(sub.clone())),
        None => return Err(Refusal::Subcommand(String::new())),
    }
    Ok(args)
}

/// Refuses what a POSIX shell would read as more than one simple command of literal words.
fn scan_quoting(command: &str) -> Result<(), Refusal> {
    #[derive(PartialEq)]
    enum State {
        Plain,
        Single,
        Double,
    }
    let mut state = State::Plain;
    let mut chars = command.char_indices();
    while let Some((at, c)) = chars.next() {
        let quoted = state != State::Plain;
        // A tab separates words; a newline is a command separator unless quoted.
        let allowed = c == '\t' || (quoted && c == '\n');
        if c.is_control() && !allowed {
            return Err(Refusal::ControlCharacter(at));
        }
        match state {
            State::Plain => match c {
                '\'' => state = State::Single,
                '"' => state = State::Double,
                '\\' => match chars.next() {
                    Some((_, '\n')) | None => {
                        return Err(Refusal::BadQuoting("trailing backslash".into()))
                    }
                    Some((at, e)) if e.is_control() => return Err(Refusal::ControlCharacter(at)),
                    Some(_) => {}
                },
                ';' | '&' | '|' | '<' | '>' | '(' | ')' | '$' | '`' | '*' | '?' | '[' | ']'
                | '{' | '}' | '~' | '#' | '!' => return Err(Refusal::Metacharacter(c, at)),
                _ => {}
            },
            State::Single => {
                if c == '\'' {
                    state = State::Plain;
                }
            }
            State::Double => match c {
                '"' => state = State::Plain,
                '$' | '`' => return Err(Refusal::Expansion(c, at)),
                '\\' => {
                    if let Some((at, e)) = chars.next() {
                        if e.is_control() && e != '\n' && e != '\t' {
                            return Err(Refusal::ControlCharacter(at));
                        }
                    }
                }
                _ => {}
            },
        }
    }
    if state != State::Plain {
        return Err(Refusal::BadQuoting("unterminated quote".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(cmd: &str) -> Vec<String> {
        check_command(Some(cmd)).unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
    }

    #[test]
    fn accepts_plain_vaultctl_commands() {
        assert_eq!(
            ok("vaultctl info Projects/Plan.md"),
            ["info", "Projects/Plan.md"]
        );
        assert_eq!(
            ok("vaultctl --pretty info a.md"),
            ["--pretty", "info", "a.md"]
        );
        assert_eq!(
            ok(r#"vaultctl resolve --title "Project Plan""#),
            ["resolve", "--title", "Project Plan"]
        );
        assert_eq!(
            ok("vaultctl search 'My Note.md' 'TODO|FIXME; $HOME' --regex --context 2"),
            [
                "search",
                "My Note.md",
                "TODO|FIXME; $HOME",
                "--regex",
                "--context",
                "2"
            ]
        );
        assert_eq!(
            ok("vaultctl edit-exact a.md abc --old 'line one\nline two' --new x"),
            [
                "edit-exact",
                "a.md",
                "abc",
                "--old",
                "line one\nline two",
                "--new",
                "x"
            ]
        );
        assert_eq!(ok(r"vaultctl info My\ Note.md"), ["info", "My Note.md"]);
    }

    #[test]
    fn refuses_everything_else() {
        type Case = (Option<&'static str>, fn(&Refusal) -> bool);
        let cases: &[Case] = &[
            (None, |r| *r == Refusal::NoCommand),
            (Some(""), |r| *r == Refusal::NoCommand),
            (Some("bash"), |r| matches!(r, Refusal::NotVaultctl(_))),
            (Some("/usr/bin/vaultctl info a"), |r| {
                matches!(r, Refusal::NotVaultctl(_))
            }),
            (Some("rm -rf /"), |r| matches!(r, Refusal::NotVaultctl(_))),
            (Some("vaultctl"), |r| matches!(r, Refusal::Subcommand(_))),
            (Some("vaultctl shell"), |r| {
                matches!(r, Refusal::Subcommand(_))
            }),
            (Some("vaultctl --help"), |r| {
                matches!(r, Refusal::OptionFirst(_))
            }),
            (Some("vaultctl info a; rm -rf /"), |r| {
                matches!(r, Refusal::Metacharacter(';', _))
            }),
            (Some("vaultctl info a && curl x"), |r| {
                matches!(r, Refusal::Metacharacter('&', _))
            }),
            (Some("vaultctl info a | sh"), |r| {
                matches!(r, Refusal::Metacharacter('|', _))
            }),
            (Some("vaultctl info a > /etc/passwd"), |r| {
                matches!(r, Refusal::Metacharacter('>', _))
            }),
            (Some("vaultctl info $(id)"), |r| {
                matches!(r, Refusal::Metacharacter('$', _))
            }),
            (Some("vaultctl info `id`"), |r| {
                matches!(r, Refusal::Metacharacter('`', _))
            }),
            (Some("vaultctl info \"$(id)\""), |r| {
                matches!(r, Refusal::Expansion('$', _))
            }),
            (Some("vaultctl info *.md"), |r| {
                matches!(r, Refusal::Metacharacter('*', _))
            }),
            (Some("vaultctl info a\nrm -rf /"), |r| {
                matches!(r, Refusal::ControlCharacter(_))
            }),
            (Some("vaultctl info 'a"), |r| {
                matches!(r, Refusal::BadQuoting(_))
            }),
            (Some("vaultctl info a\\"), |r| {
                matches!(r, Refusal::BadQuoting(_))
            }),
            (
                Some("vaultctl --mount /etc info passwd"),
                |r| matches!(r, Refusal::ForbiddenOption(o) if o == "--mount"),
            ),
            (Some("vaultctl --workspace other info a"), |r| {
                matches!(r, Refusal::ForbiddenOption(o) if o == "--workspace")
                    && !r.to_string().contains("subcommand")
            }),
            (Some("vaultctl --json info a"), |r| {
                matches!(r, Refusal::OptionFirst(_))
            }),
            (
                Some("vaultctl --pretty"),
                |r| matches!(r, Refusal::Subcommand(s) if s.is_empty()),
            ),
            (Some("vaultctl info a --workspace other"), |r| {
                matches!(r, Refusal::ForbiddenOption(_))
            }),
            (Some("vaultctl info a --mount=/"), |r| {
                matches!(r, Refusal::ForbiddenOption(_))
            }),
            (
                Some("vaultctl apply-patch a abc --patch-file /etc/shadow"),
                |r| matches!(r, Refusal::ForbiddenOption(_)),
            ),
        ];
        for (cmd, want) in cases {
            let got = check_command(*cmd).expect_err(&format!("{cmd:?} must be refused"));
            assert!(want(&got), "{cmd:?}: {got:?}");
            assert!(!got.to_string().is_empty());
        }
        let long = format!("vaultctl info {}", "a".repeat(MAX_COMMAND_BYTES));
        assert!(matches!(
            check_command(Some(&long)),
            Err(Refusal::TooLong(_))
        ));
    }
}

/// The `vaultctl-ssh` command line.
///
/// SSH forced-command wrapper: runs only `vaultctl <command> ...` from $SSH_ORIGINAL_COMMAND.
#[derive(Debug, clap::Parser)]
#[command(name = "vaultctl-ssh", version, max_term_width = 100)]
pub struct SshArgs {
    /// The ClawFS mount point [env: CLAWFS_MOUNT; default /clawfs].
    #[arg(long, value_name = "DIR")]
    pub mount: Option<std::path::PathBuf>,
    /// The workspace the client works in [env: CLAWFS_WORKSPACE; default "default"].
    #[arg(long, value_name = "WS")]
    pub workspace: Option<String>,
    /// Also append refusals to this file.
    #[arg(long, value_name = "FILE")]
    pub log: Option<std::path::PathBuf>,
}
