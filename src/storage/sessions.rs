//! Operator console sessions: hashes only, never a session id or a key.

use super::{Store, StoreError, dispatch};
use crate::domain::time::Timestamp;

impl Store {
    /// Records a session; expired sessions are deleted in the same call, so the table holds
    /// live sessions and the few that expired since the last sign-in.
    pub async fn insert_session(
        &self,
        id_hash: &str,
        key_hash: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query("delete from console_sessions where expires_at <= $1")
                .bind(now)
                .execute(pool)
                .await?;
            sqlx::query(
                "insert into console_sessions (id_hash, key_hash, created_at, expires_at) \
                 values ($1, $2, $3, $4)",
            )
            .bind(id_hash)
            .bind(key_hash)
            .bind(now)
            .bind(expires_at)
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }

    /// The key hash of a session that has not expired at `now`.
    pub async fn session_key(
        &self,
        id_hash: &str,
        now: Timestamp,
    ) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> = dispatch!(self, |pool| {
            sqlx::query_as(
                "select key_hash from console_sessions where id_hash = $1 and expires_at > $2",
            )
            .bind(id_hash)
            .bind(now)
            .fetch_optional(pool)
            .await
        })?;
        Ok(row.map(|(key_hash,)| key_hash))
    }

    /// Ends a session (signing out twice is not an error).
    pub async fn delete_session(&self, id_hash: &str) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query("delete from console_sessions where id_hash = $1")
                .bind(id_hash)
                .execute(pool)
                .await
                .map(|_| ())
        })?;
        Ok(())
    }
}
