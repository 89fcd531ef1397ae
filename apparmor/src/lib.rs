//! Per-agent AppArmor profiles of ClawFS agent processes (P1.4 §8.3).
//!
//! - [`render`]: the profile `clawfs-agent-<name>` from [`ProfileInputs`] and the embedded template
//!   ([`TEMPLATE`], `templates/agent.profile`). Paths are always quoted, and a name or path that
//!   could change the meaning of the profile (quotes, backslashes, newlines and other control
//!   characters, the globbing metacharacters `*?[]{}^`, `@` variables, `#` comments, `..`
//!   components, relative paths) is refused with [`RenderError`], never escaped or injected.
//! - [`availability`]: whether this host can enforce profiles (kernel) and check them (parser).
//! - [`check`]: `apparmor_parser -Q -K` (compile only, nothing loaded) with the parser's message and
//!   the offending line on failure.
//! - [`load`] (`apparmor_parser -r`) and [`OnExec`] (write `exec <profile>` to
//!   `/proc/self/attr/apparmor/exec` in the child, between fork and exec): only where AppArmor is
//!   active.

mod onexec;
mod parser;
mod render;

pub use onexec::OnExec;

/// The profile of P1.4 §8.3 a new store gets (`system/apparmor/clawos-fs`).
pub const CLAWOS_FS_PROFILE: &str = include_str!("../profiles/clawos-fs");
pub use parser::{availability, check, load, parser_path, Availability, CheckError, FEATURES_FILE};
pub use render::{
    profile_name, render, render_template, validate_agent, validate_path, Network, ProfileInputs,
    RenderError, TEMPLATE,
};
