//! Unit tests of `cardgate_domain::card::changes`.

use super::*;
use crate::capability::Capability;
use crate::card::parse_card;
use chrono::{TimeZone, Utc};
use serde_json::json;

fn card(versions: &[&str], streaming: bool) -> NormalizedCard {
    let interfaces: Vec<_> = versions
        .iter()
        .map(|v| json!({"url": "https://a.example", "protocolBinding": "JSONRPC", "protocolVersion": v}))
        .collect();
    parse_card(&json!({"name": "x", "supportedInterfaces": interfaces, "capabilities": {"streaming": streaming}}))
        .unwrap()
}

fn state(caps: &[Capability]) -> SubjectState {
    let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
    let body = EventBody::VersionAppeared {
        snapshot_id: SnapshotId::new(),
        advertised: caps.to_vec(),
    };
    SubjectState::start(&body, at, 1).unwrap()
}

fn kinds(events: &[(ProtocolVersion, EventBody)]) -> Vec<String> {
    events
        .iter()
        .map(|(v, e)| format!("{v} {}", e.kind()))
        .collect()
}

fn v(s: &str) -> ProtocolVersion {
    ProtocolVersion::parse_exact(s).unwrap()
}

/// (case, subjects before, new card, whether its bytes changed, expected events)
type Case = (
    &'static str,
    BTreeMap<ProtocolVersion, SubjectState>,
    NormalizedCard,
    bool,
    Vec<&'static str>,
);

#[test]
fn refresh_transitions() {
    let id = SnapshotId::new();
    let one = BTreeMap::from([(v("1.0"), state(&[Capability::Streaming]))]);
    let table: Vec<Case> = vec![
        (
            "registration",
            BTreeMap::new(),
            card(&["1.0", "0.3"], true),
            true,
            vec!["0.3 version-appeared", "1.0 version-appeared"],
        ),
        (
            "same card again",
            one.clone(),
            card(&["1.0"], true),
            false,
            vec![],
        ),
        (
            "republish",
            one.clone(),
            card(&["1.0"], true),
            true,
            vec!["1.0 card-republished"],
        ),
        (
            "version appears",
            one.clone(),
            card(&["1.0", "1.1"], true),
            true,
            vec!["1.0 card-republished", "1.1 version-appeared"],
        ),
        (
            "version withdrawn",
            one.clone(),
            card(&["1.1"], true),
            true,
            vec!["1.1 version-appeared", "1.0 version-withdrawn"],
        ),
        (
            "capability withdrawn",
            one,
            card(&["1.0"], false),
            true,
            vec!["1.0 card-republished", "1.0 capability-withdrawn"],
        ),
        (
            "capability advertised",
            BTreeMap::from([(v("1.0"), state(&[]))]),
            card(&["1.0"], true),
            true,
            vec!["1.0 card-republished", "1.0 capability-advertised"],
        ),
    ];
    for (name, subjects, new_card, changed, expected) in table {
        let new = NewCard::Trusted {
            snapshot_id: id,
            sha256: "ab",
            card: &new_card,
            previous: None,
            changed,
        };
        assert_eq!(kinds(&events_for(&subjects, &new)), expected, "{name}");
    }
}

#[test]
fn an_untrusted_card_marks_each_subject_once_and_a_trusted_one_restores_it() {
    let subjects = BTreeMap::from([(v("1.0"), state(&[])), (v("0.3"), state(&[]))]);
    let untrusted = NewCard::Untrusted {
        snapshot_id: None,
        reason: "signature invalid",
    };
    assert_eq!(
        kinds(&events_for(&subjects, &untrusted)),
        ["0.3 card-untrusted", "1.0 card-untrusted"]
    );

    let mut marked = subjects;
    for s in marked.values_mut() {
        s.card_untrusted = Some("signature invalid".into());
    }
    assert!(events_for(&marked, &untrusted).is_empty(), "not spammed");
    let c = card(&["1.0", "0.3"], false);
    let trusted = NewCard::Trusted {
        snapshot_id: SnapshotId::new(),
        sha256: "cd",
        card: &c,
        previous: None,
        changed: false,
    };
    assert_eq!(
        kinds(&events_for(&marked, &trusted)),
        ["0.3 card-trust-restored", "1.0 card-trust-restored"]
    );
}

#[test]
fn a_republish_is_recorded_only_for_the_subjects_whose_interfaces_it_moved() {
    let subjects = BTreeMap::from([(v("1.0"), state(&[])), (v("0.3"), state(&[]))]);
    let before = card(&["1.0", "0.3"], false);
    let republish = |after: &NormalizedCard| {
        kinds(&events_for(
            &subjects,
            &NewCard::Trusted {
                snapshot_id: SnapshotId::new(),
                sha256: "ef",
                card: after,
                previous: Some(&before),
                changed: true,
            },
        ))
    };
    // A new description: nothing any subject depends on moved, so nothing is appended.
    let mut described = before.clone();
    described.description = Some("now with a longer description".into());
    assert!(republish(&described).is_empty());
    // One version's interface moved: that subject alone.
    let mut moved = before.clone();
    moved
        .interfaces
        .iter_mut()
        .filter(|i| i.version == v("0.3"))
        .for_each(|i| i.url = "https://b.example".into());
    assert_eq!(republish(&moved), ["0.3 card-republished"]);
}
