//! An evidence-first A2A client: v1.0 JSON-RPC, v0.3 JSON-RPC, v1.0 HTTP+JSON and v1.0 gRPC,
//! chosen by the subject's version and the card's interface. Every request and response body,
//! every stream event with its receive time, and the headers (or gRPC status and metadata)
//! that matter are kept in a transcript; gRPC messages are kept as their proto3 JSON mapping,
//! so every binding reads alike. Nothing is parsed strictly here (that is
//! `domain::probe::events`'s lenient job).

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use url::Url;

use super::grpc::{self, CallStatus, GrpcEvents, GrpcTransport, Reply, StreamBounds, StreamKind};
use super::sse::{Frame, SseLimits, SseReader, StreamStop};
use super::{FetchError, Outbound, read_capped};
use crate::domain::time::{self, Timestamp};
use crate::domain::version::ProtocolVersion;

/// Which wire format to speak.
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

    /// The wire for a subject version and interface binding, if cardgate speaks it.
    pub fn for_interface(version: ProtocolVersion, binding: &str) -> Option<Self> {
        match (version.is_pre_1_0(), binding.to_ascii_uppercase().as_str()) {
            (true, "JSONRPC") => Some(Self::JsonRpcV03),
            (false, "JSONRPC") => Some(Self::JsonRpcV1),
            (false, "HTTP+JSON") => Some(Self::RestV1),
            (false, "GRPC") => Some(Self::GrpcV1),
            _ => None,
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

/// What the transcript left out once its budget was spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Omitted {
    pub exchanges: usize,
    pub bodies: usize,
    pub frames: usize,
    pub bytes: usize,
}

/// One exchange, as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    pub call: u32,
    pub step: String,
    pub method: String,
    pub url: String,
    pub request: Value,
    pub started_at: Timestamp,
    pub elapsed_ms: u64,
    pub status: Option<u16>,
    pub content_type: Option<String>,
    /// The response body: JSON when it parsed, else `{"raw": "<text>"}`.
    pub response: Option<Value>,
    pub frames: Vec<FrameRecord>,
    pub error: Option<String>,
    /// gRPC only: the call's status and the metadata that came with it (headers on success,
    /// trailers on errors); `status` and `content_type` stay empty on this binding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<CallStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrameRecord {
    pub received_at: Timestamp,
    pub event: Option<String>,
    pub data: String,
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

pub struct A2aClient {
    outbound: Outbound,
    /// The gRPC channel (gRPC wire only), or why there is none.
    grpc: Option<Result<GrpcTransport, String>>,
    url: Url,
    wire: Wire,
    /// Sent as `A2A-Version` on v1.x wires: the subject's `Major.Minor`.
    version: HeaderValue,
    limits: CallLimits,
    next_call: u32,
    transcript: Vec<Exchange>,
    kept_bytes: usize,
    omitted: Omitted,
    /// No call runs past this (the probe cycle's deadline), whatever `limits.timeout` says.
    deadline: Option<Instant>,
}

impl A2aClient {
    pub fn new(
        outbound: Outbound,
        url: Url,
        wire: Wire,
        version: ProtocolVersion,
        limits: CallLimits,
    ) -> Self {
        let grpc = (wire == Wire::GrpcV1).then(|| {
            GrpcTransport::new(&outbound, &url, &version.to_string()).map_err(|e| e.to_string())
        });
        let version =
            HeaderValue::from_str(&version.to_string()).unwrap_or(HeaderValue::from_static("1.0"));
        Self {
            version,
            grpc,
            outbound,
            url,
            wire,
            limits,
            next_call: 0,
            transcript: Vec::new(),
            kept_bytes: 0,
            omitted: Omitted::default(),
            deadline: None,
        }
    }

    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// Bounds every later call by `deadline`.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
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

    /// The number the next call will be given.
    pub fn next_call(&self) -> u32 {
        self.next_call
    }

    pub fn transcript(&self) -> &[Exchange] {
        &self.transcript
    }

    pub fn into_transcript(self) -> Vec<Exchange> {
        self.transcript
    }

    /// What the transcript left out, if anything.
    pub fn omitted(&self) -> Option<Omitted> {
        (self.omitted != Omitted::default()).then_some(self.omitted)
    }

    /// Keeps `value` if the byte budget allows, else a note of its size in its place.
    fn within_budget(&mut self, value: Value) -> Value {
        let size = value.to_string().len();
        if self.kept_bytes + size <= self.limits.transcript_bytes {
            self.kept_bytes += size;
            return value;
        }
        self.omitted.bodies += 1;
        self.omitted.bytes += size;
        json!({ "omitted": format!("{size} bytes: the transcript's budget was spent") })
    }

    /// Records a frame of an open stream in its exchange.
    pub fn record_frame(&mut self, call: u32, frame: &Frame) {
        let size = frame.data.len();
        let fits = self.kept_bytes + size <= self.limits.transcript_bytes;
        let Some(ex) = self.transcript.iter_mut().find(|e| e.call == call) else {
            return;
        };
        if fits {
            self.kept_bytes += size;
            ex.frames.push(FrameRecord {
                received_at: frame.received_at,
                event: frame.event.clone(),
                data: frame.data.clone(),
            });
        } else {
            self.omitted.frames += 1;
            self.omitted.bytes += size;
        }
    }

    /// Records how an open stream ended.
    pub fn record_stream_end(&mut self, call: u32, end: &str, started: Instant) {
        if let Some(ex) = self.transcript.iter_mut().find(|e| e.call == call) {
            ex.elapsed_ms = started.elapsed().as_millis() as u64;
            ex.error = Some(format!("stream ended: {end}"));
        }
    }

    fn message(&self, out: &Outgoing<'_>) -> Value {
        let mut message = match self.wire {
            Wire::JsonRpcV03 => json!({
                "kind": "message", "messageId": uuid::Uuid::new_v4().to_string(), "role": "user",
                "parts": [{"kind": "text", "text": out.text}],
            }),
            Wire::JsonRpcV1 | Wire::RestV1 | Wire::GrpcV1 => json!({
                "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": out.text}],
            }),
        };
        if let Some(task_id) = out.task_id {
            message["taskId"] = task_id.into();
        }
        if let Some(context_id) = out.context_id {
            message["contextId"] = context_id.into();
        }
        let mut configuration = match self.wire {
            Wire::JsonRpcV03 => json!({ "blocking": !out.non_blocking }),
            Wire::JsonRpcV1 | Wire::RestV1 | Wire::GrpcV1 => {
                json!({ "returnImmediately": out.non_blocking })
            }
        };
        if let Some((url, token)) = out.webhook {
            let config = json!({ "url": url, "token": token });
            match self.wire {
                // v0.3 `MessageSendConfiguration.pushNotificationConfig`.
                Wire::JsonRpcV03 => configuration["pushNotificationConfig"] = config,
                // v1.0 `SendMessageConfiguration.taskPushNotificationConfig` (taskId left empty).
                Wire::JsonRpcV1 | Wire::RestV1 | Wire::GrpcV1 => {
                    configuration["taskPushNotificationConfig"] = config
                }
            }
        }
        json!({ "message": message, "configuration": configuration })
    }

    /// SendMessage / message/send.
    pub async fn send(&mut self, step: &str, out: &Outgoing<'_>) -> (u32, Answer) {
        let params = self.message(out);
        let (call, answer) = self.call(step, Op::Send, params).await;
        if let Some((_, token)) = out.webhook {
            self.redact(call, token);
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
        self.call(
            step,
            Op::Cancel(task_id.to_string()),
            json!({ "id": task_id }),
        )
        .await
    }

    /// Registers a push webhook for a task.
    pub async fn set_push(
        &mut self,
        step: &str,
        task_id: &str,
        url: &str,
        token: &str,
    ) -> (u32, Answer) {
        let params = match self.wire {
            Wire::JsonRpcV03 => {
                json!({ "taskId": task_id, "pushNotificationConfig": { "url": url, "token": token } })
            }
            Wire::JsonRpcV1 | Wire::RestV1 | Wire::GrpcV1 => {
                json!({ "taskId": task_id, "url": url, "token": token })
            }
        };
        let (call, answer) = self
            .call(step, Op::SetPush(task_id.to_string()), params)
            .await;
        // The token is a credential for cardgate's webhook while the probe runs; the
        // transcript is readable by any reader key, so it never holds the token.
        self.redact(call, token);
        (call, answer)
    }

    /// Replaces `secret` wherever it appears in an exchange's recorded bodies.
    fn redact(&mut self, call: u32, secret: &str) {
        let scrub = |v: &mut Value| {
            let text = v.to_string();
            if text.contains(secret) {
                if let Ok(clean) = serde_json::from_str(&text.replace(secret, "[redacted]")) {
                    *v = clean;
                }
            }
        };
        if let Some(ex) = self.transcript.iter_mut().find(|e| e.call == call) {
            scrub(&mut ex.request);
            if let Some(response) = ex.response.as_mut() {
                scrub(response);
            }
        }
    }

    /// SendStreamingMessage / message/stream. The caller reads the frames within `deadline`.
    pub async fn stream(&mut self, step: &str, out: &Outgoing<'_>, deadline: Instant) -> Streamed {
        let params = self.message(out);
        if self.wire == Wire::GrpcV1 {
            return self
                .stream_grpc(step, StreamKind::SendStreamingMessage, params, deadline)
                .await;
        }
        self.open_stream(step, &Op::Stream, params, deadline).await
    }

    /// SubscribeToTask / tasks/resubscribe (HTTP+JSON `GET /tasks/{id}:subscribe`, as the
    /// proto routes it; both SDKs accept GET and POST). The caller reads the frames within
    /// `deadline`.
    pub async fn subscribe(&mut self, step: &str, task_id: &str, deadline: Instant) -> Streamed {
        let params = json!({ "id": task_id });
        if self.wire == Wire::GrpcV1 {
            return self
                .stream_grpc(step, StreamKind::SubscribeToTask, params, deadline)
                .await;
        }
        let op = Op::Subscribe(task_id.to_string());
        self.open_stream(step, &op, params, deadline).await
    }

    /// Whether an error answer is the binding's form of `TaskNotCancelableError`: JSON-RPC
    /// -32002; gRPC `FAILED_PRECONDITION` and HTTP+JSON 400, each with the reason
    /// `TASK_NOT_CANCELABLE` (A2A v1.0 §5.4).
    pub fn refused_as_not_cancelable(&self, code: i64, message: &str) -> bool {
        const REASON: &str = "(TASK_NOT_CANCELABLE)";
        match self.wire {
            Wire::JsonRpcV1 | Wire::JsonRpcV03 => code == -32002,
            Wire::GrpcV1 => {
                code == i64::from(tonic::Code::FailedPrecondition as i32)
                    && message.contains(REASON)
            }
            Wire::RestV1 => code == 400 && message.contains(REASON),
        }
    }

    /// Opens a streaming call over HTTP (JSON-RPC or HTTP+JSON): the event stream once its
    /// headers arrived, or the plain answer in its place.
    async fn open_stream(
        &mut self,
        step: &str,
        op: &Op,
        params: Value,
        deadline: Instant,
    ) -> Streamed {
        let (call, request) = match self.build(step, op, params) {
            Ok(built) => built,
            Err(answer) => {
                return Streamed::Plain {
                    call: self.next_call - 1,
                    content_type: None,
                    answer,
                };
            }
        };
        let started = Instant::now();
        let sent = self
            .send_timed(request.header(ACCEPT, "text/event-stream"))
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                let answer = Answer::Broken(e.to_string());
                self.finish(call, started, None, None, None, Some(e.to_string()));
                return Streamed::Plain {
                    call,
                    content_type: None,
                    answer,
                };
            }
        };
        let status = response.status().as_u16();
        let content_type = content_type(response.headers());
        let event_stream = content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if status != 200 || !event_stream {
            return self
                .plain_answer(call, started, status, content_type, response)
                .await;
        }
        self.finish(
            call,
            started,
            Some(status),
            content_type.clone(),
            None,
            None,
        );
        let limits = SseLimits {
            max_event_bytes: self.limits.max_event_bytes,
            max_events: self.limits.max_events,
            idle: self.limits.idle,
            deadline,
        };
        Streamed::Events {
            call,
            reader: Box::new(EventReader::Sse(SseReader::new(response, limits))),
            content_type,
        }
    }

    /// A server stream over gRPC: the stream once its response headers arrived, or the status
    /// that refused it, within the call timeout.
    async fn stream_grpc(
        &mut self,
        step: &str,
        kind: StreamKind,
        params: Value,
        deadline: Instant,
    ) -> Streamed {
        let method = format!("{}/{}", grpc::SERVICE, kind.name());
        let call = self.open_exchange(step, method, self.url.to_string(), Some(&params));
        let started = Instant::now();
        let transport = match self.grpc_transport() {
            Ok(t) => t,
            Err(e) => {
                self.finish(call, started, None, None, None, Some(e.clone()));
                return Self::plain(call, Answer::Broken(e));
            }
        };
        let timeout = self.call_timeout();
        let opened = tokio::time::timeout(
            timeout,
            transport.stream(kind, &params, self.limits.max_event_bytes),
        )
        .await;
        match opened {
            Err(_) => {
                self.outbound.metrics.outbound("timeout");
                let e = self.no_answer(timeout);
                self.finish(call, started, None, None, None, Some(e.clone()));
                Self::plain(call, Answer::Broken(e))
            }
            Ok(Err(reply)) => {
                let answer = self.grpc_finish(call, started, reply);
                Self::plain(call, answer)
            }
            Ok(Ok((events, status))) => {
                let content_type = status.metadata.get("content-type").cloned();
                self.finish(call, started, None, content_type.clone(), None, None);
                self.set_grpc_status(call, status);
                let bounds = StreamBounds {
                    max_events: self.limits.max_events,
                    idle: self.limits.idle,
                    deadline,
                };
                Streamed::Events {
                    call,
                    reader: Box::new(EventReader::Grpc { events, bounds }),
                    content_type,
                }
            }
        }
    }

    /// A stream that never opened: the answer in its place.
    fn plain(call: u32, answer: Answer) -> Streamed {
        Streamed::Plain {
            call,
            content_type: None,
            answer,
        }
    }

    fn grpc_transport(&self) -> Result<GrpcTransport, String> {
        match &self.grpc {
            Some(Ok(t)) => Ok(t.clone()),
            Some(Err(e)) => Err(e.clone()),
            None => Err("no gRPC channel on this wire".into()),
        }
    }

    fn no_answer(&self, timeout: Duration) -> String {
        if timeout < self.limits.timeout {
            "no answer before the probe cycle's deadline".to_string()
        } else {
            format!("no answer within {} s", timeout.as_secs())
        }
    }

    /// A unary gRPC call, recorded like any exchange.
    async fn call_grpc(&mut self, step: &str, op: &Op, params: Value) -> (u32, Answer) {
        let method = op.grpc_method();
        let name = format!("{}/{}", grpc::SERVICE, method.name());
        let call = self.open_exchange(step, name, self.url.to_string(), Some(&params));
        let started = Instant::now();
        let transport = match self.grpc_transport() {
            Ok(t) => t,
            Err(e) => {
                self.finish(call, started, None, None, None, Some(e.clone()));
                return (call, Answer::Broken(e));
            }
        };
        let timeout = self.call_timeout();
        let max = self.limits.max_body;
        match tokio::time::timeout(timeout, transport.unary(method, &params, max)).await {
            Ok(reply) => {
                let answer = self.grpc_finish(call, started, reply);
                (call, answer)
            }
            Err(_) => {
                self.outbound.metrics.outbound("timeout");
                let e = self.no_answer(timeout);
                self.finish(call, started, None, None, None, Some(e.clone()));
                (call, Answer::Broken(e))
            }
        }
    }

    /// Records how a gRPC call ended and turns it into the probe's answer.
    fn grpc_finish(&mut self, call: u32, started: Instant, reply: Reply) -> Answer {
        match reply {
            Reply::Message(body, status) => {
                let content_type = status.metadata.get("content-type").cloned();
                self.finish(call, started, None, content_type, Some(body.clone()), None);
                self.set_grpc_status(call, status);
                Answer::Result(body)
            }
            Reply::Status(status) => {
                // The A2A reason beside the gRPC code: NOT_FOUND alone does not say what was.
                let reason = status
                    .reason()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                let answer = Answer::Error {
                    code: i64::from(status.code),
                    message: format!("gRPC {}{reason}: {}", status.status, status.message),
                };
                let error = format!("gRPC status {} {}", status.status, status.message);
                self.finish(call, started, None, None, None, Some(error));
                self.set_grpc_status(call, status);
                answer
            }
            Reply::Unsendable(e) => {
                self.finish(call, started, None, None, None, Some(e.clone()));
                Answer::Broken(e)
            }
        }
    }

    fn set_grpc_status(&mut self, call: u32, status: CallStatus) {
        if let Some(ex) = self.transcript.iter_mut().find(|e| e.call == call) {
            ex.grpc = Some(status);
        }
    }

    /// Sends `request`, bounded by the call timeout.
    async fn send_timed(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, FetchError> {
        let timeout = self.call_timeout();
        tokio::time::timeout(timeout, self.outbound.send(request))
            .await
            .unwrap_or_else(|_| {
                Err(FetchError::Timeout {
                    url: self.url.to_string(),
                    secs: timeout.as_secs(),
                })
            })
    }

    /// A streaming send answered with something other than an event stream: its body, read
    /// within the call timeout and interpreted like any answer.
    async fn plain_answer(
        &mut self,
        call: u32,
        started: Instant,
        status: u16,
        content_type: Option<String>,
        response: reqwest::Response,
    ) -> Streamed {
        let read = tokio::time::timeout(
            self.call_timeout(),
            read_capped(response, self.limits.max_body),
        )
        .await;
        let (body, error) = match read {
            Ok(Ok(b)) => (Some(body_value(&b)), None),
            Ok(Err(e)) => (None, Some(e.to_string())),
            Err(_) => (None, Some("no answer before the deadline".to_string())),
        };
        let answer = self.interpret(status, body.as_ref(), error.as_deref());
        self.finish(
            call,
            started,
            Some(status),
            content_type.clone(),
            body,
            error,
        );
        Streamed::Plain {
            call,
            content_type,
            answer,
        }
    }

    async fn call(&mut self, step: &str, op: Op, params: Value) -> (u32, Answer) {
        if self.wire == Wire::GrpcV1 {
            return self.call_grpc(step, &op, params).await;
        }
        let (call, request) = match self.build(step, &op, params) {
            Ok(built) => built,
            Err(answer) => return (self.next_call - 1, answer),
        };
        let started = Instant::now();
        let timeout = self.call_timeout();
        let result = tokio::time::timeout(timeout, async {
            let response = self
                .outbound
                .send(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let content_type = content_type(response.headers());
            let body = read_capped(response, self.limits.max_body)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((status, content_type, body))
        })
        .await
        .unwrap_or_else(|_| {
            Err(if timeout < self.limits.timeout {
                "no answer before the probe cycle's deadline".to_string()
            } else {
                format!("no answer within {} s", timeout.as_secs())
            })
        });
        match result {
            Ok((status, content_type, body)) => {
                let body = body_value(&body);
                let answer = self.interpret(status, Some(&body), None);
                self.finish(call, started, Some(status), content_type, Some(body), None);
                (call, answer)
            }
            Err(e) => {
                self.finish(call, started, None, None, None, Some(e.clone()));
                (call, Answer::Broken(e))
            }
        }
    }

    /// The HTTP request for an operation, recorded as a new exchange.
    fn build(
        &mut self,
        step: &str,
        op: &Op,
        params: Value,
    ) -> Result<(u32, reqwest::RequestBuilder), Answer> {
        let (method, url, body, http_method) = match self.wire {
            Wire::JsonRpcV1 | Wire::JsonRpcV03 | Wire::GrpcV1 => {
                let method = op.jsonrpc_method(self.wire);
                let body = json!({
                    "jsonrpc": "2.0", "id": self.next_call + 1, "method": method, "params": params,
                });
                (
                    method.to_string(),
                    self.url.clone(),
                    Some(body),
                    reqwest::Method::POST,
                )
            }
            Wire::RestV1 => {
                let (http_method, path, body) = op.rest(params);
                let base = self.url.as_str().trim_end_matches('/');
                let url = match Url::parse(&format!("{base}{path}")) {
                    Ok(url) => url,
                    Err(e) => {
                        self.next_call += 1;
                        return Err(Answer::Broken(e.to_string()));
                    }
                };
                (format!("{http_method} {path}"), url, body, http_method)
            }
        };
        let call = self.open_exchange(step, method, url.to_string(), body.as_ref());
        let mut headers = HeaderMap::new();
        if self.wire != Wire::JsonRpcV03 {
            // v1.0 agents refuse calls without it; v0.3 compat layers refuse calls with it.
            headers.insert("A2A-Version", self.version.clone());
        }
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let mut request = self
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

    /// Numbers a new call and records its exchange (within the transcript's budgets).
    fn open_exchange(
        &mut self,
        step: &str,
        method: String,
        url: String,
        body: Option<&Value>,
    ) -> u32 {
        let call = self.next_call;
        self.next_call += 1;
        if self.transcript.len() < self.limits.transcript_exchanges {
            let request = self.within_budget(body.cloned().unwrap_or(Value::Null));
            self.transcript.push(Exchange {
                call,
                step: step.to_string(),
                method,
                url,
                request,
                started_at: time::now(),
                elapsed_ms: 0,
                status: None,
                content_type: None,
                response: None,
                frames: Vec::new(),
                error: None,
                grpc: None,
            });
        } else {
            self.omitted.exchanges += 1;
        }
        call
    }

    fn finish(
        &mut self,
        call: u32,
        started: Instant,
        status: Option<u16>,
        content_type: Option<String>,
        response: Option<Value>,
        error: Option<String>,
    ) {
        if !self.transcript.iter().any(|e| e.call == call) {
            return; // an exchange past the count budget
        }
        let response = response.map(|r| self.within_budget(r));
        if let Some(ex) = self.transcript.iter_mut().find(|e| e.call == call) {
            ex.elapsed_ms = started.elapsed().as_millis() as u64;
            ex.status = status;
            ex.content_type = content_type;
            ex.response = response;
            ex.error = error;
        }
    }

    /// Extracts the A2A result (or error) from a response body.
    fn interpret(&self, status: u16, body: Option<&Value>, error: Option<&str>) -> Answer {
        if let Some(e) = error {
            return Answer::Broken(e.to_string());
        }
        let Some(body) = body else {
            return Answer::Broken("no body".into());
        };
        match self.wire {
            Wire::JsonRpcV1 | Wire::JsonRpcV03 | Wire::GrpcV1 => jsonrpc_result(status, body),
            Wire::RestV1 if (200..300).contains(&status) => Answer::Result(body.clone()),
            Wire::RestV1 => {
                // The A2A reason beside the status, as for gRPC: 400 alone does not say what
                // was refused (google.rpc.Status with an ErrorInfo detail, §11.6).
                let reason = body
                    .pointer("/error/details")
                    .and_then(Value::as_array)
                    .and_then(|details| {
                        details
                            .iter()
                            .find_map(|d| d.get("reason").and_then(Value::as_str))
                    })
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                Answer::Error {
                    code: i64::from(status),
                    message: body
                        .pointer("/error/message")
                        .and_then(Value::as_str)
                        .map_or_else(
                            || format!("HTTP {status}{reason}"),
                            |m| format!("HTTP {status}{reason}: {m}"),
                        ),
                }
            }
        }
    }

    /// Parses one SSE frame's data into the A2A result it carries.
    pub fn frame_result(&self, frame: &Frame) -> Answer {
        match serde_json::from_str::<Value>(&frame.data) {
            Err(e) => Answer::Broken(format!("frame is not JSON: {e}")),
            Ok(value) => match self.wire {
                Wire::JsonRpcV1 | Wire::JsonRpcV03 => jsonrpc_result(200, &value),
                Wire::RestV1 | Wire::GrpcV1 => Answer::Result(value),
            },
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
}

impl Op {
    fn jsonrpc_method(&self, wire: Wire) -> &'static str {
        let v1 = wire == Wire::JsonRpcV1;
        match self {
            Op::Send if v1 => "SendMessage",
            Op::Send => "message/send",
            Op::Stream if v1 => "SendStreamingMessage",
            Op::Stream => "message/stream",
            Op::Get(..) if v1 => "GetTask",
            Op::Get(..) => "tasks/get",
            Op::Cancel(_) if v1 => "CancelTask",
            Op::Cancel(_) => "tasks/cancel",
            Op::SetPush(_) if v1 => "CreateTaskPushNotificationConfig",
            Op::SetPush(_) => "tasks/pushNotificationConfig/set",
            Op::Subscribe(_) if v1 => "SubscribeToTask",
            Op::Subscribe(_) => "tasks/resubscribe",
        }
    }

    /// The gRPC method of a unary operation (streams open through their own path).
    fn grpc_method(&self) -> grpc::Method {
        match self {
            // Streams open through their own path; no unary call names them.
            Op::Send | Op::Stream | Op::Subscribe(_) => grpc::Method::SendMessage,
            Op::Get(..) => grpc::Method::GetTask,
            Op::Cancel(_) => grpc::Method::CancelTask,
            Op::SetPush(_) => grpc::Method::CreateTaskPushNotificationConfig,
        }
    }

    /// Method, path and body for v1.0 HTTP+JSON (A2A §11.3).
    fn rest(&self, params: Value) -> (reqwest::Method, String, Option<Value>) {
        use reqwest::Method;
        match self {
            Op::Send => (Method::POST, "/message:send".into(), Some(params)),
            Op::Stream => (Method::POST, "/message:stream".into(), Some(params)),
            Op::Get(id, history) => {
                let query = history
                    .map(|n| format!("?historyLength={n}"))
                    .unwrap_or_default();
                (Method::GET, format!("/tasks/{}{query}", encode(id)), None)
            }
            Op::Cancel(id) => (
                Method::POST,
                format!("/tasks/{}:cancel", encode(id)),
                Some(json!({})),
            ),
            Op::SetPush(id) => (
                Method::POST,
                format!("/tasks/{}/pushNotificationConfigs", encode(id)),
                Some(params),
            ),
            Op::Subscribe(id) => (
                Method::GET,
                format!("/tasks/{}:subscribe", encode(id)),
                None,
            ),
        }
    }
}

fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn body_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(bytes) }))
}

fn jsonrpc_result(status: u16, body: &Value) -> Answer {
    // JSON-RPC 2.0 sends `result` or `error`, never both; some servers send both with the
    // unused one null, so whichever is not null is the answer.
    let present = |key: &str| body.get(key).filter(|v| !v.is_null());
    if let Some(result) = present("result") {
        return Answer::Result(result.clone());
    }
    if let Some(error) = present("error") {
        return Answer::Error {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_string(),
        };
    }
    if body.get("raw").is_some() {
        return Answer::Broken(format!("HTTP {status}: the answer is not JSON"));
    }
    if body.get("result").is_some() {
        return Answer::Result(Value::Null);
    }
    Answer::Broken(format!(
        "HTTP {status}: a JSON-RPC answer needs `result` or `error`"
    ))
}
