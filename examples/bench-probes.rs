//! The probe engine's own cost: CPU and wall time per probe cycle against a local fake agent
//! (run as a separate process, so its work is not counted), and how many cycles run at once in
//! how much memory.
//!
//! `cargo run --release --example bench-probes -- [sequential-count] [concurrency levels…]`
//! (build the fake agent first: `cargo build --release --example fake-agent`). With
//! `BENCH_GRPC=1` the agent offers v1.0 over gRPC only, and the cycles run over gRPC.

#[path = "../bench/proc_stats.rs"]
mod proc_stats;

use std::process::Stdio;
use std::time::{Duration, Instant};

use cardgate::domain::card::parse_card;
use cardgate::domain::probe::ProbeScript;
use cardgate::domain::version::ProtocolVersion;
use cardgate::remote::{NetworkPolicy, Outbound, OutboundSettings};
use cardgate::service::probe::{
    Credentials, CycleInput, InboxDelivery, ProbeSettings, Progress, PushInbox, probe_interface,
};

struct NoInbox;

#[async_trait::async_trait]
impl PushInbox for NoInbox {
    async fn deliveries(&self, _token: &str, _skip: usize) -> Vec<InboxDelivery> {
        Vec::new()
    }
}

struct Quiet;

impl Progress for Quiet {
    fn step(&self, _: &str) {}
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let sequential: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let levels: Vec<usize> = {
        let given: Vec<usize> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
        if given.is_empty() {
            vec![1, 10, 100, 500, 1000]
        } else {
            given
        }
    };

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let grpc = std::env::var("BENCH_GRPC").is_ok_and(|v| v == "1");
    let agent_bin = std::env::current_exe()?.with_file_name("fake-agent");
    let mut agent = tokio::process::Command::new(&agent_bin)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--push", "false"])
        .args(grpc.then_some("--grpc"))
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "{}: {e} (build it: cargo build --release --example fake-agent)",
                agent_bin.display()
            )
        })?;
    let card_url = format!("http://127.0.0.1:{port}/.well-known/agent-card.json");
    let mut card = None;
    for _ in 0..100 {
        if let Ok(r) = reqwest::get(&card_url).await {
            card = Some(r.json::<serde_json::Value>().await?);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let card = parse_card(&card.ok_or_else(|| anyhow::anyhow!("the fake agent did not start"))?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let policy =
        NetworkPolicy::new(NetworkPolicy::parse_allowed("127.0.0.0/8").expect("valid CIDR"));
    let outbound = Outbound::new(OutboundSettings {
        policy,
        ..OutboundSettings::default()
    })?;
    let settings = ProbeSettings::default();
    let script = ProbeScript::default();
    let version = ProtocolVersion::new(1, 0);
    let once = || async {
        let out = probe_interface(CycleInput {
            outbound: &outbound,
            settings: &settings,
            card: &card,
            version,
            binding: None,
            script: &script,
            push: None,
            inbox: &NoInbox,
            progress: &Quiet,
            credentials: &Credentials::default(),
        })
        .await
        .expect("probe ran");
        assert!(
            out.judgement
                .findings
                .iter()
                .any(|f| f.code == cardgate::domain::probe::Rule::FullLifecycle)
        );
        out.transcript.as_array().map_or(0, Vec::len)
    };
    once().await; // warm up connections

    println!(
        "probe cycle over {}: lifecycle (streamed) against a conformant fake agent in another process",
        if grpc { "gRPC" } else { "JSON-RPC" }
    );
    let cpu0 = proc_stats::cpu_time();
    let t0 = Instant::now();
    let mut exchanges = 0;
    for _ in 0..sequential {
        exchanges += once().await;
    }
    let wall = t0.elapsed();
    let cpu = proc_stats::cpu_time() - cpu0;
    println!(
        "sequential: {sequential} cycles, {:.2} exchanges each; wall {:.2} ms/cycle; cardgate CPU {:.3} ms/cycle",
        exchanges as f64 / sequential as f64,
        wall.as_secs_f64() * 1000.0 / sequential as f64,
        cpu.as_secs_f64() * 1000.0 / sequential as f64
    );

    println!("concurrency   wall      cycles/s   peak RSS   RSS growth per cycle");
    for level in levels {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let base = proc_stats::rss_kib();
        proc_stats::reset_peak();
        let t0 = Instant::now();
        let runs: Vec<_> = (0..level).map(|_| once()).collect();
        futures::future::join_all(runs).await;
        let wall = t0.elapsed();
        let peak = proc_stats::peak_rss_kib();
        println!(
            "{level:>11}   {:>6.0} ms   {:>8.0}   {:>6} KiB   {:>6.1} KiB",
            wall.as_secs_f64() * 1000.0,
            level as f64 / wall.as_secs_f64(),
            peak,
            peak.saturating_sub(base) as f64 / level as f64
        );
    }
    agent.kill().await?;
    Ok(())
}
