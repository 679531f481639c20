//! A run's life in the store: started, finished with its evidence and the ledger events its
//! judgement causes (one transaction, under the ledger lock), or aborted.

use serde_json::Value;
use uuid::Uuid;

use crate::domain::card::CardSnapshot;
use crate::domain::decision::JudgementFacts;
use crate::domain::gate::{Subject, SubjectState};
use crate::domain::ids::{CalleeId, JobId, ProbeRunId};
use crate::domain::ledger::{EventBody, EventRecord, NewEvent};
use crate::domain::probe::track::Contribution;
use crate::domain::probe::{Judgement, Observations};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::changes::{Changed, RecordChange};
use crate::storage::jobs::FinishLeased;
use crate::storage::ledger::AppendEvents;
use crate::storage::lock::LockLedger;
use crate::storage::{BeginWrite, Store, StoreError, dispatch};

/// What a finished cycle stores.
pub struct FinishedRun<'a> {
    pub judgement: &'a Judgement,
    pub observations: &'a Observations,
    /// What the run adds to its subject's track record.
    pub contribution: &'a Contribution,
    pub transcript: &'a Value,
    pub actor: &'a str,
    /// The authenticated extended card the run fetched, kept as a snapshot of its own.
    pub extended_card: Option<&'a CardSnapshot>,
}

/// The subject's state read inside a transaction.
async fn current_state<'c, DB>(
    tx: &mut sqlx::Transaction<'c, DB>,
    callee_id: CalleeId,
    version: ProtocolVersion,
) -> Result<Option<SubjectState>, StoreError>
where
    DB: sqlx::Database,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
    Uuid: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    (String,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let row: Option<(String,)> =
        sqlx::query_as("select state from subjects where callee_id = $1 and protocol_version = $2")
            .bind(callee_id.0)
            .bind(version.to_string())
            .fetch_optional(&mut **tx)
            .await?;
    row.map(|(s,)| serde_json::from_str(&s).map_err(StoreError::corrupt))
        .transpose()
}

impl Store {
    /// Marks a run running (it has started talking to the callee) and records the ledger head
    /// seq as of its start; returns that seq.
    pub async fn start_probe_run(
        &self,
        id: ProbeRunId,
        interface_url: &str,
        wire: &str,
        now: Timestamp,
    ) -> Result<i64, StoreError> {
        let (head,): (i64,) = dispatch!(self, |pool| {
            sqlx::query_as(
                "update probe_runs set status = 'running', started_at = $2, interface_url = $3, wire = $4, \
                 start_seq = (select coalesce(max(seq), 0) from ledger) \
                 where id = $1 and status = 'queued' returning start_seq",
            )
            .bind(id.0)
            .bind(now)
            .bind(interface_url)
            .bind(wire)
            .fetch_one(pool)
            .await
        })?;
        Ok(head)
    }

    /// Records a finished cycle, the ledger events its outcome causes and the job's completion,
    /// in one transaction. `outcome` turns the subject's state *as of this transaction* into
    /// events, so a concurrent demotion cannot be overtaken by a stale promotion. `clock` is
    /// read once the evidence is stored: the events are stamped when they are appended.
    pub async fn finish_probe_run(
        &self,
        id: ProbeRunId,
        job: Option<(JobId, &str)>,
        finished: FinishedRun<'_>,
        outcome: impl FnOnce(&SubjectState) -> Vec<EventBody> + Send,
        clock: impl Fn() -> Timestamp + Send,
    ) -> Result<Vec<(EventRecord, Subject)>, StoreError> {
        let run = self.probe_run(id).await?;
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            // The evidence first, before the ledger lock: a transcript is up to 2 MiB of JSON,
            // and storing it (Postgres compresses it: 40 ms for a typical run here) must
            // neither hold up every other append nor sit between the events' `recorded_at`
            // and their commit, which is what a webhook's latency is measured from.
            let stored = sqlx::query(
                "update probe_runs set passed = $2, judgement = $3, observations = $4, \
                 transcript = $5, facts = $6, record = $7 where id = $1 and status = 'running'",
            )
            .bind(id.0)
            .bind(finished.judgement.verdict.passed)
            .bind(serde_json::to_string(finished.judgement).expect("judgements serialize"))
            .bind(serde_json::to_string(finished.observations).expect("observations serialize"))
            .bind(finished.transcript.to_string())
            .bind(
                serde_json::to_string(&JudgementFacts::from(finished.judgement))
                    .expect("facts serialize"),
            )
            .bind(serde_json::to_string(finished.contribution).expect("records serialize"))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            let not_running =
                || StoreError::Conflict(format!("probe run {id} is not running; it cannot finish"));
            if stored != 1 {
                return Err(not_running());
            }
            if let Some(snapshot) = finished.extended_card {
                crate::storage::snapshot_row::insert_snapshot_query(snapshot)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.lock_ledger().await?;
            let now = clock();
            // Read under the ledger lock: the state the events are decided on.
            let state = current_state(&mut tx, run.callee_id, run.protocol_version)
                .await?
                .ok_or(StoreError::NotFound)?;
            let events: Vec<NewEvent> = outcome(&state)
                .into_iter()
                .map(|body| NewEvent {
                    callee_id: run.callee_id,
                    protocol_version: run.protocol_version,
                    body,
                    actor: finished.actor.to_string(),
                })
                .collect();
            // Fenced: a worker that lost its lease (another took the job over) finishes
            // nothing and appends nothing; neither does a run that is no longer running.
            if let Some((job, owner)) = job {
                tx.finish_leased(job, owner, now).await?;
            }
            let (appended, leased) = tx
                .append_events(&events, now, self.lessee(now).as_ref())
                .await?;
            let seqs: Vec<i64> = appended.iter().map(|(e, _)| e.seq).collect();
            let updated = sqlx::query(
                "update probe_runs set status = 'finished', finished_at = $2, ledger_seqs = $3 \
                 where id = $1 and status = 'running'",
            )
            .bind(id.0)
            .bind(now)
            .bind(serde_json::to_string(&seqs).expect("numbers serialize"))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if updated != 1 {
                return Err(not_running());
            }
            sqlx::query("delete from push_deliveries where token = $1")
                .bind(run.push_token.clone())
                .execute(&mut *tx)
                .await?;
            // The subject's newest finished run is this one now.
            tx.record_change(Changed::Callee(run.callee_id), now)
                .await?;
            self.commit_handing_off(tx, leased).await?;
            Ok(appended)
        })
    }

    /// Marks a queued or running run aborted (it never promotes).
    pub async fn abort_probe_run(
        &self,
        id: ProbeRunId,
        error: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query(
                "update probe_runs set status = 'aborted', finished_at = $2, error = $3 \
                 where id = $1 and status in ('queued', 'running')",
            )
            .bind(id.0)
            .bind(now)
            .bind(error)
            .execute(pool)
            .await?;
            // Its deliveries served only the wait; an aborted run keeps none.
            sqlx::query(
                "delete from push_deliveries where token = \
                 (select push_token from probe_runs where id = $1)",
            )
            .bind(id.0)
            .execute(pool)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// At start: runs cut short by a crash or shutdown are aborted. With `all`, every run not
    /// finished (single process); otherwise only runs whose job lease expired.
    pub async fn abort_orphaned_runs(&self, all: bool, now: Timestamp) -> Result<u64, StoreError> {
        let n = dispatch!(self, |pool| {
            sqlx::query(
                "update probe_runs set status = 'aborted', finished_at = $1, \
                 error = 'cut short: cardgate stopped or crashed while the probe ran' \
                 where status = 'running' and ($2 or id in (select probe_run_id from jobs \
                 where status = 'running' and lease_until < $1 and probe_run_id is not null))",
            )
            .bind(now)
            .bind(all)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
        })?;
        Ok(n)
    }
}
