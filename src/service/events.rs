//! The live event stream: ledger events after a seq, replayed from the store, then followed as
//! this process's read model applies new ones (its own writes, and the change feed's).

use std::collections::{BTreeSet, VecDeque};

use futures::Stream;
use tokio::sync::watch;

use super::{ServiceError, Services};
use crate::domain::ids::CalleeId;
use crate::domain::ledger::EventRecord;
use crate::storage::FeedHead;

/// Ledger rows read per round trip while replaying.
const PAGE: u32 = 200;

/// Which events a stream carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EventFilter {
    pub callee: Option<CalleeId>,
    /// Ledger kinds; `None` for all.
    pub kinds: Option<BTreeSet<String>>,
}

impl EventFilter {
    fn admits(&self, event: &EventRecord) -> bool {
        self.kinds.as_ref().is_none_or(|k| k.contains(&event.kind))
    }
}

struct Cursor {
    services: Services,
    filter: EventFilter,
    /// The last seq read from the ledger (sent or filtered out).
    after: i64,
    ready: VecDeque<EventRecord>,
    applied: watch::Receiver<FeedHead>,
    failed: bool,
}

/// Every event after seq `after` that `filter` admits, in ledger order, each once; the stream
/// never ends on its own. A store failure is yielded once, and ends it.
pub(crate) fn follow(
    services: Services,
    filter: EventFilter,
    after: i64,
) -> impl Stream<Item = Result<EventRecord, ServiceError>> {
    // Subscribed before the first read: a change applied after it wakes the wait below.
    let applied = services.view.subscribe();
    let cursor = Cursor {
        services,
        filter,
        after,
        ready: VecDeque::new(),
        applied,
        failed: false,
    };
    futures::stream::unfold(cursor, |mut c| async move {
        if c.failed {
            return None;
        }
        loop {
            if let Some(event) = c.ready.pop_front() {
                return Some((Ok(event), c));
            }
            let page = match c
                .services
                .store
                .ledger(c.filter.callee, c.after, PAGE)
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    c.failed = true;
                    return Some((Err(e.into()), c));
                }
            };
            if let Some(last) = page.last() {
                c.after = last.seq;
                c.ready
                    .extend(page.into_iter().filter(|e| c.filter.admits(e)));
                continue;
            }
            // Caught up with the ledger: wait until the model applies something new.
            if c.applied.changed().await.is_err() {
                return None;
            }
        }
    })
}

/// The attestation kept for `event`, a promotion or demotion, as its envelope's JSON; `None`
/// for other kinds, or while none is kept (a lookup failure is logged: the event still goes).
pub(crate) async fn attestation_of(
    services: &Services,
    event: &EventRecord,
) -> Option<serde_json::Value> {
    if !matches!(event.kind.as_str(), "promoted" | "demoted") {
        return None;
    }
    match services.store.attestations_at(&[event.seq]).await {
        Ok(kept) => kept
            .into_iter()
            .next()
            .and_then(|a| serde_json::to_value(a.envelope).ok()),
        Err(e) => {
            tracing::warn!(seq = event.seq, error = %e, "reading an event's attestation");
            None
        }
    }
}
