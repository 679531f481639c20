//! Operator console sessions: a random id the browser holds in a cookie, and on the server only
//! its hash beside the hash of the API key that signed in. Nothing here knows about cookies;
//! the console does.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;

use super::ServiceError;
use crate::domain::apikey;
use crate::domain::time::Timestamp;
use crate::storage::Store;

/// A session id as handed to the browser: 32 random bytes, base64url.
pub(crate) struct SessionId(pub String);

impl std::fmt::Debug for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionId(****)")
    }
}

/// Longest session id accepted back from a cookie: anything longer is not one of ours and is
/// not worth hashing.
const MAX_ID_LEN: usize = 64;

/// The stored hash of a presented session id, or `None` for one that cannot be ours.
fn stored_hash(session_id: &str) -> Option<String> {
    (!session_id.is_empty() && session_id.len() <= MAX_ID_LEN).then(|| apikey::hash(session_id))
}

/// Starts a session for the key whose hash is `key_hash` (already checked by the caller),
/// lasting `ttl` from `now`.
pub(crate) async fn open(
    store: &Store,
    key_hash: &str,
    now: Timestamp,
    ttl: Duration,
) -> Result<SessionId, ServiceError> {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let id = URL_SAFE_NO_PAD.encode(bytes);
    let expires_at =
        now + chrono::Duration::from_std(ttl).map_err(|e| ServiceError::Internal(e.into()))?;
    store
        .insert_session(&apikey::hash(&id), key_hash, now, expires_at)
        .await?;
    Ok(SessionId(id))
}

/// The key hash behind a live session, or `None` for an unknown, expired or malformed id.
pub(crate) async fn key_of(
    store: &Store,
    session_id: &str,
    now: Timestamp,
) -> Result<Option<String>, ServiceError> {
    match stored_hash(session_id) {
        Some(hash) => Ok(store.session_key(&hash, now).await?),
        None => Ok(None),
    }
}

/// Ends a session.
pub(crate) async fn close(store: &Store, session_id: &str) -> Result<(), ServiceError> {
    match stored_hash(session_id) {
        Some(hash) => Ok(store.delete_session(&hash).await?),
        None => Ok(()),
    }
}
