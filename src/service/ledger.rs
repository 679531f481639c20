//! Reading and verifying the ledger.

use serde::Serialize;

use super::ServiceError;
use crate::domain::ids::CalleeId;
use crate::domain::ledger::EventRecord;
use crate::domain::ledger::{BrokenLink, ChainVerifier};
use crate::storage::Store;

/// The outcome of walking the whole chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    /// Events whose links verified, from seq 1.
    pub checked: u64,
    /// The last event that verified (0 when none).
    pub head_seq: i64,
    pub head_hash: String,
    pub first_broken: Option<BrokenLink>,
}

/// Rows read per round trip while verifying: memory stays bounded however long the ledger is.
const VERIFY_PAGE: u32 = 1000;

/// Walks the chain from the first event and reports the first broken link, if any.
pub async fn verify(store: &Store) -> Result<VerifyReport, ServiceError> {
    let mut verifier = ChainVerifier::default();
    let mut after = 0;
    let first_broken = 'walk: loop {
        let page = store.ledger(None, after, VERIFY_PAGE).await?;
        let Some(last) = page.last() else { break None };
        after = last.seq;
        for event in &page {
            if let Err(broken) = verifier.check(event) {
                break 'walk Some(broken);
            }
        }
    };
    let (head_seq, head_hash) = verifier.head();
    Ok(VerifyReport {
        ok: first_broken.is_none(),
        checked: verifier.checked(),
        head_seq,
        head_hash: head_hash.to_string(),
        first_broken,
    })
}

/// Events in ledger order after `after`, of one callee or of all.
pub async fn page(
    store: &Store,
    callee: Option<CalleeId>,
    after: i64,
    limit: u32,
) -> Result<Vec<EventRecord>, ServiceError> {
    Ok(store.ledger(callee, after, limit).await?)
}

/// The events at `seqs` (a probe run's, say), in that order; seqs of other callees are skipped.
pub async fn events_at(
    store: &Store,
    callee: CalleeId,
    seqs: &[i64],
) -> Result<Vec<EventRecord>, ServiceError> {
    let mut events = Vec::with_capacity(seqs.len());
    for seq in seqs {
        events.extend(store.ledger(Some(callee), seq - 1, 1).await?);
    }
    Ok(events)
}
