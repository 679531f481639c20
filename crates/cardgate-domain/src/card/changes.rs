//! What a newly fetched card means for a callee's subjects: the ledger events a refresh
//! appends (docs/trust-model.md, "Scheduling"; issue #3's refresh transitions).

use std::collections::{BTreeMap, BTreeSet};

use super::NormalizedCard;
use crate::capability::Capability;
use crate::gate::SubjectState;
use crate::ids::SnapshotId;
use crate::ledger::EventBody;
use crate::version::ProtocolVersion;

/// The new card, as assessed.
pub enum NewCard<'a> {
    /// Fetched, parsed and trusted (verified, or unsigned and admitted).
    Trusted {
        snapshot_id: SnapshotId,
        sha256: &'a str,
        card: &'a NormalizedCard,
        /// The card of the newest trusted snapshot before this one, if any.
        previous: Option<&'a NormalizedCard>,
        changed: bool,
    },
    /// Could not be fetched, parsed or verified.
    Untrusted {
        snapshot_id: Option<SnapshotId>,
        reason: &'a str,
    },
}

/// The events, per subject, that take the callee from `subjects` to `new`.
pub fn events_for(
    subjects: &BTreeMap<ProtocolVersion, SubjectState>,
    new: &NewCard<'_>,
) -> Vec<(ProtocolVersion, EventBody)> {
    match new {
        NewCard::Untrusted {
            snapshot_id,
            reason,
        } => subjects
            .iter()
            .filter(|(_, state)| !state.withdrawn && state.card_untrusted.is_none())
            .map(|(version, _)| {
                let body = EventBody::CardUntrusted {
                    snapshot_id: *snapshot_id,
                    reason: reason.to_string(),
                };
                (*version, body)
            })
            .collect(),
        NewCard::Trusted {
            snapshot_id, card, ..
        } => {
            let offered = card.advertised();
            let mut events = Vec::new();
            for (version, advertised) in &offered {
                let appeared = EventBody::VersionAppeared {
                    snapshot_id: *snapshot_id,
                    advertised: advertised.iter().copied().collect(),
                };
                let bodies = match subjects.get(version) {
                    Some(state) if !state.withdrawn => {
                        offered_again(new, *version, advertised, state)
                    }
                    _ => vec![appeared],
                };
                events.extend(bodies.into_iter().map(|b| (*version, b)));
            }
            for (version, state) in subjects {
                if !state.withdrawn && !offered.contains_key(version) {
                    let bodies = restored(state, *snapshot_id).into_iter().chain([
                        EventBody::VersionWithdrawn {
                            snapshot_id: *snapshot_id,
                        },
                    ]);
                    events.extend(bodies.map(|b| (*version, b)));
                }
            }
            events
        }
    }
}

/// A trust restored by the new trusted card, if the subject had lost it.
fn restored(state: &SubjectState, snapshot_id: SnapshotId) -> Option<EventBody> {
    state
        .card_untrusted
        .is_some()
        .then_some(EventBody::CardTrustRestored { snapshot_id })
}

/// The events for a live subject whose version the trusted card `new` still offers.
fn offered_again(
    new: &NewCard<'_>,
    version: ProtocolVersion,
    advertised: &BTreeSet<Capability>,
    state: &SubjectState,
) -> Vec<EventBody> {
    let NewCard::Trusted {
        snapshot_id,
        sha256,
        card,
        previous,
        changed,
    } = new
    else {
        return Vec::new();
    };
    let snapshot_id = *snapshot_id;
    let mut events: Vec<EventBody> = restored(state, snapshot_id).into_iter().collect();
    // A republish is recorded for the subjects whose interfaces or advertised capabilities it
    // moved; a new description or skill list is in the snapshot, not in one ledger event per
    // version per refresh. Gate states never move on it.
    let moved = previous.is_none_or(|p| {
        p.interfaces_for(version) != card.interfaces_for(version)
            || p.advertised_for(version) != card.advertised_for(version)
    });
    if *changed && moved {
        events.push(EventBody::CardRepublished {
            snapshot_id,
            sha256: sha256.to_string(),
        });
    }
    let gained = advertised
        .iter()
        .filter(|c| !state.advertised.contains_key(c))
        .map(|c| EventBody::CapabilityAdvertised {
            capability: *c,
            snapshot_id,
        });
    let lost = state
        .advertised
        .keys()
        .filter(|c| !advertised.contains(c))
        .map(|c| EventBody::CapabilityWithdrawn {
            capability: *c,
            snapshot_id,
        });
    events.extend(gained.chain(lost));
    events
}

#[cfg(test)]
mod tests {
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
}
