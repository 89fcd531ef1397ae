//! Measures what auditing costs (core layer, benchmark): nanoseconds per `AuditLog::record` call
//! from 1 and 8 threads for a burst that fits the queue (the cost a FUSE callback pays), and the
//! writer's sustained throughput (records numbered, hashed, written and synced per second).
//!
//! `cargo run --release -p clawfs-audit --example audit_record_cost [DIR]`

use std::sync::Arc;
use std::time::Instant;

use clawfs_audit::{AuditEvent, AuditLog};

fn main() {
    let tmp = std::env::temp_dir().join(format!("clawfs-audit-bench-{}", std::process::id()));
    let dir = std::env::args()
        .nth(1)
        .map(Into::into)
        .unwrap_or(tmp.clone());
    // Below the default queue capacity (65,536), so no call waits for the writer.
    const N: u64 = 48_000;
    for threads in [1u64, 8] {
        let _ = std::fs::remove_dir_all(&dir);
        let log = Arc::new(AuditLog::open(&dir).expect("open audit log"));
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    for i in 0..N / threads {
                        log.record(
                            AuditEvent::new(
                                "kernel-engine",
                                t as u32,
                                "create",
                                format!("/workspaces/default/f{i}.md"),
                            )
                            .bytes(i),
                        );
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
        let sent = start.elapsed();
        log.flush().expect("flush");
        let total = start.elapsed();
        println!(
            "{threads} thread(s): {:.0} ns per record() call; {N} records written and synced in {:.0} ms ({:.0} records/s)",
            sent.as_nanos() as f64 * threads as f64 / N as f64,
            total.as_secs_f64() * 1e3,
            N as f64 / total.as_secs_f64()
        );
    }
    // Paced like FUSE callbacks: one record every ~20 µs per thread; time only the call.
    for threads in [1u64, 8] {
        let _ = std::fs::remove_dir_all(&dir);
        let log = Arc::new(AuditLog::open(&dir).expect("open audit log"));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut in_call = std::time::Duration::ZERO;
                    for i in 0..10_000u64 {
                        let work = Instant::now();
                        while work.elapsed().as_micros() < 20 {
                            std::hint::spin_loop();
                        }
                        let ev = AuditEvent::new(
                            "kernel-engine",
                            t as u32,
                            "create",
                            "/workspaces/default/f.md",
                        )
                        .bytes(i);
                        let call = Instant::now();
                        log.record(ev);
                        in_call += call.elapsed();
                    }
                    in_call
                })
            })
            .collect();
        let in_call: std::time::Duration =
            handles.into_iter().map(|h| h.join().expect("thread")).sum();
        log.flush().expect("flush");
        println!(
            "{threads} thread(s), paced: {:.0} ns per record() call",
            in_call.as_nanos() as f64 / (threads * 10_000) as f64
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
