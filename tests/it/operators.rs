//! What operators and CI pipelines use: `/metrics` read by the official Prometheus Python
//! client's OpenMetrics parser, the `can-i-trust` gate's exit codes and JUnit output (read by
//! Python's XML parser), lookups by card URL, request ids and the access log.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::support::cards::CardServer;
use crate::support::{TestDb, TestServer, error_code, on_both_backends, test_settings};

on_both_backends!(
    metrics_parse_and_count_what_happened,
    can_i_trust_gates_on_the_decision,
    callees_are_found_by_card_url,
);

fn python() -> Option<std::path::PathBuf> {
    crate::support::test_python("a parser check")
}

/// Runs a Python snippet on `input` (stdin) and parses what it prints as JSON.
async fn python_json(python: &Path, script: &str, input: &str) -> Value {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .await
        .unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The OpenMetrics parser of the official Prometheus client: every sample as
/// `{"name", "labels", "value"}`, per family with its type.
const PARSE_METRICS: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    out[family.name] = {"type": family.type, "samples": [
        {"name": s.name, "labels": s.labels, "value": s.value} for s in family.samples]}
print(json.dumps(out))
"#;

fn sample(families: &Value, family: &str, name: &str, labels: Value) -> Option<f64> {
    families[family]["samples"]
        .as_array()?
        .iter()
        .find(|s| {
            s["name"] == name
                && labels
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &s["labels"][k] == v)
        })
        .and_then(|s| s["value"].as_f64())
}

async fn metrics_parse_and_count_what_happened(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let agents = CardServer::start().await;
    let card = agents.card("Agent", &["1.0"], json!({"streaming": true}));
    agents.serve_signed_card("/a/agent-card.json", &card);
    let callee = server.register(&agents.url("/a/agent-card.json")).await;
    let id = callee["id"].as_str().unwrap();
    for _ in 0..3 {
        let (status, _) = server
            .get(&format!("/v1/trust?callee_id={id}&caller_version=1.0"))
            .await;
        assert_eq!(status, 200);
    }
    let (status, _) = server.get("/v1/trust?caller_version=1.0").await;
    assert_eq!(status, 400);
    // A probe job (the card server is no agent: whatever it comes to, it is counted).
    let (status, queued) = server
        .post(&format!("/v1/callees/{id}/probes"), json!({}))
        .await;
    assert_eq!(status, 202, "{queued}");

    // Open, like /readyz: no key.
    let response = reqwest::get(server.url("/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    let Some(python) = python() else {
        server.stop().await;
        return;
    };
    let families = python_json(&python, PARSE_METRICS, &text).await;

    let trust = json!({"method": "GET", "route": "/v1/trust"});
    let ok = json!({"method": "GET", "route": "/v1/trust", "status": "200"});
    let bad = json!({"method": "GET", "route": "/v1/trust", "status": "400"});
    assert_eq!(
        families["cardgate_http_requests"]["type"], "counter",
        "{families:#}"
    );
    assert_eq!(
        sample(
            &families,
            "cardgate_http_requests",
            "cardgate_http_requests_total",
            ok
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &families,
            "cardgate_http_requests",
            "cardgate_http_requests_total",
            bad
        ),
        Some(1.0)
    );
    assert_eq!(
        families["cardgate_http_request_duration_seconds"]["type"],
        "histogram"
    );
    assert_eq!(
        sample(
            &families,
            "cardgate_http_request_duration_seconds",
            "cardgate_http_request_duration_seconds_count",
            trust
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &families,
            "cardgate_subjects",
            "cardgate_subjects",
            json!({"gate_state": "card-trusted"})
        ),
        Some(1.0)
    );
    let head = sample(
        &families,
        "cardgate_ledger_head_seq",
        "cardgate_ledger_head_seq",
        json!({}),
    );
    assert!(head >= Some(1.0), "{head:?}");
    // The card was fetched once (at registration) and answered.
    let fetched = sample(
        &families,
        "cardgate_outbound_requests",
        "cardgate_outbound_requests_total",
        json!({"result": "response"}),
    );
    assert!(fetched >= Some(1.0), "{fetched:?}");
    for gauge in [
        "cardgate_queue_lag_seconds",
        "cardgate_jobs",
        "cardgate_probe_runs",
    ] {
        assert_eq!(families[gauge]["type"], "gauge", "{gauge}: {families:#}");
    }
    let jobs: f64 = families["cardgate_jobs"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["labels"]["kind"] == "probe")
        .filter_map(|s| s["value"].as_f64())
        .sum();
    assert_eq!(jobs, 1.0, "{families:#}");
    server.stop().await;
}

/// Rate-limit refusals are counted; `CARDGATE_METRICS=off` turns the route off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_counted_and_metrics_can_be_turned_off() {
    let db = TestDb::sqlite().await;
    let mut settings = test_settings(db.target.clone());
    settings.auth.rate_per_sec = 0.01;
    settings.auth.burst = 2.0;
    let server = TestServer::start_with(settings).await;
    let statuses: Vec<u16> = futures::future::join_all((0..5).map(|_| server.get("/v1/status")))
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        3,
        "{statuses:?}"
    );
    let text = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.lines()
            .any(|l| l == r#"cardgate_rate_limited_total{kind="key"} 3"#),
        "{text}"
    );
    server.stop().await;

    let mut settings = test_settings(db.target.clone());
    settings.metrics = false;
    let server = TestServer::start_with(settings).await;
    let (status, body) = server.get("/metrics").await;
    assert_eq!((status, error_code(&body)), (404, "not_found"));
    server.stop().await;
}

async fn cardgate(args: &[&str], key: &str) -> (i32, String) {
    crate::support::run_cardgate(args, &[("CARDGATE_API_KEY", key)]).await
}

/// Python's XML parser reads the JUnit file: (tests, failures, skipped, [(name, failed)]).
const PARSE_JUNIT: &str = r#"
import json, sys
import xml.etree.ElementTree as ET
root = ET.fromstring(sys.stdin.read())
assert root.tag == "testsuites", root.tag
suite = root.find("testsuite")
cases = [{"classname": c.get("classname"), "name": c.get("name"),
          "failed": c.find("failure") is not None, "skipped": c.find("skipped") is not None}
         for c in suite.findall("testcase")]
print(json.dumps({"tests": int(suite.get("tests")), "failures": int(suite.get("failures")),
                  "skipped": int(suite.get("skipped")), "cases": cases}))
"#;

async fn can_i_trust_gates_on_the_decision(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = crate::probes::register(&server, &agent.origin(), json!({})).await;
    let base = server.url("/");
    let key = crate::support::ADMIN_TOKEN;
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("trust.xml");
    let junit_arg = junit.display().to_string();

    // Registered, not yet probed: advisory, exit 1, and the JUnit file says which failed.
    let args = |callee: &str| {
        vec![
            "can-i-trust".to_string(),
            "--server".into(),
            base.clone(),
            "--callee".into(),
            callee.to_string(),
            "--caller-version".into(),
            "1.0".into(),
            "--junit".into(),
            junit_arg.clone(),
        ]
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cardgate(&args, key).await
    };
    let (code, out) = run(args(&callee)).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ADVISORY"), "{out}");
    assert!(out.contains("unknown lifecycle-probe"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    if let Some(python) = python() {
        let report = python_json(&python, PARSE_JUNIT, &xml).await;
        assert!(report["tests"].as_u64() >= Some(4), "{report}");
        assert!(report["failures"].as_u64() >= Some(1), "{report}");
        let probe = report["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "lifecycle-probe")
            .expect("a case per condition");
        assert_eq!(probe["failed"], true, "{report}");
    }

    // Probed and promoted: authoritative, exit 0; asked by card URL this time.
    let run_result = crate::probes::probe(&server, &callee, "1.0").await;
    assert_eq!(run_result["verdict"]["passed"], true);
    let (code, out) = run(args(&agent.origin())).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("AUTHORITATIVE"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    if let Some(python) = python() {
        let report = python_json(&python, PARSE_JUNIT, &xml).await;
        assert_eq!(report["failures"], 0, "{report}");
    }
    let mut json_args = args(&callee);
    json_args.push("--json".into());
    let (code, out) = run(json_args).await;
    assert_eq!(code, 0, "{out}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["authoritative"], true);

    // No answer: exit 2, whatever the reason.
    let (code, out) = run(args("https://unknown.example/")).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("404"), "{out}");
    let (code, out) = cardgate(
        &[
            "can-i-trust",
            "--server",
            &base,
            "--callee",
            &callee,
            "--caller-version",
            "1.0",
        ],
        "not-a-key",
    )
    .await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("401"), "{out}");
    let (code, out) = cardgate(
        &[
            "can-i-trust",
            "--server",
            "http://127.0.0.1:9/",
            "--callee",
            &callee,
            "--caller-version",
            "1.0",
        ],
        key,
    )
    .await;
    assert_eq!(code, 2, "{out}");
    server.stop().await;
}

async fn callees_are_found_by_card_url(db: TestDb) {
    let server = TestServer::start(db.target.clone()).await;
    let agents = CardServer::start().await;
    let card = agents.card("Agent", &["1.0"], json!({}));
    agents.serve_signed_card("/.well-known/agent-card.json", &card);
    // Registered by its origin; the registry keeps the normalized well-known URL.
    let created = server.register(&agents.origin()).await;
    let id = created["id"].as_str().unwrap();
    let stored = created["card_url"].as_str().unwrap().to_string();

    for asked in [stored.as_str(), &agents.origin()] {
        let query = url::form_urlencoded::byte_serialize(asked.as_bytes()).collect::<String>();
        let (status, page) = server.get(&format!("/v1/callees?card_url={query}")).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{asked}: {page}");
        assert_eq!(items[0]["id"], id);
        let (status, answer) = server
            .get(&format!("/v1/trust?card_url={query}&caller_version=1.0"))
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["callee_id"], id);
    }
    // An origin and its well-known card URLs name one card: a caller may ask with either.
    for spelling in [
        "/",
        "/.well-known/agent-card.json",
        "/.well-known/agent.json",
    ] {
        let asked = format!("{}{spelling}", agents.origin());
        let query = url::form_urlencoded::byte_serialize(asked.as_bytes()).collect::<String>();
        let (status, answer) = server
            .get(&format!("/v1/trust?card_url={query}&caller_version=1.0"))
            .await;
        assert_eq!((status, &answer["callee_id"]), (200, &json!(id)), "{asked}");
    }
    let (status, page) = server
        .get("/v1/callees?card_url=https%3A%2F%2Fnobody.example%2F")
        .await;
    assert_eq!(
        (status, page["items"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    let (status, body) = server
        .get("/v1/trust?card_url=https%3A%2F%2Fnobody.example%2F&caller_version=1.0")
        .await;
    assert_eq!((status, error_code(&body)), (404, "not_found"));
    // Not a URL anyone could have registered: it matches nothing.
    let (status, page) = server.get("/v1/callees?card_url=not%20a%20url").await;
    assert_eq!(
        (status, page["items"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    let (status, body) = server
        .get(&format!(
            "/v1/trust?callee_id={id}&card_url=x&caller_version=1.0"
        ))
        .await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    server.stop().await;
}

/// A real `cardgate serve` process: every request gets an id (the caller's, if sane) and one
/// access-log line at `info` naming route, status, key and id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_logged_once_with_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cardgate"))
        .arg("serve")
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", dir.path().join("c.db").display()),
        )
        .env("CARDGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("CARDGATE_ADMIN_TOKEN", crate::support::ADMIN_TOKEN)
        .env("CARDGATE_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = crate::support::client_with(crate::support::ADMIN_TOKEN);
    let mut ready = false;
    for _ in 0..200 {
        if reqwest::get(format!("{base}/healthz"))
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ready,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    let kept = client
        .get(format!("{base}/v1/status"))
        .header("x-request-id", "ci-run-42.step-7")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.headers()["x-request-id"], "ci-run-42.step-7");
    let replaced = client
        .get(format!("{base}/v1/callees/not-a-uuid"))
        .header("x-request-id", "has a space")
        .send()
        .await
        .unwrap();
    let generated = replaced.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(uuid::Uuid::parse_str(&generated).is_ok(), "{generated}");
    let anonymous = reqwest::get(format!("{base}/v1/status")).await.unwrap();
    assert_eq!(anonymous.status(), 401);

    let _ = child.start_kill();
    let _ = child.wait().await;
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &Value| l["target"] == "cardgate::access")
        .collect();
    let find = |route: &str, status: u64| {
        lines
            .iter()
            .filter(|l| l["route"] == route && l["status"] == status)
            .collect::<Vec<_>>()
    };
    let status_lines = find("/v1/status", 200);
    assert_eq!(status_lines.len(), 1, "{lines:#?}");
    let line = status_lines[0];
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["key"], "admin-token");
    assert!(line["latency_ms"].as_f64().is_some());
    assert_eq!(line["span"]["request_id"], "ci-run-42.step-7", "{line}");
    let bad = find("/v1/callees/{id}", 400);
    assert_eq!(bad.len(), 1, "{lines:#?}");
    assert_eq!(bad[0]["span"]["request_id"], generated.as_str());
    let refused = find("/v1/status", 401);
    assert_eq!(refused[0]["key"], "anonymous");
}
