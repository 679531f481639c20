//! The A2A v1.0 gRPC binding (`lf.a2a.v1.A2AService`) as a transport of the probe's client.
//!
//! Calls take and give the proto3 JSON mapping of their messages (the shape the v1.0 JSON-RPC
//! binding carries), so the probe, its checks and its transcript read a gRPC exchange exactly
//! like a JSON-RPC one. The connection is held to the same rules as every other outbound one:
//! the interface URL's scheme and IP literal are checked before anything else, names are
//! resolved by cardgate and only addresses the [`NetworkPolicy`] permits are dialled, with a
//! connect timeout; TLS (rustls) for `https://`, plaintext HTTP/2 for `http://`; every message
//! is decoded against a size cap, and the caller bounds every call and stream in time.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::metadata::{KeyAndValueRef, MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, Uri};
use url::Url;

mod timestamp;

pub use timestamp::Timestamp;

use super::sse::{Frame, StreamStop};
use super::{FetchError, NetworkPolicy, Outbound, permitted_addresses};
use crate::domain::time;
use crate::metrics::Metrics;

/// The generated `lf.a2a.v1` messages, client and server, with their proto3 JSON mapping.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    rust_2018_idioms,
    unreachable_pub
)]
pub mod proto {
    tonic::include_proto!("lf.a2a.v1");
    include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.serde.rs"));
}

use proto::a2a_service_client::A2aServiceClient;

/// The service's full name, as it prefixes every method path.
pub const SERVICE: &str = "lf.a2a.v1.A2AService";

/// The unary methods the probe calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    GetTask,
    CancelTask,
    CreateTaskPushNotificationConfig,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::SendMessage => "SendMessage",
            Method::GetTask => "GetTask",
            Method::CancelTask => "CancelTask",
            Method::CreateTaskPushNotificationConfig => "CreateTaskPushNotificationConfig",
        }
    }
}

/// A gRPC call's status and the metadata that came with it (headers, and trailers on errors),
/// as the transcript records them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallStatus {
    /// The gRPC status code's number (`0` is OK).
    pub code: i32,
    /// Its name, e.g. `OK`, `NOT_FOUND`, `UNIMPLEMENTED`.
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl CallStatus {
    fn ok(metadata: &MetadataMap) -> Self {
        Self {
            code: 0,
            status: "OK".into(),
            message: String::new(),
            metadata: metadata_map(metadata),
        }
    }

    fn from_status(status: &tonic::Status) -> Self {
        Self {
            code: status.code() as i32,
            status: code_name(status.code()).into(),
            message: status.message().to_string(),
            metadata: metadata_map(status.metadata()),
        }
    }
}

/// How a unary call ended.
pub enum Reply {
    /// The response message, as proto3 JSON.
    Message(Value, CallStatus),
    /// A gRPC status other than OK.
    Status(CallStatus),
    /// The request could not be encoded from its JSON (cardgate's bug, said as such).
    Unsendable(String),
}

/// A connection to one interface: a lazily connected HTTP/2 channel behind the guard.
#[derive(Clone)]
pub struct GrpcTransport {
    channel: Channel,
    metrics: Metrics,
    /// Sent as `a2a-version` metadata on every call (A2A §10.2).
    version: MetadataValue<tonic::metadata::Ascii>,
}

impl GrpcTransport {
    /// A transport to `url`'s origin. Nothing is dialled until the first call; the URL's
    /// scheme and IP literal are refused here, named hosts when they are resolved.
    pub fn new(outbound: &Outbound, url: &Url, version: &str) -> Result<Self, FetchError> {
        outbound.check_url(url)?;
        let host = url.host_str().unwrap_or_default().to_string();
        let port = url.port_or_known_default().unwrap_or(80);
        // gRPC method paths are absolute (`/lf.a2a.v1.A2AService/SendMessage`): a path on the
        // interface URL does not prefix them, so only the origin is kept.
        let origin = format!("{}://{}", url.scheme(), authority(&host, port));
        let invalid = |e: &dyn std::fmt::Display| FetchError::Transport {
            url: url.to_string(),
            reason: e.to_string(),
        };
        let mut endpoint = Endpoint::from_shared(origin)
            .map_err(|e| invalid(&e))?
            .user_agent(outbound.user_agent.clone())
            .map_err(|e| invalid(&e))?
            .connect_timeout(outbound.connect_timeout);
        if url.scheme() == "https" {
            let mut tls = ClientTlsConfig::new()
                .with_native_roots()
                .domain_name(host.trim_start_matches('[').trim_end_matches(']'));
            if !outbound.extra_roots_pem.is_empty() {
                tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(
                    outbound.extra_roots_pem.as_slice(),
                ));
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| invalid(&e))?;
        }
        let connector = GuardedConnector {
            policy: outbound.policy.clone(),
            connect_timeout: outbound.connect_timeout,
            port,
        };
        Ok(Self {
            channel: endpoint.connect_with_connector_lazy(connector),
            metrics: outbound.metrics.clone(),
            version: MetadataValue::try_from(version)
                .unwrap_or_else(|_| MetadataValue::from_static("1.0")),
        })
    }

    fn client(&self, max_message: usize) -> A2aServiceClient<Channel> {
        A2aServiceClient::new(self.channel.clone())
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(max_message)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert("a2a-version", self.version.clone());
        request
    }

    /// Calls `method` with `params` (the request message as proto3 JSON).
    pub async fn unary(&self, method: Method, params: &Value, max_message: usize) -> Reply {
        let reply = self.unary_inner(method, params, max_message).await;
        if let Reply::Message(_, s) | Reply::Status(s) = &reply {
            self.count(s);
        }
        reply
    }

    /// Counts a call's result with every other outbound request's: a status the peer sent is
    /// a response; `UNAVAILABLE` is tonic's word for a connection that never carried one.
    fn count(&self, status: &CallStatus) {
        let result = match status.status.as_str() {
            "UNAVAILABLE" if status.message.contains("refused addresses") => "refused",
            "UNAVAILABLE" => "transport",
            _ => "response",
        };
        self.metrics.outbound(result);
    }

    async fn unary_inner(&self, method: Method, params: &Value, max_message: usize) -> Reply {
        let mut client = self.client(max_message);
        match method {
            Method::SendMessage => match decode::<proto::SendMessageRequest>(params) {
                Ok(m) => reply(client.send_message(self.request(m)).await),
                Err(e) => Reply::Unsendable(e),
            },
            Method::GetTask => match decode::<proto::GetTaskRequest>(params) {
                Ok(m) => reply(client.get_task(self.request(m)).await),
                Err(e) => Reply::Unsendable(e),
            },
            Method::CancelTask => match decode::<proto::CancelTaskRequest>(params) {
                Ok(m) => reply(client.cancel_task(self.request(m)).await),
                Err(e) => Reply::Unsendable(e),
            },
            Method::CreateTaskPushNotificationConfig => {
                match decode::<proto::TaskPushNotificationConfig>(params) {
                    Ok(m) => reply(
                        client
                            .create_task_push_notification_config(self.request(m))
                            .await,
                    ),
                    Err(e) => Reply::Unsendable(e),
                }
            }
        }
    }

    /// Opens `SendStreamingMessage`: the stream's events, or the status that refused it.
    pub async fn stream(
        &self,
        params: &Value,
        max_message: usize,
    ) -> Result<(GrpcEvents, CallStatus), Reply> {
        let message = decode::<proto::SendMessageRequest>(params).map_err(Reply::Unsendable)?;
        match self
            .client(max_message)
            .send_streaming_message(self.request(message))
            .await
        {
            Ok(response) => {
                let status = CallStatus::ok(response.metadata());
                self.count(&status);
                Ok((GrpcEvents::new(response.into_inner()), status))
            }
            Err(status) => {
                let status = CallStatus::from_status(&status);
                self.count(&status);
                Err(Reply::Status(status))
            }
        }
    }
}

/// The request message from its proto3 JSON.
fn decode<T: serde::de::DeserializeOwned>(params: &Value) -> Result<T, String> {
    T::deserialize(params).map_err(|e| format!("the request does not encode as protobuf: {e}"))
}

fn reply<T: serde::Serialize>(result: Result<tonic::Response<T>, tonic::Status>) -> Reply {
    match result {
        Ok(response) => {
            let status = CallStatus::ok(response.metadata());
            match serde_json::to_value(response.get_ref()) {
                Ok(json) => Reply::Message(json, status),
                Err(e) => Reply::Unsendable(format!("the response has no JSON form: {e}")),
            }
        }
        Err(status) => Reply::Status(CallStatus::from_status(&status)),
    }
}

/// A server stream read within the bounds SSE streams are read in: a cap on events, a
/// longest silence between them and a deadline (the per-message size cap is the decoder's).
pub struct GrpcEvents {
    stream: tonic::Streaming<proto::StreamResponse>,
    events: usize,
    ended: bool,
}

/// Bounds of one gRPC stream.
#[derive(Debug, Clone, Copy)]
pub struct StreamBounds {
    pub max_events: usize,
    pub idle: Duration,
    pub deadline: Instant,
}

impl GrpcEvents {
    fn new(stream: tonic::Streaming<proto::StreamResponse>) -> Self {
        Self {
            stream,
            events: 0,
            ended: false,
        }
    }

    /// The next event as a frame of proto3 JSON, or why there is none.
    pub async fn next(&mut self, bounds: StreamBounds) -> Result<Frame, StreamStop> {
        if self.ended {
            return Err(StreamStop::Closed);
        }
        let now = Instant::now();
        if now >= bounds.deadline {
            return Err(StreamStop::Deadline);
        }
        let wait = bounds.idle.min(bounds.deadline - now);
        let stop = match tokio::time::timeout(wait, self.stream.message()).await {
            Err(_) if Instant::now() >= bounds.deadline => StreamStop::Deadline,
            Err(_) => StreamStop::Idle,
            Ok(Ok(Some(event))) => {
                self.events += 1;
                if self.events > bounds.max_events {
                    StreamStop::TooManyEvents
                } else {
                    let data = serde_json::to_string(&event).unwrap_or_default();
                    return Ok(Frame {
                        received_at: time::now(),
                        event: None,
                        data,
                    });
                }
            }
            Ok(Ok(None)) => StreamStop::Closed,
            Ok(Err(status)) if too_large(&status) => StreamStop::EventTooLarge,
            Ok(Err(status)) if undecodable(&status) => {
                StreamStop::Malformed(status.message().to_owned())
            }
            Ok(Err(status)) => {
                let s = CallStatus::from_status(&status);
                StreamStop::Error(format!("gRPC status {} {}", s.status, s.message))
            }
        };
        // Whatever stopped the stream, it is not read again: dropping it resets the HTTP/2
        // stream, so a peer that keeps sending is cut off here.
        self.ended = true;
        Err(stop)
    }
}

/// Whether a status is the decoder's refusal of a message that is not protobuf. tonic builds
/// it on our side (INTERNAL, as gRPC's status code guide asks) with prost's error text and no
/// typed source, so its text is all there is to tell it from a status the peer sent.
fn undecodable(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Internal
        && status
            .message()
            .starts_with("failed to decode Protobuf message")
}

/// Whether a status is tonic's refusal of a message past the decoding cap.
fn too_large(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::OutOfRange && status.message().contains("too large")
}

fn authority(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

fn metadata_map(metadata: &MetadataMap) -> BTreeMap<String, String> {
    use base64::Engine as _;
    metadata
        .iter()
        .map(|kv| match kv {
            KeyAndValueRef::Ascii(k, v) => (
                k.as_str().to_string(),
                v.to_str().unwrap_or("(not text)").to_string(),
            ),
            // `-bin` entries (e.g. `grpc-status-details-bin`, the google.rpc.Status with its
            // ErrorInfo) are kept as the base64 gRPC sends them in.
            KeyAndValueRef::Binary(k, v) => (
                k.as_str().to_string(),
                v.to_bytes().map_or_else(
                    |_| "(undecodable)".to_string(),
                    |b| base64::engine::general_purpose::STANDARD_NO_PAD.encode(b),
                ),
            ),
        })
        .collect()
}

/// The name of a gRPC status code, as `grpc-status` documents it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Dials only what the policy permits: the URI's host is resolved by cardgate, each address
/// checked, and the connection made to a checked address within the connect timeout.
#[derive(Clone)]
struct GuardedConnector {
    policy: Arc<NetworkPolicy>,
    connect_timeout: Duration,
    port: u16,
}

type ConnectError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let policy = self.policy.clone();
        let timeout = self.connect_timeout;
        let port = uri.port_u16().unwrap_or(self.port);
        let host = uri.host().unwrap_or_default().to_string();
        Box::pin(async move {
            let addrs = permitted_addresses(&policy, &host).await?;
            let mut last: Option<ConnectError> = None;
            for addr in addrs {
                let target = SocketAddr::new(addr, port);
                match tokio::time::timeout(timeout, TcpStream::connect(target)).await {
                    Ok(Ok(stream)) => {
                        let _ = stream.set_nodelay(true);
                        return Ok(TokioIo::new(stream));
                    }
                    Ok(Err(e)) => last = Some(Box::new(e)),
                    Err(_) => last = Some(format!("connecting to {target} timed out").into()),
                }
            }
            Err(last.unwrap_or_else(|| "no address to connect to".into()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proto3_json_round_trips_the_shapes_the_probe_reads() {
        let event = json!({
            "statusUpdate": {
                "taskId": "t", "contextId": "c",
                "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-03T10:00:00Z"}
            }
        });
        let parsed: proto::StreamResponse = decode(&event).expect("decodes");
        let Some(proto::stream_response::Payload::StatusUpdate(update)) = &parsed.payload else {
            panic!("a status update: {parsed:?}");
        };
        assert_eq!(
            update.status.as_ref().map(|s| s.state),
            Some(proto::TaskState::Completed as i32)
        );
        assert_eq!(serde_json::to_value(&parsed).expect("encodes"), event);
    }

    #[test]
    fn a_missing_timestamp_stays_missing() {
        let task: proto::Task =
            decode(&json!({"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}})).expect("ok");
        let back = serde_json::to_value(&task).expect("encodes");
        assert_eq!(
            back,
            json!({"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}})
        );
    }

    #[test]
    fn unknown_fields_from_an_agent_are_skipped() {
        let task: Result<proto::Task, _> =
            decode(&json!({"id": "t", "kind": "task", "status": {"state": "TASK_STATE_WORKING"}}));
        assert!(task.is_ok());
    }
}
