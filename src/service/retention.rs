//! Retention: probe transcripts are what grows without bound (up to 2 MiB a run, a run a week
//! per subject), and card snapshots after them (a card that changes at every refresh is a
//! snapshot every few minutes). Each pass drops, in bounded batches, the transcripts of
//! finished runs past their subject's newest `keep`, except those of runs the ledger cites as
//! evidence (a promotion or a demotion they caused), and the raw bytes of public snapshots
//! past their callee's newest `keep`, except those the ledger cites as the card a subject
//! started from or whose trust changed: `domain::retention` decides, the store does. The
//! ledger, its tree and its proofs are never pruned, nor any run's verdict, findings or
//! observed transitions, nor any snapshot's hash and assessment.
//!
//! Webhook deliveries grow with events times subscriptions: finished ones (delivered, or
//! failed for good) are kept for a time for `/v1/subscriptions/{id}/deliveries` and retries,
//! then deleted, and an event's stored body with its last delivery. Pending ones stay, however
//! old (a paused subscription's queue).

use std::collections::BTreeSet;

use super::{ServiceError, Services};
use crate::domain::ids::{CalleeId, SnapshotId};
use crate::domain::retention;

/// Runs read per batch.
const BATCH: u32 = 500;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Runs (or snapshots) past the newest `keep` that still held a transcript (raw bytes).
    pub examined: u64,
    /// Transcripts (snapshots' raw bytes) dropped.
    pub dropped: u64,
}

/// One pass: at most `max_runs` candidate runs examined, oldest first. `keep` of 0 keeps
/// everything.
pub async fn prune(services: &Services, keep: u32, max_runs: u64) -> Result<Pruned, ServiceError> {
    let mut pruned = Pruned::default();
    if keep == 0 {
        return Ok(pruned);
    }
    let store = &services.store;
    let mut after = None;
    while pruned.examined < max_runs {
        let candidates = store.runs_past_retention(keep, after, BATCH).await?;
        let Some(last) = candidates.last() else {
            break;
        };
        after = Some(last.run);
        pruned.examined += candidates.len() as u64;
        let evidence = match retention::seq_span(&candidates) {
            Some((from, to)) => store.evidence_seqs(from, to).await?,
            None => Default::default(),
        };
        let runs = retention::prunable(&candidates, &evidence);
        pruned.dropped += store.prune_transcripts(&runs, services.now()).await?;
        if candidates.len() < BATCH as usize {
            break;
        }
    }
    Ok(pruned)
}

/// One pass over webhook deliveries: those that finished more than `keep` before now go, at
/// most `max` of them, the oldest first; a `keep` of zero keeps every delivery.
pub async fn prune_deliveries(
    services: &Services,
    keep: std::time::Duration,
    max: u64,
) -> Result<u64, ServiceError> {
    let before = chrono::Duration::from_std(keep)
        .ok()
        .and_then(|keep| services.now().checked_sub_signed(keep));
    let Some(before) = before.filter(|_| !keep.is_zero()) else {
        return Ok(0);
    };
    let mut pruned = 0;
    while pruned < max {
        let deleted = services.store.prune_deliveries(before, BATCH).await?;
        pruned += deleted;
        if deleted < u64::from(BATCH) {
            break;
        }
    }
    Ok(pruned)
}

/// One pass over the public card snapshots: at most `max_snapshots` candidates examined,
/// oldest first. `keep` of 0 keeps everything.
pub async fn prune_snapshots(
    services: &Services,
    keep: u32,
    max_snapshots: u64,
) -> Result<Pruned, ServiceError> {
    let mut pruned = Pruned::default();
    if keep == 0 {
        return Ok(pruned);
    }
    let store = &services.store;
    let mut after = None;
    while pruned.examined < max_snapshots {
        let candidates = store.snapshots_past_retention(keep, after, BATCH).await?;
        let Some(&(last, _)) = candidates.last() else {
            break;
        };
        after = Some(last);
        pruned.examined += candidates.len() as u64;
        let callees: BTreeSet<CalleeId> = candidates.iter().map(|(_, c)| *c).collect();
        let callees: Vec<CalleeId> = callees.into_iter().collect();
        let cited: BTreeSet<SnapshotId> = store
            .event_data(&callees, &retention::SNAPSHOT_EVIDENCE_KINDS)
            .await?
            .iter()
            .filter_map(|data| serde_json::from_str(data).ok())
            .filter_map(|data| retention::cited_snapshot(&data))
            .collect();
        let ids: Vec<SnapshotId> = candidates.iter().map(|(id, _)| *id).collect();
        let snapshots = retention::prunable_snapshots(&ids, &cited);
        pruned.dropped += store.prune_snapshots(&snapshots, services.now()).await?;
        if candidates.len() < BATCH as usize {
            break;
        }
    }
    Ok(pruned)
}
