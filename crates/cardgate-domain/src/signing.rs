//! The registry's own Ed25519 keys: the one that signs checkpoints and receipts now, and the
//! retired ones whose public halves stay published so that what they signed still verifies.
//!
//! A key ring is PEM text: the current key first, as a `PRIVATE KEY` (PKCS#8) block, then
//! any retired keys, as `PUBLIC KEY` (SPKI) blocks. Every key is named by its RFC 7638 JWK
//! thumbprint (`kid`).

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use josekit::jwk::alg::ed::EdCurve;
use josekit::jwk::{Jwk, KeyPair};
use josekit::jws::{EdDSA, JwsHeader, JwsSigner, JwsVerifier};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The DER prefix of an Ed25519 SPKI public key; the raw 32-byte key follows it.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the key file holds no private key (a `PRIVATE KEY` PEM block must come first)")]
    NoPrivateKey,
    #[error("the key file's PEM is malformed: {0}")]
    Pem(String),
    #[error("not an Ed25519 key: {0}")]
    NotEd25519(String),
    #[error("signing failed: {0}")]
    Sign(String),
}

/// A public key as published: 32 raw bytes and the `kid` derived from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub raw: [u8; 32],
    pub kid: String,
}

impl PublicKey {
    pub fn from_raw(raw: [u8; 32]) -> Self {
        Self {
            kid: thumbprint(&raw),
            raw,
        }
    }

    /// The key as a JWK with `kid`, `alg` and `use`.
    pub fn jwk(&self) -> JwkView {
        JwkView {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x: URL_SAFE_NO_PAD.encode(self.raw),
            kid: self.kid.clone(),
            alg: "EdDSA".into(),
            use_: "sig".into(),
        }
    }

    fn pem(&self) -> String {
        let mut der = ED25519_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.raw);
        pem_block("PUBLIC KEY", &der)
    }

    /// Checks an Ed25519 signature by this key.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let jwk = self.jwk();
        let Ok(jwk) = Jwk::from_bytes(serde_json::to_vec(&jwk).unwrap_or_default()) else {
            return false;
        };
        EdDSA
            .verifier_from_jwk(&jwk)
            .is_ok_and(|v| v.verify(message, signature).is_ok())
    }
}

/// A published Ed25519 JWK.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwkView {
    /// `OKP`.
    pub kty: String,
    /// `Ed25519`.
    pub crv: String,
    /// The public key, base64url.
    pub x: String,
    /// The RFC 7638 thumbprint of the key.
    pub kid: String,
    /// `EdDSA`.
    pub alg: String,
    /// `sig`.
    #[serde(rename = "use")]
    pub use_: String,
}

impl JwkView {
    /// The raw key, if this is an Ed25519 JWK whose `kid` is its thumbprint.
    pub fn public_key(&self) -> Result<PublicKey, KeyError> {
        if self.kty != "OKP" || self.crv != "Ed25519" {
            return Err(KeyError::NotEd25519(format!("{}/{}", self.kty, self.crv)));
        }
        let raw: [u8; 32] = URL_SAFE_NO_PAD
            .decode(&self.x)
            .ok()
            .and_then(|x| x.try_into().ok())
            .ok_or_else(|| KeyError::NotEd25519("x is not 32 bytes of base64url".into()))?;
        Ok(PublicKey::from_raw(raw))
    }
}

/// The RFC 7638 thumbprint of an Ed25519 key: base64url(SHA-256 of its canonical JWK).
fn thumbprint(raw: &[u8; 32]) -> String {
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(raw)
    );
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

fn pem_block(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Splits PEM text into (label, DER) blocks.
fn pem_blocks(text: &str) -> Result<Vec<(String, Vec<u8>)>, KeyError> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    while let Some(line) = lines.next() {
        let label = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
            .ok_or_else(|| KeyError::Pem(format!("expected a BEGIN line, found `{line}`")))?;
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        loop {
            match lines.next() {
                Some(l) if l == end => break,
                Some(l) => body.push_str(l),
                None => return Err(KeyError::Pem(format!("`{label}` block is not closed"))),
            }
        }
        let der = STANDARD
            .decode(body)
            .map_err(|e| KeyError::Pem(format!("`{label}` block: {e}")))?;
        blocks.push((label.to_string(), der));
    }
    Ok(blocks)
}

/// The signing key and every retired public key.
#[derive(Clone)]
pub struct KeyRing {
    private_der: Vec<u8>,
    signer: josekit::jws::alg::eddsa::EddsaJwsSigner,
    current: PublicKey,
    retired: Vec<PublicKey>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("current", &self.current.kid)
            .field("retired", &self.retired.len())
            .finish_non_exhaustive()
    }
}

impl KeyRing {
    /// A ring of one freshly generated key.
    pub fn generate() -> Result<Self, KeyError> {
        let pair = EdDSA
            .generate_key_pair(EdCurve::Ed25519)
            .map_err(|e| KeyError::Sign(e.to_string()))?;
        Self::from_private_der(pair.to_der_private_key(), Vec::new())
    }

    fn from_private_der(private_der: Vec<u8>, retired: Vec<PublicKey>) -> Result<Self, KeyError> {
        let pair = EdDSA
            .key_pair_from_der(&private_der)
            .map_err(|e| KeyError::NotEd25519(e.to_string()))?;
        let current = spki_key(&pair.to_der_public_key())?;
        let mut signer = EdDSA
            .signer_from_der(&private_der)
            .map_err(|e| KeyError::NotEd25519(e.to_string()))?;
        signer.set_key_id(current.kid.clone());
        Ok(Self {
            private_der,
            signer,
            current,
            retired,
        })
    }

    /// Parses a key file's PEM text.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let mut blocks = pem_blocks(text)?.into_iter();
        let (label, private_der) = blocks.next().ok_or(KeyError::NoPrivateKey)?;
        if label != "PRIVATE KEY" {
            return Err(KeyError::NoPrivateKey);
        }
        let retired = blocks
            .map(|(label, der)| match label.as_str() {
                "PUBLIC KEY" => spki_key(&der),
                other => Err(KeyError::Pem(format!(
                    "only the first block may be private; found `{other}` after it"
                ))),
            })
            .collect::<Result<_, _>>()?;
        Self::from_private_der(private_der, retired)
    }

    /// The ring as key file text.
    pub fn to_pem(&self) -> String {
        let mut text = pem_block("PRIVATE KEY", &self.private_der);
        for key in &self.retired {
            text.push_str(&key.pem());
        }
        text
    }

    /// A new current key; the old one joins the retired keys (its public half only).
    pub fn rotate(&self) -> Result<Self, KeyError> {
        let fresh = Self::generate()?;
        let mut retired = vec![self.current.clone()];
        retired.extend(self.retired.iter().cloned());
        Self::from_private_der(fresh.private_der, retired)
    }

    pub fn current(&self) -> &PublicKey {
        &self.current
    }

    /// Every key a signature by this registry may carry: current first.
    pub fn public_keys(&self) -> impl Iterator<Item = &PublicKey> {
        std::iter::once(&self.current).chain(&self.retired)
    }

    /// A raw Ed25519 signature by the current key.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        self.signer
            .sign(message)
            .map_err(|e| KeyError::Sign(e.to_string()))
    }

    /// A compact JWS (EdDSA, `kid` of the current key) over `payload`.
    pub fn sign_jws(&self, typ: &str, payload: &[u8]) -> Result<String, KeyError> {
        let mut header = JwsHeader::new();
        header.set_token_type(typ);
        header.set_key_id(self.current.kid.clone());
        josekit::jws::serialize_compact(payload, &header, &self.signer)
            .map_err(|e| KeyError::Sign(e.to_string()))
    }
}

fn spki_key(der: &[u8]) -> Result<PublicKey, KeyError> {
    der.strip_prefix(&ED25519_SPKI_PREFIX[..])
        .and_then(|raw| <[u8; 32]>::try_from(raw).ok())
        .map(PublicKey::from_raw)
        .ok_or_else(|| KeyError::NotEd25519("the public key is not an Ed25519 SPKI".into()))
}

/// A JWK Set as served at `/.well-known/jwks.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwks {
    pub keys: Vec<JwkView>,
}

impl Jwks {
    pub fn of(ring: &KeyRing) -> Self {
        Self {
            keys: ring.public_keys().map(PublicKey::jwk).collect(),
        }
    }

    /// The key named `kid`, checked to be Ed25519 and named by its thumbprint.
    pub fn key(&self, kid: &str) -> Result<Option<PublicKey>, KeyError> {
        self.keys
            .iter()
            .filter(|k| k.kid == kid)
            .map(JwkView::public_key)
            .find(|k| k.as_ref().map_or(true, |k| k.kid == kid))
            .transpose()
    }
}

/// Verifies a compact JWS signed with EdDSA by a key in `jwks`; returns its header `typ` and
/// payload.
pub fn verify_jws(jws: &str, jwks: &Jwks) -> Result<(Option<String>, Vec<u8>), String> {
    let header = jws
        .split('.')
        .next()
        .and_then(|h| URL_SAFE_NO_PAD.decode(h).ok())
        .and_then(|h| serde_json::from_slice::<serde_json::Value>(&h).ok())
        .ok_or("not a compact JWS")?;
    if header["alg"] != "EdDSA" {
        return Err(format!("alg must be EdDSA, not {}", header["alg"]));
    }
    let kid = header["kid"].as_str().ok_or("the JWS names no kid")?;
    let key = jwks
        .key(kid)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no key {kid} in the key set"))?;
    let jwk = Jwk::from_bytes(serde_json::to_vec(&key.jwk()).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let verifier = EdDSA.verifier_from_jwk(&jwk).map_err(|e| e.to_string())?;
    let (payload, header) = josekit::jws::deserialize_compact(jws, &verifier)
        .map_err(|e| format!("the signature does not verify: {e}"))?;
    Ok((header.token_type().map(str::to_string), payload))
}

#[cfg(test)]
mod tests;
