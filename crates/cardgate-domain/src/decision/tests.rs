//! Table-driven tests of every decision condition.

use super::*;
use crate::gate::GateKind;
use crate::time::Timestamp;
use chrono::{TimeZone, Utc};
use std::sync::Arc;

fn t(secs: i64) -> Timestamp {
    Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
}

fn v(s: &str) -> ProtocolVersion {
    ProtocolVersion::parse_exact(s).unwrap()
}

fn posture(version: &str, dedup: Dedup, requires: &[Capability]) -> Posture {
    Posture {
        caller_version: v(version),
        dedup,
        requires: requires.iter().copied().collect(),
    }
}

fn interface(version: &str, same_origin: bool, caps: &[Capability]) -> OfferedInterface {
    OfferedInterface {
        url: if same_origin {
            "https://agent.example/a2a"
        } else {
            "https://other.example/a2a"
        }
        .into(),
        binding: "JSONRPC".into(),
        version: v(version),
        same_origin,
        advertised: caps.iter().copied().collect(),
    }
}

fn card(interfaces: Vec<OfferedInterface>) -> Arc<CardFacts> {
    Arc::new(CardFacts {
        snapshot_id: SnapshotId::new(),
        card_origin: "https://agent.example".into(),
        trust: CardTrust::Verified {
            detail: "kid k1, ES256, pinned key".into(),
        },
        interfaces: interfaces.into(),
    })
}

fn subject(gate: GateKind, classes: &[DemotionClass], caps: &[(Capability, i64)]) -> SubjectFacts {
    let gate = match gate {
        GateKind::CardTrusted => GateState::CardTrusted,
        GateKind::LifecycleTrusted => GateState::LifecycleTrusted,
        GateKind::Demoted => GateState::Demoted {
            at: t(50),
            seq: Some(50),
            classes: classes.iter().copied().collect(),
        },
    };
    let state = SubjectState {
        gate,
        card_untrusted: None,
        withdrawn: false,
        // Each advertisement began with the event at ledger seq `at`, at `at` seconds.
        advertised: caps.iter().map(|(c, at)| (*c, t(*at))).collect(),
        advertised_seq: caps.iter().map(|(c, at)| (*c, *at)).collect(),
    };
    SubjectFacts::new(&state, 7, &"ab".repeat(32))
}

fn probe(
    lifecycle: Result<(), &str>,
    untimestamped: &[&str],
    caps: &[(Capability, CapabilityOutcome)],
) -> ProbeFacts {
    ProbeFacts::new(
        ProbeRunId::new(),
        // Started when the ledger head was seq 100, at 100 seconds.
        ProbeStart {
            head_seq: Some(100),
            at: t(100),
        },
        caps.iter().cloned().collect(),
        ProbeRemarks {
            lifecycle: lifecycle.map_err(Box::from),
            untimestamped: untimestamped.iter().map(|s| (*s).into()).collect(),
            unexercised: None,
            extended_card: None,
        },
    )
}

/// A subject that passes everything for a strict 1.0 caller requiring streaming.
fn all_good() -> DecisionInput {
    DecisionInput {
        card: Some(card(vec![interface("1.0", true, &[Capability::Streaming])])),
        subject: Some(subject(
            GateKind::LifecycleTrusted,
            &[],
            &[(Capability::Streaming, 0)],
        )),
        probe: Some(probe(
            Ok(()),
            &[],
            &[(Capability::Streaming, CapabilityOutcome::Passed)],
        )),
    }
}

fn status_of(decision: &Decision, id: &str) -> ConditionStatus {
    decision
        .conditions
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no condition {id} in {decision:?}"))
        .status
}

type Tweak = fn(&mut DecisionInput);

/// (name, caller posture, change to the all-good input, condition id, expected status)
fn cases() -> Vec<(&'static str, Posture, Tweak, &'static str, ConditionStatus)> {
    use Capability::*;
    let strict = || posture("1.0", Dedup::Timestamp, &[Streaming]);
    let relaxed = || posture("1.0", Dedup::None, &[Streaming]);
    vec![
        // card-trusted
        (
            "verified card passes",
            strict(),
            |_| {},
            "card-trusted",
            Pass,
        ),
        (
            "no snapshot is unknown",
            strict(),
            |i| i.card = None,
            "card-trusted",
            Unknown,
        ),
        (
            "unsigned card admitted by policy passes",
            strict(),
            |i| Arc::make_mut(i.card.as_mut().unwrap()).trust = CardTrust::UnsignedAdmitted,
            "card-trusted",
            Pass,
        ),
        (
            "untrusted card fails",
            strict(),
            |i| {
                Arc::make_mut(i.card.as_mut().unwrap()).trust = CardTrust::Untrusted {
                    reason: "signature invalid".into(),
                }
            },
            "card-trusted",
            Fail,
        ),
        // version-match
        (
            "exact Major.Minor passes",
            strict(),
            |_| {},
            "version-match",
            Pass,
        ),
        (
            "major-only match fails",
            strict(),
            |i| i.card = Some(card(vec![interface("1.1", true, &[Streaming])])),
            "version-match",
            Fail,
        ),
        (
            "other major fails",
            strict(),
            |i| i.card = Some(card(vec![interface("0.3", true, &[Streaming])])),
            "version-match",
            Fail,
        ),
        (
            "no snapshot: version unknown",
            strict(),
            |i| i.card = None,
            "version-match",
            Unknown,
        ),
        // same-origin
        ("same origin passes", strict(), |_| {}, "same-origin", Pass),
        (
            "cross-origin interface fails",
            strict(),
            |i| i.card = Some(card(vec![interface("1.0", false, &[Streaming])])),
            "same-origin",
            Fail,
        ),
        (
            "no interface for the version is unknown",
            strict(),
            |i| i.card = Some(card(vec![interface("0.3", true, &[])])),
            "same-origin",
            Unknown,
        ),
        // lifecycle-probe
        (
            "timestamped full lifecycle passes",
            strict(),
            |_| {},
            "lifecycle-probe",
            Pass,
        ),
        (
            "no probe yet is unknown",
            strict(),
            |i| i.probe = None,
            "lifecycle-probe",
            Unknown,
        ),
        (
            "no subject is unknown",
            strict(),
            |i| i.subject = None,
            "lifecycle-probe",
            Unknown,
        ),
        (
            "incomplete lifecycle fails",
            strict(),
            |i| {
                i.probe.as_mut().unwrap().remarks_mut().lifecycle = Err("never left working".into())
            },
            "lifecycle-probe",
            Fail,
        ),
        (
            "incomplete lifecycle fails for dedup=none too",
            relaxed(),
            |i| {
                i.probe.as_mut().unwrap().remarks_mut().lifecycle =
                    Err("two terminal states".into())
            },
            "lifecycle-probe",
            Fail,
        ),
        (
            "a probe that credentials kept from the callee is unknown, not a failure",
            strict(),
            |i| {
                let p = i.probe.as_mut().unwrap().remarks_mut();
                p.lifecycle = Err("PROBE-AUTH: the agent answered HTTP 401".into());
                p.unexercised = Some("the agent answered HTTP 401".into());
            },
            "lifecycle-probe",
            Unknown,
        ),
        (
            "missing timestamp fails a timestamp-dedup caller",
            strict(),
            |i| {
                i.probe.as_mut().unwrap().remarks_mut().untimestamped =
                    vec!["submitted (stream)".into()]
            },
            "lifecycle-probe",
            Fail,
        ),
        (
            "dedup=none does not require timestamps",
            relaxed(),
            |i| {
                i.probe.as_mut().unwrap().remarks_mut().untimestamped =
                    vec!["submitted (stream)".into()]
            },
            "lifecycle-probe",
            Pass,
        ),
        // capability:<name>
        (
            "probed capability passes",
            strict(),
            |_| {},
            "capability:streaming",
            Pass,
        ),
        (
            "capability the card does not advertise fails",
            strict(),
            |i| i.card = Some(card(vec![interface("1.0", true, &[])])),
            "capability:streaming",
            Fail,
        ),
        (
            "a capability only the extended card advertises passes when the probe judged by it",
            strict(),
            |i| {
                i.card = Some(card(vec![interface("1.0", true, &[])]));
                i.probe.as_mut().unwrap().remarks_mut().extended_card =
                    Some("ab".repeat(32).into());
            },
            "capability:streaming",
            Pass,
        ),
        (
            "advertised but never probed is unknown",
            strict(),
            |i| i.probe = None,
            "capability:streaming",
            Unknown,
        ),
        (
            "advertised since the last probe is unknown",
            strict(),
            |i| {
                i.subject
                    .as_mut()
                    .unwrap()
                    .advertised
                    .insert(Capability::Streaming, (t(200), Some(200)));
            },
            "capability:streaming",
            Unknown,
        ),
        (
            "advertised after the probe in ledger order, on a clock that runs behind: unknown",
            strict(),
            |i| {
                i.subject
                    .as_mut()
                    .unwrap()
                    .advertised
                    .insert(Capability::Streaming, (t(50), Some(150)));
            },
            "capability:streaming",
            Unknown,
        ),
        (
            "advertised before the probe in ledger order, on a clock that runs ahead: pass",
            strict(),
            |i| {
                i.subject
                    .as_mut()
                    .unwrap()
                    .advertised
                    .insert(Capability::Streaming, (t(150), Some(50)));
            },
            "capability:streaming",
            Pass,
        ),
        (
            "failed capability probe fails",
            strict(),
            |i| {
                i.probe.as_mut().unwrap().capabilities.insert(
                    Capability::Streaming,
                    CapabilityOutcome::Failed {
                        reason: "plain JSON".into(),
                    },
                );
            },
            "capability:streaming",
            Fail,
        ),
        (
            "capability the probe could not exercise is unknown",
            strict(),
            |i| {
                i.probe.as_mut().unwrap().capabilities.insert(
                    Capability::Streaming,
                    CapabilityOutcome::NotExercised {
                        reason: "timed out".into(),
                    },
                );
            },
            "capability:streaming",
            Unknown,
        ),
        // not-demoted
        (
            "never demoted passes",
            strict(),
            |_| {},
            "not-demoted",
            Pass,
        ),
        (
            "no subject is unknown",
            strict(),
            |i| i.subject = None,
            "not-demoted",
            Unknown,
        ),
        (
            "timestamp demotion fails a timestamp-dedup caller",
            strict(),
            |i| i.subject = Some(subject(GateKind::Demoted, &[DemotionClass::Timestamp], &[])),
            "not-demoted",
            Fail,
        ),
        (
            "timestamp demotion does not apply to dedup=none",
            relaxed(),
            |i| i.subject = Some(subject(GateKind::Demoted, &[DemotionClass::Timestamp], &[])),
            "not-demoted",
            Pass,
        ),
        (
            "history demotion applies to dedup=none",
            relaxed(),
            |i| i.subject = Some(subject(GateKind::Demoted, &[DemotionClass::History], &[])),
            "not-demoted",
            Fail,
        ),
        (
            "timestamp plus push demotion still applies to dedup=none",
            relaxed(),
            |i| {
                i.subject = Some(subject(
                    GateKind::Demoted,
                    &[DemotionClass::Timestamp, DemotionClass::Push],
                    &[],
                ))
            },
            "not-demoted",
            Fail,
        ),
    ]
}

#[test]
fn every_condition_table() {
    for (name, posture, tweak, id, expected) in cases() {
        let mut input = all_good();
        tweak(&mut input);
        let decision = evaluate(&posture, &input);
        assert_eq!(status_of(&decision, id), expected, "{name}: {decision:#?}");
        // Authoritative exactly when every condition passes: unknown never counts as pass.
        let all_pass = decision.conditions.iter().all(|c| c.status == Pass);
        assert_eq!(decision.authoritative, all_pass, "{name}");
        if expected != Pass {
            assert!(
                !decision.authoritative,
                "{name}: a non-passing condition must be advisory"
            );
        }
        assert!(
            decision.conditions.iter().all(|c| !c.reason.is_empty()),
            "{name}"
        );
    }
}

#[test]
fn all_good_is_authoritative_and_names_its_evidence() {
    let input = all_good();
    let decision = evaluate(
        &posture("1.0", Dedup::Timestamp, &[Capability::Streaming]),
        &input,
    );
    assert!(decision.authoritative, "{decision:#?}");
    assert_eq!(decision.gate_state, Some(EffectiveGate::LifecycleTrusted));
    assert_eq!(
        decision.evidence.card_snapshot_id,
        input.card.map(|c| c.snapshot_id)
    );
    assert_eq!(
        decision.evidence.probe_run_id,
        input.probe.map(|p| p.probe_run_id)
    );
    assert_eq!(decision.evidence.ledger_seq, Some(7));
    let ids: Vec<&str> = decision.conditions.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "card-trusted",
            "version-match",
            "same-origin",
            "lifecycle-probe",
            "capability:streaming",
            "not-demoted"
        ]
    );
}

#[test]
fn unknown_alone_keeps_the_answer_advisory() {
    // Everything passes except one capability the probe could not reach.
    let mut input = all_good();
    input.probe.as_mut().unwrap().capabilities.insert(
        Capability::Streaming,
        CapabilityOutcome::NotExercised {
            reason: "deadline".into(),
        },
    );
    let decision = evaluate(
        &posture("1.0", Dedup::Timestamp, &[Capability::Streaming]),
        &input,
    );
    let unknown: Vec<_> = decision
        .conditions
        .iter()
        .filter(|c| c.status == Unknown)
        .collect();
    assert_eq!(unknown.len(), 1);
    assert!(decision.conditions.iter().all(|c| c.status != Fail));
    assert!(!decision.authoritative);
}

#[test]
fn a_card_trusted_subject_with_untimestamped_submit_is_authoritative_only_without_timestamp_dedup()
{
    // The Python SDK's shape: full lifecycle, but the submitted state carries no timestamp, so
    // the subject was never promoted.
    let mut input = all_good();
    input.subject = Some(subject(
        GateKind::CardTrusted,
        &[],
        &[(Capability::Streaming, 0)],
    ));
    input.probe.as_mut().unwrap().remarks_mut().untimestamped = vec!["submitted (response)".into()];
    let strict = evaluate(&posture("1.0", Dedup::Timestamp, &[]), &input);
    let relaxed = evaluate(&posture("1.0", Dedup::None, &[]), &input);
    assert!(!strict.authoritative);
    assert!(relaxed.authoritative, "{relaxed:#?}");
    assert_eq!(relaxed.gate_state, Some(EffectiveGate::CardTrusted));
}

#[test]
fn untrusted_card_reports_untrusted_gate() {
    let mut input = all_good();
    Arc::make_mut(input.card.as_mut().unwrap()).trust = CardTrust::Untrusted {
        reason: "bad sig".into(),
    };
    let decision = evaluate(&posture("1.0", Dedup::Timestamp, &[]), &input);
    assert_eq!(decision.gate_state, Some(EffectiveGate::Untrusted));
    assert!(!decision.authoritative);
}

#[test]
fn state_transition_history_on_a_v1_interface_explains_its_removal() {
    let decision = evaluate(
        &posture(
            "1.0",
            Dedup::Timestamp,
            &[Capability::StateTransitionHistory],
        ),
        &all_good(),
    );
    let c = decision
        .conditions
        .iter()
        .find(|c| c.id == "capability:stateTransitionHistory")
        .unwrap();
    assert_eq!(c.status, Fail);
    assert!(c.reason.contains("v1.0 removed it"), "{}", c.reason);
}

/// The read model holds one input per subject (a million of them, issue 30): it stays within
/// the allocator's 320-byte class (with its version beside it), where it was 456 bytes, then
/// 384; a clean probe's remarks take no room, and the card's facts fit 96 bytes with their
/// `Arc`'s counts.
#[test]
fn a_decision_input_stays_small() {
    let entry = std::mem::size_of::<(crate::version::ProtocolVersion, DecisionInput)>();
    assert!(entry <= 320, "{entry} bytes");
    let card = std::mem::size_of::<CardFacts>() + 2 * std::mem::size_of::<usize>();
    assert!(card <= 96, "{card} bytes");
}

#[test]
fn a_ledger_hash_is_cited_exactly_as_stored() {
    let hex = "0123456789abcdef".repeat(4);
    assert!(matches!(LedgerHash::new(&hex), LedgerHash::Sha256(_)));
    assert_eq!(LedgerHash::new(&hex).to_string(), hex);
    // Not what the ledger writes, but cited as it is.
    for odd in [hex.to_uppercase(), "abc".to_string(), String::new()] {
        assert!(matches!(LedgerHash::new(&odd), LedgerHash::Other(_)));
        assert_eq!(LedgerHash::new(&odd).to_string(), odd);
    }
}
