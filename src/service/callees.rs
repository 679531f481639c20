//! Registering callees (with synchronous card discovery), refreshing their cards, and reading
//! them back. Registration and refreshes that reveal a new version or capability queue probes.

use std::collections::BTreeMap;

use serde_json::Value;
use url::Url;

use super::discovery::{self, Fetch, Validators};
use super::{Missing, Queued, ServiceError, Services, no_callee, require_callee};
use crate::domain::callee::{Backoff, Callee, CardUrl, FetchState, FetchStatus};
use crate::domain::card::changes::{self, NewCard};
pub use crate::domain::card::refresh::Revalidate;
use crate::domain::card::refresh::{self, Fetched};
use crate::domain::card::signature::{SignatureVerdict, parse_jwks};
use crate::domain::card::{Assessment, CardSnapshot};
use crate::domain::gate::{Subject, SubjectState};
use crate::domain::ids::{CalleeId, JobId, SnapshotId};
use crate::domain::job::Job;
use crate::domain::ledger::{EventBody, EventRecord, NewEvent};
use crate::domain::probe::{ProbeRun, ProbeScript};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::{RefreshRecord, Store, StoreError};

/// A callee with its subjects and newest card snapshot.
#[derive(Debug, Clone)]
pub struct CalleeDetail {
    pub callee: Callee,
    pub subjects: Vec<Subject>,
    pub latest_card: Option<CardSnapshot>,
    /// Each subject's newest probe run.
    pub last_probes: BTreeMap<ProtocolVersion, ProbeRun>,
}

/// What an operator supplies to register a callee.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    pub card_url: String,
    pub name: Option<String>,
    /// A JWKS to pin: only these keys will verify the callee's card.
    pub trusted_keys: Option<Value>,
    /// What the probe says to this callee.
    pub probe: Option<ProbeScript>,
}

pub const MAX_NAME_LEN: usize = 200;

/// How registration and refreshes treat cards over time.
#[derive(Debug, Clone)]
pub struct CardPolicy {
    /// Backoff for callees whose card cannot be fetched.
    pub backoff: Backoff,
    /// Queue probes when registration or a refresh reveals a new version or capability.
    pub probe_on_change: bool,
}

impl Default for CardPolicy {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            probe_on_change: true,
        }
    }
}

/// What a refresh did.
#[derive(Debug, Clone)]
pub struct RefreshOutcome {
    pub status: FetchStatus,
    pub snapshot_id: Option<SnapshotId>,
    pub error: Option<String>,
    pub events: Vec<EventRecord>,
}

/// Registers a callee: fetches, parses and verifies its card now. On any failure nothing is
/// stored and the error says precisely why. Its subjects' probes are queued.
pub async fn register(
    services: &Services,
    registration: Registration,
    actor: &str,
) -> Result<CalleeDetail, ServiceError> {
    let (card_url, name) = validate(&registration)?;
    if services.store.card_url_taken(&card_url).await? {
        return Err(conflict(&card_url));
    }
    let fetched = fetch_usable(services, &card_url, registration.trusted_keys.as_ref()).await?;
    let now = services.now();
    let callee = Callee {
        id: CalleeId::new(),
        card_url,
        name,
        created_at: now,
        trusted_keys: registration.trusted_keys,
        probe_script: registration.probe,
        fetch: FetchState {
            last_at: Some(now),
            status: Some(FetchStatus::Fetched),
            ..FetchState::default()
        },
        refresh_generation: 0,
    };
    let snapshot = fetched.into_snapshot(callee.id, now);
    let card = snapshot.assessment.card.as_ref().ok_or_else(|| {
        ServiceError::Internal(anyhow::anyhow!("a usable card without its parsed form"))
    })?;
    let new = NewCard::Trusted {
        snapshot_id: snapshot.id,
        sha256: &snapshot.sha256,
        card,
        previous: None,
        changed: true,
    };
    let events = to_new_events(
        callee.id,
        changes::events_for(&BTreeMap::new(), &new),
        actor,
    );
    let probes = probes_for(services, callee.id, "registration", &events, now);
    let appended = match services
        .store
        .register_callee(&callee, &snapshot, &events, &probes, now)
        .await
    {
        Err(StoreError::Conflict(_)) => return Err(conflict(&callee.card_url)),
        other => other?,
    };
    services.committed(Queued::jobs(&probes)).await;
    Ok(CalleeDetail {
        callee,
        subjects: appended.into_iter().map(|(_, s)| s).collect(),
        latest_card: Some(snapshot),
        last_probes: BTreeMap::new(),
    })
}

/// Checks what an operator supplied, before anything is fetched: the card URL and the name
/// (trimmed, empty meaning none), the probe script and the pinned keys.
fn validate(registration: &Registration) -> Result<(CardUrl, Option<String>), ServiceError> {
    let card_url =
        CardUrl::parse(&registration.card_url).map_err(|e| ServiceError::Invalid(e.to_string()))?;
    let name = registration
        .name
        .as_ref()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    if name
        .as_ref()
        .is_some_and(|n| n.chars().count() > MAX_NAME_LEN)
    {
        return Err(ServiceError::Invalid(format!(
            "name is longer than {MAX_NAME_LEN} characters"
        )));
    }
    if let Some(script) = &registration.probe {
        script
            .validate()
            .map_err(|e| ServiceError::Invalid(format!("probe: {e}")))?;
    }
    if let Some(jwks) = &registration.trusted_keys {
        parse_jwks(jwks).map_err(|e| ServiceError::Invalid(format!("trusted_keys: {e}")))?;
    }
    Ok((card_url, name))
}

/// A card fetched and judged usable (parsed, signed as required, same-origin).
struct UsableCard {
    url: Url,
    etag: Option<String>,
    last_modified: Option<String>,
    bytes: bytes::Bytes,
    assessment: Assessment,
}

impl UsableCard {
    fn into_snapshot(self, callee: CalleeId, now: Timestamp) -> CardSnapshot {
        discovery::snapshot(
            callee,
            now,
            &self.url,
            &self.bytes,
            self.etag,
            self.last_modified,
            self.assessment,
        )
    }
}

/// Fetches the card at `card_url` unconditionally and judges it; `Unusable` with the reason
/// when it cannot be used.
async fn fetch_usable(
    services: &Services,
    card_url: &CardUrl,
    trusted_keys: Option<&Value>,
) -> Result<UsableCard, ServiceError> {
    let fetched = services
        .discovery
        .fetch(card_url, None)
        .await
        .map_err(|e| ServiceError::Unusable(format!("the card could not be fetched: {e}")))?;
    let Fetch::Body {
        url,
        etag,
        last_modified,
        bytes,
    } = fetched
    else {
        return Err(ServiceError::Unusable(
            "the card server answered 304 to an unconditional request".into(),
        ));
    };
    let assessment = services.discovery.assess(&url, &bytes, trusted_keys).await;
    if let Some(problem) = &assessment.problem {
        return Err(ServiceError::Unusable(problem.clone()));
    }
    Ok(UsableCard {
        url,
        etag,
        last_modified,
        bytes,
        assessment,
    })
}

fn conflict(card_url: &CardUrl) -> ServiceError {
    ServiceError::Conflict(format!(
        "a callee with card_url {card_url} is already registered"
    ))
}

/// Fetches the callee's card again and records what changed (docs/trust-model.md, "Scheduling").
/// A new version or a newly advertised capability queues a probe of that subject.
///
/// `job`: the queue job (and its holder) this refresh carries out; it is completed in the same
/// transaction that records the outcome.
pub async fn refresh(
    services: &Services,
    callee_id: CalleeId,
    revalidate: Revalidate,
    actor: &str,
    job: Option<(JobId, &str)>,
) -> Result<RefreshOutcome, ServiceError> {
    let store = &services.store;
    let callee = store
        .callee(callee_id)
        .await
        .map_err(no_callee(callee_id))?;
    let latest = store.latest_snapshot(callee_id).await?;
    let validators = validators_for(latest.as_ref(), revalidate);
    // Judge the bytes once; deciding what they mean may need a second look if another
    // refresh of this callee commits in between.
    let fetched = bring(services, &callee, validators.as_ref()).await;
    let mut seen = Seen {
        subjects: subjects_of(store, callee_id).await?,
        callee,
        latest,
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        match record_refresh(services, &seen, &fetched, revalidate, actor, job).await {
            Ok(outcome) => return Ok(outcome),
            // Another refresh of this callee committed first: decide again on what it left.
            Err(StoreError::Conflict(_)) if attempts < 3 => {
                seen = Seen {
                    callee: store.callee(callee_id).await?,
                    latest: store.latest_snapshot(callee_id).await?,
                    subjects: subjects_of(store, callee_id).await?,
                };
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// What a refresh decides against: the callee, its newest snapshot and its subjects, as read
/// before the write that may find them moved.
struct Seen {
    callee: Callee,
    latest: Option<CardSnapshot>,
    subjects: BTreeMap<ProtocolVersion, SubjectState>,
}

/// The validators of a conditional fetch. A 304 revalidates a trusted snapshot, and an
/// untrusted one whose verdict its bytes alone decide. One whose key set could not be had is
/// judged afresh: the keys may be back.
fn validators_for(latest: Option<&CardSnapshot>, revalidate: Revalidate) -> Option<Validators> {
    latest
        .filter(|s| {
            revalidate == Revalidate::IfChanged
                && !matches!(
                    s.assessment.signature,
                    SignatureVerdict::KeyUnavailable { .. }
                )
        })
        .map(|s| Validators {
            url: s.url.clone(),
            etag: s.etag.clone(),
            last_modified: s.last_modified.clone(),
        })
}

/// Fetches the callee's card (conditionally when there are validators) and judges a body.
async fn bring(services: &Services, callee: &Callee, validators: Option<&Validators>) -> Fetched {
    match services.discovery.fetch(&callee.card_url, validators).await {
        Err(e) => Fetched::Failed(e.to_string()),
        Ok(Fetch::NotModified { .. }) => Fetched::NotModified,
        Ok(Fetch::Body {
            url,
            etag,
            last_modified,
            bytes,
        }) => {
            let assessment = services
                .discovery
                .assess(&url, &bytes, callee.trusted_keys.as_ref())
                .await;
            Fetched::Card(Box::new(discovery::snapshot(
                callee.id,
                services.now(),
                &url,
                &bytes,
                etag,
                last_modified,
                assessment,
            )))
        }
    }
}

/// Decides what the fetch means against `seen` and records it in one transaction, with the
/// probes it calls for. `Conflict` when another refresh of the callee committed first.
async fn record_refresh(
    services: &Services,
    seen: &Seen,
    fetched: &Fetched,
    revalidate: Revalidate,
    actor: &str,
    job: Option<(JobId, &str)>,
) -> Result<RefreshOutcome, StoreError> {
    let callee_id = seen.callee.id;
    let decided = refresh::decide(fetched, seen.latest.as_ref(), revalidate, &seen.subjects);
    let now = services.now();
    let fetch = seen.callee.fetch.after(
        decided.status,
        decided.error.clone(),
        &services.cards.backoff,
        now,
    );
    let events = to_new_events(callee_id, decided.events, actor);
    let probes = probes_for(services, callee_id, "version-appeared", &events, now);
    let record = RefreshRecord {
        callee_id,
        generation: seen.callee.refresh_generation,
        snapshot: decided.snapshot,
        fetch: &fetch,
        events: &events,
        job,
        probes: &probes,
    };
    let appended = services.store.record_refresh(&record, now).await?;
    services.committed(Queued::jobs(&probes)).await;
    if decided.status == FetchStatus::Failed {
        tracing::warn!(callee.id = %callee_id, failures = fetch.failures, next = ?fetch.next_at,
            "card of {callee_id} could not be fetched: {}", decided.error.as_deref().unwrap_or(""));
    }
    Ok(RefreshOutcome {
        status: decided.status,
        snapshot_id: decided.snapshot.map(|s| s.id),
        error: decided.error,
        events: appended.into_iter().map(|(e, _)| e).collect(),
    })
}

async fn subjects_of(
    store: &Store,
    callee_id: CalleeId,
) -> Result<BTreeMap<ProtocolVersion, SubjectState>, StoreError> {
    Ok(store
        .subjects(callee_id)
        .await?
        .into_iter()
        .map(|s| (s.protocol_version, s.state))
        .collect())
}

/// The probes new events call for (docs/trust-model.md: a new subject is probed at once; a
/// capability advertised for the first time is unverified until probed). They are queued in
/// the transaction that records the events, so a crash cannot leave a new subject unprobed.
fn probes_for(
    services: &Services,
    callee_id: CalleeId,
    appeared: &str,
    events: &[NewEvent],
    now: Timestamp,
) -> Vec<(ProbeRun, Job)> {
    if !services.cards.probe_on_change {
        return Vec::new();
    }
    let mut wanted: Vec<(ProtocolVersion, &str)> = Vec::new();
    for e in events {
        let reason = match e.body {
            EventBody::VersionAppeared { .. } => appeared,
            EventBody::CapabilityAdvertised { .. } => "capability-advertised",
            _ => continue,
        };
        // One probe per subject covers every capability it advertises.
        if !wanted.iter().any(|(v, _)| *v == e.protocol_version) {
            wanted.push((e.protocol_version, reason));
        }
    }
    wanted
        .into_iter()
        .map(|(version, reason)| {
            super::probe::probe_request(callee_id, version, reason, "scheduler", now)
        })
        .collect()
}

fn to_new_events(
    callee_id: CalleeId,
    events: Vec<(ProtocolVersion, EventBody)>,
    actor: &str,
) -> Vec<NewEvent> {
    events
        .into_iter()
        .map(|(protocol_version, body)| NewEvent {
            callee_id,
            protocol_version,
            body,
            actor: actor.to_string(),
        })
        .collect()
}

/// Replaces the callee's pinned keys (`None` clears them) and judges the card afresh with them.
pub async fn set_trusted_keys(
    services: &Services,
    callee_id: CalleeId,
    jwks: Option<Value>,
    actor: &str,
) -> Result<RefreshOutcome, ServiceError> {
    if let Some(jwks) = &jwks {
        parse_jwks(jwks).map_err(|e| ServiceError::Invalid(format!("trusted_keys: {e}")))?;
    }
    services
        .store
        .set_trusted_keys(callee_id, jwks.as_ref())
        .await
        .map_err(no_callee(callee_id))?;
    refresh(services, callee_id, Revalidate::Always, actor, None).await
}

/// A callee with its subjects. What the detail shows (a gate moved by background work) is in
/// this process's decisions by the time it is answered: the read model catches up first.
pub async fn get(services: &Services, id: CalleeId) -> Result<CalleeDetail, ServiceError> {
    let store = &services.store;
    let callee = store.callee(id).await.map_err(no_callee(id))?;
    let detail = detail(store, callee).await?;
    services.caught_up().await;
    Ok(detail)
}

async fn detail(store: &Store, callee: Callee) -> Result<CalleeDetail, ServiceError> {
    let subjects = store.subjects(callee.id).await?;
    let latest_card = store.latest_snapshot(callee.id).await?;
    let mut last_probes = BTreeMap::new();
    for s in &subjects {
        if let Some(run) = store.latest_probe(callee.id, s.protocol_version).await? {
            last_probes.insert(s.protocol_version, run);
        }
    }
    Ok(CalleeDetail {
        callee,
        subjects,
        latest_card,
        last_probes,
    })
}

/// A page of callees with their subjects.
pub async fn list(
    store: &Store,
    after: Option<CalleeId>,
    limit: u32,
) -> Result<Vec<CalleeDetail>, ServiceError> {
    let callees = store.callees(after, limit).await?;
    let mut page = Vec::with_capacity(callees.len());
    for callee in callees {
        page.push(detail(store, callee).await?);
    }
    Ok(page)
}

/// The callee registered with `card_url` (normalized as at registration), if any. A string
/// that could not be registered (not an http(s) URL) matches no callee.
pub async fn find_by_card_url(
    store: &Store,
    card_url: &str,
) -> Result<Option<CalleeId>, ServiceError> {
    match CardUrl::parse(card_url) {
        Ok(url) => Ok(store.callee_by_card_url(&url).await?),
        Err(_) => Ok(None),
    }
}

/// A callee's card snapshots, newest first, without their raw bytes.
pub async fn snapshots(
    store: &Store,
    callee_id: CalleeId,
    before: Option<SnapshotId>,
    limit: u32,
) -> Result<Vec<CardSnapshot>, ServiceError> {
    require_callee(store, callee_id).await?;
    Ok(store.snapshots(callee_id, before, limit).await?)
}

/// One snapshot with its raw card.
pub async fn snapshot(
    store: &Store,
    callee_id: CalleeId,
    id: SnapshotId,
) -> Result<CardSnapshot, ServiceError> {
    store
        .snapshot(callee_id, id)
        .await
        .map_err(ServiceError::missing(Missing::Snapshot(callee_id, id)))
}
