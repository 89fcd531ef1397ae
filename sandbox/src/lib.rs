//! The kernel sandbox around an agent's processes, and what ClawFS learns of them.
//!
//! - [`cgroup`]: the agents' cgroups (v2, with the v1 fallback of hybrid hosts): groups, runs,
//!   quotas, the emergency stop's kill;
//! - [`landlock`]: what an agent may open outside the mount, and which TCP ports it may reach;
//! - [`layers`]: every layer of a run put together (AppArmor, Landlock, seccomp, the eBPF egress
//!   filter, a private `/tmp`), prepared before the clone;
//! - [`spawn`]: the agent's process started inside its run's group;
//! - [`run`]: one agent process run from start to end: group, record, sandbox, signals, wait;
//! - [`runs`]: which store each run serves, as the run recorded it;
//! - [`events`]: the eBPF monitor's reports of agent activity, put on the audit trail.

pub mod cgroup;
pub mod events;
pub mod landlock;
pub mod layers;
pub mod run;
pub mod runs;
pub mod spawn;
