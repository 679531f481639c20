//! Claiming due deliveries under a lease (one attempt at a time, across replicas, in ledger
//! order per (subscription, subject)), recording attempts, and announcing failing receivers.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::outbox::{InsertQueued, QueuedRow};
use super::rows::{AttemptRecord, Claimed, DeliveryRow, SubscriptionRow};
use crate::domain::ids::{DeliveryId, SubscriptionId};
use crate::domain::time::Timestamp;
use crate::domain::webhook::{self, DeliveryStatus, EventType, Subscription};
use crate::storage::lock::LockLedger;
use crate::storage::{BeginWrite, Store, StoreError, dispatch};

/// Ids of due deliveries, earliest first: pending, of an active subscription, ready (their
/// time come, not leased, and a promotion's or demotion's first attempt only once its
/// attestation is kept or it was created before `$6`), and either past the hold-back (created
/// before `$5`) or with every earlier pending delivery of their (subscription, subject) ready
/// too. So a subject's chain of pending deliveries is claimed in one round (the sender sends
/// each only after the one before it succeeded), and a delivery behind one that is waiting,
/// leased elsewhere or failing is not claimed at all. The subscription's status is a lookup
/// per delivery rather than a join, so the plan is the same whatever the statistics say: walk
/// `deliveries_pending` in due order until the batch is full.
macro_rules! due_deliveries {
    () => {
        "select d.id from deliveries d where d.status = 'pending' \
         and (select s.status from subscriptions s where s.id = d.subscription_id) = 'active' \
         and d.next_attempt_at <= $1 and (d.lease_until is null or d.lease_until < $1) \
         and (d.attempts > 0 or d.event_type not in ('subject.promoted', 'subject.demoted') \
         or d.created_at <= $6 or exists (select 1 from attestations a where a.seq = d.seq)) \
         and (d.created_at <= $5 or not exists (select 1 from deliveries e \
         where e.subject = d.subject and e.subscription_id = d.subscription_id \
         and e.status = 'pending' and e.seq < d.seq \
         and (e.next_attempt_at > $1 or e.lease_until >= $1 \
         or (e.attempts = 0 and e.event_type in ('subject.promoted', 'subject.demoted') \
         and e.created_at > $6 and not exists (select 1 from attestations b where b.seq = e.seq))))) \
         order by d.next_attempt_at, d.seq limit $2"
    };
}

/// What a claimed row returns besides its columns: its subject, and the delivery it must
/// follow in this round (the latest earlier pending one of its (subscription, subject), none
/// past the hold-back).
macro_rules! claimed_extras {
    () => {
        ", subject, case when created_at <= $5 then null else (select max(e.seq) \
         from deliveries e where e.subject = deliveries.subject \
         and e.subscription_id = deliveries.subscription_id and e.status = 'pending' \
         and e.seq < deliveries.seq) end as waits_for"
    };
}

#[derive(sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    delivery: DeliveryRow,
    subject: String,
    waits_for: Option<i64>,
}

impl Store {
    /// Leases up to `limit` due deliveries to `owner` until `lease_until` (see
    /// `due_deliveries!`): a later event never overtakes an earlier one about the same subject
    /// in the same subscription, except past the hold-back; a delivery leased to another
    /// process is skipped until its lease expires, and so is every one behind it.
    /// Two statements whatever the batch: the lease, then the leased rows with their
    /// subscriptions (the owner and lease time name the batch).
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        now: Timestamp,
        hold_cutoff: Timestamp,
        attestation_cutoff: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Claimed>, StoreError> {
        let claimed: Vec<(ClaimedRow, SubscriptionRow)> = dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            // Replicas on Postgres skip each other's rows instead of waiting on them; an
            // SQLite write transaction already excludes every other writer.
            let lease = if self.backend() == crate::storage::Backend::Postgres {
                concat!(
                    "update deliveries set lease_owner = $3, lease_until = $4 where id in (",
                    due_deliveries!(),
                    " for update of d skip locked) returning ",
                    delivery_columns!(),
                    claimed_extras!()
                )
            } else {
                concat!(
                    "update deliveries set lease_owner = $3, lease_until = $4 where id in (",
                    due_deliveries!(),
                    ") returning ",
                    delivery_columns!(),
                    claimed_extras!()
                )
            };
            let mut deliveries: Vec<ClaimedRow> = sqlx::query_as(lease)
                .bind(now)
                .bind(i64::from(limit))
                .bind(owner)
                .bind(lease_until)
                .bind(hold_cutoff)
                .bind(attestation_cutoff)
                .fetch_all(&mut *tx)
                .await?;
            deliveries.sort_by_key(|d| d.delivery.seq);
            let mut ids: Vec<Uuid> = deliveries
                .iter()
                .map(|d| d.delivery.subscription_id)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let mut subscriptions: Vec<SubscriptionRow> = Vec::new();
            for chunk in ids.chunks(500) {
                let mut select = sqlx::QueryBuilder::new(concat!(
                    "select ",
                    subscription_columns!(),
                    " from subscriptions where id in ("
                ));
                let mut list = select.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                select.push(")");
                subscriptions.extend(select.build_query_as().fetch_all(&mut *tx).await?);
            }
            tx.commit().await?;
            let mut claimed = Vec::with_capacity(deliveries.len());
            for row in deliveries {
                let Some(subscription) = subscriptions
                    .iter()
                    .find(|s| s.id == row.delivery.subscription_id)
                else {
                    continue;
                };
                claimed.push((row, subscription.clone()));
            }
            Ok::<_, StoreError>(claimed)
        })?;
        claimed
            .into_iter()
            .map(|(row, s)| {
                Ok(Claimed {
                    delivery: row.delivery.try_into()?,
                    subscription: s.try_into()?,
                    subject: row.subject,
                    waits_for: row.waits_for,
                })
            })
            .collect()
    }

    /// Records attempts, in one transaction, for the deliveries `owner` still holds the lease
    /// of (a lost lease records nothing: whoever holds it now makes the attempt again), and
    /// gives back the leases of `released`, claimed but not attempted (the delivery before
    /// them did not succeed in the round), as they were.
    pub async fn finish_attempts(
        &self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
        released: &[DeliveryId],
    ) -> Result<(), StoreError> {
        if attempts.is_empty() && released.is_empty() {
            return Ok(());
        }
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            for chunk in released.chunks(500) {
                let mut update = sqlx::QueryBuilder::new(
                    "update deliveries set lease_owner = null, lease_until = null \
                     where lease_owner = ",
                );
                update.push_bind(owner);
                update.push(" and id in (");
                let mut ids = update.separated(", ");
                for id in chunk {
                    ids.push_bind(id.0);
                }
                update.push(")");
                update.build().execute(&mut *tx).await?;
            }
            tx.record(owner, attempts).await?;
            // A receiver is failing from its first failed attempt after a success until its
            // next success. Two statements for the whole batch, and a row is written only when
            // its health changes: rewriting every subscription after every round left a dead
            // row version per round for the claim's join to step over.
            let (ok, failed): (Vec<_>, Vec<_>) =
                receivers(attempts).into_iter().partition(|(_, ok)| *ok);
            if !ok.is_empty() {
                let mut update = sqlx::QueryBuilder::new(
                    "update subscriptions set failing_since = null, failing_announced_at = null \
                     where failing_since is not null and id in (",
                );
                let mut ids = update.separated(", ");
                for (id, _) in &ok {
                    ids.push_bind(id.0);
                }
                update.push(")");
                update.build().execute(&mut *tx).await?;
            }
            if let (false, Some((_, first))) = (failed.is_empty(), attempts.first()) {
                let mut update =
                    sqlx::QueryBuilder::new("update subscriptions set failing_since = ");
                update.push_bind(first.attempted_at);
                update.push(" where failing_since is null and id in (");
                let mut ids = update.separated(", ");
                for (id, _) in &failed {
                    ids.push_bind(id.0);
                }
                update.push(")");
                update.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok::<_, StoreError>(())
        })
    }

    /// Subscriptions whose receivers have failed every attempt since before `cutoff`.
    pub async fn failing_subscriptions(&self, cutoff: Timestamp) -> Result<i64, StoreError> {
        let (count,): (i64,) = dispatch!(self, |pool| {
            sqlx::query_as(
                "select count(*) from subscriptions where failing_since is not null \
                 and failing_since <= $1",
            )
            .bind(cutoff)
            .fetch_one(pool)
            .await
        })?;
        Ok(count)
    }
}

impl Store {
    /// Claims the subscriptions whose receiver has failed since before `cutoff` and whose
    /// failure nobody was told of yet, and queues, in the same transaction, one
    /// `subscription.failing` delivery about each to every other subscription that wants such
    /// news, with the body `body` makes. The claimed subscriptions.
    pub async fn announce_failing(
        &self,
        cutoff: Timestamp,
        now: Timestamp,
        body: impl Fn(&Subscription) -> String + Send,
    ) -> Result<Vec<SubscriptionId>, StoreError> {
        dispatch!(self, |pool| {
            // Almost always there is none: a read first, so that the check this runs every
            // second takes no write lock (SQLite has one for the whole file).
            let (waiting,): (i64,) = sqlx::query_as(
                "select count(*) from subscriptions where failing_since <= $1 \
                 and failing_announced_at is null and status <> 'disabled'",
            )
            .bind(cutoff)
            .fetch_one(pool)
            .await?;
            if waiting == 0 {
                return Ok(Vec::new());
            }
            let mut tx = pool.begin_write().await?;
            // As an append does: no subscription is deleted while deliveries are queued for it.
            tx.lock_ledger().await?;
            let claimed: Vec<(Uuid,)> = sqlx::query_as(
                "update subscriptions set failing_announced_at = $2 \
                 where failing_since <= $1 and failing_announced_at is null \
                 and status <> 'disabled' returning id",
            )
            .bind(cutoff)
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
            if claimed.is_empty() {
                tx.commit().await?;
                return Ok(Vec::new());
            }
            let rows: Vec<SubscriptionRow> = sqlx::query_as(concat!(
                "select ",
                subscription_columns!(),
                " from subscriptions where status <> 'disabled'"
            ))
            .fetch_all(&mut *tx)
            .await?;
            let all = rows
                .into_iter()
                .map(Subscription::try_from)
                .collect::<Result<Vec<_>, _>>()?;
            let kind = EventType::SubscriptionFailing;
            let mut announced = Vec::with_capacity(claimed.len());
            let mut rows = Vec::new();
            for (id,) in claimed {
                let Some(failing) = all.iter().find(|s| s.id.0 == id) else {
                    continue;
                };
                let body = body(failing);
                rows.extend(
                    all.iter()
                        .filter(|s| s.id != failing.id && s.wants_news(kind))
                        .map(|to| QueuedRow {
                            id: DeliveryId::new(),
                            subscription: to.id,
                            seq: 0,
                            kind,
                            subject: webhook::news_key(failing.id),
                            previous_seq: None,
                            body: Some(body.clone()),
                            leased: false,
                        }),
                );
                announced.push(failing.id);
            }
            tx.insert_queued(&rows, now, None).await?;
            tx.commit().await?;
            Ok(announced)
        })
    }
}

/// Writing a batch of attempts inside a transaction: one statement per attempt on SQLite (in
/// process, a statement costs microseconds), one for the whole batch on Postgres (each
/// statement is a round trip: 256 of them were most of a sending round's time).
trait RecordAttempts {
    async fn record(
        &mut self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
    ) -> Result<(), sqlx::Error>;
}

impl RecordAttempts for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn record(
        &mut self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
    ) -> Result<(), sqlx::Error> {
        for (id, attempt) in attempts {
            sqlx::query(
                "update deliveries set status = $3, attempts = attempts + 1, next_attempt_at = $4, \
                 last_status_code = $5, last_error = $6, finished_at = $7, lease_owner = null, \
                 lease_until = null, payload = coalesce($8, payload) \
                 where id = $1 and lease_owner = $2",
            )
            .bind(id.0)
            .bind(owner)
            .bind(attempt.status.as_str())
            .bind(attempt.next_attempt_at)
            .bind(attempt.status_code)
            .bind(attempt.error.as_deref())
            .bind(attempt.finished_at)
            .bind(attempt.payload.as_deref())
            .execute(&mut **self)
            .await?;
        }
        Ok(())
    }
}

impl RecordAttempts for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn record(
        &mut self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
    ) -> Result<(), sqlx::Error> {
        let ids: Vec<Uuid> = attempts.iter().map(|(id, _)| id.0).collect();
        let statuses: Vec<String> = attempts
            .iter()
            .map(|(_, a)| a.status.as_str().to_string())
            .collect();
        let next: Vec<Timestamp> = attempts.iter().map(|(_, a)| a.next_attempt_at).collect();
        let codes: Vec<Option<i32>> = attempts.iter().map(|(_, a)| a.status_code).collect();
        let errors: Vec<Option<String>> = attempts.iter().map(|(_, a)| a.error.clone()).collect();
        let finished: Vec<Option<Timestamp>> =
            attempts.iter().map(|(_, a)| a.finished_at).collect();
        let payloads: Vec<Option<String>> =
            attempts.iter().map(|(_, a)| a.payload.clone()).collect();
        sqlx::query(
            "update deliveries as d set status = v.status, attempts = d.attempts + 1, \
             next_attempt_at = v.next, last_status_code = v.code, last_error = v.error, \
             finished_at = v.finished, lease_owner = null, lease_until = null, \
             payload = coalesce(v.payload, d.payload) \
             from unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::int4[], $6::text[], \
             $7::timestamptz[], $8::text[]) as v(id, status, next, code, error, finished, payload) \
             where d.id = v.id and d.lease_owner = $1",
        )
        .bind(owner)
        .bind(ids)
        .bind(statuses)
        .bind(next)
        .bind(codes)
        .bind(errors)
        .bind(finished)
        .bind(payloads)
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}

/// Per subscription in a batch of attempts: whether any succeeded.
fn receivers(attempts: &[(DeliveryId, AttemptRecord)]) -> BTreeMap<SubscriptionId, bool> {
    let mut outcome: BTreeMap<SubscriptionId, bool> = BTreeMap::new();
    for (_, attempt) in attempts {
        let ok = attempt.status == DeliveryStatus::Delivered;
        *outcome.entry(attempt.subscription).or_default() |= ok;
    }
    outcome
}
