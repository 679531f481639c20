//! Unit tests of `cardgate_domain::report`.

use super::*;
use crate::gate::GateKind;
use serde_json::json;

fn status(state: &str, ts: bool) -> Value {
    let mut s = json!({"state": state});
    if ts {
        s["timestamp"] = "2026-12-02T10:00:00Z".into();
    }
    s
}

#[test]
fn evidence_that_shows_the_violation_is_accepted() {
    // Each accepted report's reason becomes the demotion's reason: it must name the
    // observation that shows the violation.
    let cases = [
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [status("TASK_STATE_WORKING", true), status("TASK_STATE_COMPLETED", false)]}),
            "observed[1] is the terminal state TASK_STATE_COMPLETED without status.timestamp",
        ),
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [{"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_FAILED"}}}]}),
            "observed[0] is the terminal state TASK_STATE_FAILED without status.timestamp",
        ),
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [{"state": "completed", "timestamp": "2026-12-02T10:00:00"}]}),
            "with a status.timestamp that names no instant (`2026-12-02T10:00:00`)",
        ),
        (
            Trigger::DuplicateTerminal,
            json!({"observed": [
                {"kind": "status-update", "taskId": "t", "status": status("completed", true), "final": true},
                {"kind": "status-update", "taskId": "t", "status": status("completed", true), "final": true}
            ]}),
            "observed[1] (completed) follows the terminal observed[0] (completed)",
        ),
        (
            Trigger::DuplicateTerminal,
            json!({"observed": [status("TASK_STATE_COMPLETED", true), status("TASK_STATE_WORKING", true)]}),
            "observed[1] (TASK_STATE_WORKING) follows the terminal observed[0] (TASK_STATE_COMPLETED)",
        ),
        (
            // The fault a caller's guard sees most: an artifact after the task ended.
            Trigger::DuplicateTerminal,
            json!({"observed": [
                {"statusUpdate": {"taskId": "t", "contextId": "c", "status": status("TASK_STATE_COMPLETED", true)}},
                {"artifactUpdate": {"taskId": "t", "contextId": "c", "artifact": {"artifactId": "a", "parts": [{"text": "late"}]}}}
            ]}),
            "observed[1] (artifact-update) follows the terminal observed[0] (TASK_STATE_COMPLETED) of the same task: an event after the terminal one",
        ),
        (
            Trigger::HistoryNotIncremented,
            json!({"observed": [
                {"kind": "task", "id": "t", "status": status("input-required", true), "history": [1, 2]},
                {"kind": "status-update", "taskId": "t", "status": status("working", true)},
                {"kind": "task", "id": "t", "status": status("input-required", true), "history": [1, 2]}
            ]}),
            "history stayed at 2 → 2",
        ),
        (
            Trigger::PushRegistrationFailed,
            json!({"attempts": [{"http_status": 500}, {"jsonrpc_error": {"code": -32603, "message": "x"}}]}),
            "all 2 registration attempts failed",
        ),
    ];
    for (trigger, evidence, reason) in cases {
        match check(trigger, &evidence) {
            Ok(found) => assert!(found.contains(reason), "{trigger:?}: {found}"),
            Err(e) => panic!("{trigger:?} refused: {e}"),
        }
    }
}

#[test]
fn evidence_that_does_not_show_it_is_refused_with_the_reason() {
    let cases = [
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [status("TASK_STATE_COMPLETED", true)]}),
            "lacks status.timestamp",
        ),
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [status("TASK_STATE_WORKING", false)]}),
            "lacks status.timestamp",
        ),
        (
            // An offset names an instant: the timestamp is there, however it is spelled.
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [{"state": "completed", "timestamp": "2026-12-04T20:08:19.826771+00:00"}]}),
            "lacks status.timestamp",
        ),
        (
            Trigger::DuplicateTerminal,
            json!({"observed": [status("working", true), status("completed", true)]}),
            "no second terminal",
        ),
        (
            Trigger::DuplicateTerminal,
            json!({"observed": [
                {"kind": "status-update", "taskId": "a", "status": status("completed", true)},
                {"kind": "status-update", "taskId": "b", "status": status("completed", true)}
            ]}),
            "no second terminal",
        ),
        (
            // An artifact before the end is no violation.
            Trigger::DuplicateTerminal,
            json!({"observed": [
                {"artifactUpdate": {"taskId": "t", "artifact": {"artifactId": "a", "parts": []}}},
                {"statusUpdate": {"taskId": "t", "status": status("TASK_STATE_COMPLETED", true)}}
            ]}),
            "no second terminal",
        ),
        (
            Trigger::HistoryNotIncremented,
            json!({"observed": [
                {"kind": "task", "id": "t", "status": status("working", true), "history": [1]},
                {"kind": "task", "id": "t", "status": status("completed", true), "history": [1, 2]}
            ]}),
            "history grows",
        ),
        (
            Trigger::HistoryNotIncremented,
            json!({"observed": [{"kind": "task", "id": "t", "status": status("working", true), "history": []}]}),
            "at least two",
        ),
        (
            Trigger::PushRegistrationFailed,
            json!({"attempts": [{"http_status": 500}]}),
            "at least 2",
        ),
        (
            Trigger::PushRegistrationFailed,
            json!({"attempts": [{"http_status": 500}, {"http_status": 200}]}),
            "succeeded",
        ),
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": "completed"}),
            "`observed` array",
        ),
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [{"nonsense": 1}]}),
            "observed[0]",
        ),
        (
            Trigger::TerminalWithoutTimestamp,
            json!({"observed": [{"state": "done"}]}),
            "is not a task state",
        ),
    ];
    for (trigger, evidence, expected) in cases {
        let err = check(trigger, &evidence).unwrap_err();
        assert!(err.contains(expected), "{trigger:?} {evidence}: {err}");
    }
}

/// A subject in `gate`, demoted for `Timestamp` when `gate` is `Demoted`.
fn subject_in(gate: GateKind) -> SubjectState {
    let appeared = EventBody::VersionAppeared {
        snapshot_id: crate::ids::SnapshotId::new(),
        advertised: Vec::new(),
    };
    let mut s = SubjectState::start(&appeared, Timestamp::default(), 1).unwrap();
    s.gate = match gate {
        GateKind::CardTrusted => GateState::CardTrusted,
        GateKind::LifecycleTrusted => GateState::LifecycleTrusted,
        GateKind::Demoted => GateState::Demoted {
            at: Timestamp::default(),
            seq: Some(2),
            classes: [DemotionClass::Timestamp].into(),
        },
    };
    s
}

fn report_of(trigger: Trigger) -> Report {
    Report {
        id: ReportId::new(),
        callee_id: CalleeId::new(),
        protocol_version: ProtocolVersion::new(1, 0),
        trigger,
        class: trigger.class(),
        evidence: Value::Null,
        finding: "shown".into(),
        reporter: "key:caller".into(),
        outcome: ReportOutcome::Recorded,
        created_at: Timestamp::default(),
    }
}

#[test]
fn the_report_policy_demotes_only_what_it_may() {
    use GateKind::{CardTrusted, Demoted, LifecycleTrusted};
    use Trigger::{DuplicateTerminal, TerminalWithoutTimestamp};
    let cases = [
        (
            LifecycleTrusted,
            TerminalWithoutTimestamp,
            ReportOutcome::Demoted,
        ),
        (
            CardTrusted,
            TerminalWithoutTimestamp,
            ReportOutcome::Recorded,
        ),
        // Already demoted for this class: recorded; for a new class: demoted again.
        (Demoted, TerminalWithoutTimestamp, ReportOutcome::Recorded),
        (Demoted, DuplicateTerminal, ReportOutcome::Demoted),
    ];
    for (gate, trigger, expected) in cases {
        let report = report_of(trigger);
        let (events, outcome) = consequences(&report, &subject_in(gate));
        assert_eq!(outcome, expected, "{gate:?} {trigger:?}");
        let kinds: Vec<_> = events.iter().map(EventBody::kind).collect();
        match expected {
            ReportOutcome::Recorded => assert_eq!(kinds, ["report-received"]),
            ReportOutcome::Demoted => {
                assert_eq!(kinds, ["report-received", "demoted"]);
                let EventBody::Demoted {
                    class, report_id, ..
                } = &events[1]
                else {
                    unreachable!()
                };
                assert_eq!((*class, *report_id), (trigger.class(), Some(report.id)));
            }
        }
    }
}

#[test]
fn stored_names_read_back() {
    for t in [
        Trigger::TerminalWithoutTimestamp,
        Trigger::HistoryNotIncremented,
        Trigger::PushRegistrationFailed,
        Trigger::DuplicateTerminal,
    ] {
        assert_eq!(Trigger::parse(t.as_str()), Some(t));
        assert_eq!(DemotionClass::parse(t.class().as_str()), Some(t.class()));
    }
    for o in [ReportOutcome::Demoted, ReportOutcome::Recorded] {
        assert_eq!(ReportOutcome::parse(o.as_str()), Some(o));
    }
    assert_eq!(Trigger::parse("demoted"), None);
}
