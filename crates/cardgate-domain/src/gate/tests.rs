//! Unit tests of `cardgate_domain::gate`.

use super::*;
use crate::capability::Capability;
use crate::ids::{ProbeRunId, ReportId, SnapshotId};
use chrono::{TimeZone, Utc};

fn t(secs: i64) -> Timestamp {
    Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
}

fn appeared(caps: &[Capability]) -> EventBody {
    EventBody::VersionAppeared {
        snapshot_id: SnapshotId::new(),
        advertised: caps.to_vec(),
    }
}

/// A promotion by a probe that started at ledger head seq `started`, at that many seconds.
fn promoted(started: i64) -> EventBody {
    EventBody::Promoted {
        probe_run_id: ProbeRunId::new(),
        probe_started_at: t(started),
        probe_start_seq: Some(started),
        rulebook: None,
    }
}

fn demoted(class: DemotionClass) -> EventBody {
    EventBody::Demoted {
        class,
        probe_run_id: None,
        report_id: Some(ReportId::new()),
        reason: "test".into(),
        rulebook: None,
    }
}

/// Runs `events` (body, n) from a fresh subject, each the event at ledger seq `n`
/// recorded at `n` seconds; returns the final result.
fn run(events: &[(EventBody, i64)]) -> Result<Option<SubjectState>, GateError> {
    SubjectState::derive(events.iter().map(|(b, at)| (b, t(*at), *at)))
}

/// (case, events with their times, final gate or the start of the refusal message)
type Case = (
    &'static str,
    Vec<(EventBody, i64)>,
    Result<GateKind, &'static str>,
);

#[test]
fn gate_derivation_table() {
    use GateKind::*;
    let table: Vec<Case> = vec![
        (
            "new subject starts card-trusted",
            vec![(appeared(&[]), 0)],
            Ok(CardTrusted),
        ),
        (
            "a passing probe promotes",
            vec![(appeared(&[]), 0), (promoted(5), 10)],
            Ok(LifecycleTrusted),
        ),
        (
            "a trigger on a lifecycle-trusted subject demotes",
            vec![
                (appeared(&[]), 0),
                (promoted(5), 10),
                (demoted(DemotionClass::Timestamp), 20),
            ],
            Ok(Demoted),
        ),
        (
            "a probe that started after the demotion re-promotes",
            vec![
                (appeared(&[]), 0),
                (promoted(5), 10),
                (demoted(DemotionClass::History), 20),
                (promoted(21), 30),
            ],
            Ok(LifecycleTrusted),
        ),
        (
            "a probe that started before the demotion does not re-promote",
            vec![
                (appeared(&[]), 0),
                (promoted(5), 10),
                (demoted(DemotionClass::History), 20),
                (promoted(19), 30),
            ],
            Err("promotion refused"),
        ),
        (
            "a probe whose ledger head was the event before the demotion does not re-promote",
            vec![
                (appeared(&[]), 0),
                (promoted(5), 10),
                (demoted(DemotionClass::Push), 20),
                (promoted(19), 30),
            ],
            Err("promotion refused"),
        ),
        (
            "a probe whose ledger head was the demotion itself started after it",
            vec![
                (appeared(&[]), 0),
                (promoted(5), 10),
                (demoted(DemotionClass::Push), 20),
                (promoted(20), 30),
            ],
            Ok(GateKind::LifecycleTrusted),
        ),
        (
            "a republish moves nothing",
            vec![
                (appeared(&[]), 0),
                (promoted(5), 10),
                (demoted(DemotionClass::Terminal), 20),
                (
                    EventBody::CardRepublished {
                        snapshot_id: SnapshotId::new(),
                        sha256: "ab".into(),
                    },
                    30,
                ),
            ],
            Ok(Demoted),
        ),
        (
            "a card-trusted subject cannot be demoted",
            vec![(appeared(&[]), 0), (demoted(DemotionClass::Timestamp), 20)],
            Err("demotion refused"),
        ),
        (
            "promotion is one-way: promoting twice is refused",
            vec![(appeared(&[]), 0), (promoted(5), 10), (promoted(11), 12)],
            Err("promotion refused"),
        ),
        (
            "a subject must start with version-appeared",
            vec![(promoted(5), 10)],
            Err("the first event"),
        ),
    ];
    for (name, events, expected) in table {
        let got = run(&events);
        match (got, expected) {
            (Ok(Some(state)), Ok(gate)) => assert_eq!(state.gate.kind(), gate, "{name}"),
            (Err(err), Err(prefix)) => {
                assert!(err.to_string().starts_with(prefix), "{name}: {err}")
            }
            (got, expected) => panic!("{name}: got {got:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn a_second_trigger_while_demoted_adds_its_class_and_restarts_the_clock() {
    let state = run(&[
        (appeared(&[]), 0),
        (promoted(5), 10),
        (demoted(DemotionClass::Timestamp), 20),
        (demoted(DemotionClass::History), 40),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        state.gate,
        GateState::Demoted {
            at: t(40),
            seq: Some(40),
            classes: BTreeSet::from([DemotionClass::Timestamp, DemotionClass::History]),
        }
    );
    // A probe that started between the two demotions no longer re-promotes.
    assert!(matches!(
        state.apply(&promoted(30), t(50), 50),
        Err(GateError::PromotionRefused(why)) if why.contains("demoted at seq 40")
    ));
    let again = state.apply(&promoted(41), t(50), 50).unwrap();
    // Trusted again, with no demotion left behind.
    assert_eq!(again.gate, GateState::LifecycleTrusted);
}

#[test]
fn untrusted_card_overlays_the_gate_and_restoring_it_returns_the_gate() {
    let snapshot_id = SnapshotId::new();
    let state = run(&[
        (appeared(&[]), 0),
        (promoted(5), 10),
        (
            EventBody::CardUntrusted {
                snapshot_id: Some(snapshot_id),
                reason: "bad signature".into(),
            },
            20,
        ),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(state.effective(), EffectiveGate::Untrusted);
    assert_eq!(state.gate, GateState::LifecycleTrusted);
    let restored = state
        .apply(&EventBody::CardTrustRestored { snapshot_id }, t(30), 30)
        .unwrap();
    assert_eq!(restored.effective(), EffectiveGate::LifecycleTrusted);
}

#[test]
fn capability_advertisement_keeps_the_start_of_the_current_run() {
    let snapshot_id = SnapshotId::new();
    let cap = Capability::Streaming;
    let state = run(&[
        (appeared(&[cap]), 0),
        (
            EventBody::CapabilityAdvertised {
                capability: cap,
                snapshot_id,
            },
            10,
        ),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        state.advertised.get(&cap),
        Some(&t(0)),
        "re-advertising keeps the start"
    );
    let state = state
        .apply(
            &EventBody::CapabilityWithdrawn {
                capability: cap,
                snapshot_id,
            },
            t(20),
            20,
        )
        .unwrap()
        .apply(
            &EventBody::CapabilityAdvertised {
                capability: cap,
                snapshot_id,
            },
            t(30),
            30,
        )
        .unwrap();
    assert_eq!(
        state.advertised.get(&cap),
        Some(&t(30)),
        "a new run starts later"
    );
}

#[test]
fn a_withdrawn_version_can_reappear_with_its_gate_intact() {
    let snapshot_id = SnapshotId::new();
    let state = run(&[
        (appeared(&[]), 0),
        (promoted(5), 10),
        (EventBody::VersionWithdrawn { snapshot_id }, 20),
        (appeared(&[Capability::Streaming]), 30),
    ])
    .unwrap()
    .unwrap();
    assert!(!state.withdrawn);
    assert_eq!(state.gate, GateState::LifecycleTrusted);
    assert_eq!(state.advertised.get(&Capability::Streaming), Some(&t(30)));
    assert_eq!(
        state.apply(&appeared(&[]), t(40), 40),
        Err(GateError::AlreadyStarted)
    );
}

#[test]
fn the_stored_form_round_trips_and_a_demotion_without_its_time_is_refused() {
    let state = run(&[
        (appeared(&[]), 0),
        (promoted(5), 10),
        (demoted(DemotionClass::Push), 20),
    ])
    .unwrap()
    .unwrap();
    let stored = serde_json::to_value(&state).unwrap();
    // The flat form every stored row has.
    assert_eq!(stored["gate"], "demoted");
    assert_eq!(stored["demoted_seq"], 20);
    assert_eq!(stored["demotion_classes"], serde_json::json!(["push"]));
    let back: SubjectState = serde_json::from_value(stored.clone()).unwrap();
    assert_eq!(back, state);

    let mut corrupt = stored;
    corrupt["demoted_at"] = serde_json::Value::Null;
    let err = serde_json::from_value::<SubjectState>(corrupt).unwrap_err();
    assert!(err.to_string().contains("without demoted_at"), "{err}");
}
