//! The one shape of `--json` output, shared by every command that has it: JSON Lines on stdout.
//!
//! - A command that reports one thing (`status MOUNTPOINT`, `vault status`, `audit verify`)
//!   prints one object on one line.
//! - A command that lists things (`status` of every mount, `audit tail`, `audit search`,
//!   `sandbox check`) prints one object per thing, one per line, and nothing when there is none.
//! - Keys are `snake_case`; times are RFC 3339 strings; absent values are `null`, never left out.
//! - Failures go to stderr as text with the documented exit code; stdout stays parseable.
//!
//! So `clawfs … --json | jq .field` works on every command, and a stream can be read line by
//! line while it is written.

use std::io::{self, Write};

/// Writes `value` as one line of JSON to `out`.
pub fn json_line(out: &mut dyn Write, value: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(io::Error::from)?;
    out.write_all(b"\n")
}

/// Prints `value` as one line of JSON on stdout; a closed pipe (`| head`) ends quietly.
pub fn print_json(value: &impl serde::Serialize) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match json_line(&mut out, value).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Prints `text` on stdout; a closed pipe (`| head`) ends quietly.
pub fn print_text(text: &str) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Bytes in binary units, as `ls -h` prints them.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{n} B"),
        _ => format!("{v:.1} {}", UNITS[u]),
    }
}
