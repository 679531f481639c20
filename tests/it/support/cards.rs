//! A card server on a loopback port: serves agent cards (signed with a test key), key sets,
//! redirects and hostile bodies, and records what it was asked.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cardgate::domain::card::signature::sign_card;
use futures::StreamExt;
use josekit::jwk::Jwk;
use serde_json::{Value, json};

/// What the server answers on one path.
#[derive(Clone)]
pub(crate) enum Reply {
    /// JSON bytes, with an ETag; a matching If-None-Match gets 304.
    Json {
        body: Vec<u8>,
        etag: Option<String>,
    },
    Status(u16),
    /// 302 to this location.
    Redirect(String),
    /// A body of this many bytes, streamed in 64 KiB chunks (the count of bytes actually sent
    /// is kept).
    Huge(usize),
    /// Headers and one chunk, then nothing, forever.
    NeverFinishes,
    /// This status (429 or 503, say) with this `Retry-After`.
    Throttle {
        status: u16,
        retry_after: String,
    },
}

#[derive(Clone, Default)]
struct Inner {
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    requests: Arc<Mutex<Vec<(String, HeaderMap)>>>,
    streamed: Arc<AtomicUsize>,
    /// How long every answer is held back before it is sent.
    delay: Arc<Mutex<Duration>>,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
    /// When each request arrived.
    arrivals: Arc<Mutex<Vec<std::time::Instant>>>,
}

pub(crate) struct CardServer {
    pub addr: SocketAddr,
    inner: Inner,
    pub key: TestKey,
}

/// An ES256 key pair for signing test cards.
#[derive(Clone)]
pub(crate) struct TestKey {
    pub kid: String,
    pub private: Jwk,
    pub public: Jwk,
}

impl TestKey {
    pub(crate) fn generate(kid: &str) -> Self {
        let pair = josekit::jws::ES256.generate_key_pair().unwrap();
        let mut private = pair.to_jwk_private_key();
        private.set_key_id(kid);
        let mut public = pair.to_jwk_public_key();
        public.set_key_id(kid);
        Self {
            kid: kid.into(),
            private,
            public,
        }
    }

    pub(crate) fn jwks(&self) -> Value {
        json!({"keys": [Value::Object(self.public.as_ref().clone())]})
    }
}

impl CardServer {
    pub(crate) async fn start() -> Self {
        Self::start_on("127.0.0.1:0").await
    }

    pub(crate) async fn start_on(addr: &str) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        Self::serve_on(listener)
    }

    /// On `addr`, or `None` when it is taken (the listener is kept: no bind-drop-rebind race).
    pub(crate) async fn try_start_on(addr: &str) -> Option<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await.ok()?;
        Some(Self::serve_on(listener))
    }

    fn serve_on(listener: tokio::net::TcpListener) -> Self {
        let inner = Inner::default();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback({
            let inner = inner.clone();
            move |req: Request<Body>| serve(inner.clone(), req)
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            addr,
            inner,
            key: TestKey::generate("test-key-1"),
        }
    }

    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn set(&self, path: &str, reply: Reply) {
        self.inner
            .routes
            .lock()
            .unwrap()
            .insert(path.to_string(), reply);
    }

    pub(crate) fn set_json(&self, path: &str, value: &Value) {
        let body = serde_json::to_vec_pretty(value).unwrap();
        let etag = format!("\"{}\"", cardgate::service::discovery::sha256_hex(&body));
        self.set(
            path,
            Reply::Json {
                body,
                etag: Some(etag),
            },
        );
    }

    /// A card offering `versions` (JSONRPC on this origin), signed with the server's key and
    /// naming its JWKS (served too) as `jku`.
    pub(crate) fn serve_signed_card(&self, path: &str, card: &Value) -> Value {
        self.set_json("/.well-known/jwks.json", &self.key.jwks());
        let signed = self.sign(card);
        self.set_json(path, &signed);
        signed
    }

    pub(crate) fn sign(&self, card: &Value) -> Value {
        let jku = self.url("/.well-known/jwks.json");
        sign_card(card, &self.key.private, "ES256", &self.key.kid, Some(&jku)).unwrap()
    }

    /// A plain v1.0 card for this origin.
    pub(crate) fn card(&self, name: &str, versions: &[&str], capabilities: Value) -> Value {
        let interfaces: Vec<Value> = versions
            .iter()
            .map(|v| json!({"url": self.url("/a2a/jsonrpc"), "protocolBinding": "JSONRPC", "protocolVersion": v}))
            .collect();
        json!({
            "name": name, "description": "test agent", "version": "1.0.0",
            "supportedInterfaces": interfaces,
            "capabilities": capabilities,
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "echoes", "tags": ["test"]}]
        })
    }

    /// Requests seen on `path`, with their headers.
    pub(crate) fn requests(&self, path: &str) -> Vec<HeaderMap> {
        self.inner
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, h)| h.clone())
            .collect()
    }

    /// Holds every answer back by `delay` from now on.
    pub(crate) fn set_delay(&self, delay: Duration) {
        *self.inner.delay.lock().unwrap() = delay;
    }

    /// The most requests this server was answering at once.
    pub(crate) fn most_in_flight(&self) -> usize {
        self.inner.most_in_flight.load(Ordering::SeqCst)
    }

    /// When each request arrived, in order.
    pub(crate) fn arrivals(&self) -> Vec<std::time::Instant> {
        self.inner.arrivals.lock().unwrap().clone()
    }

    /// Forgets the requests seen so far (their count, arrivals and the most at once).
    pub(crate) fn reset_counts(&self) {
        self.inner.requests.lock().unwrap().clear();
        self.inner.arrivals.lock().unwrap().clear();
        self.inner.most_in_flight.store(0, Ordering::SeqCst);
    }

    /// Bytes streamed so far by `Huge` replies.
    pub(crate) fn streamed(&self) -> usize {
        self.inner.streamed.load(Ordering::SeqCst)
    }
}

async fn serve(inner: Inner, req: Request<Body>) -> Response {
    inner
        .arrivals
        .lock()
        .unwrap()
        .push(std::time::Instant::now());
    let now = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    inner.most_in_flight.fetch_max(now, Ordering::SeqCst);
    let delay = *inner.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let response = answer(&inner, req);
    inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

fn answer(inner: &Inner, req: Request<Body>) -> Response {
    let path = req.uri().path().to_string();
    inner
        .requests
        .lock()
        .unwrap()
        .push((path.clone(), req.headers().clone()));
    let reply = inner.routes.lock().unwrap().get(&path).cloned();
    match reply {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(Reply::Status(code)) => StatusCode::from_u16(code).unwrap().into_response(),
        Some(Reply::Throttle {
            status,
            retry_after,
        }) => (
            StatusCode::from_u16(status).unwrap(),
            [(header::RETRY_AFTER, retry_after)],
        )
            .into_response(),
        Some(Reply::Redirect(to)) => (StatusCode::FOUND, [(header::LOCATION, to)]).into_response(),
        Some(Reply::Json { body, etag }) => {
            let matches = etag.as_deref().is_some_and(|e| {
                req.headers()
                    .get(header::IF_NONE_MATCH)
                    .and_then(|v| v.to_str().ok())
                    == Some(e)
            });
            if matches {
                return StatusCode::NOT_MODIFIED.into_response();
            }
            let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
            if let Some(etag) = etag {
                response
                    .headers_mut()
                    .insert(header::ETAG, etag.parse().unwrap());
            }
            response
        }
        Some(Reply::Huge(total)) => {
            let streamed = inner.streamed.clone();
            let chunk = vec![b' '; 64 * 1024];
            let chunks = total.div_ceil(chunk.len());
            let stream = futures::stream::iter(0..chunks).then(move |_| {
                let chunk = chunk.clone();
                let streamed = streamed.clone();
                async move {
                    // Pace the stream so the client's abort is observable in the count.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    streamed.fetch_add(chunk.len(), Ordering::SeqCst);
                    Ok::<_, std::io::Error>(bytes::Bytes::from(chunk))
                }
            });
            (
                [(header::CONTENT_TYPE, "application/json")],
                Body::from_stream(stream),
            )
                .into_response()
        }
        Some(Reply::NeverFinishes) => {
            let first = futures::stream::once(async {
                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"name\":"))
            });
            let body = Body::from_stream(first.chain(futures::stream::pending()));
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
    }
}
