//! Credentials for callees, sealed: the store never sees a secret in the clear.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::credential::{CredentialKind, StoredCredential};
use crate::domain::ids::CalleeId;

#[derive(sqlx::FromRow)]
struct CredentialRow {
    callee_id: Uuid,
    scheme: String,
    kind: String,
    sealed: String,
    fingerprint: String,
    set_at: DateTime<Utc>,
    set_by: String,
}

impl TryFrom<CredentialRow> for StoredCredential {
    type Error = StoreError;
    fn try_from(r: CredentialRow) -> Result<Self, StoreError> {
        Ok(StoredCredential {
            callee_id: r.callee_id.into(),
            kind: CredentialKind::parse(&r.kind)
                .ok_or_else(|| StoreError::corrupt(format!("credential kind {}", r.kind)))?,
            scheme: r.scheme,
            sealed: r.sealed,
            fingerprint: r.fingerprint,
            set_at: r.set_at,
            set_by: r.set_by,
        })
    }
}

macro_rules! credential_columns {
    () => {
        "callee_id, scheme, kind, sealed, fingerprint, set_at, set_by"
    };
}

/// Inserts `credential`, or replaces the one for the same callee and scheme.
pub(crate) const UPSERT: &str = concat!(
    "insert into callee_credentials (",
    credential_columns!(),
    ") values ($1, $2, $3, $4, $5, $6, $7) \
     on conflict (callee_id, scheme) do update set kind = excluded.kind, \
     sealed = excluded.sealed, fingerprint = excluded.fingerprint, \
     set_at = excluded.set_at, set_by = excluded.set_by"
);

/// One credential's upsert, for either backend's transaction.
macro_rules! upsert {
    ($tx:expr, $c:expr) => {
        sqlx::query($crate::storage::credentials::UPSERT)
            .bind($c.callee_id.0)
            .bind(&$c.scheme)
            .bind($c.kind.as_str())
            .bind(&$c.sealed)
            .bind(&$c.fingerprint)
            .bind($c.set_at)
            .bind(&$c.set_by)
            .execute(&mut *$tx)
            .await
    };
}
pub(super) use upsert;

impl Store {
    /// Sets one scheme's credential for a callee (replacing what was set before).
    pub async fn put_credential(&self, credential: &StoredCredential) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            upsert!(tx, credential)?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Removes one scheme's credential; `NotFound` when none was set.
    pub async fn delete_credential(
        &self,
        callee_id: CalleeId,
        scheme: &str,
    ) -> Result<(), StoreError> {
        let deleted = dispatch!(self, |pool| {
            sqlx::query("delete from callee_credentials where callee_id = $1 and scheme = $2")
                .bind(callee_id.0)
                .bind(scheme)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        if deleted == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// A callee's credentials, by scheme name.
    pub async fn credentials(
        &self,
        callee_id: CalleeId,
    ) -> Result<Vec<StoredCredential>, StoreError> {
        let rows: Vec<CredentialRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                credential_columns!(),
                " from callee_credentials where callee_id = $1 order by scheme"
            ))
            .bind(callee_id.0)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Every credential sealed with a key other than `kid` (what a key rotation re-seals).
    pub async fn credentials_not_sealed_with(
        &self,
        kid: &str,
    ) -> Result<Vec<StoredCredential>, StoreError> {
        let prefix = format!("v1.{kid}.%");
        let rows: Vec<CredentialRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                credential_columns!(),
                " from callee_credentials where sealed not like $1 order by callee_id, scheme"
            ))
            .bind(&prefix)
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Replaces sealed values in one transaction, each only if it is still the one read
    /// (`(credential as read, its new sealed value)`): a credential set meanwhile is kept.
    /// How many were replaced.
    pub async fn reseal_credentials(
        &self,
        resealed: &[(StoredCredential, String)],
    ) -> Result<u64, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let mut replaced = 0;
            for (old, sealed) in resealed {
                replaced += sqlx::query(
                    "update callee_credentials set sealed = $4 \
                     where callee_id = $1 and scheme = $2 and sealed = $3",
                )
                .bind(old.callee_id.0)
                .bind(&old.scheme)
                .bind(&old.sealed)
                .bind(sealed)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            }
            tx.commit().await?;
            Ok(replaced)
        })
    }
}
