//! An evidence-first A2A client: v1.0 JSON-RPC, v0.3 JSON-RPC, v1.0 HTTP+JSON and v1.0 gRPC,
//! chosen by the subject's version and the card's interface. Every request and response body,
//! every stream event with its receive time, and the headers (or gRPC status and metadata)
//! that matter are kept in a transcript; gRPC messages are kept as their proto3 JSON mapping,
//! so every binding reads alike. Nothing is parsed strictly here (that is
//! `domain::probe::events`'s lenient job).
//!
//! Two axes, one file each: the `Dialect` says what a request looks like (v0.3 or v1.0
//! shapes), the transport how it travels (the HTTP carrier with JSON-RPC or HTTP+JSON framing,
//! or gRPC), chosen once from the [`Wire`] when the client is made.

mod dialect;
mod grpc;
mod http;
mod jsonrpc;
mod rest;
mod transcript;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use url::Url;

use self::dialect::Dialect;
pub use transcript::{Exchange, FrameRecord, Omitted};

use self::grpc::GrpcBinding;
use self::http::{Framing, HttpTransport};
use self::transcript::Transcript;
use super::Outbound;
use super::grpc_transport::{GrpcEvents, GrpcTransport, StreamBounds};
use super::presentation::Authenticator;
use super::sse::{Frame, SseReader, StreamStop};
use crate::domain::binding::Binding;
use crate::domain::version::ProtocolVersion;

/// The (dialect, binding) pairs cardgate speaks, as the transcript and the run name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wire {
    /// v1.0 JSON-RPC: `SendMessage`…, `A2A-Version: 1.0` on every call.
    JsonRpcV1,
    /// v0.2/v0.3 JSON-RPC: `message/send`…, lowercase states, `kind`, no version header.
    JsonRpcV03,
    /// v1.0 HTTP+JSON: `POST /message:send`….
    RestV1,
    /// v1.0 gRPC: `lf.a2a.v1.A2AService/SendMessage`…, `a2a-version` metadata on every call.
    GrpcV1,
}

impl Wire {
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::JsonRpcV1 => "json-rpc-v1",
            Wire::JsonRpcV03 => "json-rpc-v03",
            Wire::RestV1 => "rest-v1",
            Wire::GrpcV1 => "grpc-v1",
        }
    }

    /// The wire for a subject version and interface binding, if cardgate speaks it (v0.3
    /// only over JSON-RPC).
    pub fn for_interface(version: ProtocolVersion, binding: Binding) -> Option<Self> {
        match (version.is_pre_1_0(), binding) {
            (true, Binding::JsonRpc) => Some(Self::JsonRpcV03),
            (true, _) => None,
            (false, Binding::JsonRpc) => Some(Self::JsonRpcV1),
            (false, Binding::HttpJson) => Some(Self::RestV1),
            (false, Binding::Grpc) => Some(Self::GrpcV1),
        }
    }

    fn dialect(self) -> Dialect {
        match self {
            Wire::JsonRpcV03 => Dialect::V03,
            Wire::JsonRpcV1 | Wire::RestV1 | Wire::GrpcV1 => Dialect::V1,
        }
    }
}

/// Bounds of each call.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    pub max_body: usize,
    pub timeout: Duration,
    pub max_event_bytes: usize,
    pub max_events: usize,
    pub idle: Duration,
    /// Exchanges the transcript keeps (it is stored with the run and shown to every reader);
    /// later ones are counted, not kept.
    pub transcript_exchanges: usize,
    /// Bytes of bodies and event data the transcript keeps; past it, each body is replaced by
    /// a note of its size.
    pub transcript_bytes: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            max_body: 256 * 1024,
            timeout: Duration::from_secs(15),
            max_event_bytes: 256 * 1024,
            max_events: 200,
            idle: Duration::from_secs(10),
            transcript_exchanges: 200,
            transcript_bytes: 2 * 1024 * 1024,
        }
    }
}

/// What a call produced.
#[derive(Debug, Clone)]
pub enum Answer {
    /// The A2A result object (JSON-RPC `result`, or the REST body).
    Result(Value),
    /// A JSON-RPC error, or a REST error status with its body.
    Error { code: i64, message: String },
    /// No usable answer: transport failure, non-JSON, wrong shape.
    Broken(String),
}

/// An open streaming call.
pub enum Streamed {
    Events {
        call: u32,
        reader: Box<EventReader>,
        content_type: Option<String>,
    },
    /// Not an event stream: the plain answer instead.
    Plain {
        call: u32,
        content_type: Option<String>,
        answer: Answer,
    },
}

impl Streamed {
    /// A stream that never opened: the answer in its place.
    fn plain(call: u32, answer: Answer) -> Self {
        Streamed::Plain {
            call,
            content_type: None,
            answer,
        }
    }
}

/// What the probe sends.
#[derive(Debug, Clone)]
pub struct Outgoing<'a> {
    pub text: &'a str,
    pub task_id: Option<&'a str>,
    pub context_id: Option<&'a str>,
    /// Return at once instead of blocking until a terminal or interrupted state.
    pub non_blocking: bool,
    /// A webhook (URL, token) given inline in the message's configuration, so that a task
    /// that finishes at once still notifies.
    pub webhook: Option<(&'a str, &'a str)>,
}

/// The events of an open stream, whichever binding carries them.
pub enum EventReader {
    Sse(SseReader),
    Grpc {
        events: GrpcEvents,
        bounds: StreamBounds,
    },
}

impl EventReader {
    /// The next event, or why there is none.
    pub async fn next(&mut self) -> Result<Frame, StreamStop> {
        match self {
            EventReader::Sse(reader) => reader.next().await,
            EventReader::Grpc { events, bounds } => events.next(*bounds).await,
        }
    }
}

/// The operations the probe uses.
enum Op {
    Send,
    Stream,
    Get(String, Option<u32>),
    Cancel(String),
    SetPush(String),
    Subscribe(String),
    /// The authenticated extended agent card.
    ExtendedCard,
}

impl Op {
    /// The operation's v1.0 name, for messages.
    fn name(&self) -> &'static str {
        match self {
            Op::Send => "SendMessage",
            Op::Stream => "SendStreamingMessage",
            Op::Get(..) => "GetTask",
            Op::Cancel(_) => "CancelTask",
            Op::SetPush(_) => "CreateTaskPushNotificationConfig",
            Op::Subscribe(_) => "SubscribeToTask",
            Op::ExtendedCard => "GetExtendedAgentCard",
        }
    }
}

/// What an error body says, as `: <message>` (bounded), or nothing.
fn agent_words(body: &Value) -> String {
    let said = body
        .pointer("/error/message")
        .or_else(|| body.get("message"))
        .or_else(|| body.get("error").filter(|e| e.is_string()))
        .or_else(|| body.get("detail"))
        .or_else(|| body.get("raw"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    said.map(|s| format!(": {}", s.chars().take(200).collect::<String>()))
        .unwrap_or_default()
}

/// The A2A errors whose exact form a rule asks for (A2A v1.0 §5.4): a refusal in another
/// shape is still a refusal, but not the one the spec names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum A2aError {
    TaskNotCancelable,
    UnsupportedOperation,
}

impl A2aError {
    /// Its JSON-RPC code.
    fn code(self) -> i64 {
        match self {
            A2aError::TaskNotCancelable => -32002,
            A2aError::UnsupportedOperation => -32004,
        }
    }

    /// Its `ErrorInfo` reason, as the bindings that carry one put it in an error's message.
    fn reason(self) -> &'static str {
        match self {
            A2aError::TaskNotCancelable => "(TASK_NOT_CANCELABLE)",
            A2aError::UnsupportedOperation => "(UNSUPPORTED_OPERATION)",
        }
    }
}

/// How calls travel, chosen once from the wire.
enum Transport {
    Http(HttpTransport),
    Grpc(GrpcBinding),
}

/// What a transport needs of the client for one call.
struct Ctx<'a> {
    transcript: &'a mut Transcript,
    outbound: &'a Outbound,
    limits: &'a CallLimits,
    /// This call's timeout: its own, cut to what is left of the cycle's deadline.
    timeout: Duration,
    /// The credentials every call presents, if the card asks for any.
    auth: Option<&'a Authenticator>,
    /// Set once the callee (or its authorization server) refuses the credentials.
    refused: &'a mut Option<String>,
}

impl Ctx<'_> {
    /// Records that the credentials were refused (the first reason is kept): every later call
    /// is skipped, and the cycle's evidence counts for nothing.
    fn refuse(&mut self, reason: String) {
        if self.refused.is_none() {
            *self.refused = Some(reason);
        }
    }

    /// Notes an HTTP 401 or 403: the credentials (or their absence) were refused, with the
    /// agent's own words when its body has any.
    fn check_status(&mut self, op: &Op, status: u16, body: &Value) {
        if status == 401 || status == 403 {
            self.refuse(format!(
                "the agent answered HTTP {status} to {}{}",
                op.name(),
                agent_words(body)
            ));
        }
    }

    /// Why a call that timed out has no answer.
    fn no_answer(&self) -> String {
        if self.timeout < self.limits.timeout {
            "no answer before the probe cycle's deadline".to_string()
        } else {
            format!("no answer within {} s", self.timeout.as_secs())
        }
    }
}

pub struct A2aClient {
    outbound: Outbound,
    transport: Transport,
    wire: Wire,
    limits: CallLimits,
    transcript: Transcript,
    /// No call runs past this (the probe cycle's deadline), whatever `limits.timeout` says.
    deadline: Option<Instant>,
    auth: Option<Arc<Authenticator>>,
    refused: Option<String>,
}

impl A2aClient {
    pub fn new(
        outbound: Outbound,
        url: Url,
        wire: Wire,
        version: ProtocolVersion,
        limits: CallLimits,
    ) -> Self {
        let version = version.to_string();
        let http = |framing| {
            Transport::Http(HttpTransport {
                url: url.clone(),
                framing,
                version: wire.dialect().version_header(&version),
            })
        };
        let transport = match wire {
            Wire::GrpcV1 => Transport::Grpc(GrpcBinding {
                channel: GrpcTransport::new(&outbound, &url, &version).map_err(|e| e.to_string()),
                url: url.clone(),
            }),
            Wire::RestV1 => http(Framing::Rest),
            Wire::JsonRpcV1 | Wire::JsonRpcV03 => http(Framing::JsonRpc(wire.dialect())),
        };
        Self {
            outbound,
            transport,
            wire,
            transcript: Transcript::new(limits.transcript_exchanges, limits.transcript_bytes),
            limits,
            deadline: None,
            auth: None,
            refused: None,
        }
    }

    /// Presents `auth`'s credentials on every call. (Its TLS client certificate, if any, is
    /// the `outbound` client's: see [`Outbound::with_identity`].)
    pub fn with_auth(mut self, auth: Arc<Authenticator>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Why the callee or its authorization server refused the credentials, once one did
    /// (HTTP 401/403, gRPC UNAUTHENTICATED/PERMISSION_DENIED, a token endpoint's refusal).
    /// From then on no call is sent.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// Bounds every later call by `deadline`.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }

    /// The number the next call will be given.
    pub fn next_call(&self) -> u32 {
        self.transcript.next_call()
    }

    /// When call `call` started.
    pub fn call_started(&self, call: u32) -> Option<crate::domain::time::Timestamp> {
        self.transcript.started(call)
    }

    pub fn transcript(&self) -> &[Exchange] {
        self.transcript.exchanges()
    }

    pub fn into_transcript(self) -> Vec<Exchange> {
        self.transcript.into_exchanges()
    }

    /// What the transcript left out, if anything.
    pub fn omitted(&self) -> Option<Omitted> {
        self.transcript.omitted()
    }

    /// Records a frame of an open stream in its exchange.
    pub fn record_frame(&mut self, call: u32, frame: &Frame) {
        self.transcript.record_frame(call, frame);
    }

    /// Records how an open stream ended.
    pub fn record_stream_end(&mut self, call: u32, end: &str, started: Instant) {
        self.transcript.record_stream_end(call, end, started);
    }

    /// SendMessage / message/send.
    pub async fn send(&mut self, step: &str, out: &Outgoing<'_>) -> (u32, Answer) {
        let params = self.wire.dialect().send_params(out);
        let (call, answer) = self.call(step, Op::Send, params).await;
        if let Some((_, token)) = out.webhook {
            self.transcript.redact(call, token);
        }
        (call, answer)
    }

    /// GetTask / tasks/get, with the full history unless `history_length` says otherwise.
    pub async fn get_task(
        &mut self,
        step: &str,
        task_id: &str,
        history_length: Option<u32>,
    ) -> (u32, Answer) {
        let mut params = json!({ "id": task_id });
        if let Some(n) = history_length {
            params["historyLength"] = n.into();
        }
        self.call(step, Op::Get(task_id.to_string(), history_length), params)
            .await
    }

    /// CancelTask / tasks/cancel.
    pub async fn cancel(&mut self, step: &str, task_id: &str) -> (u32, Answer) {
        let op = Op::Cancel(task_id.to_string());
        self.call(step, op, json!({ "id": task_id })).await
    }

    /// Registers a push webhook for a task.
    pub async fn set_push(
        &mut self,
        step: &str,
        task_id: &str,
        url: &str,
        token: &str,
    ) -> (u32, Answer) {
        let params = self.wire.dialect().set_push_params(task_id, url, token);
        let (call, answer) = self
            .call(step, Op::SetPush(task_id.to_string()), params)
            .await;
        // The token is a credential for cardgate's webhook while the probe runs; the
        // transcript is readable by any reader key, so it never holds the token.
        self.transcript.redact(call, token);
        (call, answer)
    }

    /// GetExtendedAgentCard / agent/getAuthenticatedExtendedCard (HTTP+JSON
    /// `GET /extendedAgentCard`): the card the agent shows authenticated callers.
    pub async fn extended_card(&mut self, step: &str) -> (u32, Answer) {
        self.call(step, Op::ExtendedCard, json!({})).await
    }

    /// SendStreamingMessage / message/stream. The caller reads the frames within `deadline`.
    pub async fn stream(&mut self, step: &str, out: &Outgoing<'_>, deadline: Instant) -> Streamed {
        let params = self.wire.dialect().send_params(out);
        self.open_stream(step, Op::Stream, params, deadline).await
    }

    /// SubscribeToTask / tasks/resubscribe (HTTP+JSON `GET /tasks/{id}:subscribe`). The caller
    /// reads the frames within `deadline`.
    pub async fn subscribe(&mut self, step: &str, task_id: &str, deadline: Instant) -> Streamed {
        let op = Op::Subscribe(task_id.to_string());
        self.open_stream(step, op, json!({ "id": task_id }), deadline)
            .await
    }

    /// Whether an error answer is the binding's form of `error`: its JSON-RPC code; gRPC
    /// `FAILED_PRECONDITION` and HTTP+JSON 400, each with its `ErrorInfo` reason (A2A v1.0
    /// §5.4).
    pub fn refused_as(&self, error: A2aError, code: i64, message: &str) -> bool {
        match &self.transport {
            Transport::Http(http) => http.refused_as(error, code, message),
            Transport::Grpc(_) => grpc::refused_as(error, code, message),
        }
    }

    /// The A2A result one stream frame's data carries.
    pub fn frame_result(&self, frame: &Frame) -> Answer {
        match &self.transport {
            Transport::Http(http) => http.frame_result(frame),
            // gRPC frames are already the proto3 JSON of a StreamResponse.
            Transport::Grpc(_) => match serde_json::from_str::<Value>(&frame.data) {
                Ok(value) => Answer::Result(value),
                Err(e) => Answer::Broken(format!("frame is not JSON: {e}")),
            },
        }
    }

    async fn call(&mut self, step: &str, op: Op, params: Value) -> (u32, Answer) {
        if let Some(skipped) = self.skipped() {
            return skipped;
        }
        let (transport, mut ctx) = self.parts();
        match transport {
            Transport::Http(http) => http.call(&mut ctx, step, &op, params).await,
            Transport::Grpc(grpc) => grpc.call(&mut ctx, step, &op, params).await,
        }
    }

    async fn open_stream(
        &mut self,
        step: &str,
        op: Op,
        params: Value,
        deadline: Instant,
    ) -> Streamed {
        if let Some((call, answer)) = self.skipped() {
            return Streamed::plain(call, answer);
        }
        let (transport, mut ctx) = self.parts();
        match transport {
            Transport::Http(http) => {
                http.open_stream(&mut ctx, step, &op, params, deadline)
                    .await
            }
            Transport::Grpc(grpc) => {
                grpc.open_stream(&mut ctx, step, &op, params, deadline)
                    .await
            }
        }
    }

    /// A call not sent because the credentials were already refused: numbered, not recorded.
    fn skipped(&mut self) -> Option<(u32, Answer)> {
        let why = self.refused.as_ref()?;
        let answer = Answer::Broken(format!("not sent: {why}"));
        Some((self.transcript.skip(), answer))
    }

    /// The transport, and what it needs of the client for the next call.
    fn parts(&mut self) -> (&Transport, Ctx<'_>) {
        let timeout = self.call_timeout();
        let ctx = Ctx {
            transcript: &mut self.transcript,
            outbound: &self.outbound,
            limits: &self.limits,
            timeout,
            auth: self.auth.as_deref(),
            refused: &mut self.refused,
        };
        (&self.transport, ctx)
    }

    /// The time a call may take now: its own timeout, cut to what is left of the deadline.
    fn call_timeout(&self) -> Duration {
        match self.deadline {
            Some(d) => self
                .limits
                .timeout
                .min(d.saturating_duration_since(Instant::now())),
            None => self.limits.timeout,
        }
    }
}
