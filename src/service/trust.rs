//! The caller's question: the decision about one subject, answered from the in-memory read
//! model; and the same decision read straight from the store, which the read model must
//! always equal.

use std::time::Duration;

use super::readmodel::{Answers, ReadModel, Reflection};
use super::{Missing, ServiceError, require_callee};
use crate::domain::decision::record::RecordAsk;
use crate::domain::decision::{self, Decision, Posture};
use crate::domain::ids::CalleeId;
use crate::domain::probe::track::TrackRecord;
use crate::domain::time::Timestamp;
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
    current(view, min_seq).await?;
    view.decide(callee_id, posture)
        .ok_or(ServiceError::NotFound(Missing::Callee(callee_id)))
}

/// Like [`decide`], with the conditions `ask` names judged at `now`, and the subject's track
/// record: evaluated afresh, for an answer that names its moment (a signed receipt).
pub async fn evaluate(
    view: &ReadModel,
    (callee_id, posture, ask): (CalleeId, &Posture, &RecordAsk),
    (min_seq, now): (Option<i64>, Timestamp),
) -> Result<(Decision, Option<TrackRecord>), ServiceError> {
    current(view, min_seq).await?;
    view.evaluate((callee_id, posture, ask), now)
        .ok_or(ServiceError::NotFound(Missing::Callee(callee_id)))
}

/// Like [`decide`], with the conditions `ask` names judged at `now`, as `render` makes the
/// decision (given the subject's track record too), from `answers` while the callee has not
/// changed since it was rendered (and, for an answer with freshness in it, while it still
/// stands): a popular callee's answer is not evaluated and rendered again for every caller.
pub async fn answer<T: Clone, E>(
    view: &ReadModel,
    answers: &Answers<T>,
    (callee_id, posture, ask): (CalleeId, &Posture, &RecordAsk),
    (min_seq, now): (Option<i64>, Timestamp),
    render: impl FnOnce(Decision, Option<&TrackRecord>) -> Result<T, E>,
) -> Result<Result<T, E>, ServiceError> {
    current(view, min_seq).await?;
    view.answer(answers, (callee_id, posture, ask), now, render)
        .ok_or(ServiceError::NotFound(Missing::Callee(callee_id)))
}

/// The callee registered with `card_url` (normalized as at registration), from memory, once
/// the model reflects `min_seq`; `None` for a URL no callee has (or that could not be one).
pub async fn callee_by_card_url(
    view: &ReadModel,
    card_url: &str,
    min_seq: Option<i64>,
) -> Result<Option<CalleeId>, ServiceError> {
    current(view, min_seq).await?;
    Ok(view.callee_by_card_url(card_url))
}

/// The model loaded, and reflecting `min_seq`: what every answer from it waits for.
async fn current(view: &ReadModel, min_seq: Option<i64>) -> Result<(), ServiceError> {
    loaded(view)?;
    reflect(view, min_seq).await
}

/// Decisions wait for the model's load at start: not knowing a callee yet is not "no such
/// callee".
pub fn loaded(view: &ReadModel) -> Result<(), ServiceError> {
    if view.is_loaded() {
        Ok(())
    } else {
        Err(ServiceError::Behind(
            "this replica is still loading its decisions; retry shortly".into(),
        ))
    }
}

/// Waits, at most [`MAX_CATCH_UP_WAIT`], until the model reflects the ledger seq the caller
/// knows of (it just wrote it, perhaps through another replica).
async fn reflect(view: &ReadModel, min_seq: Option<i64>) -> Result<(), ServiceError> {
    let Some(seq) = min_seq else {
        return Ok(());
    };
    match view.reflect(seq, MAX_CATCH_UP_WAIT).await {
        Reflection::Reflected => Ok(()),
        // Not malformed: the ledger may reach it later. A conflict with its state.
        Reflection::Ahead { head } => Err(ServiceError::Conflict(format!(
            "min_seq {seq} is ahead of the ledger, whose newest seq is {head}: pass the \
             `ledger_seq` a write answered"
        ))),
        Reflection::Behind => Err(ServiceError::Behind(format!(
            "this replica has not caught up with ledger seq {seq} yet; retry shortly"
        ))),
    }
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
        .map(|s| std::sync::Arc::new(decision::card_facts(&s)));
    let probe = store
        .latest_finished_probe(callee_id, posture.caller_version)
        .await?
        .as_ref()
        .and_then(decision::probe_facts);
    let input = decision::input(card.as_ref(), subject.as_ref(), probe);
    Ok(decision::evaluate(posture, &input))
}
