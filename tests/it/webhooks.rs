//! Webhooks: subscriptions, signed deliveries from the outbox, retries in order, giving up,
//! and 410 Gone. Signatures are checked by an independent implementation (the
//! `standardwebhooks` Python package).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::probes::{probe, register};
use crate::replicas::{admin_post, get};
use crate::support::{TestDb, TestServer, error_code, on_both_backends, test_settings};

on_both_backends!(
    deliveries_are_signed_ordered_retried_with_one_id_and_verifiable,
    a_receiver_down_past_the_window_ends_failed_and_410_disables,
    a_delivery_cut_off_by_kill_9_is_made_after_the_restart,
);

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    headers: HashMap<String, String>,
    body: String,
}

/// What the receiver shares with its handler: the log, and the statuses to answer with.
type ReceiverState = (Arc<Mutex<Vec<Received>>>, Arc<Vec<u16>>);

/// A webhook receiver on loopback that answers each request with the next status of its
/// script (the last one repeats) and records what it got.
#[derive(Clone)]
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(script: Vec<u16>) -> Self {
        Self::bind(
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            script,
        )
    }

    fn bind(listener: tokio::net::TcpListener, script: Vec<u16>) -> Self {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let state = (got.clone(), Arc::new(script));
        let app = Router::new()
            .route(
                "/hook",
                post(
                    |State((got, script)): State<ReceiverState>,
                     headers: HeaderMap,
                     body: Bytes| async move {
                        let mut got = got.lock().unwrap();
                        let n = got.len();
                        got.push(Received {
                            headers: headers
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
                                .collect(),
                            body: String::from_utf8(body.to_vec()).unwrap(),
                        });
                        let status = script[n.min(script.len() - 1)];
                        StatusCode::from_u16(status).unwrap()
                    },
                ),
            )
            .with_state(state);
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, got }
    }

    /// A receiver on a port chosen before it listens.
    async fn start_on(port: u16, script: Vec<u16>) -> Self {
        Self::bind(
            tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .unwrap(),
            script,
        )
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

async fn server_with_fast_retries(db: &TestDb) -> TestServer {
    let mut settings = test_settings(db.target.clone());
    settings.webhooks.retry.first = Duration::from_millis(100);
    settings.webhooks.retry.max = Duration::from_millis(400);
    settings.webhooks.poll = Duration::from_millis(50);
    TestServer::start_with(settings).await
}

async fn subscribe(server: &TestServer, body: Value) -> Value {
    let (status, created) = server.post("/v1/subscriptions", body).await;
    assert_eq!(status, 201, "{created}");
    created
}

async fn deliveries(server: &TestServer, id: &str) -> Vec<Value> {
    let (status, page) = server
        .get(&format!("/v1/subscriptions/{id}/deliveries?limit=200"))
        .await;
    assert_eq!(status, 200, "{page}");
    page["items"].as_array().unwrap().clone()
}

/// Waits until `done` holds for the subscription's deliveries.
async fn wait_deliveries(
    server: &TestServer,
    id: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    for _ in 0..300 {
        let items = deliveries(server, id).await;
        if done(&items) {
            return items;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "deliveries never settled: {:#?}",
        deliveries(server, id).await
    );
}

fn python() -> Option<PathBuf> {
    crate::support::test_python("the Standard Webhooks signature check")
}

/// How many of `requests` the `standardwebhooks` package verifies with `secret`.
async fn verified_by_the_reference(python: &PathBuf, secret: &str, requests: &[Received]) -> usize {
    let cases: Vec<Value> = requests
        .iter()
        .map(|r| json!({"headers": r.headers, "body": r.body}))
        .collect();
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
secret, cases = sys.argv[1], json.load(sys.stdin)
ok = 0
for case in cases:
    try:
        Webhook(secret).verify(case["body"], case["headers"])
        ok += 1
    except WebhookVerificationError:
        pass
print(ok)
"#;
    let mut child = tokio::process::Command::new(python)
        .args(["-c", script, secret])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(serde_json::to_string(&cases).unwrap().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

async fn deliveries_are_signed_ordered_retried_with_one_id_and_verifiable(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = server_with_fast_retries(&db).await;
    // The receiver fails the first two attempts, then takes everything.
    let receiver = Receiver::start(vec![500, 503, 200]).await;
    let created = subscribe(
        &server,
        json!({"url": receiver.url, "description": "all events"}),
    )
    .await;
    let id = created["id"].as_str().unwrap().to_string();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{created}");
    let (_, listed) = server.get(&format!("/v1/subscriptions/{id}")).await;
    assert!(
        listed.get("secret").is_none(),
        "the secret is shown once: {listed}"
    );

    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["verdict"]["passed"], true);
    let (status, _) = server
        .post(
            &format!("/v1/callees/{callee}/reports"),
            json!({"protocol_version": "1.0", "trigger": "terminal-without-timestamp",
                "evidence": {"observed": [{"state": "TASK_STATE_COMPLETED"}]}}),
        )
        .await;
    assert_eq!(status, 201);

    let items = wait_deliveries(&server, &id, |items| {
        items.iter().any(|d| d["event_type"] == "subject.demoted")
            && items.iter().all(|d| d["status"] == "delivered")
    })
    .await;
    // Every announced ledger event once, in ledger order.
    let (_, ledger) = server
        .get(&format!("/v1/ledger?callee_id={callee}&limit=200"))
        .await;
    let announced: Vec<i64> = ledger["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            ["version-appeared", "probe-finished", "promoted", "demoted"]
                .contains(&e["kind"].as_str().unwrap())
        })
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    let mut delivered: Vec<i64> = items.iter().map(|d| d["seq"].as_i64().unwrap()).collect();
    delivered.reverse();
    assert_eq!(delivered, announced);

    let got = receiver.received();
    // The first delivery took three attempts, with one webhook-id; the rest one each.
    let first_id = &got[0].headers["webhook-id"];
    assert_eq!(&got[1].headers["webhook-id"], first_id);
    assert_eq!(&got[2].headers["webhook-id"], first_id);
    assert_eq!(got.len(), announced.len() + 2, "{got:#?}");
    assert_eq!(items.last().unwrap()["attempts"], 3);
    // Successful requests arrive in ledger order, each once.
    let bodies: Vec<Value> = got[2..]
        .iter()
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let seqs: Vec<i64> = bodies
        .iter()
        .map(|b| b["data"]["event"]["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, announced);
    // Every body is exactly the documented payload (unknown fields are refused).
    for body in &bodies {
        let parsed: cardgate::http::subscriptions::WebhookPayload =
            serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(parsed.data.event.seq, body["data"]["event"]["seq"]);
        assert_eq!(parsed.data.event.hash, body["data"]["event"]["hash"]);
    }
    let demoted = bodies.last().unwrap();
    assert_eq!(demoted["type"], "subject.demoted");
    assert_eq!(demoted["data"]["subject"]["gate_state"], "demoted");

    // An independent implementation verifies every request (retries included).
    let Some(python) = python() else {
        server.stop().await;
        return;
    };
    assert_eq!(
        verified_by_the_reference(&python, &secret, &got).await,
        got.len()
    );
    assert_eq!(
        verified_by_the_reference(&python, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &got).await,
        0,
        "another secret must not verify"
    );

    // After a rotation both secrets sign, so a receiver on either one verifies.
    let (status, rotated) = server
        .post(&format!("/v1/subscriptions/{id}/rotate-secret"), json!({}))
        .await;
    assert_eq!(status, 200, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    let before = receiver.received().len();
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["status"], "finished");
    for _ in 0..200 {
        if receiver.received().len() > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after: Vec<Received> = receiver.received()[before..].to_vec();
    assert!(!after.is_empty());
    assert_eq!(
        verified_by_the_reference(&python, &new_secret, &after).await,
        after.len()
    );
    assert_eq!(
        verified_by_the_reference(&python, &secret, &after).await,
        after.len()
    );
    server.stop().await;
}

async fn a_receiver_down_past_the_window_ends_failed_and_410_disables(db: TestDb) {
    let mut settings = test_settings(db.target.clone());
    settings.webhooks.retry.first = Duration::from_millis(50);
    settings.webhooks.retry.max = Duration::from_millis(100);
    settings.webhooks.retry.give_up_after = Duration::from_millis(600);
    settings.webhooks.poll = Duration::from_millis(50);
    let server = TestServer::start_with(settings).await;
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();

    let down = Receiver::start(vec![503]).await;
    let gone = Receiver::start(vec![410]).await;
    let down_id = subscribe(
        &server,
        json!({"url": down.url, "events": ["subject.created"]}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let gone_id = subscribe(&server, json!({"url": gone.url})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    register(&server, &agent.origin(), json!({})).await;

    let failed = wait_deliveries(&server, &down_id, |items| {
        items.len() == 1 && items[0]["status"] == "failed"
    })
    .await;
    assert_eq!(failed[0]["event_type"], "subject.created");
    assert_eq!(failed[0]["last_status_code"], 503);
    assert!(failed[0]["attempts"].as_i64().unwrap() >= 2, "{failed:#?}");
    assert!(down.received().len() >= 2);

    let disabled = wait_deliveries(&server, &gone_id, |items| {
        !items.is_empty() && items[0]["status"] == "failed"
    })
    .await;
    assert_eq!(disabled[0]["last_status_code"], 410);
    let (_, sub) = server.get(&format!("/v1/subscriptions/{gone_id}")).await;
    assert_eq!(sub["status"], "disabled");
    assert_eq!(gone.received().len(), 1, "nothing more is sent after 410");

    // A failed delivery can be sent again by hand; the receiver is still down, so it fails
    // again, visibly.
    let delivery = failed[0]["id"].as_str().unwrap();
    let (status, queued) = server
        .post(
            &format!("/v1/subscriptions/{down_id}/deliveries/{delivery}/retry"),
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{queued}");
    assert_eq!(queued["status"], "pending");

    // Bad input.
    for (body, code) in [
        (
            json!({"url": "ftp://example.com/x"}),
            (400, "invalid_request"),
        ),
        (json!({"url": "http://10.1.2.3/hook"}), (422, "url_refused")),
        (
            json!({"url": down.url, "events": ["subject.nope"]}),
            (400, "invalid_request"),
        ),
        (
            json!({"url": down.url, "callee_id": uuid::Uuid::now_v7()}),
            (404, "not_found"),
        ),
    ] {
        let (status, answer) = server.post("/v1/subscriptions", body.clone()).await;
        assert_eq!((status, error_code(&answer)), code, "{body}: {answer}");
    }
    let (status, _) = server
        .client
        .delete(server.url(&format!("/v1/subscriptions/{gone_id}")))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 204);
    let (status, _) = server.get(&format!("/v1/subscriptions/{gone_id}")).await;
    assert_eq!(status, 404);
    server.stop().await;
}

/// The URL of the database `db` lives in, for a separate process.
fn database_url(db: &TestDb) -> String {
    match &db.target {
        cardgate::storage::DatabaseTarget::Postgres(url) => url.clone(),
        cardgate::storage::DatabaseTarget::Sqlite(path) => format!("sqlite://{}", path.display()),
    }
}

async fn a_delivery_cut_off_by_kill_9_is_made_after_the_restart(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    // A port nobody listens on yet: every attempt before the restart is refused.
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(name).display().to_string();
    let url = database_url(&db);
    let mut first =
        crate::replicas::spawn_replica(&url, "http://127.0.0.1:9/", &log("a.log")).await;
    let subscription = admin_post(
        &first.base,
        "/v1/subscriptions",
        json!({"url": format!("http://127.0.0.1:{port}/hook"), "events": ["subject.created"]}),
    )
    .await;
    let id = subscription["id"].as_str().unwrap().to_string();
    // The ledger append and its outbox row commit together; the first attempt is refused.
    admin_post(
        &first.base,
        "/v1/callees",
        json!({"card_url": agent.origin()}),
    )
    .await;
    first.child.start_kill().unwrap(); // SIGKILL: nothing is flushed or finished
    let _ = first.child.wait().await;

    let receiver = Receiver::start_on(port, vec![200]).await;
    let second = crate::replicas::spawn_replica(&url, "http://127.0.0.1:9/", &log("b.log")).await;
    let mut delivered = false;
    for _ in 0..600 {
        if receiver.received().len() == 1 {
            delivered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(delivered, "the delivery was lost with the process");
    let body: Value = serde_json::from_str(&receiver.received()[0].body).unwrap();
    assert_eq!(body["type"], "subject.created");
    let page = get(format!("{}/v1/subscriptions/{id}/deliveries", second.base)).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    drop(second);
}

/// Two processes on one Postgres send from one outbox: every delivery reaches the receiver
/// exactly once, and each subscription's in ledger order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_deliver_each_event_once_per_subscription() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let url = database_url(&db);
    let mut agents = Vec::new();
    for _ in 0..6 {
        let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant);
        agents.push(agent.await.unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(name).display().to_string();
    let front = crate::support::proxy::LaggingProxy::start(Duration::ZERO).await;
    let public_url = format!("{}/", front.origin());
    let a = crate::replicas::spawn_replica(&url, &public_url, &log("a.log")).await;
    front.forward_to(&a.base);
    let b = crate::replicas::spawn_replica(&url, &public_url, &log("b.log")).await;
    let receivers = [
        Receiver::start(vec![200]).await,
        Receiver::start(vec![200]).await,
    ];
    let mut subscriptions = Vec::new();
    for receiver in &receivers {
        let created = admin_post(&a.base, "/v1/subscriptions", json!({"url": receiver.url})).await;
        subscriptions.push(created["id"].as_str().unwrap().to_string());
    }
    for (i, agent) in agents.iter().enumerate() {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        admin_post(base, "/v1/callees", json!({"card_url": agent.origin()})).await;
    }
    // Registration queued each probe; wait until every delivery of both is made.
    let settled = |items: &[Value]| {
        items
            .iter()
            .filter(|d| d["event_type"] == "subject.promoted")
            .count()
            == agents.len()
            && items.iter().all(|d| d["status"] == "delivered")
    };
    for id in &subscriptions {
        let mut done = false;
        for _ in 0..600 {
            let page = get(format!(
                "{}/v1/subscriptions/{id}/deliveries?limit=200",
                b.base
            ))
            .await;
            if settled(page["items"].as_array().unwrap()) {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(done, "subscription {id} never had every delivery made");
    }
    for (receiver, id) in receivers.iter().zip(&subscriptions) {
        let got = receiver.received();
        let ids: std::collections::BTreeSet<&str> = got
            .iter()
            .map(|r| r.headers["webhook-id"].as_str())
            .collect();
        assert_eq!(ids.len(), got.len(), "a delivery reached {id} twice");
        let seqs: Vec<i64> = got
            .iter()
            .map(|r| {
                let body: Value = serde_json::from_str(&r.body).unwrap();
                body["data"]["event"]["seq"].as_i64().unwrap()
            })
            .collect();
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            seqs, sorted,
            "deliveries to {id} out of ledger order or repeated"
        );
    }
    drop((a, b));
}
