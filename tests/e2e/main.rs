//! ClawFS end to end: each test mounts a real ClawFS in a temp dir with the real `clawfs` binary
//! and drives it with std::fs and real tools (ls, cat, setfattr, git…), as people and agents do.
//! The attacks are in `tests/adversarial`, `clawfs run` on real cgroups in `tests/run`.

#[path = "../common/mod.rs"]
mod common;

mod agents;
mod file_modes;
mod integrity;
mod lifecycle;
mod live_view;
mod mcp;
mod metrics;
mod migrate;
mod model;
mod mount_discovery;
mod multi_host;
mod namespace;
mod posix;
mod refusals;
mod search;
mod search_remote;
mod snapshots;
mod tools_call;
mod tools_consistency;
mod tools_e2e;
mod tools_third;
mod transport;
mod vault_mount;
mod vaultctl;
mod vaultctl_sshd;
mod wasm_tools;
