//! `/v1/callees/{id}/credentials`: the credentials cardgate presents to a callee whose card
//! requires them, one per security scheme. Admin only; a secret goes in and never comes out.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use super::extract::{Json, Path};
use super::permissions::Caller;
use crate::domain::credential::{Credential, Secret};
use crate::domain::ids::CalleeId;
use crate::service::credentials::{self, CredentialInfo};

/// A credential for one of the card's security schemes. Its `kind` must fit the scheme's type:
/// `bearer` an HTTP bearer scheme, `api-key` an `apiKey` scheme (where the key goes and its
/// name come from the card), `oauth2-client-credentials` an OAuth 2.0 or OpenID Connect
/// scheme, `mtls` a mutual-TLS scheme. Secrets are write-only: sealed at rest, never shown.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CredentialBody {
    /// `Authorization: Bearer <token>`.
    Bearer {
        #[schema(write_only, min_length = 1, max_length = 8192)]
        token: String,
    },
    /// The API key's value.
    ApiKey {
        #[schema(write_only, min_length = 1, max_length = 8192)]
        value: String,
    },
    /// A client of the authorization server (RFC 6749 §4.4). The token URL defaults to the
    /// scheme's client-credentials flow, or its OpenID Connect discovery document.
    #[serde(rename = "oauth2-client-credentials")]
    OAuth2ClientCredentials {
        #[schema(min_length = 1, max_length = 1024)]
        client_id: String,
        #[schema(write_only, min_length = 1, max_length = 8192)]
        client_secret: String,
        /// Asked for besides those the card's requirement lists.
        #[schema(max_items = 32)]
        scopes: Option<Vec<String>>,
        #[schema(max_length = 2048)]
        token_url: Option<String>,
    },
    /// A TLS client certificate (chain) and its private key, PEM; used over HTTPS and gRPC.
    Mtls {
        #[schema(max_length = 65536)]
        certificate_pem: String,
        #[schema(write_only, max_length = 65536)]
        private_key_pem: String,
    },
}

/// Bounds the schema states, enforced here too (a body is refused whole, before any use).
const MAX_SECRET: usize = 8192;
const MAX_PEM: usize = 65536;

impl TryFrom<CredentialBody> for Credential {
    type Error = ApiError;
    fn try_from(body: CredentialBody) -> Result<Self, ApiError> {
        let bounded = |field: &str, value: &str, max: usize| {
            if value.len() > max {
                Err(ApiError::invalid(format!(
                    "`{field}` is longer than {max} bytes"
                )))
            } else {
                Ok(())
            }
        };
        Ok(match body {
            CredentialBody::Bearer { token } => {
                bounded("token", &token, MAX_SECRET)?;
                Credential::Bearer {
                    token: Secret::new(token),
                }
            }
            CredentialBody::ApiKey { value } => {
                bounded("value", &value, MAX_SECRET)?;
                Credential::ApiKey {
                    value: Secret::new(value),
                }
            }
            CredentialBody::OAuth2ClientCredentials {
                client_id,
                client_secret,
                scopes,
                token_url,
            } => {
                bounded("client_id", &client_id, 1024)?;
                bounded("client_secret", &client_secret, MAX_SECRET)?;
                bounded("token_url", token_url.as_deref().unwrap_or_default(), 2048)?;
                if scopes.as_ref().is_some_and(|s| s.len() > 32) {
                    return Err(ApiError::invalid("at most 32 `scopes`"));
                }
                Credential::OAuth2ClientCredentials {
                    client_id,
                    client_secret: Secret::new(client_secret),
                    scopes,
                    token_url,
                }
            }
            CredentialBody::Mtls {
                certificate_pem,
                private_key_pem,
            } => {
                bounded("certificate_pem", &certificate_pem, MAX_PEM)?;
                bounded("private_key_pem", &private_key_pem, MAX_PEM)?;
                Credential::Mtls {
                    certificate_pem,
                    private_key_pem: Secret::new(private_key_pem),
                }
            }
        })
    }
}

/// Registration's `credentials`: scheme name → credential.
pub(crate) fn credentials_of(
    body: Option<BTreeMap<String, CredentialBody>>,
) -> Result<BTreeMap<String, Credential>, ApiError> {
    let body = body.unwrap_or_default();
    if body.len() > 16 {
        return Err(ApiError::invalid("at most 16 `credentials`"));
    }
    body.into_iter()
        .map(|(scheme, c)| Ok((scheme, Credential::try_from(c)?)))
        .collect()
}

/// A credential as listings show it: what it is for, never what it is.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CredentialView {
    /// The card's `securitySchemes` entry it is presented for.
    pub scheme: String,
    #[schema(example = "bearer")]
    pub kind: String,
    /// `sha256:` and 16 hex digits of the token, key value or client secret, or of the
    /// certificate's DER: enough to tell which one is set, too little to recover it.
    #[schema(example = "sha256:9f86d081884c7d65")]
    pub fingerprint: String,
    pub set_at: DateTime<Utc>,
    /// Who set it (`key:<name>`, `admin-token`).
    pub set_by: String,
}

impl From<CredentialInfo> for CredentialView {
    fn from(c: CredentialInfo) -> Self {
        Self {
            scheme: c.scheme,
            kind: c.kind.to_string(),
            fingerprint: c.fingerprint,
            set_at: c.set_at,
            set_by: c.set_by,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CredentialList {
    pub credentials: Vec<CredentialView>,
}

/// Set the credential presented for one of the callee's card's security schemes.
///
/// The scheme must be declared in the card's `securitySchemes`, and the credential's `kind`
/// must fit its type (a mismatch is 422 naming both). It replaces what was set before, and
/// the next probe presents it.
#[utoipa::path(put, path = "/v1/callees/{id}/credentials/{scheme}", tag = "callees",
    security(("bearer" = ["admin"])), request_body = CredentialBody,
    params(
        ("id" = Uuid, Path, description = "Callee id"),
        ("scheme" = String, Path, description = "A key of the card's `securitySchemes`"),
    ),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "Set (the secret is not shown)", body = CredentialView),
        (status = 400, description = "Malformed id or credential", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
        (status = 409, description = "The callee has no readable card yet", body = ErrorBody),
        (status = 422, description = "The card declares no such scheme, or the kind does not fit it", body = ErrorBody),
    ))]
pub(crate) async fn put_credential(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((id, scheme)): Path<(Uuid, String)>,
    Json(body): Json<CredentialBody>,
) -> Result<Json<CredentialView>, ApiError> {
    let credential = Credential::try_from(body)?;
    let info = credentials::put(
        &app.services,
        CalleeId(id),
        &scheme,
        credential,
        &caller.actor(),
    )
    .await?;
    Ok(Json(info.into()))
}

/// Remove the credential set for one scheme.
#[utoipa::path(delete, path = "/v1/callees/{id}/credentials/{scheme}", tag = "callees",
    security(("bearer" = ["admin"])),
    params(
        ("id" = Uuid, Path, description = "Callee id"),
        ("scheme" = String, Path, description = "A key of the card's `securitySchemes`"),
    ),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 404, description = "No such callee, or nothing set for the scheme", body = ErrorBody),
    ))]
pub(crate) async fn delete_credential(
    State(app): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((id, scheme)): Path<(Uuid, String)>,
) -> Result<StatusCode, ApiError> {
    credentials::delete(&app.services, CalleeId(id), &scheme, &caller.actor()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The credentials set for a callee: scheme, kind, when, by whom and a fingerprint; never
/// the secret.
#[utoipa::path(get, path = "/v1/callees/{id}/credentials", tag = "callees",
    security(("bearer" = ["admin"])),
    params(("id" = Uuid, Path, description = "Callee id")),
    responses(
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "The key's role is not enough", body = ErrorBody),
        (status = 200, description = "What is set, by scheme", body = CredentialList),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 404, description = "No such callee", body = ErrorBody),
    ))]
pub(crate) async fn list_credentials(
    State(app): State<ApiState>,
    Path(id): Path<Uuid>,
) -> Result<Json<CredentialList>, ApiError> {
    let list = credentials::list(&app.services, CalleeId(id)).await?;
    Ok(Json(CredentialList {
        credentials: list.into_iter().map(Into::into).collect(),
    }))
}
