//! Prints the tool registry JSON (what the daemon serves as `<mount>/tools/registry.json`), for
//! the mount given as the first argument (default `/clawfs`).
fn main() {
    let mount = std::env::args_os()
        .nth(1)
        .map_or_else(|| "/clawfs".into(), std::path::PathBuf::from);
    println!(
        "{}",
        serde_json::to_string_pretty(&clawfs_agent_tools::registry(&mount)).unwrap()
    );
}
