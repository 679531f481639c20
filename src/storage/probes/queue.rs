//! Requesting a probe: the queued run and its job, written together.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::job::Job;
use crate::domain::probe::ProbeRun;
use crate::storage::jobs::{OnDuplicate, insert_jobs_query};
use crate::storage::{BeginWrite, Store, StoreError, dispatch};

/// Queueing a probe inside an open write transaction, so that whatever calls for the probe (a
/// version that appeared, a capability first advertised) and the probe itself commit together:
/// a process that dies after the commit has left the probe in the queue for another replica.
pub(crate) trait QueueProbe {
    /// Queues `run` and its `job` unless a probe of the subject is already queued or running;
    /// returns whether it queued them.
    async fn queue_probe(&mut self, run: &ProbeRun, job: &Job) -> Result<bool, StoreError>;
}

/// Inserts a queued run (no evidence yet).
fn insert_run_query<DB>(
    run: &ProbeRun,
) -> sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    Uuid: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DateTime<Utc>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::query(
        "insert into probe_runs (id, callee_id, protocol_version, status, reason, requested_by, \
         created_at, push_token, binding) values ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(run.id.0)
    .bind(run.callee_id.0)
    .bind(run.protocol_version.to_string())
    .bind(run.status().as_str().to_string())
    .bind(run.reason.clone())
    .bind(run.requested_by.clone())
    .bind(run.created_at)
    .bind(run.push_token.clone())
    .bind(run.binding.map(|b| b.as_str().to_string()))
}

macro_rules! impl_queue_probe {
    ($db:ty) => {
        impl QueueProbe for sqlx::Transaction<'static, $db> {
            async fn queue_probe(&mut self, run: &ProbeRun, job: &Job) -> Result<bool, StoreError> {
                // The job references the run, so the run goes first; if the job is a duplicate
                // the run is taken back in the same transaction. (`on conflict do nothing`
                // waits for a concurrent enqueue of the same subject, then skips.)
                insert_run_query(run).execute(&mut **self).await?;
                let queued = insert_jobs_query(std::slice::from_ref(job), OnDuplicate::Skip)
                    .build()
                    .execute(&mut **self)
                    .await?
                    .rows_affected()
                    == 1;
                if !queued {
                    sqlx::query("delete from probe_runs where id = $1")
                        .bind(run.id.0)
                        .execute(&mut **self)
                        .await?;
                }
                Ok(queued)
            }
        }
    };
}

impl_queue_probe!(sqlx::Postgres);

impl_queue_probe!(sqlx::Sqlite);

impl Store {
    /// Creates a queued probe run and its job together. `Conflict` when the subject already has
    /// a queued or running probe.
    pub async fn request_probe(&self, run: &ProbeRun, job: &Job) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            if !tx.queue_probe(run, job).await? {
                return Err(StoreError::Conflict(
                    "a probe of this subject is already queued or running".into(),
                ));
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Creates a fresh queued run for a probe job whose previous run was cut short.
    pub async fn insert_probe_run(&self, run: &ProbeRun) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            insert_run_query(run).execute(pool).await.map(drop)
        })?;
        Ok(())
    }
}
