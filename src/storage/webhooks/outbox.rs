//! The outbox: deliveries queued inside the ledger's own transaction, one per (event,
//! subscription that wants it), and the stored bodies they share.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::handoff::Lessee;
use super::rows::Claimed;
use super::rows::SubscriptionSince;
use crate::domain::gate::Subject;
use crate::domain::ids::{DeliveryId, SubscriptionId};
use crate::domain::ledger::EventRecord;
use crate::domain::time::Timestamp;
use crate::domain::webhook::{
    self, Delivery, DeliveryStatus, EventType, Subscription, SubscriptionStatus,
};
use crate::storage::StoreError;

/// Queueing deliveries inside the transaction that appends the events they announce.
pub(crate) trait QueueDeliveries {
    /// One pending delivery per (event, subscription that wants it); those `lessee` can send
    /// at once are leased to it, and returned.
    async fn queue_deliveries(
        &mut self,
        appended: &[(EventRecord, Subject)],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<Vec<Claimed>, StoreError>;
}

macro_rules! impl_queue_deliveries {
    ($db:ty) => {
        impl QueueDeliveries for sqlx::Transaction<'static, $db> {
            async fn queue_deliveries(
                &mut self,
                appended: &[(EventRecord, Subject)],
                now: Timestamp,
                lessee: Option<&Lessee>,
            ) -> Result<Vec<Claimed>, StoreError> {
                let announced: Vec<_> = appended
                    .iter()
                    .filter_map(|(e, s)| EventType::of_kind(&e.kind).map(|t| (t, e, s)))
                    .collect();
                if announced.is_empty() {
                    return Ok(Vec::new());
                }
                let started = std::time::Instant::now();
                let rows: Vec<SubscriptionSince> = sqlx::query_as(concat!(
                    "select ",
                    subscription_columns!(),
                    ", created_seq from subscriptions where status <> 'disabled'"
                ))
                .fetch_all(&mut **self)
                .await?;
                let subscriptions = rows
                    .into_iter()
                    .map(|r| Ok((Subscription::try_from(r.subscription)?, r.created_seq)))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                // Where each subject's chains stand: its newest announced event of each type
                // (a new delivery names the newest one its subscription asks for, announced
                // since it was created, as its `previous_seq`), and the subscriptions with a
                // delivery about it still pending (then the new ones wait their turn, and are
                // claimed, not handed over). Neither reads the subject's past deliveries.
                let mut heads: BTreeMap<String, BTreeMap<EventType, i64>> = BTreeMap::new();
                let mut pending: BTreeMap<String, std::collections::BTreeSet<Uuid>> =
                    BTreeMap::new();
                let subjects: std::collections::BTreeSet<String> = announced
                    .iter()
                    .map(|(_, e, _)| webhook::subject_key(e.callee_id, &e.protocol_version))
                    .collect();
                for subject in subjects {
                    let announced: Vec<(String, i64)> = sqlx::query_as(
                        "select event_type, last_seq from subject_announcements where subject = $1",
                    )
                    .bind(&subject)
                    .fetch_all(&mut **self)
                    .await?;
                    let waiting: Vec<(Uuid,)> = sqlx::query_as(
                        "select distinct subscription_id from deliveries \
                         where subject = $1 and status = 'pending'",
                    )
                    .bind(&subject)
                    .fetch_all(&mut **self)
                    .await?;
                    heads.insert(
                        subject.clone(),
                        announced
                            .into_iter()
                            .filter_map(|(kind, seq)| EventType::parse(&kind).map(|k| (k, seq)))
                            .collect(),
                    );
                    pending.insert(subject, waiting.into_iter().map(|(id,)| id).collect());
                }
                let mut rows: Vec<QueuedRow> = Vec::new();
                let mut leased: Vec<Claimed> = Vec::new();
                // Each event's body, and how many deliveries name it (it goes with the last).
                let mut bodies: Vec<(i64, String, i64)> = Vec::new();
                let mut announcements: BTreeMap<(String, EventType), i64> = BTreeMap::new();
                // Whether each chain is still open to the handoff: nothing pending from before,
                // and every earlier delivery of this append handed over too.
                let mut open: BTreeMap<(Uuid, String), bool> = BTreeMap::new();
                // The last seq queued per chain by this append: what a handed-over delivery
                // follows (in an open chain, nothing from before it is pending).
                let mut in_append: BTreeMap<(Uuid, String), i64> = BTreeMap::new();
                for (kind, event, subject) in announced {
                    let key = webhook::subject_key(event.callee_id, &event.protocol_version);
                    let payload = webhook::EventPayload::new(kind, event, subject);
                    let subject_heads = heads.entry(key.clone()).or_default();
                    let waiting = pending.get(&key);
                    let mut wanted = 0_i64;
                    for (sub, created_seq) in subscriptions
                        .iter()
                        .filter(|(s, _)| s.wants(event.callee_id, kind))
                    {
                        wanted += 1;
                        let chain = (sub.id.0, key.clone());
                        let before = webhook::previous_seq(
                            sub,
                            event.callee_id,
                            *created_seq,
                            subject_heads,
                        );
                        let follows = in_append.insert(chain.clone(), event.seq);
                        let chain_open = open
                            .entry(chain)
                            .or_insert_with(|| !waiting.is_some_and(|w| w.contains(&sub.id.0)));
                        *chain_open &= lessee.is_some() && sub.status == SubscriptionStatus::Active;
                        let row = QueuedRow {
                            id: DeliveryId::new(),
                            subscription: sub.id,
                            seq: event.seq,
                            kind,
                            subject: key.clone(),
                            previous_seq: before,
                            body: None,
                            leased: *chain_open,
                        };
                        if row.leased {
                            let body = payload.render(before);
                            leased.push(row.handed_over(sub, follows, body, now));
                        }
                        rows.push(row);
                    }
                    // Announced, whoever wants it now: a later delivery about the subject may
                    // name it as the one before it.
                    subject_heads.insert(kind, event.seq);
                    announcements.insert((key, kind), event.seq);
                    if wanted > 0 {
                        bodies.push((event.seq, payload.into_head(), wanted));
                    }
                }
                if !bodies.is_empty() {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "insert into event_payloads (seq, head, deliveries) ",
                    );
                    insert.push_values(&bodies, |mut row, (seq, head, deliveries)| {
                        row.push_bind(*seq)
                            .push_bind(head.as_str())
                            .push_bind(*deliveries);
                    });
                    insert.build().execute(&mut **self).await?;
                }
                let mut upsert = sqlx::QueryBuilder::<$db>::new(
                    "insert into subject_announcements (subject, event_type, last_seq) ",
                );
                upsert.push_values(&announcements, |mut row, ((subject, kind), seq)| {
                    row.push_bind(subject.as_str())
                        .push_bind(kind.as_str())
                        .push_bind(*seq);
                });
                upsert.push(
                    " on conflict (subject, event_type) do update set last_seq = excluded.last_seq",
                );
                upsert.build().execute(&mut **self).await?;
                self.insert_queued(&rows, now, lessee).await?;
                // Inside the ledger's transaction: what an append spends on its subscribers
                // (the latency benchmark reads these).
                tracing::debug!(
                    deliveries = rows.len(),
                    handed_over = leased.len(),
                    queue_ms = started.elapsed().as_secs_f64() * 1e3,
                    "webhook deliveries queued"
                );
                Ok(leased)
            }
        }
    };
}

/// Inserting queued deliveries: many rows per statement on SQLite (in process, an event for a
/// thousand subscribers is a few statements),
/// arrays on Postgres, where one statement's text is the same whatever the rows (a VALUES
/// list of 200 rows took 91 ms to prepare and run inside the ledger's transaction, holding
/// its lock; the arrays take a few ms).
pub(super) trait InsertQueued {
    /// Inserts `rows` as pending deliveries, due `now`; the ones marked leased under
    /// `lessee`'s lease.
    async fn insert_queued(
        &mut self,
        rows: &[QueuedRow],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<(), StoreError>;
}

/// Deleting deliveries: each event's stored body counts the deliveries that name it, and goes
/// with the last. Whoever deletes a delivery (a prune, a subscription's deletion) lowers the
/// count for exactly the rows its own statement deleted, so two of them at once cannot count
/// one delivery twice.
pub(super) trait ReleasePayloads {
    /// `gone`: the seq of every delivery just deleted, one entry each.
    async fn release_payloads(&mut self, gone: &[(i64,)]) -> Result<(), StoreError>;
}

/// Deliveries gone per event seq.
fn per_event(gone: &[(i64,)]) -> BTreeMap<i64, i64> {
    let mut counts = BTreeMap::new();
    for (seq,) in gone {
        *counts.entry(*seq).or_insert(0) += 1;
    }
    counts
}

impl ReleasePayloads for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn release_payloads(&mut self, gone: &[(i64,)]) -> Result<(), StoreError> {
        let (seqs, counts): (Vec<i64>, Vec<i64>) = per_event(gone).into_iter().unzip();
        if seqs.is_empty() {
            return Ok(());
        }
        // Two statements whatever the number of events: a subscription deleted with a
        // hundred thousand deliveries does not hold the ledger lock for as many round trips.
        sqlx::query(
            "update event_payloads p set deliveries = p.deliveries - v.n \
             from unnest($1::bigint[], $2::bigint[]) as v (seq, n) where p.seq = v.seq",
        )
        .bind(&seqs)
        .bind(&counts)
        .execute(&mut **self)
        .await?;
        sqlx::query("delete from event_payloads where seq = any($1) and deliveries <= 0")
            .bind(&seqs)
            .execute(&mut **self)
            .await?;
        Ok(())
    }
}

impl ReleasePayloads for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn release_payloads(&mut self, gone: &[(i64,)]) -> Result<(), StoreError> {
        // In process: a statement per event costs no round trip.
        for (seq, n) in per_event(gone) {
            sqlx::query("update event_payloads set deliveries = deliveries - $2 where seq = $1")
                .bind(seq)
                .bind(n)
                .execute(&mut **self)
                .await?;
            sqlx::query("delete from event_payloads where seq = $1 and deliveries <= 0")
                .bind(seq)
                .execute(&mut **self)
                .await?;
        }
        Ok(())
    }
}

/// A row's lease as inserted.
fn lease_of<'a>(
    row: &QueuedRow,
    lessee: Option<&'a Lessee>,
) -> (Option<&'a str>, Option<Timestamp>) {
    match lessee {
        Some(l) if row.leased => (Some(l.owner.as_str()), Some(l.until)),
        _ => (None, None),
    }
}

impl InsertQueued for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn insert_queued(
        &mut self,
        rows: &[QueuedRow],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<(), StoreError> {
        // 13 binds a row keeps a chunk within SQLite's 32,766.
        for chunk in rows.chunks(1000) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "insert into deliveries (id, subscription_id, seq, event_type, payload, \
                 status, attempts, next_attempt_at, created_at, subject, previous_seq, \
                 lease_owner, lease_until) ",
            );
            insert.push_values(chunk, |mut row, queued| {
                let (owner, until) = lease_of(queued, lessee);
                row.push_bind(queued.id.0)
                    .push_bind(queued.subscription.0)
                    .push_bind(queued.seq)
                    .push_bind(queued.kind.as_str())
                    .push_bind(queued.body.clone())
                    .push_bind(DeliveryStatus::Pending.as_str())
                    .push_bind(0i32)
                    .push_bind(now)
                    .push_bind(now)
                    .push_bind(queued.subject.clone())
                    .push_bind(queued.previous_seq)
                    .push_bind(owner.map(str::to_string))
                    .push_bind(until);
            });
            insert.build().execute(&mut **self).await?;
        }
        Ok(())
    }
}

impl InsertQueued for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn insert_queued(
        &mut self,
        rows: &[QueuedRow],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id.0).collect();
        let (owners, untils): (Vec<Option<&str>>, Vec<Option<Timestamp>>) =
            rows.iter().map(|r| lease_of(r, lessee)).unzip();
        let subscriptions: Vec<Uuid> = rows.iter().map(|r| r.subscription.0).collect();
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
        let bodies: Vec<Option<&str>> = rows.iter().map(|r| r.body.as_deref()).collect();
        let subjects: Vec<&str> = rows.iter().map(|r| r.subject.as_str()).collect();
        let previous: Vec<Option<i64>> = rows.iter().map(|r| r.previous_seq).collect();
        sqlx::query(
            "insert into deliveries (id, subscription_id, seq, event_type, payload, status, \
             attempts, next_attempt_at, created_at, subject, previous_seq, lease_owner, \
             lease_until) \
             select id, subscription_id, seq, event_type, payload, 'pending', 0, $8, $8, \
             subject, previous_seq, lease_owner, lease_until from unnest($1::uuid[], \
             $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::int8[], \
             $9::text[], $10::timestamptz[]) \
             as v(id, subscription_id, seq, event_type, payload, subject, previous_seq, \
             lease_owner, lease_until)",
        )
        .bind(ids)
        .bind(subscriptions)
        .bind(seqs)
        .bind(kinds)
        .bind(bodies)
        .bind(subjects)
        .bind(previous)
        .bind(now)
        .bind(owners)
        .bind(untils)
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}

/// One delivery as queued.
pub(crate) struct QueuedRow {
    pub(super) id: DeliveryId,
    pub(super) subscription: SubscriptionId,
    pub(super) seq: i64,
    pub(super) kind: EventType,
    pub(super) subject: String,
    pub(super) previous_seq: Option<i64>,
    /// Its own body; `None` for an event's, stored once in `event_payloads`.
    pub(super) body: Option<String>,
    /// Inserted leased to the appending process's sender, and handed to it.
    pub(super) leased: bool,
}

impl QueuedRow {
    /// The claimed delivery this row is to the sender it is handed to; it follows `follows`,
    /// the delivery before it about its subject in its subscription queued by the same append
    /// (a chain with one pending from before is not handed over at all).
    fn handed_over(
        &self,
        subscription: &Subscription,
        follows: Option<i64>,
        body: String,
        now: Timestamp,
    ) -> Claimed {
        Claimed {
            delivery: Delivery {
                id: self.id,
                subscription_id: self.subscription,
                seq: self.seq,
                event_type: self.kind,
                payload: body,
                status: DeliveryStatus::Pending,
                attempts: 0,
                next_attempt_at: now,
                last_status_code: None,
                last_error: None,
                created_at: now,
                finished_at: None,
            },
            subscription: subscription.clone(),
            subject: self.subject.clone(),
            waits_for: follows,
        }
    }
}

impl_queue_deliveries!(sqlx::Postgres);
impl_queue_deliveries!(sqlx::Sqlite);
