//! Liveness and readiness probes for orchestrators.

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::Json;
use crate::service;

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    #[schema(example = "ok")]
    pub status: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    #[schema(example = "ready")]
    pub status: String,
    /// `postgres` or `sqlite`.
    pub database: String,
    /// This process's last refresh sweep (absent until the first tick).
    pub scheduler_last_tick_at: Option<chrono::DateTime<chrono::Utc>>,
    /// How long the oldest due job has waited for a worker, in seconds.
    pub queue_lag_seconds: f64,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health",
    security(()),
    responses((status = 200, description = "Alive", body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "health",
    security(()),
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "The database does not answer, or the read model is still loading its decisions", body = ErrorBody),
    ))]
pub(crate) async fn readyz(State(app): State<ApiState>) -> Result<Json<Readiness>, ApiError> {
    // Not ready to take callers until it can answer their decisions.
    if !app.services.view.is_loaded() {
        return Err(ApiError::Unavailable(
            "the read model is still loading; decisions are not answered yet".into(),
        ));
    }
    let status = match service::status::ping(&app.services.store).await {
        Ok(()) => super::status::status(&app).await,
        Err(err) => Err(err.into()),
    };
    match status {
        Ok(status) => Ok(Json(Readiness {
            status: "ready".into(),
            database: status.database,
            scheduler_last_tick_at: status.scheduler.refresh.last_tick_at,
            queue_lag_seconds: status.queue.lag_seconds,
        })),
        Err(err) => {
            tracing::warn!(error = ?err, "readiness check: database unreachable");
            Err(ApiError::Unavailable("the database does not answer".into()))
        }
    }
}
