//! Webhook subscriptions as admins manage them: create, list, get, delete, rotate the secret,
//! pause and resume, and the deliveries each holds.

use std::collections::BTreeSet;

use url::Url;

use crate::domain::ids::{CalleeId, DeliveryId, SubscriptionId};
use crate::domain::time::Timestamp;
use crate::domain::webhook::{self, Delivery, EventType, Subscription, SubscriptionStatus};
use crate::service::{Missing, Queued, ServiceError, Services, require_callee};
use crate::storage::Store;
/// What a caller asks to subscribe to.
#[derive(Debug, Clone)]
pub struct NewSubscription {
    pub url: String,
    pub callee_id: Option<CalleeId>,
    pub events: Option<Vec<String>>,
    pub description: Option<String>,
}

const MAX_DESCRIPTION: usize = 500;

/// Creates a subscription; its secret is in the answer and in no later one.
pub async fn create(
    services: &Services,
    new: NewSubscription,
    now: Timestamp,
) -> Result<Subscription, ServiceError> {
    let url = Url::parse(&new.url)
        .map_err(|e| ServiceError::Invalid(format!("url `{}`: {e}", new.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ServiceError::Invalid("url must be http or https".into()));
    }
    // The same guard as every fetch: an address cardgate may not reach is refused now, not
    // discovered at the first delivery.
    services
        .outbound
        .check_url(&url)
        .map_err(|e| ServiceError::Undeliverable(format!("url cannot be delivered to: {e}")))?;
    let events = new
        .events
        .map(|names| {
            names
                .iter()
                .map(|n| {
                    EventType::parse(n).ok_or_else(|| {
                        let all: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                        ServiceError::Invalid(format!(
                            "events: `{n}` is not an event type (one of {})",
                            all.join(", ")
                        ))
                    })
                })
                .collect::<Result<BTreeSet<_>, _>>()
        })
        .transpose()?;
    if let Some(callee) = new.callee_id {
        require_callee(&services.store, callee).await?;
    }
    if new
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION)
    {
        return Err(ServiceError::Invalid(format!(
            "description is longer than {MAX_DESCRIPTION} characters"
        )));
    }
    let subscription = Subscription {
        id: SubscriptionId::new(),
        url: url.to_string(),
        callee_id: new.callee_id,
        events,
        description: new.description,
        secret: webhook::new_secret(),
        previous_secret: None,
        previous_until: None,
        status: SubscriptionStatus::Active,
        created_at: now,
        failing_since: None,
    };
    services.store.insert_subscription(&subscription).await?;
    Ok(subscription)
}

pub async fn list(
    store: &Store,
    after: Option<SubscriptionId>,
    limit: u32,
) -> Result<Vec<Subscription>, ServiceError> {
    Ok(store.subscriptions_page(after, limit).await?)
}

pub async fn get(store: &Store, id: SubscriptionId) -> Result<Subscription, ServiceError> {
    store
        .subscription(id)
        .await
        .map_err(ServiceError::missing(Missing::Subscription(id)))
}

pub async fn delete(store: &Store, id: SubscriptionId) -> Result<(), ServiceError> {
    store
        .delete_subscription(id)
        .await
        .map_err(ServiceError::missing(Missing::Subscription(id)))
}

/// A new secret; the old one signs too for `rotation_overlap`, so receivers can switch.
pub async fn rotate(
    services: &Services,
    id: SubscriptionId,
    now: Timestamp,
) -> Result<Subscription, ServiceError> {
    let overlap = chrono::Duration::from_std(services.webhooks.rotation_overlap)
        .unwrap_or(chrono::Duration::zero());
    services
        .store
        .rotate_secret(id, &webhook::new_secret(), now + overlap)
        .await
        .map_err(ServiceError::missing(Missing::Subscription(id)))?;
    get(&services.store, id).await
}

/// A subscription's deliveries, newest event first.
pub async fn deliveries(
    store: &Store,
    id: SubscriptionId,
    after: Option<DeliveryId>,
    limit: u32,
) -> Result<Vec<Delivery>, ServiceError> {
    get(store, id).await?;
    Ok(store.deliveries(id, after, limit).await?)
}

/// Sends delivery `delivery` again as soon as it is due in order.
pub async fn retry(
    services: &Services,
    id: SubscriptionId,
    delivery: DeliveryId,
    now: Timestamp,
) -> Result<Delivery, ServiceError> {
    get(&services.store, id).await?;
    services
        .store
        .retry_delivery(id, delivery, now)
        .await
        .map_err(ServiceError::missing(Missing::Delivery(id, delivery)))
}

/// Pauses a subscription: its deliveries queue up and go out once it is resumed.
pub async fn pause(store: &Store, id: SubscriptionId) -> Result<Subscription, ServiceError> {
    set_status(store, id, SubscriptionStatus::Paused).await
}

/// Resumes a paused subscription, or one disabled by a 410 (its receiver is back).
pub async fn resume(services: &Services, id: SubscriptionId) -> Result<Subscription, ServiceError> {
    let resumed = set_status(&services.store, id, SubscriptionStatus::Active).await?;
    // Its queued deliveries go out now, not at the sender's next poll.
    services.committed(Queued::Nothing).await;
    Ok(resumed)
}

async fn set_status(
    store: &Store,
    id: SubscriptionId,
    status: SubscriptionStatus,
) -> Result<Subscription, ServiceError> {
    store
        .set_subscription_status(id, status)
        .await
        .map_err(ServiceError::missing(Missing::Subscription(id)))?;
    get(store, id).await
}

/// What a test ping came to.
/// Subscriptions whose receivers have failed every attempt for `failing_after` or longer.
pub async fn failing_count(services: &Services) -> Result<i64, ServiceError> {
    let threshold = chrono::Duration::from_std(services.webhooks.failing_after)
        .unwrap_or(chrono::Duration::days(1));
    Ok(services
        .store
        .failing_subscriptions(services.now() - threshold)
        .await?)
}
