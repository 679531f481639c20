//! The record conditions on records built from runs by hand.

use chrono::{TimeZone, Utc};

use super::*;
use crate::decision::Evidence;
use crate::probe::latency::Samples;
use crate::probe::track::RunRecord;

fn at(secs: i64) -> Timestamp {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn record(runs: &[(i64, u32, u32)]) -> TrackRecord {
    let runs: Vec<RunRecord> = runs
        .iter()
        .map(|&(finished, trials, clean)| RunRecord {
            finished_at: at(finished),
            passed: clean == trials,
            trials,
            clean,
            samples: Samples::default(),
        })
        .collect();
    TrackRecord::of(&runs, at(-1_000_000))
}

fn trusted() -> Decision {
    Decision {
        authoritative: true,
        gate_state: None,
        conditions: Vec::new(),
        evidence: Evidence {
            card_snapshot_id: None,
            probe_run_id: None,
            ledger_seq: None,
            ledger_hash: None,
        },
    }
}

fn asked(record: &TrackRecord, ask: RecordAsk, now: i64) -> Decision {
    apply(trusted(), Some(record), &ask, at(now))
}

#[test]
fn nothing_asked_adds_nothing() {
    let d = asked(&record(&[(0, 3, 0)]), RecordAsk::default(), 0);
    assert!(d.authoritative && d.conditions.is_empty());
}

#[test]
fn the_track_record_is_unknown_until_enough_trials_then_judged_on_the_lower_bound() {
    let ask = RecordAsk {
        min_trials: Some(6),
        min_clean_rate: Some(0.5),
        ..RecordAsk::default()
    };
    let short = asked(&record(&[(0, 3, 3)]), ask, 10);
    assert_eq!(short.conditions[0].id, "track-record");
    assert_eq!(short.conditions[0].status, ConditionStatus::Unknown);
    assert!(!short.authoritative, "unknown never counts as a pass");
    // 6 of 6: lower bound 0.61 ≥ 0.5.
    let clean = asked(&record(&[(0, 3, 3), (1, 3, 3)]), ask, 10);
    assert_eq!(clean.conditions[0].status, ConditionStatus::Pass);
    assert!(clean.authoritative);
    // 4 of 6: lower bound 0.30 < 0.5.
    let flaky = asked(&record(&[(0, 3, 2), (1, 3, 2)]), ask, 10);
    assert_eq!(flaky.conditions[0].status, ConditionStatus::Fail);
    assert!(
        flaky.conditions[0].reason.contains("4 of 6"),
        "{:?}",
        flaky.conditions
    );
    assert!(!flaky.authoritative);
}

#[test]
fn freshness_is_the_newest_passing_runs_age() {
    let ask = RecordAsk {
        max_age: Some(Duration::from_secs(60)),
        ..RecordAsk::default()
    };
    let r = record(&[(0, 3, 3), (100, 3, 1)]);
    assert_eq!(
        asked(&r, ask, 59).conditions[0].status,
        ConditionStatus::Pass
    );
    // The newest run failed: its age does not count; the passing one's does.
    let stale = asked(&r, ask, 120);
    assert_eq!(stale.conditions[0].id, "fresh");
    assert_eq!(stale.conditions[0].status, ConditionStatus::Fail);
    assert!(!stale.authoritative);
    let never = apply(trusted(), None, &ask, at(0));
    assert_eq!(never.conditions[0].status, ConditionStatus::Fail);
}

#[test]
fn an_answer_with_freshness_stands_until_the_run_is_too_old() {
    let ask = RecordAsk {
        max_age: Some(Duration::from_secs(60)),
        ..RecordAsk::default()
    };
    let r = record(&[(0, 3, 3)]);
    // Passing now: it stands until the run is 60 s old (and a second, for the whole seconds).
    assert_eq!(valid_until(Some(&r), &ask, at(10)), Some(at(61)));
    // Failing already: it fails until the record changes.
    assert_eq!(valid_until(Some(&r), &ask, at(100)), None);
    assert_eq!(valid_until(None, &ask, at(0)), None);
    assert_eq!(valid_until(Some(&r), &RecordAsk::default(), at(0)), None);
    // The reason does not change while the status stands.
    let early = asked(&r, ask, 10).conditions[0].reason.clone();
    assert_eq!(asked(&r, ask, 59).conditions[0].reason, early);
}
