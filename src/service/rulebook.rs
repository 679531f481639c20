//! Re-judging stored evidence when the rules change (issue 45): at start under a rulebook other
//! than the one a subject's newest run was judged under, and on request. Each subject's newest
//! finished run is judged again from its stored observations; a trusted subject whose evidence
//! now fails is demoted, one whose evidence now passes gets a fresh probe (only a probe
//! promotes), and every changed outcome appends a `rejudged` event. The what-if is the same
//! plan, written nowhere.

use std::collections::{BTreeMap, HashMap};

use super::ServiceError;
use super::probe::enqueue_probe;
use super::standing::{judged_under, rejudgement};
use crate::domain::ids::{CalleeId, ProbeRunId};
use crate::domain::ledger::NewEvent;
use crate::domain::rulebook::{Rejudgement, Rulebook, Standing, rejudge};
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

/// Subjects judged per page: a page is read in three queries, and only the subjects whose
/// newest run stands under other rules are read further.
const PAGE: u32 = 2_000;

/// What judging every subject's newest finished run under `book` would change. Runs already
/// judged, or re-judged, under `book` are skipped. Nothing is written.
///
/// Read a page of callees at a time: where each newest run stands is known from its verdict's
/// rulebook and the page's `rejudged` events, so under unchanged rules no judgement is loaded
/// at all (a start at a million subjects reads 500 pages, not two queries a subject).
pub async fn plan(store: &Store, book: &Rulebook) -> Result<Vec<Move>, ServiceError> {
    let mut moves = Vec::new();
    let mut after = None;
    loop {
        let ids = store.callee_ids(after, PAGE).await?;
        let (Some(&from), Some(&to)) = (ids.first(), ids.last()) else {
            return Ok(moves);
        };
        after = Some(to);
        plan_page(store, book, (from, to), &mut moves).await?;
    }
}

/// [`plan`] for the callees with an id in `from..=to`.
async fn plan_page(
    store: &Store,
    book: &Rulebook,
    (from, to): (CalleeId, CalleeId),
    moves: &mut Vec<Move>,
) -> Result<(), ServiceError> {
    let (subjects, newest, rejudged) = tokio::try_join!(
        store.subjects_between(from, to),
        store.newest_run_rulebooks(from, to),
        store.rejudgements_between(from, to),
    )?;
    let newest: HashMap<(CalleeId, ProtocolVersion), (ProbeRunId, Option<String>)> = newest
        .into_iter()
        .map(|(callee, version, run, rulebook)| ((callee, version), (run, rulebook)))
        .collect();
    // Newest first: the first re-judgement of a run is where it stands.
    let mut last: HashMap<(CalleeId, ProtocolVersion, ProbeRunId), Standing> = HashMap::new();
    for (callee, version, run, standing) in rejudged.into_iter().filter_map(rejudgement) {
        last.entry((callee, version, run)).or_insert(standing);
    }
    let mut urls: BTreeMap<CalleeId, String> = BTreeMap::new();
    for subject in subjects {
        let key = (subject.callee_id, subject.protocol_version);
        let Some((run_id, own)) = newest.get(&key) else {
            continue;
        };
        let last = last.remove(&(key.0, key.1, *run_id));
        let standing = judged_under(last.as_ref(), own.as_deref());
        if standing == Some(book.version()) {
            continue;
        }
        let from_rulebook = standing.map(str::to_string);
        let run = store.probe_run(*run_id).await?;
        let Some(rejudgement) = rejudge(&subject.state, &run, last, book) else {
            continue;
        };
        let card_url = match urls.get(&key.0) {
            Some(url) => url.clone(),
            None => {
                let url = store.callee(key.0).await?.card_url.to_string();
                urls.insert(key.0, url.clone());
                url
            }
        };
        moves.push(Move {
            callee_id: key.0,
            card_url,
            protocol_version: key.1,
            probe_run_id: run.id,
            from_rulebook,
            rejudgement,
            seen_seq: subject.last_seq,
        });
    }
    Ok(())
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
