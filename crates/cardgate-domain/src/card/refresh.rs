//! What one fetch of a callee's card means (docs/trust-model.md, "Scheduling"): given the
//! newest snapshot and the subjects as they are now, the fetch status to record, the snapshot
//! to store (if any) and the ledger events, per subject, that take the callee there. Pure: the
//! service fetches, this decides, the store writes.

use std::collections::BTreeMap;

use super::CardSnapshot;
use super::changes::{self, NewCard};
use crate::callee::FetchStatus;
use crate::gate::SubjectState;
use crate::ledger::EventBody;
use crate::time::Timestamp;
use crate::version::ProtocolVersion;

/// How a refresh treats a card that may not have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revalidate {
    /// Conditional request; the same bytes (or a 304) record nothing new.
    IfChanged,
    /// Fetch and judge the card afresh even if unchanged (after the pinned keys changed).
    Always,
}

/// What one fetch brought, judged once.
#[derive(Debug)]
pub enum Fetched {
    /// The fetch failed; the text says why.
    Failed(String),
    /// The host asked to be left alone until `until` (429 or 503 with `Retry-After`): nothing
    /// was learnt about the card, and nothing is held against it.
    Deferred { reason: String, until: Timestamp },
    /// 304: the snapshot the validators came from still stands.
    NotModified,
    /// A body, judged (parse, signature, same-origin) as the snapshot it would be.
    Card(Box<CardSnapshot>),
}

/// What a fetch means, given the newest snapshot and the subjects as they are now.
#[derive(Debug)]
pub struct Decided<'a> {
    pub status: FetchStatus,
    /// The snapshot to store: `None` when the fetch brought nothing new.
    pub snapshot: Option<&'a CardSnapshot>,
    pub error: Option<String>,
    pub events: Vec<(ProtocolVersion, EventBody)>,
    /// When to fetch again, if the host set it (a deferred fetch).
    pub retry_at: Option<Timestamp>,
}

/// Decides what `fetched` means against the newest snapshot `latest` and the callee's
/// `subjects`.
pub fn decide<'a>(
    fetched: &'a Fetched,
    latest: Option<&CardSnapshot>,
    revalidate: Revalidate,
    subjects: &BTreeMap<ProtocolVersion, SubjectState>,
) -> Decided<'a> {
    let reusable = latest.filter(|s| s.assessment.trusted && revalidate == Revalidate::IfChanged);
    match fetched {
        Fetched::Failed(e) => untrusted(
            subjects,
            FetchStatus::Failed,
            None,
            format!("the card could not be fetched: {e}"),
        ),
        // The trust the card had stands; so does every subject's state.
        Fetched::Deferred { reason, until } => Decided {
            status: FetchStatus::Deferred,
            snapshot: None,
            error: Some(reason.clone()),
            events: Vec::new(),
            retry_at: Some(*until),
        },
        // 304 on an untrusted card: still untrusted, for the reason it had.
        Fetched::NotModified if latest.is_some_and(|l| !l.assessment.trusted) => {
            let reason = latest
                .and_then(|l| l.assessment.problem.clone())
                .unwrap_or_default();
            untrusted(subjects, FetchStatus::Untrusted, None, reason)
        }
        Fetched::NotModified => unchanged(subjects, latest),
        Fetched::Card(snapshot) if reusable.is_some_and(|l| l.sha256 == snapshot.sha256) => {
            unchanged(subjects, latest)
        }
        Fetched::Card(snapshot) => {
            match (&snapshot.assessment.card, &snapshot.assessment.problem) {
                (Some(card), None) => {
                    let new = NewCard::Trusted {
                        snapshot_id: snapshot.id,
                        sha256: &snapshot.sha256,
                        card,
                        previous: latest
                            .filter(|l| l.assessment.trusted)
                            .and_then(|l| l.assessment.card.as_ref()),
                        changed: latest.is_none_or(|l| l.sha256 != snapshot.sha256),
                    };
                    Decided {
                        status: FetchStatus::Fetched,
                        snapshot: Some(&**snapshot),
                        error: None,
                        events: changes::events_for(subjects, &new),
                        retry_at: None,
                    }
                }
                (_, problem) => {
                    // The same untrusted bytes, judged the same way: nothing new to store.
                    let repeated = latest.is_some_and(|l| {
                        l.sha256 == snapshot.sha256 && l.assessment.problem == *problem
                    });
                    let reason = problem.clone().unwrap_or_default();
                    untrusted(
                        subjects,
                        FetchStatus::Untrusted,
                        (!repeated).then_some(&**snapshot),
                        reason,
                    )
                }
            }
        }
    }
}

/// The card cannot be trusted, for `reason`; `snapshot` is the new snapshot to store, if any.
fn untrusted<'a>(
    subjects: &BTreeMap<ProtocolVersion, SubjectState>,
    status: FetchStatus,
    snapshot: Option<&'a CardSnapshot>,
    reason: String,
) -> Decided<'a> {
    let new = NewCard::Untrusted {
        snapshot_id: snapshot.map(|s| s.id),
        reason: &reason,
    };
    Decided {
        status,
        snapshot,
        events: changes::events_for(subjects, &new),
        error: Some(reason),
        retry_at: None,
    }
}

/// The card is the one already trusted: nothing new, but a card trust lost earlier returns.
fn unchanged<'a>(
    subjects: &BTreeMap<ProtocolVersion, SubjectState>,
    latest: Option<&CardSnapshot>,
) -> Decided<'a> {
    Decided {
        status: FetchStatus::Unchanged,
        snapshot: None,
        error: None,
        events: restore(subjects, latest),
        retry_at: None,
    }
}

/// An unchanged, trusted card lifts an earlier fetch failure.
fn restore(
    subjects: &BTreeMap<ProtocolVersion, SubjectState>,
    latest: Option<&CardSnapshot>,
) -> Vec<(ProtocolVersion, EventBody)> {
    let Some(latest) = latest.filter(|l| l.assessment.trusted) else {
        return Vec::new();
    };
    let Some(card) = &latest.assessment.card else {
        return Vec::new();
    };
    let new = NewCard::Trusted {
        snapshot_id: latest.id,
        sha256: &latest.sha256,
        card,
        previous: Some(card),
        changed: false,
    };
    changes::events_for(subjects, &new)
}

#[cfg(test)]
mod tests;
