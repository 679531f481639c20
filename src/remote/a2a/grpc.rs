//! The gRPC binding (A2A §10): unary calls and server streams on `lf.a2a.v1.A2AService`, each
//! recorded like an HTTP exchange, with the call's status and metadata in place of HTTP's.

use serde_json::Value;
use tokio::time::Instant;
use url::Url;

use super::transcript::Ended;
use super::{A2aError, Answer, Ctx, EventReader, Op, Streamed};
use crate::remote::grpc_transport::{
    self as wire, GrpcTransport, Method, Reply, StreamBounds, StreamKind,
};

pub(super) struct GrpcBinding {
    pub url: Url,
    /// The channel, or why none could be made (the first call reports it).
    pub channel: Result<GrpcTransport, String>,
}

impl GrpcBinding {
    /// A unary call, recorded like any exchange.
    pub(super) async fn call(
        &self,
        ctx: &mut Ctx<'_>,
        step: &str,
        op: &Op,
        params: Value,
    ) -> (u32, Answer) {
        let Some(method) = unary_method(op) else {
            // A stream.
            let call = ctx.transcript.skip();
            return (
                call,
                Answer::Broken(format!(
                    "{} is not a unary call cardgate makes over gRPC",
                    op.name()
                )),
            );
        };
        let (call, started, channel) = match self.open(ctx, step, method.name(), &params).await {
            Ok(opened) => opened,
            Err((call, answer)) => return (call, answer),
        };
        let max = ctx.limits.max_body;
        match tokio::time::timeout(ctx.timeout, channel.unary(method, &params, max)).await {
            Ok(reply) => (call, finish(ctx, (op, call), started, reply)),
            Err(_) => (call, timed_out(ctx, call, started)),
        }
    }

    /// A server stream: the stream once its response headers arrived, or the status that
    /// refused it, within the call timeout.
    pub(super) async fn open_stream(
        &self,
        ctx: &mut Ctx<'_>,
        step: &str,
        op: &Op,
        params: Value,
        deadline: Instant,
    ) -> Streamed {
        let Some(kind) = stream_kind(op) else {
            let call = ctx.transcript.skip();
            return Streamed::plain(call, Answer::Broken("a unary call is not a stream".into()));
        };
        let (call, started, channel) = match self.open(ctx, step, kind.name(), &params).await {
            Ok(opened) => opened,
            Err((call, answer)) => return Streamed::plain(call, answer),
        };
        let opened = tokio::time::timeout(
            ctx.timeout,
            channel.stream(kind, &params, ctx.limits.max_event_bytes),
        )
        .await;
        match opened {
            Err(_) => Streamed::plain(call, timed_out(ctx, call, started)),
            Ok(Err(reply)) => Streamed::plain(call, finish(ctx, (op, call), started, reply)),
            Ok(Ok((events, status))) => {
                let content_type = status.metadata.get("content-type").cloned();
                let ended = Ended {
                    content_type: content_type.clone(),
                    ..Ended::default()
                };
                ctx.transcript.finish(call, started, ended);
                ctx.transcript.set_grpc_status(call, status);
                let bounds = StreamBounds {
                    max_events: ctx.limits.max_events,
                    idle: ctx.limits.idle,
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

    /// Records a new exchange for `method` and hands out the channel with the credentials on
    /// it, or answers at once when there is none or the credentials cannot be presented.
    async fn open(
        &self,
        ctx: &mut Ctx<'_>,
        step: &str,
        method: &str,
        params: &Value,
    ) -> Result<(u32, Instant, &GrpcTransport), (u32, Answer)> {
        let name = format!("{}/{method}", wire::SERVICE);
        let call = ctx
            .transcript
            .open(step, name, self.url.to_string(), Some(params));
        let started = Instant::now();
        let fail = |ctx: &mut Ctx<'_>, e: String| {
            ctx.transcript
                .finish(call, started, Ended::failed(e.clone()));
            (call, Answer::Broken(e))
        };
        let channel = match &self.channel {
            Ok(channel) => channel,
            Err(e) => return Err(fail(ctx, e.clone())),
        };
        if let Some(auth) = ctx.auth {
            let presented = match auth.metadata(ctx.outbound).await {
                Ok(pairs) => channel.set_credentials(&pairs),
                Err(e) => Err(e),
            };
            if let Err(e) = presented {
                ctx.refuse(e.clone());
                return Err(fail(ctx, e));
            }
        }
        Ok((call, started, channel))
    }
}

/// A call that ran out of time: recorded, counted, and answered as broken.
fn timed_out(ctx: &mut Ctx<'_>, call: u32, started: Instant) -> Answer {
    ctx.outbound.metrics.outbound("timeout");
    let e = ctx.no_answer();
    ctx.transcript
        .finish(call, started, Ended::failed(e.clone()));
    Answer::Broken(e)
}

/// Whether an error is `error`: `FAILED_PRECONDITION` with its reason.
pub(super) fn refused_as(error: A2aError, code: i64, message: &str) -> bool {
    code == i64::from(tonic::Code::FailedPrecondition as i32) && message.contains(error.reason())
}

fn unary_method(op: &Op) -> Option<Method> {
    match op {
        Op::Send => Some(Method::SendMessage),
        Op::Get(..) => Some(Method::GetTask),
        Op::Cancel(_) => Some(Method::CancelTask),
        Op::SetPush(_) => Some(Method::CreateTaskPushNotificationConfig),
        Op::ExtendedCard => Some(Method::GetExtendedAgentCard),
        Op::Stream | Op::Subscribe(_) => None,
    }
}

fn stream_kind(op: &Op) -> Option<StreamKind> {
    match op {
        Op::Stream => Some(StreamKind::SendStreamingMessage),
        Op::Subscribe(_) => Some(StreamKind::SubscribeToTask),
        Op::Send | Op::Get(..) | Op::Cancel(_) | Op::SetPush(_) | Op::ExtendedCard => None,
    }
}

/// Records how a gRPC call ended and turns it into the probe's answer.
fn finish(ctx: &mut Ctx<'_>, (op, call): (&Op, u32), started: Instant, reply: Reply) -> Answer {
    match reply {
        Reply::Message(body, status) => {
            let ended = Ended {
                content_type: status.metadata.get("content-type").cloned(),
                response: Some(body.clone()),
                ..Ended::default()
            };
            ctx.transcript.finish(call, started, ended);
            ctx.transcript.set_grpc_status(call, status);
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
            if matches!(
                tonic::Code::from_i32(status.code),
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
            ) {
                ctx.refuse(format!(
                    "the agent answered gRPC {} to {}: {}",
                    status.status,
                    op.name(),
                    status.message.chars().take(200).collect::<String>()
                ));
            }
            ctx.transcript.finish(call, started, Ended::failed(error));
            ctx.transcript.set_grpc_status(call, status);
            answer
        }
        Reply::Unsendable(e) => {
            ctx.transcript
                .finish(call, started, Ended::failed(e.clone()));
            Answer::Broken(e)
        }
    }
}
