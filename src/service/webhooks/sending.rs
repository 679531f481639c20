//! Sending deliveries: signed as Standard Webhooks has it, retried with backoff (or as the
//! receiver's `Retry-After` asks, on 429 and 503), given up after the retry window, and a
//! subscription disabled when its receiver answers 410 Gone; and the test ping.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use rand::Rng;
use url::Url;

use super::settings::WebhookSettings;
use super::subscriptions::get;
use crate::domain::attestation::AttestationRecord;
use crate::domain::ids::{DeliveryId, SubscriptionId};
use crate::domain::politeness;
use crate::domain::webhook::{self, Attempt, Delivery, DeliveryStatus, Subscription};
use crate::service::{ServiceError, Services};
use crate::storage::{AttemptRecord, Claimed};
use tokio::sync::Semaphore;
/// How long a promotion's or demotion's first attempt waits for its attestation to be kept
/// (it is made right after the event commits): past it, the delivery goes without one.
const ATTESTATION_WAIT: chrono::Duration = chrono::Duration::seconds(2);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingResult {
    /// The `webhook-id` it carried.
    pub id: String,
    pub attempt: Attempt,
}

/// Sends a signed `ping` to the subscription's receiver now, whatever its status, and says
/// how it answered. Nothing is queued or recorded.
pub async fn test(services: &Services, id: SubscriptionId) -> Result<PingResult, ServiceError> {
    let subscription = get(&services.store, id).await?;
    let now = services.now();
    let ping_id = format!("ping_{}", uuid::Uuid::new_v4().simple());
    let body = webhook::ping(&subscription, now).to_string();
    let attempt = post(services, &subscription, &ping_id, &body).await;
    Ok(PingResult {
        id: ping_id,
        attempt,
    })
}

/// What one process's sending rounds share: the name its leases carry, the gates that keep
/// attempts to one receiver host within `host_concurrency` whatever round they belong to, and
/// the signal that a round left due deliveries behind (its claim was full).
pub struct Sender {
    owner: String,
    limit: usize,
    gates: std::sync::Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Set when a claim came back full: another round may start at once.
    pub more: tokio::sync::Notify,
}

/// Receiver hosts whose gate is kept while idle; past it, idle gates are dropped.
const REMEMBERED_RECEIVERS: usize = 4096;

impl Sender {
    pub fn new(owner: String, settings: &WebhookSettings) -> Self {
        Self {
            owner,
            limit: settings.host_concurrency.max(1),
            gates: std::sync::Mutex::default(),
            more: tokio::sync::Notify::new(),
        }
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The gate of the receiver host of `url`.
    fn gate(&self, url: &str) -> Arc<Semaphore> {
        let host = Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        let mut gates = self
            .gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if gates.len() >= REMEMBERED_RECEIVERS {
            // Only gates nobody holds: one in use keeps counting its attempts.
            gates.retain(|_, gate| Arc::strong_count(gate) > 1);
        }
        gates
            .entry(host)
            .or_insert_with(|| Arc::new(Semaphore::new(self.limit)))
            .clone()
    }
}

/// Claims the due deliveries and attempts each once, concurrently (at most
/// `host_concurrency` at a time to one receiver host, across this process's rounds), except
/// that the deliveries about one subject in one subscription go one after the other, each
/// only once the one before it succeeded (one that cannot go is given back unattempted);
/// returns how many were attempted.
pub async fn deliver_due(services: &Services, sender: &Sender) -> Result<usize, ServiceError> {
    let now = services.now();
    // The lease outlives one attempt, so no other process takes a delivery still in flight.
    let lease = chrono::Duration::from_std(services.webhooks.timeout * 2)
        .unwrap_or(chrono::Duration::seconds(60));
    let hold_back = chrono::Duration::from_std(services.webhooks.retry.hold_back)
        .unwrap_or(chrono::Duration::minutes(5));
    let started = std::time::Instant::now();
    let mut claimed = services
        .store
        .claim_deliveries(
            sender.owner(),
            now,
            now - hold_back,
            now - ATTESTATION_WAIT,
            now + lease,
            services.webhooks.batch,
        )
        .await?;
    if claimed.len() >= services.webhooks.batch as usize {
        // More are due: the next round need not wait for this one to end.
        sender.more.notify_one();
    }
    let attested = attach_attestations(services, &mut claimed).await?;
    send_round(services, sender, claimed, &attested, None, started).await
}

/// Sends what this process's own appends handed over (leased to it as they were queued, see
/// `Store::hand_deliveries_to`) as one round, without a claim; returns how many were attempted.
/// A promotion's or demotion's first attempt waits in its chain (the report before it goes at
/// once) for the attestation its event gets right after the commit, as a claimed one would.
pub async fn deliver_handed_over(
    services: &Services,
    sender: &Sender,
    handed: Vec<Claimed>,
) -> Result<usize, ServiceError> {
    let started = std::time::Instant::now();
    let mut seqs: Vec<i64> = handed
        .iter()
        .filter(|c| webhook::awaits_attestation(&c.delivery))
        .map(|c| c.delivery.seq)
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    let waiting = (!seqs.is_empty()).then(|| {
        let until = started + ATTESTATION_WAIT.to_std().unwrap_or_default();
        kept_attestations(services.clone(), seqs, until)
            .boxed()
            .shared()
    });
    let sent = send_round(services, sender, handed, &HashSet::new(), waiting, started).await;
    // A delivery that waited for one of these can be claimed now.
    sender.more.notify_one();
    sent
}

/// The attestations kept for events `seqs` (envelopes as JSON text, by seq), looked for until
/// all are there or `until`.
type Kept = futures::future::Shared<futures::future::BoxFuture<'static, Arc<HashMap<i64, String>>>>;

async fn kept_attestations(
    services: Services,
    seqs: Vec<i64>,
    until: std::time::Instant,
) -> Arc<HashMap<i64, String>> {
    /// The attestation is made a few milliseconds after the commit.
    const POLL: Duration = Duration::from_millis(3);
    loop {
        let kept: HashMap<i64, String> = match services.store.attestations_at(&seqs).await {
            Ok(kept) => envelopes(kept),
            Err(e) => {
                tracing::warn!(error = %e, "reading attestations for webhook deliveries");
                HashMap::new()
            }
        };
        if kept.len() >= seqs.len() || std::time::Instant::now() >= until {
            return Arc::new(kept);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Attempts `claimed` (leased to `sender`), each chain in order, and records the round.
async fn send_round(
    services: &Services,
    sender: &Sender,
    claimed: Vec<Claimed>,
    attested: &HashSet<DeliveryId>,
    waiting: Option<Kept>,
    started: std::time::Instant,
) -> Result<usize, ServiceError> {
    let owner = sender.owner();
    let claimed_in = started.elapsed();
    let chains = webhook::chains(
        claimed
            .iter()
            .map(|c| (c.subscription.id, c.subject.as_str())),
    );
    let runs = chains.into_iter().map(|chain| {
        let gate = sender.gate(&claimed[chain[0]].subscription.url);
        let (claimed, waiting) = (&claimed, waiting.clone());
        async move {
            let mut delivered = Vec::new();
            let mut ended = Vec::with_capacity(chain.len());
            for index in chain {
                let Claimed {
                    delivery,
                    subscription,
                    waits_for,
                    ..
                } = &claimed[index];
                if !webhook::may_follow(*waits_for, &delivered) {
                    ended.push((delivery.id, None));
                    continue;
                }
                // A handed-over promotion's or demotion's first attempt carries its attestation
                // once it is kept (the deliveries before it in the chain did not wait for it).
                let mut set_body = attested
                    .contains(&delivery.id)
                    .then(|| delivery.payload.clone());
                if let Some(kept) = waiting
                    .as_ref()
                    .filter(|_| webhook::awaits_attestation(delivery))
                {
                    let kept = kept.clone().await;
                    set_body = kept.get(&delivery.seq).and_then(|envelope| {
                        webhook::with_attestation(&delivery.payload, envelope)
                    });
                }
                let body = set_body.as_deref().unwrap_or(&delivery.payload);
                let attempt = {
                    let _permit = gate.acquire().await;
                    post(services, subscription, &delivery.id.to_string(), body).await
                };
                if matches!(attempt, Attempt::Delivered { .. }) {
                    delivered.push(delivery.seq);
                }
                let record = outcome(services, delivery, subscription, attempt).await;
                // A body set at this first attempt is kept, so every retry sends the same bytes.
                let record = record.map(|r| AttemptRecord {
                    payload: set_body,
                    ..r
                });
                ended.push((delivery.id, Some(record)));
            }
            ended
        }
    });
    let mut records = Vec::with_capacity(claimed.len());
    let mut released = Vec::new();
    for (id, record) in futures::future::join_all(runs).await.into_iter().flatten() {
        match record {
            Some(record) => records.push((id, record?)),
            None => released.push(id),
        }
    }
    let sent_in = started.elapsed() - claimed_in;
    // One write for the whole batch: on SQLite every write transaction is serialized.
    services
        .store
        .finish_attempts(owner, &records, &released)
        .await?;
    if !claimed.is_empty() {
        // Where a round's time goes (the latency benchmark reads these).
        tracing::debug!(
            deliveries = records.len(),
            released = released.len(),
            claim_ms = claimed_in.as_secs_f64() * 1e3,
            send_ms = sent_in.as_secs_f64() * 1e3,
            record_ms = (started.elapsed() - claimed_in - sent_in).as_secs_f64() * 1e3,
            "webhook round"
        );
    }
    Ok(records.len())
}

/// Tells the other subscriptions of every receiver that has now failed for the failing
/// threshold (`subscription.failing`), once per failure; wakes the sender if any was queued.
pub async fn announce_failing(services: &Services) -> Result<usize, ServiceError> {
    let now = services.now();
    let threshold = chrono::Duration::from_std(services.webhooks.failing_after)
        .unwrap_or(chrono::Duration::days(1));
    let announced = services
        .store
        .announce_failing(now - threshold, now, |failing| {
            webhook::failing_payload(failing, now).to_string()
        })
        .await?;
    for id in &announced {
        tracing::warn!(subscription.id = %id, "a subscription's receiver is failing; the other subscriptions are told");
    }
    if !announced.is_empty() {
        services.wake_deliveries();
    }
    Ok(announced.len())
}

/// A promotion's or demotion's first attempt carries the attestation kept for its event (made
/// before the sender was woken) as `data.attestation`; returns the deliveries whose body it set.
async fn attach_attestations(
    services: &Services,
    claimed: &mut [Claimed],
) -> Result<HashSet<DeliveryId>, ServiceError> {
    let seqs: Vec<i64> = claimed
        .iter()
        .filter(|c| webhook::awaits_attestation(&c.delivery))
        .map(|c| c.delivery.seq)
        .collect();
    let mut attested = HashSet::new();
    if seqs.is_empty() {
        return Ok(attested);
    }
    let kept = envelopes(services.store.attestations_at(&seqs).await?);
    for Claimed { delivery, .. } in claimed
        .iter_mut()
        .filter(|c| webhook::awaits_attestation(&c.delivery))
    {
        let Some(body) = kept
            .get(&delivery.seq)
            .and_then(|envelope| webhook::with_attestation(&delivery.payload, envelope))
        else {
            continue;
        };
        delivery.payload = body;
        attested.insert(delivery.id);
    }
    Ok(attested)
}

/// Each attestation's envelope as JSON text, by its event's seq: serialized once, spliced
/// into every delivery of that event.
fn envelopes(kept: Vec<AttestationRecord>) -> HashMap<i64, String> {
    kept.into_iter()
        .filter_map(|a| serde_json::to_string(&a.envelope).ok().map(|e| (a.seq, e)))
        .collect()
}

/// The signed POST of `body` as message `id`, and how it ended.
async fn post(services: &Services, subscription: &Subscription, id: &str, body: &str) -> Attempt {
    use reqwest::StatusCode;
    let now = services.now();
    let timestamp = now.timestamp();
    let signature = webhook::signature(
        &subscription.signing_secrets(now),
        id,
        timestamp,
        body.as_bytes(),
    );
    let request = services
        .outbound
        .client()
        .post(&subscription.url)
        .timeout(services.webhooks.timeout)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body.to_string());
    match services.outbound.send_unpaced(request).await {
        Ok(response) if response.status().is_success() => Attempt::Delivered {
            status: response.status().as_u16(),
        },
        Ok(response) if response.status() == StatusCode::GONE => Attempt::Gone,
        Ok(response) => {
            let status = response.status();
            // Only answers that mean "later" set the next attempt's time.
            let retry_after = matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            )
            .then(|| response.headers().get(reqwest::header::RETRY_AFTER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| politeness::parse_retry_after(v, now));
            Attempt::Failed {
                status: Some(status.as_u16()),
                error: format!("the receiver answered {status}"),
                retry_after,
            }
        }
        Err(e) => Attempt::Failed {
            status: None,
            error: e.to_string(),
            retry_after: None,
        },
    }
}

/// What an attempt leaves the delivery as: delivered, retried after the backoff, or given up.
async fn outcome(
    services: &Services,
    delivery: &Delivery,
    subscription: &Subscription,
    attempt: Attempt,
) -> Result<AttemptRecord, ServiceError> {
    let now = services.now();
    let policy = &services.webhooks.retry;
    let (subscription_id, attempted_at) = (subscription.id, now);
    let record = match attempt {
        Attempt::Delivered { status } => AttemptRecord {
            payload: None,
            subscription: subscription_id,
            attempted_at,
            status: DeliveryStatus::Delivered,
            next_attempt_at: now,
            status_code: Some(i32::from(status)),
            error: None,
            finished_at: Some(now),
        },
        Attempt::Gone => {
            services.store.disable_subscription(subscription.id).await?;
            tracing::warn!(subscription.id = %subscription.id, "the receiver answered 410 Gone; subscription disabled");
            AttemptRecord {
                payload: None,
                subscription: subscription_id,
                attempted_at,
                status: DeliveryStatus::Failed,
                next_attempt_at: now,
                status_code: Some(410),
                error: Some("410 Gone: the subscription is disabled".to_string()),
                finished_at: Some(now),
            }
        }
        Attempt::Failed {
            status,
            error,
            retry_after,
        } => {
            let attempts = u32::try_from(delivery.attempts).unwrap_or(0) + 1;
            let wait = policy.wait(attempts, rand::rng().random_range(0.8..1.2), retry_after);
            let next = now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::hours(1));
            let window = chrono::Duration::from_std(policy.give_up_after)
                .unwrap_or(chrono::Duration::days(3));
            let give_up = next > delivery.created_at + window;
            AttemptRecord {
                payload: None,
                subscription: subscription_id,
                attempted_at,
                status: if give_up {
                    DeliveryStatus::Failed
                } else {
                    DeliveryStatus::Pending
                },
                next_attempt_at: next,
                status_code: status.map(i32::from),
                error: Some(error),
                finished_at: give_up.then_some(now),
            }
        }
    };
    Ok(record)
}
