//! The rules against observation shapes real agents produce, and the broken ones the fake
//! agent can be switched into.

use chrono::{Duration, TimeZone, Utc};

use super::*;
use crate::probe::{AfterEnd, EndedCancel, EndedResubscribe, StreamRun, TaskIds};

const TASK: &str = "task-1";
const CTX: &str = "ctx-1";

/// Builds observations call by call.
struct Obs {
    o: Observations,
    clock: i64,
}

impl Obs {
    fn new() -> Self {
        let mut o = Observations::default();
        o.tasks.insert(
            TaskRole::Lifecycle,
            TaskIds {
                task_id: Some(TASK.into()),
                context_id: Some(CTX.into()),
            },
        );
        Self { o, clock: 0 }
    }

    /// Adds a transition; `ts` says whether it carries a timestamp (at the current clock).
    fn t(
        mut self,
        role: TaskRole,
        source: Source,
        call: u32,
        state: &str,
        ts: bool,
        history: Option<usize>,
    ) -> Self {
        self.clock += 1;
        let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap() + Duration::milliseconds(self.clock);
        let (parsed, spelling) = TaskState::parse(state).unwrap();
        let raw_ts = ts.then(|| at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string());
        self.o.transitions.push(Transition {
            role,
            source,
            call,
            state: parsed,
            raw_state: state.into(),
            spelling,
            parsed_timestamp: raw_ts
                .as_deref()
                .and_then(super::super::events::parse_timestamp),
            timestamp: raw_ts,
            history_len: history,
            task_id: Some(TASK.into()),
            context_id: Some(CTX.into()),
            final_flag: None,
            observed_at: at,
            offset_ms: None,
        });
        self
    }

    fn stream(self, call: u32, states: &[(&str, bool)]) -> Self {
        let mut s = self;
        for (state, ts) in states {
            s = s.t(TaskRole::Lifecycle, Source::Stream, call, state, *ts, None);
        }
        s.o.streams.push(StreamRun {
            role: TaskRole::Lifecycle,
            call,
            event_stream: true,
            content_type: Some("text/event-stream".into()),
            frames: states.len() + 1,
            malformed_frames: 0,
            events_after_terminal: 0,
            end: StreamEnd::Closed,
            resubscribe: false,
        });
        s
    }

    fn get(self, call: u32, state: &str, history: usize) -> Self {
        self.t(
            TaskRole::Lifecycle,
            Source::Get,
            call,
            state,
            true,
            Some(history),
        )
    }

    fn pushed(mut self, registration: Result<(), &str>, states: &[&str]) -> Self {
        self.o.tasks.insert(
            TaskRole::Push,
            TaskIds {
                task_id: Some(TASK.into()),
                context_id: Some(CTX.into()),
            },
        );
        let mut s = self;
        for (i, state) in states.iter().enumerate() {
            s = s.t(
                TaskRole::Push,
                Source::Push,
                100 + i as u32,
                state,
                true,
                None,
            );
        }
        s.o.push = Some(PushRun {
            skipped: None,
            attempts: 3,
            registration_error: registration.err().map(str::to_string),
            registration_skipped: None,
            deliveries: states.len(),
            deliveries_without_token: 0,
            deliveries_token_elsewhere: 0,
            token_header: None,
            malformed_deliveries: 0,
            waited_ms: 500,
            wait_cut_short: false,
        });
        s
    }

    fn judge(&self, version: &str, caps: &[Capability]) -> Judgement {
        evaluate(
            &self.o,
            ProtocolVersion::parse_exact(version).unwrap(),
            &caps.iter().copied().collect(),
        )
    }
}

const V1_GOOD: [(&str, bool); 3] = [
    ("TASK_STATE_SUBMITTED", true),
    ("TASK_STATE_WORKING", true),
    ("TASK_STATE_COMPLETED", true),
];

fn conformant() -> Obs {
    Obs::new()
        .stream(0, &V1_GOOD)
        .get(1, "TASK_STATE_COMPLETED", 2)
        .pushed(Ok(()), &["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"])
}

fn status<'a>(j: &'a Judgement, code: &str) -> &'a Finding {
    j.findings
        .iter()
        .find(|f| f.code.code() == code)
        .unwrap_or_else(|| panic!("no {code}"))
}

fn triggers(j: &Judgement) -> Vec<DemotionClass> {
    j.verdict.triggers.iter().map(|(c, _)| *c).collect()
}

const STREAM_PUSH: [Capability; 2] = [Capability::Streaming, Capability::PushNotifications];

#[test]
fn an_agent_that_opens_at_working_has_the_full_lifecycle_and_one_seen_only_ended_does_not() {
    // The spec lets an agent skip `submitted`: seen alive, then ended, is the whole lifecycle.
    let opens_working = Obs::new()
        .stream(
            0,
            &[("TASK_STATE_WORKING", true), ("TASK_STATE_COMPLETED", true)],
        )
        .get(1, "TASK_STATE_COMPLETED", 2)
        .pushed(Ok(()), &["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]);
    let j = opens_working.judge("1.0", &STREAM_PUSH);
    assert_eq!(
        status(&j, "LC-FULL-LIFECYCLE").status,
        FindingStatus::Pass,
        "{:#?}",
        j.findings
    );
    assert!(j.verdict.passed, "{:#?}", j.verdict);

    // Seen only ended: nothing shows the task was ever live.
    let only_ended =
        Obs::new()
            .stream(0, &[("TASK_STATE_COMPLETED", true)])
            .get(1, "TASK_STATE_COMPLETED", 2);
    let j = only_ended.judge("1.0", &[]);
    let f = status(&j, "LC-FULL-LIFECYCLE");
    assert_eq!(f.status, FindingStatus::Fail);
    assert!(
        f.message.contains("never seen in a state before its end"),
        "{}",
        f.message
    );
    assert!(!j.verdict.passed);
}

#[test]
fn a_conformant_agent_passes_everything() {
    let j = conformant().judge("1.0", &STREAM_PUSH);
    assert!(j.verdict.passed, "{:#?}", j.verdict);
    assert_eq!(j.verdict.lifecycle, Ok(()));
    assert!(j.verdict.untimestamped.is_empty());
    assert_eq!(
        j.capabilities[&Capability::Streaming],
        CapabilityOutcome::Passed
    );
    assert_eq!(
        j.capabilities[&Capability::PushNotifications],
        CapabilityOutcome::Passed
    );
    assert!(
        !j.capabilities
            .contains_key(&Capability::StateTransitionHistory),
        "absent from v1.0"
    );
    assert!(triggers(&j).is_empty());
    assert!(
        j.findings.iter().all(|f| f.status != FindingStatus::Fail),
        "{:#?}",
        j.findings
    );
}

#[test]
fn a_submitted_state_without_timestamp_blocks_promotion_but_triggers_nothing() {
    // The official Python SDK's shape.
    let obs = Obs::new()
        .stream(
            0,
            &[
                ("TASK_STATE_SUBMITTED", false),
                ("TASK_STATE_WORKING", true),
                ("TASK_STATE_COMPLETED", true),
            ],
        )
        .get(1, "TASK_STATE_COMPLETED", 2);
    let j = obs.judge("1.0", &[Capability::Streaming]);
    assert!(!j.verdict.passed);
    assert_eq!(status(&j, "LC-TIMESTAMPS").status, FindingStatus::Fail);
    assert_eq!(
        status(&j, "LC-TERMINAL-NO-TIMESTAMP").status,
        FindingStatus::Pass
    );
    assert_eq!(
        j.verdict.lifecycle,
        Ok(()),
        "the full lifecycle was observed"
    );
    assert_eq!(j.verdict.untimestamped, ["submitted (stream 0)"]);
    assert!(triggers(&j).is_empty());
}

#[test]
fn each_broken_behaviour_fails_its_rule_and_fires_its_trigger() {
    type Case = (
        &'static str,
        Obs,
        &'static str,
        &'static [Capability],
        &'static str,
        Option<DemotionClass>,
    );
    let cases: Vec<Case> = vec![
        (
            "terminal without timestamp",
            Obs::new().stream(
                0,
                &[
                    ("TASK_STATE_SUBMITTED", true),
                    ("TASK_STATE_WORKING", true),
                    ("TASK_STATE_COMPLETED", false),
                ],
            ),
            "1.0",
            &[Capability::Streaming],
            "LC-TERMINAL-NO-TIMESTAMP",
            Some(DemotionClass::Timestamp),
        ),
        (
            "two terminal events",
            Obs::new().stream(
                0,
                &[
                    ("TASK_STATE_SUBMITTED", true),
                    ("TASK_STATE_WORKING", true),
                    ("TASK_STATE_COMPLETED", true),
                    ("TASK_STATE_COMPLETED", true),
                ],
            ),
            "1.0",
            &[Capability::Streaming],
            "LC-SINGLE-TERMINAL",
            Some(DemotionClass::Terminal),
        ),
        (
            "a state after the terminal one",
            Obs::new().stream(
                0,
                &[
                    ("TASK_STATE_SUBMITTED", true),
                    ("TASK_STATE_WORKING", true),
                    ("TASK_STATE_COMPLETED", true),
                    ("TASK_STATE_WORKING", true),
                ],
            ),
            "1.0",
            &[Capability::Streaming],
            "LC-NOTHING-AFTER-TERMINAL",
            Some(DemotionClass::Terminal),
        ),
        (
            "history not growing across an input-required loop",
            Obs::new()
                .t(
                    TaskRole::Lifecycle,
                    Source::Response,
                    0,
                    "submitted",
                    true,
                    Some(1),
                )
                .get(1, "working", 1)
                .t(
                    TaskRole::Lifecycle,
                    Source::Response,
                    2,
                    "input-required",
                    true,
                    Some(2),
                )
                .get(3, "input-required", 2)
                .t(
                    TaskRole::Lifecycle,
                    Source::Response,
                    4,
                    "working",
                    true,
                    None,
                )
                .t(
                    TaskRole::Lifecycle,
                    Source::Response,
                    4,
                    "input-required",
                    true,
                    None,
                )
                .get(5, "input-required", 2)
                .t(
                    TaskRole::Lifecycle,
                    Source::Response,
                    6,
                    "completed",
                    true,
                    None,
                )
                .get(7, "completed", 4),
            "0.3",
            &[Capability::StateTransitionHistory],
            "CAP-HISTORY",
            Some(DemotionClass::History),
        ),
        (
            "push registration failing after the retry budget",
            conformant().pushed(Err("HTTP 500"), &[]),
            "1.0",
            &STREAM_PUSH,
            "CAP-PUSH",
            Some(DemotionClass::Push),
        ),
        (
            "timestamps going backwards",
            {
                let mut o = Obs::new().stream(0, &V1_GOOD);
                let ts = o.o.transitions[0].parsed_timestamp;
                o.o.transitions[2].parsed_timestamp = ts.map(|t| t - Duration::seconds(5));
                o
            },
            "1.0",
            &[],
            "LC-TIMESTAMP-ORDER",
            None,
        ),
        (
            "GetTask disagreeing with the stream",
            Obs::new()
                .stream(0, &V1_GOOD)
                .get(1, "TASK_STATE_FAILED", 2),
            "1.0",
            &[],
            "LC-GET-AGREES",
            None,
        ),
        (
            "a contextId that changes",
            {
                let mut o = Obs::new().stream(0, &V1_GOOD);
                o.o.transitions[2].context_id = Some("other".into());
                o
            },
            "1.0",
            &[],
            "LC-IDS-CONSISTENT",
            None,
        ),
    ];
    for (name, obs, version, caps, code, trigger) in cases {
        let j = obs.judge(version, caps);
        let f = status(&j, code);
        assert_eq!(f.status, FindingStatus::Fail, "{name}: {f:?}");
        assert!(!j.verdict.passed, "{name}");
        assert_eq!(
            triggers(&j),
            trigger.into_iter().collect::<Vec<_>>(),
            "{name}: {:?}",
            j.verdict.triggers
        );
    }
}

#[test]
fn streaming_advertised_but_answered_with_plain_json_fails_streaming() {
    let mut obs = Obs::new().t(
        TaskRole::Lifecycle,
        Source::Response,
        0,
        "TASK_STATE_COMPLETED",
        true,
        Some(2),
    );
    obs.o.streams.push(StreamRun {
        role: TaskRole::Lifecycle,
        call: 0,
        event_stream: false,
        content_type: Some("application/json".into()),
        frames: 0,
        malformed_frames: 0,
        events_after_terminal: 0,
        end: StreamEnd::NotAStream,
        resubscribe: false,
    });
    let j = obs.judge("1.0", &[Capability::Streaming]);
    match &j.capabilities[&Capability::Streaming] {
        CapabilityOutcome::Failed { reason } => {
            assert!(reason.contains("application/json"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(triggers(&j).is_empty(), "streaming is not a demotion class");
}

#[test]
fn a_stream_that_never_finishes_is_an_incomplete_lifecycle() {
    let mut obs = Obs::new().stream(
        0,
        &[("TASK_STATE_SUBMITTED", true), ("TASK_STATE_WORKING", true)],
    );
    obs.o.streams[0].end = StreamEnd::Deadline;
    let j = obs.judge("1.0", &[Capability::Streaming]);
    assert_eq!(status(&j, "LC-FULL-LIFECYCLE").status, FindingStatus::Fail);
    assert!(j.verdict.lifecycle.is_err());
    assert!(matches!(
        j.capabilities[&Capability::Streaming],
        CapabilityOutcome::Failed { .. }
    ));
}

#[test]
fn a_stream_left_open_after_the_terminal_state_fails_streaming() {
    let mut obs = Obs::new().stream(0, &V1_GOOD);
    obs.o.streams[0].end = StreamEnd::Idle;
    let j = obs.judge("1.0", &[Capability::Streaming]);
    match &j.capabilities[&Capability::Streaming] {
        CapabilityOutcome::Failed { reason } => {
            assert!(reason.contains("did not close"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_frames_fail_well_formedness_and_streaming() {
    let mut obs = Obs::new().stream(0, &V1_GOOD);
    obs.o.streams[0].malformed_frames = 2;
    let j = obs.judge("1.0", &[Capability::Streaming]);
    assert_eq!(status(&j, "LC-WELL-FORMED").status, FindingStatus::Fail);
    assert!(matches!(
        j.capabilities[&Capability::Streaming],
        CapabilityOutcome::Failed { .. }
    ));
}

#[test]
fn states_the_probe_could_not_reach_are_not_exercised() {
    let j = conformant().judge("1.0", &STREAM_PUSH);
    assert_eq!(
        status(&j, "LC-INPUT-REQUIRED").status,
        FindingStatus::NotExercised
    );
    assert_eq!(status(&j, "LC-CANCEL").status, FindingStatus::NotExercised);
    assert!(j.verdict.passed, "not-exercised is not a fail");

    // A message instead of a task: nothing to test, no promotion, no trigger.
    let mut message = Obs::new();
    message.o.tasks.clear();
    message.o.message_only.push(TaskRole::Lifecycle);
    let j = message.judge("1.0", &[]);
    assert_eq!(
        status(&j, "LC-FULL-LIFECYCLE").status,
        FindingStatus::NotExercised
    );
    assert!(!j.verdict.passed);
    assert!(triggers(&j).is_empty());

    // An advertised capability that could not be exercised blocks nothing (docs/trust-model.md,
    // rule 4): a push task that never finished has no terminal state to deliver.
    let mut unexercised = conformant();
    unexercised.o.push.as_mut().unwrap().deliveries = 1;
    unexercised
        .o
        .transitions
        .retain(|t| !(t.role == TaskRole::Push && t.state.is_terminal()));
    let j = unexercised.judge("1.0", &STREAM_PUSH);
    match &j.capabilities[&Capability::PushNotifications] {
        CapabilityOutcome::NotExercised { reason } => {
            assert!(
                reason.contains("never reached a terminal state"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);

    // No public URL: the push probe is skipped, which blocks nothing either.
    let mut skipped = conformant();
    skipped.o.transitions.retain(|t| t.role != TaskRole::Push);
    skipped.o.push = Some(PushRun {
        skipped: Some("CARDGATE_PUBLIC_URL is not set".into()),
        ..skipped.o.push.clone().unwrap()
    });
    let j = skipped.judge("1.0", &STREAM_PUSH);
    assert!(matches!(
        j.capabilities[&Capability::PushNotifications],
        CapabilityOutcome::NotExercised { .. }
    ));
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

#[test]
fn a_push_wait_cardgate_cut_short_or_with_nothing_delivered_is_not_judged() {
    let without_terminal = || {
        let mut obs = conformant();
        obs.o
            .transitions
            .retain(|t| !(t.source == Source::Push && t.state.is_terminal()));
        obs.t(
            TaskRole::Push,
            Source::Get,
            9,
            "TASK_STATE_COMPLETED",
            true,
            Some(2),
        )
    };
    let outcome = |obs: &Obs| {
        obs.judge("1.0", &STREAM_PUSH).capabilities[&Capability::PushNotifications].clone()
    };

    // The cycle's deadline ended the wait (a busy machine, a slow path): not the agent's fault.
    let mut cut = without_terminal();
    cut.o.push.as_mut().unwrap().wait_cut_short = true;
    match outcome(&cut) {
        CapabilityOutcome::NotExercised { reason } => {
            assert!(reason.contains("deadline"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(cut.judge("1.0", &STREAM_PUSH).verdict.passed);

    // Nothing at all arrived in the whole budget: the webhook may be unreachable.
    let mut silent = without_terminal();
    silent.o.transitions.retain(|t| t.source != Source::Push);
    silent.o.push.as_mut().unwrap().deliveries = 0;
    match outcome(&silent) {
        CapabilityOutcome::NotExercised { reason } => {
            assert!(reason.contains("nothing reached"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_finished_push_task_whose_terminal_state_was_never_delivered_fails_push() {
    let mut obs = conformant();
    obs.o
        .transitions
        .retain(|t| !(t.source == Source::Push && t.state.is_terminal()));
    obs = obs.t(
        TaskRole::Push,
        Source::Get,
        9,
        "TASK_STATE_COMPLETED",
        true,
        Some(2),
    );
    let j = obs.judge("1.0", &STREAM_PUSH);
    match &j.capabilities[&Capability::PushNotifications] {
        CapabilityOutcome::Failed { reason } => {
            assert!(reason.contains("was not delivered"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!j.verdict.passed);
    assert!(
        triggers(&j).is_empty(),
        "only a failed registration demotes"
    );
}

/// Restamps every transition as the agent would have: by the state's place in the task's own
/// lifecycle (submitted, working, terminal), whatever order the channels delivered them in.
fn stamped_by_agent(mut obs: Obs) -> Obs {
    let base = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    for t in &mut obs.o.transitions {
        let at = base + Duration::milliseconds(i64::from(rank(t.state)));
        t.timestamp = Some(at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
        t.parsed_timestamp = Some(at);
    }
    obs
}

/// A reverse proxy that buffers the stream: every GetTask answer arrives before the stream's
/// events, so in arrival order the stream's `submitted` and `working` come after `completed`.
fn lagging_stream() -> Obs {
    stamped_by_agent(
        Obs::new()
            .get(1, "TASK_STATE_COMPLETED", 2)
            .stream(0, &V1_GOOD)
            .get(2, "TASK_STATE_COMPLETED", 2)
            .pushed(Ok(()), &["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]),
    )
}

#[test]
fn a_lagging_stream_fails_no_ordering_rule() {
    let j = lagging_stream().judge("1.0", &STREAM_PUSH);
    for code in [
        "LC-FULL-LIFECYCLE",
        "LC-TIMESTAMP-ORDER",
        "LC-NOTHING-AFTER-TERMINAL",
        "LC-SINGLE-TERMINAL",
        "LC-GET-AGREES",
    ] {
        assert_eq!(status(&j, code).status, FindingStatus::Pass, "{code}");
    }
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
    assert!(triggers(&j).is_empty());
}

#[test]
fn a_lagging_v03_stream_with_history_polling_is_not_a_terminal_violation() {
    // The v0.3 shape of the reported defect: GetTask polled while the stream is open answers
    // `completed` before the buffered stream delivers `working`.
    let obs = stamped_by_agent(
        Obs::new()
            .get(1, "completed", 3)
            .stream(0, &[("submitted", true), ("working", true)])
            .get(2, "completed", 3)
            .stream(0, &[("completed", true)])
            .get(3, "completed", 3),
    );
    let j = obs.judge(
        "0.3",
        &[Capability::Streaming, Capability::StateTransitionHistory],
    );
    assert_eq!(status(&j, "LC-FULL-LIFECYCLE").status, FindingStatus::Pass);
    assert_eq!(
        status(&j, "LC-NOTHING-AFTER-TERMINAL").status,
        FindingStatus::Pass
    );
    assert_eq!(
        status(&j, "CAP-HISTORY").status,
        FindingStatus::NotExercised,
        "every GetTask answer was `completed`: no state change to straddle"
    );
    assert!(triggers(&j).is_empty(), "{:?}", j.verdict.triggers);
}

#[test]
fn a_lagging_stream_does_not_stall_history_between_gets() {
    // Gets at `working` (h=1) and `input-required` (h=2), with the lagging stream's events in
    // between in arrival order: compared by the gets alone, history grew.
    let obs = Obs::new()
        .get(1, "working", 1)
        .stream(0, &[("submitted", true), ("working", true)])
        .get(2, "input-required", 2)
        .stream(0, &[("input-required", true)]);
    let j = obs.judge("0.3", &[Capability::StateTransitionHistory]);
    assert_eq!(status(&j, "CAP-HISTORY").status, FindingStatus::Pass);
}

#[test]
fn the_agents_own_timestamps_order_observations_across_channels() {
    // GetTask says `working`, stamped by the agent after the `completed` its stream reported:
    // the agent itself says a live state followed the terminal one.
    let mut obs = Obs::new()
        .stream(0, &V1_GOOD)
        .get(1, "TASK_STATE_WORKING", 1);
    let completed = obs.o.transitions[2].parsed_timestamp.unwrap();
    let late = completed + Duration::seconds(1);
    obs.o.transitions[3].parsed_timestamp = Some(late);
    obs.o.transitions[3].timestamp = Some(late.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
    let j = obs.judge("1.0", &[Capability::Streaming]);
    let f = status(&j, "LC-NOTHING-AFTER-TERMINAL");
    assert_eq!(f.status, FindingStatus::Fail);
    assert!(f.message.contains("stamped"), "{}", f.message);
    assert_eq!(triggers(&j), [DemotionClass::Terminal]);

    // The same answers stamped before the terminal state are only a lagging channel.
    let mut obs = Obs::new()
        .stream(0, &V1_GOOD)
        .get(1, "TASK_STATE_WORKING", 1);
    obs.o.transitions[3].parsed_timestamp = obs.o.transitions[1].parsed_timestamp;
    obs.o.transitions[3].timestamp = obs.o.transitions[1].timestamp.clone();
    let j = obs.judge("1.0", &[Capability::Streaming]);
    assert_eq!(
        status(&j, "LC-NOTHING-AFTER-TERMINAL").status,
        FindingStatus::Pass
    );
}

#[test]
fn a_follow_up_resumes_the_task_whichever_channel_reports_it() {
    // input-required seen on the stream; the follow-up (call 2) is answered on a new stream
    // whose events lag behind a GetTask that already says completed.
    let mut obs = stamped_by_agent(
        Obs::new()
            .stream(
                0,
                &[
                    ("submitted", true),
                    ("working", true),
                    ("input-required", true),
                ],
            )
            .get(1, "input-required", 2)
            .get(3, "completed", 4)
            .stream(2, &[("working", true), ("completed", true)]),
    );
    obs.o.follow_up_calls.push((TaskRole::Lifecycle, 2));
    obs.o.follow_ups_sent = 1;
    let j = obs.judge(
        "0.3",
        &[Capability::Streaming, Capability::StateTransitionHistory],
    );
    assert_eq!(status(&j, "LC-INPUT-REQUIRED").status, FindingStatus::Pass);
    assert_eq!(status(&j, "CAP-HISTORY").status, FindingStatus::Pass);
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

#[test]
fn history_that_grows_across_the_loop_passes() {
    let obs = Obs::new()
        .t(
            TaskRole::Lifecycle,
            Source::Response,
            0,
            "submitted",
            true,
            Some(1),
        )
        .get(1, "working", 2)
        .t(
            TaskRole::Lifecycle,
            Source::Response,
            2,
            "input-required",
            true,
            Some(3),
        )
        .get(3, "input-required", 3)
        .t(
            TaskRole::Lifecycle,
            Source::Response,
            4,
            "working",
            true,
            None,
        )
        .t(
            TaskRole::Lifecycle,
            Source::Response,
            4,
            "input-required",
            true,
            None,
        )
        .get(5, "input-required", 5)
        .t(
            TaskRole::Lifecycle,
            Source::Response,
            6,
            "completed",
            true,
            None,
        )
        .get(7, "completed", 7);
    let j = obs.judge("0.3", &[Capability::StateTransitionHistory]);
    assert_eq!(
        j.capabilities[&Capability::StateTransitionHistory],
        CapabilityOutcome::Passed,
        "{:#?}",
        j.findings
    );
    assert_eq!(status(&j, "LC-WIRE-VERSION").status, FindingStatus::Pass);
}

#[test]
fn v1_states_on_a_v03_subject_are_reported_as_a_should() {
    let j = Obs::new().stream(0, &V1_GOOD).judge("0.3", &[]);
    let f = status(&j, "LC-WIRE-VERSION");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert!(j.verdict.passed, "a SHOULD does not block");
}

/// A Task event of stream `call` carrying its history (the first event of a v0.3 or v1.0
/// stream), as the fast agents send it.
fn stream_task(obs: Obs, call: u32, state: &str, history: usize) -> Obs {
    obs.t(
        TaskRole::Lifecycle,
        Source::Stream,
        call,
        state,
        true,
        Some(history),
    )
}

/// An agent that finishes before the first GetTask: the stream's first event is the Task in
/// `submitted` with its history, the GetTask after the end is the same task `completed`.
fn fast_v03(history_at_end: usize, lagging: bool) -> Obs {
    let streamed = |obs: Obs| {
        stream_task(obs, 0, "submitted", 1).stream(0, &[("working", true), ("completed", true)])
    };
    let obs = if lagging {
        // The proxy holds the stream back: GetTask answers `completed` before it arrives.
        streamed(Obs::new().get(1, "completed", history_at_end))
    } else {
        streamed(Obs::new()).get(1, "completed", history_at_end)
    };
    stamped_by_agent(obs)
}

const STREAM_HISTORY: [Capability; 2] = [Capability::Streaming, Capability::StateTransitionHistory];

#[test]
fn frozen_history_is_judged_on_an_agent_that_answers_at_once() {
    let j = fast_v03(1, false).judge("0.3", &STREAM_HISTORY);
    let f = status(&j, "CAP-HISTORY");
    assert_eq!(f.status, FindingStatus::Fail, "{f:?}");
    assert!(
        f.message.contains("submitted (stream 0)") && f.message.contains("completed (get 1)"),
        "{}",
        f.message
    );
    assert_eq!(triggers(&j), [DemotionClass::History]);
    // Behind a lagging proxy the evidence is the same: lifecycle position orders it.
    let j = fast_v03(1, true).judge("0.3", &STREAM_HISTORY);
    assert_eq!(triggers(&j), [DemotionClass::History]);
}

#[test]
fn growing_history_on_a_fast_agent_passes_with_and_without_a_lagging_proxy() {
    for lagging in [false, true] {
        let j = fast_v03(3, lagging).judge("0.3", &STREAM_HISTORY);
        assert_eq!(
            status(&j, "CAP-HISTORY").status,
            FindingStatus::Pass,
            "lagging: {lagging}: {:#?}",
            j.findings
        );
        assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
    }
}

#[test]
fn push_deliveries_of_whole_tasks_are_history_evidence_in_their_order() {
    // v0.3 push bodies are Task snapshots (the JS SDK's shape), delivered in order.
    let deliveries = |histories: [usize; 3]| {
        let mut obs = Obs::new()
            .stream(
                0,
                &[("submitted", true), ("working", true), ("completed", true)],
            )
            .pushed(Ok(()), &["submitted", "working", "completed"]);
        for (t, h) in obs
            .o
            .transitions
            .iter_mut()
            .filter(|t| t.role == TaskRole::Push)
            .zip(histories)
        {
            t.history_len = Some(h);
        }
        obs.judge(
            "0.3",
            &[
                Capability::Streaming,
                Capability::PushNotifications,
                Capability::StateTransitionHistory,
            ],
        )
    };
    let frozen = deliveries([1, 1, 1]);
    assert_eq!(status(&frozen, "CAP-HISTORY").status, FindingStatus::Fail);
    assert!(
        status(&frozen, "CAP-HISTORY")
            .message
            .contains("(push 101)"),
        "{}",
        status(&frozen, "CAP-HISTORY").message
    );
    let growing = deliveries([1, 2, 3]);
    assert_eq!(status(&growing, "CAP-HISTORY").status, FindingStatus::Pass);
}

/// Respells every timestamp of `obs` with `+00:00` in place of `Z`: the same instants.
fn with_offsets(mut obs: Obs) -> Obs {
    for t in &mut obs.o.transitions {
        if let Some(raw) = &t.timestamp {
            let offset = format!("{}+00:00", raw.trim_end_matches('Z'));
            t.parsed_timestamp = super::super::events::parse_timestamp(&offset);
            assert!(t.parsed_timestamp.is_some());
            t.timestamp = Some(offset);
        }
    }
    obs
}

#[test]
fn an_offset_timestamp_is_a_format_finding_never_a_missing_one() {
    let v03 = with_offsets(Obs::new().stream(
        0,
        &[("submitted", true), ("working", true), ("completed", true)],
    ))
    .judge("0.3", &[Capability::Streaming]);
    for code in [
        "LC-TIMESTAMPS",
        "LC-TERMINAL-NO-TIMESTAMP",
        "LC-TIMESTAMP-ORDER",
    ] {
        assert_eq!(status(&v03, code).status, FindingStatus::Pass, "{code}");
    }
    let f = status(&v03, "LC-TIMESTAMP-FORMAT");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert!(f.message.contains("+00:00"), "{}", f.message);
    assert!(
        v03.verdict.passed,
        "a SHOULD on v0.3: {:#?}",
        v03.verdict.reasons
    );
    assert!(v03.verdict.untimestamped.is_empty(), "usable for dedup");

    // v1.0 makes `Z` a MUST: promotion is blocked, but nothing demotes and nothing is missing.
    let v1 = with_offsets(Obs::new().stream(0, &V1_GOOD)).judge("1.0", &[Capability::Streaming]);
    let f = status(&v1, "LC-TIMESTAMP-FORMAT");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Must));
    assert_eq!(status(&v1, "LC-TIMESTAMPS").status, FindingStatus::Pass);
    assert!(!v1.verdict.passed);
    assert!(triggers(&v1).is_empty());
    assert!(v1.verdict.untimestamped.is_empty());
}

#[test]
fn a_timestamp_without_a_zone_counts_as_missing_and_says_so() {
    let mut obs = Obs::new().stream(0, &V1_GOOD);
    let terminal = &mut obs.o.transitions[2];
    terminal.timestamp = Some("2026-12-04T20:08:19.826771".into());
    terminal.parsed_timestamp = None;
    let j = obs.judge("1.0", &[Capability::Streaming]);
    let f = status(&j, "LC-TERMINAL-NO-TIMESTAMP");
    assert_eq!(f.status, FindingStatus::Fail);
    assert!(f.message.contains("names no instant"), "{}", f.message);
    assert_eq!(triggers(&j), [DemotionClass::Timestamp]);
    assert!(
        status(&j, "LC-TIMESTAMPS")
            .message
            .contains("names no instant"),
        "{}",
        status(&j, "LC-TIMESTAMPS").message
    );
    assert_eq!(j.verdict.untimestamped, ["completed (stream 0)"]);
}

/// The conformant lifecycle, then the probe of its end from call 2: a cancel answered as
/// `cancel`, and GetTask at call 3 in `after`.
fn ended(obs: Obs, cancel: EndedCancel, after: &str) -> Obs {
    let mut obs = obs;
    if let EndedCancel::Answered { call } = &cancel {
        obs = obs.t(
            TaskRole::Lifecycle,
            Source::Response,
            *call,
            after,
            true,
            Some(3),
        );
    }
    let mut obs = obs.get(3, after, 3);
    obs.o.after_end = Some(AfterEnd {
        from_call: 2,
        cancel,
        send: None,
        resubscribe: EndedResubscribe::NotTried {
            reason: "not in this test".into(),
        },
    });
    obs
}

#[test]
fn a_refused_cancel_of_an_ended_task_keeps_it_terminal() {
    let refused = EndedCancel::NotCancelable {
        code: -32002,
        message: "Task cannot be canceled".into(),
    };
    let j = ended(conformant(), refused, "TASK_STATE_COMPLETED").judge("1.0", &STREAM_PUSH);
    assert_eq!(status(&j, "LC-TERMINAL-STAYS").status, FindingStatus::Pass);
    assert_eq!(status(&j, "LC-TERMINAL-CANCEL").status, FindingStatus::Pass);
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

#[test]
fn a_terminal_state_that_moves_after_cancel_is_a_terminal_finding() {
    let j = ended(
        conformant(),
        EndedCancel::Answered { call: 2 },
        "TASK_STATE_CANCELED",
    )
    .judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-TERMINAL-STAYS");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Must));
    assert!(
        f.message.contains("ended completed") && f.message.contains("canceled (get 3)"),
        "{}",
        f.message
    );
    assert_eq!(triggers(&j), [DemotionClass::Terminal]);
    assert!(j.verdict.lifecycle.is_err());
    assert_eq!(status(&j, "LC-TERMINAL-CANCEL").status, FindingStatus::Fail);
}

#[test]
fn a_cancel_refused_in_another_shape_or_accepted_without_moving_is_reported_not_failed() {
    let other = EndedCancel::Refused {
        code: -32603,
        message: "internal error".into(),
    };
    let accepted = EndedCancel::Answered { call: 2 };
    for cancel in [other, accepted] {
        let j =
            ended(conformant(), cancel.clone(), "TASK_STATE_COMPLETED").judge("1.0", &STREAM_PUSH);
        let f = status(&j, "LC-TERMINAL-CANCEL");
        assert_eq!(
            (f.status, f.level),
            (FindingStatus::Fail, Level::Should),
            "{cancel:?}"
        );
        assert_eq!(status(&j, "LC-TERMINAL-STAYS").status, FindingStatus::Pass);
        assert!(j.verdict.passed, "{cancel:?}: {:#?}", j.verdict.reasons);
    }
}

/// The conformant lifecycle, then a resubscription (stream 4) carrying `states`.
fn resubscribed(states: &[(&str, bool)], end: StreamEnd) -> Obs {
    let mut obs = ended(
        conformant(),
        EndedCancel::NotCancelable {
            code: -32002,
            message: "not cancelable".into(),
        },
        "TASK_STATE_COMPLETED",
    )
    .stream(4, states);
    let run = obs.o.streams.last_mut().unwrap();
    run.resubscribe = true;
    run.end = end;
    if states.len() > 1 {
        run.events_after_terminal = states.len() - 1;
    }
    if let Some(after) = obs.o.after_end.as_mut() {
        after.resubscribe = EndedResubscribe::Streamed { call: 4 };
    }
    obs
}

#[test]
fn a_resubscription_that_sends_the_final_task_once_and_closes_is_fine() {
    let j = resubscribed(&[("TASK_STATE_COMPLETED", true)], StreamEnd::Closed)
        .judge("1.0", &STREAM_PUSH);
    assert_eq!(status(&j, "LC-RESUBSCRIBE").status, FindingStatus::Pass);
    assert_eq!(status(&j, "LC-SINGLE-TERMINAL").status, FindingStatus::Pass);
    assert_eq!(
        j.capabilities[&Capability::Streaming],
        CapabilityOutcome::Passed,
        "a resubscription is not the streaming send"
    );
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

#[test]
fn a_resubscription_that_ends_the_task_again_is_a_terminal_finding() {
    let j = resubscribed(
        &[
            ("TASK_STATE_COMPLETED", true),
            ("TASK_STATE_COMPLETED", true),
        ],
        StreamEnd::Closed,
    )
    .judge("1.0", &STREAM_PUSH);
    assert_eq!(status(&j, "LC-SINGLE-TERMINAL").status, FindingStatus::Fail);
    assert_eq!(triggers(&j), [DemotionClass::Terminal]);
    // One that stays open after the final task is only reported.
    let j =
        resubscribed(&[("TASK_STATE_COMPLETED", true)], StreamEnd::Idle).judge("1.0", &STREAM_PUSH);
    let f = status(&j, "LC-RESUBSCRIBE");
    assert_eq!((f.status, f.level), (FindingStatus::Fail, Level::Should));
    assert!(j.verdict.passed, "{:#?}", j.verdict.reasons);
}

/// Credentials kept the cycle from the callee: whatever was seen before (here, a terminal
/// state without a timestamp) counts for nothing, every rule is not-exercised, and only
/// `PROBE-AUTH` says why: a failure when refused, not-exercised when none are configured.
#[test]
fn a_cycle_credentials_stopped_judges_nothing_and_triggers_nothing() {
    for (block, auth) in [
        (
            AccessBlock::Refused {
                reason: "the agent answered HTTP 401 to SendMessage".into(),
            },
            FindingStatus::Fail,
        ),
        (
            AccessBlock::Missing {
                reason: "the card requires `bearer`; no credentials are configured".into(),
            },
            FindingStatus::NotExercised,
        ),
    ] {
        let mut obs = Obs::new()
            .stream(
                0,
                &[("TASK_STATE_SUBMITTED", true), ("TASK_STATE_WORKING", true)],
            )
            .t(
                TaskRole::Lifecycle,
                Source::Get,
                1,
                "TASK_STATE_COMPLETED",
                false,
                None,
            );
        obs.o.access.blocked = Some(block.clone());
        let j = obs.judge("1.0", &STREAM_PUSH);
        assert_eq!(status(&j, "PROBE-AUTH").status, auth);
        assert_eq!(status(&j, "PROBE-AUTH").message, block.reason());
        for rule in Rule::ALL.iter().filter(|r| **r != Rule::Auth) {
            if *rule == Rule::History {
                continue; // not advertised on 1.0: no finding at all
            }
            assert_eq!(
                status(&j, rule.code()).status,
                FindingStatus::NotExercised,
                "{rule}"
            );
        }
        assert!(triggers(&j).is_empty(), "a 401 never demotes");
        assert!(!j.verdict.passed);
        assert_eq!(j.verdict.unexercised.as_deref(), Some(block.reason()));
        assert!(matches!(
            j.capabilities[&Capability::Streaming],
            CapabilityOutcome::NotExercised { .. }
        ));
    }
}

#[test]
fn a_cycle_that_presented_credentials_says_which_and_an_anonymous_one_says_none_were_needed() {
    let mut obs = conformant();
    obs.o.access.presented = Some("presented `bearer`, the card's requirement 1 of 1".into());
    let j = obs.judge("1.0", &STREAM_PUSH);
    assert!(j.verdict.passed);
    assert!(
        status(&j, "PROBE-AUTH")
            .message
            .contains("presented `bearer`")
    );
    let j = conformant().judge("1.0", &STREAM_PUSH);
    assert_eq!(status(&j, "PROBE-AUTH").status, FindingStatus::Pass);
    assert!(
        status(&j, "PROBE-AUTH")
            .message
            .contains("requires no credentials")
    );
}

#[test]
fn the_extended_card_finding_says_what_became_of_it() {
    let judged = |extended: Option<ExtendedCard>| {
        let mut obs = conformant();
        obs.o.extended_card = extended;
        obs.judge("1.0", &STREAM_PUSH)
    };
    let j = judged(None);
    assert_eq!(
        status(&j, "PROBE-EXTENDED-CARD").status,
        FindingStatus::NotExercised
    );
    assert_eq!(j.verdict.extended_card, None);
    let j = judged(Some(ExtendedCard::Refused {
        reason: "the extended card is not trusted: bad signature".into(),
    }));
    assert_eq!(
        status(&j, "PROBE-EXTENDED-CARD").status,
        FindingStatus::Fail
    );
    assert!(
        j.verdict.passed,
        "a SHOULD: the public card's capabilities stand"
    );
    let j = judged(Some(ExtendedCard::Used {
        sha256: "cd".repeat(32),
        signature: "verified".into(),
        card: serde_json::json!({}),
    }));
    assert_eq!(
        status(&j, "PROBE-EXTENDED-CARD").status,
        FindingStatus::Pass
    );
    assert_eq!(
        j.verdict.extended_card.as_deref(),
        Some("cd".repeat(32).as_str())
    );
}

mod field_faults;
mod trials;
