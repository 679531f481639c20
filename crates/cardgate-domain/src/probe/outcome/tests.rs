//! Unit tests of `cardgate_domain::probe::outcome`.

use super::*;
use crate::demotion::DemotionClass;
use crate::gate::GateKind;
use crate::ids::SnapshotId;
use crate::probe::Verdict;
use crate::time::Timestamp;
use chrono::{TimeZone, Utc};
use std::collections::BTreeMap;

fn t(s: i64) -> Timestamp {
    Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

fn judgement(passed: bool, triggers: &[DemotionClass]) -> Judgement {
    Judgement {
        findings: Vec::new(),
        capabilities: BTreeMap::new(),
        verdict: Verdict {
            passed,
            reasons: Vec::new(),
            triggers: triggers.iter().map(|c| (*c, "x".to_string())).collect(),
            lifecycle: Ok(()),
            untimestamped: Vec::new(),
            unexercised: None,
            extended_card: None,
            rulebook: None,
            trials: None,
        },
    }
}

/// A subject in `gate`; `demoted` is the demotion's ledger seq, recorded at that many
/// seconds on the appending process's clock.
fn state(gate: GateKind, demoted: Option<i64>) -> SubjectState {
    let appeared = EventBody::VersionAppeared {
        snapshot_id: SnapshotId::new(),
        advertised: Vec::new(),
    };
    let mut s = SubjectState::start(&appeared, t(0), 1).unwrap();
    s.gate = match gate {
        GateKind::CardTrusted => GateState::CardTrusted,
        GateKind::LifecycleTrusted => GateState::LifecycleTrusted,
        GateKind::Demoted => GateState::Demoted {
            at: t(demoted.unwrap_or(0)),
            seq: demoted,
            classes: [DemotionClass::Timestamp].into(),
        },
    };
    s
}

fn kinds(events: &[EventBody]) -> Vec<&'static str> {
    events.iter().map(EventBody::kind).collect()
}

#[test]
fn outcomes_by_gate_and_verdict() {
    let run = ProbeRunId::new();
    // (case, state, probe start as (ledger head seq, seconds on the worker's clock), …)
    type Case = (
        &'static str,
        SubjectState,
        (i64, i64),
        Judgement,
        Vec<&'static str>,
    );
    let table: Vec<Case> = vec![
        (
            "pass promotes card-trusted",
            state(GateKind::CardTrusted, None),
            (10, 10),
            judgement(true, &[]),
            vec!["probe-finished", "promoted"],
        ),
        (
            "pass keeps lifecycle-trusted",
            state(GateKind::LifecycleTrusted, None),
            (10, 10),
            judgement(true, &[]),
            vec!["probe-finished"],
        ),
        (
            "fresh pass re-promotes demoted",
            state(GateKind::Demoted, Some(5)),
            (10, 10),
            judgement(true, &[]),
            vec!["probe-finished", "promoted"],
        ),
        (
            "a probe that saw the demotion as the ledger head is fresh",
            state(GateKind::Demoted, Some(5)),
            (5, 10),
            judgement(true, &[]),
            vec!["probe-finished", "promoted"],
        ),
        (
            "stale pass does not re-promote",
            state(GateKind::Demoted, Some(20)),
            (10, 10),
            judgement(true, &[]),
            vec!["probe-finished"],
        ),
        (
            "the worker's clock behind: fresh in ledger order, re-promotes",
            state(GateKind::Demoted, Some(20)),
            (25, 15),
            judgement(true, &[]),
            vec!["probe-finished", "promoted"],
        ),
        (
            "the worker's clock ahead: stale in ledger order, does not re-promote",
            state(GateKind::Demoted, Some(20)),
            (15, 25),
            judgement(true, &[]),
            vec!["probe-finished"],
        ),
        (
            "trigger demotes lifecycle-trusted",
            state(GateKind::LifecycleTrusted, None),
            (10, 10),
            judgement(false, &[DemotionClass::History]),
            vec!["probe-finished", "demoted"],
        ),
        (
            "trigger on card-trusted is only recorded",
            state(GateKind::CardTrusted, None),
            (10, 10),
            judgement(false, &[DemotionClass::Timestamp]),
            vec!["probe-finished"],
        ),
        (
            "a known class on a demoted subject is not repeated",
            state(GateKind::Demoted, Some(5)),
            (10, 10),
            judgement(false, &[DemotionClass::Timestamp, DemotionClass::Terminal]),
            vec!["probe-finished", "demoted"],
        ),
    ];
    for (name, state, (head, at), judgement, expected) in table {
        let start = ProbeStart {
            head_seq: Some(head),
            at: t(at),
        };
        let events = ledger_events(&state, run, &start, &judgement);
        assert_eq!(kinds(&events), expected, "{name}");
        // Every sequence the outcome proposes is one the gate accepts.
        let mut s = state.clone();
        for (i, e) in events.iter().enumerate() {
            s = s
                .apply(e, t(at + 1), head + 100 + i as i64)
                .unwrap_or_else(|err| panic!("{name}: {err}"));
        }
    }
}

#[test]
fn runs_and_demotions_from_before_seqs_were_kept_fall_back_to_their_times() {
    let mut legacy = state(GateKind::Demoted, Some(20));
    if let GateState::Demoted { seq, .. } = &mut legacy.gate {
        *seq = None;
    }
    let after = ProbeStart {
        head_seq: Some(3),
        at: t(30),
    };
    let before = ProbeStart {
        head_seq: None,
        at: t(10),
    };
    assert!(legacy.fresh_for_repromotion(&after));
    assert!(!legacy.fresh_for_repromotion(&before));
}
