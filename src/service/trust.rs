//! The caller's question: gathers the facts about one subject and evaluates the decision.

use crate::domain::decision::{self, Decision, DecisionInput, Posture, SubjectFacts};
use crate::domain::ids::CalleeId;
use crate::storage::Store;

use super::ServiceError;
use super::callees::not_found;

/// The decision for `posture` about callee `callee_id`.
pub async fn decide(
    store: &Store,
    callee_id: CalleeId,
    posture: &Posture,
) -> Result<Decision, ServiceError> {
    store
        .callee(callee_id)
        .await
        .map_err(|e| not_found(e, callee_id))?;
    let subject = store.subject(callee_id, posture.caller_version).await?;
    let input = DecisionInput {
        // Card snapshots arrive with card discovery, probe runs with the probe engine.
        card: None,
        subject: subject.map(|s| SubjectFacts {
            state: s.state,
            ledger_seq: s.last_seq,
            ledger_hash: s.last_hash,
        }),
        probe: None,
    };
    Ok(decision::evaluate(posture, &input))
}
