//! The change feed: a row per committed write that decisions or key lookups depend on, and the
//! signal that new rows may exist (Postgres `NOTIFY`; on SQLite, a poll that also sees other
//! processes on the same file, such as the CLI creating a key).
//!
//! Rows are written inside the write's own transaction, under the ledger lock, so their `seq`
//! order is commit order: a reader that applied every row up to `seq` has missed nothing
//! before it, whatever it missed of the notifications.

use std::time::Duration;

use sqlx::postgres::PgListener;
use uuid::Uuid;

use super::lock::LockLedger;
use super::{Db, Store, StoreError, dispatch};
use crate::domain::ids::CalleeId;
use crate::domain::time::Timestamp;

/// The Postgres channel every change is announced on (the payload is empty: the rows say what).
const CHANNEL: &str = "cardgate_changes";

/// How often an SQLite process looks for rows written by another process.
const SQLITE_POLL: Duration = Duration::from_millis(250);

/// What one committed write changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// The decisions about this callee (its snapshot, subjects or probes).
    Callee(CalleeId),
    /// The API keys.
    Keys,
}

/// One row of the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub seq: i64,
    pub what: Changed,
    /// The ledger head once the write committed.
    pub ledger_head: i64,
}

/// Where the feed and the ledger stand, read in one statement (one snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeedHead {
    /// The newest change's seq (0 when there is none).
    pub change_seq: i64,
    /// The ledger head seq (0 when empty).
    pub ledger_seq: i64,
}

#[derive(sqlx::FromRow)]
struct ChangeRow {
    seq: i64,
    callee_id: Option<Uuid>,
    ledger_head: i64,
}

/// Recording a change inside an open write transaction.
pub(crate) trait RecordChange {
    /// Records that `what` changed, as part of this transaction. Call it last before commit:
    /// it takes the ledger lock (commit order = seq order) and announces the change on commit.
    async fn record_change(&mut self, what: Changed, now: Timestamp) -> Result<(), StoreError>;
}

macro_rules! impl_record_change {
    ($db:ty, $notify:expr) => {
        impl RecordChange for sqlx::Transaction<'static, $db> {
            async fn record_change(
                &mut self,
                what: Changed,
                now: Timestamp,
            ) -> Result<(), StoreError> {
                self.lock_ledger().await?;
                let callee = match what {
                    Changed::Callee(id) => Some(id.0),
                    Changed::Keys => None,
                };
                sqlx::query(
                    "insert into changes (callee_id, ledger_head, recorded_at) \
                     values ($1, (select coalesce(max(seq), 0) from ledger), $2)",
                )
                .bind(callee)
                .bind(now)
                .execute(&mut **self)
                .await?;
                if let Some(notify) = $notify {
                    // Delivered on commit, in commit order; repeats within one transaction fold.
                    sqlx::query(notify).execute(&mut **self).await?;
                }
                Ok(())
            }
        }
    };
}

impl_record_change!(
    sqlx::Postgres,
    Some("select pg_notify('cardgate_changes', '')")
);
impl_record_change!(sqlx::Sqlite, None::<&'static str>);

impl Store {
    /// The feed's and the ledger's heads, as of one snapshot.
    pub async fn feed_head(&self) -> Result<FeedHead, StoreError> {
        let (change_seq, ledger_seq): (i64, i64) = dispatch!(self, |pool| {
            sqlx::query_as(
                "select (select coalesce(max(seq), 0) from changes), \
                        (select coalesce(max(seq), 0) from ledger)",
            )
            .fetch_one(pool)
            .await
        })?;
        Ok(FeedHead {
            change_seq,
            ledger_seq,
        })
    }

    /// Changes after `after`, oldest first.
    pub async fn changes_after(&self, after: i64, limit: u32) -> Result<Vec<Change>, StoreError> {
        let rows: Vec<ChangeRow> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select seq, callee_id, ledger_head from changes where seq > $1 order by seq limit $2",
            )
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows
            .into_iter()
            .map(|r| Change {
                seq: r.seq,
                what: r
                    .callee_id
                    .map_or(Changed::Keys, |id| Changed::Callee(id.into())),
                ledger_head: r.ledger_head,
            })
            .collect())
    }

    /// Deletes up to `limit` changes recorded before `before`; returns how many.
    pub async fn prune_changes(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let deleted = dispatch!(self, |pool| {
            sqlx::query(
                "delete from changes where seq in \
                 (select seq from changes where recorded_at < $1 order by seq limit $2)",
            )
            .bind(before)
            .bind(i64::from(limit))
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(deleted)
    }

    /// Starts watching for changes committed by anyone, this process included.
    pub async fn watch_changes(&self) -> Result<ChangeSignal, StoreError> {
        Ok(match &self.db {
            Db::Postgres(pool) => {
                let mut listener = PgListener::connect_with(pool).await?;
                listener.listen(CHANNEL).await?;
                ChangeSignal::Notify(Box::new(listener))
            }
            Db::Sqlite(_) => ChangeSignal::Poll {
                store: self.clone(),
                seen: self.feed_head().await?.change_seq,
            },
        })
    }
}

/// A sign that changes may have been committed. Waiting on it never loses one: after a lost
/// connection it resumes listening before it returns, so a catch-up run after it sees every
/// row the missed notifications announced.
pub enum ChangeSignal {
    Notify(Box<PgListener>),
    Poll { store: Store, seen: i64 },
}

impl ChangeSignal {
    /// Waits until changes may exist that were not there at the previous return. Returns an
    /// error when the database is unreachable (the caller retries; the next return is then a
    /// reason to catch up).
    pub async fn changed(&mut self) -> Result<(), StoreError> {
        match self {
            Self::Notify(listener) => {
                // `None`: the connection was lost and is listening again (eager reconnect).
                // Either way, rows may be waiting.
                listener.try_recv().await?;
                // Several notifications at once need one catch-up.
                while listener.next_buffered().is_some() {}
                Ok(())
            }
            Self::Poll { store, seen } => loop {
                tokio::time::sleep(SQLITE_POLL).await;
                let head = store.feed_head().await?.change_seq;
                if head != *seen {
                    *seen = head;
                    return Ok(());
                }
            },
        }
    }
}
