//! Conditional GETs: a strong `ETag` over the bytes an answer would carry (its JSON, or a badge), `If-None-Match` → 304,
//! and `Cache-Control: no-cache`, so that a caller asking again before every task revalidates
//! for a few bytes instead of reading the whole answer.
//!
//! The tag is a digest of the body itself, so it changes exactly when the answer does; it
//! cannot go stale on a rule that forgot to name one of its inputs.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, HeaderValue, IF_NONE_MATCH};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// A body with its strong tag, ready to answer with again and again (cheap to clone: the
/// bytes are shared).
#[derive(Debug, Clone)]
pub struct Tagged {
    body: Bytes,
    etag: HeaderValue,
}

impl Tagged {
    pub fn new(body: impl Into<Bytes>) -> Self {
        let body = body.into();
        let etag = etag(&body);
        Self { body, etag }
    }

    /// `value` as JSON.
    pub fn json<T: Serialize>(value: &T) -> Result<Self, ApiError> {
        serde_json::to_vec(value)
            .map(Self::new)
            .map_err(|e| ApiError::Internal(e.into()))
    }
}

/// `body` as JSON with its `ETag`, or an empty 304 when `request` already holds that tag.
pub(crate) fn respond<T: Serialize>(request: &HeaderMap, body: &T) -> Result<Response, ApiError> {
    Ok(respond_tagged(
        request,
        "application/json",
        "no-cache",
        Tagged::json(body)?,
    ))
}

/// `body` of `content_type` with its `ETag` and `cache_control`, or an empty 304 when
/// `request` already holds that tag.
pub(crate) fn respond_bytes(
    request: &HeaderMap,
    content_type: &'static str,
    cache_control: &'static str,
    body: Vec<u8>,
) -> Response {
    respond_tagged(request, content_type, cache_control, Tagged::new(body))
}

/// `tagged` as `content_type` with `cache_control`, or an empty 304 when `request` already
/// holds its tag.
pub(crate) fn respond_tagged(
    request: &HeaderMap,
    content_type: &'static str,
    cache_control: &'static str,
    tagged: Tagged,
) -> Response {
    let tag = tagged.etag.as_bytes();
    let unchanged = request
        .get_all(IF_NONE_MATCH)
        .iter()
        .any(|v| matches(v.as_bytes(), tag));
    let mut response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(CONTENT_TYPE, HeaderValue::from_static(content_type))],
            tagged.body,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    headers.insert(ETAG, tagged.etag);
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache_control));
    response
}

/// A strong entity tag: the first 128 bits of the body's SHA-256, quoted.
fn etag(body: &[u8]) -> HeaderValue {
    let mut tag = [b'"'; 34];
    hex::encode_to_slice(&Sha256::digest(body)[..16], &mut tag[1..33])
        .expect("16 bytes are 32 hex digits");
    HeaderValue::from_bytes(&tag).expect("quoted hex is a valid header value")
}

/// Whether an `If-None-Match` value names `tag`: `*`, or a list of tags compared weakly
/// (RFC 9110, 13.1.2: a `W/` prefix does not matter for this header).
fn matches(if_none_match: &[u8], tag: &[u8]) -> bool {
    if_none_match.trim_ascii() == b"*"
        || if_none_match
            .split(|b| *b == b',')
            .map(|t| {
                let t = t.trim_ascii();
                t.strip_prefix(b"W/").unwrap_or(t)
            })
            .any(|t| t == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_lists_compare_weakly_and_star_matches_anything() {
        let tag = etag(b"{}");
        let tag = tag.to_str().unwrap();
        assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() == 34);
        let hex = &tag[1..33];
        assert_eq!(hex, &hex::encode(Sha256::digest(b"{}"))[..32]);
        let matches = |header: &str| matches(header.as_bytes(), tag.as_bytes());
        assert!(matches(tag));
        assert!(matches(&format!("W/{tag}")));
        assert!(matches(&format!("\"other\", {tag}")));
        assert!(matches(&format!("\"other\",W/{tag} ")));
        assert!(matches("*"));
        assert!(!matches("\"other\""));
        assert!(!matches(""));
        assert_ne!(etag(b"{}"), etag(b"{ }"));
    }
}
