//! The rules for the faults reported from the field in 2026 (issue 44): a message to a
//! finished task, a cancel answered and not applied, a resubscription to a live task, and the
//! push findings that are interop advice rather than a failed capability.

use super::*;
use crate::probe::{EndedSend, LiveOutcome, LiveResubscribe};

/// The conformant cycle whose ended task was sent a message, answered `send`; an accepted one
/// re-opened the task (`working` at call 5, in its answer and in the GetTask after it).
fn sent(send: EndedSend) -> Obs {
    let refused = EndedCancel::NotCancelable {
        code: -32002,
        message: "not cancelable".into(),
    };
    let mut obs = ended(conformant(), refused, "TASK_STATE_COMPLETED");
    let after = if let EndedSend::Answered { call } = &send {
        obs = obs.t(
            TaskRole::Lifecycle,
            Source::Response,
            *call,
            "TASK_STATE_WORKING",
            true,
            Some(4),
        );
        "TASK_STATE_WORKING"
    } else {
        "TASK_STATE_COMPLETED"
    };
    let mut obs = obs.get(6, after, 4);
    if let Some(end) = obs.o.after_end.as_mut() {
        end.send = Some(send);
    }
    obs
}

#[test]
fn a_message_to_an_ended_task_must_be_refused_as_unsupported() {
    let unsupported = EndedSend::Unsupported {
        code: -32004,
        message: "Task is in a terminal state".into(),
    };
    let j = sent(unsupported).judge("1.0", &STREAM_PUSH);
    assert_eq!(status(&j, "LC-TERMINAL-SEND").status, FindingStatus::Pass);
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);

    // Refused in another shape: the task stays ended; the error is only reported.
    let other = EndedSend::Refused {
        code: -32602,
        message: "invalid params".into(),
    };
    let j = sent(other).judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-TERMINAL-SEND");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

#[test]
fn a_message_that_reopens_an_ended_task_is_a_terminal_finding() {
    let j = sent(EndedSend::Answered { call: 5 }).judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-TERMINAL-SEND");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Must));
    assert_eq!(f.trigger, Some(DemotionClass::Terminal));
    let stays = status(&j, "LC-TERMINAL-STAYS");
    assert_eq!(stays.status, FindingStatus::Fail);
    assert!(
        stays.message.contains("re-opened the finished task"),
        "{}",
        stays.message
    );
    assert_eq!(triggers(&j), [DemotionClass::Terminal]);
    assert!(!j.verdict.passed);
}

/// The cancel scenario: the task answered at call 10 with `answered`, then GetTask (call 11)
/// showed `after`.
fn canceled(answered: &str, after: &str) -> Obs {
    let mut obs = conformant();
    obs.o.tasks.insert(
        TaskRole::Cancel,
        TaskIds {
            task_id: Some(TASK.into()),
            context_id: Some(CTX.into()),
        },
    );
    obs.t(
        TaskRole::Cancel,
        Source::Response,
        9,
        "TASK_STATE_SUBMITTED",
        true,
        None,
    )
    .t(TaskRole::Cancel, Source::Response, 10, answered, true, None)
    .t(TaskRole::Cancel, Source::Get, 11, after, true, Some(1))
}

#[test]
fn a_cancel_answered_canceled_that_does_not_hold_is_a_terminal_finding() {
    let j = canceled("TASK_STATE_CANCELED", "TASK_STATE_WORKING").judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-TERMINAL-STAYS");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Must));
    assert!(f.message.contains("not applied"), "{}", f.message);
    assert_eq!(triggers(&j), [DemotionClass::Terminal]);
    assert!(!j.verdict.passed);

    // A cancel that held passes; one answered `working` and ignored is LC-CANCEL's, at SHOULD.
    let j = canceled("TASK_STATE_CANCELED", "TASK_STATE_CANCELED").judge("1.0", &STREAM_PUSH);
    assert_eq!(status(&j, "LC-CANCEL").status, FindingStatus::Pass);
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
    let j = canceled("TASK_STATE_WORKING", "TASK_STATE_WORKING").judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-CANCEL");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert_ne!(status(&j, "LC-TERMINAL-STAYS").status, FindingStatus::Fail);
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

/// The lifecycle task's first turn (stream 0): submitted, working, then asking for input.
fn asked_for_input() -> Obs {
    Obs::new().stream(
        0,
        &[
            ("TASK_STATE_SUBMITTED", true),
            ("TASK_STATE_WORKING", true),
            ("TASK_STATE_INPUT_REQUIRED", true),
        ],
    )
}

/// A lifecycle with an input-required turn (stream 0, then the follow-up's stream 2), and a
/// resubscription (stream 1) opened while the task waited for input: its snapshot, then
/// `carried` of the states the follow-up moved the task through (the same events, so the same
/// timestamps), ending by `end`.
fn live(carried: usize, end: StreamEnd, first_is_task: bool) -> Obs {
    let mut obs = asked_for_input()
        .stream(
            2,
            &[("TASK_STATE_WORKING", true), ("TASK_STATE_COMPLETED", true)],
        )
        .get(3, "TASK_STATE_COMPLETED", 4);
    obs.o.follow_ups_sent = 1;
    obs.o.follow_up_calls = vec![(TaskRole::Lifecycle, 2)];
    let snapshot = obs.o.transitions[2].clone();
    let later: Vec<Transition> = obs.o.transitions[3..5].to_vec();
    for t in std::iter::once(snapshot).chain(later.into_iter().take(carried)) {
        obs.o.transitions.push(Transition { call: 1, ..t });
    }
    let frames = carried + 1;
    obs.o.streams.push(StreamRun {
        role: TaskRole::Lifecycle,
        call: 1,
        event_stream: true,
        content_type: Some("text/event-stream".into()),
        frames,
        malformed_frames: 0,
        events_after_terminal: 0,
        end,
        resubscribe: true,
    });
    obs.o.live_resubscribes.push(LiveResubscribe {
        role: TaskRole::Lifecycle,
        state: TaskState::InputRequired,
        outcome: LiveOutcome::Streamed {
            call: 1,
            first_is_task,
        },
    });
    obs
}

#[test]
fn a_live_resubscription_that_carries_the_task_to_its_end_passes() {
    let j = live(2, StreamEnd::Closed, true).judge("1.0", &STREAM_PUSH);
    assert_eq!(
        status(&j, "LC-RESUBSCRIBE-LIVE").status,
        FindingStatus::Pass
    );
    assert_eq!(
        j.capabilities[&Capability::Streaming],
        CapabilityOutcome::Passed
    );
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

#[test]
fn a_live_resubscription_refused_or_not_starting_with_the_task_fails() {
    let mut refused = conformant();
    refused.o.live_resubscribes.push(LiveResubscribe {
        role: TaskRole::Lifecycle,
        state: TaskState::InputRequired,
        outcome: LiveOutcome::Refused {
            code: -32001,
            message: "Task not found".into(),
        },
    });
    let no_task = live(2, StreamEnd::Closed, false);
    let open = live(2, StreamEnd::Idle, true);
    for obs in [refused, no_task, open] {
        let j = obs.judge("1.0", &STREAM_PUSH);
        let f = status(&j, "LC-RESUBSCRIBE-LIVE");
        assert_eq!(
            (f.status, f.level),
            (FindingStatus::Fail, Level::Must),
            "{f:?}"
        );
        assert!(!j.verdict.passed);
        assert!(
            triggers(&j).is_empty(),
            "not a terminal fault, nothing demotes: {:#?}",
            j.verdict.triggers
        );
    }
}

#[test]
fn a_live_resubscription_that_closes_after_the_snapshot_is_judged_by_the_state_it_showed() {
    // Input-required: the spec lets a stream close there (§11.7), so only a SHOULD.
    let j = live(0, StreamEnd::Closed, true).judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-RESUBSCRIBE-LIVE");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
    // Working: the task ended elsewhere, and the stream never carried it.
    let j = live(1, StreamEnd::Closed, true).judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-RESUBSCRIBE-LIVE");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Must));
}

#[test]
fn without_streaming_or_a_live_task_there_is_nothing_to_resubscribe_to() {
    let j = conformant().judge("1.0", &[Capability::PushNotifications]);
    assert_eq!(
        status(&j, "LC-RESUBSCRIBE-LIVE").status,
        FindingStatus::NotExercised
    );
    let j = conformant().judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-RESUBSCRIBE-LIVE");
    assert_eq!(f.status, FindingStatus::NotExercised);
    assert!(f.message.contains("no live task"), "{}", f.message);
}

#[test]
fn a_push_token_elsewhere_or_only_the_end_pushed_is_advice_not_a_failed_capability() {
    let mut obs = conformant();
    if let Some(run) = obs.o.push.as_mut() {
        run.deliveries_without_token = 2;
        run.deliveries_token_elsewhere = 2;
        run.token_header = Some("x-push-token".into());
    }
    let j = obs.judge("1.0", &STREAM_PUSH);
    let f = status(&j, "PUSH-TOKEN");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert!(f.message.contains("x-push-token"), "{}", f.message);
    assert_eq!(status(&j, "CAP-PUSH").status, FindingStatus::Pass);
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);

    let j = Obs::new()
        .stream(0, &V1_GOOD)
        .get(1, "TASK_STATE_COMPLETED", 2)
        .pushed(Ok(()), &["TASK_STATE_COMPLETED"])
        .judge("1.0", &STREAM_PUSH);
    let f = status(&j, "PUSH-EVERY-STATE");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert_eq!(status(&j, "CAP-PUSH").status, FindingStatus::Pass);
    assert_eq!(status(&j, "PUSH-TOKEN").status, FindingStatus::Pass);
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

#[test]
fn every_rule_names_its_source_and_policy_says_so() {
    for rule in Rule::ALL {
        let source = rule.source();
        assert!(
            source.starts_with("A2A v") || source.starts_with("registry policy"),
            "{rule}: {source}"
        );
        // A rule reported at registry policy that is not a capability's own is cardgate's
        // demand beyond the spec: its source must say so.
        if rule.level() == Level::Policy && rule.capability().is_none() {
            assert!(source.starts_with("registry policy"), "{rule}: {source}");
        }
    }
    assert!(Rule::markdown_table().contains("| source |"));
}

#[test]
fn a_get_task_asked_after_the_end_that_still_answers_a_live_state_disagrees() {
    let behind = Obs::new()
        .stream(0, &V1_GOOD)
        .get(1, "TASK_STATE_WORKING", 2)
        .judge("1.0", &[Capability::Streaming]);
    let f = status(&behind, "LC-GET-AGREES");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Must));
    assert!(f.message.contains("asked after"), "{}", f.message);
    // A GetTask answered while the stream was still being read (history polling) is not
    // behind: it was asked before the end arrived.
    let during = Obs::new()
        .get(1, "TASK_STATE_WORKING", 2)
        .stream(0, &V1_GOOD)
        .get(2, "TASK_STATE_COMPLETED", 3)
        .judge("1.0", &[Capability::Streaming]);
    assert_eq!(status(&during, "LC-GET-AGREES").status, FindingStatus::Pass);
}

#[test]
fn a_message_to_an_ended_task_answered_with_a_new_task_blocks_but_does_not_demote() {
    let j = sent(EndedSend::Elsewhere {
        call: 5,
        what: "a new task t-2".into(),
    })
    .judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-TERMINAL-SEND");
    assert_eq!(
        (f.status, f.level, f.trigger),
        (FindingStatus::Fail, Level::Must, None)
    );
    assert_ne!(status(&j, "LC-TERMINAL-STAYS").status, FindingStatus::Fail);
    assert!(triggers(&j).is_empty());
    assert!(!j.verdict.passed);
}

#[test]
fn a_new_turn_may_start_as_submitted_but_no_step_back_without_one() {
    let turn = |follow_up: bool| {
        let mut obs = asked_for_input().stream(
            2,
            &[
                ("TASK_STATE_SUBMITTED", true),
                ("TASK_STATE_WORKING", true),
                ("TASK_STATE_COMPLETED", true),
            ],
        );
        if follow_up {
            obs.o.follow_ups_sent = 1;
            obs.o.follow_up_calls = vec![(TaskRole::Lifecycle, 2)];
        }
        obs.judge("1.0", &[Capability::Streaming])
    };
    // After a follow-up, a turn that starts as a new submission is no step back.
    let j = turn(true);
    assert_eq!(
        status(&j, "LC-FULL-LIFECYCLE").status,
        FindingStatus::Pass,
        "{:#?}",
        status(&j, "LC-FULL-LIFECYCLE")
    );
    // Without one, `submitted` after `working` is.
    let j = turn(false);
    assert_eq!(status(&j, "LC-FULL-LIFECYCLE").status, FindingStatus::Fail);
}
