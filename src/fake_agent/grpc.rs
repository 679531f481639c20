//! The fake agent over the v1.0 gRPC binding: the same calls, behaviours and tasks as its
//! JSON-RPC face, with each request and answer carried as the protobuf of its v1.0 JSON.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use serde_json::Value;
use tonic::{Code, Request, Response, Status};

use super::{Reply, Shared, StreamItem, call, tokio_stream_from};
use crate::remote::grpc_transport::proto::{
    AgentCard, CancelTaskRequest, GetExtendedAgentCardRequest, GetTaskRequest, SendMessageRequest,
    SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task, TaskPushNotificationConfig,
    a2a_service_server::{A2aService, A2aServiceServer},
};
use crate::remote::grpc_transport::rpc;

/// The gRPC service's routes, to serve beside the card on one port.
pub(super) fn router(shared: Arc<Shared>) -> axum::Router {
    tonic::service::Routes::new(service(shared)).into_axum_router()
}

/// The fake agent's gRPC service, to serve elsewhere too (e.g. behind TLS in a test).
pub struct GrpcAgent(Arc<Shared>);

/// The service over `shared`'s tasks and behaviour.
pub(super) fn service(shared: Arc<Shared>) -> A2aServiceServer<GrpcAgent> {
    A2aServiceServer::new(GrpcAgent(shared))
}

type Events = Pin<Box<dyn Stream<Item = Result<StreamResponse, Status>> + Send>>;

impl GrpcAgent {
    /// `UNAUTHENTICATED` when the agent requires a bearer token the call lacks.
    fn authorized<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(token) = self.0.config.bearer.as_deref() else {
            return Ok(());
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented == Some(token) {
            Ok(())
        } else {
            Err(Status::unauthenticated("a valid bearer token is required"))
        }
    }

    /// One unary call through the shared dispatcher.
    async fn unary<In, Out>(
        &self,
        method: &str,
        request: Request<In>,
    ) -> Result<Response<Out>, Status>
    where
        In: serde::Serialize,
        Out: serde::de::DeserializeOwned,
    {
        self.authorized(&request)?;
        let params = params(&request)?;
        match call(self.0.clone(), method, &params, true).await {
            Reply::Result(value) => Ok(Response::new(message(value)?)),
            Reply::Error(code, text) => Err(status(code, text)),
            Reply::Unavailable => Err(Status::internal("push store unavailable")),
            Reply::Events(_) => Err(Status::internal("a stream where one answer was due")),
        }
    }

    /// A server-streaming method answered from the JSON agent's reply to `method`.
    async fn streamed<In: serde::Serialize>(
        &self,
        method: &str,
        request: Request<In>,
    ) -> Result<Response<Events>, Status> {
        self.authorized(&request)?;
        let params = params(&request)?;
        let events: Events = match call(self.0.clone(), method, &params, true).await {
            Reply::Events(rx) => Box::pin(tokio_stream_from(rx).filter_map(|item| async {
                match item {
                    StreamItem::Event(value) => Some(message::<StreamResponse>(value)),
                    // Bytes that are no protobuf cannot pass through a typed stream.
                    StreamItem::Malformed => None,
                }
            })),
            // `StreamingPlainJson`: the whole task at once, as a stream of one.
            Reply::Result(value) => Box::pin(futures::stream::iter([message(value)])),
            Reply::Error(code, text) => return Err(status(code, text)),
            Reply::Unavailable => return Err(Status::internal("unavailable")),
        };
        Ok(Response::new(events))
    }
}

/// The request as the v1.0 JSON the dispatcher reads, once its version metadata is checked.
fn params<T: serde::Serialize>(request: &Request<T>) -> Result<Value, Status> {
    // A missing version means 0.3, which gRPC does not carry (A2A v1.0 §3.6.2, §10.2).
    let version = request
        .metadata()
        .get("a2a-version")
        .and_then(|v| v.to_str().ok());
    if !version.is_some_and(|v| v.starts_with("1.")) {
        return Err(status(-32009, "a2a-version 1.x metadata is required"));
    }
    serde_json::to_value(request.get_ref()).map_err(|e| Status::internal(e.to_string()))
}

fn message<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, Status> {
    T::deserialize(&value).map_err(|e| Status::internal(format!("no protobuf for {value}: {e}")))
}

/// The gRPC status for an A2A error's JSON-RPC code, with the ErrorInfo detail naming its
/// reason in the `a2a-protocol.org` domain, as the official SDKs send it (A2A v1.0 §5.4).
fn status(code: i64, text: &str) -> Status {
    use prost::Message as _;
    let (code, reason) = match code {
        -32001 => (Code::NotFound, "TASK_NOT_FOUND"),
        -32002 => (Code::FailedPrecondition, "TASK_NOT_CANCELABLE"),
        -32003 => (Code::FailedPrecondition, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        -32004 => (Code::FailedPrecondition, "UNSUPPORTED_OPERATION"),
        -32009 => (Code::FailedPrecondition, "VERSION_NOT_SUPPORTED"),
        -32601 => (Code::Unimplemented, "METHOD_NOT_FOUND"),
        -32602 => (Code::InvalidArgument, "INVALID_PARAMS"),
        _ => (Code::Internal, "INTERNAL_ERROR"),
    };
    let info = rpc::ErrorInfo {
        reason: reason.into(),
        domain: "a2a-protocol.org".into(),
        metadata: Default::default(),
    };
    let details = rpc::Status {
        code: code as i32,
        message: text.into(),
        details: vec![pbjson_types::Any {
            type_url: "type.googleapis.com/google.rpc.ErrorInfo".into(),
            value: info.encode_to_vec().into(),
        }],
    };
    Status::with_details(code, text, details.encode_to_vec().into())
}

#[tonic::async_trait]
impl A2aService for GrpcAgent {
    async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Result<Response<SendMessageResponse>, Status> {
        self.unary("SendMessage", request).await
    }

    type SendStreamingMessageStream = Events;

    async fn send_streaming_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Result<Response<Events>, Status> {
        self.streamed("SendStreamingMessage", request).await
    }

    type SubscribeToTaskStream = Events;

    async fn subscribe_to_task(
        &self,
        request: Request<SubscribeToTaskRequest>,
    ) -> Result<Response<Events>, Status> {
        self.streamed("SubscribeToTask", request).await
    }

    async fn get_task(&self, request: Request<GetTaskRequest>) -> Result<Response<Task>, Status> {
        self.unary("GetTask", request).await
    }

    async fn cancel_task(
        &self,
        request: Request<CancelTaskRequest>,
    ) -> Result<Response<Task>, Status> {
        self.unary("CancelTask", request).await
    }

    async fn create_task_push_notification_config(
        &self,
        request: Request<TaskPushNotificationConfig>,
    ) -> Result<Response<TaskPushNotificationConfig>, Status> {
        self.unary("CreateTaskPushNotificationConfig", request)
            .await
    }

    async fn get_extended_agent_card(
        &self,
        request: Request<GetExtendedAgentCardRequest>,
    ) -> Result<Response<AgentCard>, Status> {
        self.authorized(&request)?;
        params(&request)?;
        let s = &self.0;
        let Some(card) = super::extended_card(s, false) else {
            return Err(status(-32004, "Extended agent card not configured"));
        };
        // Signed in its proto3 JSON form, which is what a verifier reads back from the
        // message (empty lists and default values are not in it).
        let mut card = serde_json::to_value(message::<AgentCard>(card)?)
            .map_err(|e| Status::internal(e.to_string()))?;
        if s.config.sign {
            card = super::signed(&s.origin, &s.key, &card);
        }
        Ok(Response::new(message(card)?))
    }
}
