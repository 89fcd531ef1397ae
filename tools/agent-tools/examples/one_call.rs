//! Runs one tool call in a loop, for profiling: `one_call <dir> <tool> <json> <n>`.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let root = clawfs_agent_tools::ToolRoot::new(&a[1]).unwrap();
    let n: usize = a[4].parse().unwrap();
    for _ in 0..n {
        std::hint::black_box(clawfs_agent_tools::call(&root, &a[2], a[3].as_bytes()));
    }
}
