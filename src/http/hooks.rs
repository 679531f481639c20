//! `POST /v1/hooks/push/{token}`: cardgate's own push-notification webhook. Agents under probe
//! deliver task updates here; the token in the path (random per probe run) is the credential.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

use super::error::{ApiError, ErrorBody};
use super::extract::Path;
use crate::app::AppState;
use crate::service::probe;

/// Receive a push notification for a running probe.
#[utoipa::path(post, path = "/v1/hooks/push/{token}", tag = "probes",
    security(()),
    params(("token" = String, Path, description = "The probe run's webhook token")),
    request_body(content = Object, description = "An A2A StreamResponse (v1.0) or Task (v0.3)", content_type = "application/json"),
    responses(
        (status = 204, description = "Recorded"),
        (status = 404, description = "No running probe has this token", body = ErrorBody),
    ))]
pub async fn receive_push(
    State(app): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    if token.len() > 128 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::NotFound("no running probe has this token".into()));
    }
    let kept = probe::delivery_headers(&headers);
    if probe::receive_push(&app.store, &token, kept, body.to_vec(), app.now()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("no running probe has this token".into()))
    }
}
