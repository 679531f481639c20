//! The operational view: whether the database answers, and the work queue.

use super::ServiceError;
use crate::domain::job::{Job, JobStatus, QueueStats};
use crate::domain::time::Timestamp;
use crate::storage::Store;

/// Whether the database answers.
pub async fn ping(store: &Store) -> Result<(), ServiceError> {
    Ok(store.ping().await?)
}

/// Which backend the store runs on: `sqlite` or `postgres`.
pub fn backend(store: &Store) -> &'static str {
    store.backend()
}

/// Jobs, newest first, optionally of one status.
pub async fn jobs(
    store: &Store,
    status: Option<JobStatus>,
    limit: u32,
) -> Result<Vec<Job>, ServiceError> {
    Ok(store.jobs(status, limit).await?)
}

/// The queue's counts and its oldest due job at `now`.
pub async fn queue(store: &Store, now: Timestamp) -> Result<QueueStats, ServiceError> {
    Ok(store.queue_stats(now).await?)
}
