//! Probe runs and the push deliveries cardgate's webhook receives for them.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::changes::{Changed, RecordChange};
use super::jobs::{FinishLeased, OnDuplicate, insert_jobs_query};
use super::ledger::AppendEvents;
use super::lock::LockLedger;
use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::card::CardSnapshot;
use crate::domain::decision::{JudgementFacts, ProbeFacts};
use crate::domain::gate::{ProbeStart, Subject, SubjectState};
use crate::domain::ids::{CalleeId, JobId, ProbeRunId};
use crate::domain::job::Job;
use crate::domain::ledger::{EventBody, EventRecord, NewEvent};
use crate::domain::probe::{
    Judgement, Observations, ProbeRun, PushDelivery, PushReceipt, RunEvidence, RunStart, RunState,
    RunStatus,
};
use crate::domain::retention::{Candidate, EVIDENCE_KINDS};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;

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

#[derive(sqlx::FromRow)]
struct RunRow {
    id: Uuid,
    callee_id: Uuid,
    protocol_version: String,
    status: String,
    reason: String,
    requested_by: String,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    interface_url: Option<String>,
    wire: Option<String>,
    push_token: String,
    binding: Option<String>,
    passed: Option<bool>,
    judgement: Option<String>,
    observations: Option<String>,
    transcript: Option<String>,
    error: Option<String>,
    ledger_seqs: Option<String>,
    start_seq: Option<i64>,
    transcript_pruned_at: Option<DateTime<Utc>>,
}

fn json<T: serde::de::DeserializeOwned>(text: Option<String>) -> Result<Option<T>, StoreError> {
    text.map(|t| serde_json::from_str(&t).map_err(StoreError::corrupt))
        .transpose()
}

impl TryFrom<RunRow> for ProbeRun {
    type Error = StoreError;
    fn try_from(r: RunRow) -> Result<Self, StoreError> {
        let state = run_state(&r)?;
        Ok(ProbeRun {
            id: r.id.into(),
            callee_id: r.callee_id.into(),
            protocol_version: ProtocolVersion::parse_exact(&r.protocol_version)
                .map_err(StoreError::corrupt)?,
            reason: r.reason,
            requested_by: r.requested_by,
            created_at: r.created_at,
            push_token: r.push_token,
            binding: r
                .binding
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(StoreError::corrupt)?,
            state,
            ledger_seqs: json::<Vec<i64>>(r.ledger_seqs)?.unwrap_or_default(),
        })
    }
}

/// The run's state from its columns; a row whose columns do not fit its status is corrupt.
fn run_state(r: &RunRow) -> Result<RunState, StoreError> {
    let status = RunStatus::parse(&r.status)
        .ok_or_else(|| StoreError::corrupt(format!("run status {}", r.status)))?;
    let missing =
        |what: &str| StoreError::corrupt(format!("a {} run without its {what}", r.status));
    let start = match (&r.started_at, &r.interface_url, &r.wire) {
        (Some(at), Some(url), Some(wire)) => Some(RunStart {
            at: *at,
            interface_url: url.clone(),
            wire: wire.clone(),
            seq: r.start_seq,
        }),
        _ => None,
    };
    Ok(match status {
        RunStatus::Queued => RunState::Queued,
        RunStatus::Running => RunState::Running(start.ok_or_else(|| missing("start"))?),
        RunStatus::Finished => {
            let evidence = match (
                json::<Observations>(r.observations.clone())?,
                json::<Value>(r.transcript.clone())?,
            ) {
                (Some(observations), Some(transcript)) => Some(Box::new(RunEvidence {
                    observations,
                    transcript,
                    transcript_pruned_at: None,
                })),
                // Retention took the exchanges; what was observed stays.
                (Some(observations), None) if r.transcript_pruned_at.is_some() => {
                    Some(Box::new(RunEvidence {
                        observations,
                        transcript: Value::Array(Vec::new()),
                        transcript_pruned_at: r.transcript_pruned_at,
                    }))
                }
                _ => None,
            };
            let judgement =
                json::<Judgement>(r.judgement.clone())?.ok_or_else(|| missing("judgement"))?;
            // `passed` is stored beside the judgement for queries; the two must agree.
            if r.passed != Some(judgement.verdict.passed) {
                return Err(StoreError::corrupt(
                    "a finished run whose passed and verdict disagree",
                ));
            }
            RunState::Finished {
                start: start.ok_or_else(|| missing("start"))?,
                finished_at: r.finished_at.ok_or_else(|| missing("end"))?,
                judgement: Box::new(judgement),
                evidence,
            }
        }
        RunStatus::Aborted => RunState::Aborted {
            start,
            finished_at: r.finished_at.ok_or_else(|| missing("end"))?,
            reason: r.error.clone().unwrap_or_default(),
        },
    })
}

/// A finished run as decisions read it.
#[derive(sqlx::FromRow)]
struct FactsRow {
    id: Uuid,
    callee_id: Uuid,
    protocol_version: String,
    started_at: Option<DateTime<Utc>>,
    start_seq: Option<i64>,
    facts: Option<String>,
}

impl TryFrom<FactsRow> for (CalleeId, ProtocolVersion, ProbeFacts) {
    type Error = StoreError;
    fn try_from(r: FactsRow) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::corrupt(format!("finished run {} {what}", r.id));
        let facts: JudgementFacts = serde_json::from_str(
            r.facts
                .as_deref()
                .ok_or_else(|| corrupt("has no judgement"))?,
        )
        .map_err(StoreError::corrupt)?;
        let start = ProbeStart {
            head_seq: r.start_seq,
            at: r.started_at.ok_or_else(|| corrupt("has no start"))?,
        };
        let version =
            ProtocolVersion::parse_exact(&r.protocol_version).map_err(StoreError::corrupt)?;
        Ok((
            r.callee_id.into(),
            version,
            facts.of_run(r.id.into(), start),
        ))
    }
}

macro_rules! run_columns {
    () => {
        "id, callee_id, protocol_version, status, reason, requested_by, created_at, started_at, \
         finished_at, interface_url, wire, push_token, binding, passed, judgement, observations, \
         transcript, error, ledger_seqs, start_seq, transcript_pruned_at"
    };
}

/// Listing columns: the heavy evidence (observations, transcript) is left out.
macro_rules! run_summary_columns {
    () => {
        "id, callee_id, protocol_version, status, reason, requested_by, created_at, started_at, \
         finished_at, interface_url, wire, push_token, binding, passed, judgement, \
         null as observations, null as transcript, error, ledger_seqs, start_seq, \
         transcript_pruned_at"
    };
}

/// What a finished cycle stores.
pub struct FinishedRun<'a> {
    pub judgement: &'a Judgement,
    pub observations: &'a Observations,
    pub transcript: &'a Value,
    pub actor: &'a str,
    /// The authenticated extended card the run fetched, kept as a snapshot of its own.
    pub extended_card: Option<&'a CardSnapshot>,
}

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

    pub async fn probe_run(&self, id: ProbeRunId) -> Result<ProbeRun, StoreError> {
        let row: RunRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_columns!(),
                " from probe_runs where id = $1"
            ))
            .bind(id.0)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// A callee's runs, newest first, without the heavy evidence.
    pub async fn probe_runs(
        &self,
        callee_id: CalleeId,
        before: Option<ProbeRunId>,
        limit: u32,
    ) -> Result<Vec<ProbeRun>, StoreError> {
        let before = before.map_or(Uuid::max(), |id| id.0);
        let rows: Vec<RunRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_summary_columns!(),
                " from probe_runs where callee_id = $1 and id < $2 order by id desc limit $3"
            ))
            .bind(callee_id.0)
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The subject's newest finished run (what decisions read).
    pub async fn latest_finished_probe(
        &self,
        callee_id: CalleeId,
        version: ProtocolVersion,
    ) -> Result<Option<ProbeRun>, StoreError> {
        let row: Option<RunRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_summary_columns!(),
                " from probe_runs where callee_id = $1 and protocol_version = $2 and status = 'finished' \
                 order by start_seq desc nulls last, started_at desc limit 1"
            ))
            .bind(callee_id.0)
            .bind(version.to_string())
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }

    /// What decisions read of the newest finished run of every subject of the callees with an
    /// id in `from..=to` (ordered as [`latest_finished_probe`](Self::latest_finished_probe)
    /// orders them): one page of the read model's bulk load. The newest runs are chosen on
    /// their ids alone, then only their compact facts are read.
    pub async fn newest_probe_facts(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<(CalleeId, ProtocolVersion, ProbeFacts)>, StoreError> {
        let rows: Vec<FactsRow> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id, callee_id, protocol_version, started_at, start_seq, \
                 coalesce(facts, judgement) as facts from probe_runs where id in \
                 (select id from (select id, row_number() over (partition by callee_id, protocol_version \
                  order by start_seq desc nulls last, started_at desc) as newest \
                  from probe_runs where callee_id between $1 and $2 and status = 'finished') as r \
                  where newest = 1)",
            )
            .bind(from.0)
            .bind(to.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The subject's newest run of any status.
    pub async fn latest_probe(
        &self,
        callee_id: CalleeId,
        version: ProtocolVersion,
    ) -> Result<Option<ProbeRun>, StoreError> {
        let row: Option<RunRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                run_summary_columns!(),
                " from probe_runs where callee_id = $1 and protocol_version = $2 order by id desc limit 1"
            ))
            .bind(callee_id.0)
            .bind(version.to_string())
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }

    /// For every subject of the callees with an id in `from..=to` that was ever probed: when
    /// its newest probe run started (or was requested, if it has not started). One query for
    /// the range: what the re-probe sweep reads a page at a time.
    pub async fn newest_probe_starts(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<(CalleeId, ProtocolVersion, Timestamp)>, StoreError> {
        let rows: Vec<(Uuid, String, DateTime<Utc>)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select callee_id, protocol_version, coalesce(started_at, created_at) from \
                 (select callee_id, protocol_version, started_at, created_at, row_number() over \
                 (partition by callee_id, protocol_version order by id desc) as newest \
                 from probe_runs where callee_id between $1 and $2) as r where newest = 1",
            )
            .bind(from.0)
            .bind(to.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter()
            .map(|(callee, version, at)| {
                let version =
                    ProtocolVersion::parse_exact(&version).map_err(StoreError::corrupt)?;
                Ok((CalleeId(callee), version, at))
            })
            .collect()
    }

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
                 transcript = $5, facts = $6 where id = $1 and status = 'running'",
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
            .execute(&mut *tx)
            .await?
            .rows_affected();
            let not_running =
                || StoreError::Conflict(format!("probe run {id} is not running; it cannot finish"));
            if stored != 1 {
                return Err(not_running());
            }
            if let Some(snapshot) = finished.extended_card {
                super::snapshot_row::insert_snapshot_query(snapshot)
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

    /// Creates a fresh queued run for a probe job whose previous run was cut short.
    pub async fn insert_probe_run(&self, run: &ProbeRun) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            insert_run_query(run).execute(pool).await.map(drop)
        })?;
        Ok(())
    }

    /// Stores a webhook delivery if `token` belongs to a running probe; `false` otherwise.
    /// Stores a webhook delivery for the running probe whose token it carries, unless that
    /// run already has `max_per_run` deliveries (checked in the same statement).
    pub async fn record_push_delivery(
        &self,
        token: &str,
        delivery: &PushDelivery,
        max_per_run: usize,
    ) -> Result<PushReceipt, StoreError> {
        let max = i64::try_from(max_per_run).unwrap_or(i64::MAX);
        let (stored, running) = dispatch!(self, |pool| {
            let stored = sqlx::query(
                "insert into push_deliveries (id, token, received_at, headers, body) \
                 select $1, $2, $3, $4, $5 where exists \
                 (select 1 from probe_runs where push_token = $2 and status = 'running') \
                 and (select count(*) from push_deliveries where token = $2) < $6",
            )
            .bind(Uuid::now_v7())
            .bind(token)
            .bind(delivery.received_at)
            .bind(delivery.headers.to_string())
            .bind(&delivery.body)
            .bind(max)
            .execute(pool)
            .await?
            .rows_affected();
            let running = stored == 1
                || sqlx::query_as::<_, (i32,)>(
                    "select 1 from probe_runs where push_token = $1 and status = 'running'",
                )
                .bind(token)
                .fetch_optional(pool)
                .await?
                .is_some();
            Ok::<_, sqlx::Error>((stored == 1, running))
        })?;
        Ok(match (stored, running) {
            (true, _) => PushReceipt::Stored,
            (false, true) => PushReceipt::CapReached,
            (false, false) => PushReceipt::NoRunningProbe,
        })
    }

    /// The deliveries for `token` after the first `skip`, oldest first: a waiting probe reads
    /// each body once.
    pub async fn push_deliveries(
        &self,
        token: &str,
        skip: usize,
    ) -> Result<Vec<PushDelivery>, StoreError> {
        let skip = i64::try_from(skip).unwrap_or(i64::MAX);
        let rows: Vec<(DateTime<Utc>, String, Vec<u8>)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select received_at, headers, body from push_deliveries where token = $1 \
                 order by id limit $3 offset $2",
            )
            .bind(token)
            .bind(skip)
            .bind(i64::MAX)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter()
            .map(|(received_at, headers, body)| {
                Ok(PushDelivery {
                    received_at,
                    headers: serde_json::from_str(&headers).map_err(StoreError::corrupt)?,
                    body,
                })
            })
            .collect()
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

/// Retention (service::retention): the runs whose transcripts may go, and dropping them.
impl Store {
    /// Finished runs past the newest `keep` of their subject that still hold a transcript,
    /// oldest first after the cursor `after`, at most `limit`, with the ledger events each
    /// appended.
    pub async fn runs_past_retention(
        &self,
        keep: u32,
        after: Option<ProbeRunId>,
        limit: u32,
    ) -> Result<Vec<Candidate>, StoreError> {
        let rows: Vec<(Uuid, Option<String>)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id, ledger_seqs from (select id, ledger_seqs, \
                 transcript is not null as held, row_number() over \
                 (partition by callee_id, protocol_version order by id desc) as n \
                 from probe_runs where status = 'finished') ranked \
                 where n > $1 and held and id > $3 order by id limit $2",
            )
            .bind(i64::from(keep))
            .bind(i64::from(limit))
            .bind(after.map_or(Uuid::nil(), |id| id.0))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter()
            .map(|(id, seqs)| {
                Ok(Candidate {
                    run: id.into(),
                    ledger_seqs: json::<Vec<i64>>(seqs)?.unwrap_or_default(),
                })
            })
            .collect()
    }

    /// The seqs of the events in `from..=to` that cite a run as evidence (promotions and
    /// demotions).
    pub async fn evidence_seqs(&self, from: i64, to: i64) -> Result<BTreeSet<i64>, StoreError> {
        let rows: Vec<(i64,)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select seq from ledger where seq between $1 and $2 and kind in ($3, $4)",
            )
            .bind(from)
            .bind(to)
            .bind(EVIDENCE_KINDS[0])
            .bind(EVIDENCE_KINDS[1])
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(|(seq,)| seq).collect())
    }

    /// Drops these runs' transcripts (and the raw bytes of the extended cards they fetched),
    /// recording when; returns how many transcripts were dropped.
    pub async fn prune_transcripts(
        &self,
        runs: &[ProbeRunId],
        now: Timestamp,
    ) -> Result<u64, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let mut pruned = 0;
            for run in runs {
                pruned += sqlx::query(
                    "update probe_runs set transcript = null, transcript_pruned_at = $2 \
                     where id = $1 and transcript is not null",
                )
                .bind(run.0)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                // The extended card it fetched goes with it.
                sqlx::query(
                    "update card_snapshots set raw = $3, raw_pruned_at = $2 \
                     where probe_run_id = $1 and kind = 'extended' and raw_pruned_at is null",
                )
                .bind(run.0)
                .bind(now)
                .bind(Vec::<u8>::new())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(pruned)
        })
    }
}
