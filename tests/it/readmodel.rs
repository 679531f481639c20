//! The in-memory read model: it answers what the store would, after any sequence of writes;
//! `min_seq` reads a write back and waits only so long for one that was never made.

use cardgate::domain::capability::{Capability, CapabilitySet};
use cardgate::domain::decision::{Dedup, Posture};
use cardgate::domain::ids::CalleeId;
use cardgate::domain::probe::track::TrackRecord;
use cardgate::domain::version::ProtocolVersion;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use cardgate::service::readmodel::ReadModel;
use cardgate::service::trust;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::probes::{probe, register};
use crate::support::{TestDb, TestServer, client_with, error_code, json_of, on_both_backends};

on_both_backends!(
    min_seq_reads_a_write_back_and_refuses_one_never_made,
    the_read_model_answers_as_the_store_after_random_writes,
    track_records_let_go_of_runs_that_left_the_window,
);

/// A report that demotes a `lifecycle-trusted` subject.
fn demoting_report(version: &str) -> Value {
    json!({"protocol_version": version, "trigger": "terminal-without-timestamp",
        "evidence": {"observed": [{"state": "TASK_STATE_COMPLETED"}]}})
}

async fn trust(server: &TestServer, callee: &str, extra: &str) -> (u16, Value) {
    server
        .get(&format!(
            "/v1/trust?callee_id={callee}&caller_version=1.0{extra}"
        ))
        .await
}

async fn min_seq_reads_a_write_back_and_refuses_one_never_made(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);

    let (status, report) = server
        .post(
            &format!("/v1/callees/{callee}/reports"),
            demoting_report("1.0"),
        )
        .await;
    assert_eq!(status, 201, "{report}");
    assert_eq!(report["outcome"], "demoted");
    let seq = report["ledger_seq"]
        .as_i64()
        .expect("the report names its seq");
    // Read back at that seq: the demotion is there, and the evidence names it.
    let (status, decision) = trust(&server, &callee, &format!("&min_seq={seq}")).await;
    assert_eq!(status, 200, "{decision}");
    assert_eq!(decision["gate_state"], "demoted", "{decision:#}");
    assert_eq!(decision["evidence"]["ledger_seq"], seq);
    // Operators see what the model holds and how far it has caught up.
    let (_, status) = server.get("/v1/status").await;
    let model = &status["read_model"];
    assert_eq!(
        (model["callees"].as_u64(), model["subjects"].as_u64()),
        (Some(1), Some(1)),
        "{status}"
    );
    assert!(model["ledger_seq"].as_i64().unwrap() >= seq, "{status}");
    assert!(model["change_seq"].as_i64().unwrap() > 0, "{status}");

    // A seq nobody wrote: the replica catches up, and then knows the ledger has no such seq.
    let (status, body) = trust(&server, &callee, &format!("&min_seq={}", seq + 1000)).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("ahead of the ledger")
            && message.contains(&format!("newest seq is {seq}")),
        "{body}"
    );

    for bad in ["-1", "x", "99999999999999999999"] {
        let (status, body) = trust(&server, &callee, &format!("&min_seq={bad}")).await;
        assert_eq!(
            (status, error_code(&body)),
            (400, "invalid_request"),
            "{bad}: {body}"
        );
    }
    // A listing of reports has no seq to offer: only the submission does.
    let (_, page) = server.get(&format!("/v1/callees/{callee}/reports")).await;
    assert!(page["items"][0].get("ledger_seq").is_none(), "{page}");
    server.stop().await;
}

/// The parts of a decision both answers share.
fn essence(decision: &Value) -> Value {
    // The rulebook in force is the service's, not the store's: tests/it/rulebook.rs checks it.
    // The track record is compared on its own (`assert_record_matches_store`).
    let mut evidence = decision["evidence"].clone();
    if let Some(evidence) = evidence.as_object_mut() {
        evidence.remove("rulebook");
        evidence.remove("track_record");
    }
    json!({
        "authoritative": decision["authoritative"],
        "gate_state": decision["gate_state"],
        "conditions": decision["conditions"],
        "evidence": evidence,
    })
}

/// Every posture the comparison asks with: each version the agents could offer and one none
/// does, both dedup modes, with and without required capabilities.
fn postures() -> Vec<Posture> {
    let mut out = Vec::new();
    for version in ["1.0", "1.1", "0.3", "2.0"] {
        for dedup in [Dedup::Timestamp, Dedup::None] {
            for requires in [
                CapabilitySet::default(),
                [Capability::Streaming, Capability::PushNotifications]
                    .into_iter()
                    .collect(),
            ] {
                out.push(Posture {
                    caller_version: ProtocolVersion::parse_exact(version).unwrap(),
                    dedup,
                    requires,
                });
            }
        }
    }
    out
}

fn query(callee: &str, posture: &Posture) -> String {
    let requires: Vec<String> = posture.requires.iter().map(ToString::to_string).collect();
    format!(
        "/v1/trust?callee_id={callee}&caller_version={}&dedup={}&requires={}",
        posture.caller_version,
        match posture.dedup {
            Dedup::Timestamp => "timestamp",
            Dedup::None => "none",
        },
        requires.join(",")
    )
}

/// The served track record is the one the store's runs fold to.
async fn assert_record_matches_store(
    db: &TestDb,
    id: CalleeId,
    posture: &Posture,
    served: &Value,
    step: &str,
) {
    let served = &served["evidence"]["track_record"];
    if served.is_null() {
        return;
    }
    let since = cardgate::domain::time::now() - chrono::Duration::days(30);
    let runs: Vec<_> = db
        .store
        .run_records_between(id, id, since)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, version, _)| *version == posture.caller_version)
        .map(|(.., run)| run)
        .collect();
    let expected = TrackRecord::of(&runs, since);
    assert_eq!(
        (&served["runs"], &served["trials"], &served["clean"]),
        (
            &json!(expected.runs),
            &json!(expected.trials),
            &json!(expected.clean)
        ),
        "{step}: the served track record differs from the store's runs"
    );
}

/// For every callee and posture: the server's answer (its read model, kept current by the
/// writes), a read model loaded afresh (the bulk load), and the store read row by row agree.
async fn assert_model_matches_store(
    db: &TestDb,
    server: &TestServer,
    callees: &[String],
    step: &str,
) {
    let fresh = ReadModel::load(db.store.clone(), Default::default())
        .await
        .unwrap();
    for callee in callees {
        let id = CalleeId(callee.parse().unwrap());
        for posture in postures() {
            let expected = trust::decide_from_store(&db.store, id, &posture)
                .await
                .unwrap();
            let expected = essence(&serde_json::to_value(&expected).unwrap());
            let (status, served) = server.get(&query(callee, &posture)).await;
            assert_eq!(status, 200, "{step}: {served}");
            assert_record_matches_store(db, id, &posture, &served, step).await;
            assert_eq!(
                essence(&served),
                expected,
                "{step}: the server's model differs from the store for {callee} {posture:?}"
            );
            let loaded = fresh
                .decide(id, &posture)
                .expect("the fresh model knows it");
            assert_eq!(
                essence(&serde_json::to_value(&loaded).unwrap()),
                expected,
                "{step}: a freshly loaded model differs from the store for {callee} {posture:?}"
            );
        }
    }
}

const BEHAVIOURS: [Behaviour; 4] = [
    Behaviour::Conformant,
    Behaviour::NoTerminalTimestamp,
    Behaviour::PushRegistration500,
    Behaviour::Conformant,
];

async fn the_read_model_answers_as_the_store_after_random_writes(db: TestDb) {
    let mut agents = Vec::new();
    for _ in 0..3 {
        let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant);
        agents.push(agent.await.unwrap());
    }
    let server = TestServer::start(db.target.clone()).await;
    // The seed is printed so that a failing sequence can be replayed.
    let seed: u64 = std::env::var("CARDGATE_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("read model property: seed {seed} ({})", db.backend());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut callees: Vec<String> = Vec::new();
    let mut keys: Vec<(String, String, bool)> = Vec::new(); // (id, secret, live)
    for step in 0..24 {
        let registered = callees.len();
        let op = if registered == 0 {
            0
        } else {
            rng.random_range(0..7)
        };
        let pick = rng.random_range(0..agents.len().max(1));
        let what = match op {
            0 if registered < agents.len() => {
                callees.push(register(&server, &agents[registered].origin(), json!({})).await);
                format!("register agent {registered}")
            }
            0 | 1 => {
                let i = pick % registered;
                let version = if rng.random_bool(0.7) { "1.0" } else { "1.1" };
                let run = probe_any(&server, &callees[i], version).await;
                format!("probe {i} at {version}: {run}")
            }
            2 => {
                let i = pick % registered;
                let (status, body) = server
                    .post(
                        &format!("/v1/callees/{}/reports", callees[i]),
                        demoting_report("1.0"),
                    )
                    .await;
                format!("report on {i}: {status} {}", body["outcome"])
            }
            3 => {
                let i = pick % registered;
                let versions = match rng.random_range(0..3) {
                    0 => vec!["1.0"],
                    1 => vec!["1.0", "1.1"],
                    _ => vec!["1.0", "0.3"],
                };
                agents[i].set_versions(versions.clone());
                let (status, _) = server
                    .post(&format!("/v1/callees/{}/refresh", callees[i]), json!({}))
                    .await;
                format!("agent {i} offers {versions:?}, refreshed: {status}")
            }
            4 => {
                let i = pick % agents.len();
                let behaviour = BEHAVIOURS[rng.random_range(0..BEHAVIOURS.len())];
                agents[i].set_behaviour(behaviour);
                format!("agent {i} behaves {behaviour:?}")
            }
            5 => {
                let i = pick % registered;
                let push = rng.random_bool(0.5);
                agents[i].advertise_push(push);
                let (status, _) = server
                    .post(&format!("/v1/callees/{}/refresh", callees[i]), json!({}))
                    .await;
                format!("agent {i} advertises push {push}, refreshed: {status}")
            }
            _ => key_op(&server, &mut keys, &mut rng).await,
        };
        let step = format!("seed {seed}, step {step} ({what})");
        assert_model_matches_store(&db, &server, &callees, &step).await;
        for (id, secret, live) in &keys {
            let (status, _) = json_of(
                client_with(secret)
                    .get(server.url("/v1/callees"))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(status, if *live { 200 } else { 401 }, "{step}: key {id}");
        }
    }
    // Runs finished before their compact facts were kept are read from their judgement.
    db.raw("update probe_runs set facts = null").await.unwrap();
    assert_model_matches_store(&db, &server, &callees, "runs without facts").await;
    server.stop().await;
}

/// A probe request that may be refused (the version is not offered, or one is running).
async fn probe_any(server: &TestServer, callee: &str, version: &str) -> String {
    let (status, run) = server
        .post(
            &format!("/v1/callees/{callee}/probes"),
            json!({"protocol_version": version}),
        )
        .await;
    if status != 202 {
        return format!("refused {status}");
    }
    let run = crate::probes::wait(server, run["id"].as_str().unwrap()).await;
    format!("{} passed={}", run["status"], run["verdict"]["passed"])
}

/// Creates a key, or revokes a live one.
async fn key_op(
    server: &TestServer,
    keys: &mut Vec<(String, String, bool)>,
    rng: &mut StdRng,
) -> String {
    let live: Vec<usize> = (0..keys.len()).filter(|i| keys[*i].2).collect();
    if live.is_empty() || rng.random_bool(0.5) {
        let (status, body) = server
            .post(
                "/v1/keys",
                json!({"name": format!("k{}", keys.len()), "role": "reader"}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_str().unwrap().to_string();
        keys.push((id.clone(), body["key"].as_str().unwrap().to_string(), true));
        format!("key {id} created")
    } else {
        let i = live[rng.random_range(0..live.len())];
        let response = server
            .client
            .delete(server.url(&format!("/v1/keys/{}", keys[i].0)))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        keys[i].2 = false;
        format!("key {} revoked", keys[i].0)
    }
}

/// A clock the test moves forward.
struct MovableClock(std::sync::Mutex<chrono::Duration>);

impl cardgate::domain::time::Clock for MovableClock {
    fn now(&self) -> cardgate::domain::time::Timestamp {
        cardgate::domain::time::now() + *self.0.lock().unwrap()
    }
}

/// A record is folded when its subject changes; a subject nobody probes again still lets go of
/// its runs as they leave the window, when the model looks for aged records.
async fn track_records_let_go_of_runs_that_left_the_window(db: TestDb) {
    use cardgate::service::readmodel::TrackWindow;
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    probe(&server, &callee, "1.0").await;
    server.stop().await;

    let clock = std::sync::Arc::new(MovableClock(
        std::sync::Mutex::new(chrono::Duration::zero()),
    ));
    let window = TrackWindow {
        days: 2,
        clock: clock.clone(),
    };
    let model = ReadModel::load(db.store.clone(), window).await.unwrap();
    let id = CalleeId(callee.parse().unwrap());
    let v1 = ProtocolVersion::new(1, 0);
    let record = model.track_record(id, v1).unwrap();
    assert_eq!((record.runs, record.trials), (1, 3), "{record:?}");
    assert_eq!(model.refold_aged().await.unwrap(), 0, "nothing aged yet");

    // A day on, the run is still in the two-day window.
    *clock.0.lock().unwrap() = chrono::Duration::days(1);
    assert_eq!(model.refold_aged().await.unwrap(), 0);
    assert_eq!(model.track_record(id, v1).unwrap().trials, 3);
    // Three days on it has left: the record held it until the model looked, and then not.
    *clock.0.lock().unwrap() = chrono::Duration::days(3);
    assert_eq!(model.track_record(id, v1).unwrap().trials, 3);
    assert_eq!(model.refold_aged().await.unwrap(), 1);
    let aged = model.track_record(id, v1).unwrap();
    assert_eq!(
        (aged.runs, aged.trials, aged.newest_run_at()),
        (0, 0, None),
        "{aged:?}"
    );
    // The decision itself is the store's, as before: only the record let go.
    let posture = Posture {
        caller_version: v1,
        dedup: Dedup::Timestamp,
        requires: CapabilitySet::default(),
    };
    assert!(model.decide(id, &posture).unwrap().authoritative);
    assert_eq!(model.refold_aged().await.unwrap(), 0, "folded once");
}

/// A caller that knows only the card URL is answered from memory: with the database gone
/// (every connection cut, new ones refused), `GET /v1/trust?card_url=…` still answers, in
/// every spelling registration accepts, and an unknown URL is still 404. Postgres only: a
/// gate in front of it is what can be taken away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn card_url_decisions_read_no_database() {
    use cardgate::storage::DatabaseTarget;
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let DatabaseTarget::Postgres(url) = &db.target else {
        unreachable!("a Postgres test database")
    };
    let mut gated = url::Url::parse(url).unwrap();
    let upstream = format!(
        "{}:{}",
        gated.host_str().unwrap(),
        gated.port().unwrap_or(5432)
    );
    let upstream = tokio::net::lookup_host(upstream)
        .await
        .unwrap()
        .next()
        .unwrap();
    let gate = crate::support::gate::DbGate::start(upstream).await;
    gated.set_host(Some("127.0.0.1")).unwrap();
    gated.set_port(Some(gate.addr.port())).unwrap();
    let server = TestServer::start_with(crate::support::test_settings(DatabaseTarget::Postgres(
        gated.to_string(),
    )))
    .await;
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let callee = crate::probes::register(&server, &agent.origin(), json!({})).await;
    crate::probes::probe(&server, &callee, "1.0").await;
    let ask = |card_url: String| {
        let server = &server;
        async move {
            let query = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("card_url", &card_url)
                .append_pair("caller_version", "1.0")
                .finish();
            server.get(&format!("/v1/trust?{query}")).await
        }
    };
    let (status, before) = ask(agent.origin()).await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["authoritative"], true, "{before}");

    gate.close();
    let (status, ready) = server.get("/readyz").await;
    assert_eq!(status, 503, "the database is gone: {ready}");
    for spelling in [
        agent.origin(),
        format!("{}/", agent.origin()),
        format!("  {}  ", agent.origin()),
    ] {
        let (status, after) = ask(spelling.clone()).await;
        assert_eq!(status, 200, "{spelling:?}: {after}");
        assert_eq!(after["callee_id"], callee.as_str());
        assert_eq!(after["authoritative"], true, "{after}");
        assert_eq!(after["conditions"], before["conditions"]);
    }
    let (status, unknown) = ask("http://127.0.0.1:9/".into()).await;
    assert_eq!(status, 404, "{unknown}");
    assert_eq!(error_code(&unknown), "not_found");
    let (status, _) = ask("not a url".into()).await;
    assert_eq!(status, 404);
    // A stop with the database gone must not hang the suite.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), server.stop()).await;
}

/// A replica listens before its decisions are loaded: until they are, `/readyz` is 503, a
/// decision is 503 with `Retry-After` (not 404: the callee is not unknown, only not loaded
/// yet), and API keys already work. Postgres only: a table lock held by the test stalls the
/// load there, while an SQLite reader in WAL mode is never blocked by a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_wait_for_the_load_and_say_so() {
    use sqlx::Connection;
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let cardgate::storage::DatabaseTarget::Postgres(url) = db.target.clone() else {
        unreachable!("a Postgres test database");
    };
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    server.stop().await;

    // The load reads the callees first; hold them.
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("begin").execute(&mut holder).await.unwrap();
    sqlx::query("lock table callees in access exclusive mode")
        .execute(&mut holder)
        .await
        .unwrap();

    let app = cardgate::app::App::build(crate::support::test_settings(db.target.clone()))
        .await
        .unwrap();
    assert!(!app.services.view.is_loaded());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.serve(listener, async {
        let _ = stopped.await;
    }));
    let client = client_with(crate::support::ADMIN_TOKEN);
    let ask = || {
        client
            .get(format!(
                "{base}/v1/trust?callee_id={callee}&caller_version=1.0"
            ))
            .send()
    };

    let (status, body) = json_of(client.get(format!("{base}/readyz")).send().await.unwrap()).await;
    assert_eq!(status, 503, "{body}");
    let loading = ask().await.unwrap();
    assert_eq!(loading.status(), 503);
    assert!(loading.headers().contains_key("retry-after"));
    let (_, body) = json_of(loading).await;
    assert_eq!(error_code(&body), "unavailable", "{body}");
    // Keys are loaded first: a listing that needs the admin key answers.
    let keys = client.get(format!("{base}/v1/keys")).send().await.unwrap();
    assert_eq!(keys.status(), 200);

    sqlx::query("commit").execute(&mut holder).await.unwrap();
    let mut ready = false;
    for _ in 0..100 {
        if client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            == 200
        {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(ready, "ready once the load finished");
    let (status, decision) = json_of(ask().await.unwrap()).await;
    assert_eq!(status, 200, "{decision}");
    assert_eq!(decision["callee_id"], callee.as_str());
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
