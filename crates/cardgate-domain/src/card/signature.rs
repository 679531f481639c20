//! Agent card signatures: detached JWS (RFC 7515) over the canonical payload (A2A §8.4).
//!
//! Pure: reading the `signatures` entries, checking their protected headers, selecting keys
//! by `kid` from a key set the caller supplies, verifying with josekit, and summing up the
//! outcomes into one verdict. Fetching a `jku` key set is the discovery service's job; this
//! module only decides whether a `jku` may be fetched at all.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use josekit::jwk::Jwk;
use josekit::jws::{self, JwsVerifier};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use super::same_origin;

/// Algorithms a card signature may use. `none` and the HMAC family are never acceptable: a
/// public card cannot be signed with a shared secret anyone verifying it would need.
pub const ALLOWED_ALGORITHMS: [&str; 5] = ["ES256", "ES384", "EdDSA", "RS256", "PS256"];

/// One entry of the card's `signatures` array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureEntry {
    pub index: usize,
    pub protected_b64: String,
    pub signature_b64: String,
    /// The decoded protected header, or why it is unacceptable.
    pub header: Result<ProtectedHeader, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedHeader {
    pub alg: String,
    pub kid: String,
    pub jku: Option<String>,
    pub typ: Option<String>,
}

/// Where the verifying key came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum KeySource {
    /// The operator's `trusted_keys` for this callee.
    Pinned,
    /// Fetched from the protected header's `jku`, on the card's origin.
    Jku { url: String },
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Pinned => f.write_str("pinned trusted_keys"),
            KeySource::Jku { url } => write!(f, "jku {url}"),
        }
    }
}

/// Public keys to verify with, and where they came from.
#[derive(Debug, Clone)]
pub struct KeySet {
    pub source: KeySource,
    pub keys: Vec<Jwk>,
}

/// The verdict recorded with every snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum SignatureVerdict {
    Verified {
        index: usize,
        kid: String,
        alg: String,
        key_source: KeySource,
    },
    Unsigned,
    Invalid {
        reason: String,
    },
    KeyUnavailable {
        reason: String,
    },
    /// The card could not be parsed, so no signature was checked.
    NotChecked {
        reason: String,
    },
}

impl SignatureVerdict {
    pub fn status(&self) -> &'static str {
        match self {
            Self::Verified { .. } => "verified",
            Self::Unsigned => "unsigned",
            Self::Invalid { .. } => "invalid",
            Self::KeyUnavailable { .. } => "key-unavailable",
            Self::NotChecked { .. } => "not-checked",
        }
    }
}

/// How checking one signature ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryOutcome {
    Verified {
        kid: String,
        alg: String,
        source: KeySource,
    },
    /// The signature or its header is wrong: never acceptable.
    Invalid(String),
    /// No key to check it with.
    KeyUnavailable(String),
}

/// Reads `signatures`. `Ok(empty)` means the card is unsigned.
pub fn read_signatures(card: &Value) -> Result<Vec<SignatureEntry>, String> {
    let Some(list) = card.get("signatures").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list.as_array().ok_or("signatures is not an array")?;
    list.iter()
        .enumerate()
        .map(|(index, item)| {
            let field = |name: &str| {
                item.get(name)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| format!("signatures[{index}].{name} is missing or not a string"))
            };
            let protected_b64 = field("protected")?;
            let signature_b64 = field("signature")?;
            let header = decode_header(&protected_b64);
            Ok(SignatureEntry {
                index,
                protected_b64,
                signature_b64,
                header,
            })
        })
        .collect()
}

fn decode_header(protected_b64: &str) -> Result<ProtectedHeader, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(protected_b64.trim_end_matches('='))
        .map_err(|_| "the protected header is not base64url".to_string())?;
    let header: Value = serde_json::from_slice(&bytes)
        .map_err(|_| "the protected header is not JSON".to_string())?;
    let text = |name: &str| header.get(name).and_then(Value::as_str).map(str::to_string);
    let alg = text("alg").ok_or("the protected header has no `alg`")?;
    if !ALLOWED_ALGORITHMS.contains(&alg.as_str()) {
        return Err(format!(
            "algorithm `{alg}` is not accepted (allowed: {})",
            ALLOWED_ALGORITHMS.join(", ")
        ));
    }
    let kid = text("kid").ok_or("the protected header has no `kid`")?;
    if header.get("crit").is_some() {
        return Err("the protected header has `crit` extensions, which are not supported".into());
    }
    Ok(ProtectedHeader {
        alg,
        kid,
        jku: text("jku"),
        typ: text("typ"),
    })
}

/// Whether a `jku` may be fetched: https (or plain http to a network the operator allowed),
/// and on the card's own origin, so the card's host vouches for its keys.
pub fn jku_allowed(
    jku: &str,
    card_url: &Url,
    http_allowed: impl Fn(&Url) -> bool,
) -> Result<Url, String> {
    let url = Url::parse(jku).map_err(|_| format!("jku `{jku}` is not a URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if http_allowed(&url) => {}
        "http" => return Err(format!("jku {jku} is not https")),
        other => return Err(format!("jku {jku} uses `{other}`, not https")),
    }
    if !same_origin(card_url, url.as_str()) {
        return Err(format!(
            "jku {jku} is not on the card's origin {}; keys are only fetched from the card's own host",
            super::origin_text(card_url)
        ));
    }
    Ok(url)
}

/// Parses a JWKS (`{"keys":[…]}`) of public signing keys.
pub fn parse_jwks(value: &Value) -> Result<Vec<Jwk>, String> {
    let keys = value
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("a JWKS must be an object with a `keys` array")?;
    keys.iter()
        .enumerate()
        .map(|(i, key)| {
            let map = key
                .as_object()
                .ok_or_else(|| format!("keys[{i}] is not an object"))?;
            if map.get("kty").and_then(Value::as_str) == Some("oct") {
                return Err(format!(
                    "keys[{i}] is a symmetric (oct) key; only public keys verify cards"
                ));
            }
            if ["d", "p", "q", "dp", "dq", "qi", "k"]
                .iter()
                .any(|p| map.contains_key(*p))
            {
                return Err(format!(
                    "keys[{i}] contains private key material; give public keys only"
                ));
            }
            if map.get("kid").and_then(Value::as_str).is_none() {
                return Err(format!("keys[{i}] has no `kid`"));
            }
            // josekit decodes key parameters only when it verifies; a malformed one is caught
            // here, when the key is pinned, rather than at the next refresh.
            for param in ["x", "y", "n", "e"] {
                if let Some(v) = map.get(param) {
                    let decoded = v.as_str().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
                    if decoded.is_none_or(|bytes| bytes.is_empty()) {
                        return Err(format!(
                            "keys[{i}].{param} is not unpadded base64url of at least one byte"
                        ));
                    }
                }
            }
            Jwk::from_map(map.clone()).map_err(|e| format!("keys[{i}] is not a valid JWK: {e}"))
        })
        .collect()
}

/// Verifies one signature over `payload` with the keys in `keys` whose `kid` matches.
pub fn verify_entry(entry: &SignatureEntry, payload: &[u8], keys: &KeySet) -> EntryOutcome {
    let header = match &entry.header {
        Ok(h) => h,
        Err(reason) => {
            return EntryOutcome::Invalid(format!("signature {}: {reason}", entry.index));
        }
    };
    let candidates: Vec<&Jwk> = keys
        .keys
        .iter()
        .filter(|k| k.key_id() == Some(header.kid.as_str()))
        .collect();
    if candidates.is_empty() {
        return EntryOutcome::KeyUnavailable(format!(
            "signature {}: no key with kid `{}` in {}",
            entry.index, header.kid, keys.source
        ));
    }
    let Ok(signature) = URL_SAFE_NO_PAD.decode(&entry.signature_b64) else {
        return EntryOutcome::Invalid(format!(
            "signature {}: the signature is not base64url",
            entry.index
        ));
    };
    let mut message = Vec::with_capacity(entry.protected_b64.len() + 1 + payload.len() * 4 / 3 + 4);
    message.extend_from_slice(entry.protected_b64.as_bytes());
    message.push(b'.');
    message.extend_from_slice(URL_SAFE_NO_PAD.encode(payload).as_bytes());

    let mut failures = Vec::new();
    for key in candidates {
        if let Some(key_alg) = key.algorithm().filter(|a| *a != header.alg) {
            failures.push(format!(
                "key `{}` is for {key_alg}, not {}",
                header.kid, header.alg
            ));
            continue;
        }
        if key.key_use().is_some_and(|u| u != "sig") {
            failures.push(format!("key `{}` is not a signing key", header.kid));
            continue;
        }
        match verifier(&header.alg, key).and_then(|v| v.verify(&message, &signature)) {
            Ok(()) => {
                return EntryOutcome::Verified {
                    kid: header.kid.clone(),
                    alg: header.alg.clone(),
                    source: keys.source.clone(),
                };
            }
            Err(e) => failures.push(format!("{e}")),
        }
    }
    EntryOutcome::Invalid(format!(
        "signature {} (kid `{}`, {}) does not verify: {}",
        entry.index,
        header.kid,
        header.alg,
        failures.join("; ")
    ))
}

/// Signs `card` with a private `key` and appends the signature, as an agent (or a test) would.
/// The registry never signs; the fake agent and the tests do.
pub fn sign_card(
    card: &Value,
    key: &Jwk,
    alg: &str,
    kid: &str,
    jku: Option<&str>,
) -> Result<Value, String> {
    let mut header = serde_json::json!({ "alg": alg, "kid": kid, "typ": "JOSE" });
    if let Some(jku) = jku {
        header["jku"] = Value::String(jku.to_string());
    }
    let protected_b64 = URL_SAFE_NO_PAD.encode(header.to_string());
    let payload = super::canonical::canonicalize_card(card)
        .map_err(|e| e.to_string())?
        .payload;
    let message = format!("{protected_b64}.{}", URL_SAFE_NO_PAD.encode(&payload));
    let signer: Box<dyn jws::JwsSigner> = match alg {
        "ES256" => Box::new(jws::ES256.signer_from_jwk(key).map_err(|e| e.to_string())?),
        "ES384" => Box::new(jws::ES384.signer_from_jwk(key).map_err(|e| e.to_string())?),
        "EdDSA" => Box::new(jws::EdDSA.signer_from_jwk(key).map_err(|e| e.to_string())?),
        "RS256" => Box::new(jws::RS256.signer_from_jwk(key).map_err(|e| e.to_string())?),
        "PS256" => Box::new(jws::PS256.signer_from_jwk(key).map_err(|e| e.to_string())?),
        "HS256" => Box::new(jws::HS256.signer_from_jwk(key).map_err(|e| e.to_string())?),
        other => return Err(format!("cannot sign with {other}")),
    };
    let signature = signer.sign(message.as_bytes()).map_err(|e| e.to_string())?;
    let mut signed = card.clone();
    let entry = serde_json::json!({ "protected": protected_b64, "signature": URL_SAFE_NO_PAD.encode(signature) });
    match signed.get_mut("signatures").and_then(Value::as_array_mut) {
        Some(list) => list.push(entry),
        None => signed["signatures"] = Value::Array(vec![entry]),
    }
    Ok(signed)
}

fn verifier(alg: &str, key: &Jwk) -> Result<Box<dyn JwsVerifier>, josekit::JoseError> {
    Ok(match alg {
        "ES256" => Box::new(jws::ES256.verifier_from_jwk(key)?),
        "ES384" => Box::new(jws::ES384.verifier_from_jwk(key)?),
        "EdDSA" => Box::new(jws::EdDSA.verifier_from_jwk(key)?),
        "RS256" => Box::new(jws::RS256.verifier_from_jwk(key)?),
        "PS256" => Box::new(jws::PS256.verifier_from_jwk(key)?),
        other => {
            return Err(josekit::JoseError::UnsupportedSignatureAlgorithm(
                anyhow::anyhow!("algorithm {other} is not accepted"),
            ));
        }
    })
}

/// One verdict from every signature's outcome: the first verified signature wins (as in the
/// SDKs); otherwise a wrong signature makes the card invalid; otherwise no key was available.
pub fn verdict(outcomes: Vec<(usize, EntryOutcome)>) -> SignatureVerdict {
    if outcomes.is_empty() {
        return SignatureVerdict::Unsigned;
    }
    let mut invalid = Vec::new();
    let mut unavailable = Vec::new();
    for (index, outcome) in outcomes {
        match outcome {
            EntryOutcome::Verified { kid, alg, source } => {
                return SignatureVerdict::Verified {
                    index,
                    kid,
                    alg,
                    key_source: source,
                };
            }
            EntryOutcome::Invalid(reason) => invalid.push(reason),
            EntryOutcome::KeyUnavailable(reason) => unavailable.push(reason),
        }
    }
    if invalid.is_empty() {
        SignatureVerdict::KeyUnavailable {
            reason: unavailable.join("; "),
        }
    } else {
        SignatureVerdict::Invalid {
            reason: invalid.join("; "),
        }
    }
}

#[cfg(test)]
mod tests;
