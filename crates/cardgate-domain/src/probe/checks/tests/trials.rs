//! A cycle of several trials (issue 46): each judged by the same rules, the cycle passing only
//! if every one does, each finding saying in how many it failed.

use super::*;
use crate::probe::trials::Tally;
use crate::rulebook::Rulebook;

/// A further trial: the lifecycle task alone, streamed to its end and read once more.
fn lifecycle_alone(terminal_timestamp: bool) -> Observations {
    Obs::new()
        .stream(
            0,
            &[
                ("TASK_STATE_SUBMITTED", true),
                ("TASK_STATE_WORKING", true),
                ("TASK_STATE_COMPLETED", terminal_timestamp),
            ],
        )
        .get(1, "TASK_STATE_COMPLETED", 2)
        .o
}

fn judged(trials: Vec<Observations>) -> Judgement {
    let mut cycle = conformant().o;
    cycle.trials = trials;
    Rulebook::trust_model().judge(
        &cycle,
        ProtocolVersion::parse_exact("1.0").unwrap(),
        &STREAM_PUSH.iter().copied().collect(),
    )
}

#[test]
fn clean_trials_pass_and_push_is_exercised_by_the_first_alone() {
    let j = judged(vec![lifecycle_alone(true), lifecycle_alone(true)]);
    assert!(j.verdict.passed, "{:#?}", j.verdict);
    assert_eq!(
        j.verdict.trials,
        Some(Tally {
            count: 3,
            clean: 3,
            failed: vec![]
        })
    );
    // The further trials did not push; that is not a failure of push.
    assert_eq!(status(&j, "CAP-PUSH").status, FindingStatus::Pass);
    assert_eq!(
        j.capabilities[&Capability::PushNotifications],
        CapabilityOutcome::Passed
    );
}

#[test]
fn one_failing_trial_fails_the_cycle_and_the_finding_says_which() {
    let j = judged(vec![lifecycle_alone(true), lifecycle_alone(false)]);
    assert!(!j.verdict.passed);
    assert_eq!(
        j.verdict.trials,
        Some(Tally {
            count: 3,
            clean: 2,
            failed: vec![3]
        })
    );
    let f = status(&j, "LC-TERMINAL-NO-TIMESTAMP");
    assert_eq!(f.status, FindingStatus::Fail);
    assert!(
        f.message
            .starts_with("failed in 1 of 3 trials (3); trial 3: "),
        "{}",
        f.message
    );
    assert_eq!(triggers(&j), vec![DemotionClass::Timestamp]);
    assert!(j.verdict.triggers[0].1.starts_with("trial 3: "));
    assert!(
        j.verdict.reasons.iter().all(|r| r.starts_with("trial 3: ")),
        "{:?}",
        j.verdict.reasons
    );
    assert!(j.verdict.lifecycle.is_ok(), "every trial saw the lifecycle");
}

#[test]
fn a_single_trial_is_judged_as_before() {
    let alone = Rulebook::trust_model().judge(
        &conformant().o,
        ProtocolVersion::parse_exact("1.0").unwrap(),
        &STREAM_PUSH.iter().copied().collect(),
    );
    assert_eq!(alone.verdict.trials, None);
    assert!(alone.verdict.passed);
}
