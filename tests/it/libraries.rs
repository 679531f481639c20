//! Interop with agents built on A2A libraries other than the official SDKs, each its own
//! implementation of the protocol (`tests/agents/<library>`, pinned, built as its docs show).
//! Each library gets the verdict its wire behaviour deserves, through the service, with the
//! reasons; and its captured exchanges (`tests/fixtures/<library>-<version>`), read through
//! cardgate's own event reader, show the behaviour that verdict rests on.
//!
//! - **FastA2A 2.1.1**: speaks v1.0 JSON-RPC and finishes every task, but its timestamps
//!   carry no zone (local time, `2026-12-05T07:14:25.699916`) and its stream's status updates
//!   none at all: no instant anywhere, so it can never be promoted, and callers that
//!   deduplicate by timestamp get an advisory answer; callers that do not, an authoritative
//!   one. A cancel of a finished task is accepted (200, the task unchanged): reported, not
//!   failed, since the end holds. A message to the finished task is accepted too, and answered
//!   with a new task (`submitted`) instead of refused (ACTS CORE-SEND-002, MUST): the end
//!   holds, so nothing demotes, but a caller's retry runs again; that alone would block its
//!   promotion.
//! - **a2a-server 0.6.1** (chuk): its card, only at the legacy path and in snake_case, names no
//!   protocol version, so it is read as v0.2; but the server speaks only the 0.1 draft's
//!   method names (`tasks/send`…) and refuses `message/send` and `message/stream` with
//!   -32601: no task can be created over the protocol the card implies. On its own 0.1
//!   methods its timestamps carry `+00:00` (a spelling, not an absence) and its history never
//!   grows; a cancel of a completed task is refused with -32603, and the task stays completed.
//! - **python-a2a 0.5.10**: its card claims A2A 0.3 JSON-RPC at its origin, but it speaks the
//!   0.1 draft on one path per method, and answers every 0.3 method with HTTP 500 and a body
//!   that is not JSON-RPC: no task can be created, so nothing about its lifecycle can be
//!   vouched for. (On its own paths it flips a completed task to `canceled` when asked to
//!   cancel it: the fixture shows it; cardgate never gets that far.)
//!
//! Two Rust crates, each a Cargo project of its own (`tests/agents/<crate>`, built by
//! `.ci/run`), probed with the script [`rust_script`]:
//!
//! - **turul-a2a 0.2.6**: v1.0 only (JSON-RPC at `/jsonrpc`, HTTP+JSON at the origin); the
//!   framework itself moves every turn to `working` before the executor runs, so streams open
//!   at `working` (no `submitted` is ever shown), every status carries a `Z` timestamp, the
//!   continued task keeps its id, and its end holds: a cancel of it is refused with -32002, a
//!   message to it and a resubscription with -32004. It is promoted, and both kinds of caller
//!   get an authoritative answer. Reported, not blocking (all SHOULD, none a spec MUST): a
//!   resubscription to the `input-required` task closes after the snapshot (the spec lets it);
//!   push delivers the terminal state only, with its token in `X-Turul-Push-Token` (the
//!   spec names no token header).
//! - **a2a-protocol-server 0.15.0** (tomtom215's a2a-rust): v1.0 JSON-RPC and HTTP+JSON, both
//!   at the origin; `submitted` -> `working` -> ... with `Z` timestamps, an end that holds
//!   (-32002, -32004, -32004 as above), a resubscription to the task waiting for input that
//!   carries it to its end, push of every state after `submitted` with the standard token
//!   header. A follow-up to an `input-required` task sets that same task back to `submitted`
//!   (the crate's documented choice: "only the status returns to Submitted for the new turn"),
//!   stamped after the `working` it had shown: a new turn starting as a new submission, which
//!   the spec does not rule out and trust model rule 1 accepts with the follow-up between. It
//!   is promoted, with nothing reported but the extended card it does not offer.

use serde_json::Value;

use cardgate::domain::probe::TaskState;
use cardgate::domain::probe::events::{Event, classify, is_utc_z, parse_timestamp};

use crate::probes::{condition, decision, events, finding, gate, probe, register};
use crate::support::agents::{Library, SdkAgent};
use crate::support::{TestDb, TestServer, repo_path, test_settings};

/// A captured file of `library`'s fixtures.
fn captured(library: &str, path: &str) -> String {
    let file = repo_path(&format!("tests/fixtures/{library}/{path}"));
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The A2A object a captured JSON-RPC answer carries.
fn result_of(library: &str, path: &str) -> Event {
    let body: Value = serde_json::from_str(&captured(library, path)).unwrap();
    classify(&body["result"]).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The A2A objects of a captured SSE body, in order.
fn stream_of(library: &str, path: &str) -> Vec<Event> {
    captured(library, path)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str::<Value>(d.trim()).unwrap())
        .map(|frame| classify(&frame["result"]).unwrap())
        .collect()
}

/// State and raw timestamp of a task or status update.
fn status_of(event: &Event) -> Option<(TaskState, Option<String>)> {
    let status = match event {
        Event::Task { status, .. } | Event::StatusUpdate { status, .. } => status.as_ref()?,
        _ => return None,
    };
    Some((status.state?.0, status.timestamp.clone()))
}

/// A registry that admits unsigned cards (neither library signs its card), on SQLite: what
/// differs between these runs is the agent on the wire.
async fn unsigned_cards_admitted() -> (TestDb, TestServer) {
    let db = TestDb::sqlite().await;
    let mut settings = test_settings(db.target.clone());
    settings.discovery.require_signed = false;
    let server = TestServer::start_with(settings).await;
    (db, server)
}

const FASTA2A: &str = "fasta2a-2.1.1";

#[test]
fn fasta2a_captures_show_zoneless_timestamps_an_accepted_cancel_and_a_plain_resubscription() {
    // GetTask after the end: completed, stamped in local time without a zone.
    let (state, stamp) = status_of(&result_of(FASTA2A, "v1/02-get.resp.json")).unwrap();
    assert_eq!(state, TaskState::Completed);
    let stamp = stamp.unwrap();
    assert!(
        parse_timestamp(&stamp).is_none(),
        "{stamp} names no instant"
    );
    assert!(!is_utc_z(&stamp));

    // The stream: the Task in `submitted`, then status updates without any timestamp.
    let states: Vec<(TaskState, bool)> = stream_of(FASTA2A, "v1/03-stream.sse.txt")
        .iter()
        .filter_map(status_of)
        .map(|(s, ts)| (s, ts.is_some()))
        .collect();
    assert_eq!(
        states,
        [
            (TaskState::Submitted, true),
            (TaskState::Working, false),
            (TaskState::Completed, false)
        ]
    );

    // CancelTask on the completed task: accepted (a result, not an error), state unchanged,
    // and GetTask agrees.
    let body: Value =
        serde_json::from_str(&captured(FASTA2A, "v1/05-cancel-completed.resp.json")).unwrap();
    assert!(body.get("error").is_none(), "{body}");
    for path in [
        "v1/05-cancel-completed.resp.json",
        "v1/06-get-after-cancel.resp.json",
    ] {
        let (state, _) = status_of(&result_of(FASTA2A, path)).unwrap();
        assert_eq!(state, TaskState::Completed, "{path}");
    }

    // Resubscribing to it: the completed task once, then the stream closed.
    let events = stream_of(FASTA2A, "v1/07-resubscribe-completed.sse.txt");
    assert_eq!(events.len(), 1);
    assert_eq!(status_of(&events[0]).unwrap().0, TaskState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fasta2a_finishes_its_tasks_but_names_no_instant_so_it_is_never_promoted() {
    let Some(agent) = SdkAgent::start_library(Library::Fasta2a).await else {
        return;
    };
    let (_db, server) = unsigned_cards_admitted().await;
    let callee = register(&server, &agent.origin, serde_json::json!({})).await;
    let run = probe(&server, &callee, "1.0").await;
    let context = format!("{:#}", run["findings"]);
    assert_eq!(run["wire"], "json-rpc-v1", "{run:#}");

    // What it does right: the lifecycle, streaming, and an end that holds.
    for code in [
        "LC-TASK-CREATED",
        "LC-FULL-LIFECYCLE",
        "LC-SINGLE-TERMINAL",
        "LC-NOTHING-AFTER-TERMINAL",
        "LC-GET-AGREES",
        "LC-IDS-CONSISTENT",
        "LC-TERMINAL-STAYS",
        "LC-RESUBSCRIBE",
        "CAP-STREAMING",
    ] {
        assert_eq!(finding(&run, code)["status"], "pass", "{code}: {context}");
    }
    // What it does wrong: no status carries an instant.
    let timestamps = finding(&run, "LC-TIMESTAMPS")["message"].as_str().unwrap();
    assert!(timestamps.contains("names no instant"), "{timestamps}");
    assert!(
        timestamps.contains("without status.timestamp"),
        "{timestamps}"
    );
    let terminal = finding(&run, "LC-TERMINAL-NO-TIMESTAMP");
    assert_eq!(terminal["status"], "fail", "{context}");
    let format = finding(&run, "LC-TIMESTAMP-FORMAT");
    assert_eq!(
        (&format["status"], &format["level"]),
        (&serde_json::json!("fail"), &serde_json::json!("must")),
        "{context}"
    );
    // A cancel of the finished task is accepted rather than refused: reported at SHOULD.
    let cancel = finding(&run, "LC-TERMINAL-CANCEL");
    assert_eq!(
        (&cancel["status"], &cancel["level"]),
        (&serde_json::json!("fail"), &serde_json::json!("should")),
        "{context}"
    );
    assert!(
        cancel["message"].as_str().unwrap().contains("accepted"),
        "{cancel}"
    );

    // A message to the finished task is accepted, as a new task: blocks, demotes nothing.
    let send = finding(&run, "LC-TERMINAL-SEND");
    assert_eq!(
        (&send["status"], &send["level"], &send["trigger"]),
        (
            &serde_json::json!("fail"),
            &serde_json::json!("must"),
            &Value::Null
        ),
        "{context}"
    );
    assert!(
        send["message"].as_str().unwrap().contains("a new task"),
        "{send}"
    );

    assert_eq!(run["verdict"]["passed"], false);
    assert_eq!(
        events(&run),
        ["probe-finished"],
        "never promoted, so never demoted"
    );
    assert_eq!(gate(&server, &callee, "1.0").await, "card-trusted");
    let strict = decision(&server, &callee, "caller_version=1.0").await;
    assert_eq!(strict["authoritative"], false, "{strict:#}");
    assert_eq!(condition(&strict, "lifecycle-probe")["status"], "fail");
    let relaxed = decision(&server, &callee, "caller_version=1.0&dedup=none").await;
    assert_eq!(relaxed["authoritative"], true, "{relaxed:#}");
    server.stop().await;
}

const PYTHON_A2A: &str = "python-a2a-0.5.10";

#[test]
fn python_a2a_captures_show_a_0_3_card_over_a_0_1_server_that_reopens_ended_tasks() {
    let card: Value =
        serde_json::from_str(&captured(PYTHON_A2A, "card/agent-card.json.json")).unwrap();
    assert_eq!(card["protocolVersion"], "0.3.0", "{card:#}");
    // Every v0.3 method at the card's URL: HTTP 500, with a body that is not JSON-RPC.
    let headers = captured(PYTHON_A2A, "v03/01-send.headers.txt");
    assert!(headers.contains("500"), "{headers}");
    let body: Value = serde_json::from_str(&captured(PYTHON_A2A, "v03/01-send.resp.json")).unwrap();
    assert!(
        body.get("result").is_none() && body.get("error").is_none(),
        "{body}"
    );

    // On its own 0.1 paths, a cancel of the completed task flips it to `canceled`.
    let completed = result_of(PYTHON_A2A, "v01-paths/02-get.resp.json");
    assert_eq!(status_of(&completed).unwrap().0, TaskState::Completed);
    for path in [
        "v01-paths/05-cancel-completed.resp.json",
        "v01-paths/06-get-after-cancel.resp.json",
    ] {
        assert_eq!(
            status_of(&result_of(PYTHON_A2A, path)).unwrap().0,
            TaskState::Canceled,
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_a2a_cannot_create_a_task_over_the_protocol_its_card_claims() {
    let Some(agent) = SdkAgent::start_library(Library::PythonA2a).await else {
        return;
    };
    let (_db, server) = unsigned_cards_admitted().await;
    let callee = register(&server, &agent.origin, serde_json::json!({})).await;
    let run = probe(&server, &callee, "0.3").await;
    assert_eq!(run["wire"], "json-rpc-v03", "{run:#}");
    let created = finding(&run, "LC-TASK-CREATED");
    assert_eq!(created["status"], "fail", "{run:#}");
    let why = created["message"].as_str().unwrap();
    assert!(why.contains("HTTP 500"), "{why}");
    assert_eq!(finding(&run, "LC-WELL-FORMED")["status"], "fail");
    assert_eq!(run["verdict"]["passed"], false);
    assert_eq!(events(&run), ["probe-finished"]);
    assert_eq!(gate(&server, &callee, "0.3").await, "card-trusted");
    for posture in ["", "&dedup=none"] {
        let answer = decision(&server, &callee, &format!("caller_version=0.3{posture}")).await;
        assert_eq!(answer["authoritative"], false, "{answer:#}");
        assert_eq!(condition(&answer, "lifecycle-probe")["status"], "fail");
    }
    server.stop().await;
}

const A2A_SERVER: &str = "a2a-server-0.6.1";

#[test]
fn a2a_server_captures_show_offset_timestamps_a_frozen_history_and_0_1_methods_only() {
    // v0.2/v0.3 method names: -32601, beside a `result` of null.
    let body: Value = serde_json::from_str(&captured(A2A_SERVER, "v03/01-send.resp.json")).unwrap();
    assert_eq!(body["error"]["code"], -32601, "{body}");
    // On its own 0.1 methods: `+00:00`, an instant spelled otherwise.
    let (state, stamp) =
        status_of(&result_of(A2A_SERVER, "v01/04-get-after-stream.resp.json")).unwrap();
    assert_eq!(state, TaskState::Completed);
    let stamp = stamp.unwrap();
    assert!(stamp.ends_with("+00:00"), "{stamp}");
    assert!(parse_timestamp(&stamp).is_some() && !is_utc_z(&stamp));
    // The history stays at the user's message from submitted to completed.
    let history = |path: &str| match result_of(A2A_SERVER, path) {
        Event::Task { history_len, .. } => history_len,
        other => panic!("{path}: {other:?}"),
    };
    assert_eq!(history("v01/01-send.resp.json"), Some(1));
    assert_eq!(history("v01/06-get-after-cancel.resp.json"), Some(1));
    // A cancel of the completed task: refused (not as TaskNotCancelableError), still completed.
    let cancel: Value =
        serde_json::from_str(&captured(A2A_SERVER, "v01/05-cancel-completed.resp.json")).unwrap();
    assert_eq!(cancel["error"]["code"], -32603, "{cancel}");
    let (state, _) =
        status_of(&result_of(A2A_SERVER, "v01/06-get-after-cancel.resp.json")).unwrap();
    assert_eq!(state, TaskState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_server_cannot_create_a_task_over_the_protocol_its_card_implies() {
    let Some(agent) = SdkAgent::start_library(Library::A2aServer).await else {
        return;
    };
    let (_db, server) = unsigned_cards_admitted().await;
    let callee = register(&server, &agent.origin, serde_json::json!({})).await;
    let (_, detail) = server.get(&format!("/v1/callees/{callee}")).await;
    assert!(
        detail["card"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/.well-known/agent.json"),
        "found at the legacy path: {detail:#}"
    );
    let version = detail["subjects"][0]["protocol_version"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(version, "0.2", "{detail:#}");
    let run = probe(&server, &callee, &version).await;
    let created = finding(&run, "LC-TASK-CREATED");
    assert_eq!(created["status"], "fail", "{run:#}");
    let why = created["message"].as_str().unwrap();
    assert!(why.contains("-32601"), "{why}");
    assert_eq!(run["verdict"]["passed"], false);
    assert_eq!(events(&run), ["probe-finished"]);
    let answer = decision(&server, &callee, "caller_version=0.2&dedup=none").await;
    assert_eq!(answer["authoritative"], false, "{answer:#}");
    assert_eq!(condition(&answer, "lifecycle-probe")["status"], "fail");
    server.stop().await;
}

/// The probe script of the Rust agents: a task that asks for input once, then completes;
/// a push task that completes at once (turul-a2a pushes only terminal states, so a push task
/// left waiting for input would notify nothing and leave push not exercised); a cancel of a
/// task waiting for input.
fn rust_script() -> Value {
    serde_json::json!({
        "message": "need-input",
        "follow_ups": ["more"],
        "push_message": "hello",
        "cancel_message": "need-input",
    })
}

/// Registers `agent` (probe script [`rust_script`]) and probes it at v1.0.
async fn probed_at_v1(server: &TestServer, agent: &SdkAgent) -> (String, Value) {
    let callee = register(server, &agent.origin, rust_script()).await;
    let run = probe(server, &callee, "1.0").await;
    (callee, run)
}

/// The findings of `run` whose status is not `pass`, as `(code, status, level)`.
fn not_passed(run: &Value) -> Vec<(String, String, String)> {
    run["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] != "pass")
        .map(|f| {
            let field = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (field("code"), field("status"), field("level"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turul_a2a_holds_its_lifecycle_and_its_end_so_it_is_promoted() {
    let Some(agent) = SdkAgent::start_library(Library::TurulA2a).await else {
        return;
    };
    let (_db, server) = unsigned_cards_admitted().await;
    let (callee, run) = probed_at_v1(&server, &agent).await;
    let context = format!("{:#}", run["findings"]);
    assert_eq!(run["wire"], "json-rpc-v1", "{run:#}");
    assert!(
        run["interface_url"].as_str().unwrap().ends_with("/jsonrpc"),
        "{run:#}"
    );

    // The framework opens every turn at `working`: no `submitted` anywhere, and the follow-up
    // continues the same task.
    let states: Vec<&str> = run["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["task"] == "lifecycle")
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert!(!states.contains(&"submitted"), "{states:?}");
    assert!(states.contains(&"input-required") && states.contains(&"completed"));

    for code in [
        "LC-TASK-CREATED",
        "LC-FULL-LIFECYCLE",
        "LC-TIMESTAMPS",
        "LC-TIMESTAMP-FORMAT",
        "LC-INPUT-REQUIRED",
        "LC-SINGLE-TERMINAL",
        "LC-NOTHING-AFTER-TERMINAL",
        "LC-TERMINAL-STAYS",
        "LC-TERMINAL-CANCEL",
        "LC-TERMINAL-SEND",
        "LC-RESUBSCRIBE",
        "LC-CANCEL",
        "LC-GET-AGREES",
        "LC-IDS-CONSISTENT",
        "LC-WELL-FORMED",
        "CAP-STREAMING",
        "CAP-PUSH",
    ] {
        assert_eq!(finding(&run, code)["status"], "pass", "{code}: {context}");
    }
    // Reported, none blocking: each is a SHOULD, and none a spec requirement.
    let reported: Vec<(String, String, String)> = not_passed(&run)
        .into_iter()
        .filter(|(code, _, _)| code != "PROBE-EXTENDED-CARD")
        .collect();
    let should = |code: &str| (code.to_string(), "fail".to_string(), "should".to_string());
    assert_eq!(
        reported,
        [
            should("LC-RESUBSCRIBE-LIVE"),
            should("PUSH-TOKEN"),
            should("PUSH-EVERY-STATE")
        ],
        "{context}"
    );
    // The resubscription to the task waiting for input: its snapshot, then closed.
    let live = finding(&run, "LC-RESUBSCRIBE-LIVE")["message"]
        .as_str()
        .unwrap();
    assert!(live.contains("input-required"), "{live}");
    // Its own header for the push token; only the terminal state is pushed.
    let token = finding(&run, "PUSH-TOKEN")["message"].as_str().unwrap();
    assert!(token.contains("x-turul-push-token"), "{token}");

    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);
    assert_eq!(events(&run), ["probe-finished", "promoted"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    for query in ["caller_version=1.0", "caller_version=1.0&dedup=none"] {
        let answer = decision(&server, &callee, query).await;
        assert_eq!(answer["authoritative"], true, "{query}: {answer:#}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_protocol_server_restarts_each_turn_at_submitted_and_is_promoted() {
    let Some(agent) = SdkAgent::start_library(Library::A2aProtocolServer).await else {
        return;
    };
    let (_db, server) = unsigned_cards_admitted().await;
    let (callee, run) = probed_at_v1(&server, &agent).await;
    let context = format!("{:#}", run["findings"]);
    assert_eq!(run["wire"], "json-rpc-v1", "{run:#}");

    // On the wire: the follow-up's stream opens with the same task, back at `submitted`,
    // stamped after the `working` the first turn showed.
    let exchanges = run["exchanges"].as_array().unwrap();
    let streamed = |follow_up: bool| {
        exchanges
            .iter()
            .find(|e| {
                e["method"] == "SendStreamingMessage"
                    && e["request"]["params"]["message"]["taskId"].is_string() == follow_up
            })
            .unwrap_or_else(|| panic!("no such stream: {run:#}"))
    };
    let frame = |exchange: &Value, n: usize| -> Value {
        serde_json::from_str(exchange["frames"][n]["data"].as_str().unwrap()).unwrap()
    };
    let working = frame(streamed(false), 1);
    let working = &working["result"]["statusUpdate"]["status"];
    assert_eq!(working["state"], "TASK_STATE_WORKING", "{working:#}");
    let again = frame(streamed(true), 0);
    let snapshot = &again["result"]["task"];
    assert_eq!(
        snapshot["id"],
        streamed(true)["request"]["params"]["message"]["taskId"],
        "{again:#}"
    );
    assert_eq!(
        snapshot["status"]["state"], "TASK_STATE_SUBMITTED",
        "{again:#}"
    );
    let instant = |status: &Value| parse_timestamp(status["timestamp"].as_str().unwrap()).unwrap();
    assert!(instant(&snapshot["status"]) > instant(working), "{again:#}");

    // A new turn may start as a new submission: the lifecycle passes, and so does the rest.
    for code in [
        "LC-TASK-CREATED",
        "LC-FULL-LIFECYCLE",
        "LC-TIMESTAMPS",
        "LC-TIMESTAMP-FORMAT",
        "LC-TIMESTAMP-ORDER",
        "LC-INPUT-REQUIRED",
        "LC-SINGLE-TERMINAL",
        "LC-NOTHING-AFTER-TERMINAL",
        "LC-TERMINAL-STAYS",
        "LC-TERMINAL-CANCEL",
        "LC-TERMINAL-SEND",
        "LC-RESUBSCRIBE",
        "LC-RESUBSCRIBE-LIVE",
        "LC-CANCEL",
        "LC-GET-AGREES",
        "LC-IDS-CONSISTENT",
        "LC-WELL-FORMED",
        "CAP-STREAMING",
        "CAP-PUSH",
        "PUSH-TOKEN",
        "PUSH-EVERY-STATE",
    ] {
        assert_eq!(finding(&run, code)["status"], "pass", "{code}: {context}");
    }
    let lifecycle = finding(&run, "LC-FULL-LIFECYCLE")["message"]
        .as_str()
        .unwrap();
    assert!(
        lifecycle.contains("submitted → working → completed"),
        "{lifecycle}"
    );
    let reported: Vec<String> = not_passed(&run).into_iter().map(|(c, _, _)| c).collect();
    assert_eq!(reported, ["PROBE-EXTENDED-CARD"], "{context}");

    assert_eq!(run["verdict"]["passed"], true, "{:#}", run["verdict"]);
    assert_eq!(events(&run), ["probe-finished", "promoted"]);
    assert_eq!(gate(&server, &callee, "1.0").await, "lifecycle-trusted");
    for query in ["caller_version=1.0", "caller_version=1.0&dedup=none"] {
        let answer = decision(&server, &callee, query).await;
        assert_eq!(answer["authoritative"], true, "{query}: {answer:#}");
    }
    server.stop().await;
}
