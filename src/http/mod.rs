//! The REST API: routes, OpenAPI document, Swagger UI and the layers around them.
//!
//! Routes are registered only through utoipa's `OpenApiRouter`, so a route cannot exist
//! without its OpenAPI operation or the other way round.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, Response, StatusCode, header};
use axum::response::IntoResponse;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use crate::app::AppState;

pub mod callees;
pub mod cards;
pub mod error;
pub mod extract;
pub mod health;
pub mod hooks;
pub mod ledger;
pub mod probes;
pub mod reports;
pub mod status;
pub mod trust;
pub mod views;

use error::ApiError;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cardgate",
        description = "A2A lifecycle trust registry. Callers ask, before relying on an agent's task \
                       lifecycle semantics, whether they may; the answer comes from verified cards and \
                       real probe tasks recorded in an append-only, hash-chained ledger.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "callees", description = "Registered agents and their subjects"),
        (name = "trust", description = "Decisions for callers"),
        (name = "probes", description = "Probe runs: real tasks driven through the lifecycle"),
        (name = "reports", description = "Callers' violation reports"),
        (name = "operations", description = "The work queue and the scheduler"),
        (name = "ledger", description = "The append-only, hash-chained ledger"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
struct ApiDoc;

/// Every documented route, with its OpenAPI operation.
fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(callees::create_callee, callees::list_callees))
        .routes(routes!(callees::get_callee))
        .routes(routes!(callees::refresh_callee))
        .routes(routes!(callees::put_trusted_keys))
        .routes(routes!(cards::list_cards))
        .routes(routes!(cards::get_card))
        .routes(routes!(probes::create_probe, probes::list_probes))
        .routes(routes!(probes::get_probe))
        .routes(routes!(hooks::receive_push))
        .routes(routes!(reports::create_report, reports::list_reports))
        .routes(routes!(status::list_jobs))
        .routes(routes!(status::get_status))
        .routes(routes!(trust::get_trust))
        .routes(routes!(ledger::list_ledger))
        .routes(routes!(ledger::verify_ledger))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
}

/// The OpenAPI document the service serves at `/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().into_openapi()
}

/// Limits applied to every request.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    pub body_bytes: usize,
    pub request_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            body_bytes: 64 * 1024,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// The whole HTTP application.
pub fn router(state: AppState, limits: &HttpLimits) -> Router {
    let (api, spec) = api().split_for_parts();
    api.merge(SwaggerUi::new("/docs").url("/openapi.json", spec))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async {
            ApiError::MethodNotAllowed("this route does not accept that method".into())
        })
        .layer(axum::middleware::map_response(ensure_envelope))
        .layer(DefaultBodyLimit::max(limits.body_bytes))
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, limits.request_timeout))
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal(anyhow::anyhow!("a request handler panicked")).into_response()
        }))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<Body>| {
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
        }))
        .with_state(state)
}

/// Gives error responses produced outside our handlers (layers, Swagger UI) the JSON
/// envelope, so clients can rely on one error shape.
async fn ensure_envelope(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let reason = status.canonical_reason().unwrap_or("error").to_lowercase();
    let err = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::PayloadTooLarge("the request body is too large".into())
        }
        StatusCode::SERVICE_UNAVAILABLE => ApiError::Unavailable("the request timed out".into()),
        StatusCode::NOT_FOUND => ApiError::NotFound("no such resource".into()),
        s if s.is_server_error() => ApiError::Internal(anyhow::anyhow!("{status} from a layer")),
        _ => ApiError::bad_request("bad_request", reason),
    };
    let mut enveloped = err.into_response();
    *enveloped.status_mut() = status;
    enveloped
}
