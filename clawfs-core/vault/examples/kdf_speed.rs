//! Times one 600,000-iteration PBKDF2-HMAC-SHA256 derivation (the cost of a per-secret key).
fn main() {
    let k = clawfs_vault::Key256::random();
    let t = std::time::Instant::now();
    let _ = k.pbkdf2(b"name:v1", clawfs_vault::crypto::KDF_ITERATIONS);
    println!("PBKDF2-HMAC-SHA256 600k: {:?}", t.elapsed());
}
