//! The outermost layer: a request id for every request (the caller's `x-request-id` if it is
//! sane, else a new one, returned either way and on every log line of the request), one access
//! log line per request at `info`, and the request metrics.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::permissions::{Principal, RouteTemplate, loggable_path};
use crate::metrics::Metrics;

pub(crate) const REQUEST_ID: &str = "x-request-id";

/// A caller's request id is kept if it is 1 to 128 visible ASCII characters; anything else
/// (empty, long, spaces, control or non-ASCII bytes) is replaced, so ids are safe in logs.
fn acceptable(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

pub(crate) async fn access_log(
    State(metrics): State<Metrics>,
    mut req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| acceptable(id))
        .map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_string);
    let header = HeaderValue::from_str(&id).expect("request ids are visible ASCII");
    req.headers_mut().insert(REQUEST_ID, header.clone());
    let method = req.method().clone();
    let span = tracing::info_span!("http", request_id = %id);
    let raw_path = loggable_path(req.uri().path());
    let mut response = next.run(req).instrument(span.clone()).await;
    let seconds = started.elapsed().as_secs_f64();
    // Unrouted requests (404s, the Swagger UI's files) are counted under one label, so a
    // scanner cannot grow the metrics without bound.
    let route = response
        .extensions()
        .get::<RouteTemplate>()
        .map_or("unmatched", |r| r.0.as_str())
        .to_string();
    let key = KeyField(response.extensions().get::<Principal>().copied());
    let status = response.status().as_u16();
    metrics.request(method.as_str(), &route, status, seconds);
    span.in_scope(|| {
        tracing::info!(
            target: "cardgate::access",
            method = %method,
            route = %route,
            path = %raw_path,
            status,
            latency_ms = seconds * 1e3,
            key = %key,
            "{method} {route} {status}"
        );
    });
    response.headers_mut().insert(REQUEST_ID, header);
    response
}

/// The access log's `key` field: the principal's bucket, or `anonymous`.
struct KeyField(Option<Principal>);

impl std::fmt::Display for KeyField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(Principal(bucket)) => bucket.fmt(f),
            None => f.write_str("anonymous"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::acceptable;

    #[test]
    fn only_sane_request_ids_are_kept() {
        assert!(acceptable("a1b2-c3d4"));
        assert!(acceptable(&"x".repeat(128)));
        for bad in ["", "has space", "tab\there", "é", &"x".repeat(129)] {
            assert!(!acceptable(bad), "{bad:?}");
        }
    }
}
