//! Hostile input: what an agent, or whoever registers one, can make cardgate reach or spend.
//! Each test names the attack and asserts the bound cardgate now meets.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cardgate::domain::card::signature::sign_card;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use cardgate::remote::{Limits, NetworkPolicy, Outbound, OutboundSettings, Redirects};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::probes::{finding, probe, register};
use crate::support::cards::{CardServer, Reply};
use crate::support::{TestDb, TestServer, on_both_backends, test_settings};

on_both_backends!(
    a_card_with_too_many_versions_is_refused_naming_the_cap,
    signatures_pointing_at_many_slow_key_sets_cost_a_few_fetches,
    an_untrusted_card_backs_off_and_is_not_stored_again_unchanged,
    unauthenticated_traffic_is_limited_per_address,
    an_interface_url_in_a_special_address_form_is_never_connected_to,
    padded_answers_and_endless_polling_keep_the_transcript_within_its_budget,
    a_webhook_flood_with_a_valid_token_stops_at_the_cap_and_leaves_nothing_behind,
    a_job_whose_worker_keeps_dying_is_given_up_with_the_reason,
    a_job_that_fails_ends_its_run_too,
    the_cycle_deadline_bounds_every_call,
);

/// A listener on 127.0.0.1 that counts the connections it accepts.
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (port, accepted)
}

async fn fetch(outbound: &Outbound, url: &str) -> Result<(), String> {
    let url = url::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let limits = Limits {
        max_body: 1024,
        timeout: Duration::from_secs(2),
    };
    outbound
        .get(url, HeaderMap::new(), Redirects::None, limits)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_literal_form_of_a_local_address_reaches_a_listener_on_loopback() {
    let (port, accepted) = counting_listener().await;
    let outbound = Outbound::new(OutboundSettings::default()).unwrap();
    let forms = [
        "127.0.0.1",
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "0177.1",
        "017700000001",
        "0",
        "0.0.0.0",
        "0x0",
        "127.0.0.1.",
        "localhost",
        "LOCALHOST",
        "localhost.",
        "[::1]",
        "[::]",
        "[0:0:0:0:0:0:0:1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[0:0:0:0:0:ffff:127.0.0.1]",
        "[::ffff:0.0.0.0]",
        "[::ffff:0:0]",
        "[::ffff:0:127.0.0.1]",
        "[::127.0.0.1]",
        "[::0.0.0.0]",
        "[64:ff9b::127.0.0.1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::]",
        "[2001:0:1:2::80ff:fffe]",
        "[fe80::1%25lo]",
        "[fe80::1]",
    ];
    let mut reached = Vec::new();
    for form in forms {
        let url = format!("http://{form}:{port}/.well-known/agent-card.json");
        let before = accepted.load(Ordering::SeqCst);
        let result = fetch(&outbound, &url).await;
        assert!(result.is_err(), "{url} was fetched");
        if accepted.load(Ordering::SeqCst) != before {
            reached.push(format!("{url}: {result:?}"));
        }
    }
    assert!(
        reached.is_empty(),
        "these reached the loopback listener:\n{}",
        reached.join("\n")
    );

    // The control: the same listener is reachable when the operator allows loopback, so the
    // count above could have moved.
    let allowing = Outbound::new(OutboundSettings {
        policy: NetworkPolicy::new(NetworkPolicy::parse_allowed("127.0.0.0/8").unwrap()),
        ..OutboundSettings::default()
    })
    .unwrap();
    let _ = fetch(&allowing, &format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// Registers `origin` and returns the status and body of the answer.
async fn try_register(server: &TestServer, origin: &str) -> (u16, Value) {
    let (status, body) = server
        .post("/v1/callees", json!({ "card_url": origin }))
        .await;
    (status, body)
}

async fn a_card_with_too_many_versions_is_refused_naming_the_cap(db: TestDb) {
    let cards = CardServer::start().await;
    let versions: Vec<String> = (0..40).map(|minor| format!("1.{minor}")).collect();
    let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
    cards.serve_signed_card(
        "/.well-known/agent-card.json",
        &cards.card("many", &versions, json!({})),
    );
    let server = TestServer::start(db.target.clone()).await;
    let (status, body) = try_register(&server, &cards.origin()).await;
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("40 distinct protocol versions, over the cap of 32"),
        "{message}"
    );
    let (_, list) = server.get("/v1/callees").await;
    assert_eq!(
        list["items"].as_array().map(Vec::len),
        Some(0),
        "nothing half-written"
    );
    server.stop().await;
}

async fn signatures_pointing_at_many_slow_key_sets_cost_a_few_fetches(db: TestDb) {
    let cards = CardServer::start().await;
    let card = cards.card("fan-out", &["1.0"], json!({}));
    let mut signatures = Vec::new();
    for i in 0..12 {
        let path = format!("/keys/{i}.json");
        cards.set(&path, Reply::NeverFinishes);
        let jku = cards.url(&path);
        let signed = sign_card(
            &card,
            &cards.key.private,
            "ES256",
            &cards.key.kid,
            Some(&jku),
        )
        .unwrap();
        signatures.push(signed["signatures"][0].clone());
    }
    let mut hostile = card;
    hostile["signatures"] = Value::Array(signatures);
    cards.set_json("/.well-known/agent-card.json", &hostile);
    let server = TestServer::start(db.target.clone()).await;
    let (status, body) = try_register(&server, &cards.origin()).await;
    assert_eq!(status, 422, "{body}");
    let fetched: usize = (0..12)
        .map(|i| cards.requests(&format!("/keys/{i}.json")).len())
        .sum();
    assert!(
        (1..=3).contains(&fetched),
        "{fetched} key sets fetched; at most 3 distinct ones are"
    );
    server.stop().await;
}

async fn an_interface_url_in_a_special_address_form_is_never_connected_to(db: TestDb) {
    let (port, accepted) = counting_listener().await;
    let cards = CardServer::start().await;
    let mut card = cards.card("mapped", &["1.0"], json!({}));
    card["supportedInterfaces"][0]["url"] = format!("http://[::ffff:0.0.0.0]:{port}/a2a").into();
    cards.serve_signed_card("/.well-known/agent-card.json", &card);
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &cards.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "{run:#}");
    let created = finding(&run, "LC-TASK-CREATED");
    assert_eq!(created["status"], "fail", "{run:#}");
    let message = created["message"].as_str().unwrap();
    assert!(message.contains("\"this network\""), "{message}");
    server.stop().await;
}

async fn padded_answers_and_endless_polling_keep_the_transcript_within_its_budget(db: TestDb) {
    let config = FakeAgentConfig {
        streaming: false,
        push: false,
        padding: 200 * 1024,
        ..FakeAgentConfig::default()
    };
    let agent = FakeAgent::start(config, Behaviour::NeverFinishes)
        .await
        .unwrap();
    let mut settings = test_settings(db.target.clone());
    settings.probe.deadline = Duration::from_secs(3);
    settings.probe.limits.transcript_bytes = 1024 * 1024;
    let server = TestServer::start_with(settings).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    let truncated = finding(&run, "PROBE-TRANSCRIPT");
    assert_eq!(truncated["status"], "fail", "{truncated}");
    let stored = run["exchanges"].to_string().len();
    // Dozens of 200 KiB answers were polled; the record holds 1 MiB of bodies plus their
    // envelopes and the notes that stand in for the rest.
    assert!(stored < 1536 * 1024, "{stored} bytes stored");
    assert_eq!(run["verdict"]["passed"], false);
    server.stop().await;
}

async fn a_webhook_flood_with_a_valid_token_stops_at_the_cap_and_leaves_nothing_behind(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::PushFlood)
        .await
        .unwrap();
    let mut settings = test_settings(db.target.clone());
    settings.probe.push_max_deliveries = 8;
    let server = TestServer::start_with(settings).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["status"], "finished", "{run:#}");
    let id = cardgate::domain::ids::ProbeRunId(run["id"].as_str().unwrap().parse().unwrap());
    let stored = db.store.probe_run(id).await.unwrap();
    let push = stored
        .evidence()
        .unwrap()
        .observations
        .push
        .clone()
        .unwrap();
    assert_eq!(push.deliveries, 8, "{push:?}");
    assert!(
        db.store
            .push_deliveries(&stored.push_token, 0)
            .await
            .unwrap()
            .is_empty(),
        "deliveries are deleted with their run"
    );
    server.stop().await;
}

async fn unauthenticated_traffic_is_limited_per_address(db: TestDb) {
    let mut settings = test_settings(db.target.clone());
    settings.auth.anonymous_per_sec = 0.01;
    settings.auth.anonymous_burst = 5.0;
    let server = TestServer::start_with(settings).await;
    let anonymous = reqwest::Client::new();

    // Bad keys: five are looked up and refused, then the address is refused outright.
    let mut statuses = Vec::new();
    for i in 0..8 {
        let response = anonymous
            .get(server.url("/v1/callees"))
            .bearer_auth(format!("not-a-key-{i}"))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429, 429]);
    // Keys are checked in memory: the bootstrap admin token and a live key still work from
    // that address (callers behind one NAT share it), while bad keys stay refused.
    let (status, _) = server.get("/v1/callees").await;
    assert_eq!(status, 200);
    let (_, created) = server
        .post(
            "/v1/keys",
            json!({"name": "behind-the-nat", "role": "reader"}),
        )
        .await;
    let response = anonymous
        .get(server.url("/v1/callees"))
        .bearer_auth(created["key"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = anonymous
        .get(server.url("/v1/callees"))
        .bearer_auth("not-a-key-either")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));

    // The open routes that reach the database have their own per-address budget.
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let response = anonymous.get(server.url("/readyz")).send().await.unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(&statuses[5..], [429, 429], "{statuses:?}");
    let response = anonymous.get(server.url("/readyz")).send().await.unwrap();
    assert!(response.headers().contains_key("retry-after"));
    // Webhook deliveries for no running probe spend the same budget as bad keys.
    let response = anonymous
        .post(server.url("/v1/hooks/push/abcdef"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        429,
        "this address already spent it on bad keys"
    );
    // /healthz touches nothing and stays open.
    let response = anonymous.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_answers_503_with_retry_after_never_500() {
    use sqlx::Connection;
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let cardgate::storage::DatabaseTarget::Postgres(url) = &db.target else {
        unreachable!("a Postgres test database");
    };
    let name = url.rsplit('/').next().unwrap().to_string();
    let mut settings = test_settings(db.target.clone());
    settings.pool.acquire_timeout = Duration::from_secs(1);
    let server = TestServer::start_with(settings).await;
    let (status, _) = server.get("/v1/callees").await;
    assert_eq!(status, 200);

    // Take the database away: no new connections, and the open ones cut.
    let admin_url = std::env::var("TEST_DATABASE_URL").unwrap();
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    let outage = [
        format!("alter database \"{name}\" allow_connections false"),
        format!("select pg_terminate_backend(pid) from pg_stat_activity where datname = '{name}'"),
    ];
    for sql in &outage {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.as_str()))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let response = server
        .client
        .get(server.url("/v1/callees"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").cloned();
    let body: Value = response.json().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "alter database \"{name}\" allow_connections true"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable");
    assert!(retry_after.is_some(), "503 carries Retry-After");

    // And back: the pool reconnects by itself.
    let (status, _) = server.get("/v1/callees").await;
    assert_eq!(status, 200);
    server.stop().await;
}

async fn an_untrusted_card_backs_off_and_is_not_stored_again_unchanged(db: TestDb) {
    let cards = CardServer::start().await;
    let path = "/.well-known/agent-card.json";
    let card = cards.card("flaky", &["1.0"], json!({}));
    let signed = cards.serve_signed_card(path, &card);
    let server = TestServer::start(db.target.clone()).await;
    let (status, body) = try_register(&server, &cards.origin()).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();

    // The origin now serves the card with a signature over other bytes.
    let mut tampered = signed;
    tampered["description"] = "changed after signing".into();
    cards.set_json(path, &tampered);
    let refresh = || async {
        let (_, outcome) = server
            .post(&format!("/v1/callees/{id}/refresh"), json!({}))
            .await;
        let (_, detail) = server.get(&format!("/v1/callees/{id}")).await;
        let (_, snapshots) = server.get(&format!("/v1/callees/{id}/cards")).await;
        (
            outcome["status"].as_str().unwrap().to_string(),
            detail["last_fetch"]["failures"].as_i64().unwrap(),
            detail["last_fetch"]["next_at"].is_string(),
            snapshots["items"].as_array().unwrap().len(),
        )
    };
    assert_eq!(refresh().await, ("untrusted".into(), 1, true, 2));
    // The same bytes again, asked for conditionally: backing off further, nothing stored.
    assert_eq!(refresh().await, ("untrusted".into(), 2, true, 2));
    let asked = cards.requests(path);
    assert!(
        asked.last().unwrap().contains_key("if-none-match"),
        "an untrusted card is revalidated conditionally"
    );
    server.stop().await;
}

async fn a_job_whose_worker_keeps_dying_is_given_up_with_the_reason(db: TestDb) {
    use cardgate::domain::job::MAX_ATTEMPTS;
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    server.stop().await;
    // Its probe job was claimed MAX_ATTEMPTS times, an hour ago, by workers that died holding it.
    let store = &db.store;
    let hour_ago = cardgate::domain::time::now() - chrono::Duration::hours(1);
    let run = cardgate::service::probe::enqueue_probe(
        store,
        cardgate::domain::ids::CalleeId(callee.parse().unwrap()),
        cardgate::domain::version::ProtocolVersion::new(1, 0),
        "operator",
        "test",
        hour_ago,
    )
    .await
    .unwrap();
    let mut job = None;
    for attempt in 0..MAX_ATTEMPTS {
        let at = hour_ago + chrono::Duration::seconds(10 * i64::from(attempt));
        job = store
            .claim_job(
                &format!("dead-{attempt}"),
                at + chrono::Duration::seconds(5),
                at,
            )
            .await
            .unwrap();
    }
    let job = job.expect("claimed");
    assert_eq!(job.attempts, MAX_ATTEMPTS);

    // The next worker to claim it gives it up, and its run with it.
    let server = TestServer::start(db.target.clone()).await;
    let mut status = Value::Null;
    for _ in 0..100 {
        let (_, page) = server.get("/v1/jobs?status=failed").await;
        if let Some(failed) = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == job.id.to_string())
        {
            status = failed.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("gave up after {MAX_ATTEMPTS} attempts"))),
        "{status:#}"
    );
    let (_, run) = server.get(&format!("/v1/probes/{}", run.id)).await;
    assert_eq!(run["status"], "aborted", "{run:#}");
    server.stop().await;
}

async fn a_job_that_fails_ends_its_run_too(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::NeverFinishes)
        .await
        .unwrap();
    let mut settings = test_settings(db.target.clone());
    // Long enough that the subject is gone well before the cycle could end on its own, on
    // a loaded machine too.
    settings.probe.deadline = Duration::from_secs(6);
    let server = TestServer::start_with(settings).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let (_, queued) = server
        .post(
            &format!("/v1/callees/{callee}/probes"),
            json!({"protocol_version": "1.0"}),
        )
        .await;
    let id = queued["id"].as_str().unwrap().to_string();
    for _ in 0..100 {
        let (_, run) = server.get(&format!("/v1/probes/{id}")).await;
        if run["status"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // While it runs, the subject it reports on disappears: recording the outcome fails.
    db.raw("delete from subjects").await.unwrap();
    let mut run = Value::Null;
    for _ in 0..100 {
        (_, run) = server.get(&format!("/v1/probes/{id}")).await;
        if run["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(run["status"], "aborted", "{run:#}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("the probe job failed")),
        "{run:#}"
    );
    server.stop().await;
}

async fn the_cycle_deadline_bounds_every_call(db: TestDb) {
    // Every call is held for two minutes; the cycle's deadline is 2 s. No call may start after
    // the deadline, and the run ends with it (not after one per-call timeout per phase).
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::SlowAnswers)
        .await
        .unwrap();
    let mut settings = test_settings(db.target.clone());
    settings.probe.deadline = Duration::from_secs(2);
    let server = TestServer::start_with(settings).await;
    let callee = register(
        &server,
        &agent.origin(),
        json!({"cancel_message": "cancel me"}),
    )
    .await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["status"], "finished", "{run:#}");
    let started =
        chrono::DateTime::parse_from_rfc3339(run["started_at"].as_str().unwrap()).unwrap();
    let deadline = started + chrono::Duration::seconds(2);
    let exchanges = run["exchanges"].as_array().unwrap();
    assert!(!exchanges.is_empty());
    for exchange in exchanges {
        let at =
            chrono::DateTime::parse_from_rfc3339(exchange["started_at"].as_str().unwrap()).unwrap();
        // A moment's slack for the scheduler; an unbounded phase would start 15 s or more late.
        assert!(
            at <= deadline + chrono::Duration::seconds(1),
            "{} started after the deadline: {exchange:#}",
            exchange["step"]
        );
    }
    let finished =
        chrono::DateTime::parse_from_rfc3339(run["finished_at"].as_str().unwrap()).unwrap();
    assert!(
        finished <= deadline + chrono::Duration::seconds(5),
        "finished at {finished}, deadline {deadline}"
    );
    assert_eq!(run["verdict"]["passed"], false);
    assert!(
        run["verdict"]["triggers"].as_array().unwrap().is_empty(),
        "{run:#}"
    );
    server.stop().await;
}
