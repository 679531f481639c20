//! Reading and verifying the ledger.

use serde::Serialize;

use crate::domain::ledger::{BrokenLink, ChainVerifier};
use crate::storage::{Store, StoreError};

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
pub async fn verify(store: &Store) -> Result<VerifyReport, StoreError> {
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
