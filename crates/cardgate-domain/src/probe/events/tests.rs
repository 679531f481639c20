//! Unit tests of `cardgate_domain::probe::events`.

use super::*;
use crate::card::sdk_fixture as fixture;
use serde_json::json;

fn sse_results(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap()["result"].clone())
        .collect()
}

fn states(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e.transition(TaskRole::Lifecycle, Source::Stream, 0, Utc::now()))
        .map(|t| {
            format!(
                "{}{}",
                t.state,
                if t.timestamp.is_some() { "+ts" } else { "" }
            )
        })
        .collect()
}

#[test]
fn reads_v1_and_v03_streams_of_the_sdk_fixture() {
    for text in [
        fixture!("v1/05-stream.sse.txt"),
        fixture!("v03/05-stream.sse.txt"),
    ] {
        let events: Vec<Event> = sse_results(text)
            .iter()
            .map(|v| classify(v).unwrap())
            .collect();
        assert_eq!(states(&events), ["submitted", "working+ts", "completed+ts"]);
        assert!(matches!(events[2], Event::ArtifactUpdate { .. }));
        let ids: Vec<_> = events
            .iter()
            .map(|e| e.task_id().unwrap().to_string())
            .collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1]));
    }
}

#[test]
fn spelling_and_final_flags_are_kept() {
    let v03 = sse_results(fixture!("v03/05-stream.sse.txt"));
    let last = classify(v03.last().unwrap()).unwrap();
    let t = last
        .transition(TaskRole::Lifecycle, Source::Stream, 0, Utc::now())
        .unwrap();
    assert_eq!((t.spelling, t.final_flag), (Spelling::V0, Some(true)));
    let v1 = sse_results(fixture!("v1/05-stream.sse.txt"));
    let t = classify(&v1[3])
        .unwrap()
        .transition(TaskRole::Lifecycle, Source::Stream, 0, Utc::now())
        .unwrap();
    assert_eq!((t.spelling, t.final_flag), (Spelling::V1, None));
    assert!(t.parsed_timestamp.is_some());
}

#[test]
fn push_bodies_and_bare_tasks_are_read() {
    let line = fixture!("v1/webhook.jsonl").lines().next().unwrap();
    let body = &serde_json::from_str::<Value>(line).unwrap()["body"];
    assert!(matches!(
        classify(body).unwrap(),
        Event::StatusUpdate { .. }
    ));
    let bare = json!({"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}, "history": [1, 2]});
    match classify(&bare).unwrap() {
        Event::Task { history_len, .. } => assert_eq!(history_len, Some(2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_events_are_errors_not_panics() {
    for (value, expected) in [
        (json!(5), "expected a JSON object"),
        (json!({"foo": 1}), "not an A2A task"),
        (json!({"kind": "nonsense"}), "unknown event kind"),
        (
            json!({"id": "t", "status": "done"}),
            "status is not an object",
        ),
        (
            json!({"id": "t", "status": {"state": 3}}),
            "status.state is not a string",
        ),
        (
            json!({"statusUpdate": {"taskId": "t", "status": {}}}),
            "status has no state",
        ),
    ] {
        let err = classify(&value).unwrap_err();
        assert!(err.contains(expected), "{value}: {err}");
    }
}

#[test]
fn a_timestamp_is_an_instant_with_z_or_an_offset() {
    let at = |raw| parse_timestamp(raw).map(|t| t.to_rfc3339());
    assert!(at("2026-12-02T10:19:39.897699Z").is_some());
    assert!(at("2026-12-02T10:19:39Z").is_some());
    assert!(at("2026-12-02T10:19:39.123456789Z").is_some());
    // An offset names the same instant as its `Z` form: present, exact, usable.
    assert_eq!(
        at("2026-12-04T20:08:19.826771+00:00"),
        at("2026-12-04T20:08:19.826771Z")
    );
    assert_eq!(at("2026-12-02T11:19:39+01:00"), at("2026-12-02T10:19:39Z"));
    // No zone, or not a date at all: no instant, so it counts as missing.
    assert!(at("2026-12-02T10:19:39").is_none());
    assert!(at("2026-12-02T10:19:39.5").is_none());
    assert!(at("yesterday").is_none());
    assert!(at("1733130000").is_none());
}

#[test]
fn only_the_z_spelling_is_utc_z() {
    for ok in [
        "2026-12-02T10:19:39Z",
        "2026-12-02T10:19:39.897Z",
        "2026-12-02T10:19:39.897699Z",
        "2026-12-02T10:19:39.123456789Z",
    ] {
        assert!(is_utc_z(ok), "{ok}");
    }
    for bad in [
        "2026-12-04T20:08:19.826771+00:00",
        "2026-12-02T11:19:39+01:00",
        "2026-12-02 10:19:39Z",
        "2026-12-02t10:19:39z",
        "2026-12-02T10:19:39.Z",
        "2026-12-02T10:19:39",
        "2026-13-02T10:19:39Z",
        "yesterday",
        "",
    ] {
        assert!(!is_utc_z(bad), "{bad}");
    }
}

#[test]
fn states_parse_in_both_spellings() {
    assert_eq!(
        TaskState::parse("TASK_STATE_INPUT_REQUIRED"),
        Some((TaskState::InputRequired, Spelling::V1))
    );
    assert_eq!(
        TaskState::parse("input-required"),
        Some((TaskState::InputRequired, Spelling::V0))
    );
    assert_eq!(
        TaskState::parse("TASK_STATE_UNSPECIFIED"),
        Some((TaskState::Unknown, Spelling::V1))
    );
    assert_eq!(TaskState::parse("done"), None);
}
