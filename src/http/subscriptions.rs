//! `/v1/subscriptions`: webhook subscriptions and their deliveries (admin).

use axum::extract::OriginalUri;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::closed::DeliveryStatusView;
use super::error::{ApiError, ErrorBody};
use super::extract::{Json, Path, Query, page_size};
use super::ledger::EventView;
use super::paging::{Paged, next_cursor};
use crate::domain::ids::{CalleeId, DeliveryId, SubscriptionId};
use crate::domain::webhook::{Attempt, Delivery, Health, Subscription};
use crate::service::webhooks::{self, NewSubscription, PingResult};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSubscription {
    /// Where deliveries are POSTed: http or https, and reachable under the registry's outbound
    /// policy (checked now).
    #[schema(max_length = 2048)]
    pub url: String,
    /// Only events about this callee; every callee's when absent.
    pub callee_id: Option<Uuid>,
    /// Only these event types: `subject.created`, `subject.promoted`, `subject.demoted`,
    /// `subject.withdrawn`, `card.republished`, `card.untrusted`, `probe.finished`,
    /// `subscription.failing`. All when absent (`subscription.failing` only to subscriptions
    /// not scoped to a callee, unless they name it).
    pub events: Option<Vec<String>>,
    #[schema(max_length = 500)]
    pub description: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionView {
    pub id: Uuid,
    pub url: String,
    pub callee_id: Option<Uuid>,
    /// The types delivered; absent: all.
    pub events: Option<Vec<String>>,
    pub description: Option<String>,
    /// `active`; `paused` by an admin (deliveries queue up until it is resumed); or `disabled`
    /// once the receiver answered 410 Gone.
    pub status: SubscriptionStatusView,
    /// How its receiver fares: `healthy`; `erring` (every attempt since `failing_since` has
    /// failed); `failing` (so for a day or more, `CARDGATE_WEBHOOK_FAILING_AFTER_SECS`).
    pub health: HealthView,
    /// Since when every attempt has failed; absent while the last one succeeded.
    pub failing_since: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Until when the secret before the last rotation also signs.
    pub previous_secret_until: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionStatusView {
    Active,
    Paused,
    Disabled,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthView {
    Healthy,
    Erring,
    Failing,
}

impl SubscriptionView {
    /// The subscription as seen at `now`, `failing` past `threshold` of failures.
    pub fn at(s: Subscription, now: DateTime<Utc>, threshold: std::time::Duration) -> Self {
        let health = match Health::at(s.failing_since, now, threshold) {
            Health::Healthy => HealthView::Healthy,
            Health::Erring { .. } => HealthView::Erring,
            Health::Failing { .. } => HealthView::Failing,
        };
        let status = match s.status {
            crate::domain::webhook::SubscriptionStatus::Active => SubscriptionStatusView::Active,
            crate::domain::webhook::SubscriptionStatus::Paused => SubscriptionStatusView::Paused,
            crate::domain::webhook::SubscriptionStatus::Disabled => {
                SubscriptionStatusView::Disabled
            }
        };
        Self {
            health,
            status,
            failing_since: s.failing_since,
            id: s.id.0,
            url: s.url,
            callee_id: s.callee_id.map(|c| c.0),
            events: s
                .events
                .map(|e| e.iter().map(|t| t.as_str().to_string()).collect()),
            description: s.description,
            created_at: s.created_at,
            previous_secret_until: s.previous_until,
        }
    }
}

/// A subscription with its signing secret: only in the answer that made the secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionWithSecret {
    #[serde(flatten)]
    pub subscription: SubscriptionView,
    /// `whsec_` + base64 of 32 random bytes: the key of the `webhook-signature` HMAC.
    pub secret: String,
}

impl SubscriptionWithSecret {
    fn at(s: Subscription, now: DateTime<Utc>, threshold: std::time::Duration) -> Self {
        let secret = s.secret.clone();
        Self {
            subscription: SubscriptionView::at(s, now, threshold),
            secret,
        }
    }
}

/// What a test ping came to.
#[derive(Debug, Serialize, ToSchema)]
pub struct PingView {
    /// The `webhook-id` the ping carried (`ping_…`).
    pub id: String,
    /// The receiver answered 2xx.
    pub delivered: bool,
    /// The receiver's status, if it answered.
    pub status_code: Option<u16>,
    /// Why it was not delivered.
    pub error: Option<String>,
}

impl From<PingResult> for PingView {
    fn from(p: PingResult) -> Self {
        let (delivered, status_code, error) = match p.attempt {
            Attempt::Delivered { status } => (true, Some(status), None),
            Attempt::Gone => (false, Some(410), Some("410 Gone".to_string())),
            Attempt::Failed { status, error, .. } => (false, status, Some(error)),
        };
        Self {
            id: p.id,
            delivered,
            status_code,
            error,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionList {
    /// In creation order.
    pub items: Vec<SubscriptionView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<Uuid>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    /// The `webhook-id` of every attempt.
    pub id: Uuid,
    pub subscription_id: Uuid,
    /// The ledger event announced.
    pub seq: i64,
    pub event_type: String,
    pub status: DeliveryStatusView,
    pub attempts: i32,
    /// When a pending delivery is tried next.
    pub next_attempt_at: DateTime<Utc>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        Self {
            id: d.id.0,
            subscription_id: d.subscription_id.0,
            seq: d.seq,
            event_type: d.event_type.as_str().to_string(),
            status: (&d.status).into(),
            attempts: d.attempts,
            next_attempt_at: d.next_attempt_at,
            last_status_code: d.last_status_code,
            last_error: d.last_error,
            created_at: d.created_at,
            finished_at: d.finished_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    /// Newest event first.
    pub items: Vec<DeliveryView>,
    /// Pass as `after` for the next page (older deliveries); absent on the last page.
    pub next: Option<Uuid>,
}

/// The body of every webhook delivery (the OpenAPI `webhooks` section names it). The
/// subscription's receiver checks the `webhook-signature` header before trusting it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookPayload {
    /// `subject.created`, `subject.promoted`, `subject.demoted`, `subject.withdrawn`,
    /// `card.republished`, `card.untrusted` or `probe.finished` (a ledger event), or
    /// `subscription.failing` (news about the registry's own receivers).
    #[serde(rename = "type")]
    pub kind: String,
    /// When the event was recorded (RFC 3339).
    pub timestamp: DateTime<Utc>,
    pub data: WebhookBody,
}

/// What a delivery announces: a ledger event about a subject, or a failing receiver.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum WebhookBody {
    Event(Box<WebhookData>),
    SubscriptionFailing(FailingData),
}

impl WebhookBody {
    /// The ledger event's data, for a delivery that announces one.
    pub fn event(&self) -> Option<&WebhookData> {
        match self {
            Self::Event(data) => Some(data.as_ref()),
            Self::SubscriptionFailing(_) => None,
        }
    }
}

/// `subscription.failing`: another subscription's receiver has failed every attempt since
/// `failing_since`, for the failing threshold (a day by default). Sent once per failure to
/// every other subscription that takes all event types registry-wide or names this one;
/// carries no ledger event (its delivery's `seq` is 0).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailingData {
    pub subscription: FailingSubscription,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailingSubscription {
    pub id: Uuid,
    /// Its operator's description, if any (never its URL, which may hold a token).
    pub description: Option<String>,
    pub failing_since: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookData {
    /// The ledger event, as `GET /v1/ledger` shows it (with its seq and hash).
    pub event: EventView,
    /// The subject as it stands after the event.
    pub subject: WebhookSubject,
    /// The seq of the event before this one about the same subject in this subscription: the
    /// newest earlier one of a type it asks for, since it was created (`null` for the first;
    /// events announced while it was disabled count, as a gap). Deliveries about one subject arrive in ledger order, unless one
    /// kept failing past the hold-back: then later ones go out first, and a `previous_seq`
    /// that is not the last seq the receiver saw for the subject marks the gap, to be filled
    /// from `GET /v1/ledger` (or `/v1/events`) while the late delivery keeps retrying.
    pub previous_seq: Option<i64>,
    /// On `subject.promoted` and `subject.demoted`: the signed in-toto attestation of the
    /// verdict (a DSSE envelope, as `GET /v1/attestations` lists it), when it was made before
    /// the first attempt, as it almost always is; else read it from `GET /v1/attestations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<super::attestations::EnvelopeView>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSubject {
    /// `untrusted`, `card-trusted`, `lifecycle-trusted` or `demoted`.
    pub gate_state: String,
    /// Why the current card cannot be trusted, if it cannot.
    pub card_untrusted: Option<String>,
    /// The current card no longer offers this version.
    pub withdrawn: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
}

/// Subscribe a URL to trust changes. The signing secret is in this answer only.
#[utoipa::path(post, path = "/v1/subscriptions", tag = "subscriptions",
    request_body = CreateSubscription, security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Subscribed; `secret` is shown only now", body = SubscriptionWithSecret),
        (status = 400, description = "Malformed body, URL or event type", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
        (status = 422, description = "The URL may not be delivered to (outbound policy)", body = ErrorBody),
    ))]
pub async fn create_subscription(
    State(app): State<ApiState>,
    Json(body): Json<CreateSubscription>,
) -> Result<(StatusCode, Json<SubscriptionWithSecret>), ApiError> {
    let new = NewSubscription {
        url: body.url,
        callee_id: body.callee_id.map(CalleeId),
        events: body.events,
        description: body.description,
    };
    let created = webhooks::create(&app.services, new, app.services.now()).await?;
    let (now, threshold) = (app.services.now(), app.services.webhooks.failing_after);
    Ok((
        StatusCode::CREATED,
        Json(SubscriptionWithSecret::at(created, now, threshold)),
    ))
}

/// Every subscription (never their secrets).
#[utoipa::path(get, path = "/v1/subscriptions", tag = "subscriptions",
    security(("bearer" = ["admin"])), params(SubscriptionQuery),
    responses((status = 200, description = "Subscriptions", body = SubscriptionList)))]
pub async fn list_subscriptions(
    State(app): State<ApiState>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<SubscriptionQuery>,
) -> Result<Paged<SubscriptionList>, ApiError> {
    let limit = page_size(q.limit)?;
    let items = webhooks::list(&app.services.store, q.after.map(SubscriptionId), limit).await?;
    let next = next_cursor(&items, limit, |s| s.id.0);
    let page = SubscriptionList {
        items: items.into_iter().map(|s| view(&app, s)).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// One subscription.
#[utoipa::path(get, path = "/v1/subscriptions/{id}", tag = "subscriptions",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionView),
        (status = 404, description = "No such subscription", body = ErrorBody),
    ))]
pub async fn get_subscription(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let found = webhooks::get(&app.services.store, SubscriptionId(id)).await?;
    Ok(Json(view(&app, found)))
}

/// Unsubscribe: nothing more is sent, and pending deliveries are dropped.
#[utoipa::path(delete, path = "/v1/subscriptions/{id}", tag = "subscriptions",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such subscription", body = ErrorBody),
    ))]
pub async fn delete_subscription(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    webhooks::delete(&app.services.store, SubscriptionId(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new signing secret. For a day both sign, so the receiver can switch without a gap.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/rotate-secret", tag = "subscriptions",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "Rotated; the new `secret` is shown only now", body = SubscriptionWithSecret),
        (status = 404, description = "No such subscription", body = ErrorBody),
    ))]
pub async fn rotate_secret(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<SubscriptionWithSecret>, ApiError> {
    let rotated = webhooks::rotate(&app.services, SubscriptionId(id), app.services.now()).await?;
    let (now, threshold) = (app.services.now(), app.services.webhooks.failing_after);
    Ok(Json(SubscriptionWithSecret::at(rotated, now, threshold)))
}

/// Pause a subscription: deliveries keep queueing, and none is sent until it is resumed.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/pause", tag = "subscriptions",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "Paused", body = SubscriptionView),
        (status = 404, description = "No such subscription", body = ErrorBody),
    ))]
pub async fn pause_subscription(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let paused = webhooks::pause(&app.services.store, SubscriptionId(id)).await?;
    Ok(Json(view(&app, paused)))
}

/// Resume a paused subscription (or one disabled by a 410): its queued deliveries go out, in
/// order per subject.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/resume", tag = "subscriptions",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "Active again", body = SubscriptionView),
        (status = 404, description = "No such subscription", body = ErrorBody),
    ))]
pub async fn resume_subscription(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let resumed = webhooks::resume(&app.services, SubscriptionId(id)).await?;
    Ok(Json(view(&app, resumed)))
}

/// Send a signed `ping` to the subscription's URL now and say how the receiver answered
/// (nothing is queued or recorded; a paused subscription is pinged too).
#[utoipa::path(post, path = "/v1/subscriptions/{id}/test", tag = "subscriptions",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "Sent; `delivered` says whether the receiver took it", body = PingView),
        (status = 404, description = "No such subscription", body = ErrorBody),
    ))]
pub async fn test_subscription(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<PingView>, ApiError> {
    let ping = webhooks::test(&app.services, SubscriptionId(id)).await?;
    Ok(Json(ping.into()))
}

/// The view of `s` now.
fn view(app: &ApiState, s: Subscription) -> SubscriptionView {
    SubscriptionView::at(s, app.services.now(), app.services.webhooks.failing_after)
}

/// A subscription's deliveries and their attempts, newest event first.
#[utoipa::path(get, path = "/v1/subscriptions/{id}/deliveries", tag = "subscriptions",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Subscription id"), DeliveryQuery),
    responses(
        (status = 200, description = "Deliveries", body = DeliveryList),
        (status = 404, description = "No such subscription", body = ErrorBody),
    ))]
pub async fn list_deliveries(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<DeliveryQuery>,
) -> Result<Paged<DeliveryList>, ApiError> {
    let limit = page_size(q.limit)?;
    let after = q.after.map(DeliveryId);
    let items = webhooks::deliveries(&app.services.store, SubscriptionId(id), after, limit).await?;
    let next = next_cursor(&items, limit, |d| d.id.0);
    let page = DeliveryList {
        items: items.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// Send a delivery again (a failed one, say), in its turn among the subscription's deliveries.
#[utoipa::path(post, path = "/v1/subscriptions/{id}/deliveries/{delivery_id}/retry",
    tag = "subscriptions", security(("bearer" = ["admin"])),
    params(
        ("id" = Uuid, Path, description = "Subscription id"),
        ("delivery_id" = Uuid, Path, description = "Delivery id (its webhook-id)"),
    ),
    responses(
        (status = 202, description = "Queued again", body = DeliveryView),
        (status = 404, description = "No such subscription or delivery", body = ErrorBody),
    ))]
pub async fn retry_delivery(
    State(app): State<ApiState>,
    Path((id, delivery)): Path<(Uuid, Uuid)>,
) -> Result<(StatusCode, Json<DeliveryView>), ApiError> {
    let queued = webhooks::retry(
        &app.services,
        SubscriptionId(id),
        DeliveryId(delivery),
        app.services.now(),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(queued.into())))
}
