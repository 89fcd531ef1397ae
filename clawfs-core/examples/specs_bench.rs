//! Verification of many signed documents: makes a store's `specs/` hold DOCS frozen documents
//! (4 KiB each, signed with Ed25519), then times `SpecBook::verify` (every document hashed and
//! its signature checked, as `clawfs specs verify` does) and the daemon's first check of each
//! document. `bench/specs.sh` runs it in release mode.
//!
//!   specs_bench [DOCS] [ROUNDS]      (defaults 1000 and 5)

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Instant;

use clawfs_integrity::signers::{self, Signers};
use clawfs_integrity::specs::{SpecBook, SpecChecker};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let docs = args.first().copied().unwrap_or(1000);
    let rounds = args.get(1).copied().unwrap_or(5).max(1);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    clawfs_core::store::Store::init(&root).unwrap();
    let store = clawfs_core::store::Store::open(&root).unwrap();
    let fd = store.root_fd();

    let key = signers::generate();
    let mut trusted = Signers::load(fd).unwrap();
    trusted.add("bench", &key.verifying_key(), "now").unwrap();
    clawfs_integrity::system::install(
        fd,
        "signers.json",
        &clawfs_integrity::to_pretty(&trusted),
        0o444,
        "now",
    )
    .unwrap();
    let book = SpecBook::new(fd);
    book.sign_unsigned("bench", &key, "now").unwrap();
    let t = Instant::now();
    for i in 0..docs {
        let text = format!(
            "# Document {i}\n\n{}\n",
            "All agents keep to the rules. ".repeat(136)
        );
        let id = format!("D-{i:05}");
        book.add(&id, &format!("bench/{id}.md"), text.as_bytes(), "now")
            .unwrap();
        book.freeze(&id, "bench", &key, "now").unwrap();
    }
    eprintln!(
        "made {docs} signed documents in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let mut verify = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let reports = book.verify().unwrap();
        verify.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(reports.iter().all(|r| r.problem.is_none()));
        assert_eq!(reports.len(), docs + 1);
    }
    verify.sort_by(f64::total_cmp);
    println!(
        "verify {} documents (hash + Ed25519 signature each): median {:.1} ms, best {:.1} ms ({rounds} rounds)",
        docs + 1,
        verify[verify.len() / 2],
        verify[0]
    );

    // The daemon's check of a document on open: a sealed copy of its bytes, hashed while
    // copied, checked against the entry. The first round also parses signatures.json and
    // signers.json; later rounds find them parsed.
    let checker = SpecChecker::default();
    let mut rounds_us = Vec::new();
    for _ in 0..2 {
        let t = Instant::now();
        for i in 0..docs {
            let rel = format!("bench/D-{i:05}.md");
            let file = clawfs_store::beneath::open_file(
                fd,
                &Path::new("specs").join(&rel),
                rustix::fs::OFlags::RDONLY,
            )
            .unwrap();
            let (_copy, sha256) = clawfs_integrity::sealed_copy(file.as_fd()).unwrap();
            checker.check(fd, &rel, &sha256).unwrap();
        }
        rounds_us.push(t.elapsed().as_secs_f64() * 1e6 / docs as f64);
    }
    println!(
        "daemon check on open (open, sealed copy, hash, entry and signature): {:.1} µs per document in the first round, {:.1} µs in the second",
        rounds_us[0], rounds_us[1]
    );
}
