//! Subscription CRUD, and the deliveries each holds as admins list and retry them.

use super::outbox::ReleasePayloads;
use super::rows::{DeliveryRow, SubscriptionRow};
use crate::domain::ids::{DeliveryId, SubscriptionId};
use crate::domain::time::Timestamp;
use crate::domain::webhook::{Delivery, Subscription, SubscriptionStatus};
use crate::storage::lock::LockLedger;
use crate::storage::{BeginWrite, Store, StoreError, dispatch, touched};

impl Store {
    pub async fn insert_subscription(&self, s: &Subscription) -> Result<(), StoreError> {
        let events = s.events.as_ref().map(|e| {
            let names: Vec<&str> = e.iter().map(|t| t.as_str()).collect();
            serde_json::to_string(&names).expect("names serialize")
        });
        dispatch!(self, |pool| {
            sqlx::query(concat!(
                "insert into subscriptions (",
                subscription_columns!(),
                // The ledger's head now: a delivery never names an event from before its
                // subscription as the one before it.
                ", created_seq) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                 (select coalesce(max(seq), 0) from ledger))"
            ))
            .bind(s.id.0)
            .bind(&s.url)
            .bind(s.callee_id.map(|c| c.0))
            .bind(&events)
            .bind(&s.description)
            .bind(&s.secret)
            .bind(&s.previous_secret)
            .bind(s.previous_until)
            .bind(s.status.as_str())
            .bind(s.created_at)
            .bind(s.failing_since)
            .execute(pool)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Subscriptions by id after `after`, at most `limit`.
    pub async fn subscriptions_page(
        &self,
        after: Option<SubscriptionId>,
        limit: u32,
    ) -> Result<Vec<Subscription>, StoreError> {
        let select = concat!(
            "select ",
            subscription_columns!(),
            " from subscriptions where id > $1 order by id limit $2"
        );
        let rows: Vec<SubscriptionRow> =
            self.page_after(select, after.map(|id| id.0), limit).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn subscriptions(&self) -> Result<Vec<Subscription>, StoreError> {
        let rows: Vec<SubscriptionRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                subscription_columns!(),
                " from subscriptions order by id"
            ))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn subscription(&self, id: SubscriptionId) -> Result<Subscription, StoreError> {
        let row: SubscriptionRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                subscription_columns!(),
                " from subscriptions where id = $1"
            ))
            .bind(id.0)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// Deletes a subscription and its deliveries; `NotFound` if there is none. Under the
    /// ledger lock: no append is queueing deliveries for it meanwhile (nothing else ties them
    /// to it).
    pub async fn delete_subscription(&self, id: SubscriptionId) -> Result<(), StoreError> {
        let done = dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            tx.lock_ledger().await?;
            let gone: Vec<(i64,)> =
                sqlx::query_as("delete from deliveries where subscription_id = $1 returning seq")
                    .bind(id.0)
                    .fetch_all(&mut *tx)
                    .await?;
            tx.release_payloads(&gone).await?;
            let done = sqlx::query("delete from subscriptions where id = $1")
                .bind(id.0)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok::<_, StoreError>(done)
        })?;
        touched(done)
    }

    /// Makes `secret` the signing secret; the old one keeps signing until `previous_until`.
    pub async fn rotate_secret(
        &self,
        id: SubscriptionId,
        secret: &str,
        previous_until: Timestamp,
    ) -> Result<(), StoreError> {
        let done = dispatch!(self, |pool| {
            sqlx::query(
                "update subscriptions set previous_secret = secret, previous_until = $3, secret = $2 \
                 where id = $1",
            )
            .bind(id.0)
            .bind(secret)
            .bind(previous_until)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
        })?;
        touched(done)
    }

    /// Sets a subscription's status; `NotFound` if there is none.
    pub async fn set_subscription_status(
        &self,
        id: SubscriptionId,
        status: SubscriptionStatus,
    ) -> Result<(), StoreError> {
        let done = dispatch!(self, |pool| {
            sqlx::query("update subscriptions set status = $2 where id = $1")
                .bind(id.0)
                .bind(status.as_str())
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        touched(done)
    }

    pub async fn disable_subscription(&self, id: SubscriptionId) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query("update subscriptions set status = 'disabled' where id = $1")
                .bind(id.0)
                .execute(pool)
                .await
                .map(drop)
        })?;
        Ok(())
    }

    /// A subscription's deliveries, newest event first.
    pub async fn deliveries(
        &self,
        subscription: SubscriptionId,
        after: Option<DeliveryId>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        // Newest event first; the cursor is the last delivery seen, compared by (seq, id).
        let rows: Vec<DeliveryRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                delivery_columns!(),
                " from deliveries where subscription_id = $1 and ($2 is null or (seq, id) < \
                 (select seq, id from deliveries where id = $2)) \
                 order by seq desc, id desc limit $3"
            ))
            .bind(subscription.0)
            .bind(after.map(|id| id.0))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Queues delivery `id` of `subscription` again, now; `NotFound` if it is not that
    /// subscription's. Its attempts so far are kept.
    pub async fn retry_delivery(
        &self,
        subscription: SubscriptionId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<Delivery, StoreError> {
        let row: DeliveryRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "update deliveries set status = 'pending', next_attempt_at = $3, finished_at = null \
                 where id = $2 and subscription_id = $1 returning ",
                delivery_columns!()
            ))
            .bind(subscription.0)
            .bind(id.0)
            .bind(now)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }
}
