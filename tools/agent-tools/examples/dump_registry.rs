//! Prints the tool registry JSON (what the daemon serves as /clawfs/tools/registry.json).
fn main() {
    println!(
        "{}",
        serde_json::to_string_pretty(&clawfs_agent_tools::registry()).unwrap()
    );
}
