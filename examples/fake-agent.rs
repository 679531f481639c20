//! A scriptable fake A2A agent on loopback, for trying cardgate by hand:
//!
//! ```sh
//! cargo run --example fake-agent -- --behaviour no-terminal-timestamp
//! ```
//!
//! It prints its card URL; register it with a cardgate started with
//! `CARDGATE_ALLOW_NETWORKS=127.0.0.0/8`.

use std::time::Duration;

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: String,
    #[arg(long, value_enum, default_value_t = Behaviour::Conformant)]
    behaviour: Behaviour,
    /// Protocol versions to offer (1.0 and/or 0.3).
    #[arg(long, value_delimiter = ',', default_value = "1.0")]
    versions: Vec<String>,
    /// Advertise streaming.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    streaming: bool,
    /// Advertise push notifications.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    push: bool,
    /// Advertise stateTransitionHistory (v0.3-only cards).
    #[arg(long)]
    state_transition_history: bool,
    /// Milliseconds between the states of a task (0: all at once, like the SDK samples).
    #[arg(long, default_value_t = 0)]
    step_delay_ms: u64,
    /// Bytes of padding in every Task it answers with (a hostile agent's huge bodies).
    #[arg(long, default_value_t = 0)]
    padding_bytes: usize,
    /// Offer v1.0 over gRPC (on the same port as the card) instead of JSON-RPC.
    #[arg(long)]
    grpc: bool,
    /// Require `Authorization: Bearer <TOKEN>` on every A2A call (the card declares a
    /// `bearer` scheme); give cardgate the token as the callee's credential.
    #[arg(long, value_name = "TOKEN")]
    bearer: Option<String>,
    /// Misbehave only on turns whose message text contains TEXT; conformant otherwise, so the
    /// agent passes its probes and fails in the field.
    #[arg(long, value_name = "TEXT")]
    fault_on: Option<String>,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let versions = args
        .versions
        .iter()
        .map(|v| match v.as_str() {
            "0.3" => "0.3",
            _ => "1.0",
        })
        .collect();
    let config = FakeAgentConfig {
        versions,
        streaming: args.streaming,
        push: args.push,
        state_transition_history: args.state_transition_history,
        sign: true,
        step_delay: Duration::from_millis(args.step_delay_ms),
        public_origin: None,
        padding: args.padding_bytes,
        tenant: None,
        grpc: args.grpc,
        bearer: args.bearer,
        extended_card: false,
    };
    let agent = FakeAgent::start_on(&args.listen, config, args.behaviour).await?;
    agent.set_fault_on(args.fault_on);
    println!(
        "fake agent ({:?}) at {}/.well-known/agent-card.json",
        args.behaviour,
        agent.origin()
    );
    tokio::signal::ctrl_c().await?;
    agent.stop();
    Ok(())
}
