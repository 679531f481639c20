//! Subscriptions and deliveries as stored: their rows, and the column lists the queries share
//! (macros, so that each query's text stays one literal).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::ids::SubscriptionId;
use crate::domain::time::Timestamp;
use crate::domain::webhook::{
    Delivery, DeliveryStatus, EventType, Subscription, SubscriptionStatus,
};
use crate::storage::StoreError;

#[derive(Clone, sqlx::FromRow)]
pub(super) struct SubscriptionRow {
    pub(super) id: Uuid,
    pub(super) url: String,
    pub(super) callee_id: Option<Uuid>,
    pub(super) events: Option<String>,
    pub(super) description: Option<String>,
    pub(super) secret: String,
    pub(super) previous_secret: Option<String>,
    pub(super) previous_until: Option<DateTime<Utc>>,
    pub(super) status: String,
    pub(super) created_at: DateTime<Utc>,
    pub(super) failing_since: Option<DateTime<Utc>>,
}

/// A subscription with the ledger's head when it was created.
#[derive(sqlx::FromRow)]
pub(super) struct SubscriptionSince {
    #[sqlx(flatten)]
    pub(super) subscription: SubscriptionRow,
    pub(super) created_seq: i64,
}

impl TryFrom<SubscriptionRow> for Subscription {
    type Error = StoreError;
    fn try_from(r: SubscriptionRow) -> Result<Self, StoreError> {
        let events = r
            .events
            .map(|text| {
                let names: Vec<String> =
                    serde_json::from_str(&text).map_err(StoreError::corrupt)?;
                names
                    .iter()
                    .map(|n| {
                        EventType::parse(n)
                            .ok_or_else(|| StoreError::corrupt(format!("event type {n}")))
                    })
                    .collect::<Result<BTreeSet<_>, _>>()
            })
            .transpose()?;
        Ok(Subscription {
            id: r.id.into(),
            url: r.url,
            callee_id: r.callee_id.map(Into::into),
            events,
            description: r.description,
            secret: r.secret,
            previous_secret: r.previous_secret,
            previous_until: r.previous_until,
            status: SubscriptionStatus::parse(&r.status)
                .ok_or_else(|| StoreError::corrupt(format!("subscription status {}", r.status)))?,
            created_at: r.created_at,
            failing_since: r.failing_since,
        })
    }
}

macro_rules! subscription_columns {
    () => {
        "id, url, callee_id, events, description, secret, previous_secret, previous_until, status, \
         created_at, failing_since"
    };
}

#[derive(sqlx::FromRow)]
pub(super) struct DeliveryRow {
    pub(super) id: Uuid,
    pub(super) subscription_id: Uuid,
    pub(super) seq: i64,
    pub(super) event_type: String,
    pub(super) payload: String,
    pub(super) status: String,
    pub(super) attempts: i32,
    pub(super) next_attempt_at: DateTime<Utc>,
    pub(super) last_status_code: Option<i32>,
    pub(super) last_error: Option<String>,
    pub(super) created_at: DateTime<Utc>,
    pub(super) finished_at: Option<DateTime<Utc>>,
}

impl TryFrom<DeliveryRow> for Delivery {
    type Error = StoreError;
    fn try_from(r: DeliveryRow) -> Result<Self, StoreError> {
        Ok(Delivery {
            id: r.id.into(),
            subscription_id: r.subscription_id.into(),
            seq: r.seq,
            event_type: EventType::parse(&r.event_type)
                .ok_or_else(|| StoreError::corrupt(format!("event type {}", r.event_type)))?,
            payload: r.payload,
            status: DeliveryStatus::parse(&r.status)
                .ok_or_else(|| StoreError::corrupt(format!("delivery status {}", r.status)))?,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
            last_status_code: r.last_status_code,
            last_error: r.last_error,
            created_at: r.created_at,
            finished_at: r.finished_at,
        })
    }
}

/// A delivery's columns; its body is its own if it has one, else its event's (stored once per
/// event, in `event_payloads`) with its `previous_seq`, as `EventPayload::render` makes it.
macro_rules! delivery_columns {
    () => {
        "id, subscription_id, seq, event_type, coalesce(payload, (select p.head \
         from event_payloads p where p.seq = deliveries.seq) \
         || coalesce(cast(previous_seq as text), 'null') || '}}') as payload, status, attempts, \
         next_attempt_at, last_status_code, last_error, created_at, finished_at"
    };
}

/// A delivery leased to this process, with what the sender needs to keep its chain's order.
pub struct Claimed {
    pub delivery: Delivery,
    pub subscription: Subscription,
    /// What its (subscription, subject) chain is keyed by.
    pub subject: String,
    /// The seq of the delivery it may only follow, once that one has succeeded in this same
    /// round; `None` when nothing pending precedes it, or it is past the hold-back.
    pub waits_for: Option<i64>,
}

/// How an attempt ended, as stored.
pub struct AttemptRecord {
    /// The body the attempt sent, when it was set at this first attempt (a promotion's or
    /// demotion's attestation added): kept, so every retry sends the same bytes.
    pub payload: Option<String>,
    /// Whose receiver was tried, and when: what its `failing_since` follows.
    pub subscription: SubscriptionId,
    pub attempted_at: Timestamp,
    pub status: DeliveryStatus,
    pub next_attempt_at: Timestamp,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub finished_at: Option<Timestamp>,
}
