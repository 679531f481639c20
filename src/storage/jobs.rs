//! The durable work queue: enqueueing (idempotent per dedup key), claiming with a lease,
//! renewing, finishing, and recovering jobs whose worker died.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::ids::{JobId, ProbeRunId};
use crate::domain::job::{Job, JobKind, JobStatus, QueueStats};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;

#[derive(sqlx::FromRow)]
pub(super) struct JobRow {
    id: Uuid,
    kind: String,
    callee_id: Uuid,
    protocol_version: Option<String>,
    reason: String,
    dedup_key: String,
    status: String,
    attempts: i32,
    run_after: DateTime<Utc>,
    lease_owner: Option<String>,
    lease_until: Option<DateTime<Utc>>,
    last_error: Option<String>,
    probe_run_id: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<JobRow> for Job {
    type Error = StoreError;
    fn try_from(r: JobRow) -> Result<Self, StoreError> {
        Ok(Job {
            id: r.id.into(),
            kind: JobKind::parse(&r.kind)
                .ok_or_else(|| StoreError::corrupt(format!("job kind {}", r.kind)))?,
            callee_id: r.callee_id.into(),
            protocol_version: r
                .protocol_version
                .map(|v| ProtocolVersion::parse_exact(&v).map_err(StoreError::corrupt))
                .transpose()?,
            reason: r.reason,
            dedup_key: r.dedup_key,
            status: JobStatus::parse(&r.status)
                .ok_or_else(|| StoreError::corrupt(format!("job status {}", r.status)))?,
            attempts: r.attempts,
            run_after: r.run_after,
            lease_owner: r.lease_owner,
            lease_until: r.lease_until,
            last_error: r.last_error,
            probe_run_id: r.probe_run_id.map(Into::into),
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

macro_rules! job_columns {
    () => {
        "id, kind, callee_id, protocol_version, reason, dedup_key, status, attempts, run_after, \
         lease_owner, lease_until, last_error, probe_run_id, created_at, updated_at"
    };
}

/// Marks a job done (or, with an error, failed for good) if `owner` still holds it. Also used
/// inside the transaction that records a job's outcome, so the two commit together.
fn finish_job_query<DB>(
    id: JobId,
    owner: &str,
    error: Option<&str>,
    now: Timestamp,
) -> sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    Uuid: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DateTime<Utc>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let status = if error.is_some() { "failed" } else { "done" };
    sqlx::query(
        "update jobs set status = $3, last_error = $4, lease_owner = null, lease_until = null, \
         updated_at = $5 where id = $1 and lease_owner = $2 and status = 'running'",
    )
    .bind(id.0)
    .bind(owner.to_string())
    .bind(status.to_string())
    .bind(error.map(str::to_string))
    .bind(now)
}

/// Completing a job inside the transaction that records its outcome, so the two commit
/// together.
pub(crate) trait FinishLeased {
    /// Marks `job` done if `owner` still holds it. `Conflict` when the worker lost its lease
    /// (another took the job over): its transaction must not commit.
    async fn finish_leased(
        &mut self,
        job: JobId,
        owner: &str,
        now: Timestamp,
    ) -> Result<(), StoreError>;
}

macro_rules! impl_finish_leased {
    ($db:ty) => {
        impl FinishLeased for sqlx::Transaction<'static, $db> {
            async fn finish_leased(
                &mut self,
                job: JobId,
                owner: &str,
                now: Timestamp,
            ) -> Result<(), StoreError> {
                let rows = finish_job_query(job, owner, None, now)
                    .execute(&mut **self)
                    .await?
                    .rows_affected();
                if rows == 1 {
                    Ok(())
                } else {
                    Err(StoreError::Conflict(format!(
                        "job {job} is no longer leased to {owner}"
                    )))
                }
            }
        }
    };
}

impl_finish_leased!(sqlx::Postgres);
impl_finish_leased!(sqlx::Sqlite);

/// What an insert does when an active job already has the new job's dedup key.
#[derive(Clone, Copy)]
pub(super) enum OnDuplicate {
    /// A unique violation (`StoreError::Conflict`).
    Fail,
    /// Nothing: zero rows affected (`on conflict do nothing` covers the partial unique index
    /// in both dialects).
    Skip,
}

/// Inserts `jobs` (at most a chunk's worth: 15 binds a row, and SQLite takes 32,766), one
/// active job per dedup key. The one statement for a single job and for a sweep's page, so
/// the columns are bound in one place.
pub(super) fn insert_jobs_query<DB>(
    jobs: &[Job],
    on_duplicate: OnDuplicate,
) -> sqlx::QueryBuilder<DB>
where
    DB: sqlx::Database,
    Uuid: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<Uuid>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i32: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DateTime<Utc>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<DateTime<Utc>>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut insert = sqlx::QueryBuilder::new(concat!("insert into jobs (", job_columns!(), ") "));
    insert.push_values(jobs, |mut row, job| {
        row.push_bind(job.id.0)
            .push_bind(job.kind.as_str().to_string())
            .push_bind(job.callee_id.0)
            .push_bind(job.protocol_version.map(|v| v.to_string()))
            .push_bind(job.reason.clone())
            .push_bind(job.dedup_key.clone())
            .push_bind(job.status.as_str().to_string())
            .push_bind(job.attempts)
            .push_bind(job.run_after)
            .push_bind(job.lease_owner.clone())
            .push_bind(job.lease_until)
            .push_bind(job.last_error.clone())
            .push_bind(job.probe_run_id.map(|id| id.0))
            .push_bind(job.created_at)
            .push_bind(job.updated_at);
    });
    if matches!(on_duplicate, OnDuplicate::Skip) {
        insert.push(" on conflict do nothing");
    }
    insert
}

impl Store {
    /// Enqueues `job` unless an active job has its dedup key; returns whether it was added.
    pub async fn enqueue(&self, job: &Job) -> Result<bool, StoreError> {
        match dispatch!(self, |pool| insert_jobs_query(
            std::slice::from_ref(job),
            OnDuplicate::Fail
        )
        .build()
        .execute(pool)
        .await
        .map(drop))
        {
            Ok(()) => Ok(true),
            Err(e) => match StoreError::from(e) {
                StoreError::Conflict(_) => Ok(false),
                other => Err(other),
            },
        }
    }

    /// Enqueues many jobs in one transaction, skipping any whose dedup key is already active;
    /// returns how many were added.
    pub async fn enqueue_many(&self, jobs: &[Job]) -> Result<u64, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let mut added = 0;
            // Many rows a statement: a sweep's page of 1,000 jobs was 1,000 round trips.
            for chunk in jobs.chunks(1000) {
                let mut insert = insert_jobs_query(chunk, OnDuplicate::Skip);
                added += insert.build().execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
            Ok(added)
        })
    }

    /// The active (queued or running) job with this dedup key.
    pub async fn active_job(&self, dedup_key: &str) -> Result<Option<Job>, StoreError> {
        let row: Option<JobRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                job_columns!(),
                " from jobs where dedup_key = $1 and status in ('queued', 'running')"
            ))
            .bind(dedup_key)
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }

    /// Claims the next job for `owner` until `lease_until`: first one whose lease expired (its
    /// worker died), else the oldest due queued one. Postgres: `FOR UPDATE SKIP LOCKED`, so
    /// replicas never claim the same job. SQLite: each statement runs under the database's one
    /// write lock. Each lookup uses its own index, so claiming stays cheap on a long queue.
    pub async fn claim_job(
        &self,
        owner: &str,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> Result<Option<Job>, StoreError> {
        for pick in [PickFrom::ExpiredLease, PickFrom::Queue] {
            let sql = claim_sql(pick, matches!(self.db, super::Db::Postgres(_)));
            let row: Option<JobRow> = dispatch!(self, |pool| {
                sqlx::query_as(sql)
                    .bind(owner)
                    .bind(lease_until)
                    .bind(now)
                    .fetch_optional(pool)
                    .await
            })?;
            if let Some(row) = row {
                return row.try_into().map(Some);
            }
        }
        Ok(None)
    }

    /// Deletes finished jobs last touched before `before` (at most `limit` per call, so a
    /// sweep stays bounded). Done jobs are bookkeeping; what they did is in the ledger.
    pub async fn prune_jobs(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let n = dispatch!(self, |pool| {
            sqlx::query(
                "delete from jobs where id in (select id from jobs where status in ('done', 'failed') \
                 and updated_at < $1 limit $2)",
            )
            .bind(before)
            .bind(i64::from(limit))
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
        })?;
        Ok(n)
    }

    /// Extends the lease; `false` when the job is no longer this owner's (it was reclaimed).
    pub async fn renew_lease(
        &self,
        id: JobId,
        owner: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let n = dispatch!(self, |pool| {
            sqlx::query(
                "update jobs set lease_until = $3, updated_at = $4 \
                 where id = $1 and lease_owner = $2 and status = 'running'",
            )
            .bind(id.0)
            .bind(owner)
            .bind(until)
            .bind(now)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
        })?;
        Ok(n == 1)
    }

    /// Marks a job done (or failed for good), if this owner still holds it.
    pub async fn finish_job(
        &self,
        id: JobId,
        owner: &str,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let n = dispatch!(self, |pool| {
            finish_job_query(id, owner, error, now)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        Ok(n == 1)
    }

    /// Puts a held job back in the queue to run at `run_after` (retry, backoff, or shutdown).
    pub async fn requeue_job(
        &self,
        id: JobId,
        owner: &str,
        run_after: Timestamp,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let n = dispatch!(self, |pool| {
            sqlx::query(
                "update jobs set status = 'queued', run_after = $3, last_error = coalesce($4, last_error), \
                 lease_owner = null, lease_until = null, updated_at = $5 where id = $1 and lease_owner = $2 and status = 'running'",
            )
            .bind(id.0)
            .bind(owner)
            .bind(run_after)
            .bind(error)
            .bind(now)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
        })?;
        Ok(n == 1)
    }

    /// Points a probe job at a new probe run (the old one was cut short).
    pub async fn set_job_probe_run(&self, id: JobId, run: ProbeRunId) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query("update jobs set probe_run_id = $2 where id = $1")
                .bind(id.0)
                .bind(run.0)
                .execute(pool)
                .await
                .map(drop)
        })?;
        Ok(())
    }

    /// Jobs, newest first, optionally of one status.
    pub async fn jobs(
        &self,
        status: Option<JobStatus>,
        after: Option<JobId>,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        // Ids are UUIDv7: newest first is descending id, and the cursor is the last id seen.
        let before = after.map_or(Uuid::max(), |id| id.0);
        let rows: Vec<JobRow> = dispatch!(self, |pool| match status {
            Some(status) => {
                sqlx::query_as(concat!(
                    "select ",
                    job_columns!(),
                    " from jobs where status = $1 and id < $2 order by id desc limit $3"
                ))
                .bind(status.as_str())
                .bind(before)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
            }
            None => {
                sqlx::query_as(concat!(
                    "select ",
                    job_columns!(),
                    " from jobs where id < $1 order by id desc limit $2"
                ))
                .bind(before)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
            }
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn job(&self, id: JobId) -> Result<Job, StoreError> {
        let row: JobRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                job_columns!(),
                " from jobs where id = $1"
            ))
            .bind(id.0)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// At start: jobs held by a worker that is gone become claimable now. With `all` (a
    /// single-process SQLite deployment) every running job is released; otherwise only those
    /// whose lease expired, since other replicas may be alive.
    pub async fn release_orphaned_jobs(
        &self,
        all: bool,
        now: Timestamp,
    ) -> Result<u64, StoreError> {
        let n = dispatch!(self, |pool| {
            sqlx::query(
                "update jobs set status = 'queued', run_after = $1, lease_owner = null, lease_until = null, \
                 updated_at = $1 where status = 'running' and ($2 or lease_until < $1)",
            )
            .bind(now)
            .bind(all)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
        })?;
        Ok(n)
    }

    /// How the queue stands: counts by status and the oldest due queued job.
    pub async fn queue_stats(&self, now: Timestamp) -> Result<QueueStats, StoreError> {
        let rows: Vec<(String, i64)> = dispatch!(self, |pool| {
            sqlx::query_as("select status, count(*) from jobs where status in ('queued', 'running', 'failed') group by status")
                .fetch_all(pool)
                .await
        })?;
        let oldest: Option<(DateTime<Utc>,)> = dispatch!(self, |pool| {
            sqlx::query_as("select run_after from jobs where status = 'queued' and run_after <= $1 order by run_after limit 1")
                .bind(now)
                .fetch_optional(pool)
                .await
        })?;
        let count = |s: &str| {
            rows.iter()
                .find(|(status, _)| status == s)
                .map_or(0, |(_, n)| *n)
        };
        Ok(QueueStats {
            queued: count("queued"),
            running: count("running"),
            failed: count("failed"),
            oldest_due: oldest.map(|(t,)| t),
        })
    }
}

#[derive(Clone, Copy)]
enum PickFrom {
    ExpiredLease,
    Queue,
}

/// The claim statement for `pick`. Postgres adds `FOR UPDATE SKIP LOCKED` so replicas never
/// claim the same job; SQLite runs each statement under its one write lock.
fn claim_sql(pick: PickFrom, postgres: bool) -> &'static str {
    macro_rules! claim {
        ($candidates:expr, $lock:literal) => {
            concat!(
                "update jobs set status = 'running', lease_owner = $1, lease_until = $2, \
                 attempts = attempts + 1, updated_at = $3 where id = (select id from jobs where ",
                $candidates,
                $lock,
                ") returning ",
                job_columns!()
            )
        };
    }
    // The candidate each pick looks for; each has its own index (migration 0006).
    macro_rules! expired {
        () => {
            "status = 'running' and lease_until < $3 limit 1"
        };
    }
    macro_rules! due {
        () => {
            "status = 'queued' and run_after <= $3 order by run_after limit 1"
        };
    }
    match (pick, postgres) {
        (PickFrom::ExpiredLease, true) => claim!(expired!(), " for update skip locked"),
        (PickFrom::ExpiredLease, false) => claim!(expired!(), ""),
        (PickFrom::Queue, true) => claim!(due!(), " for update skip locked"),
        (PickFrom::Queue, false) => claim!(due!(), ""),
    }
}
