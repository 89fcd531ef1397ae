//! Times a vault rotation of N secrets (default 1,000) in a temporary store with a host-key
//! sealer. Secrets are stored with `put` (serially), then the vault is locked and unlocked so
//! the keyring and caches are empty and the rotation pays both derivations per secret (old and
//! new key), as a rotation right after `unlock` does.
//!
//! `cargo run --release -p clawfs-vault --example rotate_bench [N]`

use std::time::Instant;

use clawfs_vault::{SealerChoice, SealerKind, Vault, VaultConfig};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().expect("temp dir");
    let v = Vault::open(dir.path(), VaultConfig::default()).expect("open");
    v.init(SealerChoice::Kind(SealerKind::HostKey), None)
        .expect("init");
    let t = Instant::now();
    for i in 0..n {
        v.put(&format!("secret-{i:05}"), format!("value {i}").as_bytes())
            .expect("put");
    }
    println!(
        "put {n} secrets: {:.1}s (serial)",
        t.elapsed().as_secs_f64()
    );
    v.lock().expect("lock");
    let v = Vault::open(dir.path(), VaultConfig::default()).expect("open");
    v.unlock(None).expect("unlock");
    // Calibration on this (shared) machine, same run: one derivation, and the speed-up two
    // threads give right now.
    let k = clawfs_vault::Key256::random();
    let derive = |i: usize| {
        let _ = k.pbkdf2(format!("cal-{i}:v1").as_bytes(), 600_000);
    };
    let t = Instant::now();
    (0..8).for_each(derive);
    let serial = t.elapsed().as_secs_f64() / 8.0;
    let t = Instant::now();
    std::thread::scope(|s| {
        for th in 0..2 {
            s.spawn(move || (0..8).for_each(|i| derive(100 * th + i)));
        }
    });
    let par = t.elapsed().as_secs_f64() / 16.0;
    println!(
        "PBKDF2 600k: {:.0} ms serial; {:.0} ms/key on 2 threads (speed-up {:.2}x)",
        serial * 1000.0,
        par * 1000.0,
        serial / par
    );
    let r = v.rotate(None, &|_| {}).expect("rotate");
    println!(
        "rotated {} secrets in {:.1}s on {} threads ({:.0} ms/secret)",
        r.secrets,
        r.elapsed.as_secs_f64(),
        r.threads,
        r.elapsed.as_secs_f64() * 1000.0 / r.secrets as f64
    );
    let r2 = v.rotate(None, &|_| {}).expect("rotate");
    println!(
        "second rotation (old keys cached in the keyring): {:.1}s",
        r2.elapsed.as_secs_f64()
    );
    for i in (0..n).step_by(97) {
        assert_eq!(
            &v.get(&format!("secret-{i:05}")).expect("get")[..],
            format!("value {i}").as_bytes()
        );
    }
    v.lock().expect("lock");
}
