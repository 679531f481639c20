//! API key management.

use super::readmodel::ReadModel;
use super::{Missing, ServiceError};
use crate::domain::apikey::{self, ApiKey, Role, Secret};
use crate::domain::ids::ApiKeyId;
use crate::domain::time::Timestamp;
use crate::storage::Store;

/// Creates a key; its secret is returned here and nowhere else, ever. `view`: the read model
/// of this process, if it serves one (the CLI does not), brought up to date before returning,
/// so that the key works on the next request.
pub(crate) async fn create(
    store: &Store,
    view: Option<&ReadModel>,
    name: &str,
    role: Role,
    created_by: &str,
    now: Timestamp,
) -> Result<(ApiKey, Secret), ServiceError> {
    let name = apikey::validate_name(name).map_err(ServiceError::Invalid)?;
    let (key, secret) = apikey::generate(&name, role, created_by, now);
    store.insert_key(&key).await?;
    if let Some(view) = view {
        view.sync().await;
    }
    tracing::info!(key.id = %key.id, key.name = %key.name, role = %role, by = created_by, "API key {} created", key.id);
    Ok((key, secret))
}

/// Revokes a key. With `view`, the key fails on this process's next request; other processes
/// learn it from the change feed.
pub(crate) async fn revoke(
    store: &Store,
    view: Option<&ReadModel>,
    id: ApiKeyId,
    by: &str,
    now: Timestamp,
) -> Result<(), ServiceError> {
    store
        .revoke_key(id, now)
        .await
        .map_err(ServiceError::missing(Missing::ApiKey(id)))?;
    if let Some(view) = view {
        view.sync().await;
    }
    tracing::info!(key.id = %id, by, "API key {id} revoked");
    Ok(())
}

/// Every key, newest first (never their secrets: only hashes are stored).
pub(crate) async fn list(
    store: &Store,
    after: Option<ApiKeyId>,
    limit: u32,
) -> Result<Vec<ApiKey>, ServiceError> {
    Ok(store.keys(after, limit).await?)
}
