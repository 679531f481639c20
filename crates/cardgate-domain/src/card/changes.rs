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
mod tests;
