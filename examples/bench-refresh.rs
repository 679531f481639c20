//! One refresh sweep over many callees whose cards are unchanged (the card server answers 304
//! to every conditional request): the sweep enqueues a refresh job per callee and the workers
//! drain the queue. Reports wall time for the sweep and cardgate's CPU time per callee (the card
//! server runs in another process and is not counted; with SQLite the database engine is).
//!
//! `cargo run --release --example bench-refresh -- [callees] [workers]`
//! `BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --release --example bench-refresh`
//!
//! `BENCH_HOSTS=N` serves the cards from N loopback addresses (127.0.1.1, 127.0.1.2, …, each a
//! host of its own to the politeness limits) and keeps those limits at their defaults (2 in
//! flight and 100 ms between starts per host, across replicas): a sweep then cannot go faster
//! than 10·N fetches a second. `BENCH_REPLICAS=2` runs two registries on the one database, each
//! with its own workers, draining the one queue under the one shared host budget (Postgres).

#[path = "../bench/proc_stats.rs"]
#[allow(dead_code)] // shared with bench-probes, which uses all of it
mod proc_stats;

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use cardgate::app::{App, Settings};
use cardgate::domain::callee::{Callee, CardUrl, FetchState, FetchStatus};
use cardgate::domain::card::signature::SignatureVerdict;
use cardgate::domain::card::{Assessment, CardSnapshot, parse_card};
use cardgate::domain::ids::{CalleeId, SnapshotId};
use cardgate::domain::ledger::{EventBody, NewEvent};
use cardgate::domain::time;
use cardgate::domain::version::ProtocolVersion;
use cardgate::remote::NetworkPolicy;
use cardgate::runtime::{schedule, worker};
use cardgate::storage::DatabaseTarget;
use serde_json::json;

const ETAG: &str = "\"card-v1\"";

/// The loopback address of card host `i` (0-based): 127.0.1.1 onwards, 250 to a /24.
fn card_host(i: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, 1 + (i / 250) as u8, 1 + (i % 250) as u8)
}

/// The card server: 304 when the ETag matches, else 200 (never needed in the sweep); on one
/// port of `hosts` loopback addresses (127.0.0.1 alone when `hosts` is 1).
async fn serve_cards() -> anyhow::Result<()> {
    let hosts: usize = std::env::args().nth(2).map_or(Ok(1), |a| a.parse())?;
    let first = if hosts > 1 {
        card_host(0)
    } else {
        std::net::Ipv4Addr::LOCALHOST
    };
    let listener = tokio::net::TcpListener::bind((first, 0)).await?;
    let port = listener.local_addr()?.port();
    let mut listeners = vec![listener];
    for i in 1..hosts {
        listeners.push(tokio::net::TcpListener::bind((card_host(i), port)).await?);
    }
    println!("{port}");
    let app = Router::new().route(
        "/c/{n}/agent-card.json",
        get(|headers: HeaderMap| async move {
            let unchanged =
                headers.get("if-none-match").and_then(|v| v.to_str().ok()) == Some(ETAG);
            (
                if unchanged {
                    StatusCode::NOT_MODIFIED
                } else {
                    StatusCode::OK
                },
                [("etag", ETAG)],
            )
        }),
    );
    let mut served = tokio::task::JoinSet::new();
    for listener in listeners {
        let app = app.clone();
        served.spawn(async move { axum::serve(listener, app).await });
    }
    while let Some(done) = served.join_next().await {
        done??;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("--serve-cards") {
        return serve_cards().await;
    }
    if std::env::var_os("RUST_LOG").is_some() {
        cardgate::telemetry::init(cardgate::telemetry::LogFormat::Text);
    }
    let callees: usize = std::env::args().nth(1).map_or(Ok(10_000), |a| a.parse())?;
    let workers: usize = std::env::args().nth(2).map_or(Ok(32), |a| a.parse())?;
    let hosts: usize = std::env::var("BENCH_HOSTS").map_or(Ok(1), |a| a.parse())?;
    let replicas: usize = std::env::var("BENCH_REPLICAS").map_or(Ok(1), |a| a.parse())?;

    // The card server in its own process.
    let mut server = tokio::process::Command::new(std::env::current_exe()?)
        .arg("--serve-cards")
        .arg(hosts.to_string())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt;
    tokio::io::BufReader::new(server.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .await?;
    let port: u16 = line.trim().parse()?;
    let card_origin = |n: usize| {
        if hosts > 1 {
            format!("http://{}:{port}", card_host(n % hosts))
        } else {
            format!("http://127.0.0.1:{port}")
        }
    };

    let dir = tempfile::tempdir()?;
    let (target, pg_db) = match std::env::var("BENCH_DATABASE_URL") {
        Ok(admin) => {
            let name = format!("cardgate_bench_{}", std::process::id());
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
                .execute(&mut conn)
                .await?;
            let mut url = url::Url::parse(&admin)?;
            url.set_path(&name);
            (
                DatabaseTarget::Postgres(url.to_string()),
                Some((admin, name)),
            )
        }
        Err(_) => (DatabaseTarget::Sqlite(dir.path().join("bench.db")), None),
    };
    let backend = match &target {
        DatabaseTarget::Postgres(_) => "postgres",
        DatabaseTarget::Sqlite(_) => "sqlite",
    };

    let mut settings = Settings::new(target.clone());
    settings.outbound.policy =
        NetworkPolicy::new(NetworkPolicy::parse_allowed("127.0.0.0/8").expect("valid CIDR"));
    settings.worker.concurrency = workers;
    settings.worker.poll = Duration::from_millis(50);
    settings.pool.max_connections = (workers as u32 + 4).min(64);
    settings.schedule.sweep_limit = callees as u32 + 1;
    // The sweep is called by hand, so its jobs are all due at once (a scheduled sweep spreads
    // them over its interval); and every card here is on one loopback address, one host to
    // the politeness limits, which would measure the limit (10 starts a second by default)
    // rather than the registry. The shared per-host budget is still taken for every fetch.
    settings.schedule.refresh = schedule::Schedule::Off;
    if hosts == 1 {
        settings.hosts = cardgate::domain::politeness::HostLimits::loose(1024);
    }
    // BENCH_HOSTS_SHARED=off: each replica's own limits only, to see what the shared budget
    // costs a fetch.
    settings.hosts_shared = std::env::var("BENCH_HOSTS_SHARED").map_or(true, |v| v != "off");
    let app = App::build(settings.clone()).await?;
    let state = app.services.clone();
    // The other replicas: their own processes' state (pools, host gates, worker names) on the
    // same database.
    let mut others = Vec::new();
    for n in 1..replicas {
        let mut theirs = settings.clone();
        theirs.worker.owner = format!("{}-replica-{n}", settings.worker.owner);
        others.push((App::build(theirs.clone()).await?.services.clone(), theirs));
    }

    // Seed: callees with a trusted snapshot (and its ETag) and one subject each.
    let sample = json!({"name": "bench", "supportedInterfaces": [{"url": format!("{}/a2a", card_origin(0)), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
    let card = parse_card(&sample).map_err(|e| anyhow::anyhow!("{e}"))?;
    let t0 = Instant::now();
    for n in 0..callees {
        let now = time::now();
        let callee = Callee {
            id: CalleeId::new(),
            card_url: CardUrl::parse(&format!("{}/c/{n}/agent-card.json", card_origin(n)))
                .expect("valid card URL"),
            name: None,
            created_at: now,
            trusted_keys: None,
            probe_script: None,
            fetch: FetchState {
                last_at: Some(now),
                status: Some(FetchStatus::Fetched),
                ..FetchState::default()
            },
            refresh_generation: 0,
        };
        let snapshot = CardSnapshot {
            id: SnapshotId::new(),
            callee_id: callee.id,
            fetched_at: now,
            url: callee.card_url.to_string(),
            sha256: "0".repeat(64),
            raw: sample.to_string().into_bytes(),
            etag: Some(ETAG.into()),
            last_modified: None,
            assessment: Assessment {
                trusted: true,
                problem: None,
                card: Some(card.clone()),
                signature: SignatureVerdict::Unsigned,
                uncovered: vec![],
            },
            source: cardgate::domain::card::SnapshotSource::Public,
            raw_pruned_at: None,
        };
        let event = NewEvent {
            callee_id: callee.id,
            protocol_version: ProtocolVersion::new(1, 0),
            body: EventBody::VersionAppeared {
                snapshot_id: snapshot.id,
                advertised: vec![],
            },
            actor: "bench".into(),
        };
        state
            .store
            .register_callee(&callee, &snapshot, &[event], &[], &[], now)
            .await?;
    }
    println!(
        "{backend}: seeded {callees} callees in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // The read models catch up with the seeding first: a use case's commit waits for its own
    // process's (read-your-writes), which would otherwise be counted as the sweep's.
    state.caught_up().await;
    for (services, _) in &others {
        services.caught_up().await;
    }

    // The sweep: enqueue, then let the workers drain the queue.
    let stop = tokio_util::sync::CancellationToken::new();
    let cpu0 = proc_stats::cpu_time();
    let t0 = Instant::now();
    let enqueued = schedule::refresh_sweep(&state, &settings.schedule).await?;
    let (enqueue_wall, enqueue_cpu) = (t0.elapsed(), proc_stats::cpu_time() - cpu0);
    let mut workers_running = vec![tokio::spawn(worker::run(
        state.clone(),
        settings.worker.clone(),
        stop.clone(),
    ))];
    for (services, theirs) in &others {
        workers_running.push(tokio::spawn(worker::run(
            services.clone(),
            theirs.worker.clone(),
            stop.clone(),
        )));
    }
    loop {
        let stats = state.store.queue_stats(state.now()).await?;
        if stats.queued + stats.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let wall = t0.elapsed();
    let cpu = proc_stats::cpu_time() - cpu0;
    stop.cancel();
    for worker in workers_running {
        worker.await?;
    }
    let done = state
        .store
        .jobs(Some(cardgate::domain::job::JobStatus::Done), None, 1)
        .await?
        .len();
    let failed = state
        .store
        .jobs(Some(cardgate::domain::job::JobStatus::Failed), None, 200)
        .await?
        .len();
    if hosts > 1 {
        println!(
            "{backend}: {hosts} card hosts, politeness limits at their defaults (at most {} fetches/s), \
             {replicas} replica(s) with {workers} workers each",
            hosts * 10
        );
    }
    println!(
        "{backend}: sweep of {enqueued} unchanged cards (304) with {workers} workers: {:.2} s wall, {:.0} callees/s; \
         cardgate CPU {:.3} ms per callee; peak RSS {} KiB; failed jobs {failed} (done sample {done})",
        wall.as_secs_f64(),
        enqueued as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64() * 1000.0 / enqueued as f64,
        proc_stats::peak_rss_kib()
    );
    let sample_callee = state.store.callees(None, 1).await?.remove(0);
    println!(
        "{backend}: of which enqueueing: {:.2} s wall, {:.3} ms CPU per callee",
        enqueue_wall.as_secs_f64(),
        enqueue_cpu.as_secs_f64() * 1000.0 / enqueued as f64
    );
    println!(
        "{backend}: a callee after the sweep: last fetch {:?}",
        sample_callee.fetch.status
    );
    state.store.close().await;
    if let Some((admin, name)) = pg_db {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "drop database if exists {name} with (force)"
        )))
        .execute(&mut conn)
        .await?;
    }
    server.kill().await?;
    Ok(())
}
