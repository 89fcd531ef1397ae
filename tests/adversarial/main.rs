//! Attacks on a mounted ClawFS, as a hostile agent or an ordinary local user would make them.
//! Each module is one class of hole (`docs/threat-model.md`); each test fails if the hole opens.

#[path = "../common/mod.rs"]
mod common;
mod support;

mod agent_events;
mod audit_strip;
mod audit_truth;
mod bad_input;
mod deferred_calls;
mod descriptor_hoarding;
mod disk_full;
mod estop;
mod git_for_agents;
mod handle_confusion;
mod hostile_memory;
mod hostile_pg_source;
mod kernel_checks;
mod missing_names;
mod one_agent_one_uid;
mod posix_gaps;
mod quota;
mod quota_tools;
mod root_writes;
mod sandbox;
mod sandbox_network;
mod search_leaks;
mod shared_store;
mod snapshot_files;
mod stale_paths;
mod store_bypass;
mod system_seal;
mod tool_floods;
mod tool_races;
mod tool_rules;
mod vault_leak;
