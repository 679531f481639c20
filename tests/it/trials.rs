//! Trials (issue 46): a cycle runs k lifecycle tasks at once and passes only if every one
//! does. A fault that shows only when tasks overlap is caught with k = 3 and never with k = 1;
//! a flaky agent fails most cycles; each trial keeps its own exchanges and the run its latency.

use std::time::Duration;

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::cli::json_report;
use crate::probes::{condition, decision, finding, probe, register};
use crate::support::{TestDb, TestServer, on_both_backends, test_settings};

fn subject(report: &Value) -> &Value {
    &report["subjects"][0]
}

/// Tasks live long enough to overlap when they start together.
fn slow() -> FakeAgentConfig {
    FakeAgentConfig {
        step_delay: Duration::from_millis(200),
        ..FakeAgentConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_that_needs_overlapping_tasks_is_caught_with_three_trials_and_never_with_one() {
    let agent = FakeAgent::start(slow(), Behaviour::OverlapNoTerminalTimestamp)
        .await
        .unwrap();
    let origin = agent.origin();
    for _ in 0..3 {
        let report = json_report(&[&origin, "--json", "--trials", "1"], 0).await;
        let s = subject(&report);
        assert_eq!(s["would_promote"], true, "{s:#}");
        assert_eq!(s["trials"], json!({"count": 1, "clean": 1, "failed": []}));
    }

    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("trials.xml");
    let junit_arg = junit.display().to_string();
    let report = json_report(
        &[&origin, "--json", "--trials", "3", "--junit", &junit_arg],
        1,
    )
    .await;
    let s = subject(&report);
    assert_eq!(s["would_promote"], false, "{s:#}");
    assert_eq!(s["trials"]["count"], 3);
    let failed = s["trials"]["failed"].as_array().unwrap();
    assert!(!failed.is_empty() && failed.len() <= 3, "{s:#}");
    assert_eq!(
        s["trials"]["clean"].as_u64().unwrap() as usize,
        3 - failed.len()
    );
    let missing = s["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "LC-TERMINAL-NO-TIMESTAMP")
        .unwrap();
    assert_eq!(missing["status"], "fail");
    let message = missing["message"].as_str().unwrap();
    assert!(message.contains("of 3 trials"), "{message}");
    assert_eq!(s["verdict"]["triggers"][0][0], "timestamp");
    // Latency comes from the transitions' offsets: the agent streams, so every trial's
    // first event and end were measured, the end at least two 200 ms steps in.
    let latency = &s["latency"];
    assert!(latency["first_event"]["p50_ms"].is_u64(), "{latency:#}");
    let terminal = latency["terminal"]["p95_ms"].as_u64().unwrap();
    assert!(terminal >= 400, "{latency:#}");

    // JUnit: one case per trial beside those of the findings; each failed trial fails.
    let xml = std::fs::read_to_string(&junit).unwrap();
    for n in 1..=3 {
        assert!(
            xml.contains(&format!(
                r#"<testcase classname="cardgate.probe.1.0.trials" name="trial {n} of 3""#
            )),
            "{xml}"
        );
    }
    let findings = s["findings"].as_array().unwrap();
    assert_eq!(xml.matches("<testcase ").count(), findings.len() + 3);
    let failed_findings = findings.iter().filter(|f| f["status"] == "fail").count();
    assert_eq!(
        xml.matches("<failure ").count(),
        failed_findings + failed.len()
    );
}

on_both_backends!(a_flaky_agent_fails_most_cycles_and_each_trial_keeps_its_own_exchanges,);

async fn a_flaky_agent_fails_most_cycles_and_each_trial_keeps_its_own_exchanges(db: TestDb) {
    let mut settings = test_settings(db.target.clone());
    settings.probe.trials = 3;
    let server = TestServer::start_with(settings).await;

    // Conformant: three clean trials, each with its own calls in the run's exchanges.
    let agent = FakeAgent::start(FakeAgentConfig::default(), Behaviour::Conformant)
        .await
        .unwrap();
    let callee = register(&server, &agent.origin(), json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    assert_eq!(run["passed"], true, "{run:#}");
    assert_eq!(
        run["verdict"]["trials"],
        json!({"count": 3, "clean": 3, "failed": []})
    );
    let exchanges = run["exchanges"].as_array().unwrap();
    for n in [2, 3] {
        let of_trial: Vec<&Value> = exchanges.iter().filter(|x| x["trial"] == n).collect();
        assert!(!of_trial.is_empty(), "trial {n} has no exchanges");
        // Its own client numbers its calls from 0.
        assert_eq!(of_trial[0]["call"], 0);
    }
    assert!(run["latency"]["first_event"]["p50_ms"].is_u64(), "{run:#}");

    // Its track record: three trials are too few to call; after a second cycle, six clean
    // trials make it stable, and a caller can ask for a record and for freshness.
    let answer = decision(&server, &callee, "caller_version=1.0").await;
    let record = &answer["evidence"]["track_record"];
    assert_eq!(
        (&record["trials"], &record["class"]),
        (&json!(3), &json!("new")),
        "{answer:#}"
    );
    let asked = decision(
        &server,
        &callee,
        "caller_version=1.0&min_trials=5&min_clean_rate=0.5",
    )
    .await;
    assert_eq!(
        condition(&asked, "track-record")["status"],
        "unknown",
        "{asked:#}"
    );
    assert_eq!(asked["authoritative"], false);
    probe(&server, &callee, "1.0").await;
    let answer = decision(&server, &callee, "caller_version=1.0").await;
    let record = &answer["evidence"]["track_record"];
    assert_eq!(
        (
            &record["runs"],
            &record["trials"],
            &record["clean"],
            &record["class"]
        ),
        (&json!(2), &json!(6), &json!(6), &json!("stable")),
        "{answer:#}"
    );
    assert!(
        record["latency"]["terminal"]["p95_ms"].is_u64(),
        "{record:#}"
    );
    // Six of six: the lower bound is 0.609.
    assert_eq!(record["clean_rate_lower_bound"], 0.609);
    let asked = decision(
        &server,
        &callee,
        "caller_version=1.0&min_trials=5&min_clean_rate=0.5&max_age=3600",
    )
    .await;
    assert_eq!(
        condition(&asked, "track-record")["status"],
        "pass",
        "{asked:#}"
    );
    assert_eq!(condition(&asked, "fresh")["status"], "pass");
    assert_eq!(asked["authoritative"], true);
    let strict = decision(&server, &callee, "caller_version=1.0&min_clean_rate=0.9").await;
    assert_eq!(
        condition(&strict, "track-record")["status"],
        "fail",
        "{strict:#}"
    );
    // A promotion never decays by itself, but a caller's freshness does.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let stale = decision(&server, &callee, "caller_version=1.0&max_age=1").await;
    assert_eq!(condition(&stale, "fresh")["status"], "fail", "{stale:#}");
    assert_eq!(stale["authoritative"], false);
    assert_eq!(stale["gate_state"], "lifecycle-trusted");
    // Prometheus: the subject counted in its class, the agent's latency in histograms.
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("cardgate_track_record_subjects{class=\"stable\"} 1"),
        "{metrics}"
    );
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("cardgate_probe_latency_seconds_count{operation=\"first_event\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(!counted.ends_with(" 0"), "{counted}");
    let (status, bad) = server
        .get(&format!(
            "/v1/trust?callee_id={callee}&caller_version=1.0&min_clean_rate=1.5"
        ))
        .await;
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_request")),
        "{bad:#}"
    );

    // Every third task it creates ends without a timestamp: most cycles of three trials
    // meet one, and a cycle passes only if every trial does.
    let flaky = FakeAgent::start(
        FakeAgentConfig::default(),
        Behaviour::ThirdNoTerminalTimestamp,
    )
    .await
    .unwrap();
    let callee = register(&server, &flaky.origin(), json!({})).await;
    let mut failed_cycles = 0;
    for _ in 0..3 {
        let run = probe(&server, &callee, "1.0").await;
        let trials = &run["verdict"]["trials"];
        assert_eq!(trials["count"], 3, "{run:#}");
        if run["passed"] == false {
            failed_cycles += 1;
            assert_eq!(finding(&run, "LC-TERMINAL-NO-TIMESTAMP")["status"], "fail");
        }
    }
    assert!(failed_cycles >= 2, "{failed_cycles} of 3 cycles failed");
    let answer = decision(&server, &callee, "caller_version=1.0&min_clean_rate=0.9").await;
    let record = &answer["evidence"]["track_record"];
    assert_eq!(record["trials"], 9, "{answer:#}");
    assert!(record["clean"].as_u64().unwrap() < 9);
    assert!(
        record["class"] == "flaky" || record["class"] == "failing",
        "{record:#}"
    );
    assert_eq!(condition(&answer, "track-record")["status"], "fail");
    assert_eq!(answer["authoritative"], false);
    server.stop().await;
}
