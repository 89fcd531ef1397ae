//! The workspace index at scale: inserts (including the built-in embedding), text, vector and
//! hybrid queries (p50/p99), database size, HNSW recall@10 against exact search, and the time to
//! index a fresh workspace. `bench/search.sh` runs it in release mode.
//!
//!   search_bench [DOCS] [QUERIES]      (defaults 100000 and 200)
//!
//! With `SEARCH_BENCH_DIR` set, the workspace and its index are kept in that directory and a
//! later run reuses them (the "index a fresh workspace" figure is then a rescan of current files),
//! so queries can be profiled without indexing again.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use clawfs_search::embed::{BuiltinModel, Embedder};
use clawfs_search::hnsw::HnswParams;
use clawfs_search::workspace::IndexFiles;
use clawfs_search::{Mode, Query, WorkspaceIndex};

/// Words the synthetic documents are made of: topics, so that queries have real neighbours.
const TOPICS: &[&[&str]] = &[
    &[
        "cat", "kitten", "purr", "whiskers", "feline", "sofa", "nap", "mouse",
    ],
    &[
        "revenue",
        "budget",
        "quarterly",
        "profit",
        "costs",
        "invoice",
        "forecast",
        "margin",
    ],
    &[
        "server",
        "socket",
        "network",
        "latency",
        "packet",
        "router",
        "bandwidth",
        "tcp",
    ],
    &[
        "garden", "tomato", "soil", "seeds", "harvest", "compost", "watering", "sunlight",
    ],
    &[
        "rocket",
        "orbit",
        "launch",
        "thrust",
        "satellite",
        "fuel",
        "gravity",
        "mission",
    ],
    &[
        "recipe", "flour", "oven", "butter", "bake", "sugar", "dough", "cinnamon",
    ],
    &[
        "river", "bridge", "flood", "rain", "dam", "turbine", "current", "valley",
    ],
    &[
        "guitar", "melody", "chord", "drum", "concert", "rhythm", "song", "stage",
    ],
];
const FILLER: &[&str] = &[
    "the", "a", "we", "then", "after", "with", "about", "notes", "today", "plan", "again",
    "because", "while", "every", "week", "team", "review", "later", "first", "next",
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, s: &[&'a str]) -> &'a str {
        s[(self.next() % s.len() as u64) as usize]
    }
}

fn document(rng: &mut Rng, i: usize) -> String {
    let topic = TOPICS[i % TOPICS.len()];
    let mut out = format!("# Note {i}\n\n");
    for _ in 0..(3 + rng.next() % 4) {
        for _ in 0..12 {
            let w = match rng.next() % 3 {
                0 => rng.pick(FILLER),
                _ => rng.pick(topic),
            };
            out.push_str(w);
            out.push(' ');
        }
        out.push_str(&format!("item{}\n", rng.next() % 100_000));
    }
    out
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let docs = args.first().copied().unwrap_or(100_000);
    let queries = args.get(1).copied().unwrap_or(200);
    let model = BuiltinModel::load(&BuiltinModel::model_dir(), 256).expect("model installed");
    let dim = 256;
    // Where the workspace and its index live: a kept folder, or a temp one removed at the end.
    let temp;
    let base = match std::env::var_os("SEARCH_BENCH_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            temp = tempfile::tempdir().unwrap();
            temp.path().to_path_buf()
        }
    };
    let ws = base.join("ws");
    let reuse = ws.join(format!("d{:03}", (docs - 1) / 1000)).exists();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let t = Instant::now();
    for i in 0..docs {
        // Generated even when reused, so that the queries drawn afterwards are the same.
        let text = document(&mut rng, i);
        if reuse {
            continue;
        }
        let dir = ws.join(format!("d{:03}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("n{i}.md")), text).unwrap();
    }
    if !reuse {
        eprintln!("wrote {docs} files in {:.1} s", t.elapsed().as_secs_f64());
    }
    let ws_fd = rustix::fs::open(
        &ws,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let e: Arc<dyn Embedder> = Arc::new(model.with_dimension(dim));
    let ixdir = base.join("ix");
    let (ix, _) = WorkspaceIndex::open(
        "bench",
        &IndexFiles::private(&ixdir).unwrap(),
        dim,
        HnswParams::default(),
        Some(Arc::clone(&e)),
    )
    .unwrap();
    let t = Instant::now();
    let r = ix.rescan(ws_fd.as_fd(), &mut |_, _| {}).unwrap();
    let full = t.elapsed().as_secs_f64();
    println!(
        "index a fresh workspace of {docs} files: {full:.1} s ({:.0} files/s, {} indexed)",
        docs as f64 / full,
        r.updated
    );

    // Inserts of new documents into the full index, including embedding.
    let mut ins = Vec::new();
    for i in 0..queries {
        let rel = format!("new/n{i}.md");
        std::fs::create_dir_all(ws.join("new")).unwrap();
        std::fs::write(ws.join(&rel), document(&mut rng, i)).unwrap();
        let t = Instant::now();
        ix.update(ws_fd.as_fd(), &rel).unwrap();
        ins.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "insert (one document, with embedding): p50 {:.2} ms, p99 {:.2} ms",
        pct(&mut ins, 0.5),
        pct(&mut ins, 0.99)
    );

    let all = |_: &str| true;
    let mut qtexts = Vec::new();
    for i in 0..queries {
        let topic = TOPICS[i % TOPICS.len()];
        qtexts.push(format!("{} {}", rng.pick(topic), rng.pick(topic)));
    }
    for (mode, name) in [
        (Mode::Text, "text"),
        (Mode::Vector, "vector"),
        (Mode::Hybrid, "hybrid"),
    ] {
        let mut lat = Vec::new();
        for q in &qtexts {
            let t = Instant::now();
            let hits = ix
                .query(&Query {
                    text: q,
                    mode,
                    limit: 10,
                    readable: &all,
                    workspace: ws_fd.as_fd(),
                })
                .unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(!hits.is_empty());
        }
        println!(
            "{name} search (top-10): p50 {:.2} ms, p99 {:.2} ms",
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99)
        );
    }

    // Each of text search's speed-ups against the query without it, query by query in turn,
    // so that the machine's drift falls on both alike.
    let text = |q: &str| {
        let t = Instant::now();
        ix.query(&Query {
            text: q,
            mode: Mode::Text,
            limit: 10,
            readable: &all,
            workspace: ws_fd.as_fd(),
        })
        .unwrap();
        t.elapsed().as_secs_f64() * 1e3
    };
    let compare = |label: &str, without: &str, set: &dyn Fn(bool)| {
        let (mut with, mut other) = (Vec::new(), Vec::new());
        for q in &qtexts {
            set(true);
            with.push(text(q));
            set(false);
            other.push(text(q));
        }
        set(true);
        let (a, b) = (pct(&mut with, 0.5), pct(&mut other, 0.5));
        println!(
            "text search, interleaved: {label} p50 {a:.2} ms (p99 {:.2}), {without} p50 {b:.2} ms (p99 {:.2}): {:.2}x",
            pct(&mut with, 0.99),
            pct(&mut other, 0.99),
            b / a
        );
    };
    compare("two halves at once", "one pass", &|on| {
        ix.split_text_search(on)
    });
    compare("phrase counts remembered", "counted each query", &|on| {
        ix.remember_phrase_counts(on)
    });

    // Recall@10 of the graph against an exact scan of every vector.
    let db = clawfs_search::index::IndexDb::open(&ixdir.join("index.db"), "bench").unwrap();
    let vectors = db.all_vectors().unwrap();
    let width = clawfs_search::hnsw::width_for(dim, vectors.iter().map(|(_, v)| v.as_slice()));
    let graph = clawfs_search::hnsw::Hnsw::new(dim, width, HnswParams::default()).unwrap();
    for (id, v) in &vectors {
        graph.add(*id, v).unwrap();
    }
    graph.settle(&|| true).unwrap();
    let mut found = 0usize;
    let probes = queries.min(100);
    for q in qtexts.iter().take(probes) {
        let v = e.embed(&[q]).unwrap().remove(0);
        let mut exact: Vec<(f32, i64)> = vectors
            .iter()
            .map(|(id, w)| (v.iter().zip(w).map(|(a, b)| a * b).sum::<f32>(), *id))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let truth: std::collections::HashSet<i64> = exact.iter().take(10).map(|x| x.1).collect();
        found += graph
            .search(&v, 10)
            .unwrap()
            .iter()
            .filter(|(id, _)| truth.contains(id))
            .count();
    }
    println!(
        "HNSW recall@10 against exact search: {:.3} ({probes} queries)",
        found as f64 / (probes * 10) as f64
    );
    ix.save_graph().unwrap();
    let size: u64 = std::fs::read_dir(&ixdir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    let (chunks, files, _) = ix.counts().unwrap();
    println!(
        "index size: {:.1} MB for {files} files, {chunks} chunks ({dim} dimensions)",
        size as f64 / 1e6
    );
}
