//! Conditional GETs: a strong `ETag` over the bytes an answer would carry (its JSON, or a badge), `If-None-Match` → 304,
//! and `Cache-Control: no-cache`, so that a caller asking again before every task revalidates
//! for a few bytes instead of reading the whole answer.
//!
//! The tag is a digest of the body itself, so it changes exactly when the answer does; it
//! cannot go stale on a rule that forgot to name one of its inputs.

use axum::http::header::{CACHE_CONTROL, ETAG, HeaderValue, IF_NONE_MATCH};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// `body` as JSON with its `ETag`, or an empty 304 when `request` already holds that tag.
pub fn respond<T: Serialize>(request: &HeaderMap, body: &T) -> Result<Response, ApiError> {
    let json = serde_json::to_vec(body).map_err(|e| ApiError::Internal(e.into()))?;
    respond_bytes(request, "application/json", "no-cache", json)
}

/// `body` of `content_type` with its `ETag` and `cache_control`, or an empty 304 when
/// `request` already holds that tag.
pub fn respond_bytes(
    request: &HeaderMap,
    content_type: &'static str,
    cache_control: &'static str,
    body: Vec<u8>,
) -> Result<Response, ApiError> {
    let tag = etag(&body);
    let unchanged = request
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| matches(v, &tag));
    let mut response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static(content_type),
            )],
            body,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        ETAG,
        HeaderValue::from_str(&tag).map_err(|e| ApiError::Internal(e.into()))?,
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache_control));
    Ok(response)
}

/// A strong entity tag: the first 128 bits of the body's SHA-256, quoted.
fn etag(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Whether an `If-None-Match` value names `tag`: `*`, or a list of tags compared weakly
/// (RFC 9110, 13.1.2: a `W/` prefix does not matter for this header).
fn matches(if_none_match: &str, tag: &str) -> bool {
    if_none_match.trim() == "*"
        || if_none_match
            .split(',')
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_lists_compare_weakly_and_star_matches_anything() {
        let tag = etag(b"{}");
        assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() == 34);
        assert!(matches(&tag, &tag));
        assert!(matches(&format!("W/{tag}"), &tag));
        assert!(matches(&format!("\"other\", {tag}"), &tag));
        assert!(matches("*", &tag));
        assert!(!matches("\"other\"", &tag));
        assert!(!matches("", &tag));
        assert_ne!(etag(b"{}"), etag(b"{ }"));
    }
}
