//! `clawfs sandbox check`: which layers of the agent sandbox this host can apply, and why not
//! where it cannot. A layer that is unavailable is reported, never pretended.

use anyhow::Context;
use serde_json::json;

use crate::error::Failure;
use clawfs_sandbox::cgroup::{Cgroup2, CgroupV1, Group};

/// One layer's state on this host.
struct Layer {
    name: &'static str,
    available: bool,
    detail: String,
}

/// The resource controllers agents are limited by.
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

fn cgroups() -> Layer {
    let v2 = Cgroup2::find().ok();
    let v2_controllers = v2
        .as_ref()
        .and_then(|c| Group::at(c.mount_point()).controllers().ok())
        .unwrap_or_default();
    let v1 = CgroupV1::find_all().unwrap_or_default();
    let mut parts = Vec::new();
    let mut missing = Vec::new();
    for c in CONTROLLERS {
        if v2_controllers.iter().any(|h| h == c) {
            parts.push(format!("{c}: cgroup v2"));
        } else if v1.iter().any(|h| h.has(c)) {
            parts.push(format!("{c}: cgroup v1 (hybrid host)"));
        } else {
            missing.push(c);
        }
    }
    let identity = match &v2 {
        Some(c) => format!(
            "agents identified by cgroup v2 at {}",
            c.mount_point().display()
        ),
        None => "no cgroup v2 mount: agents cannot be identified by cgroup".to_string(),
    };
    if !missing.is_empty() {
        parts.push(format!("not enforced: {}", missing.join(", ")));
    }
    Layer {
        name: "cgroup",
        available: v2.is_some(),
        detail: format!("{identity}; {}", parts.join("; ")),
    }
}

fn landlock() -> Layer {
    let abi = clawfs_sandbox::landlock::abi();
    Layer {
        name: "landlock",
        available: matches!(
            abi,
            clawfs_sandbox::landlock::Availability::Available { .. }
        ),
        detail: abi.to_string(),
    }
}

fn seccomp() -> Layer {
    let a = clawfs_seccomp::available();
    Layer {
        name: "seccomp",
        available: a.usable(),
        detail: a.to_string(),
    }
}

fn apparmor() -> Layer {
    let a = clawfs_apparmor::availability();
    Layer {
        name: "apparmor",
        available: a.usable(),
        detail: if a.usable() {
            format!("{a}; each sandboxed run loads its agent's profile clawfs-agent-NAME and enters it at exec")
        } else {
            a.to_string()
        },
    }
}

fn ebpf() -> Layer {
    let a = clawfs_ebpf::availability();
    let detail = a.to_string().replace('\n', "; ");
    Layer {
        name: "ebpf",
        // The monitor (the daemon's audit of agent activity and refusals) and the network
        // policy (attached to each sandboxed run) are what ClawFS applies; the LSM is extra.
        available: a.monitor.is_available() && a.egress_filter.is_available(),
        detail,
    }
}

/// `clawfs sandbox check [--json]`.
pub fn check(as_json: bool) -> Result<(), Failure> {
    let layers = [cgroups(), landlock(), seccomp(), apparmor(), ebpf()];
    if as_json {
        for l in &layers {
            let v = json!({"layer": l.name, "available": l.available, "detail": l.detail});
            crate::output::print_json(&v).context("writing to stdout")?;
        }
    } else {
        for l in &layers {
            let state = if l.available {
                "available"
            } else {
                "unavailable"
            };
            println!("{:<9} {state:<11} {}", l.name, l.detail);
        }
    }
    Ok(())
}
