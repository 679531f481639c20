//! Webhooks as the Standard Webhooks specification has them: which ledger events callers can
//! subscribe to, the payload each one carries, the signature over it, and when a failed
//! delivery is tried again. Pure: the outbox and the sender live elsewhere.
//!
//! The delivery guarantee: a subscription's deliveries about one subject go out in ledger
//! order, and different subjects never wait for each other. A delivery that keeps failing
//! holds the next one about its subject for at most [`RetryPolicy::hold_back`]; past it, the
//! later ones go out, each naming the seq of the event before it for that subject in that
//! subscription (`data.previous_seq`), so a receiver sees the gap and can fill it from the
//! ledger, while the failed one keeps retrying until its window ends. The sender takes a
//! subject's chain of pending deliveries in one round and sends each once the one before it
//! has succeeded ([`chains`], [`may_follow`]), so events appended together go out together.

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde_json::{Value, json};
use sha2::Sha256;

use super::gate::Subject;
use super::ids::{CalleeId, DeliveryId, SubscriptionId};
use super::ledger::EventRecord;
use super::time::Timestamp;

/// What a subscription can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    SubjectCreated,
    SubjectPromoted,
    SubjectDemoted,
    SubjectWithdrawn,
    CardRepublished,
    CardUntrusted,
    ProbeFinished,
    /// Another subscription's receiver has failed every attempt for the failing threshold:
    /// news about the registry itself, not a ledger event.
    SubscriptionFailing,
}

impl EventType {
    pub const ALL: [EventType; 8] = [
        Self::SubjectCreated,
        Self::SubjectPromoted,
        Self::SubjectDemoted,
        Self::SubjectWithdrawn,
        Self::CardRepublished,
        Self::CardUntrusted,
        Self::ProbeFinished,
        Self::SubscriptionFailing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SubjectCreated => "subject.created",
            Self::SubjectPromoted => "subject.promoted",
            Self::SubjectDemoted => "subject.demoted",
            Self::SubjectWithdrawn => "subject.withdrawn",
            Self::CardRepublished => "card.republished",
            Self::CardUntrusted => "card.untrusted",
            Self::ProbeFinished => "probe.finished",
            Self::SubscriptionFailing => "subscription.failing",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The type a ledger event of `kind` is announced as; `None` for the kinds no subscriber is
    /// told about (capability bookkeeping, restored trust, received reports).
    pub fn of_kind(kind: &str) -> Option<Self> {
        Some(match kind {
            "version-appeared" => Self::SubjectCreated,
            "promoted" => Self::SubjectPromoted,
            "demoted" => Self::SubjectDemoted,
            "version-withdrawn" => Self::SubjectWithdrawn,
            "card-republished" => Self::CardRepublished,
            "card-untrusted" => Self::CardUntrusted,
            "probe-finished" => Self::ProbeFinished,
            _ => return None,
        })
    }
}

/// Where a subscription stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionStatus {
    Active,
    /// An admin paused it: deliveries are queued, and go out once it is resumed.
    Paused,
    /// The receiver answered 410 Gone: nothing more is sent.
    Disabled,
}

impl SubscriptionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Paused => "paused",
            Self::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Active, Self::Paused, Self::Disabled]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// How a subscription's receiver is faring, as operators see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Its last attempt succeeded, or none has failed yet.
    Healthy,
    /// Every attempt has failed since `since`, but for less than the failing threshold.
    Erring { since: Timestamp },
    /// Every attempt has failed since `since`, for at least the failing threshold.
    Failing { since: Timestamp },
}

impl Health {
    /// Judged at `now` from when the receiver started failing (`None`: it is not).
    pub fn at(failing_since: Option<Timestamp>, now: Timestamp, threshold: Duration) -> Self {
        let threshold = chrono::Duration::from_std(threshold).unwrap_or(chrono::Duration::days(1));
        match failing_since {
            None => Self::Healthy,
            Some(since) if now - since >= threshold => Self::Failing { since },
            Some(since) => Self::Erring { since },
        }
    }
}

/// A caller's request to be told of events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub id: SubscriptionId,
    pub url: String,
    /// Only this callee's events; all callees' when `None`.
    pub callee_id: Option<CalleeId>,
    /// Only these types; all when `None`.
    pub events: Option<BTreeSet<EventType>>,
    pub description: Option<String>,
    pub secret: String,
    /// The secret before the last rotation, which also signs until `previous_until`.
    pub previous_secret: Option<String>,
    pub previous_until: Option<Timestamp>,
    pub status: SubscriptionStatus,
    pub created_at: Timestamp,
    /// Since when every attempt to its receiver has failed; `None` while the last succeeded.
    pub failing_since: Option<Timestamp>,
}

impl Subscription {
    /// Whether an event of `kind` about `callee` is queued for this subscription (a paused one
    /// keeps queueing; a disabled one does not).
    pub fn wants(&self, callee: CalleeId, kind: EventType) -> bool {
        self.status != SubscriptionStatus::Disabled
            && self.callee_id.is_none_or(|c| c == callee)
            && self.events.as_ref().is_none_or(|e| e.contains(&kind))
    }

    /// Whether news of `kind` about the registry itself (no callee, no ledger event) is queued
    /// for this subscription: one scoped to a callee gets it only when it names the type.
    pub fn wants_news(&self, kind: EventType) -> bool {
        self.status != SubscriptionStatus::Disabled
            && self
                .events
                .as_ref()
                .map_or(self.callee_id.is_none(), |e| e.contains(&kind))
    }

    /// The secrets that sign at `now`: the current one, and the previous one while the
    /// rotation overlaps.
    pub fn signing_secrets(&self, now: Timestamp) -> Vec<&str> {
        let mut secrets = vec![self.secret.as_str()];
        if let (Some(previous), Some(until)) = (&self.previous_secret, self.previous_until)
            && now < until
        {
            secrets.push(previous);
        }
        secrets
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    Pending,
    Delivered,
    /// Given up: the retry window passed, or the subscription is gone.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Failed]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// One event on its way to one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub subscription_id: SubscriptionId,
    pub seq: i64,
    pub event_type: EventType,
    /// The exact body of every attempt.
    pub payload: String,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub next_attempt_at: Timestamp,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub finished_at: Option<Timestamp>,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// 2xx.
    Delivered { status: u16 },
    /// 410: the receiver is gone for good; the subscription is disabled.
    Gone,
    /// Anything else: tried again after the backoff (or the receiver's `Retry-After`, on 429
    /// and 503), or given up past the window.
    Failed {
        status: Option<u16>,
        error: String,
        retry_after: Option<Duration>,
    },
}

/// The key that orders deliveries: one subject, `callee/version`.
pub fn subject_key(callee: CalleeId, protocol_version: &str) -> String {
    format!("{callee}/{protocol_version}")
}

/// The body of the delivery announcing `event`, with the subject as it stands after it, and
/// `previous_seq`: the event before it about the same subject in the same subscription (`null`
/// for the first), so that a receiver can tell a gap from a late arrival.
pub fn payload(
    kind: EventType,
    event: &EventRecord,
    subject: &Subject,
    previous_seq: Option<i64>,
) -> Value {
    json!({
        "type": kind.as_str(),
        "timestamp": super::time::format(event.recorded_at),
        "data": {
            "event": {
                "seq": event.seq,
                "callee_id": event.callee_id,
                "protocol_version": event.protocol_version,
                "kind": event.kind,
                "data": event.data,
                "actor": event.actor,
                "recorded_at": super::time::format(event.recorded_at),
                "prev_hash": event.prev_hash,
                "hash": event.hash,
            },
            "subject": {
                "gate_state": subject.gate().as_str(),
                "card_untrusted": subject.state.card_untrusted,
                "withdrawn": subject.state.withdrawn,
            },
            "previous_seq": previous_seq,
        },
    })
}

/// The body announcing one event, rendered once for all the subscriptions that want it: only
/// `previous_seq`, its last field, differs between them. At a thousand subscribers, building
/// each body from the event anew was most of the CPU an append spent on its deliveries.
#[derive(Debug, Clone)]
pub struct EventPayload {
    /// The body up to `"previous_seq":`.
    head: String,
}

impl EventPayload {
    pub fn new(kind: EventType, event: &EventRecord, subject: &Subject) -> Self {
        let mut head = payload(kind, event, subject, None).to_string();
        // Keys keep their insertion order (serde_json's `preserve_order`), so `previous_seq`
        // is the body's last field: `…,"previous_seq":null}}`.
        const NONE: &str = "null}}";
        debug_assert!(head.ends_with(r#""previous_seq":null}}"#));
        head.truncate(head.len() - NONE.len());
        Self { head }
    }

    /// What [`EventPayload::render`] adds to, as the store keeps it (`event_payloads`).
    pub fn into_head(self) -> String {
        self.head
    }

    /// The body for a subscription whose previous delivery about the subject was
    /// `previous_seq`: exactly [`payload`]'s.
    pub fn render(&self, previous_seq: Option<i64>) -> String {
        use std::fmt::Write;
        let mut body = String::with_capacity(self.head.len() + 24);
        body.push_str(&self.head);
        match previous_seq {
            Some(seq) => write!(body, "{seq}").expect("writing to a String"),
            None => body.push_str("null"),
        }
        body.push_str("}}");
        body
    }
}

/// The `previous_seq` of a delivery to `subscription` about a subject of `callee`, whose newest
/// announced event of each type is `heads`: the newest of those it asks for, announced since
/// it was created (`created_seq`, the ledger's head then); `None` for its first. What a
/// receiver compares with the last seq it has, to see a gap.
pub fn previous_seq(
    subscription: &Subscription,
    callee: CalleeId,
    created_seq: i64,
    heads: &std::collections::BTreeMap<EventType, i64>,
) -> Option<i64> {
    heads
        .iter()
        .filter(|(kind, seq)| **seq > created_seq && subscription.wants(callee, **kind))
        .map(|(_, seq)| *seq)
        .max()
}

/// The ordering key of news about a subscription (its own, apart from every subject's).
pub fn news_key(subscription: SubscriptionId) -> String {
    format!("subscription/{subscription}")
}

/// The body announcing that `failing`'s receiver has failed every attempt since its
/// `failing_since`, for the failing threshold: sent to the other subscriptions, so someone
/// hears of a receiver nobody else would (it cannot be told itself). No ledger event, so no
/// `seq`: the delivery listing shows it as seq 0.
pub fn failing_payload(failing: &Subscription, now: Timestamp) -> Value {
    json!({
        "type": EventType::SubscriptionFailing.as_str(),
        "timestamp": super::time::format(now),
        "data": {
            "subscription": {
                "id": failing.id,
                "description": failing.description,
                "failing_since": failing.failing_since.map(super::time::format),
            },
        },
    })
}

/// The body of a test ping, which an admin sends to check a receiver (`type` is `ping`, never
/// an event type, so receivers can tell it from news).
pub fn ping(subscription: &Subscription, now: Timestamp) -> Value {
    json!({
        "type": "ping",
        "timestamp": super::time::format(now),
        "data": { "subscription_id": subscription.id },
    })
}

/// A new signing secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// The key a secret stands for; `None` if it is not `whsec_` + base64.
fn key_of(secret: &str) -> Option<Vec<u8>> {
    STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
        .ok()
}

/// The `webhook-signature` header: one `v1,<base64 HMAC-SHA256>` over
/// `{id}.{timestamp}.{body}` per secret (two while a rotation overlaps), space-separated.
pub fn signature(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .filter_map(|secret| key_of(secret))
        .map(|key| {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length");
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body);
            format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A round's deliveries as chains: the indices of those with one key (a subscription and a
/// subject), in the order given (the sender passes them in ledger order). Chains come in the
/// order of their first delivery.
pub fn chains<K: Ord>(keys: impl IntoIterator<Item = K>) -> Vec<Vec<usize>> {
    let mut by_key: std::collections::BTreeMap<K, usize> = std::collections::BTreeMap::new();
    let mut chains: Vec<Vec<usize>> = Vec::new();
    for (index, key) in keys.into_iter().enumerate() {
        let chain = *by_key.entry(key).or_insert_with(|| {
            chains.push(Vec::new());
            chains.len() - 1
        });
        chains[chain].push(index);
    }
    chains
}

/// Whether a delivery's next attempt waits for its event's attestation: a promotion's or
/// demotion's first, which carries it (`data.attestation`; the attestation is made right after
/// the event commits, and the attempt goes without it past a short wait).
pub fn awaits_attestation(delivery: &Delivery) -> bool {
    delivery.attempts == 0
        && matches!(
            delivery.event_type,
            EventType::SubjectPromoted | EventType::SubjectDemoted
        )
}

/// `payload` with `envelope` (JSON) as its `data.attestation`, the last field of `data`, as
/// inserting it into the parsed body would place it; `None` if `payload` is not an event's
/// body. Spliced, not parsed: a promotion to a thousand subscribers is a thousand bodies.
pub fn with_attestation(payload: &str, envelope: &str) -> Option<String> {
    // An event's body ends with its `data` object, which ends with `previous_seq`.
    let open = payload.strip_suffix("}}")?;
    if !payload.starts_with('{') || !open.contains(r#","data":{"#) {
        return None;
    }
    let mut body = String::with_capacity(payload.len() + envelope.len() + 20);
    body.push_str(open);
    body.push_str(r#","attestation":"#);
    body.push_str(envelope);
    body.push_str("}}");
    Some(body)
}

/// Whether a claimed delivery may be attempted, given the seqs its chain delivered so far in
/// this round: one that must wait for an earlier delivery goes only once that one succeeded
/// here (not attempted, failed, or taken by another process: it is given back, unattempted).
pub fn may_follow(waits_for: Option<i64>, delivered: &[i64]) -> bool {
    waits_for.is_none_or(|seq| delivered.contains(&seq))
}

/// When a delivery is tried again, until when, and how long it may hold the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub max: Duration,
    /// Past this age a delivery that has not succeeded is given up (`failed`).
    pub give_up_after: Duration,
    /// How long a pending delivery holds the later ones about its subject: past this age
    /// (of the later one), they go out regardless, carrying `previous_seq`.
    pub hold_back: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(5),
            max: Duration::from_secs(3600),
            give_up_after: Duration::from_secs(3 * 24 * 3600),
            hold_back: Duration::from_secs(5 * 60),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt number `attempts` (1 for the first): doubling from
    /// `first` up to `max`, scaled by `jitter` in `[0.8, 1.2)` so that many deliveries that
    /// failed together do not all come back at once.
    pub fn backoff(&self, attempts: u32, jitter: f64) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        doubled.min(self.max).mul_f64(jitter.clamp(0.8, 1.2))
    }

    /// The wait after failed attempt number `attempts`: the receiver's `Retry-After` when it
    /// sent one (at least a second, at most `max`), else the backoff.
    pub fn wait(&self, attempts: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(asked) => asked.clamp(Duration::from_secs(1), self.max),
            None => self.backoff(attempts, jitter),
        }
    }
}

#[cfg(test)]
mod tests;
