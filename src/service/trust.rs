//! The caller's question: the decision about one subject, answered from the in-memory read
//! model; and the same decision read straight from the store, which the read model must
//! always equal.

use std::time::Duration;

use super::readmodel::{ReadModel, Reflection};
use super::{Missing, ServiceError, require_callee};
use crate::domain::decision::{self, Decision, Posture};
use crate::domain::ids::CalleeId;
use crate::storage::Store;

/// How long a caller's `min_seq` may make it wait for this replica to catch up.
pub const MAX_CATCH_UP_WAIT: Duration = Duration::from_secs(1);

/// The decision for `posture` about callee `callee_id`, from memory.
///
/// `min_seq`: the ledger seq the caller knows of (it just wrote it, perhaps through another
/// replica). The answer waits, at most [`MAX_CATCH_UP_WAIT`], until this replica reflects it.
pub async fn decide(
    view: &ReadModel,
    callee_id: CalleeId,
    posture: &Posture,
    min_seq: Option<i64>,
) -> Result<Decision, ServiceError> {
    if let Some(seq) = min_seq {
        match view.reflect(seq, MAX_CATCH_UP_WAIT).await {
            Reflection::Reflected => {}
            Reflection::Ahead { head } => {
                // Not malformed: the ledger may reach it later. A conflict with its state.
                return Err(ServiceError::Conflict(format!(
                    "min_seq {seq} is ahead of the ledger, whose newest seq is {head}: pass the \
                     `ledger_seq` a write answered"
                )));
            }
            Reflection::Behind => {
                return Err(ServiceError::Behind(format!(
                    "this replica has not caught up with ledger seq {seq} yet; retry shortly"
                )));
            }
        }
    }
    view.decide(callee_id, posture)
        .ok_or(ServiceError::NotFound(Missing::Callee(callee_id)))
}

/// The same decision computed from the store, row by row: the reference the read model is
/// checked against, and what an operator can compare it with.
pub async fn decide_from_store(
    store: &Store,
    callee_id: CalleeId,
    posture: &Posture,
) -> Result<Decision, ServiceError> {
    let subject = store.subject(callee_id, posture.caller_version).await?;
    if subject.is_none() {
        require_callee(store, callee_id).await?;
    }
    let card = store
        .latest_snapshot(callee_id)
        .await?
        .map(|s| decision::card_facts(&s));
    let probe = store
        .latest_finished_probe(callee_id, posture.caller_version)
        .await?
        .as_ref()
        .and_then(decision::probe_facts);
    let input = decision::input(card.as_ref(), subject.as_ref(), probe);
    Ok(decision::evaluate(posture, &input))
}
