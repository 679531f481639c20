//! The operational view: whether the database answers, and the work queue.

use super::ServiceError;
use crate::domain::ids::JobId;
use crate::domain::job::{Job, JobStatus, QueueStats};
use crate::domain::time::Timestamp;
use crate::metrics::Snapshot;
use crate::storage::Store;

/// Whether the database answers.
pub(crate) async fn ping(store: &Store) -> Result<(), ServiceError> {
    Ok(store.ping().await?)
}

/// Which backend the store runs on: `sqlite` or `postgres`.
pub(crate) fn backend(store: &Store) -> &'static str {
    store.backend().as_str()
}

/// Jobs, newest first, optionally of one status.
pub(crate) async fn jobs(
    store: &Store,
    status: Option<JobStatus>,
    after: Option<JobId>,
    limit: u32,
) -> Result<Vec<Job>, ServiceError> {
    Ok(store.jobs(status, after, limit).await?)
}

/// The queue's counts and its oldest due job at `now`.
pub(crate) async fn queue(store: &Store, now: Timestamp) -> Result<QueueStats, ServiceError> {
    Ok(store.queue_stats(now).await?)
}

/// The registry's state for a metrics scrape: three grouped counts, the queue, the ledger
/// head and the failing webhook receivers.
pub(crate) async fn metrics_snapshot(services: &super::Services) -> Result<Snapshot, ServiceError> {
    let (store, view, now) = (&services.store, &services.view, services.now());
    let counts = store.counts().await?;
    let queue = store.queue_stats(now).await?;
    let mut probe_runs: Vec<(String, i64)> = Vec::new();
    for (status, passed, n) in counts.probe_runs {
        let outcome = match (status.as_str(), passed) {
            ("finished", Some(true)) => "passed",
            ("finished", _) => "failed",
            (other, _) => other,
        };
        match probe_runs.iter_mut().find(|(o, _)| o == outcome) {
            Some((_, total)) => *total += n,
            None => probe_runs.push((outcome.to_string(), n)),
        }
    }
    Ok(Snapshot {
        subjects: counts.subjects,
        jobs: counts.jobs,
        probe_runs,
        queue_lag_seconds: queue
            .oldest_due
            .map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0),
        ledger_head: view.applied().ledger_seq,
        failing_subscriptions: super::webhooks::failing_count(services).await?,
        track_classes: view
            .classes()
            .iter()
            .map(|(class, n)| (class.as_str().to_string(), *n as i64))
            .collect(),
    })
}
