//! cardgate's interop test agent on `turul-a2a` (an A2A v1.0 server framework of its own,
//! not built on the official SDKs): an echo agent written against the crate's documented
//! `AgentExecutor` + `EventSink` API.
//!
//! `--host H --port P` (0 = any free port). Prints `READY http://H:<port>` once the socket
//! listens. The framework moves each turn to `working`; the agent then either asks for input
//! (text `need-input`) or emits an `echo: <text>` artifact and completes with an agent reply.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use turul_a2a::card_builder::AgentSkillBuilder;
use turul_a2a::prelude::*;
use turul_a2a::storage::InMemoryA2aStorage;
use turul_a2a_types::Role;

/// The echo agent. `origin` is set once the socket is bound, before anything is served.
struct Echo {
    origin: Arc<OnceLock<String>>,
    fallback: String,
    replies: AtomicU64,
}

impl Echo {
    fn agent_text(&self, task: &Task, text: String) -> Message {
        let n = self.replies.fetch_add(1, Ordering::Relaxed);
        Message::new(
            format!("{}-agent-{n}", task.id()),
            Role::Agent,
            vec![Part::text(text)],
        )
        .with_task_id(task.id())
        .with_context_id(task.context_id())
    }
}

#[async_trait::async_trait]
impl AgentExecutor for Echo {
    async fn execute(
        &self,
        task: &mut Task,
        message: &Message,
        ctx: &ExecutionContext,
    ) -> Result<(), A2aError> {
        // The framework has already moved the task to `working` (for a new task and for a
        // follow-up alike) and refuses working -> working, so the executor starts there.
        let text = message.joined_text();
        if text == "need-input" {
            let ask = self.agent_text(task, "Please send the missing input.".into());
            ctx.events.require_input(Some(ask)).await?;
            return Ok(());
        }
        let reply = format!("echo: {text}");
        let artifact = Artifact::new(format!("{}-echo", task.id()), vec![Part::text(&reply)])
            .with_name("echo");
        ctx.events.emit_artifact(artifact, false, true).await?;
        let done = self.agent_text(task, reply);
        ctx.events.complete(Some(done)).await?;
        Ok(())
    }

    fn agent_card(&self) -> turul_a2a_proto::AgentCard {
        let origin = self.origin.get().unwrap_or(&self.fallback);
        AgentCardBuilder::new("turul-a2a echo agent", "0.2.6")
            .description("Echoes the user's text (cardgate interop test agent on turul-a2a)")
            .url(format!("{origin}/jsonrpc"), "JSONRPC", "1.0")
            .url(origin.clone(), "HTTP+JSON", "1.0")
            .default_input_modes(vec!["text/plain"])
            .default_output_modes(vec!["text/plain"])
            .streaming(true)
            .push_notifications(true)
            .skill(
                AgentSkillBuilder::new("echo", "Echo", "Sends the text back")
                    .tags(vec!["echo"])
                    .build(),
            )
            .build()
            .expect("a complete card")
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

#[tokio::main]
async fn main() -> ExitCode {
    let addr = match parse_args() {
        Ok(addr) => addr,
        Err(why) => {
            eprintln!("usage: turul-a2a-agent --host 127.0.0.1 --port 0: {why}");
            return ExitCode::from(2);
        }
    };
    let origin = Arc::new(OnceLock::new());
    let echo = Echo {
        origin: origin.clone(),
        fallback: format!("http://{addr}"),
        replies: AtomicU64::new(0),
    };
    // Push delivery as the crate's README wires it: the flag on the storage, the delivery
    // store on the builder. Webhooks here are on loopback over http, which its SSRF guard
    // refuses unless the documented dev switch is on.
    let storage = InMemoryA2aStorage::new().with_push_dispatch_enabled(true);
    let server = A2aServer::builder()
        .executor(echo)
        .storage(storage.clone())
        .push_delivery_store(storage)
        .allow_insecure_push_urls(true)
        .bind(addr)
        .build();
    let bound = match server {
        Ok(server) => server.bind().await,
        Err(e) => Err(e),
    };
    let bound = match bound {
        Ok(bound) => bound,
        Err(e) => {
            eprintln!("turul-a2a-agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    let url = format!("http://{}", bound.local_addr());
    origin.set(url.clone()).expect("set once");
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "READY {url}");
        let _ = out.flush();
    }
    tokio::select! {
        served = bound.run() => match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("turul-a2a-agent: {e}");
                ExitCode::FAILURE
            }
        },
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}
