//! Library-level timing of the issue's speed cases (no mount): p50/p99 of info and read_range on a
//! 1 MB file, outline of a 100,000-line file, search_files over 10,000 files, a 3-hunk apply_patch.
//! Run with `cargo run --release -p clawfs-agent-tools --example quick_bench -- <scratch dir>`.

use std::time::Instant;

use clawfs_agent_tools::{call, ToolRoot};

fn time(name: &str, n: usize, mut f: impl FnMut()) {
    let mut t: Vec<f64> = (0..n)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{name:<40} p50 {:>10.1} µs  p99 {:>10.1} µs",
        t[n / 2],
        t[(n * 99 / 100).min(n - 1)]
    );
}

fn ok(out: &[u8]) {
    assert!(
        out.starts_with(b"{\"ok\":true"),
        "{}",
        String::from_utf8_lossy(out)
    );
}

fn main() {
    let base = std::env::args()
        .nth(1)
        .unwrap_or_else(|| std::env::temp_dir().to_string_lossy().into_owned());
    let dir = std::path::Path::new(&base).join(format!("clawfs-bench-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("many")).unwrap();
    let mb: String = (0..16_000)
        .map(|i| format!("line {i:06} of a one megabyte file..........\n"))
        .collect();
    std::fs::write(dir.join("1mb.md"), &mb).unwrap();
    let big: String = (0..100_000)
        .map(|i| {
            if i % 50 == 0 {
                format!("## Heading {i}\n")
            } else {
                format!("text {i}\n")
            }
        })
        .collect();
    std::fs::write(dir.join("100k.md"), &big).unwrap();
    for i in 0..10_000 {
        let sub = dir.join("many").join(format!("d{}", i % 100));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            sub.join(format!("f{i}.md")),
            format!("note {i}\nsome text\nmore text\n"),
        )
        .unwrap();
    }
    let root = ToolRoot::new(&dir).unwrap();
    time("info 1 MB", 200, || {
        ok(&call(&root, "info", br#"{"path":"1mb.md"}"#))
    });
    time("read_range 100 lines of 1 MB", 200, || {
        ok(&call(
            &root,
            "read_range",
            br#"{"path":"1mb.md","start":8000,"end":8099}"#,
        ))
    });
    time("cat-equivalent: std::fs::read 1 MB", 200, || {
        std::fs::read(dir.join("1mb.md")).unwrap();
    });
    time("outline 100,000 lines", 50, || {
        ok(&call(&root, "outline", br#"{"path":"100k.md"}"#))
    });
    time("search_files over 10,000 files", 10, || {
        ok(&call(
            &root,
            "search_files",
            br#"{"pattern":"note 9999\\b"}"#,
        ))
    });
    time("apply_patch 3 hunks (1 MB file)", 50, || {
        let info: serde_json::Value =
            serde_json::from_slice(&call(&root, "info", br#"{"path":"1mb.md"}"#)).unwrap();
        let text = std::fs::read_to_string(dir.join("1mb.md")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut patch = String::new();
        for at in [100usize, 5000, 12000] {
            let old = lines[at];
            let new = if old.ends_with('!') {
                old.trim_end_matches('!').to_string()
            } else {
                format!("{old}!")
            };
            patch.push_str(&format!("@@ -{0},1 +{0},1 @@\n-{old}\n+{new}\n", at + 1));
        }
        let req =
            serde_json::json!({"path": "1mb.md", "base_sha256": info["sha256"], "patch": patch});
        ok(&call(&root, "apply_patch", req.to_string().as_bytes()));
    });
    let _ = std::fs::remove_dir_all(&dir);
}
