//! Politeness per host (issue 30): two replicas on one database keep one host's limits
//! together; a host that answers 429 or 503 with `Retry-After` is left alone until then, and
//! that is not held against its agent (a refresh is deferred, a probe run is not judged).

use std::time::Duration;

use cardgate::domain::politeness::HostLimits;
use serde_json::{Value, json};

use crate::support::cards::{CardServer, Reply};
use crate::support::{TestDb, TestServer, on_both_backends, test_settings};

on_both_backends!(
    one_hosts_limits_hold_across_two_replicas,
    a_host_asking_to_wait_defers_a_refresh_without_failing_it,
    a_host_asking_to_wait_defers_a_probe_without_judging_it,
    a_grpc_host_asking_to_wait_defers_a_probe_without_judging_it,
);

/// `n` signed cards on one origin, registered through `server`; their callee ids.
async fn register_cards(server: &TestServer, agents: &CardServer, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let path = format!("/agents/{i}/agent-card.json");
        agents.serve_signed_card(&path, &agents.card(&format!("A{i}"), &["1.0"], json!({})));
        let callee = server.register(&agents.url(&path)).await;
        ids.push(callee["id"].as_str().unwrap().to_string());
    }
    ids
}

/// The test settings with these host limits.
fn limited(db: &TestDb, concurrency: u32, interval_ms: u64) -> cardgate::app::Settings {
    let mut settings = test_settings(db.target.clone());
    settings.hosts = HostLimits {
        concurrency,
        interval: Duration::from_millis(interval_ms),
        max_wait: Duration::from_secs(30),
    };
    settings
}

/// Refreshes every callee at once, alternating between the replicas.
async fn refresh_all(replicas: &[&TestServer], ids: &[String]) {
    let refreshes = ids.iter().enumerate().map(|(i, id)| {
        let replica = replicas[i % replicas.len()];
        async move {
            let (status, body) = replica
                .post(&format!("/v1/callees/{id}/refresh"), json!({}))
                .await;
            assert_eq!(status, 200, "{body}");
        }
    });
    futures::future::join_all(refreshes).await;
}

async fn one_hosts_limits_hold_across_two_replicas(db: TestDb) {
    let agents = CardServer::start().await;
    let registrar = TestServer::start(db.target.clone()).await;
    let ids = register_cards(&registrar, &agents, 6).await;
    registrar.stop().await;
    // Every answer takes 150 ms, so requests that were let through together overlap.
    agents.set_delay(Duration::from_millis(150));

    // Without limits that bite, the replicas' refreshes overlap at the host: the test can see
    // concurrency when there is some.
    let (a, b) = (
        TestServer::start_with(limited(&db, 16, 0)).await,
        TestServer::start_with(limited(&db, 16, 0)).await,
    );
    agents.reset_counts();
    refresh_all(&[&a, &b], &ids).await;
    assert!(
        agents.most_in_flight() > 1,
        "unlimited refreshes overlapped: {}",
        agents.most_in_flight()
    );
    a.stop().await;
    b.stop().await;

    // One request at a time, 200 ms between starts, for both replicas together.
    let (a, b) = (
        TestServer::start_with(limited(&db, 1, 200)).await,
        TestServer::start_with(limited(&db, 1, 200)).await,
    );
    agents.reset_counts();
    refresh_all(&[&a, &b], &ids).await;
    let arrivals = agents.arrivals();
    assert!(arrivals.len() >= ids.len(), "{} requests", arrivals.len());
    assert_eq!(agents.most_in_flight(), 1, "one request at a time");
    let gaps: Vec<u128> = arrivals
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_millis())
        .collect();
    // Starts are 200 ms apart at the client. What the server sees adds the client's
    // scheduling jitter to each arrival (a loaded machine sends one late and the next on
    // time), so each gap is held to half the interval, and the whole run to the sum of
    // intervals less one such delay. Two replicas keeping their limits apart would arrive
    // about 100 ms apart and take half as long.
    let span = arrivals
        .last()
        .unwrap()
        .duration_since(arrivals[0])
        .as_millis();
    let floor = 200 * (arrivals.len() as u128 - 1) - 100;
    assert!(
        gaps.iter().all(|&gap| gap >= 100) && span >= floor,
        "starts closer than the interval: {gaps:?} ms, {span} ms in all (at least {floor})"
    );
    // Every lease went back as its answer arrived (in the background, so soon after).
    let mut held = u64::MAX;
    for _ in 0..100 {
        held = db
            .store
            .host_leases("127.0.0.1", chrono::Utc::now())
            .await
            .unwrap();
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(held, 0, "leases left behind");
    a.stop().await;
    b.stop().await;
}

async fn a_host_asking_to_wait_defers_a_refresh_without_failing_it(db: TestDb) {
    let agents = CardServer::start().await;
    let server = TestServer::start(db.target.clone()).await;
    let ids = register_cards(&server, &agents, 2).await;
    let (throttled, bystander) = (&ids[0], &ids[1]);
    agents.set(
        "/agents/0/agent-card.json",
        Reply::Throttle {
            status: 429,
            retry_after: "120".into(),
        },
    );
    agents.reset_counts();

    let (status, refresh) = server
        .post(&format!("/v1/callees/{throttled}/refresh"), json!({}))
        .await;
    assert_eq!(status, 200, "{refresh}");
    assert_eq!(refresh["status"], "deferred", "{refresh:#}");
    assert_eq!(refresh["events"], json!([]), "nothing held against it");
    assert!(
        refresh["error"]
            .as_str()
            .unwrap()
            .contains("asked cardgate to wait"),
        "{refresh:#}"
    );
    let (_, callee) = server.get(&format!("/v1/callees/{throttled}")).await;
    let fetch = &callee["last_fetch"];
    assert_eq!(fetch["status"], "deferred", "{fetch:#}");
    assert_eq!(fetch["failures"], 0, "{fetch:#}");
    let next = chrono::DateTime::parse_from_rfc3339(fetch["next_at"].as_str().unwrap()).unwrap();
    let wait = next.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        (100..=121).contains(&wait.num_seconds()),
        "asked again when the host said: {wait}"
    );
    assert_eq!(
        callee["subjects"][0]["card_untrusted"],
        Value::Null,
        "{callee:#}"
    );

    // The host (the address, shared by both agents) is left alone: the other agent's refresh
    // is deferred too, and nothing more reaches the host.
    let (_, other) = server
        .post(&format!("/v1/callees/{bystander}/refresh"), json!({}))
        .await;
    assert_eq!(other["status"], "deferred", "{other:#}");
    assert_eq!(
        agents.arrivals().len(),
        1,
        "only the first request was sent"
    );
    server.stop().await;
}

async fn a_host_asking_to_wait_defers_a_probe_without_judging_it(db: TestDb) {
    let agents = CardServer::start().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register_cards(&server, &agents, 1).await.remove(0);
    // The card is fine; its agent's endpoint answers 503 with Retry-After.
    agents.set(
        "/a2a/jsonrpc",
        Reply::Throttle {
            status: 503,
            retry_after: "90".into(),
        },
    );
    the_probe_is_deferred(&server, &callee).await;
    server.stop().await;
}

/// The same over gRPC: the agent's gateway answers the calls with an HTTP 503 and
/// `Retry-After`, which gRPC itself would only see as `UNAVAILABLE`.
async fn a_grpc_host_asking_to_wait_defers_a_probe_without_judging_it(db: TestDb) {
    let agents = CardServer::start().await;
    let server = TestServer::start(db.target.clone()).await;
    let mut card = agents.card("G", &["1.0"], json!({}));
    card["supportedInterfaces"] = json!([
        {"url": agents.origin(), "protocolBinding": "GRPC", "protocolVersion": "1.0"}
    ]);
    agents.serve_signed_card("/grpc/agent-card.json", &card);
    let callee = server.register(&agents.url("/grpc/agent-card.json")).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    for method in [
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "CancelTask",
        "CreateTaskPushNotificationConfig",
        "SubscribeToTask",
        "GetExtendedAgentCard",
    ] {
        agents.set(
            &format!("/lf.a2a.v1.A2AService/{method}"),
            Reply::Throttle {
                status: 503,
                retry_after: "90".into(),
            },
        );
    }
    the_probe_is_deferred(&server, &callee).await;
    assert!(
        !agents
            .requests("/lf.a2a.v1.A2AService/SendStreamingMessage")
            .is_empty()
            || !agents
                .requests("/lf.a2a.v1.A2AService/SendMessage")
                .is_empty(),
        "the probe spoke gRPC"
    );
    server.stop().await;
}

/// Asks for a probe of `callee`, whose host answers 503 with `Retry-After: 90`: the run ends
/// aborted and unjudged, nothing reaches the ledger, and its job waits for the host's time.
async fn the_probe_is_deferred(server: &TestServer, callee: &str) {
    let (status, run) = server
        .post(&format!("/v1/callees/{callee}/probes"), json!({}))
        .await;
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap();
    let mut run = Value::Null;
    for _ in 0..200 {
        (_, run) = server.get(&format!("/v1/probes/{id}")).await;
        if run["status"] != "queued" && run["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(run["status"], "aborted", "{run:#}");
    assert!(
        run["error"].as_str().unwrap().starts_with("deferred"),
        "{run:#}"
    );
    assert_eq!(run["passed"], Value::Null, "not judged");
    // No verdict reached the ledger: the subject is as registration left it.
    let (_, ledger) = server
        .get(&format!("/v1/ledger?callee_id={callee}&limit=50"))
        .await;
    let kinds: Vec<&str> = ledger["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(
        !kinds
            .iter()
            .any(|k| *k == "probe-finished" || *k == "demoted"),
        "{kinds:?}"
    );
    // The job waits for the host's time, not the next sweep.
    let (_, jobs) = server.get("/v1/jobs?status=queued").await;
    let job = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "probe" && j["callee_id"] == callee)
        .unwrap_or_else(|| panic!("{jobs:#}"));
    assert_eq!(job["status"], "queued", "{job:#}");
    let due = chrono::DateTime::parse_from_rfc3339(job["run_after"].as_str().unwrap()).unwrap();
    let wait = due.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!((60..=91).contains(&wait.num_seconds()), "{job:#}");
}
