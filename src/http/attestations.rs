//! `/v1/callees/{id}/subjects/{version}/attestation`: a subject's verdict as an in-toto
//! Statement v1 in a DSSE envelope, signed with the key set at `/.well-known/jwks.json`; and
//! `/v1/attestations`, the one kept for every promotion and demotion.

use axum::extract::{OriginalUri, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::{Json, Path, Query, page_size, seq_after};
use super::paging::{Paged, next_cursor};
use crate::domain::attestation::AttestationRecord;
use crate::domain::attestation::Envelope;
use crate::domain::ids::CalleeId;
use crate::domain::version::ProtocolVersion;
use crate::service::attestations;

/// A DSSE envelope (its `payload` the base64 of an in-toto Statement v1 whose `predicateType`
/// is `https://cardgate.dev/attestation/trust-verdict/v1`, documented with its JSON Schema in
/// `docs/attestation/`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeView {
    /// `application/vnd.in-toto+json`.
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The statement, base64.
    pub payload: String,
    pub signatures: Vec<EnvelopeSignatureView>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignatureView {
    /// The signing key's `kid` in `/.well-known/jwks.json`.
    pub keyid: String,
    /// Ed25519 over DSSE's PAE(payloadType, payload bytes), base64.
    pub sig: String,
}

impl From<Envelope> for EnvelopeView {
    fn from(e: Envelope) -> Self {
        Self {
            payload_type: e.payload_type,
            payload: e.payload,
            signatures: e
                .signatures
                .into_iter()
                .map(|s| EnvelopeSignatureView {
                    keyid: s.keyid,
                    sig: s.sig,
                })
                .collect(),
        }
    }
}

/// A subject in a path: the callee and the protocol version.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct SubjectPath {
    /// Callee id.
    pub id: Uuid,
    /// Protocol version, `Major.Minor`.
    #[param(pattern = r"^[0-9]{1,4}\.[0-9]{1,4}$")]
    pub version: String,
}

/// The subject's verdict now, as a signed in-toto attestation: about the card snapshot (by the
/// sha256 of its raw bytes) and the newest probe run's transcript (by the sha256 of its RFC 8785
/// form), with the gate state, the decisions for both dedup postures, the findings, the ledger
/// event of the last gate change and a checkpoint that includes it.
#[utoipa::path(get, path = "/v1/callees/{id}/subjects/{version}/attestation", tag = "ledger",
    security(("bearer" = ["reader"])),
    params(SubjectPath),
    responses(
        (status = 200, description = "The DSSE envelope", body = EnvelopeView),
        (status = 400, description = "`version` is not `Major.Minor`", body = ErrorBody),
        (status = 404, description = "No such callee, or no such subject", body = ErrorBody),
    ))]
pub(crate) async fn get_attestation(
    State(app): State<ApiState>,
    Path(SubjectPath { id, version }): Path<SubjectPath>,
) -> Result<Json<EnvelopeView>, ApiError> {
    let version = ProtocolVersion::parse_exact(&version)
        .map_err(|e| ApiError::invalid(format!("version: {e}")))?;
    let envelope = attestations::attest(&app.services, CalleeId(id), version).await?;
    Ok(Json(envelope.into()))
}

/// A kept attestation: the one made when a promotion or demotion was appended.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttestationView {
    pub id: Uuid,
    pub callee_id: Uuid,
    pub protocol_version: String,
    /// The ledger seq of the promotion or demotion attested.
    pub seq: i64,
    /// `promoted` or `demoted`.
    pub kind: String,
    pub created_at: DateTime<Utc>,
    pub envelope: EnvelopeView,
}

impl From<AttestationRecord> for AttestationView {
    fn from(a: AttestationRecord) -> Self {
        Self {
            id: a.id,
            callee_id: a.callee_id.0,
            protocol_version: a.protocol_version.to_string(),
            seq: a.seq,
            kind: a.kind,
            created_at: a.created_at,
            envelope: a.envelope.into(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttestationPage {
    /// In ledger order.
    pub items: Vec<AttestationView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<i64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AttestationQuery {
    /// Only this callee's.
    pub callee_id: Option<Uuid>,
    /// Only attestations of events after this ledger seq (default 0: from the first).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// The attestations kept for every promotion and demotion, in ledger order.
#[utoipa::path(get, path = "/v1/attestations", tag = "ledger",
    security(("bearer" = ["reader"])), params(AttestationQuery),
    responses(
        (status = 200, description = "A page of attestations", body = AttestationPage),
        (status = 400, description = "A negative `after`", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn list_attestations(
    State(app): State<ApiState>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<AttestationQuery>,
) -> Result<Paged<AttestationPage>, ApiError> {
    let limit = page_size(q.limit)?;
    let after = seq_after(q.after)?;
    let items = attestations::page(&app.services, q.callee_id.map(CalleeId), after, limit).await?;
    let next = next_cursor(&items, limit, |a| a.seq);
    let page = AttestationPage {
        items: items.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}
