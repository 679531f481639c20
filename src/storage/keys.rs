//! API keys (hashes only).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::changes::{Changed, RecordChange};
use super::{BeginWrite, Store, StoreError, dispatch};
use crate::domain::apikey::{ApiKey, Role};
use crate::domain::ids::ApiKeyId;
use crate::domain::time::Timestamp;

#[derive(sqlx::FromRow)]
struct KeyRow {
    id: Uuid,
    name: String,
    role: String,
    prefix: String,
    key_hash: String,
    created_at: DateTime<Utc>,
    created_by: String,
    revoked_at: Option<DateTime<Utc>>,
}

impl TryFrom<KeyRow> for ApiKey {
    type Error = StoreError;
    fn try_from(r: KeyRow) -> Result<Self, StoreError> {
        Ok(ApiKey {
            id: r.id.into(),
            name: r.name,
            role: Role::parse(&r.role)
                .ok_or_else(|| StoreError::corrupt(format!("role {}", r.role)))?,
            prefix: r.prefix,
            key_hash: r.key_hash,
            created_at: r.created_at,
            created_by: r.created_by,
            revoked_at: r.revoked_at,
        })
    }
}

macro_rules! key_columns {
    () => {
        "id, name, role, prefix, key_hash, created_at, created_by, revoked_at"
    };
}

impl Store {
    pub async fn insert_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            sqlx::query(concat!(
                "insert into api_keys (",
                key_columns!(),
                ") values ($1, $2, $3, $4, $5, $6, $7, $8)"
            ))
            .bind(key.id.0)
            .bind(&key.name)
            .bind(key.role.as_str())
            .bind(&key.prefix)
            .bind(&key.key_hash)
            .bind(key.created_at)
            .bind(&key.created_by)
            .bind(key.revoked_at)
            .execute(&mut *tx)
            .await?;
            tx.record_change(Changed::Keys, key.created_at).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The live (unrevoked) key with this hash.
    pub async fn live_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKey>, StoreError> {
        let row: Option<KeyRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                key_columns!(),
                " from api_keys where key_hash = $1 and revoked_at is null"
            ))
            .bind(key_hash)
            .fetch_optional(pool)
            .await
        })?;
        row.map(TryInto::try_into).transpose()
    }

    /// Every unrevoked key (what the read model verifies callers against).
    pub async fn live_keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        let rows: Vec<KeyRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                key_columns!(),
                " from api_keys where revoked_at is null"
            ))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn keys(
        &self,
        after: Option<ApiKeyId>,
        limit: u32,
    ) -> Result<Vec<ApiKey>, StoreError> {
        let select = concat!(
            "select ",
            key_columns!(),
            " from api_keys where id > $1 order by id limit $2"
        );
        let rows: Vec<KeyRow> = self.page_after(select, after.map(|id| id.0), limit).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Revokes a key; `NotFound` if there is no such key. Revoking twice keeps the first time.
    pub async fn revoke_key(&self, id: ApiKeyId, now: Timestamp) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let found: Option<(Uuid,)> = sqlx::query_as(
                "update api_keys set revoked_at = coalesce(revoked_at, $2) where id = $1 returning id",
            )
            .bind(id.0)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            found.ok_or(StoreError::NotFound)?;
            tx.record_change(Changed::Keys, now).await?;
            tx.commit().await?;
            Ok(())
        })
    }
}
