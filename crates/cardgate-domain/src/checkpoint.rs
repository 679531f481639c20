//! Checkpoints: a tree size and root hash, signed as a C2SP signed note
//! (c2sp.org/signed-note, body per c2sp.org/tlog-checkpoint) with an Ed25519 key:
//!
//! ```text
//! <origin>
//! <tree size>
//! <base64 root hash>
//!
//! — <key name> <base64(4-byte key ID || 64-byte signature)>
//! ```
//!
//! The key name is the origin; the key ID is `SHA-256(name || 0x0A || 0x01 || public key)[:4]`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

use super::merkle::Hash;
use super::signing::{KeyError, KeyRing, PublicKey};

/// The C2SP signature type byte of Ed25519.
const ED25519_TYPE: u8 = 0x01;

/// What a checkpoint states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub tree_size: u64,
    pub root_hash: Hash,
}

/// Why an origin cannot name a log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a checkpoint origin must be non-empty, without spaces, `+` or control characters")]
pub struct BadOrigin;

/// Checks an origin (it is also the key name, so it obeys the stricter rules of both).
pub fn check_origin(origin: &str) -> Result<(), BadOrigin> {
    let ok = !origin.is_empty()
        && !origin
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '+');
    ok.then_some(()).ok_or(BadOrigin)
}

/// The note's key ID for an Ed25519 key named `name`.
pub fn key_id(name: &str, key: &PublicKey) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0x0A, ED25519_TYPE]);
    h.update(key.raw);
    let digest = h.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

impl Checkpoint {
    /// The note text: what is signed.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.tree_size,
            STANDARD.encode(self.root_hash)
        )
    }

    /// The whole signed note, signed by the ring's current key under the origin's name.
    pub fn sign(&self, ring: &KeyRing) -> Result<String, KeyError> {
        let body = self.body();
        let mut blob = key_id(&self.origin, ring.current()).to_vec();
        blob.extend(ring.sign(body.as_bytes())?);
        Ok(format!(
            "{body}\n\u{2014} {} {}\n",
            self.origin,
            STANDARD.encode(blob)
        ))
    }

    /// Parses a signed note and checks that a signature by one of `keys` (named by the
    /// note's origin) verifies. Signatures by unknown keys are ignored, as the spec says.
    pub fn open(note: &str, keys: &[PublicKey]) -> Result<Self, NoteError> {
        let (body, signatures) = note.rsplit_once("\n\n").ok_or(NoteError::Malformed(
            "no blank line between the text and its signatures",
        ))?;
        let body = format!("{body}\n");
        let checkpoint = Self::parse_body(&body)?;
        let mut verified = false;
        for line in signatures.lines() {
            let rest = line.strip_prefix("\u{2014} ").ok_or(NoteError::Malformed(
                "a signature line must start with `— `",
            ))?;
            let (name, sig) = rest.split_once(' ').ok_or(NoteError::Malformed(
                "a signature line needs a name and a signature",
            ))?;
            let blob = STANDARD
                .decode(sig)
                .map_err(|_| NoteError::Malformed("a signature is not base64"))?;
            if name != checkpoint.origin || blob.len() < 4 {
                continue;
            }
            let (id, signature) = blob.split_at(4);
            for key in keys.iter().filter(|k| key_id(name, k) == id) {
                if !key.verify(body.as_bytes(), signature) {
                    // A known key whose signature fails: the whole note is refused.
                    return Err(NoteError::BadSignature);
                }
                verified = true;
            }
        }
        if verified {
            Ok(checkpoint)
        } else {
            Err(NoteError::NoKnownSignature)
        }
    }

    fn parse_body(body: &str) -> Result<Self, NoteError> {
        let mut lines = body.lines();
        let origin = lines.next().unwrap_or_default().to_string();
        check_origin(&origin).map_err(|_| NoteError::Malformed("the origin line is invalid"))?;
        let tree_size = lines
            .next()
            .and_then(|l| l.parse().ok())
            .ok_or(NoteError::Malformed(
                "the second line must be the tree size",
            ))?;
        let root_hash = lines
            .next()
            .and_then(|l| STANDARD.decode(l).ok())
            .and_then(|r| r.try_into().ok())
            .ok_or(NoteError::Malformed(
                "the third line must be a base64 SHA-256 root hash",
            ))?;
        Ok(Self {
            origin,
            tree_size,
            root_hash,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("malformed note: {0}")]
    Malformed(&'static str),
    #[error("a signature by a known key does not verify")]
    BadSignature,
    #[error("no signature by a known key")]
    NoKnownSignature,
}

#[cfg(test)]
mod tests;
