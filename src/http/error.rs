//! The API's one error type and its JSON envelope, `{"error":{"code","message"}}`.
//!
//! Every 4xx and 5xx the service sends goes through [`ApiError`], including extractor
//! rejections, unknown routes and wrong methods. Server errors log their cause here, once, and
//! send a generic message: internals never reach the client.

use axum::Json;
use axum::http::StatusCode;
use axum::http::header::{HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::service::ServiceError;

/// The error envelope.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// Stable, machine-readable code, e.g. `not_found`, `invalid_request`.
    pub code: String,
    /// Human-readable explanation. Generic for server errors.
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed input: body, query or path. `code` says which kind.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    UriTooLong(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    /// Well-formed but unusable: `code` says what (`card_unusable`, `url_refused`).
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("rate limit exceeded; retry after {retry_after_secs} s")]
    TooManyRequests { retry_after_secs: u64 },
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::bad_request("invalid_request", message)
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { code, .. } => code,
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::UriTooLong(_) => "uri_too_long",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::Conflict(_) => "conflict",
            Self::Unprocessable { code, .. } => code,
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::TooManyRequests { .. } => "rate_limited",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }
}

/// What a 503 asks a client to wait before retrying.
impl ApiError {
    /// What the client may read: the message, or for an internal error a generic one (the
    /// cause chain goes to the log, here and only here).
    pub(crate) fn public_message(&self) -> String {
        match self {
            Self::Internal(cause) => {
                tracing::error!(error = ?cause, "request failed with an internal error");
                "internal server error; the cause has been logged".to_string()
            }
            other => other.to_string(),
        }
    }
}

pub(crate) const UNAVAILABLE_RETRY_SECS: u64 = 5;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = self.public_message();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code().to_string(),
                message,
            },
        };
        let mut response = (status, Json(body)).into_response();
        match self {
            Self::TooManyRequests { retry_after_secs } => {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            Self::Unauthorized(_) => {
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::Unavailable(_) => {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(UNAVAILABLE_RETRY_SECS));
            }
            _ => {}
        }
        response
    }
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::NotFound(what) => Self::NotFound(what.to_string()),
            ServiceError::Conflict(m) => Self::Conflict(m),
            ServiceError::Invalid(m) => Self::invalid(m),
            ServiceError::Unusable(message) => Self::Unprocessable {
                code: "card_unusable",
                message,
            },
            ServiceError::Undeliverable(message) => Self::Unprocessable {
                code: "url_refused",
                message,
            },
            ServiceError::Mismatch(message) => Self::Unprocessable {
                code: "credential_mismatch",
                message,
            },
            ServiceError::TooLarge(m) => Self::PayloadTooLarge(m),
            ServiceError::Unavailable(cause) => {
                tracing::warn!(error = ?cause, "the database is unavailable");
                Self::Unavailable("the database is unavailable; retry shortly".into())
            }
            ServiceError::Behind(m) => Self::Unavailable(m),
            ServiceError::Internal(cause) => Self::Internal(cause),
        }
    }
}
