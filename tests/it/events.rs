//! `GET /v1/events`: the ledger as Server-Sent Events, live and resumable.

use std::time::{Duration, Instant};

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use cardgate::remote::sse::{Frame, SseLimits, SseReader};
use serde_json::{Value, json};

use crate::probes::{probe, register};
use crate::support::{TestDb, TestServer, error_code, on_both_backends};

on_both_backends!(the_event_stream_is_live_and_resumes_exactly_after_the_last_id);

async fn open(server: &TestServer, query: &str, last_event_id: Option<i64>) -> reqwest::Response {
    let mut request = server.client.get(server.url(&format!("/v1/events{query}")));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    request.send().await.unwrap()
}

fn reader(response: reqwest::Response) -> SseReader {
    SseReader::new(
        response,
        SseLimits {
            max_event_bytes: 64 * 1024,
            max_events: 10_000,
            idle: Duration::from_secs(20),
            deadline: tokio::time::Instant::now() + Duration::from_secs(60),
        },
    )
}

/// Frames until one of `kind` (inclusive), as (seq, kind).
async fn until(stream: &mut SseReader, kind: &str) -> Vec<(i64, String)> {
    let mut seen = Vec::new();
    loop {
        let frame: Frame = stream.next().await.expect("a frame");
        let event: Value = serde_json::from_str(&frame.data).unwrap();
        let got = frame.event.clone().unwrap_or_default();
        assert_eq!(event["kind"], got.as_str(), "the event name is the kind");
        seen.push((event["seq"].as_i64().unwrap(), got.clone()));
        if got == kind {
            return seen;
        }
    }
}

async fn ledger_of(server: &TestServer, callee: &str, after: i64) -> Vec<(i64, String)> {
    let (_, page) = server
        .get(&format!(
            "/v1/ledger?callee_id={callee}&after={after}&limit=200"
        ))
        .await;
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["seq"].as_i64().unwrap(),
                e["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn the_event_stream_is_live_and_resumes_exactly_after_the_last_id(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);

    // Replayed from the start: exactly the ledger, in order.
    let response = open(&server, &format!("?callee_id={callee}"), None).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut live = reader(response);
    let replayed = until(&mut live, "promoted").await;
    assert_eq!(replayed, ledger_of(&server, &callee, 0).await);

    // Live: a demotion arrives within a second of being recorded.
    let started = Instant::now();
    let (status, report) = server
        .post(
            &format!("/v1/callees/{callee}/reports"),
            json!({"protocol_version": "1.0", "trigger": "terminal-without-timestamp",
                "evidence": {"observed": [{"state": "TASK_STATE_COMPLETED"}]}}),
        )
        .await;
    assert_eq!(status, 201, "{report}");
    let arrived = until(&mut live, "demoted").await;
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(1), "{waited:?}");
    assert_eq!(
        arrived.last().unwrap().0,
        report["ledger_seq"].as_i64().unwrap()
    );

    // Resumed after an id: every later event once, none before it.
    let all = ledger_of(&server, &callee, 0).await;
    let resume_at = all[1].0;
    let mut resumed = reader(open(&server, &format!("?callee_id={callee}"), Some(resume_at)).await);
    let again = until(&mut resumed, "demoted").await;
    assert_eq!(again, all[2..].to_vec());
    // `after` does the same when no header is sent; `types` filters.
    let mut filtered = reader(
        open(
            &server,
            &format!("?callee_id={callee}&types=demoted,promoted&after=0"),
            None,
        )
        .await,
    );
    let only = until(&mut filtered, "demoted").await;
    let kinds: Vec<&str> = only.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(kinds, ["promoted", "demoted"]);

    // Bad parameters, and a key's ninth open stream.
    let (status, body) = server.get("/v1/events?types=nonsense").await;
    assert_eq!(
        (status, error_code(&body)),
        (400, "invalid_request"),
        "{body}"
    );
    let response = open(&server, "?after=0", Some(-3)).await;
    assert_eq!(response.status(), 400);
    let mut held = Vec::new();
    for _ in 0..5 {
        // Three are open already (live, resumed, filtered).
        held.push(open(&server, "", None).await);
    }
    let refused = open(&server, "", None).await;
    assert_eq!(refused.status(), 429);
    drop(held);
    drop((live, resumed, filtered));
    // Streams end when the server shuts down, so stopping completes.
    let _open = open(&server, "", None).await;
    server.stop().await;
}
