//! The REST API: routes, OpenAPI document, Swagger UI and the layers around them.
//!
//! Routes are registered only through utoipa's `OpenApiRouter`, so a route cannot exist
//! without its OpenAPI operation or the other way round.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{Response, StatusCode, header};
use axum::response::IntoResponse;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use crate::runtime::schedule::{ScheduleSettings, Ticks};
use crate::service::Services;

pub(crate) mod access;
pub(crate) mod attestations;
pub(crate) mod callees;
pub(crate) mod cards;
pub mod closed;
pub(crate) mod conditional;
pub(crate) mod console;
pub(crate) mod credentials;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod extract;
pub(crate) mod health;
pub(crate) mod hooks;
pub(crate) mod keys;
pub(crate) mod ledger;
pub(crate) mod metrics;
pub(crate) mod paging;
pub mod permissions;
pub(crate) mod probes;
pub(crate) mod reports;
pub(crate) mod rulebook;
pub(crate) mod status;
pub mod subscriptions;
pub(crate) mod transparency;
pub(crate) mod trials;
pub(crate) mod trust;
pub(crate) mod views;

use error::ApiError;

/// What handlers share: the use cases, and this process's runtime for `/v1/status`.
///
/// One pointer: axum clones the state for every extractor of every request, and cloning the
/// whole context bumped some twenty reference counts each time, contended across cores (a
/// profile of `GET /v1/trust` under load put a tenth of its CPU there).
#[derive(Clone)]
pub struct ApiState(Arc<ApiContext>);

impl ApiState {
    pub fn new(context: ApiContext) -> Self {
        Self(Arc::new(context))
    }
}

impl std::ops::Deref for ApiState {
    type Target = ApiContext;
    fn deref(&self) -> &ApiContext {
        &self.0
    }
}

/// The shared context behind [`ApiState`].
pub struct ApiContext {
    pub services: Services,
    /// `/v1/trust` answers already rendered, while their callee has not changed.
    pub answers: crate::service::readmodel::Answers<conditional::Tagged>,
    /// The cron expressions, reported by `/v1/status`.
    pub schedule: Arc<ScheduleSettings>,
    /// The scheduler's last ticks in this process.
    pub ticks: Arc<Ticks>,
    /// This process's name in job leases.
    pub instance: String,
    /// Open event streams per key.
    pub streams: Arc<events::StreamSlots>,
    /// Cancelled when shutdown starts: long-lived responses (event streams) end.
    pub stopping: tokio_util::sync::CancellationToken,
    /// This process's metrics, and whether `/metrics` serves them.
    pub metrics: crate::metrics::Metrics,
    pub metrics_enabled: bool,
}

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
        (name = "ledger", description = "The append-only, hash-chained ledger, its Merkle tree \
            (RFC 9162), signed checkpoints and proofs"),
        (name = "keys", description = "API keys (admin)"),
        (name = "subscriptions", description = "Webhooks: signed deliveries of trust changes (admin)"),
        (name = "health", description = "Liveness and readiness"),
    ),
    modifiers(&BearerScheme)
)]
struct ApiDoc;

/// Declares the bearer API-key scheme that operations' `security` refers to. In OpenAPI 3.1 a
/// requirement's list names the role the operation needs.
struct BearerScheme;

impl utoipa::Modify for BearerScheme {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "An API key: `Authorization: Bearer <key>`. Roles: reader (read decisions, callees, \
                 ledger), reporter (also submit reports), admin (also manage callees, probes, jobs, keys). \
                 Each operation names the least role it needs.",
            ))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(permissions::BEARER, SecurityScheme::Http(scheme));
    }
}

/// Documents the error statuses every operation can answer, whatever its handler does: the
/// layers' limits (413, 414, 415, 429, 503 on timeout), authentication (401, 403) and the
/// generic 500. A client (or a schema-driven fuzzer) then meets no undocumented status.
struct CommonResponses;

impl utoipa::Modify for CommonResponses {
    // Long on purpose: one walk over every operation, adding each common status where it
    // applies; the rules for which status applies where read best side by side.
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        for (path, item) in doc.paths.paths.iter_mut() {
            let limited_open = permissions::OPEN_BUT_COSTLY
                .iter()
                .any(|p| path.starts_with(p));
            let ops = [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                let secured = op.security.as_ref().is_some_and(|s| {
                    serde_json::to_value(s).is_ok_and(|v| {
                        v.get(0)
                            .and_then(|r| r.as_object())
                            .is_some_and(|o| !o.is_empty())
                    })
                });
                let mut add = vec![
                    ("414", "The query string is too long"),
                    ("500", "Internal error; the cause is logged, not returned"),
                    (
                        "503",
                        "The request timed out, or the database is unavailable; retry after \
                         the Retry-After header's seconds",
                    ),
                ];
                if secured {
                    add.extend([
                        ("401", "No valid API key"),
                        ("403", "The key's role is not enough"),
                        ("429", "Rate limit exceeded; see Retry-After"),
                    ]);
                } else if limited_open {
                    add.push((
                        "429",
                        "Too many requests from this address; see Retry-After",
                    ));
                }
                if op.request_body.is_some() {
                    add.extend([
                        ("400", "Malformed body"),
                        ("413", "The body is too large"),
                        ("415", "The body is not JSON"),
                    ]);
                }
                if op.parameters.as_ref().is_some_and(|p| !p.is_empty()) {
                    add.push(("400", "Malformed parameter"));
                }
                for (code, description) in add {
                    op.responses
                        .responses
                        .entry(code.to_string())
                        .or_insert_with(|| error(description).into());
                }
            }
        }
    }
}

/// Documents what cardgate sends to subscribers (OpenAPI 3.1 `webhooks`): the signed POST of a
/// [`subscriptions::WebhookPayload`], and what each answer makes of the delivery.
struct Webhooks;

impl utoipa::Modify for Webhooks {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::ToSchema;
        use utoipa::openapi::path::{
            HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem,
        };
        use utoipa::openapi::request_body::RequestBodyBuilder;
        use utoipa::openapi::{ContentBuilder, PathsBuilder, Ref, Required, Response};
        let header = |name: &str, description: &str| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Header)
                .required(Required::True)
                .description(Some(description))
                .build()
        };
        let operation = OperationBuilder::new()
            .summary(Some("A trust change, POSTed to a subscription's URL"))
            .description(Some(
                "Standard Webhooks: verify `webhook-signature` (`v1,<base64 HMAC-SHA256 of                  \"{webhook-id}.{webhook-timestamp}.{body}\">`, keyed with the base64-decoded                  secret after `whsec_`; space-separated when a rotation overlaps) before trusting                  the body. A subscription's deliveries about one subject arrive in ledger order, and \
                 different subjects never wait for each other. A delivery that keeps failing holds \
                 the later ones about its subject for the hold-back at most (5 minutes by default, \
                 CARDGATE_WEBHOOK_HOLD_BACK_SECS); then they go out, and `data.previous_seq` (the \
                 seq of the event before, about that subject, in this subscription) shows the gap, \
                 to be filled from `GET /v1/ledger` while the late delivery keeps retrying. \
                 Deduplicate by `webhook-id`: a delivery cut off mid-attempt is sent again with it. \
                 Besides ledger events, `subscription.failing` tells the other subscriptions, once \
                 per failure, that a subscription's receiver has failed every attempt for the \
                 failing threshold.",
            ))
            .parameter(header("webhook-id", "The delivery's id: the same on every retry"))
            .parameter(header("webhook-timestamp", "Unix seconds of this attempt"))
            .parameter(header("webhook-signature", "One `v1,<base64>` per signing secret"))
            .request_body(Some(
                RequestBodyBuilder::new()
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("WebhookPayload")))
                            .build(),
                    )
                    .required(Some(Required::True))
                    .build(),
            ))
            .response("2XX", Response::new("Delivered"))
            .response("410", Response::new("Gone: the subscription is disabled"))
            .response(
                "429",
                Response::new("Retried when `Retry-After` says (seconds or an HTTP-date), else as below"),
            )
            .response(
                "503",
                Response::new("Retried when `Retry-After` says (seconds or an HTTP-date), else as below"),
            )
            .response(
                "default",
                Response::new(
                    "Retried after 5 s, doubling to 1 h, with jitter; failed after 3 days (all configurable)",
                ),
            )
            .build();
        doc.webhooks = Some(
            PathsBuilder::new()
                .path("trustChanged", PathItem::new(HttpMethod::Post, operation))
                .build(),
        );
        let components = doc.components.get_or_insert_with(Default::default);
        let mut schemas = vec![(
            subscriptions::WebhookPayload::name().into_owned(),
            <subscriptions::WebhookPayload as utoipa::PartialSchema>::schema(),
        )];
        <subscriptions::WebhookPayload as ToSchema>::schemas(&mut schemas);
        components.schemas.extend(schemas);
    }
}

/// Every documented route, with its OpenAPI operation.
fn api() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(callees::create_callee, callees::list_callees))
        .routes(routes!(callees::get_callee))
        .routes(routes!(callees::refresh_callee))
        .routes(routes!(callees::put_trusted_keys))
        .routes(routes!(credentials::list_credentials))
        .routes(routes!(
            credentials::put_credential,
            credentials::delete_credential
        ))
        .routes(routes!(cards::list_cards))
        .routes(routes!(cards::get_card))
        .routes(routes!(probes::create_probe, probes::list_probes))
        .routes(routes!(probes::get_probe))
        .routes(routes!(hooks::receive_push))
        .routes(routes!(reports::create_report, reports::list_reports))
        .routes(routes!(status::list_jobs))
        .routes(routes!(status::get_status))
        .routes(routes!(rulebook::get_rulebook))
        .routes(routes!(rulebook::rejudge))
        .routes(routes!(rulebook::what_if))
        .routes(routes!(trust::get_trust))
        .routes(routes!(ledger::list_ledger))
        .routes(routes!(ledger::verify_ledger))
        .routes(routes!(transparency::get_checkpoint))
        .routes(routes!(transparency::list_checkpoints))
        .routes(routes!(transparency::get_inclusion_proof))
        .routes(routes!(transparency::get_consistency_proof))
        .routes(routes!(transparency::jwks))
        .routes(routes!(attestations::get_attestation))
        .routes(routes!(attestations::list_attestations))
        .routes(routes!(events::stream_events))
        .routes(routes!(
            subscriptions::create_subscription,
            subscriptions::list_subscriptions
        ))
        .routes(routes!(
            subscriptions::get_subscription,
            subscriptions::delete_subscription
        ))
        .routes(routes!(subscriptions::rotate_secret))
        .routes(routes!(subscriptions::pause_subscription))
        .routes(routes!(subscriptions::resume_subscription))
        .routes(routes!(subscriptions::test_subscription))
        .routes(routes!(subscriptions::list_deliveries))
        .routes(routes!(subscriptions::retry_delivery))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::get_metrics))
        .routes(routes!(keys::create_key, keys::list_keys))
        .routes(routes!(keys::revoke_key))
}

/// The OpenAPI document the service serves at `/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    documented().1
}

/// The routes and their finished document. Conventions that span every operation are applied
/// here, after the routes have added their paths.
fn documented() -> (Router<ApiState>, utoipa::openapi::OpenApi) {
    use utoipa::Modify;
    let (router, mut doc) = api().split_for_parts();
    CommonResponses.modify(&mut doc);
    Webhooks.modify(&mut doc);
    (router, doc)
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
pub fn router(
    state: ApiState,
    limits: &HttpLimits,
    auth: &permissions::AuthSettings,
) -> anyhow::Result<Router> {
    let (api, spec) = documented();
    let mut table =
        permissions::AccessTable::from_openapi(&spec).map_err(|e| anyhow::anyhow!(e))?;
    if auth.public_transparency {
        table.open_transparency();
    }
    let guard = Arc::new(permissions::Guard {
        table,
        settings: auth.clone(),
        limiter: permissions::RateLimiter::default(),
        services: state.services.clone(),
        metrics: state.metrics.clone(),
    });
    let metrics = state.metrics.clone();
    let console = console::router(guard.clone());
    // A route layer runs after routing, so it sees the matched path template.
    let api = api.route_layer(axum::middleware::from_fn_with_state(
        guard,
        permissions::authorize,
    ));
    Ok(api
        .merge(console)
        .merge(SwaggerUi::new("/docs").url("/openapi.json", spec))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async {
            ApiError::MethodNotAllowed("this route does not accept that method".into())
        })
        .layer(axum::middleware::map_response(ensure_envelope))
        .layer(DefaultBodyLimit::max(limits.body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.request_timeout,
        ))
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal(anyhow::anyhow!("a request handler panicked")).into_response()
        }))
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            access::access_log,
        ))
        .with_state(state))
}

/// Gives error responses produced outside our handlers (layers, Swagger UI) the JSON
/// envelope, so clients can rely on one error shape. The console's pages are HTML for people,
/// errors included, and pass as they are.
async fn ensure_envelope(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
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
