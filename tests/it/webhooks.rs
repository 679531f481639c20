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
    a_refused_delivery_holds_its_subject_for_the_hold_back_only_and_no_other_subject,
    a_receiver_down_for_20_s_gets_every_delivery_once_in_order,
    retry_after_on_429_and_503_sets_the_next_attempt,
    subscriptions_are_paused_resumed_tested_and_marked_failing,
    finished_deliveries_are_pruned_after_their_retention_and_an_events_body_with_its_last,
);

/// One request the receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    headers: HashMap<String, String>,
    body: String,
    at: std::time::Instant,
}

impl Received {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// Answers request `n` with `script[n]`, the last status repeating.
fn scripted(script: Vec<u16>) -> Policy {
    Arc::new(move |n, _| (script[n.min(script.len() - 1)], None))
}

/// How a receiver answers request number `n` (from 0), given what it got: a status, and a
/// `Retry-After` value to send with it.
type Policy = Arc<dyn Fn(usize, &Received) -> (u16, Option<String>) + Send + Sync>;

/// What the receiver shares with its handler: the log, and how to answer.
type ReceiverState = (Arc<Mutex<Vec<Received>>>, Policy);

/// A webhook receiver on loopback that answers each request as its policy says (by default,
/// the next status of a script, the last one repeating) and records what it got.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub(crate) url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub(crate) async fn start(script: Vec<u16>) -> Self {
        Self::answering(scripted(script)).await
    }

    async fn answering(policy: Policy) -> Self {
        Self::bind(
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            policy,
        )
    }

    fn bind(listener: tokio::net::TcpListener, policy: Policy) -> Self {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let state = (got.clone(), policy);
        let app = Router::new()
            .route(
                "/hook",
                post(
                    |State((got, policy)): State<ReceiverState>,
                     headers: HeaderMap,
                     body: Bytes| async move {
                        let received = Received {
                            headers: headers
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
                                .collect(),
                            body: String::from_utf8(body.to_vec()).unwrap(),
                            at: std::time::Instant::now(),
                        };
                        let (status, retry_after) = {
                            let mut got = got.lock().unwrap();
                            let answer = policy(got.len(), &received);
                            got.push(received);
                            answer
                        };
                        let mut headers = HeaderMap::new();
                        if let Some(value) = retry_after {
                            headers.insert("retry-after", value.parse().unwrap());
                        }
                        (StatusCode::from_u16(status).unwrap(), headers)
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
            scripted(script),
        )
    }

    pub(crate) fn received(&self) -> Vec<Received> {
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
        let data = parsed.data.event().expect("a ledger event's delivery");
        assert_eq!(data.event.seq, body["data"]["event"]["seq"]);
        assert_eq!(data.event.hash, body["data"]["event"]["hash"]);
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
    let url = db.url();
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
    let url = db.url();
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
        // In ledger order per subject; subjects do not wait for each other.
        let mut by_subject: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
        for r in &got {
            let event = &r.json()["data"]["event"];
            by_subject
                .entry(format!(
                    "{}/{}",
                    event["callee_id"], event["protocol_version"]
                ))
                .or_default()
                .push(event["seq"].as_i64().unwrap());
        }
        for (subject, seqs) in by_subject {
            let mut sorted = seqs.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                seqs, sorted,
                "deliveries to {id} about {subject} out of ledger order or repeated"
            );
        }
    }
    drop((a, b));
}

/// A server whose webhook settings `tune` adjusts.
async fn server_with(
    db: &TestDb,
    tune: impl FnOnce(&mut cardgate::service::webhooks::WebhookSettings),
) -> TestServer {
    let mut settings = test_settings(db.target.clone());
    settings.webhooks.poll = Duration::from_millis(50);
    tune(&mut settings.webhooks);
    TestServer::start_with(settings).await
}

/// Waits until the receiver holds a request whose body satisfies `found`; returns it.
pub(crate) async fn wait_for(receiver: &Receiver, found: impl Fn(&Value) -> bool) -> Received {
    for _ in 0..400 {
        if let Some(r) = receiver.received().into_iter().find(|r| found(&r.json())) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never received; got {:#?}", receiver.received());
}

fn about(body: &Value, callee: &str, kind: &str) -> bool {
    body["data"]["event"]["callee_id"] == callee && body["type"] == kind
}

async fn a_refused_delivery_holds_its_subject_for_the_hold_back_only_and_no_other_subject(
    db: TestDb,
) {
    const HOLD_BACK: Duration = Duration::from_millis(1500);
    let server = server_with(&db, |w| {
        w.retry.first = Duration::from_millis(200);
        w.retry.max = Duration::from_millis(400);
        w.retry.hold_back = HOLD_BACK;
    })
    .await;
    // The receiver refuses the first delivery it ever sees, every time it comes; it takes
    // everything else.
    let poisoned: Arc<Mutex<Option<String>>> = Arc::default();
    let first = poisoned.clone();
    let receiver = Receiver::answering(Arc::new(move |_, r: &Received| {
        let id = r.headers["webhook-id"].clone();
        let mut first = first.lock().unwrap();
        let refused = first.get_or_insert(id.clone()) == &id;
        (if refused { 400 } else { 204 }, None)
    }))
    .await;
    let sub = subscribe(&server, json!({"url": receiver.url})).await["id"]
        .as_str()
        .unwrap()
        .to_string();

    let a = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let callee_a = register(&server, &a.origin(), json!({})).await;
    let created_a = wait_for(&receiver, |b| about(b, &callee_a, "subject.created")).await;
    let created_seq = created_a.json()["data"]["event"]["seq"].as_i64().unwrap();

    // Another subject is never held by it.
    let b = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let asked = std::time::Instant::now();
    let callee_b = register(&server, &b.origin(), json!({})).await;
    let created_b = wait_for(&receiver, |b| about(b, &callee_b, "subject.created")).await;
    assert!(
        created_b.at.duration_since(asked) < HOLD_BACK,
        "another subject waited {:?}",
        created_b.at.duration_since(asked)
    );

    // Subject A is promoted, then demoted: its news goes out once the hold-back has passed,
    // with the gap marked, while the refused delivery keeps retrying.
    let run = probe(&server, &callee_a, "1.0").await;
    assert_eq!(run["verdict"]["passed"], true);
    a.set_behaviour(Behaviour::NoTerminalTimestamp);
    let run = probe(&server, &callee_a, "1.0").await;
    let finished = std::time::Instant::now();
    assert_eq!(crate::probes::events(&run), ["probe-finished", "demoted"]);
    let demoted = wait_for(&receiver, |b| about(b, &callee_a, "subject.demoted")).await;
    assert!(
        demoted.at.duration_since(finished) < HOLD_BACK + Duration::from_secs(2),
        "the demotion took {:?}",
        demoted.at.duration_since(finished)
    );
    // Every delivered event about A names its predecessor; the first names the refused one,
    // which the receiver never got: the gap is visible.
    let delivered: Vec<Value> = receiver
        .received()
        .iter()
        .filter(|r| r.headers["webhook-id"] != created_a.headers["webhook-id"])
        .map(Received::json)
        .filter(|b| b["data"]["event"]["callee_id"] == callee_a.as_str())
        .collect();
    let mut seqs: Vec<(i64, Option<i64>)> = delivered
        .iter()
        .map(|b| {
            (
                b["data"]["event"]["seq"].as_i64().unwrap(),
                b["data"]["previous_seq"].as_i64(),
            )
        })
        .collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs[0].1, Some(created_seq), "{seqs:?}");
    for pair in seqs.windows(2) {
        assert_eq!(pair[1].1, Some(pair[0].0), "{seqs:?}");
    }
    assert_eq!(
        seqs.last().unwrap().0,
        demoted.json()["data"]["event"]["seq"].as_i64().unwrap()
    );
    let refused = deliveries(&server, &sub)
        .await
        .into_iter()
        .find(|d| d["seq"] == created_seq)
        .unwrap();
    assert_eq!(refused["status"], "pending", "{refused}");
    assert!(refused["attempts"].as_i64().unwrap() >= 2, "{refused}");
    server.stop().await;
}

async fn a_receiver_down_for_20_s_gets_every_delivery_once_in_order(db: TestDb) {
    let server = server_with(&db, |w| {
        w.retry.first = Duration::from_millis(200);
        w.retry.max = Duration::from_secs(1);
    })
    .await;
    // A port nobody listens on yet: every attempt is refused at connect.
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    subscribe(
        &server,
        json!({"url": format!("http://127.0.0.1:{port}/hook")}),
    )
    .await;
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["verdict"]["passed"], true);
    tokio::time::sleep(Duration::from_secs(20)).await;

    let receiver = Receiver::start_on(port, vec![204]).await;
    let promoted = wait_for(&receiver, |b| about(b, &callee, "subject.promoted")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = receiver.received();
    let seqs: Vec<i64> = got
        .iter()
        .map(|r| r.json()["data"]["event"]["seq"].as_i64().unwrap())
        .collect();
    let mut sorted = seqs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seqs, sorted, "once each, in ledger order");
    assert_eq!(seqs.len(), 3, "created, probe finished, promoted: {seqs:?}");
    assert_eq!(
        *seqs.last().unwrap(),
        promoted.json()["data"]["event"]["seq"].as_i64().unwrap()
    );
    server.stop().await;
}

async fn retry_after_on_429_and_503_sets_the_next_attempt(db: TestDb) {
    // A backoff of a minute: only the receiver's Retry-After can bring an attempt back soon.
    let server = server_with(&db, |w| {
        w.retry.first = Duration::from_secs(60);
        w.retry.max = Duration::from_secs(60);
    })
    .await;
    let receiver = Receiver::answering(Arc::new(|n, _: &Received| match n {
        0 => (503, Some("1".to_string())),
        1 => (429, Some("2".to_string())),
        _ => (204, None),
    }))
    .await;
    subscribe(
        &server,
        json!({"url": receiver.url, "events": ["subject.created"]}),
    )
    .await;
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    register(&server, &agent.origin(), json!({})).await;
    for _ in 0..200 {
        if receiver.received().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = receiver.received();
    assert_eq!(got.len(), 3, "{got:#?}");
    let waits: Vec<Duration> = got
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at))
        .collect();
    assert!(
        waits[0] >= Duration::from_millis(900) && waits[0] < Duration::from_secs(10),
        "{waits:?}"
    );
    assert!(
        waits[1] >= Duration::from_millis(1900) && waits[1] < Duration::from_secs(10),
        "{waits:?}"
    );
    assert!(
        got.iter()
            .all(|r| r.headers["webhook-id"] == got[0].headers["webhook-id"])
    );
    server.stop().await;
}

async fn subscriptions_are_paused_resumed_tested_and_marked_failing(db: TestDb) {
    let server = server_with(&db, |w| {
        w.retry.first = Duration::from_millis(100);
        w.retry.max = Duration::from_millis(200);
        w.failing_after = Duration::from_secs(1);
    })
    .await;
    let receiver = Receiver::start(vec![204]).await;
    let sub = subscribe(&server, json!({"url": receiver.url})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, paused) = server
        .post(&format!("/v1/subscriptions/{sub}/pause"), json!({}))
        .await;
    assert_eq!(
        (status, &paused["status"]),
        (200, &json!("paused")),
        "{paused}"
    );
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let callee = register(&server, &agent.origin(), json!({})).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        receiver.received().is_empty(),
        "nothing goes out while paused"
    );
    let (status, resumed) = server
        .post(&format!("/v1/subscriptions/{sub}/resume"), json!({}))
        .await;
    assert_eq!(
        (status, &resumed["status"]),
        (200, &json!("active")),
        "{resumed}"
    );
    wait_for(&receiver, |b| about(b, &callee, "subject.created")).await;

    // A test ping: signed, typed `ping`, not queued.
    let (status, ping) = server
        .post(&format!("/v1/subscriptions/{sub}/test"), json!({}))
        .await;
    assert_eq!(status, 200, "{ping}");
    assert_eq!(
        (&ping["delivered"], &ping["status_code"]),
        (&json!(true), &json!(204))
    );
    let pinged = wait_for(&receiver, |b| b["type"] == "ping").await;
    assert_eq!(pinged.headers["webhook-id"], ping["id"].as_str().unwrap());
    assert!(pinged.headers["webhook-signature"].starts_with("v1,"));
    let (status, missing) = server
        .post(
            &format!("/v1/subscriptions/{}/test", uuid::Uuid::new_v4()),
            json!({}),
        )
        .await;
    assert_eq!(status, 404, "{missing}");

    // A receiver that fails everything for longer than the threshold is `failing`.
    let scoped = Receiver::start(vec![204]).await;
    subscribe(&server, json!({"url": scoped.url, "callee_id": callee})).await;
    let broken = Receiver::start(vec![500]).await;
    let failing = subscribe(&server, json!({"url": broken.url})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    probe(&server, &callee, "1.0").await;
    let mut health = Value::Null;
    for _ in 0..100 {
        let (_, view) = server.get(&format!("/v1/subscriptions/{failing}")).await;
        health = view["health"].clone();
        if health == "failing" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health, "failing");
    let (_, healthy) = server.get(&format!("/v1/subscriptions/{sub}")).await;
    assert_eq!(healthy["health"], "healthy", "{healthy}");
    // The other subscriptions hear of it, once: `subscription.failing`, signed like any
    // delivery and in the documented shape. One scoped to a callee is not told unless it asks.
    let told = wait_for(&receiver, |b| b["type"] == "subscription.failing").await;
    assert!(told.headers["webhook-signature"].starts_with("v1,"));
    let body = told.json();
    assert_eq!(
        body["data"]["subscription"]["id"],
        failing.as_str(),
        "{body:#}"
    );
    let parsed: cardgate::http::subscriptions::WebhookPayload =
        serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(parsed.data.event().is_none(), "{body:#}");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let announcements = |r: &Receiver| {
        r.received()
            .iter()
            .filter(|b| b.json()["type"] == "subscription.failing")
            .count()
    };
    assert_eq!(announcements(&receiver), 1, "told once per failure");
    assert_eq!(
        announcements(&scoped),
        0,
        "a callee's subscription is not told"
    );
    assert_eq!(
        announcements(&broken),
        0,
        "a failing receiver is not told of itself"
    );
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let line = "cardgate_webhook_subscriptions_failing 1";
    assert!(metrics.lines().any(|l| l == line), "{metrics}");
    server.stop().await;
}

/// Retention of deliveries (issue 30): finished ones go once past their retention, pending
/// ones never do, and an event's stored body stays while any delivery names it.
async fn finished_deliveries_are_pruned_after_their_retention_and_an_events_body_with_its_last(
    db: TestDb,
) {
    let server = server_with_fast_retries(&db).await;
    let receiver = Receiver::start(vec![204]).await;
    let waiting = Receiver::start(vec![204]).await;
    let done = subscribe(&server, json!({"url": receiver.url})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let paused = subscribe(&server, json!({"url": waiting.url})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = server
        .post(&format!("/v1/subscriptions/{paused}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let callee = register(&server, &agent.origin(), json!({})).await;
    probe(&server, &callee, "1.0").await;
    let delivered = wait_deliveries(&server, &done, |items| {
        items.len() >= 2 && items.iter().all(|d| d["status"] == "delivered")
    })
    .await;
    let queued = deliveries(&server, &paused).await;
    assert_eq!(queued.len(), delivered.len(), "{queued:#?}");
    assert!(queued.iter().all(|d| d["status"] == "pending"));
    let bodies = db.store.stored_event_bodies().await.unwrap();
    assert_eq!(bodies as usize, delivered.len(), "one body per event");

    // Within the retention nothing goes.
    let now = chrono::Utc::now();
    let a_day = chrono::Duration::days(1);
    assert_eq!(
        db.store.prune_deliveries(now - a_day, 1_000).await.unwrap(),
        0
    );
    // Past it, the delivered go and the pending stay, with their events' bodies.
    let pruned = db.store.prune_deliveries(now + a_day, 1_000).await.unwrap();
    assert_eq!(pruned as usize, delivered.len());
    assert!(deliveries(&server, &done).await.is_empty());
    assert_eq!(deliveries(&server, &paused).await.len(), queued.len());
    assert_eq!(db.store.stored_event_bodies().await.unwrap(), bodies);
    let (status, _) = server
        .post(&format!("/v1/subscriptions/{paused}/resume"), json!({}))
        .await;
    assert_eq!(status, 200);
    wait_deliveries(&server, &paused, |items| {
        items.iter().all(|d| d["status"] == "delivered")
    })
    .await;
    let sent: Vec<Value> = waiting.received().iter().map(Received::json).collect();
    let kept: Vec<Value> = receiver.received().iter().map(Received::json).collect();
    assert_eq!(
        sent.iter().map(|b| &b["type"]).collect::<Vec<_>>(),
        kept.iter().map(|b| &b["type"]).collect::<Vec<_>>(),
        "the queued deliveries went out whole after the others were pruned"
    );
    assert!(
        sent.iter()
            .all(|b| b["data"]["event"]["callee_id"] == callee.as_str())
    );

    // The last deliveries gone, the bodies go with them; so do a deleted subscription's.
    let pruned = db.store.prune_deliveries(now + a_day, 1_000).await.unwrap();
    assert_eq!(pruned as usize, queued.len());
    assert_eq!(db.store.stored_event_bodies().await.unwrap(), 0);
    probe(&server, &callee, "1.0").await;
    wait_deliveries(&server, &done, |items| {
        !items.is_empty() && items.iter().all(|d| d["status"] == "delivered")
    })
    .await;
    assert!(db.store.stored_event_bodies().await.unwrap() > 0);
    for sub in [&done, &paused] {
        let response = server
            .client
            .delete(server.url(&format!("/v1/subscriptions/{sub}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 204);
    }
    assert_eq!(db.store.stored_event_bodies().await.unwrap(), 0);
    server.stop().await;
}
