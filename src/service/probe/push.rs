//! Push deliveries for a running probe: receiving them (any replica), and reading them back for
//! the cycle that owns the run's token.

use rand::RngCore;
use serde_json::Value;

use super::ProbeSettings;
use crate::domain::probe::{PushDelivery, PushReceipt};
use crate::domain::time::Timestamp;
use crate::service::ServiceError;
use crate::storage::Store;

/// A push delivery as the cycle sees it.
#[derive(Debug, Clone)]
pub struct InboxDelivery {
    /// It carried cardgate's token (`X-A2A-Notification-Token`, or `Authorization: Bearer`).
    pub token_matches: bool,
    /// Otherwise, the first other header that carried it (the spec's "or similar").
    pub token_header: Option<String>,
    pub body: Vec<u8>,
    /// When cardgate's webhook received it (what its transition is observed at).
    pub received_at: Timestamp,
}

/// Where the cycle reads push deliveries for its token.
#[async_trait::async_trait]
pub trait PushInbox: Send + Sync {
    /// The deliveries after the first `skip`, oldest first.
    async fn deliveries(&self, token: &str, skip: usize) -> Vec<InboxDelivery>;
}

/// Deliveries stored by any replica's webhook receiver.
pub struct StoreInbox<'a>(pub &'a Store);

#[async_trait::async_trait]
impl PushInbox for StoreInbox<'_> {
    async fn deliveries(&self, token: &str, skip: usize) -> Vec<InboxDelivery> {
        match self.0.push_deliveries(token, skip).await {
            Ok(list) => list.iter().map(|d| to_inbox(d, token)).collect(),
            Err(e) => {
                tracing::warn!(error = ?e, "reading push deliveries failed");
                Vec::new()
            }
        }
    }
}

pub fn to_inbox(delivery: &PushDelivery, token: &str) -> InboxDelivery {
    let header = |name: &str| delivery.headers.get(name).and_then(Value::as_str);
    let token_matches = header("x-a2a-notification-token") == Some(token)
        || header("authorization").is_some_and(|a| a.strip_prefix("Bearer ") == Some(token));
    let token_header = (!token_matches)
        .then(|| {
            delivery.headers.as_object().and_then(|headers| {
                headers
                    .iter()
                    .find(|(_, value)| value.as_str().is_some_and(|v| v.contains(token)))
                    .map(|(name, _)| name.clone())
            })
        })
        .flatten();
    InboxDelivery {
        token_matches,
        token_header,
        body: delivery.body.clone(),
        received_at: delivery.received_at,
    }
}

/// A fresh random token for a run's webhook.
pub fn new_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Stores a webhook delivery for the running probe that owns `token`.
pub async fn receive_push(
    store: &Store,
    settings: &ProbeSettings,
    token: &str,
    headers: Value,
    body: Vec<u8>,
    now: Timestamp,
) -> Result<PushReceipt, ServiceError> {
    if body.len() > settings.limits.max_body {
        return Err(ServiceError::TooLarge(format!(
            "a push delivery may carry at most {} bytes",
            settings.limits.max_body
        )));
    }
    let delivery = PushDelivery {
        received_at: now,
        headers,
        body,
    };
    Ok(store
        .record_push_delivery(token, &delivery, settings.push_max_deliveries)
        .await?)
}
