//! The vault's cryptographic primitives: random keys, key fingerprints, PBKDF2 derivation and
//! AES-256-GCM with a detached tag. Key material lives in [`Zeroizing`] buffers.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// PBKDF2-HMAC-SHA256 iterations for per-secret keys and passphrase KEKs (P1.4 §3.1).
pub const KDF_ITERATIONS: u32 = 600_000;
/// The `algorithm` of every secret file.
pub const ALGORITHM: &str = "AES-256-GCM";
/// The `kdf.algorithm` of every secret file.
pub const KDF_ALGORITHM: &str = "PBKDF2-HMAC-SHA256";

/// A 256-bit key (master key, KEK or derived per-secret key), wiped on drop.
#[derive(Clone)]
pub struct Key256(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for Key256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key256(..)")
    }
}

impl Key256 {
    /// 32 bytes from the operating system's CSPRNG.
    pub fn random() -> Key256 {
        let mut k = Zeroizing::new([0u8; 32]);
        fill_random(&mut k[..]);
        Key256(k)
    }

    /// A key from exactly 32 bytes; `None` for any other length.
    pub fn from_slice(bytes: &[u8]) -> Option<Key256> {
        let arr: [u8; 32] = bytes.try_into().ok()?;
        Some(Key256(Zeroizing::new(arr)))
    }

    /// The raw key bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A public identifier of this key: the first 16 bytes of SHA-256 over a domain label and
    /// the key, as 32 hex digits. Reveals nothing usable about a 256-bit random key.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"clawfs-vault-key-id\0");
        h.update(self.0.as_slice());
        hex::encode(&h.finalize()[..16])
    }

    /// PBKDF2-HMAC-SHA256 of this key (as the password) with `salt`.
    pub fn pbkdf2(&self, salt: &[u8], iterations: u32) -> Key256 {
        pbkdf2_key(self.0.as_slice(), salt, iterations)
    }

    /// HMAC-SHA256 of `data` under this key.
    pub fn hmac(&self, data: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.0.as_slice())
            .expect("HMAC takes any key length");
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// A sub-key for a purpose (HMAC-SHA256(key, label)); cheap, for keys that need no stretching.
    pub fn subkey(&self, label: &str) -> Key256 {
        Key256(Zeroizing::new(self.hmac(label.as_bytes())))
    }
}

/// PBKDF2-HMAC-SHA256 of an arbitrary password.
///
/// The standard count (600,000, `Params::RECOMMENDED`) goes through the non-generic
/// `pbkdf2_hmac_with_params`, so the hot loop is compiled inside the `pbkdf2` crate with its own
/// opt-level (`[profile.dev.package.pbkdf2]`): the generic `pbkdf2_hmac::<Sha256>` would be
/// instantiated in this crate, unoptimised in debug builds, and take ~4 s instead of ~0.1 s.
pub fn pbkdf2_key(password: &[u8], salt: &[u8], iterations: u32) -> Key256 {
    let mut k = Zeroizing::new([0u8; 32]);
    if iterations == pbkdf2::Params::RECOMMENDED.rounds() {
        pbkdf2::pbkdf2_hmac_with_params(
            password,
            salt,
            pbkdf2::Algorithm::Pbkdf2Sha256,
            pbkdf2::Params::RECOMMENDED,
            &mut k[..],
        );
    } else {
        pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut k[..]);
    }
    Key256(k)
}

/// Fills `buf` from the OS CSPRNG. Failure of getrandom(2) leaves no safe way to go on.
pub fn fill_random(buf: &mut [u8]) {
    getrandom::fill(buf).expect("getrandom(2) failed: no randomness for vault keys");
}

/// `n` random bytes.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    fill_random(&mut b);
    b
}

/// A sealed message: 12-byte nonce, ciphertext of the same length as the plaintext, 16-byte tag.
pub struct Sealed {
    /// The GCM nonce.
    pub nonce: [u8; 12],
    /// The ciphertext without the tag.
    pub ciphertext: Vec<u8>,
    /// The GCM authentication tag.
    pub tag: [u8; 16],
}

/// AES-256-GCM encryption under `key` with a fresh random nonce, binding `aad`.
pub fn encrypt(key: &Key256, aad: &[u8], plaintext: &[u8]) -> Sealed {
    let cipher = Aes256Gcm::new_from_slice(key.bytes()).expect("32-byte key");
    let nonce: [u8; 12] = random_bytes();
    let mut buf = plaintext.to_vec();
    let tag = cipher
        .encrypt_inout_detached(&Nonce::from(nonce), aad, buf.as_mut_slice().into())
        .expect("plaintext within AES-GCM limits");
    Sealed {
        nonce,
        ciphertext: buf,
        tag: tag.into(),
    }
}

/// AES-256-GCM decryption; `None` when the tag does not verify (wrong key, changed ciphertext,
/// nonce, tag or associated data).
pub fn decrypt(
    key: &Key256,
    aad: &[u8],
    nonce: &[u8; 12],
    ciphertext: &[u8],
    tag: &[u8; 16],
) -> Option<Zeroizing<Vec<u8>>> {
    let cipher = Aes256Gcm::new_from_slice(key.bytes()).expect("32-byte key");
    let mut buf = Zeroizing::new(ciphertext.to_vec());
    cipher
        .decrypt_inout_detached(
            &Nonce::from(*nonce),
            aad,
            buf.as_mut_slice().into(),
            &Tag::from(*tag),
        )
        .ok()?;
    Some(buf)
}

/// Constant-time equality of two byte strings.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Base64 (standard alphabet, padded), the encoding of every binary field in vault files.
pub mod b64 {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;

    /// Encodes.
    pub fn enc(bytes: &[u8]) -> String {
        STANDARD.encode(bytes)
    }

    /// Decodes; `None` on bad input.
    pub fn dec(s: &str) -> Option<Vec<u8>> {
        STANDARD.decode(s).ok()
    }

    /// Decodes exactly `N` bytes.
    pub fn dec_n<const N: usize>(s: &str) -> Option<[u8; N]> {
        dec(s)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcm_round_trip_and_aad_binding() {
        let k = Key256::random();
        let s = encrypt(&k, b"aad", b"hello");
        assert_eq!(s.ciphertext.len(), 5);
        let p = decrypt(&k, b"aad", &s.nonce, &s.ciphertext, &s.tag).unwrap();
        assert_eq!(&p[..], b"hello");
        assert!(decrypt(&k, b"aae", &s.nonce, &s.ciphertext, &s.tag).is_none());
        let mut t = s.tag;
        t[0] ^= 1;
        assert!(decrypt(&k, b"aad", &s.nonce, &s.ciphertext, &t).is_none());
        assert!(decrypt(&Key256::random(), b"aad", &s.nonce, &s.ciphertext, &s.tag).is_none());
    }

    #[test]
    fn pbkdf2_matches_known_vector() {
        // PBKDF2-HMAC-SHA256("password", "salt", 4096, 32).
        let k = pbkdf2_key(b"password", b"salt", 4096);
        assert_eq!(
            hex::encode(k.bytes()),
            "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a"
        );
    }

    #[test]
    fn fast_path_matches_generic() {
        let mut want = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(b"pw", b"s:v1", KDF_ITERATIONS, &mut want);
        assert_eq!(pbkdf2_key(b"pw", b"s:v1", KDF_ITERATIONS).bytes(), &want);
    }

    #[test]
    fn fingerprints_differ_and_are_stable() {
        let a = Key256::random();
        let b = Key256::from_slice(a.bytes()).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint().len(), 32);
        assert_ne!(a.fingerprint(), Key256::random().fingerprint());
    }
}
