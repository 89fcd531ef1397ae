//! `clawfs top`: the agents of a store, live — their runs and commands, operations per
//! second, bytes, refusals with the latest reason, and quota use — in a terminal view
//! (`view`), or one sample for scripts (`--once [--json]`). Reads the store only: the roster,
//! the audit trail as it grows, the daemon's saved quota counts and the agents' control
//! groups; needs no running daemon, but shows what a serving one does.

mod sample;
mod view;

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::anyhow;
use clawfs_args::top::{SortKey, TopArgs};

use crate::error::Failure;
use sample::{AgentSample, Sample, Sampler};

/// `clawfs top`.
pub fn top(args: &TopArgs) -> Result<(), Failure> {
    let root = crate::mounts::store_for(&args.store.store, args.mount.as_deref())?;
    if !args.interval.is_finite() || !(0.1..=3600.0).contains(&args.interval) {
        return Err(Failure::Other(anyhow!(
            "--interval {}: give seconds between 0.1 and 3600",
            args.interval
        )));
    }
    let interval = Duration::from_secs_f64(args.interval);
    let mut sampler = Sampler::new(&root)?;
    let order = Order {
        sort: args.sort,
        filter: args.agent.clone().unwrap_or_default(),
    };
    if args.once {
        let mut sample = sampler.sample(interval)?;
        order.apply(&mut sample.agents);
        if args.json {
            crate::output::print_json(&sample).map_err(|e| Failure::Other(e.into()))?;
        } else {
            print!("{}", text(&sample));
        }
        return Ok(());
    }
    if !std::io::stdout().is_terminal() {
        return Err(Failure::Other(anyhow!(
            "clawfs top draws on a terminal; in scripts use --once (with --json for JSON)"
        )));
    }
    view::run(&mut sampler, interval, order).map_err(|e| Failure::Other(anyhow!(e)))
}

/// Which agents are shown, and in what order.
#[derive(Debug, Clone)]
pub(crate) struct Order {
    sort: SortKey,
    /// Only agents whose name contains this.
    filter: String,
}

impl Order {
    fn apply(&self, agents: &mut Vec<AgentSample>) {
        agents.retain(|a| a.agent.contains(&self.filter));
        let share = |a: &AgentSample| a.quota.bytes_share().unwrap_or(0.0);
        agents.sort_by(|a, b| {
            let by = match self.sort {
                SortKey::Ops => b.ops_per_second.total_cmp(&a.ops_per_second),
                SortKey::Bytes => b.bytes.cmp(&a.bytes),
                SortKey::Refusals => b.refusals.cmp(&a.refusals),
                SortKey::Quota => share(b).total_cmp(&share(a)),
                SortKey::Procs => b.processes.cmp(&a.processes),
                SortKey::Agent => std::cmp::Ordering::Equal,
            };
            by.then_with(|| a.agent.cmp(&b.agent))
        });
    }
}

/// The columns of one agent's row, as text: agent, processes, ops/s, operations, bytes,
/// refusals, quota, latest refusal.
fn cells(a: &AgentSample) -> [String; 8] {
    let quota = match (a.quota.bytes_limit, a.quota.bytes_share()) {
        (Some(limit), Some(share)) => format!(
            "{} / {} ({:.0}%)",
            crate::output::human_bytes(a.quota.bytes),
            crate::output::human_bytes(limit),
            share * 100.0
        ),
        _ => crate::output::human_bytes(a.quota.bytes),
    };
    let last = a.last_refusal.as_ref().map_or(String::new(), |r| {
        let time = r.time.get(11..19).unwrap_or(&r.time);
        printable(&match r.reason.as_deref() {
            // Most reasons begin with the path: it is not said twice.
            Some(why) if why.starts_with(&r.path) => format!("{time} {}: {why}", r.operation),
            why => format!(
                "{time} {} {}: {}",
                r.operation,
                r.path,
                why.unwrap_or("refused")
            ),
        })
    });
    [
        a.agent.clone(),
        a.processes.to_string(),
        format!("{:.1}", a.ops_per_second),
        a.ops.to_string(),
        crate::output::human_bytes(a.bytes),
        a.refusals.to_string(),
        quota,
        last,
    ]
}

/// `s` with every character but printable ASCII shown as `\u{..}`: a terminal escape, a
/// direction override or a look-alike of a space in a name an agent chose is shown for what
/// it is, never sent to the terminal as is.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .map(|c| match c == ' ' || c.is_ascii_graphic() {
            true => c.to_string(),
            false => c.escape_unicode().to_string(),
        })
        .collect()
}

/// The column titles of [`cells`].
const HEADERS: [&str; 8] = [
    "AGENT",
    "PROCS",
    "OPS/S",
    "OPS",
    "BYTES",
    "REFUSED",
    "QUOTA",
    "LATEST REFUSAL",
];

/// One sample as a plain table, then the runs.
fn text(sample: &Sample) -> String {
    let rows: Vec<[String; 8]> = sample.agents.iter().map(cells).collect();
    let mut widths = HEADERS.map(|h| h.chars().count());
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            match i + 1 == cols.len() {
                true => s.push_str(c),
                false => s.push_str(&format!("{c:<w$}  ")),
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&HEADERS.map(String::from));
    for row in &rows {
        out.push_str(&line(row));
    }
    let runs: Vec<String> = sample
        .agents
        .iter()
        .flat_map(|a| {
            a.runs
                .iter()
                .map(move |r| format!("{:<8} {} {}\n", r.pid, a.agent, r.command))
        })
        .collect();
    if !runs.is_empty() {
        out.push_str("\nPID      AGENT COMMAND\n");
        out.extend(runs);
    }
    out
}
