//! API key management.

use super::{Missing, ServiceError};
use crate::domain::apikey::{self, ApiKey, Role, Secret};
use crate::domain::ids::ApiKeyId;
use crate::domain::time::Timestamp;
use crate::storage::Store;

/// Creates a key; its secret is returned here and nowhere else, ever.
pub async fn create(
    store: &Store,
    name: &str,
    role: Role,
    created_by: &str,
    now: Timestamp,
) -> Result<(ApiKey, Secret), ServiceError> {
    let name = apikey::validate_name(name).map_err(ServiceError::Invalid)?;
    let (key, secret) = apikey::generate(&name, role, created_by, now);
    store.insert_key(&key).await?;
    tracing::info!(key.id = %key.id, key.name = %key.name, role = %role, by = created_by, "API key {} created", key.id);
    Ok((key, secret))
}

pub async fn revoke(
    store: &Store,
    id: ApiKeyId,
    by: &str,
    now: Timestamp,
) -> Result<(), ServiceError> {
    store
        .revoke_key(id, now)
        .await
        .map_err(ServiceError::missing(Missing::ApiKey(id)))?;
    tracing::info!(key.id = %id, by, "API key {id} revoked");
    Ok(())
}

/// Every key, newest first (never their secrets: only hashes are stored).
pub async fn list(store: &Store) -> Result<Vec<ApiKey>, ServiceError> {
    Ok(store.keys().await?)
}

/// The live (unrevoked) key whose secret hashes to `key_hash`, if any.
pub async fn live_by_hash(store: &Store, key_hash: &str) -> Result<Option<ApiKey>, ServiceError> {
    Ok(store.live_key_by_hash(key_hash).await?)
}
