//! Unit tests of `cardgate::http::console::diagram`.

use super::*;
use crate::domain::probe::{Level, Rule, Source, Spelling, TaskState};

fn at(ms: i64) -> Timestamp {
    chrono::DateTime::from_timestamp_millis(1_780_000_000_000 + ms).unwrap()
}

fn seen(
    source: Source,
    call: u32,
    state: TaskState,
    ts: bool,
    history: Option<usize>,
    ms: i64,
) -> Transition {
    Transition {
        role: TaskRole::Lifecycle,
        source,
        call,
        state,
        raw_state: state.as_str().to_string(),
        spelling: Spelling::V1,
        timestamp: ts.then(|| crate::domain::time::format(at(ms))),
        parsed_timestamp: ts.then(|| at(ms)),
        history_len: history,
        task_id: Some("t".into()),
        context_id: None,
        final_flag: None,
        observed_at: at(ms),
        offset_ms: None,
    }
}

fn failed(code: Rule, class: DemotionClass) -> Finding {
    Finding {
        code,
        level: Level::Must,
        status: FindingStatus::Fail,
        message: "m".into(),
        trigger: Some(class),
    }
}

#[test]
fn a_terminal_state_without_a_timestamp_is_marked_only_when_its_rule_failed() {
    let run = [
        seen(Source::Stream, 1, TaskState::Working, true, None, 0),
        seen(Source::Stream, 1, TaskState::Completed, false, None, 10),
        seen(Source::Get, 2, TaskState::Completed, true, Some(2), 20),
    ];
    assert!(marks(&run, &[]).iter().all(Vec::is_empty));
    let marked = marks(
        &run,
        &[failed(Rule::TerminalNoTimestamp, DemotionClass::Timestamp)],
    );
    assert!(marked[0].is_empty() && marked[2].is_empty());
    assert!(
        marked[1][0].contains("without a valid timestamp"),
        "{marked:?}"
    );
}

#[test]
fn history_and_terminal_marks_stay_within_their_channel() {
    let run = [
        seen(Source::Get, 1, TaskState::Working, true, Some(2), 0),
        seen(Source::Get, 2, TaskState::InputRequired, true, Some(2), 10),
        seen(Source::Get, 3, TaskState::Completed, true, Some(3), 20),
        seen(Source::Stream, 4, TaskState::Working, true, None, 30),
        seen(Source::Get, 5, TaskState::Working, true, Some(4), 40),
    ];
    let findings = [
        failed(Rule::History, DemotionClass::History),
        failed(Rule::NothingAfterTerminal, DemotionClass::Terminal),
    ];
    let marked = marks(&run, &findings);
    assert!(marked[1][0].contains("history did not grow"), "{marked:?}");
    assert!(marked[2].is_empty() && marked[3].is_empty(), "{marked:?}");
    assert!(
        marked[4][0].contains("after a terminal state"),
        "{marked:?}"
    );
}

#[test]
fn one_lane_per_channel_and_one_arrow_per_transition() {
    let run = [
        seen(Source::Response, 1, TaskState::Submitted, true, None, 0),
        seen(Source::Stream, 2, TaskState::Working, true, None, 5),
        seen(Source::Stream, 2, TaskState::Completed, false, None, 9),
        seen(Source::Get, 3, TaskState::Completed, true, Some(1), 12),
        seen(Source::Push, 4, TaskState::Completed, true, None, 15),
    ];
    let svg = render(
        &run,
        &[failed(Rule::TerminalNoTimestamp, DemotionClass::Timestamp)],
    )
    .into_string();
    assert_eq!(svg.matches("<g class=\"lane\"").count(), 4, "{svg}");
    assert_eq!(svg.matches("class=\"arrow").count(), 5);
    assert_eq!(svg.matches("class=\"arrow violation\"").count(), 1);
    assert!(svg.contains("no timestamp") && svg.contains("stream (call 2)"));
}
