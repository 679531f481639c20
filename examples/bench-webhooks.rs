//! Webhook latency: from the ledger append to the start of each delivery's request, with many
//! subscriptions. A conformant fake agent is registered and probed, which appends three
//! announced events (`subject.created`, `probe.finished`, `subject.promoted`); every one of the
//! N subscriptions gets each. A receiver in this process records when each request arrives;
//! the latency of a delivery is its arrival time minus its event's `recorded_at` (the same
//! clock). cardgate, the agent and the receiver share this process and the machine's cores.
//!
//! `cargo run --release --example bench-webhooks -- [subscriptions] [callees]` (callees are
//! registered one after another, each once the deliveries about the one before arrived: more
//! samples of the same thing); with
//! `RUST_LOG=cardgate::service::webhooks=debug`, each sending round logs where its time went
//! (claim, send, record).
//! `BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --release --example bench-webhooks`

#[path = "support/bench_db.rs"]
mod bench_db;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use cardgate::app::{App, Settings};
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use cardgate::remote::NetworkPolicy;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// The allocator the shipped binary uses (src/main.rs): what is measured is cardgate as it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Each request's arrival time and body, parsed only after the run: the receiver does as little
/// as a receiver elsewhere would cost this machine (nothing), so what is measured is cardgate.
type Arrivals = Arc<Mutex<Vec<(DateTime<Utc>, Bytes)>>>;

fn arrivals_of(log: &Arrivals) -> std::sync::MutexGuard<'_, Vec<(DateTime<Utc>, Bytes)>> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const TOKEN: &str = "bench-admin-token-0123456789abcdefghijklmnop";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var_os("RUST_LOG").is_some() {
        cardgate::telemetry::init(cardgate::telemetry::LogFormat::Text);
    }
    let subscriptions: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let callees: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let work = tempfile::tempdir()?;
    let db = bench_db::BenchDb::open("cardgate_whbench", work.path()).await?;
    let target = db.target.clone();
    println!("backend: {target:?}, {subscriptions} subscriptions, {callees} callees");

    // The receiver.
    let arrivals: Arrivals = Arc::default();
    let app = Router::new()
        .route(
            "/hook",
            post(|State(log): State<Arrivals>, body: Bytes| async move {
                let at = Utc::now();
                arrivals_of(&log).push((at, body));
                "ok"
            }),
        )
        .with_state(arrivals.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // cardgate, in process.
    let mut settings = Settings::new(target);
    settings.auth = cardgate::http::permissions::AuthSettings {
        rate_per_sec: 1e9,
        burst: 1e9,
        ..Default::default()
    }
    .with_admin_token(TOKEN);
    settings.outbound.policy = NetworkPolicy::new(
        NetworkPolicy::parse_allowed("127.0.0.0/8").map_err(anyhow::Error::msg)?,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    settings.listen = listener.local_addr()?;
    settings.probe.public_url = Some(format!("{base}/").parse()?);
    // The agent is on loopback, one host to the politeness limits: what is measured here
    // starts at the ledger append, so the probes that cause the events need not be spaced.
    settings.hosts = cardgate::domain::politeness::HostLimits::loose(64);
    // BENCH_WEBHOOK_ROUNDS compares sending rounds in flight (CARDGATE_WEBHOOK_ROUNDS).
    if let Some(rounds) = std::env::var("BENCH_WEBHOOK_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        settings.webhooks.rounds = rounds;
    }
    // BENCH_WEBHOOK_HOST_CONCURRENCY: attempts in flight to the one receiver host
    // (CARDGATE_WEBHOOK_HOST_CONCURRENCY, 16 by default).
    if let Some(limit) = std::env::var("BENCH_WEBHOOK_HOST_CONCURRENCY")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        settings.webhooks.host_concurrency = limit;
    }
    let app = App::build(settings).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.serve(listener, async {
        let _ = stopped.await;
    }));

    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
    };
    for _ in 0..subscriptions {
        let r = post("/v1/subscriptions", json!({"url": hook})).await?;
        anyhow::ensure!(r.status() == 201, "subscribing: {}", r.status());
    }
    // One callee after another, each once its deliveries have all arrived: every callee adds
    // three samples per subscription, taken on a quiet registry.
    let mut agents = Vec::with_capacity(callees);
    for n in 1..=callees {
        let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant).await?;
        let r = post("/v1/callees", json!({"card_url": agent.origin()})).await?;
        anyhow::ensure!(r.status() == 201, "registering: {}", r.status());
        agents.push(agent);
        let expected = 3 * subscriptions * n;
        let started = std::time::Instant::now();
        while arrivals_of(&arrivals).len() < expected
            && started.elapsed() < Duration::from_secs(300)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let expected = 3 * subscriptions * callees;

    let typed: Vec<(String, f64)> = arrivals_of(&arrivals)
        .iter()
        .filter_map(|(at, body)| {
            let payload: Value = serde_json::from_slice(body).ok()?;
            let recorded = payload["data"]["event"]["recorded_at"].as_str()?;
            let recorded: DateTime<Utc> = recorded.parse().ok()?;
            let ms = (*at - recorded).num_microseconds()? as f64 / 1000.0;
            Some((payload["type"].as_str()?.to_string(), ms))
        })
        .collect();
    // Per event type: where the time goes differs (a promotion waits for its attestation and
    // for the delivery before it about the same subject).
    for kind in ["subject.created", "probe.finished", "subject.promoted"] {
        let mut of: Vec<f64> = typed
            .iter()
            .filter(|(t, _)| t == kind)
            .map(|(_, ms)| *ms)
            .collect();
        of.sort_by(f64::total_cmp);
        if let Some(median) = of.get(of.len() / 2) {
            println!("  {kind}: p50 {median:.1} ms");
        }
    }
    let mut latencies: Vec<f64> = typed.into_iter().map(|(_, ms)| ms).collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{} of {expected} deliveries arrived; append → request start: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latencies.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        latencies.last().copied().unwrap_or(0.0)
    );
    let _ = stop.send(());
    server.await??;
    db.drop_database().await?;
    Ok(())
}
