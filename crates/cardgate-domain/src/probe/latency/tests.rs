//! Percentiles from offsets built by hand.

use chrono::{Duration, TimeZone, Utc};

use super::*;
use crate::probe::{StreamEnd, StreamRun, TaskState};

/// A transition `at_ms` after an origin, `offset` ms after its call started.
fn t(
    role: TaskRole,
    source: Source,
    call: u32,
    state: &str,
    at_ms: i64,
    offset: Option<u64>,
) -> Transition {
    let (state, spelling) = TaskState::parse(state).unwrap();
    Transition {
        role,
        source,
        call,
        state,
        raw_state: String::new(),
        spelling,
        timestamp: None,
        parsed_timestamp: None,
        history_len: None,
        task_id: None,
        context_id: None,
        final_flag: None,
        observed_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap() + Duration::milliseconds(at_ms),
        offset_ms: offset,
    }
}

fn stream(call: u32, resubscribe: bool) -> StreamRun {
    StreamRun {
        role: TaskRole::Lifecycle,
        call,
        event_stream: true,
        content_type: None,
        frames: 3,
        malformed_frames: 0,
        events_after_terminal: 0,
        end: StreamEnd::Closed,
        resubscribe,
    }
}

#[test]
fn nearest_rank_percentiles() {
    assert_eq!(Percentiles::of(&[]), None);
    assert_eq!(
        Percentiles::of(&[7]),
        Some(Percentiles {
            p50_ms: 7,
            p95_ms: 7
        })
    );
    let hundred: Vec<u64> = (1..=100).rev().collect();
    assert_eq!(
        Percentiles::of(&hundred),
        Some(Percentiles {
            p50_ms: 50,
            p95_ms: 95
        })
    );
    // Of four: the 2nd smallest is the median, the largest the 95th percentile.
    assert_eq!(
        Percentiles::of(&[40, 10, 30, 20]),
        Some(Percentiles {
            p50_ms: 20,
            p95_ms: 40
        })
    );
}

#[test]
fn each_operation_is_measured_from_the_offsets_it_names() {
    use Source::{Get, Response, Stream};
    use TaskRole::Lifecycle;
    const PUSHED: Source = Source::Push;
    const PUSH: TaskRole = TaskRole::Push;
    let mut obs = Observations {
        transitions: vec![
            // Turn 1, a stream opened at 0: first event 12 ms in, input-required at 40.
            t(Lifecycle, Stream, 0, "submitted", 12, Some(12)),
            t(Lifecycle, Stream, 0, "input-required", 40, Some(40)),
            // A GetTask between turns: no operation of its own.
            t(Lifecycle, Get, 1, "input-required", 60, Some(5)),
            // Turn 2, a stream opened at 100: first event at 130, completed at 190.
            t(Lifecycle, Stream, 2, "working", 130, Some(30)),
            t(Lifecycle, Stream, 2, "completed", 190, Some(90)),
            // A resubscription's first event is not a stream's first answer.
            t(Lifecycle, Stream, 3, "completed", 300, Some(2)),
            // The push task: a send opened at 400 and answered at 425; GetTask saw it completed
            // at 480, its terminal delivery arrived at 530.
            t(PUSH, Response, 4, "submitted", 425, Some(25)),
            t(PUSH, Get, 5, "completed", 480, Some(4)),
            t(PUSH, PUSHED, 1001, "working", 450, None),
            t(PUSH, PUSHED, 1002, "completed", 530, None),
        ],
        streams: vec![stream(0, false), stream(2, false), stream(3, true)],
        ..Observations::default()
    };
    let samples = Samples::of(&obs);
    assert_eq!(samples.send, vec![25]);
    assert_eq!(samples.first_event, vec![12, 30]);
    assert_eq!(
        samples.terminal,
        vec![90],
        "from turn 2's start at 100 to 190"
    );
    assert_eq!(
        samples.push,
        vec![50],
        "from 480, where GetTask saw the end, to 530"
    );

    // A trial beside it adds its own; a push seen nowhere else counts from the send.
    let trial = Observations {
        transitions: vec![
            t(Lifecycle, Response, 0, "submitted", 8, Some(8)),
            t(Lifecycle, Get, 1, "completed", 70, Some(3)),
            t(PUSH, Response, 2, "working", 200, Some(20)),
            t(PUSH, PUSHED, 1001, "completed", 260, None),
        ],
        ..Observations::default()
    };
    obs.trials.push(trial);
    let samples = Samples::of(&obs);
    assert_eq!(samples.send, vec![25, 8, 20]);
    assert_eq!(
        samples.terminal,
        vec![90, 70],
        "from the send at 0 to the GetTask at 70"
    );
    assert_eq!(samples.push, vec![50, 80], "from the send's start at 180");
    let latency = Latency::of(&samples);
    assert_eq!(
        latency.send,
        Some(Percentiles {
            p50_ms: 20,
            p95_ms: 25
        })
    );
    assert_eq!(
        latency.get(Op::FirstEvent),
        Some(Percentiles {
            p50_ms: 12,
            p95_ms: 30
        })
    );
}

#[test]
fn runs_without_offsets_measure_nothing() {
    let obs = Observations {
        transitions: vec![
            t(
                TaskRole::Lifecycle,
                Source::Response,
                0,
                "submitted",
                5,
                None,
            ),
            t(TaskRole::Lifecycle, Source::Get, 1, "completed", 9, None),
        ],
        ..Observations::default()
    };
    assert_eq!(Latency::of(&Samples::of(&obs)), Latency::default());
}
