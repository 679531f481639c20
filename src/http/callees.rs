//! `/v1/callees`: registering and browsing callees.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::OriginalUri;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::cards::SnapshotSummary;
use super::closed::{FetchStatusView, RunStatusView};
use super::credentials::{CredentialBody, credentials_of};
use super::error::{ApiError, ErrorBody};
use super::extract::{self, Json, Path, Query, page_size};
use super::ledger::EventView;
use super::paging::{Paged, next_cursor};
use super::permissions::Caller;
use super::views::GateStateView;
use crate::domain::gate::Subject;
use crate::domain::ids::CalleeId;
use crate::domain::probe::{ProbeRun, ProbeScript};
use crate::service::callees::{self, CalleeDetail, RefreshOutcome, Registration, Revalidate};

/// Register a callee by its card URL.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateCallee {
    /// An origin (`https://agent.example`), its well-known card URL, or the legacy
    /// `/.well-known/agent.json` URL.
    #[schema(
        example = "https://agent.example",
        max_length = 2048,
        pattern = r"^https?://([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(:[1-9][0-9]{0,3})?(/[A-Za-z0-9._~-]*)*$"
    )]
    pub card_url: String,
    /// A label for operators.
    #[schema(max_length = 200)]
    pub name: Option<String>,
    /// A JWKS to pin for this callee: only these keys will verify its card (its `jku` is then
    /// ignored). Public keys only.
    #[serde(default, deserialize_with = "extract::object_or_null")]
    pub trusted_keys: Option<Jwks>,
    /// What the probe says to this callee; unset fields take neutral defaults.
    #[serde(default, deserialize_with = "extract::object_or_null")]
    pub probe: Option<ProbeScriptBody>,
    /// Credentials for the card's security schemes, by scheme name (as
    /// `PUT /v1/callees/{id}/credentials/{scheme}` takes them), stored with the callee. At
    /// most 16.
    #[serde(default, deserialize_with = "extract::object_or_null")]
    pub credentials: Option<BTreeMap<String, CredentialBody>>,
}

/// The probe script: the texts cardgate sends.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeScriptBody {
    /// The first message of the lifecycle task.
    #[schema(min_length = 1, max_length = 2000, pattern = r"\S")]
    pub message: Option<String>,
    /// Texts for `input-required` turns, in order.
    #[schema(max_items = 8, inline)]
    pub follow_ups: Option<Vec<ProbeText>>,
    /// The first message of the push task, sent with cardgate's webhook inline in its
    /// configuration, so that even a task that finishes at once notifies. Default: `message`.
    #[schema(min_length = 1, max_length = 2000, pattern = r"\S")]
    pub push_message: Option<String>,
    /// A task started with this text is canceled, and the cancel is checked.
    #[schema(min_length = 1, max_length = 2000, pattern = r"\S")]
    pub cancel_message: Option<String>,
}

/// One probe text.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(min_length = 1, max_length = 2000, pattern = r"\S")]
#[serde(transparent)]
pub struct ProbeText(pub String);

/// A JWKS of public signing keys.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Jwks {
    #[schema(max_items = 20)]
    #[serde(deserialize_with = "at_most_20_keys")]
    pub keys: Vec<PublicJwk>,
}

/// A public key. Private parameters (`d`, `p`, `q`, …) and symmetric keys are not accepted.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublicJwk {
    pub kty: KeyType,
    #[schema(min_length = 1, max_length = 100)]
    #[serde(deserialize_with = "key_id")]
    pub kid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    #[schema(
        pattern = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-][AQgw]|[A-Za-z0-9_-]{2}[AEIMQUYcgkosw048])?$",
        min_length = 2
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    #[schema(
        pattern = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-][AQgw]|[A-Za-z0-9_-]{2}[AEIMQUYcgkosw048])?$",
        min_length = 2
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    #[schema(
        pattern = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-][AQgw]|[A-Za-z0-9_-]{2}[AEIMQUYcgkosw048])?$",
        min_length = 2
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    #[schema(
        pattern = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-][AQgw]|[A-Za-z0-9_-]{2}[AEIMQUYcgkosw048])?$",
        min_length = 2
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    #[serde(rename = "use", skip_serializing_if = "Option::is_none")]
    pub key_use: Option<String>,
}

/// A JWKS is a handful of keys; twenty is generous for rotation and still bounds the work of
/// matching each signature against them.
fn at_most_20_keys<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<PublicJwk>, D::Error> {
    let keys: Vec<PublicJwk> = extract::objects(deserializer)?;
    if keys.len() > 20 {
        return Err(serde::de::Error::custom(format!(
            "a JWKS holds at most 20 keys, not {}",
            keys.len()
        )));
    }
    Ok(keys)
}

/// A `kid` as the schema documents it: 1 to 100 characters (it names the key in logs and
/// errors, and is matched against the signatures' headers).
fn key_id<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let kid = String::deserialize(deserializer)?;
    match kid.chars().count() {
        1..=100 => Ok(kid),
        _ => Err(serde::de::Error::custom(
            "`kid` must be 1 to 100 characters",
        )),
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
pub(crate) enum KeyType {
    #[serde(rename = "EC")]
    Ec,
    #[serde(rename = "OKP")]
    Okp,
    #[serde(rename = "RSA")]
    Rsa,
}

impl Jwks {
    fn into_value(self) -> Result<serde_json::Value, ApiError> {
        serde_json::to_value(self).map_err(|e| ApiError::Internal(e.into()))
    }
}

impl From<ProbeScriptBody> for ProbeScript {
    fn from(b: ProbeScriptBody) -> Self {
        let defaults = ProbeScript::default();
        ProbeScript {
            message: b.message.unwrap_or(defaults.message),
            follow_ups: b.follow_ups.map_or(defaults.follow_ups, |f| {
                f.into_iter().map(|t| t.0).collect()
            }),
            push_message: b.push_message,
            cancel_message: b.cancel_message,
        }
    }
}

/// Replace (or, with `null`, clear) the pinned keys.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrustedKeys {
    /// A JWKS (`{"keys":[…]}`) of public keys, or `null`.
    #[serde(default, deserialize_with = "extract::object_or_null")]
    pub trusted_keys: Option<Jwks>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CalleeView {
    pub id: Uuid,
    pub card_url: String,
    pub name: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Whether the operator pinned keys for this callee's card.
    pub trusted_keys_pinned: bool,
    /// The newest card snapshot.
    pub card: Option<SnapshotSummary>,
    pub last_fetch: LastFetchView,
    /// One entry per `Major.Minor` the card offers (or offered).
    pub subjects: Vec<SubjectView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LastFetchView {
    pub at: Option<DateTime<Utc>>,
    pub status: Option<FetchStatusView>,
    pub error: Option<String>,
    /// Consecutive fetches that gave no trusted card (failed or untrusted; a deferred fetch
    /// leaves the count as it was).
    pub failures: i32,
    /// Not refreshed on schedule before this (backoff after failures, or the host's
    /// `Retry-After`).
    pub next_at: Option<DateTime<Utc>>,
}

/// What a refresh did.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RefreshView {
    /// `fetched` (new trusted snapshot), `unchanged` (304 or same bytes), `untrusted` (new
    /// snapshot that did not parse or verify), `failed` (not fetched) or `deferred` (the host
    /// asked cardgate to wait: nothing held against the agent; fetched again then).
    pub status: FetchStatusView,
    pub snapshot_id: Option<Uuid>,
    pub error: Option<String>,
    /// The ledger events the refresh appended.
    pub events: Vec<EventView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SubjectView {
    #[schema(example = "1.0")]
    pub protocol_version: String,
    pub gate_state: GateStateView,
    /// The card no longer offers this version.
    pub withdrawn: bool,
    /// The subject's newest ledger event.
    pub ledger_seq: i64,
    /// Where the gate state last changed.
    pub last_change: ChangeView,
    /// The newest probe run of this subject.
    pub last_probe: Option<ProbeRef>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProbeRef {
    pub id: Uuid,
    pub status: RunStatusView,
    pub passed: Option<bool>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChangeView {
    pub seq: i64,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CalleePage {
    pub items: Vec<CalleeView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<Uuid>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
    /// Only the callee registered with this card URL (compared after the same normalization
    /// as at registration): a page of one, or of none.
    pub card_url: Option<String>,
}

impl SubjectView {
    fn new(s: &Subject, last_probe: Option<&ProbeRun>) -> Self {
        Self {
            protocol_version: s.protocol_version.to_string(),
            gate_state: s.gate().into(),
            withdrawn: s.state.withdrawn,
            ledger_seq: s.last_seq,
            last_change: ChangeView {
                seq: s.last_change.seq,
                at: s.last_change.at,
            },
            last_probe: last_probe.map(|r| ProbeRef {
                id: r.id.0,
                status: (&r.status()).into(),
                passed: r.passed(),
                finished_at: r.finished_at(),
            }),
        }
    }
}

impl From<CalleeDetail> for CalleeView {
    fn from(d: CalleeDetail) -> Self {
        Self {
            id: d.callee.id.0,
            card_url: d.callee.card_url.to_string(),
            name: d.callee.name,
            created_at: d.callee.created_at,
            trusted_keys_pinned: d.callee.trusted_keys.is_some(),
            card: d.latest_card.as_ref().map(Into::into),
            last_fetch: LastFetchView {
                at: d.callee.fetch.last_at,
                status: d.callee.fetch.status.as_ref().map(Into::into),
                error: d.callee.fetch.error.clone(),
                failures: d.callee.fetch.failures,
                next_at: d.callee.fetch.next_at,
            },
            subjects: d
                .subjects
                .iter()
                .map(|s| SubjectView::new(s, d.last_probes.get(&s.protocol_version)))
                .collect(),
        }
    }
}

/// Register a callee: its card is fetched, parsed and verified now.
///
/// On success its subjects (one per `Major.Minor` the card offers) start `card-trusted`. When
/// the card cannot be fetched, parsed or verified the answer is 422 with the precise reason,
/// and nothing is stored.
#[utoipa::path(post, path = "/v1/callees", tag = "callees",
    security(("bearer" = ["admin"])), request_body = CreateCallee,
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 201, description = "Registered", body = CalleeView),
        (status = 400, description = "Malformed body, card URL or trusted_keys", body = ErrorBody),
        (status = 409, description = "The card URL is already registered", body = ErrorBody),
        (status = 422, description = "The card cannot be fetched, parsed or verified, or a credential does not fit its scheme", body = ErrorBody),
    ))]
pub(crate) async fn create_callee(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<CreateCallee>,
) -> Result<(StatusCode, Json<CalleeView>), ApiError> {
    let registration = Registration {
        card_url: body.card_url,
        name: body.name,
        trusted_keys: body.trusted_keys.map(Jwks::into_value).transpose()?,
        probe: body.probe.map(Into::into),
        credentials: credentials_of(body.credentials)?,
    };
    let detail = callees::register(&app.services, registration, &caller.actor()).await?;
    Ok((StatusCode::CREATED, Json(detail.into())))
}

/// List callees in registration order, or find one by its card URL.
#[utoipa::path(get, path = "/v1/callees", tag = "callees",
    security(("bearer" = ["reader"])), params(PageQuery),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "A page of callees", body = CalleePage),
        (status = 400, description = "Bad paging parameters", body = ErrorBody),
    ))]
pub(crate) async fn list_callees(
    State(app): State<ApiState>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<PageQuery>,
) -> Result<Paged<CalleePage>, ApiError> {
    let limit = page_size(q.limit)?;
    let store = &app.services.store;
    if let Some(card_url) = q.card_url {
        let found = match callees::find_by_card_url(store, &card_url).await? {
            Some(id) => vec![callees::get(&app.services, id).await?],
            None => Vec::new(),
        };
        let page = CalleePage {
            items: found.into_iter().map(Into::into).collect(),
            next: None,
        };
        return Ok(Paged::new(&uri, page, None::<Uuid>));
    }
    let page = callees::list(store, q.after.map(CalleeId), limit).await?;
    let next = next_cursor(&page, limit, |d| d.callee.id.0);
    let page = CalleePage {
        items: page.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// One callee with its subjects.
#[utoipa::path(get, path = "/v1/callees/{id}", tag = "callees",
    security(("bearer" = ["reader"])),
    params(("id" = Uuid, Path, description = "Callee id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "The callee", body = CalleeView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn get_callee(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<CalleeView>, ApiError> {
    Ok(Json(
        callees::get(&app.services, CalleeId(id)).await?.into(),
    ))
}

/// Fetch the callee's card again now and record what changed.
///
/// Same bytes (or 304): nothing new. A changed card with the same versions: `card-republished`
/// (gates do not move). A new `Major.Minor`: `version-appeared` and a new `card-trusted`
/// subject. A version gone: `version-withdrawn`. A card that no longer verifies (or cannot be
/// fetched): `card-untrusted`, and callers are told `untrusted`.
#[utoipa::path(post, path = "/v1/callees/{id}/refresh", tag = "callees",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Callee id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "What the refresh found", body = RefreshView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn refresh_callee(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
) -> Result<Json<RefreshView>, ApiError> {
    let outcome = callees::refresh(
        &app.services,
        CalleeId(id),
        Revalidate::IfChanged,
        &caller.actor(),
        None,
    )
    .await?;
    Ok(Json(outcome.into()))
}

impl From<RefreshOutcome> for RefreshView {
    fn from(outcome: RefreshOutcome) -> Self {
        Self {
            status: (&outcome.status).into(),
            snapshot_id: outcome.snapshot_id.map(|s| s.0),
            error: outcome.error,
            events: outcome.events.into_iter().map(Into::into).collect(),
        }
    }
}

/// Replace the callee's pinned keys (`null` clears them), and judge the card afresh with them.
#[utoipa::path(put, path = "/v1/callees/{id}/trusted-keys", tag = "callees",
    security(("bearer" = ["admin"])), request_body = TrustedKeys,
    params(("id" = Uuid, Path, description = "Callee id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "The card judged with the new keys", body = RefreshView),
        (status = 400, description = "Malformed id or JWKS", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn put_trusted_keys(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
    Json(body): Json<TrustedKeys>,
) -> Result<Json<RefreshView>, ApiError> {
    let outcome = callees::set_trusted_keys(
        &app.services,
        CalleeId(id),
        body.trusted_keys.map(Jwks::into_value).transpose()?,
        &caller.actor(),
    )
    .await?;
    Ok(Json(outcome.into()))
}
