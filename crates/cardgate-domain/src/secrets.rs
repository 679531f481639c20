//! Secrets at rest: an AES-256-GCM key ring that seals what must be stored but never shown
//! (the credentials cardgate presents to callees).
//!
//! The ring is text, one key per line, the current key first: `<kid> <base64 of 32 bytes>`.
//! A sealed value is `v1.<kid>.<base64url(nonce ‖ ciphertext ‖ tag)>`: the `kid` says which
//! key opens it, so a ring holding the old key beside the new one opens both while a rotation
//! re-seals. Every value is sealed with associated data naming where it belongs, so a sealed
//! value copied to another row does not open there.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::TryRngCore;
use sha2::{Digest, Sha256};

const VERSION: &str = "v1";
const KEY_LEN: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the secrets key file is malformed: {0}")]
    Malformed(String),
    #[error("the secrets key file holds no key")]
    Empty,
    #[error("sealed with key {0}, which the secrets key file does not hold")]
    UnknownKey(String),
    #[error("a sealed secret is malformed")]
    BadSealed,
    #[error("a sealed secret does not open: wrong key, or it was altered or moved")]
    Unopenable,
    #[error("the system random source failed")]
    Random,
}

struct Key {
    kid: String,
    raw: [u8; KEY_LEN],
}

/// The keys, current first. Deliberately not `Debug`.
pub struct SecretsRing {
    keys: Vec<Key>,
}

impl Key {
    fn new(raw: [u8; KEY_LEN]) -> Self {
        // A key's name: 8 bytes of its hash, enough to tell a ring's keys apart.
        let kid = hex::encode(&Sha256::digest(raw)[..8]);
        Self { kid, raw }
    }

    fn aead(&self) -> LessSafeKey {
        // 32 bytes always make an AES-256 key.
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &self.raw).expect("a 32-byte AES-256 key"))
    }
}

impl SecretsRing {
    /// A ring of one fresh key.
    pub fn generate() -> Result<Self, SealError> {
        Ok(Self {
            keys: vec![fresh_key()?],
        })
    }

    pub fn from_text(text: &str) -> Result<Self, SealError> {
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (kid, encoded) = line.split_once(' ').ok_or_else(|| {
                SealError::Malformed(format!("line {} is not `<kid> <key>`", n + 1))
            })?;
            let raw: [u8; KEY_LEN] = STANDARD
                .decode(encoded.trim())
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| {
                    SealError::Malformed(format!("line {} is not a 32-byte base64 key", n + 1))
                })?;
            let key = Key::new(raw);
            if key.kid != kid {
                return Err(SealError::Malformed(format!(
                    "line {}: the key's name does not match the key",
                    n + 1
                )));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(SealError::Empty);
        }
        Ok(Self { keys })
    }

    pub fn to_text(&self) -> String {
        let mut out = String::from(
            "# cardgate secrets key ring: the current key first. Keep this file secret (0600);\n\
             # every replica reads the same file. `cardgate secrets-key rotate` replaces it.\n",
        );
        for key in &self.keys {
            out.push_str(&format!("{} {}\n", key.kid, STANDARD.encode(key.raw)));
        }
        out
    }

    /// A fresh current key, the present ones kept to open what they sealed.
    pub fn rotated(&self) -> Result<Self, SealError> {
        let mut keys = vec![fresh_key()?];
        keys.extend(self.keys.iter().map(|k| Key::new(k.raw)));
        Ok(Self { keys })
    }

    /// The current key alone (once everything is sealed with it).
    pub fn current_only(&self) -> Self {
        Self {
            keys: vec![Key::new(self.keys[0].raw)],
        }
    }

    pub fn current_kid(&self) -> &str {
        &self.keys[0].kid
    }

    #[cfg(test)]
    fn kids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.kid.as_str()).collect()
    }

    /// Seals `plaintext` with the current key, bound to `context`.
    pub fn seal(&self, plaintext: &[u8], context: &[u8]) -> Result<String, SealError> {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        os_random(&mut nonce)?;
        let mut buffer = plaintext.to_vec();
        key.aead()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context),
                &mut buffer,
            )
            .map_err(|_| SealError::Unopenable)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buffer);
        Ok(format!(
            "{VERSION}.{}.{}",
            key.kid,
            URL_SAFE_NO_PAD.encode(out)
        ))
    }

    /// The key id a sealed value names, if it is well formed.
    #[cfg(test)]
    fn kid_of(sealed: &str) -> Option<&str> {
        let mut parts = sealed.splitn(3, '.');
        (parts.next()? == VERSION).then_some(())?;
        parts.next()
    }

    /// Opens a value sealed by any key of the ring, for the same `context`.
    pub fn open(&self, sealed: &str, context: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut parts = sealed.splitn(3, '.');
        let (Some(VERSION), Some(kid), Some(body)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SealError::BadSealed);
        };
        let key = self
            .keys
            .iter()
            .find(|k| k.kid == kid)
            .ok_or_else(|| SealError::UnknownKey(kid.to_string()))?;
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| SealError::BadSealed)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::BadSealed);
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| SealError::BadSealed)?;
        let mut buffer = ciphertext.to_vec();
        let plain = key
            .aead()
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context),
                &mut buffer,
            )
            .map_err(|_| SealError::Unopenable)?;
        Ok(plain.to_vec())
    }
}

fn fresh_key() -> Result<Key, SealError> {
    let mut raw = [0u8; KEY_LEN];
    os_random(&mut raw)?;
    Ok(Key::new(raw))
}

/// Fills `buf` from the operating system's CSPRNG (`getrandom`). Not AWS-LC's generator: its
/// first use seeds itself from CPU jitter, which took 33 ms of a first start (BENCHMARKS.md,
/// "Footprint"), for bytes the kernel gives at once.
fn os_random(buf: &mut [u8]) -> Result<(), SealError> {
    rand::rngs::OsRng
        .try_fill_bytes(buf)
        .map_err(|_| SealError::Random)
}

#[cfg(test)]
mod tests;
