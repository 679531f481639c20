//! The verifiable ledger over HTTP: the registry's public keys, signed checkpoints, and RFC 9162
//! inclusion and consistency proofs. Hashes travel as standard base64, as in the signed note.

use axum::extract::OriginalUri;
use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::{Json, Query, page_size, seq_after};
use super::paging::{Paged, next_cursor};
use crate::domain::merkle::Hash;
use crate::domain::signing::Jwks;
use crate::service::transparency::{self, ConsistencyProof, InclusionProof, SignedCheckpoint};

/// A JWK Set of Ed25519 keys.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JwksView {
    pub keys: Vec<JwkView>,
}

/// One Ed25519 public key.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JwkView {
    /// `OKP`.
    pub kty: String,
    /// `Ed25519`.
    pub crv: String,
    /// The public key, base64url.
    pub x: String,
    /// The key's RFC 7638 thumbprint: what checkpoints and receipts name it by.
    pub kid: String,
    /// `EdDSA`.
    pub alg: String,
    /// `sig`.
    #[serde(rename = "use")]
    pub use_: String,
}

impl From<Jwks> for JwksView {
    fn from(set: Jwks) -> Self {
        Self {
            keys: set
                .keys
                .into_iter()
                .map(|k| JwkView {
                    kty: k.kty,
                    crv: k.crv,
                    x: k.x,
                    kid: k.kid,
                    alg: k.alg,
                    use_: k.use_,
                })
                .collect(),
        }
    }
}

/// A signed checkpoint of the ledger's Merkle tree.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointView {
    /// Events in the tree (the ledger's seqs 1 to `tree_size`).
    pub tree_size: u64,
    /// The RFC 9162 root hash, base64.
    pub root_hash: String,
    pub issued_at: DateTime<Utc>,
    /// The signing key, as listed at `/.well-known/jwks.json`.
    pub kid: String,
    /// The checkpoint as a C2SP signed note: origin, tree size and root hash lines, a blank
    /// line, and an Ed25519 signature line.
    pub note: String,
}

impl From<SignedCheckpoint> for CheckpointView {
    fn from(c: SignedCheckpoint) -> Self {
        Self {
            tree_size: c.tree_size,
            root_hash: STANDARD.encode(c.root_hash),
            issued_at: c.issued_at,
            kid: c.kid,
            note: c.note,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CheckpointPage {
    /// Smallest tree first.
    pub items: Vec<CheckpointView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<u64>,
}

/// An RFC 9162 inclusion proof: the audit path of one leaf, its sibling first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InclusionProofView {
    /// The event's seq minus one.
    pub leaf_index: u64,
    pub tree_size: u64,
    /// Base64 hashes.
    pub audit_path: Vec<String>,
}

/// An RFC 9162 consistency proof: the tree of `first` leaves is a prefix of that of `second`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsistencyProofView {
    pub first: u64,
    pub second: u64,
    /// Base64 hashes.
    pub proof: Vec<String>,
}

fn encode_all(hashes: &[Hash]) -> Vec<String> {
    hashes.iter().map(|h| STANDARD.encode(h)).collect()
}

impl From<InclusionProof> for InclusionProofView {
    fn from(p: InclusionProof) -> Self {
        Self {
            leaf_index: p.leaf_index,
            tree_size: p.tree_size,
            audit_path: encode_all(&p.audit_path),
        }
    }
}

impl From<ConsistencyProof> for ConsistencyProofView {
    fn from(p: ConsistencyProof) -> Self {
        Self {
            first: p.first,
            second: p.second,
            proof: encode_all(&p.proof),
        }
    }
}

/// Decodes base64 hashes (a proof read back by a verifier).
pub(crate) fn decode_all(hashes: &[String]) -> Result<Vec<Hash>, String> {
    hashes
        .iter()
        .map(|h| {
            STANDARD
                .decode(h)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| format!("`{h}` is not a base64 SHA-256 hash"))
        })
        .collect()
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProofQuery {
    /// The event to prove.
    #[param(minimum = 1)]
    pub seq: u64,
    /// The tree to prove it in (default: the whole tree now).
    #[param(minimum = 1)]
    pub tree_size: Option<u64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsistencyQuery {
    /// The older tree size.
    #[param(minimum = 0)]
    pub first: u64,
    /// The newer tree size (default: the whole tree now).
    #[param(minimum = 0)]
    pub second: Option<u64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointsQuery {
    /// Only checkpoints of a larger tree (default 0: from the first).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// The registry's public keys (current first, then retired ones): what verifies its
/// checkpoints and receipts.
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "ledger",
    security(()),
    responses((status = 200, description = "The JWK Set", body = JwksView)))]
pub(crate) async fn jwks(State(app): State<ApiState>) -> Json<JwksView> {
    Json(app.services.transparency.jwks().into())
}

/// A checkpoint of the whole ledger now, signed.
#[utoipa::path(get, path = "/v1/ledger/checkpoint", tag = "ledger",
    security(("bearer" = ["reader"])),
    responses((status = 200, description = "The signed checkpoint", body = CheckpointView)))]
pub(crate) async fn get_checkpoint(
    State(app): State<ApiState>,
) -> Result<Json<CheckpointView>, ApiError> {
    let services = &app.services;
    let signed = services
        .transparency
        .checkpoint(&services.store, services.now())
        .await?;
    Ok(Json(signed.into()))
}

/// Checkpoints recorded over time (every minute the ledger grew, by default), for audit:
/// each must stay consistent with every later one.
#[utoipa::path(get, path = "/v1/ledger/checkpoints", tag = "ledger",
    security(("bearer" = ["reader"])), params(CheckpointsQuery),
    responses((status = 200, description = "A page of checkpoints, smallest tree first", body = CheckpointPage)))]
pub(crate) async fn list_checkpoints(
    State(app): State<ApiState>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<CheckpointsQuery>,
) -> Result<Paged<CheckpointPage>, ApiError> {
    let limit = page_size(q.limit)?;
    let after = seq_after(q.after)?.unsigned_abs();
    let checkpoints = transparency::recorded(&app.services.store, after, limit).await?;
    let next = next_cursor(&checkpoints, limit, |c| c.tree_size);
    let page = CheckpointPage {
        items: checkpoints.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// The RFC 9162 inclusion proof of event `seq` in the tree of `tree_size` events.
#[utoipa::path(get, path = "/v1/ledger/proof", tag = "ledger",
    security(("bearer" = ["reader"])), params(ProofQuery),
    responses(
        (status = 200, description = "The inclusion proof", body = InclusionProofView),
        (status = 400, description = "`seq` is not in that tree", body = ErrorBody),
        (status = 409, description = "`tree_size` is larger than the ledger", body = ErrorBody),
    ))]
pub(crate) async fn get_inclusion_proof(
    State(app): State<ApiState>,
    Query(q): Query<ProofQuery>,
) -> Result<Json<InclusionProofView>, ApiError> {
    let services = &app.services;
    let proof = services
        .transparency
        .inclusion(&services.store, q.seq, q.tree_size)
        .await?;
    Ok(Json(proof.into()))
}

/// The RFC 9162 consistency proof between two tree sizes: the older tree is a prefix of the
/// newer one, so nothing it held was changed or removed.
#[utoipa::path(get, path = "/v1/ledger/consistency", tag = "ledger",
    security(("bearer" = ["reader"])), params(ConsistencyQuery),
    responses(
        (status = 200, description = "The consistency proof", body = ConsistencyProofView),
        (status = 400, description = "`first` is larger than `second`", body = ErrorBody),
        (status = 409, description = "`second` is larger than the ledger", body = ErrorBody),
    ))]
pub(crate) async fn get_consistency_proof(
    State(app): State<ApiState>,
    Query(q): Query<ConsistencyQuery>,
) -> Result<Json<ConsistencyProofView>, ApiError> {
    let services = &app.services;
    let proof = services
        .transparency
        .consistency(&services.store, q.first, q.second)
        .await?;
    Ok(Json(proof.into()))
}
