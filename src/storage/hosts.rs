//! Each host's budget where every replica sees it (remote::hosts): the leases of requests in
//! flight, the next free start and the back-off a host asked for.

use std::time::Duration;

use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::politeness;
use crate::domain::time::{Timestamp, to_stored_precision};

/// A host budget is coordination, not a record: a crash that loses its last few writes loses
/// leases that would lapse anyway and a start time a few intervals old. So its transactions
/// do not wait for the disk; on Postgres, that halved the refresh sweep's throughput
/// (BENCHMARKS.md, "Politeness per host").
trait Ephemeral {
    async fn ephemeral(&mut self) -> Result<(), StoreError>;
}

impl Ephemeral for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn ephemeral(&mut self) -> Result<(), StoreError> {
        sqlx::query("set local synchronous_commit = off")
            .execute(&mut **self)
            .await?;
        Ok(())
    }
}

// SQLite: in WAL mode with `synchronous = NORMAL` a commit does not wait for the disk anyway.
impl Ephemeral for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn ephemeral(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl Store {
    /// Grants `lease` one of `host`'s `concurrency` slots until `lease_until` and reserves its
    /// next start: `Some(start)` (no earlier than `now`, the previous start plus `interval`,
    /// and any back-off), or `None` when every slot is leased. One transaction, serialized per
    /// host by the lock on its budget row, so replicas asking at once cannot both take the
    /// last slot or the same start.
    pub async fn acquire_host_slot(
        &self,
        host: &str,
        lease: &str,
        (concurrency, interval): (u32, Duration),
        lease_until: Timestamp,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, StoreError> {
        let interval = chrono::Duration::from_std(interval).unwrap_or_default();
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            tx.ephemeral().await?;
            // The upsert locks the row (Postgres); SQLite's write transaction excludes the rest.
            let (next_start, backoff_until): (Timestamp, Option<Timestamp>) = sqlx::query_as(
                "insert into host_budgets (host, next_start) values ($1, $2) on conflict (host) \
                 do update set host = excluded.host returning next_start, backoff_until",
            )
            .bind(host)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query("delete from host_leases where host = $1 and lease_until <= $2")
                .bind(host)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            let (held,): (i64,) =
                sqlx::query_as("select count(*) from host_leases where host = $1")
                    .bind(host)
                    .fetch_one(&mut *tx)
                    .await?;
            if held >= i64::from(concurrency) {
                tx.commit().await?;
                return Ok(None);
            }
            let start =
                to_stored_precision(politeness::start_at(now, Some(next_start), backoff_until));
            sqlx::query("insert into host_leases (id, host, lease_until) values ($1, $2, $3)")
                .bind(lease)
                .bind(host)
                .bind(lease_until.max(start))
                .execute(&mut *tx)
                .await?;
            sqlx::query("update host_budgets set next_start = $2 where host = $1")
                .bind(host)
                .bind(start + interval)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(start))
        })
    }

    /// Gives a lease back.
    pub async fn release_host_slot(&self, host: &str, lease: &str) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin().await?;
            tx.ephemeral().await?;
            sqlx::query("delete from host_leases where id = $1 and host = $2")
                .bind(lease)
                .bind(host)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Leaves `host` alone until `until`; a later back-off already recorded stands.
    pub async fn back_off_host(
        &self,
        host: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query(
                "insert into host_budgets (host, next_start, backoff_until) values ($1, $2, $3) \
                 on conflict (host) do update set backoff_until = case \
                 when host_budgets.backoff_until is null or host_budgets.backoff_until < $3 \
                 then $3 else host_budgets.backoff_until end",
            )
            .bind(host)
            .bind(now)
            .bind(until)
            .execute(pool)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Deletes every lease that lapsed before `now`; returns how many.
    pub async fn prune_host_leases(&self, now: Timestamp) -> Result<u64, StoreError> {
        let deleted = dispatch!(self, |pool| {
            sqlx::query("delete from host_leases where lease_until < $1")
                .bind(now)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(deleted)
    }

    /// The leases held on `host` at `now` (for tests and the operator's curiosity).
    pub async fn host_leases(&self, host: &str, now: Timestamp) -> Result<u64, StoreError> {
        let (n,): (i64,) = dispatch!(self, |pool| {
            sqlx::query_as("select count(*) from host_leases where host = $1 and lease_until > $2")
                .bind(host)
                .bind(now)
                .fetch_one(pool)
                .await
        })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
