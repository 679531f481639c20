//! Webhook subscriptions and their outbox: deliveries queued in the ledger's own transaction,
//! claimed under a lease (one attempt at a time, across replicas), in ledger order per
//! (subscription, subject), a failing one holding the later ones for the hold-back at most
//! (see [`crate::domain::webhook`] for the guarantee).

use std::collections::BTreeMap;

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::lock::LockLedger;
use super::{BeginWrite, Store, StoreError, dispatch, touched};
use crate::domain::gate::Subject;
use crate::domain::ids::{DeliveryId, SubscriptionId};
use crate::domain::ledger::EventRecord;
use crate::domain::time::Timestamp;
use crate::domain::webhook::{
    self, Delivery, DeliveryStatus, EventType, Subscription, SubscriptionStatus,
};

#[derive(Clone, sqlx::FromRow)]
struct SubscriptionRow {
    id: Uuid,
    url: String,
    callee_id: Option<Uuid>,
    events: Option<String>,
    description: Option<String>,
    secret: String,
    previous_secret: Option<String>,
    previous_until: Option<DateTime<Utc>>,
    status: String,
    created_at: DateTime<Utc>,
    failing_since: Option<DateTime<Utc>>,
}

/// A subscription with the ledger's head when it was created.
#[derive(sqlx::FromRow)]
struct SubscriptionSince {
    #[sqlx(flatten)]
    subscription: SubscriptionRow,
    created_seq: i64,
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
struct DeliveryRow {
    id: Uuid,
    subscription_id: Uuid,
    seq: i64,
    event_type: String,
    payload: String,
    status: String,
    attempts: i32,
    next_attempt_at: DateTime<Utc>,
    last_status_code: Option<i32>,
    last_error: Option<String>,
    created_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
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

/// Where one process's webhook sender takes the deliveries its own appends queue: they are
/// inserted already leased to it, and handed over once their transaction commits, so the
/// common case (news for receivers with nothing pending) costs no claim at all. A delivery
/// behind one still pending about its subject in its subscription is not handed over: it is
/// claimed in its turn, as before.
pub(crate) struct Handoff {
    owner: String,
    lease: chrono::Duration,
    to: tokio::sync::mpsc::Sender<Vec<Claimed>>,
}

/// The lease a queued delivery is inserted under when it is handed over.
pub(crate) struct Lessee {
    owner: String,
    until: Timestamp,
}

impl Store {
    /// Makes this process's appends hand the deliveries they can to `owner`, leased for
    /// `lease`; the batches arrive on the returned channel after their commits. `None` if a
    /// sender took them already.
    pub fn hand_deliveries_to(
        &self,
        owner: &str,
        lease: std::time::Duration,
    ) -> Option<tokio::sync::mpsc::Receiver<Vec<Claimed>>> {
        /// Batches (one per append) waiting for the sender: past it, they are left to lapse
        /// and be claimed, rather than queue without bound in memory.
        const WAITING: usize = 256;
        let (to, from) = tokio::sync::mpsc::channel(WAITING);
        let handoff = Handoff {
            owner: owner.to_string(),
            lease: chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(60)),
            to,
        };
        self.handoff.set(handoff).ok().map(|()| from)
    }

    /// The lease an append at `now` queues its handed-over deliveries under, if a sender
    /// takes them.
    pub(crate) fn lessee(&self, now: Timestamp) -> Option<Lessee> {
        self.handoff.get().map(|h| Lessee {
            owner: h.owner.clone(),
            until: now + h.lease,
        })
    }

    /// Commits an append's transaction, then gives the sender what it leased to it (never
    /// before: the deliveries are not there until the commit). A sender that is gone or full
    /// leaves them to lapse and be claimed.
    pub(crate) async fn commit_handing_off<DB: sqlx::Database>(
        &self,
        tx: sqlx::Transaction<'static, DB>,
        leased: Vec<Claimed>,
    ) -> Result<(), StoreError> {
        tx.commit().await?;
        self.hand_off(leased);
        Ok(())
    }

    fn hand_off(&self, leased: Vec<Claimed>) {
        if leased.is_empty() {
            return;
        }
        if let Some(handoff) = self.handoff.get()
            && let Err(e) = handoff.to.try_send(leased)
        {
            tracing::debug!(error = %e, "webhook deliveries left to be claimed");
        }
    }
}

/// Queueing deliveries inside the transaction that appends the events they announce.
pub(crate) trait QueueDeliveries {
    /// One pending delivery per (event, subscription that wants it); those `lessee` can send
    /// at once are leased to it, and returned.
    async fn queue_deliveries(
        &mut self,
        appended: &[(EventRecord, Subject)],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<Vec<Claimed>, StoreError>;
}

macro_rules! impl_queue_deliveries {
    ($db:ty) => {
        impl QueueDeliveries for sqlx::Transaction<'static, $db> {
            async fn queue_deliveries(
                &mut self,
                appended: &[(EventRecord, Subject)],
                now: Timestamp,
                lessee: Option<&Lessee>,
            ) -> Result<Vec<Claimed>, StoreError> {
                let announced: Vec<_> = appended
                    .iter()
                    .filter_map(|(e, s)| EventType::of_kind(&e.kind).map(|t| (t, e, s)))
                    .collect();
                if announced.is_empty() {
                    return Ok(Vec::new());
                }
                let started = std::time::Instant::now();
                let rows: Vec<SubscriptionSince> = sqlx::query_as(concat!(
                    "select ",
                    subscription_columns!(),
                    ", created_seq from subscriptions where status <> 'disabled'"
                ))
                .fetch_all(&mut **self)
                .await?;
                let subscriptions = rows
                    .into_iter()
                    .map(|r| Ok((Subscription::try_from(r.subscription)?, r.created_seq)))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                // Where each subject's chains stand: its newest announced event of each type
                // (a new delivery names the newest one its subscription asks for, announced
                // since it was created, as its `previous_seq`), and the subscriptions with a
                // delivery about it still pending (then the new ones wait their turn, and are
                // claimed, not handed over). Neither reads the subject's past deliveries.
                let mut heads: BTreeMap<String, BTreeMap<EventType, i64>> = BTreeMap::new();
                let mut pending: BTreeMap<String, std::collections::BTreeSet<Uuid>> =
                    BTreeMap::new();
                let subjects: std::collections::BTreeSet<String> = announced
                    .iter()
                    .map(|(_, e, _)| webhook::subject_key(e.callee_id, &e.protocol_version))
                    .collect();
                for subject in subjects {
                    let announced: Vec<(String, i64)> = sqlx::query_as(
                        "select event_type, last_seq from subject_announcements where subject = $1",
                    )
                    .bind(&subject)
                    .fetch_all(&mut **self)
                    .await?;
                    let waiting: Vec<(Uuid,)> = sqlx::query_as(
                        "select distinct subscription_id from deliveries \
                         where subject = $1 and status = 'pending'",
                    )
                    .bind(&subject)
                    .fetch_all(&mut **self)
                    .await?;
                    heads.insert(
                        subject.clone(),
                        announced
                            .into_iter()
                            .filter_map(|(kind, seq)| EventType::parse(&kind).map(|k| (k, seq)))
                            .collect(),
                    );
                    pending.insert(subject, waiting.into_iter().map(|(id,)| id).collect());
                }
                let mut rows: Vec<QueuedRow> = Vec::new();
                let mut leased: Vec<Claimed> = Vec::new();
                // Each event's body, and how many deliveries name it (it goes with the last).
                let mut bodies: Vec<(i64, String, i64)> = Vec::new();
                let mut announcements: BTreeMap<(String, EventType), i64> = BTreeMap::new();
                // Whether each chain is still open to the handoff: nothing pending from before,
                // and every earlier delivery of this append handed over too.
                let mut open: BTreeMap<(Uuid, String), bool> = BTreeMap::new();
                // The last seq queued per chain by this append: what a handed-over delivery
                // follows (in an open chain, nothing from before it is pending).
                let mut in_append: BTreeMap<(Uuid, String), i64> = BTreeMap::new();
                for (kind, event, subject) in announced {
                    let key = webhook::subject_key(event.callee_id, &event.protocol_version);
                    let payload = webhook::EventPayload::new(kind, event, subject);
                    let subject_heads = heads.entry(key.clone()).or_default();
                    let waiting = pending.get(&key);
                    let mut wanted = 0_i64;
                    for (sub, created_seq) in subscriptions
                        .iter()
                        .filter(|(s, _)| s.wants(event.callee_id, kind))
                    {
                        wanted += 1;
                        let chain = (sub.id.0, key.clone());
                        let before = webhook::previous_seq(
                            sub,
                            event.callee_id,
                            *created_seq,
                            subject_heads,
                        );
                        let follows = in_append.insert(chain.clone(), event.seq);
                        let chain_open = open
                            .entry(chain)
                            .or_insert_with(|| !waiting.is_some_and(|w| w.contains(&sub.id.0)));
                        *chain_open &= lessee.is_some() && sub.status == SubscriptionStatus::Active;
                        let row = QueuedRow {
                            id: DeliveryId::new(),
                            subscription: sub.id,
                            seq: event.seq,
                            kind,
                            subject: key.clone(),
                            previous_seq: before,
                            body: None,
                            leased: *chain_open,
                        };
                        if row.leased {
                            let body = payload.render(before);
                            leased.push(row.handed_over(sub, follows, body, now));
                        }
                        rows.push(row);
                    }
                    // Announced, whoever wants it now: a later delivery about the subject may
                    // name it as the one before it.
                    subject_heads.insert(kind, event.seq);
                    announcements.insert((key, kind), event.seq);
                    if wanted > 0 {
                        bodies.push((event.seq, payload.into_head(), wanted));
                    }
                }
                if !bodies.is_empty() {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "insert into event_payloads (seq, head, deliveries) ",
                    );
                    insert.push_values(&bodies, |mut row, (seq, head, deliveries)| {
                        row.push_bind(*seq)
                            .push_bind(head.as_str())
                            .push_bind(*deliveries);
                    });
                    insert.build().execute(&mut **self).await?;
                }
                let mut upsert = sqlx::QueryBuilder::<$db>::new(
                    "insert into subject_announcements (subject, event_type, last_seq) ",
                );
                upsert.push_values(&announcements, |mut row, ((subject, kind), seq)| {
                    row.push_bind(subject.as_str())
                        .push_bind(kind.as_str())
                        .push_bind(*seq);
                });
                upsert.push(
                    " on conflict (subject, event_type) do update set last_seq = excluded.last_seq",
                );
                upsert.build().execute(&mut **self).await?;
                self.insert_queued(&rows, now, lessee).await?;
                // Inside the ledger's transaction: what an append spends on its subscribers
                // (the latency benchmark reads these).
                tracing::debug!(
                    deliveries = rows.len(),
                    handed_over = leased.len(),
                    queue_ms = started.elapsed().as_secs_f64() * 1e3,
                    "webhook deliveries queued"
                );
                Ok(leased)
            }
        }
    };
}

/// Inserting queued deliveries: many rows per statement on SQLite (in process, an event for a
/// thousand subscribers is a few statements),
/// arrays on Postgres, where one statement's text is the same whatever the rows (a VALUES
/// list of 200 rows took 91 ms to prepare and run inside the ledger's transaction, holding
/// its lock; the arrays take a few ms).
pub(crate) trait InsertQueued {
    /// Inserts `rows` as pending deliveries, due `now`; the ones marked leased under
    /// `lessee`'s lease.
    async fn insert_queued(
        &mut self,
        rows: &[QueuedRow],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<(), StoreError>;
}

/// Deleting deliveries: each event's stored body counts the deliveries that name it, and goes
/// with the last. Whoever deletes a delivery (a prune, a subscription's deletion) lowers the
/// count for exactly the rows its own statement deleted, so two of them at once cannot count
/// one delivery twice.
pub(crate) trait ReleasePayloads {
    /// `gone`: the seq of every delivery just deleted, one entry each.
    async fn release_payloads(&mut self, gone: &[(i64,)]) -> Result<(), StoreError>;
}

/// Deliveries gone per event seq.
fn per_event(gone: &[(i64,)]) -> BTreeMap<i64, i64> {
    let mut counts = BTreeMap::new();
    for (seq,) in gone {
        *counts.entry(*seq).or_insert(0) += 1;
    }
    counts
}

impl ReleasePayloads for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn release_payloads(&mut self, gone: &[(i64,)]) -> Result<(), StoreError> {
        let (seqs, counts): (Vec<i64>, Vec<i64>) = per_event(gone).into_iter().unzip();
        if seqs.is_empty() {
            return Ok(());
        }
        // Two statements whatever the number of events: a subscription deleted with a
        // hundred thousand deliveries does not hold the ledger lock for as many round trips.
        sqlx::query(
            "update event_payloads p set deliveries = p.deliveries - v.n \
             from unnest($1::bigint[], $2::bigint[]) as v (seq, n) where p.seq = v.seq",
        )
        .bind(&seqs)
        .bind(&counts)
        .execute(&mut **self)
        .await?;
        sqlx::query("delete from event_payloads where seq = any($1) and deliveries <= 0")
            .bind(&seqs)
            .execute(&mut **self)
            .await?;
        Ok(())
    }
}

impl ReleasePayloads for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn release_payloads(&mut self, gone: &[(i64,)]) -> Result<(), StoreError> {
        // In process: a statement per event costs no round trip.
        for (seq, n) in per_event(gone) {
            sqlx::query("update event_payloads set deliveries = deliveries - $2 where seq = $1")
                .bind(seq)
                .bind(n)
                .execute(&mut **self)
                .await?;
            sqlx::query("delete from event_payloads where seq = $1 and deliveries <= 0")
                .bind(seq)
                .execute(&mut **self)
                .await?;
        }
        Ok(())
    }
}

/// A row's lease as inserted.
fn lease_of<'a>(
    row: &QueuedRow,
    lessee: Option<&'a Lessee>,
) -> (Option<&'a str>, Option<Timestamp>) {
    match lessee {
        Some(l) if row.leased => (Some(l.owner.as_str()), Some(l.until)),
        _ => (None, None),
    }
}

impl InsertQueued for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn insert_queued(
        &mut self,
        rows: &[QueuedRow],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<(), StoreError> {
        // 13 binds a row keeps a chunk within SQLite's 32,766.
        for chunk in rows.chunks(1000) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "insert into deliveries (id, subscription_id, seq, event_type, payload, \
                 status, attempts, next_attempt_at, created_at, subject, previous_seq, \
                 lease_owner, lease_until) ",
            );
            insert.push_values(chunk, |mut row, queued| {
                let (owner, until) = lease_of(queued, lessee);
                row.push_bind(queued.id.0)
                    .push_bind(queued.subscription.0)
                    .push_bind(queued.seq)
                    .push_bind(queued.kind.as_str())
                    .push_bind(queued.body.clone())
                    .push_bind(DeliveryStatus::Pending.as_str())
                    .push_bind(0i32)
                    .push_bind(now)
                    .push_bind(now)
                    .push_bind(queued.subject.clone())
                    .push_bind(queued.previous_seq)
                    .push_bind(owner.map(str::to_string))
                    .push_bind(until);
            });
            insert.build().execute(&mut **self).await?;
        }
        Ok(())
    }
}

impl InsertQueued for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn insert_queued(
        &mut self,
        rows: &[QueuedRow],
        now: Timestamp,
        lessee: Option<&Lessee>,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id.0).collect();
        let (owners, untils): (Vec<Option<&str>>, Vec<Option<Timestamp>>) =
            rows.iter().map(|r| lease_of(r, lessee)).unzip();
        let subscriptions: Vec<Uuid> = rows.iter().map(|r| r.subscription.0).collect();
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
        let bodies: Vec<Option<&str>> = rows.iter().map(|r| r.body.as_deref()).collect();
        let subjects: Vec<&str> = rows.iter().map(|r| r.subject.as_str()).collect();
        let previous: Vec<Option<i64>> = rows.iter().map(|r| r.previous_seq).collect();
        sqlx::query(
            "insert into deliveries (id, subscription_id, seq, event_type, payload, status, \
             attempts, next_attempt_at, created_at, subject, previous_seq, lease_owner, \
             lease_until) \
             select id, subscription_id, seq, event_type, payload, 'pending', 0, $8, $8, \
             subject, previous_seq, lease_owner, lease_until from unnest($1::uuid[], \
             $2::uuid[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::int8[], \
             $9::text[], $10::timestamptz[]) \
             as v(id, subscription_id, seq, event_type, payload, subject, previous_seq, \
             lease_owner, lease_until)",
        )
        .bind(ids)
        .bind(subscriptions)
        .bind(seqs)
        .bind(kinds)
        .bind(bodies)
        .bind(subjects)
        .bind(previous)
        .bind(now)
        .bind(owners)
        .bind(untils)
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}

/// One delivery as queued.
pub(crate) struct QueuedRow {
    id: DeliveryId,
    subscription: SubscriptionId,
    seq: i64,
    kind: EventType,
    subject: String,
    previous_seq: Option<i64>,
    /// Its own body; `None` for an event's, stored once in `event_payloads`.
    body: Option<String>,
    /// Inserted leased to the appending process's sender, and handed to it.
    leased: bool,
}

impl QueuedRow {
    /// The claimed delivery this row is to the sender it is handed to; it follows `follows`,
    /// the delivery before it about its subject in its subscription queued by the same append
    /// (a chain with one pending from before is not handed over at all).
    fn handed_over(
        &self,
        subscription: &Subscription,
        follows: Option<i64>,
        body: String,
        now: Timestamp,
    ) -> Claimed {
        Claimed {
            delivery: Delivery {
                id: self.id,
                subscription_id: self.subscription,
                seq: self.seq,
                event_type: self.kind,
                payload: body,
                status: DeliveryStatus::Pending,
                attempts: 0,
                next_attempt_at: now,
                last_status_code: None,
                last_error: None,
                created_at: now,
                finished_at: None,
            },
            subscription: subscription.clone(),
            subject: self.subject.clone(),
            waits_for: follows,
        }
    }
}

impl_queue_deliveries!(sqlx::Postgres);
impl_queue_deliveries!(sqlx::Sqlite);

/// Ids of due deliveries, earliest first: pending, of an active subscription, ready (their
/// time come, not leased, and a promotion's or demotion's first attempt only once its
/// attestation is kept or it was created before `$6`), and either past the hold-back (created
/// before `$5`) or with every earlier pending delivery of their (subscription, subject) ready
/// too. So a subject's chain of pending deliveries is claimed in one round (the sender sends
/// each only after the one before it succeeded), and a delivery behind one that is waiting,
/// leased elsewhere or failing is not claimed at all. The subscription's status is a lookup
/// per delivery rather than a join, so the plan is the same whatever the statistics say: walk
/// `deliveries_pending` in due order until the batch is full.
macro_rules! due_deliveries {
    () => {
        "select d.id from deliveries d where d.status = 'pending' \
         and (select s.status from subscriptions s where s.id = d.subscription_id) = 'active' \
         and d.next_attempt_at <= $1 and (d.lease_until is null or d.lease_until < $1) \
         and (d.attempts > 0 or d.event_type not in ('subject.promoted', 'subject.demoted') \
         or d.created_at <= $6 or exists (select 1 from attestations a where a.seq = d.seq)) \
         and (d.created_at <= $5 or not exists (select 1 from deliveries e \
         where e.subject = d.subject and e.subscription_id = d.subscription_id \
         and e.status = 'pending' and e.seq < d.seq \
         and (e.next_attempt_at > $1 or e.lease_until >= $1 \
         or (e.attempts = 0 and e.event_type in ('subject.promoted', 'subject.demoted') \
         and e.created_at > $6 and not exists (select 1 from attestations b where b.seq = e.seq))))) \
         order by d.next_attempt_at, d.seq limit $2"
    };
}

/// What a claimed row returns besides its columns: its subject, and the delivery it must
/// follow in this round (the latest earlier pending one of its (subscription, subject), none
/// past the hold-back).
macro_rules! claimed_extras {
    () => {
        ", subject, case when created_at <= $5 then null else (select max(e.seq) \
         from deliveries e where e.subject = deliveries.subject \
         and e.subscription_id = deliveries.subscription_id and e.status = 'pending' \
         and e.seq < deliveries.seq) end as waits_for"
    };
}

#[derive(sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    delivery: DeliveryRow,
    subject: String,
    waits_for: Option<i64>,
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

impl Store {
    pub async fn insert_subscription(&self, s: &Subscription) -> Result<(), StoreError> {
        let events = s.events.as_ref().map(|e| {
            let names: Vec<&str> = e.iter().map(|t| t.as_str()).collect();
            serde_json::to_string(&names).expect("names serialize")
        });
        dispatch!(self, |pool| {
            sqlx::query(concat!(
                "insert into subscriptions (",
                subscription_columns!(),
                // The ledger's head now: a delivery never names an event from before its
                // subscription as the one before it.
                ", created_seq) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                 (select coalesce(max(seq), 0) from ledger))"
            ))
            .bind(s.id.0)
            .bind(&s.url)
            .bind(s.callee_id.map(|c| c.0))
            .bind(&events)
            .bind(&s.description)
            .bind(&s.secret)
            .bind(&s.previous_secret)
            .bind(s.previous_until)
            .bind(s.status.as_str())
            .bind(s.created_at)
            .bind(s.failing_since)
            .execute(pool)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Subscriptions by id after `after`, at most `limit`.
    pub async fn subscriptions_page(
        &self,
        after: Option<SubscriptionId>,
        limit: u32,
    ) -> Result<Vec<Subscription>, StoreError> {
        let select = concat!(
            "select ",
            subscription_columns!(),
            " from subscriptions where id > $1 order by id limit $2"
        );
        let rows: Vec<SubscriptionRow> =
            self.page_after(select, after.map(|id| id.0), limit).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn subscriptions(&self) -> Result<Vec<Subscription>, StoreError> {
        let rows: Vec<SubscriptionRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                subscription_columns!(),
                " from subscriptions order by id"
            ))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn subscription(&self, id: SubscriptionId) -> Result<Subscription, StoreError> {
        let row: SubscriptionRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                subscription_columns!(),
                " from subscriptions where id = $1"
            ))
            .bind(id.0)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// Deletes a subscription and its deliveries; `NotFound` if there is none. Under the
    /// ledger lock: no append is queueing deliveries for it meanwhile (nothing else ties them
    /// to it).
    pub async fn delete_subscription(&self, id: SubscriptionId) -> Result<(), StoreError> {
        let done = dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            tx.lock_ledger().await?;
            let gone: Vec<(i64,)> =
                sqlx::query_as("delete from deliveries where subscription_id = $1 returning seq")
                    .bind(id.0)
                    .fetch_all(&mut *tx)
                    .await?;
            tx.release_payloads(&gone).await?;
            let done = sqlx::query("delete from subscriptions where id = $1")
                .bind(id.0)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok::<_, StoreError>(done)
        })?;
        touched(done)
    }

    /// Makes `secret` the signing secret; the old one keeps signing until `previous_until`.
    pub async fn rotate_secret(
        &self,
        id: SubscriptionId,
        secret: &str,
        previous_until: Timestamp,
    ) -> Result<(), StoreError> {
        let done = dispatch!(self, |pool| {
            sqlx::query(
                "update subscriptions set previous_secret = secret, previous_until = $3, secret = $2 \
                 where id = $1",
            )
            .bind(id.0)
            .bind(secret)
            .bind(previous_until)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
        })?;
        touched(done)
    }

    /// Sets a subscription's status; `NotFound` if there is none.
    pub async fn set_subscription_status(
        &self,
        id: SubscriptionId,
        status: SubscriptionStatus,
    ) -> Result<(), StoreError> {
        let done = dispatch!(self, |pool| {
            sqlx::query("update subscriptions set status = $2 where id = $1")
                .bind(id.0)
                .bind(status.as_str())
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        touched(done)
    }

    /// Subscriptions whose receivers have failed every attempt since before `cutoff`.
    pub async fn failing_subscriptions(&self, cutoff: Timestamp) -> Result<i64, StoreError> {
        let (count,): (i64,) = dispatch!(self, |pool| {
            sqlx::query_as(
                "select count(*) from subscriptions where failing_since is not null \
                 and failing_since <= $1",
            )
            .bind(cutoff)
            .fetch_one(pool)
            .await
        })?;
        Ok(count)
    }

    pub async fn disable_subscription(&self, id: SubscriptionId) -> Result<(), StoreError> {
        dispatch!(self, |pool| {
            sqlx::query("update subscriptions set status = 'disabled' where id = $1")
                .bind(id.0)
                .execute(pool)
                .await
                .map(drop)
        })?;
        Ok(())
    }

    /// A subscription's deliveries, newest event first.
    pub async fn deliveries(
        &self,
        subscription: SubscriptionId,
        after: Option<DeliveryId>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        // Newest event first; the cursor is the last delivery seen, compared by (seq, id).
        let rows: Vec<DeliveryRow> = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "select ",
                delivery_columns!(),
                " from deliveries where subscription_id = $1 and ($2 is null or (seq, id) < \
                 (select seq, id from deliveries where id = $2)) \
                 order by seq desc, id desc limit $3"
            ))
            .bind(subscription.0)
            .bind(after.map(|id| id.0))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Deletes up to `limit` deliveries that finished (delivered or failed) before `before`,
    /// the oldest first, and the stored event bodies no delivery names any more; how many
    /// deliveries went. A delivery queued again meanwhile (pending) stays.
    pub async fn prune_deliveries(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError> {
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            let gone: Vec<(i64,)> = sqlx::query_as(
                "delete from deliveries where id in \
                 (select id from deliveries where status <> 'pending' and finished_at < $1 \
                  order by finished_at limit $2) \
                 and status <> 'pending' returning seq",
            )
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
            tx.release_payloads(&gone).await?;
            tx.commit().await?;
            Ok(gone.len() as u64)
        })
    }

    /// How many events' bodies are stored for their deliveries (what pruning them measures).
    pub async fn stored_event_bodies(&self) -> Result<u64, StoreError> {
        let (n,): (i64,) = dispatch!(self, |pool| {
            sqlx::query_as("select count(*) from event_payloads")
                .fetch_one(pool)
                .await
        })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Queues delivery `id` of `subscription` again, now; `NotFound` if it is not that
    /// subscription's. Its attempts so far are kept.
    pub async fn retry_delivery(
        &self,
        subscription: SubscriptionId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<Delivery, StoreError> {
        let row: DeliveryRow = dispatch!(self, |pool| {
            sqlx::query_as(concat!(
                "update deliveries set status = 'pending', next_attempt_at = $3, finished_at = null \
                 where id = $2 and subscription_id = $1 returning ",
                delivery_columns!()
            ))
            .bind(subscription.0)
            .bind(id.0)
            .bind(now)
            .fetch_one(pool)
            .await
        })?;
        row.try_into()
    }

    /// Leases up to `limit` due deliveries to `owner` until `lease_until` (see
    /// `due_deliveries!`): a later event never overtakes an earlier one about the same subject
    /// in the same subscription, except past the hold-back; a delivery leased to another
    /// process is skipped until its lease expires, and so is every one behind it.
    /// Two statements whatever the batch: the lease, then the leased rows with their
    /// subscriptions (the owner and lease time name the batch).
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        now: Timestamp,
        hold_cutoff: Timestamp,
        attestation_cutoff: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Claimed>, StoreError> {
        let claimed: Vec<(ClaimedRow, SubscriptionRow)> = dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            // Replicas on Postgres skip each other's rows instead of waiting on them; an
            // SQLite write transaction already excludes every other writer.
            let lease = if self.backend() == super::Backend::Postgres {
                concat!(
                    "update deliveries set lease_owner = $3, lease_until = $4 where id in (",
                    due_deliveries!(),
                    " for update of d skip locked) returning ",
                    delivery_columns!(),
                    claimed_extras!()
                )
            } else {
                concat!(
                    "update deliveries set lease_owner = $3, lease_until = $4 where id in (",
                    due_deliveries!(),
                    ") returning ",
                    delivery_columns!(),
                    claimed_extras!()
                )
            };
            let mut deliveries: Vec<ClaimedRow> = sqlx::query_as(lease)
                .bind(now)
                .bind(i64::from(limit))
                .bind(owner)
                .bind(lease_until)
                .bind(hold_cutoff)
                .bind(attestation_cutoff)
                .fetch_all(&mut *tx)
                .await?;
            deliveries.sort_by_key(|d| d.delivery.seq);
            let mut ids: Vec<Uuid> = deliveries
                .iter()
                .map(|d| d.delivery.subscription_id)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let mut subscriptions: Vec<SubscriptionRow> = Vec::new();
            for chunk in ids.chunks(500) {
                let mut select = sqlx::QueryBuilder::new(concat!(
                    "select ",
                    subscription_columns!(),
                    " from subscriptions where id in ("
                ));
                let mut list = select.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                select.push(")");
                subscriptions.extend(select.build_query_as().fetch_all(&mut *tx).await?);
            }
            tx.commit().await?;
            let mut claimed = Vec::with_capacity(deliveries.len());
            for row in deliveries {
                let Some(subscription) = subscriptions
                    .iter()
                    .find(|s| s.id == row.delivery.subscription_id)
                else {
                    continue;
                };
                claimed.push((row, subscription.clone()));
            }
            Ok::<_, StoreError>(claimed)
        })?;
        claimed
            .into_iter()
            .map(|(row, s)| {
                Ok(Claimed {
                    delivery: row.delivery.try_into()?,
                    subscription: s.try_into()?,
                    subject: row.subject,
                    waits_for: row.waits_for,
                })
            })
            .collect()
    }

    /// Records attempts, in one transaction, for the deliveries `owner` still holds the lease
    /// of (a lost lease records nothing: whoever holds it now makes the attempt again), and
    /// gives back the leases of `released`, claimed but not attempted (the delivery before
    /// them did not succeed in the round), as they were.
    pub async fn finish_attempts(
        &self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
        released: &[DeliveryId],
    ) -> Result<(), StoreError> {
        if attempts.is_empty() && released.is_empty() {
            return Ok(());
        }
        dispatch!(self, |pool| {
            let mut tx = pool.begin_write().await?;
            for chunk in released.chunks(500) {
                let mut update = sqlx::QueryBuilder::new(
                    "update deliveries set lease_owner = null, lease_until = null \
                     where lease_owner = ",
                );
                update.push_bind(owner);
                update.push(" and id in (");
                let mut ids = update.separated(", ");
                for id in chunk {
                    ids.push_bind(id.0);
                }
                update.push(")");
                update.build().execute(&mut *tx).await?;
            }
            tx.record(owner, attempts).await?;
            // A receiver is failing from its first failed attempt after a success until its
            // next success. Two statements for the whole batch, and a row is written only when
            // its health changes: rewriting every subscription after every round left a dead
            // row version per round for the claim's join to step over.
            let (ok, failed): (Vec<_>, Vec<_>) =
                receivers(attempts).into_iter().partition(|(_, ok)| *ok);
            if !ok.is_empty() {
                let mut update = sqlx::QueryBuilder::new(
                    "update subscriptions set failing_since = null, failing_announced_at = null \
                     where failing_since is not null and id in (",
                );
                let mut ids = update.separated(", ");
                for (id, _) in &ok {
                    ids.push_bind(id.0);
                }
                update.push(")");
                update.build().execute(&mut *tx).await?;
            }
            if let (false, Some((_, first))) = (failed.is_empty(), attempts.first()) {
                let mut update =
                    sqlx::QueryBuilder::new("update subscriptions set failing_since = ");
                update.push_bind(first.attempted_at);
                update.push(" where failing_since is null and id in (");
                let mut ids = update.separated(", ");
                for (id, _) in &failed {
                    ids.push_bind(id.0);
                }
                update.push(")");
                update.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok::<_, StoreError>(())
        })
    }
}

impl Store {
    /// Claims the subscriptions whose receiver has failed since before `cutoff` and whose
    /// failure nobody was told of yet, and queues, in the same transaction, one
    /// `subscription.failing` delivery about each to every other subscription that wants such
    /// news, with the body `body` makes. The claimed subscriptions.
    pub async fn announce_failing(
        &self,
        cutoff: Timestamp,
        now: Timestamp,
        body: impl Fn(&Subscription) -> String + Send,
    ) -> Result<Vec<SubscriptionId>, StoreError> {
        dispatch!(self, |pool| {
            // Almost always there is none: a read first, so that the check this runs every
            // second takes no write lock (SQLite has one for the whole file).
            let (waiting,): (i64,) = sqlx::query_as(
                "select count(*) from subscriptions where failing_since <= $1 \
                 and failing_announced_at is null and status <> 'disabled'",
            )
            .bind(cutoff)
            .fetch_one(pool)
            .await?;
            if waiting == 0 {
                return Ok(Vec::new());
            }
            let mut tx = pool.begin_write().await?;
            // As an append does: no subscription is deleted while deliveries are queued for it.
            tx.lock_ledger().await?;
            let claimed: Vec<(Uuid,)> = sqlx::query_as(
                "update subscriptions set failing_announced_at = $2 \
                 where failing_since <= $1 and failing_announced_at is null \
                 and status <> 'disabled' returning id",
            )
            .bind(cutoff)
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
            if claimed.is_empty() {
                tx.commit().await?;
                return Ok(Vec::new());
            }
            let rows: Vec<SubscriptionRow> = sqlx::query_as(concat!(
                "select ",
                subscription_columns!(),
                " from subscriptions where status <> 'disabled'"
            ))
            .fetch_all(&mut *tx)
            .await?;
            let all = rows
                .into_iter()
                .map(Subscription::try_from)
                .collect::<Result<Vec<_>, _>>()?;
            let kind = EventType::SubscriptionFailing;
            let mut announced = Vec::with_capacity(claimed.len());
            let mut rows = Vec::new();
            for (id,) in claimed {
                let Some(failing) = all.iter().find(|s| s.id.0 == id) else {
                    continue;
                };
                let body = body(failing);
                rows.extend(
                    all.iter()
                        .filter(|s| s.id != failing.id && s.wants_news(kind))
                        .map(|to| QueuedRow {
                            id: DeliveryId::new(),
                            subscription: to.id,
                            seq: 0,
                            kind,
                            subject: webhook::news_key(failing.id),
                            previous_seq: None,
                            body: Some(body.clone()),
                            leased: false,
                        }),
                );
                announced.push(failing.id);
            }
            tx.insert_queued(&rows, now, None).await?;
            tx.commit().await?;
            Ok(announced)
        })
    }
}

/// Writing a batch of attempts inside a transaction: one statement per attempt on SQLite (in
/// process, a statement costs microseconds), one for the whole batch on Postgres (each
/// statement is a round trip: 256 of them were most of a sending round's time).
trait RecordAttempts {
    async fn record(
        &mut self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
    ) -> Result<(), sqlx::Error>;
}

impl RecordAttempts for sqlx::Transaction<'static, sqlx::Sqlite> {
    async fn record(
        &mut self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
    ) -> Result<(), sqlx::Error> {
        for (id, attempt) in attempts {
            sqlx::query(
                "update deliveries set status = $3, attempts = attempts + 1, next_attempt_at = $4, \
                 last_status_code = $5, last_error = $6, finished_at = $7, lease_owner = null, \
                 lease_until = null, payload = coalesce($8, payload) \
                 where id = $1 and lease_owner = $2",
            )
            .bind(id.0)
            .bind(owner)
            .bind(attempt.status.as_str())
            .bind(attempt.next_attempt_at)
            .bind(attempt.status_code)
            .bind(attempt.error.as_deref())
            .bind(attempt.finished_at)
            .bind(attempt.payload.as_deref())
            .execute(&mut **self)
            .await?;
        }
        Ok(())
    }
}

impl RecordAttempts for sqlx::Transaction<'static, sqlx::Postgres> {
    async fn record(
        &mut self,
        owner: &str,
        attempts: &[(DeliveryId, AttemptRecord)],
    ) -> Result<(), sqlx::Error> {
        let ids: Vec<Uuid> = attempts.iter().map(|(id, _)| id.0).collect();
        let statuses: Vec<String> = attempts
            .iter()
            .map(|(_, a)| a.status.as_str().to_string())
            .collect();
        let next: Vec<Timestamp> = attempts.iter().map(|(_, a)| a.next_attempt_at).collect();
        let codes: Vec<Option<i32>> = attempts.iter().map(|(_, a)| a.status_code).collect();
        let errors: Vec<Option<String>> = attempts.iter().map(|(_, a)| a.error.clone()).collect();
        let finished: Vec<Option<Timestamp>> =
            attempts.iter().map(|(_, a)| a.finished_at).collect();
        let payloads: Vec<Option<String>> =
            attempts.iter().map(|(_, a)| a.payload.clone()).collect();
        sqlx::query(
            "update deliveries as d set status = v.status, attempts = d.attempts + 1, \
             next_attempt_at = v.next, last_status_code = v.code, last_error = v.error, \
             finished_at = v.finished, lease_owner = null, lease_until = null, \
             payload = coalesce(v.payload, d.payload) \
             from unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::int4[], $6::text[], \
             $7::timestamptz[], $8::text[]) as v(id, status, next, code, error, finished, payload) \
             where d.id = v.id and d.lease_owner = $1",
        )
        .bind(owner)
        .bind(ids)
        .bind(statuses)
        .bind(next)
        .bind(codes)
        .bind(errors)
        .bind(finished)
        .bind(payloads)
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}

/// Per subscription in a batch of attempts: whether any succeeded.
fn receivers(attempts: &[(DeliveryId, AttemptRecord)]) -> BTreeMap<SubscriptionId, bool> {
    let mut outcome: BTreeMap<SubscriptionId, bool> = BTreeMap::new();
    for (_, attempt) in attempts {
        let ok = attempt.status == DeliveryStatus::Delivered;
        *outcome.entry(attempt.subscription).or_default() |= ok;
    }
    outcome
}
