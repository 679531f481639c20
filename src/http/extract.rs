//! Extractors whose rejections use the API's error envelope.
//!
//! axum's own `Json`, `Query` and `Path` answer malformed input with plain-text bodies; these
//! wrappers turn every rejection into an [`ApiError`] with a precise message.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// `axum::Json` with enveloped rejections (including unknown fields, via `deny_unknown_fields`
/// on the body types).
#[derive(Debug, Clone, Copy, Default, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

#[derive(Debug, Clone, Copy, Default, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

#[derive(Debug, Clone, Copy, Default, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType(
                "the request body must be JSON with `Content-Type: application/json`".into(),
            ),
            JsonRejection::BytesRejection(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::PayloadTooLarge("the request body is too large".into())
            }
            JsonRejection::JsonSyntaxError(e) => ApiError::bad_request(
                "invalid_json",
                format!("the body is not valid JSON: {}", source_text(&e)),
            ),
            JsonRejection::JsonDataError(e) => ApiError::bad_request(
                "invalid_body",
                format!("the body does not match the schema: {}", source_text(&e)),
            ),
            other => ApiError::bad_request("invalid_body", other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        let detail = match &rejection {
            QueryRejection::FailedToDeserializeQueryString(e) => source_text(e),
            other => other.body_text(),
        };
        ApiError::bad_request("invalid_query", format!("invalid query string: {detail}"))
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        let detail = match &rejection {
            PathRejection::FailedToDeserializePathParams(e) => e.body_text(),
            other => other.body_text(),
        };
        ApiError::bad_request("invalid_path", detail)
    }
}

/// The innermost cause's message: axum's outer text repeats boilerplate.
fn source_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}
