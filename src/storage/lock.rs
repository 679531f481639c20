//! The ledger's append lock: one global hash chain needs one appender at a time. Its own module,
//! below the ledger, the Merkle tree and the change feed, so each of them can take it without
//! importing another that imports it back.

use super::StoreError;

/// Taking the ledger's append lock inside an open write transaction.
pub(crate) trait LockLedger {
    /// Takes the lock now; it is held until the transaction ends. Needed before reading state
    /// that decides which events to append, or where the tree or the feed grows.
    async fn lock_ledger(&mut self) -> Result<(), StoreError>;
}

// Postgres: a transaction-scoped advisory lock, held until commit, so replicas on one database
// serialize too.
impl LockLedger for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn lock_ledger(&mut self) -> Result<(), StoreError> {
        sqlx::query("select pg_advisory_xact_lock(7250001)")
            .execute(&mut **self)
            .await?;
        Ok(())
    }
}

// SQLite: the write transaction is already BEGIN IMMEDIATE, which excludes every other writer.
impl LockLedger for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn lock_ledger(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}
