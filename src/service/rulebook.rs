//! Re-judging stored evidence when the rules change (issue 45): at start under a rulebook other
//! than the one a subject's newest run was judged under, and on request. Each subject's newest
//! finished run is judged again from its stored observations; a trusted subject whose evidence
//! now fails is demoted, one whose evidence now passes gets a fresh probe (only a probe
//! promotes), and every changed outcome appends a `rejudged` event. The what-if is the same
//! plan, written nowhere.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::ServiceError;
use super::probe::enqueue_probe;
use super::standing::{judged_under, last_rejudgement};
use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::ledger::NewEvent;
use crate::domain::rulebook::{Rejudgement, Rulebook, rejudge};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::Store;

/// A subject whose outcome changes under the rulebook.
#[derive(Debug, Clone)]
pub struct Move {
    pub callee_id: CalleeId,
    pub card_url: String,
    pub protocol_version: ProtocolVersion,
    pub probe_run_id: ProbeRunId,
    /// The rulebook the run was judged under (`None`: before versioning).
    pub from_rulebook: Option<String>,
    pub rejudgement: Rejudgement,
    /// The subject's last ledger seq when it was judged: the move is written only if nothing
    /// happened to the subject since (a probe finishing, another replica re-judging).
    seen_seq: i64,
}

/// What judging every subject's newest finished run under `book` would change. Runs already
/// judged, or re-judged, under `book` are skipped. Nothing is written.
pub async fn plan(store: &Store, book: &Rulebook) -> Result<Vec<Move>, ServiceError> {
    let subjects = store
        .subjects_between(CalleeId(Uuid::nil()), CalleeId(Uuid::max()))
        .await?;
    let mut urls: BTreeMap<CalleeId, String> = BTreeMap::new();
    let mut moves = Vec::new();
    for subject in subjects {
        let (callee, version) = (subject.callee_id, subject.protocol_version);
        let Some(newest) = store.latest_finished_probe(callee, version).await? else {
            continue;
        };
        // Most runs stand under the rulebook in force, by their newest re-judgement or else
        // their own verdict: that is read before any evidence is loaded.
        let last = last_rejudgement(store, callee, version, newest.id).await?;
        let standing = judged_under(last.as_ref(), &newest);
        if standing == Some(book.version()) {
            continue;
        }
        let from_rulebook = standing.map(str::to_string);
        let run = store.probe_run(newest.id).await?;
        let Some(rejudgement) = rejudge(&subject.state, &run, last, book) else {
            continue;
        };
        let card_url = match urls.get(&callee) {
            Some(url) => url.clone(),
            None => {
                let url = store.callee(callee).await?.card_url.to_string();
                urls.insert(callee, url.clone());
                url
            }
        };
        moves.push(Move {
            callee_id: callee,
            card_url,
            protocol_version: version,
            probe_run_id: run.id,
            from_rulebook,
            rejudgement,
            seen_seq: subject.last_seq,
        });
    }
    Ok(moves)
}

/// Re-judges every subject under `book` and writes what changed: each move's events (all of
/// a subject's or none), and a fresh probe for each subject whose evidence now passes. A
/// subject that moved on since it was judged is left alone: whatever moved it (a probe, or
/// another replica starting under the same rules) judged it under newer evidence or already
/// wrote this move. Returns the moves written.
pub async fn apply(
    store: &Store,
    book: &Rulebook,
    actor: &str,
    now: Timestamp,
) -> Result<Vec<Move>, ServiceError> {
    let mut written = Vec::new();
    for m in plan(store, book).await? {
        let events: Vec<NewEvent> = m
            .rejudgement
            .events
            .iter()
            .map(|body| NewEvent {
                callee_id: m.callee_id,
                protocol_version: m.protocol_version,
                body: body.clone(),
                actor: actor.to_string(),
            })
            .collect();
        if store
            .append_unless_moved(&events, m.seen_seq, now)
            .await?
            .is_none()
        {
            continue;
        }
        if m.rejudgement.reprobe {
            let reason = "re-judged: its evidence passes under the current rulebook";
            enqueue_probe(store, m.callee_id, m.protocol_version, reason, actor, now).await?;
        }
        written.push(m);
    }
    if !written.is_empty() {
        tracing::info!(
            rulebook = book.version(),
            moved = written.len(),
            "re-judged stored evidence under the current rulebook"
        );
    }
    Ok(written)
}
