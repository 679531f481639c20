//! Callees: registering them (with synchronous card discovery), refreshing their cards, and
//! reading them back, one file per use case. Registration and refreshes that reveal a new
//! version or capability queue probes.

mod refresh;
mod register;

pub(crate) use refresh::{refresh, set_trusted_keys};
pub(crate) use register::register;

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Missing, ServiceError, Services, no_callee, require_callee};
use crate::domain::callee::CalleeFilter;
use crate::domain::callee::{Backoff, Callee, CardUrl, FetchStatus};
use crate::domain::card::CardSnapshot;
pub(crate) use crate::domain::card::refresh::Revalidate;
use crate::domain::credential::Credential;
use crate::domain::gate::Subject;
use crate::domain::ids::{CalleeId, SnapshotId};
use crate::domain::job::Job;
use crate::domain::ledger::{EventBody, EventRecord, NewEvent};
use crate::domain::probe::{ProbeRun, ProbeScript};
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::Store;

/// A callee with its subjects and newest card snapshot.
#[derive(Debug, Clone)]
pub(crate) struct CalleeDetail {
    pub callee: Callee,
    pub subjects: Vec<Subject>,
    pub latest_card: Option<CardSnapshot>,
    /// Each subject's newest probe run.
    pub last_probes: BTreeMap<ProtocolVersion, ProbeRun>,
}

/// What an operator supplies to register a callee.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registration {
    pub card_url: String,
    pub name: Option<String>,
    /// A JWKS to pin: only these keys will verify the callee's card.
    pub trusted_keys: Option<Value>,
    /// What the probe says to this callee.
    pub probe: Option<ProbeScript>,
    /// Credentials for the card's security schemes, by scheme name.
    pub credentials: BTreeMap<String, Credential>,
}

pub(crate) const MAX_NAME_LEN: usize = 200;

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
pub(crate) struct RefreshOutcome {
    pub status: FetchStatus,
    pub snapshot_id: Option<SnapshotId>,
    pub error: Option<String>,
    pub events: Vec<EventRecord>,
}

/// A callee with its subjects. What the detail shows (a gate moved by background work) is in
/// this process's decisions by the time it is answered: the read model catches up first.
pub(crate) async fn get(services: &Services, id: CalleeId) -> Result<CalleeDetail, ServiceError> {
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
pub(crate) async fn list(
    store: &Store,
    after: Option<CalleeId>,
    limit: u32,
) -> Result<Vec<CalleeDetail>, ServiceError> {
    details(store, store.callees(after, limit).await?).await
}

async fn details(store: &Store, callees: Vec<Callee>) -> Result<Vec<CalleeDetail>, ServiceError> {
    let mut page = Vec::with_capacity(callees.len());
    for callee in callees {
        page.push(detail(store, callee).await?);
    }
    Ok(page)
}

/// A page of the callees that match `filter`, with their subjects.
pub(crate) async fn search(
    store: &Store,
    filter: &CalleeFilter,
    after: Option<CalleeId>,
    limit: u32,
) -> Result<Vec<CalleeDetail>, ServiceError> {
    details(store, store.find_callees(filter, after, limit).await?).await
}

/// The snapshot of the same card (public or extended) fetched just before `snapshot`, with
/// its raw card: what a snapshot is compared with.
pub(crate) async fn previous_snapshot(
    store: &Store,
    snapshot: &CardSnapshot,
) -> Result<Option<CardSnapshot>, ServiceError> {
    let (callee_id, kind) = (snapshot.callee_id, snapshot.source.kind());
    let older = store
        .snapshots(callee_id, Some(snapshot.id), Some(kind), 1)
        .await?;
    match older.first() {
        Some(older) => Ok(Some(self::snapshot(store, callee_id, older.id).await?)),
        None => Ok(None),
    }
}

/// The callee registered with `card_url` (normalized as at registration), if any. A string
/// that could not be registered (not an http(s) URL) matches no callee.
pub(crate) async fn find_by_card_url(
    store: &Store,
    card_url: &str,
) -> Result<Option<CalleeId>, ServiceError> {
    match CardUrl::parse(card_url) {
        Ok(url) => Ok(store.callee_by_card_url(&url).await?),
        Err(_) => Ok(None),
    }
}

/// A callee's card snapshots, newest first, without their raw bytes.
pub(crate) async fn snapshots(
    store: &Store,
    callee_id: CalleeId,
    before: Option<SnapshotId>,
    limit: u32,
) -> Result<Vec<CardSnapshot>, ServiceError> {
    require_callee(store, callee_id).await?;
    Ok(store.snapshots(callee_id, before, None, limit).await?)
}

/// One snapshot with its raw card.
pub(crate) async fn snapshot(
    store: &Store,
    callee_id: CalleeId,
    id: SnapshotId,
) -> Result<CardSnapshot, ServiceError> {
    store
        .snapshot(callee_id, id)
        .await
        .map_err(ServiceError::missing(Missing::Snapshot(callee_id, id)))
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
            crate::service::probe::probe_request(callee_id, version, reason, "scheduler", now)
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
