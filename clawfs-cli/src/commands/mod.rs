//! One module per `clawfs` command (or family of subcommands).

pub mod audit;
pub mod estop;
pub mod host;
pub mod identity;
pub mod import;
pub mod integrity;
pub mod mcp;
pub mod mount;
pub mod policy;
pub mod quota;
pub mod run;
pub mod sandbox;
pub mod search;
pub mod snapshot;
pub mod store;
pub mod top;
pub mod vault;
pub mod wasm_tool;
