//! The probe engine against the scriptable fake agent: every behaviour switch, with the exact
//! findings, gate state and ledger events, including demotion and re-promotion.

use std::time::Duration;

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::support::{TestDb, TestServer, error_code, on_both_backends, test_settings};

on_both_backends!(
    a_conformant_agent_is_promoted_and_answers_authoritatively,
    a_terminal_without_timestamp_demotes_and_only_a_fresh_pass_repromotes,
    one_probe_per_subject_at_a_time_and_shutdown_aborts_the_running_one,
    a_run_left_running_by_a_crash_is_aborted_at_the_next_start,
    a_capability_advertised_after_the_newest_probe_is_unknown_until_probed,
    a_decision_revalidates_with_its_etag_until_it_changes,
    a_probe_request_naming_no_version_probes_the_newest_offered,
);

/// Registers the agent and returns the callee id.
pub(crate) async fn register(server: &TestServer, agent_origin: &str, probe: Value) -> String {
    let (status, body) = server
        .post(
            "/v1/callees",
            json!({"card_url": agent_origin, "probe": probe}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_string()
}

/// Requests a probe and waits until it is finished or aborted; returns the full run.
pub(crate) async fn probe(server: &TestServer, callee: &str, version: &str) -> Value {
    let (status, run) = server
        .post(
            &format!("/v1/callees/{callee}/probes"),
            json!({"protocol_version": version}),
        )
        .await;
    assert_eq!(status, 202, "{run}");
    wait(server, run["id"].as_str().unwrap()).await
}

pub(crate) async fn wait(server: &TestServer, run: &str) -> Value {
    for _ in 0..600 {
        let (_, body) = server.get(&format!("/v1/probes/{run}")).await;
        if matches!(body["status"].as_str(), Some("finished" | "aborted")) {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("probe {run} did not finish");
}

pub(crate) fn finding<'a>(run: &'a Value, code: &str) -> &'a Value {
    run["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == code)
        .unwrap_or_else(|| panic!("no {code} in {run:#}"))
}

pub(crate) fn events(run: &Value) -> Vec<String> {
    run["ledger_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) async fn gate(server: &TestServer, callee: &str, version: &str) -> String {
    let (_, body) = server.get(&format!("/v1/callees/{callee}")).await;
    body["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["protocol_version"] == version)
        .map(|s| s["gate_state"].as_str().unwrap().to_string())
        .unwrap()
}

pub(crate) async fn decision(server: &TestServer, callee: &str, query: &str) -> Value {
    let (status, body) = server
        .get(&format!("/v1/trust?callee_id={callee}&{query}"))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

pub(crate) fn condition<'a>(decision: &'a Value, id: &str) -> &'a Value {
    decision["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
}

/// The request's schema leaves `protocol_version` optional; a callee offering two versions
/// is probed at the newer one, never refused for want of a name.
async fn a_probe_request_naming_no_version_probes_the_newest_offered(db: TestDb) {
    let config = FakeAgentConfig {
        versions: vec!["0.3", "1.0"],
        ..FakeAgentConfig::default()
    };
    let agent = FakeAgent::start(config, Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let (status, run) = server
        .post(&format!("/v1/callees/{callee}/probes"), json!({}))
        .await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["protocol_version"], "1.0", "{run}");
    let run = wait(&server, run["id"].as_str().unwrap()).await;
    assert_eq!(run["verdict"]["passed"], true, "{run:#}");
}

async fn a_conformant_agent_is_promoted_and_answers_authoritatively(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;

    let before = decision(
        &server,
        &callee,
        "caller_version=1.0&requires=streaming,pushNotifications",
    )
    .await;
    assert_eq!(before["authoritative"], false);

    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["status"], "finished", "{run:#}");
    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);
    assert_eq!(run["capabilities"]["streaming"]["status"], "passed");
    assert_eq!(
        run["capabilities"]["pushNotifications"]["status"], "passed",
        "{:#}",
        run["capabilities"]
    );
    assert_eq!(events(&run), ["probe-finished", "promoted"]);
    let states: Vec<&str> = run["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["task"] == "lifecycle" && t["source"] == "stream")
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["submitted", "working", "completed"]);
    assert!(
        run["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["method"] == "SendStreamingMessage")
    );
    // The webhook token is a credential: the transcript shows where it went, never what it is.
    let exchanges = run["exchanges"].as_array().unwrap();
    let registration = exchanges
        .iter()
        .find(|e| e["method"] == "CreateTaskPushNotificationConfig")
        .unwrap();
    assert_eq!(registration["request"]["params"]["token"], "[redacted]");
    assert!(
        registration["request"]["params"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/v1/hooks/push/[redacted]")
    );
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    let (_, detail) = server.get(&format!("/v1/callees/{callee}")).await;
    assert_eq!(detail["subjects"][0]["last_probe"]["id"], run["id"]);
    assert_eq!(detail["subjects"][0]["last_probe"]["passed"], true);
    let (_, runs) = server.get(&format!("/v1/callees/{callee}/probes")).await;
    assert_eq!(runs["items"][0]["id"], run["id"]);

    let after = decision(
        &server,
        &callee,
        "caller_version=1.0&requires=streaming,pushNotifications",
    )
    .await;
    assert_eq!(after["authoritative"], true, "{after:#}");
    assert_eq!(after["evidence"]["probe_run_id"], run["id"]);
    server.stop().await;
}

async fn a_terminal_without_timestamp_demotes_and_only_a_fresh_pass_repromotes(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    assert_eq!(
        events(&probe(&server, &callee, "1.0").await),
        ["probe-finished", "promoted"]
    );

    agent.set_behaviour(Behaviour::NoTerminalTimestamp);
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(finding(&run, "LC-TERMINAL-NO-TIMESTAMP")["status"], "fail");
    assert_eq!(
        finding(&run, "LC-TERMINAL-NO-TIMESTAMP")["trigger"],
        "timestamp"
    );
    assert_eq!(events(&run), ["probe-finished", "demoted"]);
    assert_eq!(run["ledger_events"][1]["data"]["class"], "timestamp");
    assert_eq!(gate(&server, &callee, "1.0").await, "demoted");
    // Timestamp-class demotions do not apply to callers that do not dedup by timestamp…
    let relaxed = decision(&server, &callee, "caller_version=1.0&dedup=none").await;
    assert_eq!(condition(&relaxed, "not-demoted")["status"], "pass");
    // …but they do to those that do.
    let strict = decision(&server, &callee, "caller_version=1.0").await;
    assert_eq!(condition(&strict, "not-demoted")["status"], "fail");

    // A card republish, one that moves the subject's interfaces, does not lift the demotion.
    agent.republish_interfaces("tenant-2");
    let (_, refresh) = server
        .post(&format!("/v1/callees/{callee}/refresh"), json!({}))
        .await;
    assert_eq!(refresh["status"], "fetched", "{refresh:#}");
    let (_, ledger) = server.get(&format!("/v1/ledger?callee_id={callee}")).await;
    let kinds: Vec<&str> = ledger["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"card-republished"), "{kinds:?}");
    assert_eq!(gate(&server, &callee, "1.0").await, "demoted");

    // A fresh passing probe does.
    agent.set_behaviour(Behaviour::Conformant);
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(events(&run), ["probe-finished", "promoted"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    let (_, verify) = server.get("/v1/ledger/verify").await;
    assert_eq!(verify["ok"], true);
    server.stop().await;
}

/// One switch: promoted first, then the behaviour, then back to conformant. The switches run
/// on SQLite only: they exercise the engine's checks and the gate moves in the domain, and the
/// storage they go through (finish_probe_run, the ledger fold) is the same code that the
/// scenarios above run on both backends.
pub(crate) async fn demotes_and_recovers(
    config: FakeAgentConfig,
    version: &str,
    script: Value,
    behaviour: Behaviour,
    code: &str,
    class: &str,
) {
    let db = TestDb::sqlite().await;
    let agent = FakeAgent::start(config, Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), script).await;
    let first = probe(&server, &callee, version).await;
    assert_eq!(
        events(&first),
        ["probe-finished", "promoted"],
        "{behaviour:?} baseline: {:#}",
        first["verdict"]
    );

    agent.set_behaviour(behaviour);
    let run = probe(&server, &callee, version).await;
    let f = finding(&run, code);
    assert_eq!(f["status"], "fail", "{behaviour:?}: {f}");
    assert_eq!(f["trigger"], class, "{behaviour:?}: {f}");
    assert_eq!(run["verdict"]["passed"], false);
    assert_eq!(events(&run), ["probe-finished", "demoted"], "{behaviour:?}");
    assert_eq!(run["ledger_events"][1]["data"]["class"], class);
    assert_eq!(gate(&server, &callee, version).await, "demoted");

    agent.set_behaviour(Behaviour::Conformant);
    let again = probe(&server, &callee, version).await;
    assert_eq!(
        events(&again),
        ["probe-finished", "promoted"],
        "{behaviour:?} recovery"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_terminal_events_demote_with_the_terminal_class() {
    demotes_and_recovers(
        FakeAgentConfig::default(),
        "1.0",
        json!({}),
        Behaviour::TwoTerminalEvents,
        "LC-SINGLE-TERMINAL",
        "terminal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_after_the_terminal_one_demotes_with_the_terminal_class() {
    demotes_and_recovers(
        FakeAgentConfig::default(),
        "1.0",
        json!({}),
        Behaviour::EventAfterTerminal,
        "LC-NOTHING-AFTER-TERMINAL",
        "terminal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_registration_answering_500_demotes_with_the_push_class() {
    demotes_and_recovers(
        FakeAgentConfig::default(),
        "1.0",
        json!({}),
        Behaviour::PushRegistration500,
        "CAP-PUSH",
        "push",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_required_loops_without_history_growth_demote_with_the_history_class() {
    let config = FakeAgentConfig {
        versions: vec!["0.3"],
        streaming: false,
        push: false,
        state_transition_history: true,
        ..FakeAgentConfig::default()
    };
    let script = json!({"message": "need-input", "follow_ups": ["need-input again", "done"]});
    demotes_and_recovers(
        config,
        "0.3",
        script,
        Behaviour::StuckHistory,
        "CAP-HISTORY",
        "history",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_history_on_an_agent_that_answers_at_once_demotes_with_the_history_class() {
    // The task is finished before the first GetTask (no step delay): the stream's first
    // event, the Task in `submitted`, and the GetTask after the end straddle the change.
    let config = FakeAgentConfig {
        versions: vec!["0.3"],
        state_transition_history: true,
        ..FakeAgentConfig::default()
    };
    demotes_and_recovers(
        config,
        "0.3",
        json!({}),
        Behaviour::StuckHistory,
        "CAP-HISTORY",
        "history",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_state_that_moves_after_cancel_demotes_with_the_terminal_class() {
    demotes_and_recovers(
        FakeAgentConfig::default(),
        "1.0",
        json!({}),
        Behaviour::CancelFlipsTerminal,
        "LC-TERMINAL-STAYS",
        "terminal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubscription_that_ends_the_task_again_demotes_with_the_terminal_class() {
    demotes_and_recovers(
        FakeAgentConfig::default(),
        "1.0",
        json!({}),
        Behaviour::ResubscribeReplaysEnd,
        "LC-SINGLE-TERMINAL",
        "terminal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_conformant_task_is_probed_and_holds() {
    // v1.0 refuses the resubscription (§3.1.6); v0.3 sends the final task once and closes.
    for (version, resubscribe) in [("1.0", "refused"), ("0.3", "sent the final task")] {
        let config = FakeAgentConfig {
            versions: vec![if version == "1.0" { "1.0" } else { "0.3" }],
            ..FakeAgentConfig::default()
        };
        let agent = FakeAgent::start(config, Behaviour::Conformant)
            .await
            .unwrap();
        let db = TestDb::sqlite().await;
        let server = TestServer::start(db.target.clone()).await;
        let callee = register(&server, &agent.origin(), json!({})).await;
        let run = probe(&server, &callee, version).await;
        assert_eq!(events(&run), ["probe-finished", "promoted"], "{run:#}");
        for code in ["LC-TERMINAL-STAYS", "LC-TERMINAL-CANCEL", "LC-RESUBSCRIBE"] {
            assert_eq!(
                finding(&run, code)["status"],
                "pass",
                "{version} {code}: {run:#}"
            );
        }
        let message = finding(&run, "LC-RESUBSCRIBE")["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.contains(resubscribe), "{version}: {message}");
        assert!(
            finding(&run, "LC-TERMINAL-CANCEL")["message"]
                .as_str()
                .unwrap()
                .contains("-32002"),
            "{run:#}"
        );
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_timestamp_is_spelled_wrong_but_never_missing() {
    // v0.3 asks for ISO 8601 UTC: `+00:00` is reported, and the subject is promoted.
    let config = FakeAgentConfig {
        versions: vec!["0.3"],
        ..FakeAgentConfig::default()
    };
    let agent = FakeAgent::start(config, Behaviour::OffsetTimestamps)
        .await
        .unwrap();
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "0.3").await;
    let format = finding(&run, "LC-TIMESTAMP-FORMAT");
    assert_eq!(
        (&format["status"], &format["level"]),
        (&json!("fail"), &json!("should")),
        "{run:#}"
    );
    assert!(
        format["message"].as_str().unwrap().contains("+00:00"),
        "{format}"
    );
    for code in ["LC-TIMESTAMPS", "LC-TERMINAL-NO-TIMESTAMP"] {
        assert_eq!(finding(&run, code)["status"], "pass", "{code}: {run:#}");
    }
    assert_eq!(events(&run), ["probe-finished", "promoted"], "{run:#}");
    server.stop().await;

    // v1.0 makes `Z` a MUST: not promoted, yet nothing is missing and nothing demotes, so a
    // caller that does not deduplicate by timestamp still gets an authoritative answer.
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::OffsetTimestamps)
        .await
        .unwrap();
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    let format = finding(&run, "LC-TIMESTAMP-FORMAT");
    assert_eq!(
        (&format["status"], &format["level"]),
        (&json!("fail"), &json!("must")),
        "{run:#}"
    );
    assert_eq!(finding(&run, "LC-TIMESTAMPS")["status"], "pass", "{run:#}");
    assert_eq!(events(&run), ["probe-finished"], "{run:#}");
    assert!(run["verdict"]["triggers"].as_array().unwrap().is_empty());
    // Every instant is usable: deduplicating callers may rely on them as well.
    for dedup in ["timestamp", "none"] {
        let answer = decision(
            &server,
            &callee,
            &format!("caller_version=1.0&dedup={dedup}"),
        )
        .await;
        assert_eq!(
            condition(&answer, "lifecycle-probe")["status"],
            "pass",
            "{dedup}: {answer:#}"
        );
    }
    server.stop().await;
}

/// One switch on a fresh callee: the finding fails, nothing is promoted, nothing demoted
/// (SQLite only, for the reason given at `demotes_and_recovers`).
async fn fails_without_trigger(behaviour: Behaviour, code: &str, mentions: &str) -> Value {
    let db = TestDb::sqlite().await;
    let agent = FakeAgent::start(FakeAgentConfig::default(), behaviour)
        .await
        .unwrap();
    let mut settings = test_settings(db.target.clone());
    settings.probe.deadline = Duration::from_secs(4);
    settings.probe.limits.idle = Duration::from_secs(2);
    let server = TestServer::start_with(settings).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    let f = finding(&run, code);
    assert_eq!(f["status"], "fail", "{behaviour:?}: {run:#}");
    assert!(
        f["message"].as_str().unwrap().contains(mentions),
        "{behaviour:?}: {f}"
    );
    assert_eq!(run["verdict"]["passed"], false);
    assert!(
        run["verdict"]["triggers"].as_array().unwrap().is_empty(),
        "{behaviour:?}: {:#}",
        run["verdict"]
    );
    assert_eq!(events(&run), ["probe-finished"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "card-trusted");
    server.stop().await;
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_advertised_but_plain_json_fails_the_streaming_probe() {
    let run = fails_without_trigger(
        Behaviour::StreamingPlainJson,
        "CAP-STREAMING",
        "instead of text/event-stream",
    )
    .await;
    assert_eq!(run["capabilities"]["streaming"]["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_never_finishes_is_an_incomplete_lifecycle() {
    let run = fails_without_trigger(
        Behaviour::NeverFinishes,
        "LC-FULL-LIFECYCLE",
        "never reached a terminal state",
    )
    .await;
    assert_eq!(run["capabilities"]["streaming"]["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_sse_is_a_finding_not_a_crash() {
    let run = fails_without_trigger(Behaviour::MalformedSse, "LC-WELL-FORMED", "malformed").await;
    assert_eq!(run["capabilities"]["streaming"]["status"], "failed");
}

async fn one_probe_per_subject_at_a_time_and_shutdown_aborts_the_running_one(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::NeverFinishes)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let (status, first) = server
        .post(&format!("/v1/callees/{callee}/probes"), json!({}))
        .await;
    assert_eq!(status, 202, "the only version is implied: {first}");
    let (status, second) = server
        .post(
            &format!("/v1/callees/{callee}/probes"),
            json!({"protocol_version": "1.0"}),
        )
        .await;
    assert_eq!((status, error_code(&second)), (409, "conflict"));
    assert!(
        second["error"]["message"]
            .as_str()
            .unwrap()
            .contains(first["id"].as_str().unwrap()),
        "{second}"
    );
    let (status, wrong) = server
        .post(
            &format!("/v1/callees/{callee}/probes"),
            json!({"protocol_version": "2.0"}),
        )
        .await;
    assert_eq!((status, error_code(&wrong)), (404, "not_found"));

    // Wait until it is running, then shut down: the run is cut short and never promotes.
    let id = first["id"].as_str().unwrap().to_string();
    for _ in 0..100 {
        let (_, run) = server.get(&format!("/v1/probes/{id}")).await;
        if run["status"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
    let run = db
        .store
        .probe_run(cardgate::domain::ids::ProbeRunId(id.parse().unwrap()))
        .await
        .unwrap();
    assert_eq!(run.status().as_str(), "aborted");
    assert!(run.abort_reason().unwrap().contains("cut short"));
    let subject = db.store.subjects(run.callee_id).await.unwrap().remove(0);
    assert_eq!(subject.gate().as_str(), "card-trusted");
}

async fn a_run_left_running_by_a_crash_is_aborted_at_the_next_start(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::NeverFinishes)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    server.stop().await;
    // A run queued and marked running as a crashed process would have left it.
    let run = cardgate::service::probe::enqueue_probe(
        &db.store,
        cardgate::domain::ids::CalleeId(callee.parse().unwrap()),
        cardgate::domain::version::ProtocolVersion::new(1, 0),
        "operator",
        "test",
        cardgate::domain::time::now(),
    )
    .await
    .unwrap();
    db.store
        .start_probe_run(
            run.id,
            "http://x",
            "json-rpc-v1",
            cardgate::domain::time::now(),
        )
        .await
        .unwrap();

    // SQLite (one process) aborts every unfinished run at start; on Postgres, where other
    // replicas may be running theirs, the run is aborted when its job is claimed again.
    let mut settings = test_settings(db.target.clone());
    settings.worker.concurrency = 1;
    let server = TestServer::start_with(settings).await;
    let mut body = Value::Null;
    for _ in 0..100 {
        (_, body) = server.get(&format!("/v1/probes/{}", run.id)).await;
        if body["status"] == "aborted" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body["status"], "aborted", "{body:#}");
    assert!(body["ledger_events"].as_array().unwrap().is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v03_agent_with_history_behind_a_lagging_proxy_is_promoted_not_demoted() {
    // GetTask (polled for history while the stream is open) answers ahead of the stream that
    // the proxy holds back: arrival order across channels is not evidence (docs/trust-model.md, 3).
    let proxy = crate::support::proxy::LaggingProxy::start(Duration::from_millis(150)).await;
    let config = FakeAgentConfig {
        versions: vec!["0.3"],
        streaming: true,
        push: true,
        state_transition_history: true,
        public_origin: Some(proxy.origin()),
        ..FakeAgentConfig::default()
    };
    let agent = FakeAgent::start(config, Behaviour::Conformant)
        .await
        .unwrap();
    proxy.forward_to(&agent.origin());
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    let script = json!({"message": "need-input", "follow_ups": ["need-input again", "done"]});
    let callee = register(&server, &proxy.origin(), script).await;
    let run = probe(&server, &callee, "0.3").await;
    for code in [
        "LC-FULL-LIFECYCLE",
        "LC-NOTHING-AFTER-TERMINAL",
        "LC-INPUT-REQUIRED",
        "CAP-HISTORY",
        "CAP-STREAMING",
        "CAP-PUSH",
    ] {
        assert_eq!(finding(&run, code)["status"], "pass", "{code}: {run:#}");
    }
    assert_eq!(events(&run), ["probe-finished", "promoted"], "{run:#}");
    assert_eq!(gate(&server, &callee, "0.3").await, "lifecycle-trusted");
    server.stop().await;
}

async fn a_capability_advertised_after_the_newest_probe_is_unknown_until_probed(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    agent.advertise_push(false);
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(events(&run), ["probe-finished", "promoted"], "{run:#}");
    let push = "caller_version=1.0&requires=pushNotifications";
    let before = decision(&server, &callee, push).await;
    assert_eq!(
        condition(&before, "capability:pushNotifications")["status"],
        "fail",
        "not advertised yet"
    );

    // The card starts advertising push: the probe that promoted the subject never checked it.
    agent.advertise_push(true);
    let (_, refresh) = server
        .post(&format!("/v1/callees/{callee}/refresh"), json!({}))
        .await;
    assert_eq!(refresh["status"], "fetched", "{refresh:#}");
    let after = decision(&server, &callee, push).await;
    let condition_now = condition(&after, "capability:pushNotifications");
    assert_eq!(condition_now["status"], "unknown", "{after:#}");
    let reason = condition_now["reason"].as_str().unwrap();
    assert!(
        reason.contains("after probe") && reason.contains("ledger seq"),
        "{reason}"
    );

    // A fresh probe checks it.
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["capabilities"]["pushNotifications"]["status"], "passed");
    let checked = decision(&server, &callee, push).await;
    assert_eq!(
        condition(&checked, "capability:pushNotifications")["status"],
        "pass",
        "{checked:#}"
    );
    server.stop().await;
}

/// GET /v1/trust with `If-None-Match`: the status, the `ETag` answered, and the body (empty on
/// 304).
async fn trust_if_none_match(
    server: &TestServer,
    callee: &str,
    tag: Option<&str>,
) -> (u16, String, String) {
    let mut request = server.client.get(server.url(&format!(
        "/v1/trust?callee_id={callee}&caller_version=1.0&requires=streaming"
    )));
    if let Some(tag) = tag {
        request = request.header("if-none-match", tag);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (tag, cache) = (header("etag"), header("cache-control"));
    assert_eq!(cache, "no-cache", "status {status}");
    (status, tag, response.text().await.unwrap())
}

async fn a_decision_revalidates_with_its_etag_until_it_changes(db: TestDb) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let server = TestServer::start(db.target.clone()).await;
    let callee = register(&server, &agent.origin(), json!({})).await;

    let (status, first, body) = trust_if_none_match(&server, &callee, None).await;
    assert_eq!(status, 200);
    assert!(first.starts_with('"') && first.len() > 2, "{first}");
    let before: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(before["authoritative"], false);
    // Asked again with its tag: nothing moved, so 304 with no body and the same tag.
    let (status, again, body) = trust_if_none_match(&server, &callee, Some(&first)).await;
    assert_eq!(
        (status, again.as_str(), body.as_str()),
        (304, first.as_str(), "")
    );
    // Another tag, or one of a list, compared weakly.
    let (status, ..) = trust_if_none_match(&server, &callee, Some("\"other\"")).await;
    assert_eq!(status, 200);
    let list = format!("\"other\", W/{first}");
    let (status, ..) = trust_if_none_match(&server, &callee, Some(&list)).await;
    assert_eq!(status, 304);

    // The probe promotes the subject: the old tag no longer names the decision.
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);
    let (status, second, body) = trust_if_none_match(&server, &callee, Some(&first)).await;
    assert_eq!(status, 200);
    assert_ne!(second, first);
    let after: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(after["authoritative"], true, "{after:#}");
    let (status, ..) = trust_if_none_match(&server, &callee, Some(&second)).await;
    assert_eq!(status, 304);
    server.stop().await;
}
