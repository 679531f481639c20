//! The HTTP carrier shared by the JSON-RPC and HTTP+JSON bindings: it builds each request from
//! the binding's framing, sends it through the guarded outbound client within the call's
//! timeout, reads the answer against the byte cap, and opens event streams over SSE.

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::time::Instant;
use url::Url;

use super::dialect::Dialect;
use super::transcript::Ended;
use super::{A2aError, Answer, Ctx, EventReader, Op, Streamed, jsonrpc, rest};
use crate::remote::presentation::{Authenticator, identity_refused};
use crate::remote::sse::{Frame, SseLimits, SseReader};
use crate::remote::{FetchError, Outbound, read_capped};

/// How the binding frames operations over HTTP.
#[derive(Debug, Clone, Copy)]
pub(super) enum Framing {
    JsonRpc(Dialect),
    Rest,
}

pub(super) struct HttpTransport {
    pub url: Url,
    pub framing: Framing,
    /// Sent as `A2A-Version` when the dialect calls for it.
    pub version: Option<HeaderValue>,
}

impl HttpTransport {
    /// A unary call, recorded like any exchange.
    pub(super) async fn call(
        &self,
        ctx: &mut Ctx<'_>,
        step: &str,
        op: &Op,
        params: Value,
    ) -> (u32, Answer) {
        let (call, request) = match self.build(ctx, step, op, params) {
            Ok(built) => built,
            Err(answer) => return answer,
        };
        let started = Instant::now();
        let (outbound, auth, max_body) = (ctx.outbound, ctx.auth, ctx.limits.max_body);
        let result = tokio::time::timeout(ctx.timeout, async {
            let response = send_authorized(outbound, auth, request).await?;
            let status = response.status().as_u16();
            let content_type = content_type(response.headers());
            let body = read_capped(response, max_body)
                .await
                .map_err(|e| Unsent::Failed(e.to_string()))?;
            Ok::<_, Unsent>((status, content_type, body))
        })
        .await
        .unwrap_or_else(|_| Err(Unsent::Failed(ctx.no_answer())));
        let result = result.map_err(|unsent| unsent.noted(ctx));
        match result {
            Ok((status, content_type, body)) => {
                let body = body_value(&body);
                ctx.check_status(op, status, &body);
                let answer = self.answer(status, &body);
                let ended = Ended {
                    status: Some(status),
                    content_type,
                    response: Some(body),
                    error: None,
                };
                ctx.transcript.finish(call, started, ended);
                (call, answer)
            }
            Err(e) => {
                ctx.transcript
                    .finish(call, started, Ended::failed(e.clone()));
                (call, Answer::Broken(e))
            }
        }
    }

    /// Opens a streaming call: the event stream once its headers arrived, or the plain answer
    /// in its place.
    pub(super) async fn open_stream(
        &self,
        ctx: &mut Ctx<'_>,
        step: &str,
        op: &Op,
        params: Value,
        deadline: Instant,
    ) -> Streamed {
        let (call, request) = match self.build(ctx, step, op, params) {
            Ok(built) => built,
            Err((call, answer)) => return Streamed::plain(call, answer),
        };
        let started = Instant::now();
        let sent = self
            .send_timed(ctx, request.header(ACCEPT, "text/event-stream"))
            .await;
        let response = match sent.map_err(|unsent| unsent.noted(ctx)) {
            Ok(r) => r,
            Err(e) => {
                ctx.transcript
                    .finish(call, started, Ended::failed(e.clone()));
                return Streamed::plain(call, Answer::Broken(e));
            }
        };
        let status = response.status().as_u16();
        let content_type = content_type(response.headers());
        let event_stream = content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if status != 200 || !event_stream {
            return self
                .plain_answer(ctx, (op, call), started, status, content_type, response)
                .await;
        }
        let ended = Ended {
            status: Some(status),
            content_type: content_type.clone(),
            ..Ended::default()
        };
        ctx.transcript.finish(call, started, ended);
        let limits = SseLimits {
            max_event_bytes: ctx.limits.max_event_bytes,
            max_events: ctx.limits.max_events,
            idle: ctx.limits.idle,
            deadline,
        };
        Streamed::Events {
            call,
            reader: Box::new(EventReader::Sse(SseReader::new(response, limits))),
            content_type,
        }
    }

    /// The A2A result one SSE frame's data carries.
    pub(super) fn frame_result(&self, frame: &Frame) -> Answer {
        match serde_json::from_str::<Value>(&frame.data) {
            Err(e) => Answer::Broken(format!("frame is not JSON: {e}")),
            Ok(value) => match self.framing {
                Framing::JsonRpc(_) => jsonrpc::answer(200, &value),
                Framing::Rest => Answer::Result(value),
            },
        }
    }

    /// Whether an error answer is this binding's form of `error`.
    pub(super) fn refused_as(&self, error: A2aError, code: i64, message: &str) -> bool {
        match self.framing {
            Framing::JsonRpc(_) => jsonrpc::refused_as(error, code),
            Framing::Rest => rest::refused_as(error, code, message),
        }
    }

    fn answer(&self, status: u16, body: &Value) -> Answer {
        match self.framing {
            Framing::JsonRpc(_) => jsonrpc::answer(status, body),
            Framing::Rest => rest::answer(status, body),
        }
    }

    /// The HTTP request for an operation, recorded as a new exchange; a request that cannot
    /// be built is numbered and answered at once.
    fn build(
        &self,
        ctx: &mut Ctx<'_>,
        step: &str,
        op: &Op,
        params: Value,
    ) -> Result<(u32, reqwest::RequestBuilder), (u32, Answer)> {
        let (method, url, body, http_method) = match self.framing {
            Framing::JsonRpc(dialect) => {
                let id = ctx.transcript.next_call() + 1;
                let (method, body) = jsonrpc::request(dialect, op, params, id);
                (method, self.url.clone(), Some(body), reqwest::Method::POST)
            }
            Framing::Rest => {
                let (http_method, path, body) = rest::route(op, params);
                let base = self.url.as_str().trim_end_matches('/');
                let url = Url::parse(&format!("{base}{path}"))
                    .map_err(|e| (ctx.transcript.skip(), Answer::Broken(e.to_string())))?;
                (format!("{http_method} {path}"), url, body, http_method)
            }
        };
        let call = ctx
            .transcript
            .open(step, method, url.to_string(), body.as_ref());
        let mut headers = HeaderMap::new();
        if let Some(version) = &self.version {
            headers.insert("A2A-Version", version.clone());
        }
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let mut request = ctx
            .outbound
            .client()
            .request(http_method, url)
            .headers(headers);
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        Ok((call, request))
    }

    /// Sends `request` with the credentials, bounded by the call timeout.
    async fn send_timed(
        &self,
        ctx: &Ctx<'_>,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Unsent> {
        tokio::time::timeout(
            ctx.timeout,
            send_authorized(ctx.outbound, ctx.auth, request),
        )
        .await
        .unwrap_or_else(|_| {
            Err(Unsent::Failed(
                FetchError::Timeout {
                    url: self.url.to_string(),
                    secs: ctx.timeout.as_secs(),
                }
                .to_string(),
            ))
        })
    }

    /// A streaming call answered with something other than an event stream: its body, read
    /// within the call timeout and interpreted like any answer.
    async fn plain_answer(
        &self,
        ctx: &mut Ctx<'_>,
        (op, call): (&Op, u32),
        started: Instant,
        status: u16,
        content_type: Option<String>,
        response: reqwest::Response,
    ) -> Streamed {
        let read =
            tokio::time::timeout(ctx.timeout, read_capped(response, ctx.limits.max_body)).await;
        let (answer, ended) = match read {
            Ok(Ok(b)) => {
                let body = body_value(&b);
                ctx.check_status(op, status, &body);
                let answer = self.answer(status, &body);
                (
                    answer,
                    Ended {
                        response: Some(body),
                        ..Ended::default()
                    },
                )
            }
            Ok(Err(e)) => (Answer::Broken(e.to_string()), Ended::failed(e.to_string())),
            Err(_) => {
                let e = "no answer before the deadline";
                (Answer::Broken(e.into()), Ended::failed(e))
            }
        };
        let ended = Ended {
            status: Some(status),
            content_type: content_type.clone(),
            ..ended
        };
        ctx.transcript.finish(call, started, ended);
        Streamed::Plain {
            call,
            content_type,
            answer,
        }
    }
}

/// Why a request got no response.
enum Unsent {
    /// The credentials could not be presented (a token endpoint refused the client, say).
    Refused(String),
    /// The transport failed or the call ran out of time.
    Failed(String),
}

impl Unsent {
    /// The message, with a refusal noted on the context.
    fn noted(self, ctx: &mut Ctx<'_>) -> String {
        match self {
            Unsent::Refused(why) => {
                ctx.refuse(why.clone());
                why
            }
            Unsent::Failed(why) => why,
        }
    }
}

/// Sends `request` with the credentials on it; after a 401, once more with renewed tokens
/// when there are tokens to renew (an OAuth token revoked or expired early).
async fn send_authorized(
    outbound: &Outbound,
    auth: Option<&Authenticator>,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, Unsent> {
    let Some(auth) = auth else {
        return outbound
            .send(request)
            .await
            .map_err(|e| Unsent::Failed(e.to_string()));
    };
    // A TLS alert about the client certificate is mutual TLS saying no.
    let failed = |e: FetchError| {
        let text = e.to_string();
        if auth.identity().is_some() && identity_refused(&text) {
            Unsent::Refused(format!(
                "the agent refused the TLS client certificate: {text}"
            ))
        } else {
            Unsent::Failed(text)
        }
    };
    let retry = request.try_clone();
    let first = auth
        .authorize(outbound, request)
        .await
        .map_err(Unsent::Refused)?;
    let response = outbound.send(first).await.map_err(failed)?;
    match retry {
        Some(retry) if response.status() == 401 && auth.renew() => {
            let again = auth
                .authorize(outbound, retry)
                .await
                .map_err(Unsent::Refused)?;
            outbound.send(again).await.map_err(failed)
        }
        _ => Ok(response),
    }
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A response body: JSON when it parses, else `{"raw": "<text>"}`.
fn body_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(bytes) }))
}
