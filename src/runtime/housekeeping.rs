//! Housekeeping: the prunes that keep storage bounded (finished jobs, the change feed, lapsed
//! host leases, probe transcripts, card snapshots' raw bytes, finished webhook deliveries),
//! each bounded per run. The scheduler runs it on the refresh sweep's tick.

use std::time::Duration;

use anyhow::Context;

use crate::service::{Services, retention};

/// How long finished work is kept.
#[derive(Debug, Clone)]
pub struct HousekeepingSettings {
    /// Finished jobs are kept this long for `/v1/jobs`, then pruned.
    pub job_retention: Duration,
    /// Probe transcripts kept per subject (service::retention); 0 keeps them all.
    pub keep_transcripts: u32,
    /// Public card snapshots kept whole per callee (service::retention); 0 keeps them all.
    pub keep_snapshots: u32,
    /// How long finished webhook deliveries are kept (service::retention); zero keeps them.
    pub keep_deliveries: Duration,
}

impl Default for HousekeepingSettings {
    fn default() -> Self {
        Self {
            job_retention: Duration::from_secs(24 * 3600),
            keep_transcripts: 10,
            keep_snapshots: 10,
            keep_deliveries: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// Runs past retention examined per run: a backlog (a first start with retention on, or
/// `CARDGATE_KEEP_TRANSCRIPTS` lowered) is worked off over several runs, each bounded.
const PRUNE_PER_RUN: u64 = 5_000;
/// Most webhook deliveries one run deletes: deliveries are events times subscriptions, far
/// more rows than runs, and each is small.
const DELIVERIES_PER_RUN: u64 = 100_000;

/// Runs every prune once; the first that fails stops the run with its reason.
pub async fn run(services: &Services, settings: &HousekeepingSettings) -> anyhow::Result<()> {
    let now = services.now();
    // A retention too long to subtract from now keeps every job.
    let cutoff = chrono::Duration::from_std(settings.job_retention)
        .ok()
        .and_then(|retention| now.checked_sub_signed(retention));
    if let Some(cutoff) = cutoff {
        let pruned = services
            .store
            .prune_jobs(cutoff, 50_000)
            .await
            .context("pruning finished jobs")?;
        if pruned > 0 {
            tracing::debug!(pruned, "pruned finished jobs");
        }
    }
    // Change rows serve replicas that are catching up; a day is far longer than any catch-up,
    // and a replica cut off for longer reloads its read model whole.
    if let Some(cutoff) = now.checked_sub_signed(chrono::Duration::days(1)) {
        services
            .store
            .prune_changes(cutoff, 50_000)
            .await
            .context("pruning the change feed")?;
    }
    // Host leases are given back as each request's answer arrives; one whose replica died, or
    // whose host is never asked again, lapsed long ago and only takes room.
    services
        .store
        .prune_host_leases(now)
        .await
        .context("pruning lapsed host leases")?;
    let pruned = retention::prune(services, settings.keep_transcripts, PRUNE_PER_RUN)
        .await
        .context("pruning probe transcripts")?;
    if pruned.dropped > 0 {
        tracing::info!(
            examined = pruned.examined,
            pruned = pruned.dropped,
            "pruned probe transcripts"
        );
    }
    let pruned = retention::prune_snapshots(services, settings.keep_snapshots, PRUNE_PER_RUN)
        .await
        .context("pruning card snapshots")?;
    if pruned.dropped > 0 {
        tracing::info!(
            examined = pruned.examined,
            pruned = pruned.dropped,
            "pruned card snapshots' raw bytes"
        );
    }
    let pruned =
        retention::prune_deliveries(services, settings.keep_deliveries, DELIVERIES_PER_RUN)
            .await
            .context("pruning webhook deliveries")?;
    if pruned > 0 {
        tracing::info!(pruned, "pruned finished webhook deliveries");
    }
    Ok(())
}
