//! The vaultctl command line (docs/vaultctl.md) and how each subcommand maps onto a tool request.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde_json::{json, Map, Value};

use crate::mount::{Mount, MAX_REQUEST_BYTES};
use crate::{exit_for, read_limited, Exit, Outcome};

/// The default mount point when neither `--mount` nor `CLAWFS_MOUNT` is given.
pub const DEFAULT_MOUNT: &str = "/clawfs";

/// Read and edit notes in a ClawFS workspace through the mount's tool files. Prints the tool's
/// JSON response; exits 0 on success, 1 on a user error, 2 on a system error.
#[derive(Debug, Parser)]
#[command(name = "vaultctl", version, max_term_width = 100)]
pub struct Cli {
    /// The ClawFS mount point [env: CLAWFS_MOUNT; default /clawfs].
    #[arg(long, global = true, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// The workspace under /workspaces [env: CLAWFS_WORKSPACE; default: the daemon's "default"].
    #[arg(long, global = true, value_name = "WS")]
    pub workspace: Option<String>,
    /// Pretty-print the JSON response.
    #[arg(long, global = true)]
    pub pretty: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands (docs/vaultctl.md, "Usage").
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Find a note by path or by title (file name); prints resolved_path for the other commands.
    Resolve {
        /// Workspace-relative path (exact, then case-insensitive).
        #[arg(long, required_unless_present = "title", conflicts_with = "title")]
        path: Option<String>,
        /// File name with or without .md (exact, then case-insensitive, anywhere).
        #[arg(long)]
        title: Option<String>,
    },
    /// Lines, bytes, sha256 and mtime of a note.
    Info {
        /// The note (workspace-relative, or absolute under the mount).
        path: String,
    },
    /// The Markdown headings of a note with line numbers.
    Outline {
        /// The note.
        path: String,
        /// Most headings to return (default 200).
        #[arg(long, value_name = "N")]
        max_headings: Option<u64>,
    },
    /// Search one note for a string (or a regex with --regex), with line numbers.
    Search {
        /// The note.
        path: String,
        /// The text to find.
        pattern: String,
        /// Most hits to return (default 20).
        #[arg(long, value_name = "N")]
        max_hits: Option<u64>,
        /// Lines of context before and after each hit (default 0).
        #[arg(long, value_name = "N")]
        context: Option<u64>,
        /// Treat the pattern as a regular expression.
        #[arg(long)]
        regex: bool,
        /// Ignore case.
        #[arg(long, short = 'i')]
        ignore_case: bool,
    },
    /// Lines START..END (1-based, inclusive) of a note.
    ReadRange {
        /// The note.
        path: String,
        /// First line.
        start: u64,
        /// Last line.
        end: u64,
        /// Prefix each line with its number and a tab.
        #[arg(long)]
        line_numbers: bool,
    },
    /// The first lines of a note.
    Head {
        /// The note.
        path: String,
        /// How many lines (default 50).
        #[arg(long, short = 'n', value_name = "N")]
        lines: Option<u64>,
        /// Prefix each line with its number and a tab.
        #[arg(long)]
        line_numbers: bool,
    },
    /// The last lines of a note.
    Tail {
        /// The note.
        path: String,
        /// How many lines (default 50).
        #[arg(long, short = 'n', value_name = "N")]
        lines: Option<u64>,
        /// Prefix each line with its number and a tab.
        #[arg(long)]
        line_numbers: bool,
    },
    /// Apply a unified diff (read from stdin) if the note's sha256 is still BASE_SHA256.
    ApplyPatch {
        /// The note.
        path: String,
        /// The sha256 the diff was made against (from info).
        base_sha256: String,
        /// Read the diff from this file instead of stdin.
        #[arg(long, value_name = "FILE")]
        patch_file: Option<PathBuf>,
        /// Check that it applies and print the new sha256 without writing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Replace the exact text --old by --new if the note's sha256 is still BASE_SHA256.
    EditExact {
        /// The note.
        path: String,
        /// The sha256 the edit was made against (from info).
        base_sha256: String,
        /// The exact text to replace.
        #[arg(long, allow_hyphen_values = true)]
        old: String,
        /// The replacement.
        #[arg(long, allow_hyphen_values = true)]
        new: String,
        /// Most occurrences allowed, all replaced (default 1).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
}

impl Command {
    /// The tool this subcommand calls and its arguments (without `workspace`). `stdin` is read
    /// only by `apply-patch`.
    pub fn to_request(&self, stdin: &mut dyn Read) -> Result<(&'static str, Value), Outcome> {
        let mut args = Map::new();
        let mut put = |k: &str, v: Value| {
            args.insert(k.to_string(), v);
        };
        let tool = match self {
            Command::Resolve { path, title } => {
                if let Some(p) = path {
                    put("path", json!(p));
                }
                if let Some(t) = title {
                    put("title", json!(t));
                }
                "resolve"
            }
            Command::Info { path } => {
                put("path", json!(path));
                "info"
            }
            Command::Outline { path, max_headings } => {
                put("path", json!(path));
                if let Some(n) = max_headings {
                    put("max_headings", json!(n));
                }
                "outline"
            }
            Command::Search {
                path,
                pattern,
                max_hits,
                context,
                regex,
                ignore_case,
            } => {
                put("path", json!(path));
                put("pattern", json!(pattern));
                if let Some(n) = max_hits {
                    put("max_hits", json!(n));
                }
                if let Some(n) = context {
                    put("context", json!(n));
                }
                if *regex {
                    put("regex", json!(true));
                }
                if *ignore_case {
                    put("case_insensitive", json!(true));
                }
                "search"
            }
            Command::ReadRange {
                path,
                start,
                end,
                line_numbers,
            } => {
                put("path", json!(path));
                put("start", json!(start));
                put("end", json!(end));
                if *line_numbers {
                    put("line_numbers", json!(true));
                }
                "read_range"
            }
            Command::Head {
                path,
                lines,
                line_numbers,
            }
            | Command::Tail {
                path,
                lines,
                line_numbers,
            } => {
                put("path", json!(path));
                if let Some(n) = lines {
                    put("lines", json!(n));
                }
                if *line_numbers {
                    put("line_numbers", json!(true));
                }
                if matches!(self, Command::Head { .. }) {
                    "head"
                } else {
                    "tail"
                }
            }
            Command::ApplyPatch {
                path,
                base_sha256,
                patch_file,
                dry_run,
            } => {
                let patch = read_patch(patch_file.as_ref(), stdin)?;
                put("path", json!(path));
                put("base_sha256", json!(base_sha256));
                put("patch", json!(patch));
                if *dry_run {
                    put("dry_run", json!(true));
                }
                "apply_patch"
            }
            Command::EditExact {
                path,
                base_sha256,
                old,
                new,
                count,
            } => {
                put("path", json!(path));
                put("base_sha256", json!(base_sha256));
                put("old", json!(old));
                put("new", json!(new));
                if let Some(n) = count {
                    put("count", json!(n));
                }
                "edit_exact"
            }
        };
        Ok((tool, Value::Object(args)))
    }
}

/// The diff for `apply-patch`: from `--patch-file`, else all of stdin; UTF-8, non-empty.
fn read_patch(file: Option<&PathBuf>, stdin: &mut dyn Read) -> Result<String, Outcome> {
    let bytes = match file {
        Some(p) => std::fs::read(p).map_err(|e| {
            Outcome::error(
                Exit::User,
                "invalid_args",
                format!("reading the patch file {}: {e}", p.display()),
            )
        })?,
        None => read_limited(stdin, MAX_REQUEST_BYTES).map_err(|e| {
            Outcome::error(
                Exit::System,
                "io_error",
                format!("reading the patch from stdin: {e}"),
            )
        })?,
    };
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(Outcome::error(
            Exit::User,
            "too_large",
            format!("the patch is over {MAX_REQUEST_BYTES} bytes"),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Outcome::error(Exit::User, "invalid_args", "the patch is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(Outcome::error(
            Exit::User,
            "invalid_args",
            "no patch given: pipe a unified diff on stdin or pass --patch-file FILE",
        ));
    }
    Ok(text)
}

/// Runs vaultctl with `args` (the first one is the program name) and `stdin`, reading
/// `CLAWFS_MOUNT` and `CLAWFS_WORKSPACE` through `env`.
pub fn run<I, T>(args: I, stdin: &mut dyn Read, env: &dyn Fn(&str) -> Option<OsString>) -> Outcome
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Outcome {
                    stdout: e.render().to_string().into_bytes(),
                    exit: Exit::Ok,
                },
                _ => Outcome::error(
                    Exit::User,
                    "invalid_args",
                    e.render().to_string().trim_end().to_string(),
                ),
            };
        }
    };
    let mount = cli
        .mount
        .clone()
        .or_else(|| {
            env("CLAWFS_MOUNT")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MOUNT));
    let workspace = cli.workspace.clone().or_else(|| {
        env("CLAWFS_WORKSPACE")
            .filter(|s| !s.is_empty())
            .map(|s| s.to_string_lossy().into_owned())
    });
    let (tool, mut request) = match cli.command.to_request(stdin) {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    if let (Some(ws), Value::Object(map)) = (workspace, &mut request) {
        map.insert("workspace".into(), json!(ws));
    }
    match Mount::new(mount).call(tool, &request) {
        Ok((raw, value)) => {
            let exit = exit_for(&value);
            let stdout = if cli.pretty {
                let mut s = serde_json::to_vec_pretty(&value).expect("JSON serialises");
                s.push(b'\n');
                s
            } else {
                raw
            };
            Outcome { stdout, exit }
        }
        Err(e) => e.into_outcome(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str], stdin: &str) -> (&'static str, Value) {
        let cli = Cli::try_parse_from(args).unwrap();
        cli.command.to_request(&mut stdin.as_bytes()).unwrap()
    }

    #[test]
    fn subcommands_map_to_tool_arguments() {
        assert_eq!(
            request(&["vaultctl", "resolve", "--title", "Plan"], ""),
            ("resolve", json!({"title": "Plan"}))
        );
        assert_eq!(
            request(
                &[
                    "vaultctl",
                    "search",
                    "a.md",
                    "TODO",
                    "--max-hits",
                    "3",
                    "--context",
                    "2",
                    "-i"
                ],
                ""
            ),
            (
                "search",
                json!({"path": "a.md", "pattern": "TODO", "max_hits": 3, "context": 2,
                       "case_insensitive": true})
            )
        );
        assert_eq!(
            request(&["vaultctl", "read-range", "a.md", "3", "9"], ""),
            ("read_range", json!({"path": "a.md", "start": 3, "end": 9}))
        );
        assert_eq!(
            request(&["vaultctl", "tail", "a.md", "--lines", "5"], ""),
            ("tail", json!({"path": "a.md", "lines": 5}))
        );
        assert_eq!(
            request(
                &["vaultctl", "apply-patch", "a.md", "abc"],
                "@@ -1 +1 @@\n-a\n+b\n"
            ),
            (
                "apply_patch",
                json!({"path": "a.md", "base_sha256": "abc", "patch": "@@ -1 +1 @@\n-a\n+b\n"})
            )
        );
        assert_eq!(
            request(
                &[
                    "vaultctl",
                    "edit-exact",
                    "a.md",
                    "abc",
                    "--old",
                    "-x",
                    "--new",
                    "y"
                ],
                ""
            ),
            (
                "edit_exact",
                json!({"path": "a.md", "base_sha256": "abc", "old": "-x", "new": "y"})
            )
        );
    }

    #[test]
    fn usage_errors_are_json_and_exit_1() {
        let none = |_: &str| None;
        for args in [
            &["vaultctl"][..],
            &["vaultctl", "frobnicate"],
            &["vaultctl", "resolve"],
            &["vaultctl", "resolve", "--path", "a", "--title", "b"],
            &["vaultctl", "read-range", "a.md", "x", "3"],
        ] {
            let out = run(args.iter().copied(), &mut "".as_bytes(), &none);
            assert_eq!(out.exit, Exit::User, "{args:?}");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["error"], "invalid_args", "{args:?}");
        }
        let out = run(
            ["vaultctl", "apply-patch", "a.md", "abc"],
            &mut "".as_bytes(),
            &none,
        );
        assert_eq!(out.exit, Exit::User);
    }

    #[test]
    fn a_missing_mount_is_a_system_error() {
        let out = run(
            ["vaultctl", "--mount", "/nonexistent/clawfs", "info", "a.md"],
            &mut "".as_bytes(),
            &|_| None,
        );
        assert_eq!(out.exit, Exit::System);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["error"], "mount_unavailable");
        let out = run(["vaultctl", "info", "a.md"], &mut "".as_bytes(), &|k| {
            (k == "CLAWFS_MOUNT").then(|| "/nonexistent/env".into())
        });
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            v["message"].as_str().unwrap().contains("/nonexistent/env"),
            "{v}"
        );
    }
}
