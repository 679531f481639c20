//! One pagination convention for every list: `limit` (1 to 200, default 50) and `after` (the
//! previous page's `next`) in; `{"items": [...], "next": <cursor or null>}` out, and, when there
//! is a next page, `Link: <same query, after=next>; rel="next"` (RFC 8288), so a client can
//! follow pages without knowing the cursor's type.

use axum::Json;
use axum::http::header::LINK;
use axum::http::{HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A page and the link to the next one.
pub struct Paged<T> {
    body: T,
    link: Option<String>,
}

impl<T> Paged<T> {
    /// `body`, answered to `uri`; `next` is its cursor when a next page may exist.
    pub fn new(uri: &Uri, body: T, next: Option<impl ToString>) -> Self {
        Self {
            body,
            link: next.map(|next| next_link(uri, &next.to_string())),
        }
    }
}

/// `<path?query-with-after=next>; rel="next"`: the request's own query, every other
/// parameter kept.
fn next_link(uri: &Uri, next: &str) -> String {
    let pairs = url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .filter(|(k, _)| k != "after");
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .append_pair("after", next)
        .finish();
    format!("<{}?{query}>; rel=\"next\"", uri.path())
}

/// The cursor of a full page: the last item's, if the page is full (a shorter page is the
/// last).
pub(crate) fn next_cursor<T, C>(items: &[T], limit: u32, cursor: impl Fn(&T) -> C) -> Option<C> {
    (items.len() == limit as usize)
        .then(|| items.last().map(cursor))
        .flatten()
}

impl<T: Serialize> IntoResponse for Paged<T> {
    fn into_response(self) -> Response {
        let mut response = Json(self.body).into_response();
        if let Some(link) = self.link.and_then(|l| HeaderValue::from_str(&l).ok()) {
            response.headers_mut().insert(LINK, link);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_keeps_the_query_and_replaces_after() {
        let uri: Uri = "/v1/ledger?callee_id=abc&after=5&limit=2".parse().unwrap();
        assert_eq!(
            next_link(&uri, "7"),
            "</v1/ledger?callee_id=abc&limit=2&after=7>; rel=\"next\""
        );
        let uri: Uri = "/v1/callees".parse().unwrap();
        assert_eq!(
            next_link(&uri, "x y"),
            "</v1/callees?after=x+y>; rel=\"next\""
        );
    }

    #[test]
    fn only_a_full_page_has_a_next_cursor() {
        assert_eq!(next_cursor(&[1, 2], 2, |n| *n), Some(2));
        assert_eq!(next_cursor(&[1], 2, |n| *n), None);
        assert_eq!(next_cursor::<i32, i32>(&[], 2, |n| *n), None);
    }
}
