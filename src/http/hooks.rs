//! `POST /v1/hooks/push/{token}`: cardgate's own push-notification webhook. Agents under probe
//! deliver task updates here; the token in the path (random per probe run) is the credential.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::Path;
use crate::domain::probe::PushReceipt;
use crate::service::{Missing, probe};

/// Receive a push notification for a running probe.
#[utoipa::path(post, path = "/v1/hooks/push/{token}", tag = "probes",
    security(()),
    params(("token" = String, Path, description = "The probe run's webhook token")),
    request_body(content = Object, description = "An A2A StreamResponse (v1.0) or Task (v0.3)", content_type = "application/json"),
    responses(
        (status = 204, description = "Recorded"),
        (status = 404, description = "No running probe has this token", body = ErrorBody),
        (status = 413, description = "The delivery is larger than a probe answer may be", body = ErrorBody),
        (status = 429, description = "This probe run's webhook has taken all the deliveries it accepts", body = ErrorBody),
    ))]
pub(crate) async fn receive_push(
    State(app): State<ApiState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let unknown = || ApiError::NotFound(Missing::PushToken.to_string());
    if token.len() > 128 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(unknown());
    }
    let kept = delivery_headers(&headers, &token);
    match probe::receive_push(
        &app.services.store,
        &app.services.probe,
        &token,
        kept,
        body.to_vec(),
        app.services.now(),
    )
    .await?
    {
        PushReceipt::Stored => Ok(StatusCode::NO_CONTENT),
        PushReceipt::NoRunningProbe => Err(unknown()),
        // Not worth a retry: the run's record is complete as far as cardgate is concerned.
        PushReceipt::CapReached => Err(ApiError::TooManyRequests {
            retry_after_secs: app.services.probe.deadline.as_secs(),
        }),
    }
}

/// The headers of a delivery worth keeping as evidence (the cycle reads the token from them):
/// the standard ones, and the first other header that carries the run's `token`, since the
/// spec lets an agent put it in one "or similar" (PUSH-TOKEN says where it went).
pub(crate) fn delivery_headers(headers: &HeaderMap, token: &str) -> Value {
    const STANDARD: [&str; 5] = [
        "content-type",
        "x-a2a-notification-token",
        "authorization",
        "user-agent",
        "a2a-version",
    ];
    let mut kept = serde_json::Map::new();
    for name in STANDARD {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            kept.insert(name.into(), v.into());
        }
    }
    let elsewhere = headers.iter().find(|(name, value)| {
        !STANDARD.contains(&name.as_str())
            && value
                .to_str()
                .is_ok_and(|v| v.len() <= 512 && v.contains(token))
    });
    if let Some((name, value)) = elsewhere
        && let Ok(value) = value.to_str()
    {
        kept.insert(name.as_str().into(), value.into());
    }
    Value::Object(kept)
}
