//! A lagging reverse proxy for interop tests: it sits between cardgate and an agent, forwards
//! every request as it is, and holds back each server-sent event of a streamed answer for a
//! while, as a buffering proxy in front of a real agent does. GetTask answers pass at once,
//! so they overtake the stream: what a verdict must survive (docs/trust-model.md, rule 3).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::oneshot;

pub(crate) struct LaggingProxy {
    pub addr: SocketAddr,
    upstream: Arc<OnceLock<String>>,
    _stop: oneshot::Sender<()>,
}

struct Shared {
    upstream: Arc<OnceLock<String>>,
    delay: Duration,
    /// How long every request waits before it is forwarded (a slow webhook path).
    request_delay: Duration,
    http: reqwest::Client,
}

/// Headers that belong to one hop, never forwarded.
const HOP: [&str; 5] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
];

impl LaggingProxy {
    /// Listens on a loopback port; requests wait for [`forward_to`](Self::forward_to) (the
    /// agent needs the proxy's origin for its card before it can start).
    pub(crate) async fn start(delay: Duration) -> Self {
        Self::start_with(delay, Duration::ZERO).await
    }

    /// A front that holds every request back for `request_delay` before forwarding it, as a
    /// webhook path through TLS to another region, a queue or a busy receiver does.
    pub(crate) async fn delaying_requests(request_delay: Duration) -> Self {
        Self::start_with(Duration::ZERO, request_delay).await
    }

    async fn start_with(delay: Duration, request_delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = Arc::new(OnceLock::new());
        let shared = Arc::new(Shared {
            upstream: upstream.clone(),
            delay,
            request_delay,
            http: reqwest::Client::new(),
        });
        let app = axum::Router::new().fallback(forward).with_state(shared);
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Self {
            addr,
            upstream,
            _stop: stop,
        }
    }

    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn forward_to(&self, upstream_origin: &str) {
        self.upstream
            .set(upstream_origin.trim_end_matches('/').to_string())
            .expect("the upstream is set once");
    }
}

async fn forward(State(s): State<Arc<Shared>>, request: Request) -> Response {
    let Some(upstream) = s.upstream.get() else {
        return (StatusCode::BAD_GATEWAY, "no upstream yet").into_response();
    };
    tokio::time::sleep(s.request_delay).await;
    let (response, answer) = match relay(&s.http, upstream, request).await {
        Ok(relayed) => relayed,
        Err(refused) => return refused,
    };
    let streamed = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let body = if streamed {
        Body::from_stream(held_back(answer, s.delay))
    } else {
        Body::from(answer.bytes().await.unwrap_or_default())
    };
    response.body(body).unwrap()
}

/// Sends `request` on to `upstream` as it came (hop-by-hop headers aside): the answer, and a
/// response builder with its status and headers; a 502 when it cannot be sent.
pub(crate) async fn relay(
    http: &reqwest::Client,
    upstream: &str,
    request: Request,
) -> Result<(axum::http::response::Builder, reqwest::Response), Response> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let mut outgoing = http
        .request(parts.method, format!("{upstream}{path}"))
        .body(body);
    for (name, value) in &parts.headers {
        if !HOP.contains(&name.as_str()) {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = match outgoing.send().await {
        Ok(answer) => answer,
        Err(e) => return Err((StatusCode::BAD_GATEWAY, e.to_string()).into_response()),
    };
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if !HOP.contains(&name.as_str()) {
            response = response.header(HeaderName::from_bytes(name.as_ref()).unwrap(), value);
        }
    }
    Ok((response, answer))
}

/// The upstream's events, one at a time, each released `delay` after it arrived.
fn held_back(
    answer: reqwest::Response,
    delay: Duration,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    let mut upstream = answer.bytes_stream();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let mut pending: Vec<u8> = Vec::new();
        while let Some(Ok(chunk)) = upstream.next().await {
            pending.extend_from_slice(&chunk);
            while let Some(end) = event_end(&pending) {
                let event: Vec<u8> = pending.drain(..end).collect();
                tokio::time::sleep(delay).await;
                if tx.send(Bytes::from(event)).await.is_err() {
                    return;
                }
            }
        }
        if !pending.is_empty() {
            tokio::time::sleep(delay).await;
            let _ = tx.send(Bytes::from(pending)).await;
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|bytes| (Ok(bytes), rx))
    })
}

/// Where the first complete event ends (after its blank line), if one is buffered.
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
