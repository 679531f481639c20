//! Decision receipts: a decision signed together with the checkpoint that contains its
//! evidence, so that a caller can keep it and prove later, offline, what it was told.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::merkle::{self, Hash};
use super::signing::{Jwks, verify_jws};
use super::time::Timestamp;

/// The JWS `typ` of a receipt.
pub const RECEIPT_TYPE: &str = "cardgate-receipt+jws";

/// What a receipt's JWS payload holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptPayload {
    /// The decision exactly as `GET /v1/trust` answered it.
    pub decision: Value,
    pub issued_at: Timestamp,
    /// The tree whose leaves include the decision's `evidence.ledger_seq`.
    pub checkpoint: ReceiptCheckpoint,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptCheckpoint {
    pub origin: String,
    pub tree_size: u64,
    /// Base64.
    pub root_hash: String,
}

impl ReceiptCheckpoint {
    pub fn root(&self) -> Result<Hash, String> {
        STANDARD
            .decode(&self.root_hash)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| "the checkpoint root_hash is not a base64 SHA-256 hash".into())
    }
}

impl ReceiptPayload {
    /// Checks the receipt's signature against `jwks` and returns what it says.
    pub fn open(jws: &str, jwks: &Jwks) -> Result<Self, String> {
        let (typ, payload) = verify_jws(jws, jwks)?;
        if typ.as_deref() != Some(RECEIPT_TYPE) {
            return Err(format!("not a receipt: typ is {typ:?}, not {RECEIPT_TYPE}"));
        }
        serde_json::from_slice(&payload).map_err(|e| format!("the receipt's payload: {e}"))
    }

    /// The ledger event the decision rests on: its seq and chain hash, if it names one.
    pub fn evidence(&self) -> Option<(u64, &str)> {
        let evidence = &self.decision["evidence"];
        let seq = evidence["ledger_seq"].as_u64()?;
        Some((seq, evidence["ledger_hash"].as_str()?))
    }

    /// Checks an inclusion proof of the evidence event in the receipt's checkpoint.
    pub fn check_inclusion(
        &self,
        leaf_index: u64,
        tree_size: u64,
        path: &[Hash],
    ) -> Result<(), String> {
        let (seq, hash) = self
            .evidence()
            .ok_or("the decision names no ledger event to prove")?;
        self.checkpoint
            .check_inclusion(seq, hash, leaf_index, tree_size, path)
    }
}

impl ReceiptCheckpoint {
    /// Checks an inclusion proof of ledger event `seq` (chain hash `hash`) in this checkpoint.
    pub fn check_inclusion(
        &self,
        seq: u64,
        hash: &str,
        leaf_index: u64,
        tree_size: u64,
        path: &[Hash],
    ) -> Result<(), String> {
        if seq == 0 || leaf_index != seq - 1 {
            return Err(format!(
                "the proof is for leaf {leaf_index}, the event is seq {seq} (leaf {})",
                seq.saturating_sub(1)
            ));
        }
        if tree_size != self.tree_size {
            return Err(format!(
                "the proof is for tree size {tree_size}, the checkpoint has {}",
                self.tree_size
            ));
        }
        let leaf = merkle::event_leaf(hash).map_err(|e| format!("the event hash: {e}"))?;
        merkle::verify_inclusion(leaf_index, tree_size, &leaf, path, &self.root()?)
            .map_err(|e| e.to_string())
    }
}
