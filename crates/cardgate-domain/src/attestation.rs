//! Verdicts that travel: an in-toto Statement v1 about a subject's trust verdict, in a DSSE
//! envelope signed with the registry's Ed25519 key (the key set at `/.well-known/jwks.json`;
//! DSSE `keyid` is the key's `kid`). Anyone can check one offline with any DSSE and in-toto
//! implementation: nothing here is cardgate's own format but the predicate, whose schema is
//! `docs/attestation/trust-verdict-v1.schema.json`.
//!
//! Pure: the service gathers the facts and the key ring signs.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ids::CalleeId;
use super::merkle::Hash;
use super::receipt::ReceiptCheckpoint;
use super::signing::{Jwks, KeyError, KeyRing};
use super::time::Timestamp;
use super::version::ProtocolVersion;

/// The DSSE payload type of an in-toto Statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The predicate: a cardgate trust verdict about one (callee, protocol version).
pub const PREDICATE_TYPE: &str = "https://cardgate.dev/attestation/trust-verdict/v1";

/// An attestation kept for a promotion or demotion.
#[derive(Debug, Clone, PartialEq)]
pub struct AttestationRecord {
    pub id: uuid::Uuid,
    pub callee_id: CalleeId,
    pub protocol_version: ProtocolVersion,
    /// The promotion or demotion attested.
    pub seq: i64,
    pub kind: String,
    pub envelope: Envelope,
    pub created_at: Timestamp,
}

/// An in-toto Statement v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub type_: String,
    pub subject: Vec<ResourceDescriptor>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: Value,
}

/// What a statement is about, named and content-addressed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceDescriptor {
    pub name: String,
    pub digest: Digest,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// Lowercase hex.
    pub sha256: String,
}

/// A DSSE envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Base64 (standard, padded) of the serialized statement.
    pub payload: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    pub keyid: String,
    /// Base64 of the Ed25519 signature over the PAE.
    pub sig: String,
}

/// DSSE's pre-authentication encoding: `DSSEv1 SP LEN(type) SP type SP LEN(body) SP body`,
/// lengths in ASCII decimal. The signature covers this, never the payload alone.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

impl Statement {
    /// A statement of the trust-verdict predicate about `subject`.
    pub fn verdict(subject: Vec<ResourceDescriptor>, predicate: Value) -> Self {
        Self {
            type_: STATEMENT_TYPE.into(),
            subject,
            predicate_type: PREDICATE_TYPE.into(),
            predicate,
        }
    }

    /// Signs the statement with the ring's current key.
    pub fn sign(&self, ring: &KeyRing) -> Result<Envelope, KeyError> {
        let body = serde_json::to_vec(self).map_err(|e| KeyError::Sign(e.to_string()))?;
        let sig = ring.sign(&pae(PAYLOAD_TYPE, &body))?;
        Ok(Envelope {
            payload_type: PAYLOAD_TYPE.into(),
            payload: STANDARD.encode(&body),
            signatures: vec![EnvelopeSignature {
                keyid: ring.current().kid.clone(),
                sig: STANDARD.encode(sig),
            }],
        })
    }
}

impl Envelope {
    /// Checks the envelope against `jwks` (one signature by a listed key suffices) and returns
    /// its statement, which must be an in-toto Statement v1 of the trust-verdict predicate.
    pub fn open(&self, jwks: &Jwks) -> Result<Statement, String> {
        if self.payload_type != PAYLOAD_TYPE {
            return Err(format!(
                "payloadType is {}, not {PAYLOAD_TYPE}",
                self.payload_type
            ));
        }
        let body = STANDARD
            .decode(&self.payload)
            .map_err(|e| format!("the payload is not base64: {e}"))?;
        let message = pae(&self.payload_type, &body);
        let verified = self.signatures.iter().any(|s| {
            let key = jwks.key(&s.keyid).ok().flatten();
            let sig = STANDARD.decode(&s.sig).ok();
            matches!((key, sig), (Some(key), Some(sig)) if key.verify(&message, &sig))
        });
        if !verified {
            return Err("no signature verifies with a key of the key set".into());
        }
        let statement: Statement =
            serde_json::from_slice(&body).map_err(|e| format!("the statement: {e}"))?;
        if statement.type_ != STATEMENT_TYPE || statement.predicate_type != PREDICATE_TYPE {
            return Err(format!(
                "not a cardgate trust verdict: _type {}, predicateType {}",
                statement.type_, statement.predicate_type
            ));
        }
        Ok(statement)
    }
}

/// The ledger event a verdict's statement rests on, and the checkpoint that includes it, as
/// its predicate names them.
pub fn ledger_position(statement: &Statement) -> Result<(u64, String, ReceiptCheckpoint), String> {
    let ledger = &statement.predicate["ledger"];
    let seq = ledger["seq"]
        .as_u64()
        .ok_or("the predicate names no ledger seq")?;
    let hash = ledger["hash"]
        .as_str()
        .ok_or("the predicate names no ledger hash")?
        .to_string();
    let checkpoint: ReceiptCheckpoint =
        serde_json::from_value(statement.predicate["checkpoint"].clone())
            .map_err(|e| format!("the predicate's checkpoint: {e}"))?;
    Ok((seq, hash, checkpoint))
}

/// Checks an inclusion proof of the statement's ledger event in its checkpoint.
pub fn check_inclusion(
    statement: &Statement,
    leaf_index: u64,
    tree_size: u64,
    path: &[Hash],
) -> Result<u64, String> {
    let (seq, hash, checkpoint) = ledger_position(statement)?;
    checkpoint.check_inclusion(seq, &hash, leaf_index, tree_size, path)?;
    Ok(seq)
}

#[cfg(test)]
mod tests;
