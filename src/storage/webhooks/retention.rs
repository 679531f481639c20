//! Pruning finished deliveries after their retention, and what that leaves stored.

use super::outbox::ReleasePayloads;
use crate::domain::time::Timestamp;
use crate::storage::{BeginWrite, Store, StoreError, dispatch};

impl Store {
    /// Deletes up to `limit` deliveries that finished (delivered or failed) before `before`,
    /// the oldest first, and the stored event bodies no delivery names any more; how many
    /// deliveries went. A delivery queued again meanwhile (pending) stays.
    pub async fn prune_deliveries(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let gone: Vec<(i64,)> = sqlx::query_as(
                "delete from deliveries where id in \
                 (select id from deliveries where status <> 'pending' and finished_at < $1 \
                  order by finished_at limit $2) \
                 and status <> 'pending' returning seq",
            )
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
            tx.release_payloads(&gone).await?;
            tx.commit().await?;
            Ok(gone.len() as u64)
        })
    }

    /// How many events' bodies are stored for their deliveries (what pruning them measures).
    pub async fn stored_event_bodies(&self) -> Result<u64, StoreError> {
        let (n,): (i64,) = dispatch!(self, |pool| {
            sqlx::query_as("select count(*) from event_payloads")
                .fetch_one(pool)
                .await
        })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
