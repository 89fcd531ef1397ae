//! What an HNSW graph of high-dimension vectors costs to build, by the scalar type the graph
//! stores and by `ef_construction`: the choices behind a migration's time. Builds the graph of
//! N clustered vectors (eight random centres, each vector one centre plus noise: the data of
//! `bench/migrate.sh`) on every core, and reports inserts per second and recall@10 against an
//! exact cosine scan of 100 queries. `bench/hnsw.sh` runs it in release mode.
//!
//!   hnsw_build [N] [DIM] [KINDS] [EF]     (defaults 20000, 1536, f32,bf16,f16 and 200)

use std::time::Instant;

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

/// A small deterministic generator (xorshift64), uniform in [0, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

fn kind(name: &str) -> ScalarKind {
    match name {
        "f32" => ScalarKind::F32,
        "bf16" => ScalarKind::BF16,
        "f16" => ScalarKind::F16,
        "i8" => ScalarKind::I8,
        other => panic!("unknown scalar kind {other:?} (f32, bf16, f16, i8)"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or(default.to_string());
    let n: usize = arg(0, "20000").parse().expect("N");
    let dim: usize = arg(1, "1536").parse().expect("DIM");
    let kinds = arg(2, "f32,bf16,f16");
    let ef: usize = arg(3, "200").parse().expect("EF");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let centres: Vec<Vec<f32>> = (0..8)
        .map(|_| (0..dim).map(|_| rng.next() - 0.5).collect())
        .collect();
    let data: Vec<Vec<f32>> = (0..n)
        .map(|i| {
            centres[i % 8]
                .iter()
                .map(|x| x + (rng.next() - 0.5) * 0.2)
                .collect()
        })
        .collect();
    let queries: Vec<usize> = (0..100).map(|i| (i * 7919) % n).collect();
    let exact: Vec<Vec<u64>> = queries
        .iter()
        .map(|&q| {
            let mut all: Vec<(f32, u64)> = data
                .iter()
                .enumerate()
                .map(|(i, v)| (-cosine(v, &data[q]), i as u64))
                .collect();
            all.select_nth_unstable_by(10, |a, b| a.0.total_cmp(&b.0));
            all[..10].iter().map(|x| x.1).collect()
        })
        .collect();

    println!("{n} vectors of {dim} dimensions, m = 16, ef_construction = {ef}, {threads} threads");
    for name in kinds.split(',') {
        let index = Index::new(&IndexOptions {
            dimensions: dim,
            metric: MetricKind::Cos,
            quantization: kind(name),
            connectivity: 16,
            expansion_add: ef,
            expansion_search: 50,
            multi: false,
        })
        .expect("creating the graph");
        index.reserve(n).expect("reserving");
        let start = Instant::now();
        let per = n.div_ceil(threads);
        std::thread::scope(|s| {
            for (t, part) in data.chunks(per).enumerate() {
                let index = &index;
                s.spawn(move || {
                    for (j, v) in part.iter().enumerate() {
                        index.add((t * per + j) as u64, v).expect("adding");
                    }
                });
            }
        });
        let secs = start.elapsed().as_secs_f64();
        let found: usize = queries
            .iter()
            .zip(&exact)
            .map(|(&q, truth)| {
                let m = index.search(&data[q], 10).expect("searching");
                m.keys.iter().filter(|k| truth.contains(k)).count()
            })
            .sum();
        println!(
            "{name:>5}: {secs:7.2} s, {:6.0} inserts/s, recall@10 {:.3}",
            n as f64 / secs,
            found as f64 / (10 * queries.len()) as f64
        );
    }
}
