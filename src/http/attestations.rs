//! `/v1/callees/{id}/subjects/{version}/attestation`: a subject's verdict as an in-toto
//! Statement v1 in a DSSE envelope, signed with the key set at `/.well-known/jwks.json`.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::{Json, Path};
use crate::domain::attestation::Envelope;
use crate::domain::ids::CalleeId;
use crate::domain::version::ProtocolVersion;
use crate::service::attestations;

/// A DSSE envelope (its `payload` the base64 of an in-toto Statement v1 whose `predicateType`
/// is `https://cardgate.dev/attestation/trust-verdict/v1`, documented with its JSON Schema in
/// `docs/attestation/`).
#[derive(Debug, Serialize, ToSchema)]
pub struct EnvelopeView {
    /// `application/vnd.in-toto+json`.
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The statement, base64.
    pub payload: String,
    pub signatures: Vec<EnvelopeSignatureView>,
}

#[derive(Debug, Serialize, ToSchema)]
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
pub struct SubjectPath {
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
pub async fn get_attestation(
    State(app): State<ApiState>,
    Path(SubjectPath { id, version }): Path<SubjectPath>,
) -> Result<Json<EnvelopeView>, ApiError> {
    let version = ProtocolVersion::parse_exact(&version)
        .map_err(|e| ApiError::invalid(format!("version: {e}")))?;
    let envelope = attestations::attest(&app.services, CalleeId(id), version).await?;
    Ok(Json(envelope.into()))
}
