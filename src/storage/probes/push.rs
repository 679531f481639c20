//! The push deliveries cardgate's webhook receives for running probes.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::probe::{PushDelivery, PushReceipt};
use crate::storage::{Store, StoreError, dispatch};

impl Store {
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
}
