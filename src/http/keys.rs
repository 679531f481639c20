//! `/v1/keys`: API key management (admin).

use axum::Extension;
use axum::extract::OriginalUri;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::{Json, Path, Query, page_size};
use super::paging::{Paged, next_cursor};
use super::permissions::Caller;
use crate::domain::apikey::{ApiKey, Role};
use crate::domain::ids::ApiKeyId;
use crate::service::keys;

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RoleView {
    /// Read decisions, callees, the ledger.
    Reader,
    /// Also submit violation reports.
    Reporter,
    /// Also manage callees, probes, jobs and keys.
    Admin,
}

impl From<RoleView> for Role {
    fn from(r: RoleView) -> Self {
        match r {
            RoleView::Reader => Role::Reader,
            RoleView::Reporter => Role::Reporter,
            RoleView::Admin => Role::Admin,
        }
    }
}

impl From<Role> for RoleView {
    fn from(r: Role) -> Self {
        match r {
            Role::Reader => RoleView::Reader,
            Role::Reporter => RoleView::Reporter,
            Role::Admin => RoleView::Admin,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateKey {
    /// Who or what uses the key.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub name: String,
    pub role: RoleView,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KeyView {
    pub id: Uuid,
    pub name: String,
    pub role: RoleView,
    /// The key's first characters, to tell keys apart.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new key with its secret: shown this once and never again.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CreatedKey {
    #[serde(flatten)]
    pub info: KeyView,
    /// Use as `Authorization: Bearer <key>`. Store it now: only its hash is kept.
    pub key: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KeyList {
    /// In creation order.
    pub items: Vec<KeyView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<Uuid>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyQuery {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Cursor: the `next` of the previous page.
    pub after: Option<Uuid>,
}

impl From<ApiKey> for KeyView {
    fn from(k: ApiKey) -> Self {
        Self {
            id: k.id.0,
            name: k.name,
            role: k.role.into(),
            prefix: k.prefix,
            created_at: k.created_at,
            created_by: k.created_by,
            revoked_at: k.revoked_at,
        }
    }
}

/// Create an API key. The key is in this response only.
#[utoipa::path(post, path = "/v1/keys", tag = "keys", request_body = CreateKey,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Created; `key` is shown only now", body = CreatedKey),
        (status = 400, description = "Malformed body", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an admin key", body = ErrorBody),
    ))]
pub(crate) async fn create_key(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<CreateKey>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    let (key, secret) = keys::create(
        &app.services.store,
        Some(&app.services.view),
        &body.name,
        body.role.into(),
        &caller.actor(),
        app.services.now(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            info: key.into(),
            key: secret.0,
        }),
    ))
}

/// List API keys (never their secrets).
#[utoipa::path(get, path = "/v1/keys", tag = "keys",
    security(("bearer" = ["admin"])), params(KeyQuery),
    responses(
        (status = 200, description = "Keys", body = KeyList),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an admin key", body = ErrorBody),
    ))]
pub(crate) async fn list_keys(
    State(app): State<ApiState>,
    OriginalUri(uri): OriginalUri,
    Query(q): Query<KeyQuery>,
) -> Result<Paged<KeyList>, ApiError> {
    let limit = page_size(q.limit)?;
    let keys = keys::list(&app.services.store, q.after.map(ApiKeyId), limit).await?;
    let next = next_cursor(&keys, limit, |k| k.id.0);
    let page = KeyList {
        items: keys.into_iter().map(Into::into).collect(),
        next,
    };
    Ok(Paged::new(&uri, page, next))
}

/// Revoke an API key. It fails at once, everywhere.
#[utoipa::path(delete, path = "/v1/keys/{id}", tag = "keys",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Key id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an admin key", body = ErrorBody),
        (status = 404, description = "No such key", body = ErrorBody),
    ))]
pub(crate) async fn revoke_key(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    keys::revoke(
        &app.services.store,
        Some(&app.services.view),
        ApiKeyId(id),
        &caller.actor(),
        app.services.now(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
