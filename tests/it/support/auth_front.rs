//! An authenticating reverse proxy for interop tests: the smallest real-world change that puts
//! an agent out of anonymous reach. It forwards every request as it is (streams included), but
//! answers 401 to any A2A call without the credential its [`Guard`] wants; the card and the
//! key set under `/.well-known/` stay public, as A2A says a card should.
//!
//! OAuth 2.0 tokens are checked by RFC 7662 introspection at the test's authorization server;
//! [`AuthFront::revoke_tokens`] makes the front refuse every token issued so far, as a real
//! resource server does after a key rollover.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::proxy::relay;

/// What the front demands of A2A calls.
#[derive(Clone)]
pub(crate) enum Guard {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `<name>: <value>`.
    ApiKey { name: String, value: String },
    /// A bearer token the authorization server says is active (introspected with the
    /// front's own client credentials).
    OAuth {
        introspection_url: String,
        client_id: String,
        client_secret: String,
    },
    /// Nobody (behind an mTLS front: the connections without a client certificate).
    Nobody,
    /// Anyone (behind an mTLS front: the connections with one). It still speaks HTTP/2 to
    /// clients that negotiated it, which the SDK agents' servers do not.
    Anyone,
}

pub(crate) struct AuthFront {
    pub addr: SocketAddr,
    upstream: Arc<OnceLock<String>>,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

struct Shared {
    upstream: Arc<OnceLock<String>>,
    guard: Guard,
    http: reqwest::Client,
    accepted: AtomicUsize,
    refused: AtomicUsize,
    /// Tokens issued at or before this second are refused (0: none).
    not_after: AtomicI64,
}

impl AuthFront {
    /// Listens on a loopback port; requests wait for [`forward_to`](Self::forward_to).
    pub(crate) async fn start(guard: Guard) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = Arc::new(OnceLock::new());
        let shared = Arc::new(Shared {
            upstream: upstream.clone(),
            guard,
            http: reqwest::Client::new(),
            accepted: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            not_after: AtomicI64::new(0),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
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
            shared,
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

    /// A2A calls let through, and refused.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.shared.accepted.load(Ordering::SeqCst),
            self.shared.refused.load(Ordering::SeqCst),
        )
    }

    /// Refuses every token issued up to now (wait a second before the next one is issued).
    pub(crate) fn revoke_tokens(&self) {
        self.shared
            .not_after
            .store(chrono::Utc::now().timestamp(), Ordering::SeqCst);
    }
}

async fn forward(State(s): State<Arc<Shared>>, request: Request) -> Response {
    let Some(upstream) = s.upstream.get() else {
        return (StatusCode::BAD_GATEWAY, "no upstream yet").into_response();
    };
    let public = request.uri().path().starts_with("/.well-known/");
    if !public {
        if let Err(why) = admitted(&s, request.headers()).await {
            s.refused.fetch_add(1, Ordering::SeqCst);
            let mut refused = (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "unauthorized", "message": why})),
            )
                .into_response();
            refused
                .headers_mut()
                .insert("www-authenticate", "Bearer".parse().unwrap());
            return refused;
        }
        s.accepted.fetch_add(1, Ordering::SeqCst);
    }
    match relay(&s.http, upstream, request).await {
        Ok((response, answer)) => response
            .body(Body::from_stream(answer.bytes_stream()))
            .unwrap(),
        Err(refused) => refused,
    }
}

/// Whether the request carries what the guard wants; why not.
async fn admitted(s: &Shared, headers: &axum::http::HeaderMap) -> Result<(), String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = header("authorization").and_then(|a| a.strip_prefix("Bearer "));
    match &s.guard {
        Guard::Bearer(token) => match bearer {
            Some(t) if t == token => Ok(()),
            Some(_) => Err("invalid bearer token".into()),
            None => Err("a bearer token is required".into()),
        },
        Guard::ApiKey { name, value } => match header(name) {
            Some(v) if v == value => Ok(()),
            Some(_) => Err(format!("invalid {name}")),
            None => Err(format!("{name} is required")),
        },
        Guard::OAuth {
            introspection_url,
            client_id,
            client_secret,
        } => {
            let token = bearer.ok_or("a bearer token is required")?;
            let answer: Value = s
                .http
                .post(introspection_url)
                .basic_auth(client_id, Some(client_secret))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("token={token}"))
                .send()
                .await
                .map_err(|e| format!("introspection failed: {e}"))?
                .json()
                .await
                .map_err(|e| format!("introspection answered no JSON: {e}"))?;
            if answer["active"] != true {
                return Err("the token is not active".into());
            }
            let issued = answer["iat"].as_i64().unwrap_or(0);
            if issued <= s.not_after.load(Ordering::SeqCst) {
                return Err("the token was revoked".into());
            }
            Ok(())
        }
        Guard::Nobody => Err("a client certificate is required".into()),
        Guard::Anyone => Ok(()),
    }
}
