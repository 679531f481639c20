//! Card snapshots, and the transactions that record a fetch together with its ledger events.

use uuid::Uuid;

use super::callees::insert_callee_query;
use super::changes::{Changed, RecordChange};
use super::jobs::FinishLeased;
use super::ledger::AppendEvents;
use super::probes::QueueProbe;
use super::snapshot_row::{
    SnapshotRow, insert_snapshot_query, snapshot_columns, snapshot_summary_columns,
};
use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::callee::{Callee, FetchState};
use crate::domain::card::CardSnapshot;
use crate::domain::credential::StoredCredential;
use crate::domain::gate::Subject;
use crate::domain::ids::{CalleeId, JobId, SnapshotId};
use crate::domain::job::Job;
use crate::domain::ledger::{EventRecord, NewEvent};
use crate::domain::probe::ProbeRun;
use crate::domain::time::Timestamp;

/// One refresh's outcome, as `Store::record_refresh` writes it.
#[derive(Clone, Copy)]
pub struct RefreshRecord<'a> {
    pub callee_id: CalleeId,
    /// The callee's `refresh_generation` the outcome was decided on.
    pub generation: i64,
    /// The new snapshot, if a body was fetched and it differs from the newest one.
    pub snapshot: Option<&'a CardSnapshot>,
    pub fetch: &'a FetchState,
    pub events: &'a [NewEvent],
    /// The queue job (and its lease holder) this refresh completes.
    pub job: Option<(JobId, &'a str)>,
    /// Probes the events call for, queued in the same transaction (skipped if one is active).
    pub probes: &'a [(ProbeRun, Job)],
}

impl Store {
    /// Registers a callee with its first (trusted) snapshot, the events that create its
    /// subjects and its credentials, all in one transaction: nothing is stored unless
    /// everything is.
    pub async fn register_callee(
        &self,
        callee: &Callee,
        snapshot: &CardSnapshot,
        events: &[NewEvent],
        probes: &[(ProbeRun, Job)],
        credentials: &[StoredCredential],
        now: Timestamp,
    ) -> Result<Vec<(EventRecord, Subject)>, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            insert_callee_query(callee).execute(&mut *tx).await?;
            insert_snapshot_query(snapshot).execute(&mut *tx).await?;
            // Before the probes are queued: the first probe presents them.
            for credential in credentials {
                super::credentials::upsert!(tx, credential)?;
            }
            sqlx::query(
                "update callees set last_fetch_at = $2, last_fetch_status = 'fetched' where id = $1",
            )
            .bind(callee.id.0)
            .bind(snapshot.fetched_at)
            .execute(&mut *tx)
            .await?;
            let (appended, leased) = tx
                .append_events(events, now, self.lessee(now).as_ref())
                .await?;
            for (run, job) in probes {
                tx.queue_probe(run, job).await?;
            }
            tx.record_change(Changed::Callee(callee.id), now).await?;
            self.commit_handing_off(tx, leased).await?;
            Ok(appended)
        })
    }

    /// Records one refresh: the new snapshot (if a body was fetched), the fetch outcome on the
    /// callee, and the events it causes, in one transaction.
    ///
    /// `generation` is the callee's `refresh_generation` the caller decided on; if another
    /// refresh committed since, nothing is written and `Conflict` asks the caller to decide again.
    pub async fn record_refresh(
        &self,
        refresh: &RefreshRecord<'_>,
        now: Timestamp,
    ) -> Result<Vec<(EventRecord, Subject)>, StoreError> {
        let RefreshRecord {
            callee_id,
            generation,
            snapshot,
            fetch,
            events,
            job,
            probes,
        } = *refresh;
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            // Serialize with other refreshes of this callee: the generation bump is the lock.
            let bumped = sqlx::query(
                "update callees set last_fetch_at = $2, last_fetch_status = $3, last_fetch_error = $4, \
                 fetch_failures = $5, next_fetch_at = $6, refresh_generation = refresh_generation + 1 \
                 where id = $1 and refresh_generation = $7",
            )
            .bind(callee_id.0)
            .bind(fetch.last_at)
            .bind(fetch.status.map(|s| s.as_str()))
            .bind(fetch.error.as_deref())
            .bind(fetch.failures)
            .bind(fetch.next_at)
            .bind(generation)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if bumped == 0 {
                return Err(StoreError::Conflict(
                    "another refresh of this callee committed first".into(),
                ));
            }
            if let Some(snapshot) = snapshot {
                insert_snapshot_query(snapshot).execute(&mut *tx).await?;
            }
            let (appended, leased) = tx
                .append_events(events, now, self.lessee(now).as_ref())
                .await?;
            for (run, probe) in probes {
                tx.queue_probe(run, probe).await?;
            }
            // Fenced like a probe: a refresh whose worker lost the lease commits nothing.
            if let Some((job, owner)) = job {
                tx.finish_leased(job, owner, now).await?;
            }
            // A refresh that fetched nothing new and moved no gate changes no decision.
            if snapshot.is_some() || !appended.is_empty() {
                tx.record_change(Changed::Callee(callee_id), now).await?;
            }
            self.commit_handing_off(tx, leased).await?;
            Ok(appended)
        })
    }

    /// The newest snapshot of the callee's public card, without its raw bytes (`raw` is
    /// empty).
    pub async fn latest_snapshot(
        &self,
        callee_id: CalleeId,
    ) -> Result<Option<CardSnapshot>, StoreError> {
        let row: Option<SnapshotRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                snapshot_summary_columns!(),
                " from card_snapshots where callee_id = $1 and kind = 'public' \
                 order by id desc limit 1"
            ))
            .bind(callee_id.0)
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }

    /// The newest public snapshot of every callee with an id in `from..=to`, without raw
    /// bytes: one page of the read model's bulk load.
    pub async fn newest_snapshots(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<CardSnapshot>, StoreError> {
        let rows: Vec<SnapshotRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                snapshot_columns!(),
                " from (select ",
                snapshot_summary_columns!(),
                ", row_number() over (partition by callee_id order by id desc) as newest \
                 from card_snapshots where callee_id between $1 and $2 and kind = 'public') as s \
                 where newest = 1"
            ))
            .bind(from.0)
            .bind(to.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Snapshots newest first, before the cursor `before`, without raw bytes: of every kind,
    /// or of `kind` only (`public`, `extended`).
    pub async fn snapshots(
        &self,
        callee_id: CalleeId,
        before: Option<SnapshotId>,
        kind: Option<&str>,
        limit: u32,
    ) -> Result<Vec<CardSnapshot>, StoreError> {
        // The max UUID sorts last in both backends, so "before max" is "from the newest".
        let before = before.map_or(Uuid::max(), |id| id.0);
        let rows: Vec<SnapshotRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                snapshot_summary_columns!(),
                " from card_snapshots where callee_id = $1 and id < $2 \
                 and ($4 = '' or kind = $4) order by id desc limit $3"
            ))
            .bind(callee_id.0)
            .bind(before)
            .bind(i64::from(limit))
            .bind(kind.unwrap_or_default())
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// One snapshot of this callee, with its raw bytes.
    pub async fn snapshot(
        &self,
        callee_id: CalleeId,
        id: SnapshotId,
    ) -> Result<CardSnapshot, StoreError> {
        let row: SnapshotRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                snapshot_columns!(),
                " from card_snapshots where callee_id = $1 and id = $2"
            ))
            .bind(callee_id.0)
            .bind(id.0)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// Public snapshots past their callee's newest `keep` that still hold their bytes, in id
    /// order after `after`: retention's candidates, with their callees.
    pub async fn snapshots_past_retention(
        &self,
        keep: u32,
        after: Option<SnapshotId>,
        limit: u32,
    ) -> Result<Vec<(SnapshotId, CalleeId)>, StoreError> {
        let rows: Vec<(Uuid, Uuid)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select id, callee_id from (select id, callee_id, \
                 raw_pruned_at is null as held, row_number() over \
                 (partition by callee_id order by id desc) as n \
                 from card_snapshots where kind = 'public') ranked \
                 where n > $1 and held and id > $3 order by id limit $2",
            )
            .bind(i64::from(keep))
            .bind(i64::from(limit))
            .bind(after.map_or(Uuid::nil(), |id| id.0))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(id, callee)| (id.into(), callee.into()))
            .collect())
    }

    /// The `data` of every event about `callees` of one of `kinds`, as stored.
    pub async fn event_data(
        &self,
        callees: &[CalleeId],
        kinds: &[&str],
    ) -> Result<Vec<String>, StoreError> {
        if callees.is_empty() || kinds.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, |pool| {
            let mut data = Vec::new();
            for chunk in callees.chunks(500) {
                let mut select = sqlx::QueryBuilder::new("select data from ledger where kind in (");
                let mut list = select.separated(", ");
                for kind in kinds {
                    list.push_bind(*kind);
                }
                select.push(") and callee_id in (");
                let mut list = select.separated(", ");
                for callee in chunk {
                    list.push_bind(callee.0);
                }
                select.push(")");
                let rows: Vec<(String,)> = select.build_query_as().fetch_all(pool).await?;
                data.extend(rows.into_iter().map(|(d,)| d));
            }
            Ok::<_, StoreError>(data)
        })
    }

    /// Drops these snapshots' raw bytes and the card parsed from them (the assessment keeps
    /// its trust, problem, signature verdict and uncovered fields), recording when; returns
    /// how many were dropped.
    pub async fn prune_snapshots(
        &self,
        snapshots: &[SnapshotId],
        now: Timestamp,
    ) -> Result<u64, StoreError> {
        let prune = match self.backend() {
            super::Backend::Postgres => {
                "update card_snapshots set raw = $3, raw_pruned_at = $2, \
                 assessment = (assessment::jsonb - 'card')::text \
                 where id = $1 and raw_pruned_at is null"
            }
            super::Backend::Sqlite => {
                "update card_snapshots set raw = $3, raw_pruned_at = $2, \
                 assessment = json_remove(assessment, '$.card') \
                 where id = $1 and raw_pruned_at is null"
            }
        };
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let mut pruned = 0;
            for snapshot in snapshots {
                pruned += sqlx::query(prune)
                    .bind(snapshot.0)
                    .bind(now)
                    .bind(Vec::<u8>::new())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            Ok(pruned)
        })
    }
}
