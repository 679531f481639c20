//! `/v1/ledger`: reading and verifying the append-only ledger.

use axum::extract::OriginalUri;
use axum::extract::State;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::{Json, Query};
use super::extract::{page_size, seq_after};
use super::paging::{Paged, next_cursor};
use crate::domain::ids::CalleeId;
use crate::domain::ledger::EventRecord;
use crate::service::ledger::{self, VerifyReport};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct LedgerQuery {
    /// Only events about this callee.
    pub callee_id: Option<Uuid>,
    /// Only events with a greater sequence number (default 0: from the start).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// One ledger event, exactly as stored and hashed. (Deserializable too: webhook receivers and
/// the tests read it back.)
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventView {
    pub seq: i64,
    pub callee_id: Uuid,
    pub protocol_version: String,
    /// `version-appeared`, `version-withdrawn`, `card-republished`, `capability-advertised`,
    /// `capability-withdrawn`, `card-untrusted`, `card-trust-restored`, `probe-finished`,
    /// `promoted`, `demoted`, `report-received` or `rejudged`.
    pub kind: String,
    /// The event's fields.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    pub actor: String,
    pub recorded_at: DateTime<Utc>,
    /// Hash of event `seq - 1` (64 zeros for the first event).
    pub prev_hash: String,
    /// sha256 over the RFC 8785 form of every other field.
    pub hash: String,
}

impl From<EventRecord> for EventView {
    fn from(e: EventRecord) -> Self {
        Self {
            seq: e.seq,
            callee_id: e.callee_id.0,
            protocol_version: e.protocol_version,
            kind: e.kind,
            data: e.data,
            actor: e.actor,
            recorded_at: e.recorded_at,
            prev_hash: e.prev_hash,
            hash: e.hash,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LedgerPage {
    /// Events in sequence order.
    pub items: Vec<EventView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct VerifyView {
    /// True when every link from the first event to the newest verified, and the Merkle
    /// tree, every recorded checkpoint and every subject's head agree with the chain.
    pub ok: bool,
    pub checked: u64,
    pub head_seq: i64,
    pub head_hash: String,
    pub first_broken: Option<BrokenLinkView>,
    pub merkle: MerkleCheckView,
    /// Recorded checkpoints whose root was recomputed from the chain.
    pub checkpoints_checked: u64,
    /// Subjects whose stored newest event was compared with the chain.
    pub subjects_checked: u64,
    /// Every disagreement beyond the chain's own links, in words.
    pub problems: Vec<String>,
}

/// The Merkle tree recomputed from the verified chain.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MerkleCheckView {
    pub tree_size: u64,
    /// Base64.
    pub root_hash: String,
    /// Leaves in the stored tree.
    pub stored_tree_size: u64,
    /// The stored tree's root equals the recomputed one.
    pub matches: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BrokenLinkView {
    pub seq: i64,
    pub reason: String,
}

impl From<VerifyReport> for VerifyView {
    fn from(r: VerifyReport) -> Self {
        Self {
            ok: r.ok,
            checked: r.checked,
            head_seq: r.head_seq,
            head_hash: r.head_hash,
            first_broken: r.first_broken.map(|b| BrokenLinkView {
                seq: b.seq,
                reason: b.reason,
            }),
            merkle: MerkleCheckView {
                tree_size: r.merkle.tree_size,
                root_hash: base64::engine::general_purpose::STANDARD.encode(r.merkle.root_hash),
                stored_tree_size: r.merkle.stored_tree_size,
                matches: r.merkle.matches,
            },
            checkpoints_checked: r.checkpoints_checked,
            subjects_checked: r.subjects_checked,
            problems: r.problems,
        }
    }
}

/// Ledger events in sequence order.
#[utoipa::path(get, path = "/v1/ledger", tag = "ledger",
    security(("bearer" = ["reader"])), params(LedgerQuery),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "A page of events", body = LedgerPage),
        (status = 400, description = "Bad parameters", body = ErrorBody),
    ))]
pub(crate) async fn list_ledger(
    State(app): State<ApiState>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<LedgerQuery>,
) -> Result<Paged<LedgerPage>, ApiError> {
    let limit = page_size(q.limit)?;
    let after = seq_after(q.after)?;
    let events = ledger::page(&app.services.store, q.callee_id.map(CalleeId), after, limit).await?;
    let next = next_cursor(&events, limit, |e| e.seq);
    let page = LedgerPage {
        items: events.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// Walk the whole hash chain and report the first broken link, if any; check the Merkle tree,
/// every recorded checkpoint and every subject's head against it.
#[utoipa::path(get, path = "/v1/ledger/verify", tag = "ledger",
    security(("bearer" = ["reader"])),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),(status = 200, description = "The verification report", body = VerifyView)))]
pub(crate) async fn verify_ledger(
    State(app): State<ApiState>,
) -> Result<Json<VerifyView>, ApiError> {
    Ok(Json(ledger::verify(&app.services.store).await?.into()))
}
