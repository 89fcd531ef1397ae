//! Prints the profile of an agent: `cargo run -p clawfs-apparmor --example render -- NAME`.

fn main() {
    let agent = std::env::args().nth(1).unwrap_or_else(|| "alice".into());
    let inputs = clawfs_apparmor::ProfileInputs {
        agent: agent.clone(),
        mount: "/clawfs".into(),
        own_dir: format!("/clawfs/agents/{agent}").into(),
        read_write: vec!["/clawfs/workspaces/shared".into()],
        read_only: vec![],
        store: "/var/lib/clawfs/store".into(),
        tmp: format!("/tmp/clawfs-{agent}").into(),
        network: clawfs_apparmor::Network::Deny,
    };
    match clawfs_apparmor::render(&inputs) {
        Ok(p) => print!("{p}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
