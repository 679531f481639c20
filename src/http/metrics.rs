//! `GET /metrics`: Prometheus (OpenMetrics text) for operators' scrapers. Open, like
//! `/readyz`, and limited per address like it; `CARDGATE_METRICS=off` turns it off.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use crate::metrics;
use crate::service::status;

/// Metrics: requests by route and status with latency histograms, subjects by gate state,
/// jobs by kind and status, probe runs by outcome, queue lag, ledger head, outbound requests by
/// result, rate-limit refusals.
#[utoipa::path(get, path = "/metrics", tag = "health",
    security(()),
    responses(
        (status = 200, description = "The metrics, in the OpenMetrics text format",
            content_type = "application/openmetrics-text", body = String),
        (status = 404, description = "Metrics are turned off (`CARDGATE_METRICS=off`)", body = ErrorBody),
    ))]
pub(crate) async fn get_metrics(State(app): State<ApiState>) -> Result<Response, ApiError> {
    if !app.metrics_enabled {
        return Err(ApiError::NotFound(
            "metrics are turned off (CARDGATE_METRICS=off)".into(),
        ));
    }
    let services = &app.services;
    let snapshot = status::metrics_snapshot(services).await?;
    Ok((
        [(CONTENT_TYPE, metrics::CONTENT_TYPE)],
        app.metrics.render(&snapshot),
    )
        .into_response())
}
