//! Extractors whose rejections use the API's error envelope.
//!
//! axum's own `Json`, `Query` and `Path` answer malformed input with plain-text bodies; these
//! wrappers turn every rejection into an [`ApiError`] with a precise message.

use axum::body::Bytes;
use axum::extract::rejection::{
    JsonRejection, MissingJsonContentType, PathRejection, QueryRejection,
};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// `axum::Json` with enveloped rejections (including unknown fields, via `deny_unknown_fields`
/// on the body types), and one more rule: every request body of this API is a JSON object.
/// (serde's derived `Deserialize` also builds a struct from an array, so `[null]` would
/// otherwise be read as an empty request.)
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = {
            // axum's checks, in axum's order: content type, body limit, syntax, schema.
            let (parts, body) = req.into_parts();
            if !is_json(&parts.headers) {
                return Err(JsonRejection::from(MissingJsonContentType::default()).into());
            }
            Bytes::from_request(Request::from_parts(parts, body), state)
                .await
                .map_err(JsonRejection::from)?
        };
        let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes)?;
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(ApiError::bad_request(
                "invalid_body",
                "the body does not match the schema: it must be a JSON object",
            ));
        }
        Ok(Json(value))
    }
}

/// `Content-Type: application/json` or `application/<something>+json`, as axum accepts.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(essence) = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
    else {
        return false;
    };
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

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

/// For a field whose type is a struct: serde would also build it from an array (field by
/// field), which the schema does not allow. Use with `#[serde(deserialize_with = "...")]`.
pub(crate) fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    match serde_json::Value::deserialize(deserializer)? {
        value @ serde_json::Value::Object(_) => {
            serde_json::from_value(value).map_err(serde::de::Error::custom)
        }
        other => Err(serde::de::Error::custom(format!(
            "expected an object, found {}",
            json_kind(&other)
        ))),
    }
}

/// [`object`] for an optional field (`null` or absent is `None`); pair it with
/// `#[serde(default)]`.
pub(crate) fn object_or_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None => Ok(None),
        Some(value) => object(value).map(Some).map_err(serde::de::Error::custom),
    }
}

/// [`object`] for each element of an array.
pub(crate) fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    Vec::<serde_json::Value>::deserialize(deserializer)?
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            object(value)
                .map_err(|e: serde_json::Error| serde::de::Error::custom(format!("[{i}]: {e}")))
        })
        .collect()
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

pub(crate) const DEFAULT_PAGE: u32 = 50;
pub(crate) const MAX_PAGE: u32 = 200;

/// Validates a ledger-seq cursor (`after`, default 0: from the first).
pub(crate) fn seq_after(after: Option<i64>) -> Result<i64, ApiError> {
    match after.unwrap_or(0) {
        n if n < 0 => Err(ApiError::bad_request(
            "invalid_query",
            "after must not be negative",
        )),
        n => Ok(n),
    }
}

/// Validates a requested page size.
pub(crate) fn page_size(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        n => Err(ApiError::bad_request(
            "invalid_query",
            format!("limit must be between 1 and {MAX_PAGE}, got {n}"),
        )),
    }
}
