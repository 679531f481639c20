//! cardgate's interop test agent on `a2a-protocol-server` (tomtom215's a2a-rust, an A2A v1.0
//! server framework of its own, not built on the official SDKs): an echo agent written
//! against the crate's documented `AgentExecutor` + `EventEmitter` API.
//!
//! `--host H --port P` (0 = any free port). Prints `READY http://H:<port>` once the socket
//! listens. Every message moves its task to `working`, then either asks for input (text
//! `need-input`) or emits an `echo: <text>` artifact and completes with an agent reply.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use a2a_protocol_server::{
    AgentExecutor, CombinedDispatcher, EventEmitter, EventQueueWriter, HttpPushSender,
    RequestContext, RequestHandlerBuilder, Server,
};
use a2a_protocol_types::agent_card::{AgentCapabilities, AgentCard, AgentInterface, AgentSkill};
use a2a_protocol_types::error::A2aResult;
use a2a_protocol_types::events::{StreamResponse, TaskStatusUpdateEvent};
use a2a_protocol_types::message::{Message, Part};
use a2a_protocol_types::task::{ContextId, TaskState, TaskStatus};

/// The echo agent.
struct Echo {
    replies: AtomicU64,
}

impl Echo {
    /// An agent message on the context's task.
    fn agent_text(&self, ctx: &RequestContext, text: String) -> Message {
        let n = self.replies.fetch_add(1, Ordering::Relaxed);
        let mut message = Message::agent_text(format!("{}-agent-{n}", ctx.task_id), text);
        message.task_id = Some(ctx.task_id.clone());
        message.context_id = Some(ContextId::new(ctx.context_id.clone()));
        message
    }

    /// A status update carrying an agent message (the emitter's `status` carries none).
    async fn status_with(
        &self,
        ctx: &RequestContext,
        queue: &dyn EventQueueWriter,
        state: TaskState,
        text: String,
    ) -> A2aResult<()> {
        let mut status = TaskStatus::new(state);
        status.message = Some(self.agent_text(ctx, text));
        queue
            .write(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: ctx.task_id.clone(),
                context_id: ContextId::new(ctx.context_id.clone()),
                status,
                metadata: None,
            }))
            .await
    }
}

impl AgentExecutor for Echo {
    fn execute<'a>(
        &'a self,
        ctx: &'a RequestContext,
        queue: &'a dyn EventQueueWriter,
    ) -> Pin<Box<dyn Future<Output = A2aResult<()>> + Send + 'a>> {
        Box::pin(async move {
            let text: String = ctx.message.texts().collect();
            let emit = EventEmitter::new(ctx, queue);
            emit.status(TaskState::Working).await?;
            if text == "need-input" {
                let ask = "Please send the missing input.".to_string();
                return self
                    .status_with(ctx, queue, TaskState::InputRequired, ask)
                    .await;
            }
            let reply = format!("echo: {text}");
            let artifact = format!("{}-echo", ctx.task_id);
            emit.artifact(&artifact, vec![Part::text(&reply)], None, Some(true))
                .await?;
            self.status_with(ctx, queue, TaskState::Completed, reply)
                .await
        })
    }
}

/// `--host` and `--port` from the command line.
fn parse_args() -> Result<SocketAddr, String> {
    let mut host: IpAddr = [127, 0, 0, 1].into();
    let mut port: u16 = 0;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--host" => host = value.parse().map_err(|e| format!("--host {value}: {e}"))?,
            "--port" => port = value.parse().map_err(|e| format!("--port {value}: {e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(SocketAddr::new(host, port))
}

/// The card naming the bound origin: JSON-RPC at `/`, HTTP+JSON beside it.
fn card(origin: &str) -> AgentCard {
    AgentCard::new(
        "a2a-protocol-server echo agent",
        "0.15.0",
        AgentInterface::jsonrpc(origin),
    )
    .with_interface(AgentInterface::rest(origin))
    .with_description("Echoes the user's text (cardgate interop test agent on a2a-protocol-server)")
    .with_skill(AgentSkill::new("echo", "Echo", "Sends the text back").with_tags(["echo"]))
    .with_capabilities(
        AgentCapabilities::none()
            .with_streaming(true)
            .with_push_notifications(true),
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let addr = match parse_args() {
        Ok(addr) => addr,
        Err(why) => {
            eprintln!("usage: a2a-protocol-server-agent --host 127.0.0.1 --port 0: {why}");
            return ExitCode::from(2);
        }
    };
    let server = match Server::bind(addr).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("a2a-protocol-server-agent: binding {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let origin = match server.local_addr() {
        Ok(bound) => format!("http://{bound}"),
        Err(e) => {
            eprintln!("a2a-protocol-server-agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Webhooks here are on loopback, which the sender's SSRF guard refuses unless told
    // otherwise; only loopback hosts are allowed.
    let pusher = HttpPushSender::new()
        .allow_private_urls()
        .with_allowed_hosts(["127.0.0.1", "localhost"]);
    let handler = RequestHandlerBuilder::new(Echo {
        replies: AtomicU64::new(0),
    })
    .with_agent_card(card(&origin))
    .with_push_sender(pusher)
    .build();
    let handler = match handler {
        Ok(handler) => Arc::new(handler),
        Err(e) => {
            eprintln!("a2a-protocol-server-agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "READY {origin}");
        let _ = out.flush();
    }
    let report = server
        .serve_with_shutdown(CombinedDispatcher::new(handler), async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    eprintln!("a2a-protocol-server-agent: {report:?}");
    ExitCode::SUCCESS
}
