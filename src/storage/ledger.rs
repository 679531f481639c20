//! The ledger: appending events (with the subject state they change, atomically) and reading
//! them back in sequence order.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::callees::{SubjectRow, subject_columns};
use super::changes::{Changed, RecordChange};
use super::lock::LockLedger;
use super::merkle::GrowTree;
use super::webhooks::{Claimed, Lessee, QueueDeliveries};
use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::gate::Subject;
use crate::domain::ids::CalleeId;
use crate::domain::ledger::{EventRecord, GENESIS_HASH, NewEvent};
use crate::domain::time::Timestamp;

#[derive(sqlx::FromRow)]
struct EventRow {
    seq: i64,
    callee_id: Uuid,
    protocol_version: String,
    kind: String,
    data: String,
    actor: String,
    recorded_at: DateTime<Utc>,
    prev_hash: String,
    hash: String,
}

impl From<EventRow> for EventRecord {
    fn from(row: EventRow) -> Self {
        // Stored data that is not JSON any more (someone edited it) is kept as a string: its
        // hash then no longer matches, and verification reports the broken link.
        let data = serde_json::from_str(&row.data).unwrap_or(Value::String(row.data));
        EventRecord {
            seq: row.seq,
            callee_id: row.callee_id.into(),
            protocol_version: row.protocol_version,
            kind: row.kind,
            data,
            actor: row.actor,
            recorded_at: row.recorded_at,
            prev_hash: row.prev_hash,
            hash: row.hash,
        }
    }
}

macro_rules! event_columns {
    () => {
        "seq, callee_id, protocol_version, kind, data, actor, recorded_at, prev_hash, hash"
    };
}

/// The events an append sealed, each with its subject after it, and the deliveries it leased
/// to this process's sender (handed over by [`Store::commit_handing_off`]).
pub(crate) type Appended = (Vec<(EventRecord, Subject)>, Vec<Claimed>);

/// Appending inside an open write transaction, shared by every operation that writes events.
pub(crate) trait AppendEvents: LockLedger {
    /// Appends `events` in order at `now`, updating each subject's folded state. Fails (and the
    /// caller's transaction must roll back) if the gate rules refuse any event.
    /// Deliveries the events queue go to `lessee` at once where they can (see
    /// [`super::webhooks::Handoff`]): returned beside the events, for the caller to hand over
    /// as it commits ([`Store::commit_handing_off`]).
    async fn append_events(
        &mut self,
        events: &[NewEvent],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<Appended, StoreError>;

    /// The stored subject of `event`, if it has one.
    async fn subject_of(&mut self, event: &NewEvent) -> Result<Option<Subject>, StoreError>;

    /// Writes one sealed event.
    async fn insert_event(&mut self, record: &EventRecord) -> Result<(), StoreError>;

    /// Writes a subject's new state: an insert for its first event, else an update.
    async fn save_subject(&mut self, subject: &Subject, exists: bool) -> Result<(), StoreError>;
}

macro_rules! impl_append_events {
    ($db:ty) => {
        impl AppendEvents for sqlx::Transaction<'static, $db> {
            async fn append_events(
                &mut self,
                events: &[NewEvent],
                now: Timestamp,
                lessee: Option<&Lessee>,
            ) -> Result<Appended, StoreError> {
                if events.is_empty() {
                    return Ok((Vec::new(), Vec::new()));
                }
                self.lock_ledger().await?;
                let head: Option<(i64, String)> =
                    sqlx::query_as("select seq, hash from ledger order by seq desc limit 1")
                        .fetch_optional(&mut **self)
                        .await?;
                let (mut seq, mut prev_hash) = head.unwrap_or((0, GENESIS_HASH.to_string()));
                let mut appended = Vec::with_capacity(events.len());
                for event in events {
                    let current = self.subject_of(event).await?;
                    seq += 1;
                    let record = EventRecord::seal(event, seq, &prev_hash, now);
                    // The domain decides; a refused event fails before anything is written.
                    let subject = Subject::after(current.as_ref(), event, &record)?;
                    self.insert_event(&record).await?;
                    self.save_subject(&subject, current.is_some()).await?;
                    prev_hash = record.hash.clone();
                    appended.push((record, subject));
                }
                // The Merkle tree grows in the same transaction: a checkpoint never names a leaf
                // that could still roll back.
                let records: Vec<EventRecord> = appended.iter().map(|(r, _)| r.clone()).collect();
                self.grow_tree(&records).await?;
                // The outbox: what subscribers are told commits with what happened, or not at all.
                let leased = self.queue_deliveries(&appended, now, lessee).await?;
                Ok((appended, leased))
            }

            async fn subject_of(
                &mut self,
                event: &NewEvent,
            ) -> Result<Option<Subject>, StoreError> {
                let row: Option<SubjectRow> = sqlx::query_as(concat!(
                    "select ",
                    subject_columns!(),
                    " from subjects where callee_id = $1 and protocol_version = $2"
                ))
                .bind(event.callee_id.0)
                .bind(event.protocol_version.to_string())
                .fetch_optional(&mut **self)
                .await?;
                row.map(TryInto::try_into).transpose()
            }

            async fn insert_event(&mut self, record: &EventRecord) -> Result<(), StoreError> {
                sqlx::query(concat!(
                    "insert into ledger (",
                    event_columns!(),
                    ") values ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
                ))
                .bind(record.seq)
                .bind(record.callee_id.0)
                .bind(&record.protocol_version)
                .bind(&record.kind)
                .bind(record.data.to_string())
                .bind(&record.actor)
                .bind(record.recorded_at)
                .bind(&record.prev_hash)
                .bind(&record.hash)
                .execute(&mut **self)
                .await?;
                Ok(())
            }

            async fn save_subject(
                &mut self,
                subject: &Subject,
                exists: bool,
            ) -> Result<(), StoreError> {
                let state_json =
                    serde_json::to_string(&subject.state).map_err(StoreError::corrupt)?;
                let sql = if exists {
                    "update subjects set gate_state = $3, state = $4, last_seq = $5, \
                     last_hash = $6, last_change_seq = $7, last_change_at = $8 \
                     where callee_id = $1 and protocol_version = $2 and created_at = $9"
                } else {
                    "insert into subjects (callee_id, protocol_version, gate_state, state, \
                     last_seq, last_hash, last_change_seq, last_change_at, created_at) \
                     values ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
                };
                sqlx::query(sql)
                    .bind(subject.callee_id.0)
                    .bind(subject.protocol_version.to_string())
                    .bind(subject.gate().as_str())
                    .bind(state_json)
                    .bind(subject.last_seq)
                    .bind(&subject.last_hash)
                    .bind(subject.last_change.seq)
                    .bind(subject.last_change.at)
                    .bind(subject.created_at)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
        }
    };
}

impl_append_events!(sqlx::Postgres);
impl_append_events!(sqlx::Sqlite);

impl Store {
    /// Appends `events` (all or none) and returns them sealed, with each subject after it.
    pub async fn append(
        &self,
        events: &[NewEvent],
        now: Timestamp,
    ) -> Result<Vec<(EventRecord, Subject)>, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let (appended, leased) = tx
                .append_events(events, now, self.lessee(now).as_ref())
                .await?;
            let callees: BTreeSet<CalleeId> = events.iter().map(|e| e.callee_id).collect();
            for callee in callees {
                tx.record_change(Changed::Callee(callee), now).await?;
            }
            self.commit_handing_off(tx, leased).await?;
            Ok(appended)
        })
    }

    /// Appends `events`, all of one subject, only if that subject's last seq is still
    /// `seen_seq`: `None` (and nothing written) when another writer moved it since it was read.
    pub async fn append_unless_moved(
        &self,
        events: &[NewEvent],
        seen_seq: i64,
        now: Timestamp,
    ) -> Result<Option<Vec<(EventRecord, Subject)>>, StoreError> {
        let Some(first) = events.first() else {
            return Ok(Some(Vec::new()));
        };
        debug_assert!(events.iter().all(
            |e| e.callee_id == first.callee_id && e.protocol_version == first.protocol_version
        ));
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            // Under the append lock, so no writer can move the subject between this read and
            // the append.
            tx.lock_ledger().await?;
            let current = tx.subject_of(first).await?;
            if current.map(|s| s.last_seq) != Some(seen_seq) {
                return Ok(None);
            }
            let (appended, leased) = tx
                .append_events(events, now, self.lessee(now).as_ref())
                .await?;
            tx.record_change(Changed::Callee(first.callee_id), now)
                .await?;
            self.commit_handing_off(tx, leased).await?;
            Ok(Some(appended))
        })
    }

    /// Events after `after` in sequence order, optionally for one callee.
    pub async fn ledger(
        &self,
        callee_id: Option<CalleeId>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let rows: Vec<EventRow> = dispatch!(self, |pool| match callee_id {
            Some(callee_id) => {
                sqlx::query_as(concat!(
                    "select ",
                    event_columns!(),
                    " from ledger where callee_id = $1 and seq > $2 order by seq limit $3"
                ))
                .bind(callee_id.0)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
            }
            None => {
                sqlx::query_as(concat!(
                    "select ",
                    event_columns!(),
                    " from ledger where seq > $1 order by seq limit $2"
                ))
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
            }
        })?;
        Ok(rows.into_iter().map(EventRecord::from).collect())
    }

    /// One subject's events before `before`, newest first (a timeline, paged backwards).
    pub async fn subject_events_before(
        &self,
        callee_id: CalleeId,
        version: crate::domain::version::ProtocolVersion,
        before: i64,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let rows: Vec<EventRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                event_columns!(),
                " from ledger where callee_id = $1 and protocol_version = $2 and seq < $3 \
                 order by seq desc limit $4"
            ))
            .bind(callee_id.0)
            .bind(version.to_string())
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(EventRecord::from).collect())
    }

    /// The `rejudged` events of every subject of the callees with an id in `from..=to`, newest
    /// first: what re-judging reads a page at a time (they are few; a subject has one per change
    /// of rules that moved it).
    pub async fn rejudgements_between(
        &self,
        from: CalleeId,
        to: CalleeId,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let rows: Vec<EventRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                event_columns!(),
                " from ledger where callee_id between $1 and $2 and kind = 'rejudged' \
                 order by seq desc"
            ))
            .bind(from.0)
            .bind(to.0)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(EventRecord::from).collect())
    }

    /// The subject's events folded afresh from the ledger, for checking the cached state.
    pub async fn ledger_for_subject(
        &self,
        callee_id: CalleeId,
        version: crate::domain::version::ProtocolVersion,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let rows: Vec<EventRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                event_columns!(),
                " from ledger where callee_id = $1 and protocol_version = $2 order by seq"
            ))
            .bind(callee_id.0)
            .bind(version.to_string())
            .fetch_all(pool)
            .await
        })?;
        Ok(rows.into_iter().map(EventRecord::from).collect())
    }
}
