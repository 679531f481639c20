//! The lifecycle faults users reported from the field in 2026, each rebuilt as a fake agent
//! mode and probed the way a careful operator would (an `input-required` turn, a cancel
//! scenario, push): `cardgate probe` and the service both catch every one, with the rule, its
//! level and its source in the finding. The conformant variations next to them (a working
//! status sent twice, unknown fields, a task that opens at `working`, the push token in a
//! header of the agent's own, only the end pushed) must keep promoting: a refusal the spec does
//! not support loses callers a conformant agent.

use cardgate::fake_agent::{Behaviour, FakeAgent, FakeAgentConfig};
use serde_json::{Value, json};

use crate::cli::json_report;
use crate::probes::{events, finding, probe, register};
use crate::support::{TestDb, TestServer};

const MESSAGE: &str = "need-input: the lifecycle probe";
const FOLLOW_UP: &str = "here is more";
const CANCEL: &str = "slow: to be canceled";

/// What a mode must produce: the rule that catches it, and the demotion class it fires.
struct Fault {
    behaviour: Behaviour,
    rule: &'static str,
    class: Option<&'static str>,
}

const FAULTS: [Fault; 11] = [
    // a2a-rs#274: the live stream drops the timestamp GetTask has.
    Fault {
        behaviour: Behaviour::StreamNoTimestamp,
        rule: "LC-TERMINAL-NO-TIMESTAMP",
        class: Some("timestamp"),
    },
    // A2A#373: GetTask never shows the end.
    Fault {
        behaviour: Behaviour::GetNeverEnds,
        rule: "LC-GET-AGREES",
        class: None,
    },
    // agentscope-java#1490: an artifact after the terminal status.
    Fault {
        behaviour: Behaviour::EventAfterTerminal,
        rule: "LC-NOTHING-AFTER-TERMINAL",
        class: Some("terminal"),
    },
    // A2A#1503: the stream is cut before its terminal event.
    Fault {
        behaviour: Behaviour::StreamCutBeforeEnd,
        rule: "CAP-STREAMING",
        class: None,
    },
    // ggcode#1074: the terminal state is never pushed.
    Fault {
        behaviour: Behaviour::PushNoTerminal,
        rule: "CAP-PUSH",
        class: None,
    },
    // a2a-java#775: pushes out of order.
    Fault {
        behaviour: Behaviour::PushOutOfOrder,
        rule: "LC-NOTHING-AFTER-TERMINAL",
        class: Some("terminal"),
    },
    // a2a-rust#66: a follow-up starts a new task.
    Fault {
        behaviour: Behaviour::FollowUpNewTask,
        rule: "LC-IDS-CONSISTENT",
        class: None,
    },
    // a2a-rs#268, a2a-go#438, a2a-python#1205, a2a-java#741: a message re-opens a finished task.
    Fault {
        behaviour: Behaviour::SendReopensTerminal,
        rule: "LC-TERMINAL-SEND",
        class: Some("terminal"),
    },
    // a2a-python#1170: a cancel answered `canceled` and not applied.
    Fault {
        behaviour: Behaviour::CancelNotApplied,
        rule: "LC-TERMINAL-STAYS",
        class: Some("terminal"),
    },
    // a2a-go#439: resubscribing to a live task answers TaskNotFound.
    Fault {
        behaviour: Behaviour::ResubscribeLiveNotFound,
        rule: "LC-RESUBSCRIBE-LIVE",
        class: None,
    },
    // a2a-java#754, a2a-js#542: the resubscription closes after the snapshot.
    Fault {
        behaviour: Behaviour::ResubscribeLiveClosesEarly,
        rule: "LC-RESUBSCRIBE-LIVE",
        class: None,
    },
];

/// Conformant variations, and the SHOULD finding each may carry (never blocking).
const CONTROLS: [(Behaviour, Option<&str>); 6] = [
    (Behaviour::Conformant, None),
    (Behaviour::WorkingTwice, None),
    (Behaviour::UnknownFields, None),
    (Behaviour::OpensAtWorking, None),
    (Behaviour::TokenInOwnHeader, Some("PUSH-TOKEN")),
    (Behaviour::PushTerminalOnly, Some("PUSH-EVERY-STATE")),
];

fn script() -> Value {
    json!({"message": MESSAGE, "follow_ups": [FOLLOW_UP], "cancel_message": CANCEL})
}

/// `cardgate probe --json` with the script; `promote` is the exit code's expectation.
async fn cli(agent: &FakeAgent, promote: bool) -> Value {
    let origin = agent.origin();
    let args = [
        origin.as_str(),
        "--json",
        "--message",
        MESSAGE,
        "--follow-up",
        FOLLOW_UP,
        "--cancel-message",
        CANCEL,
        "--push-wait-secs",
        "3",
    ];
    let report = json_report(&args, if promote { 0 } else { 1 }).await;
    report["subjects"][0].clone()
}

/// The finding of `fault.rule` among `findings` catches the fault: failed, at a blocking
/// level, with the class and a source.
fn assert_caught(findings: &Value, fault: &Fault, by: &str) {
    let failed: Vec<&Value> = findings
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .collect();
    let f = findings
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == fault.rule)
        .unwrap_or_else(|| panic!("no {} in {findings:#}", fault.rule));
    let what = format!(
        "{:?} by {by}: {f:#}\nevery failure: {failed:#?}",
        fault.behaviour
    );
    assert_eq!(f["status"], "fail", "{what}");
    assert_ne!(f["level"], "should", "{what}");
    assert_eq!(f["trigger"].as_str(), fault.class, "{what}");
    let source = f["source"].as_str().unwrap_or_default();
    assert!(
        source.contains("A2A v1.0 §") || source.starts_with("registry policy"),
        "{what}"
    );
}

/// One fault, probed by the CLI and by `server`.
async fn caught(server: &TestServer, fault: &Fault) {
    let agent = FakeAgent::start(FakeAgentConfig::default(), fault.behaviour)
        .await
        .unwrap();
    let subject = cli(&agent, false).await;
    assert_eq!(subject["would_promote"], false, "{:?}", fault.behaviour);
    assert_caught(&subject["findings"], fault, "cardgate probe");

    let callee = register(server, &agent.origin(), script()).await;
    let run = probe(server, &callee, "1.0").await;
    assert_eq!(events(&run), ["probe-finished"], "{:?}", fault.behaviour);
    assert_caught(&run["findings"], fault, "the service");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_reported_from_the_field_is_caught_by_the_cli_and_the_service() {
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    // Side by side: each fault has its own agent, and a verdict must not depend on load.
    futures::future::join_all(FAULTS.iter().map(|fault| caught(&server, fault))).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformant_variations_promote_with_should_findings_at_most() {
    let db = TestDb::sqlite().await;
    let server = TestServer::start(db.target.clone()).await;
    for (behaviour, should) in CONTROLS {
        let agent = FakeAgent::start(FakeAgentConfig::default(), behaviour)
            .await
            .unwrap();
        let subject = cli(&agent, true).await;
        let callee = register(&server, &agent.origin(), script()).await;
        let run = probe(&server, &callee, "1.0").await;
        assert_eq!(
            events(&run),
            ["probe-finished", "promoted"],
            "{behaviour:?}: {run:#}"
        );
        for findings in [&subject["findings"], &run["findings"]] {
            let failed: Vec<&str> = findings
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["status"] == "fail")
                .map(|f| f["code"].as_str().unwrap())
                .collect();
            assert_eq!(
                failed,
                Vec::from_iter(should),
                "{behaviour:?}: {findings:#}"
            );
        }
        // The live task was resubscribed to, twice (the input-required turn, the cancel
        // target), and both carried the task to its end.
        let live = finding(&run, "LC-RESUBSCRIBE-LIVE");
        assert_eq!(live["status"], "pass", "{behaviour:?}: {live}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_reopens_a_finished_task_demotes_with_the_terminal_class() {
    crate::probes::demotes_and_recovers(
        FakeAgentConfig::default(),
        "1.0",
        json!({}),
        Behaviour::SendReopensTerminal,
        "LC-TERMINAL-SEND",
        "terminal",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reported_and_not_applied_demotes_with_the_terminal_class() {
    crate::probes::demotes_and_recovers(
        FakeAgentConfig::default(),
        "1.0",
        json!({"cancel_message": CANCEL}),
        Behaviour::CancelNotApplied,
        "LC-TERMINAL-STAYS",
        "terminal",
    )
    .await;
}
