//! The caller's question: gathers the facts about one subject and evaluates the decision.

use url::Url;

use crate::domain::card::signature::SignatureVerdict;
use crate::domain::card::{CardSnapshot, origin_text, same_origin};
use crate::domain::decision::{
    self, CardFacts, CardTrust, Decision, DecisionInput, OfferedInterface, Posture, SubjectFacts,
};
use crate::domain::gate::SubjectState;
use crate::domain::ids::CalleeId;
use crate::storage::Store;

use super::ServiceError;
use super::require_callee;

/// The decision for `posture` about callee `callee_id`.
pub async fn decide(
    store: &Store,
    callee_id: CalleeId,
    posture: &Posture,
) -> Result<Decision, ServiceError> {
    let subject = store.subject(callee_id, posture.caller_version).await?;
    // A subject implies its callee; only without one is the callee's existence in question.
    // (Every round trip counts here: this is the hot path of the service.)
    if subject.is_none() {
        require_callee(store, callee_id).await?;
    }
    let snapshot = store.latest_snapshot(callee_id).await?;
    let input = DecisionInput {
        card: snapshot
            .as_ref()
            .map(|s| card_facts(s, subject.as_ref().map(|s| &s.state))),
        subject: subject.map(|s| SubjectFacts {
            state: s.state,
            ledger_seq: s.last_seq,
            ledger_hash: s.last_hash,
        }),
        probe: store
            .latest_finished_probe(callee_id, posture.caller_version)
            .await?
            .as_ref()
            .and_then(super::probe::facts),
    };
    Ok(decision::evaluate(posture, &input))
}

/// What the newest snapshot says, with a later fetch failure (recorded on the subject) taking
/// precedence over an older good snapshot.
fn card_facts(snapshot: &CardSnapshot, subject: Option<&SubjectState>) -> CardFacts {
    let a = &snapshot.assessment;
    let card_url = Url::parse(&snapshot.url).ok();
    let trust = match (
        subject.and_then(|s| s.card_untrusted.as_ref()),
        &a.problem,
        &a.signature,
    ) {
        (Some(reason), _, _) => CardTrust::Untrusted {
            reason: reason.clone(),
        },
        (None, Some(problem), _) => CardTrust::Untrusted {
            reason: problem.clone(),
        },
        (
            None,
            None,
            SignatureVerdict::Verified {
                index,
                kid,
                alg,
                key_source,
            },
        ) => CardTrust::Verified {
            detail: format!("signature {index}, kid `{kid}`, {alg}, key from {key_source}"),
        },
        (None, None, _) => CardTrust::UnsignedAdmitted,
    };
    let interfaces = a
        .card
        .iter()
        .flat_map(|card| {
            card.interfaces.iter().map(|i| OfferedInterface {
                url: i.url.clone(),
                binding: i.binding.clone(),
                version: i.version,
                same_origin: card_url.as_ref().is_some_and(|u| same_origin(u, &i.url)),
                advertised: card.advertised_for(i.version),
            })
        })
        .collect();
    CardFacts {
        snapshot_id: snapshot.id,
        card_origin: card_url
            .as_ref()
            .map_or_else(|| snapshot.url.clone(), origin_text),
        trust,
        interfaces,
    }
}
