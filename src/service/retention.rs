//! Retention: probe transcripts are what grows without bound (up to 2 MiB a run, a run a week
//! per subject). Each pass drops, in bounded batches, the transcripts of finished runs past
//! their subject's newest `keep`, except those of runs the ledger cites as evidence (a
//! promotion or a demotion they caused): `domain::retention` decides, the store does. The
//! ledger, its tree and its proofs are never pruned, nor any run's verdict, findings or
//! observed transitions.

use super::{ServiceError, Services};
use crate::domain::retention;

/// Runs read per batch.
const BATCH: u32 = 500;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Runs past the newest `keep` that still held a transcript.
    pub examined: u64,
    /// Transcripts dropped.
    pub transcripts: u64,
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
        pruned.transcripts += store.prune_transcripts(&runs, services.now()).await?;
        if candidates.len() < BATCH as usize {
            break;
        }
    }
    Ok(pruned)
}
