//! Registering callees (with synchronous card discovery), refreshing their cards, and reading
//! them back.

use std::collections::BTreeMap;

use serde_json::Value;

use super::ServiceError;
use super::discovery::{self, Discovery, Fetch, Validators};
use crate::domain::callee::{Callee, CardUrl, FetchState, FetchStatus};
use crate::domain::card::CardSnapshot;
use crate::domain::card::changes::{self, NewCard};
use crate::domain::card::signature::parse_jwks;
use crate::domain::ids::{CalleeId, SnapshotId};
use crate::domain::ledger::{EventRecord, NewEvent};
use crate::domain::probe::ProbeRun;
use crate::domain::time::Timestamp;
use crate::domain::version::ProtocolVersion;
use crate::storage::{Store, StoreError, Subject};

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
    pub probe: Option<crate::domain::probe::ProbeScript>,
}

pub const MAX_NAME_LEN: usize = 200;

/// What a refresh did.
#[derive(Debug, Clone)]
pub struct RefreshOutcome {
    pub status: FetchStatus,
    pub snapshot_id: Option<SnapshotId>,
    pub error: Option<String>,
    pub events: Vec<EventRecord>,
}

/// Registers a callee: fetches, parses and verifies its card now. On any failure nothing is
/// stored and the error says precisely why.
pub async fn register(
    store: &Store,
    discovery: &Discovery,
    registration: Registration,
    actor: &str,
    now: Timestamp,
) -> Result<CalleeDetail, ServiceError> {
    let card_url =
        CardUrl::parse(&registration.card_url).map_err(|e| ServiceError::Invalid(e.to_string()))?;
    let name = registration
        .name
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
    if store.card_url_taken(&card_url).await? {
        return Err(conflict(&card_url));
    }

    let fetched = discovery
        .fetch(&card_url, None)
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
    let assessment = discovery
        .assess(&url, &bytes, registration.trusted_keys.as_ref())
        .await;
    if let Some(problem) = &assessment.problem {
        return Err(ServiceError::Unusable(problem.clone()));
    }
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
            error: None,
        },
    };
    let snapshot = discovery::snapshot(
        callee.id,
        now,
        &url,
        &bytes,
        etag,
        last_modified,
        assessment,
    );
    let card = snapshot
        .assessment
        .card
        .as_ref()
        .expect("a trusted card parsed");
    let new = NewCard::Trusted {
        snapshot_id: snapshot.id,
        sha256: &snapshot.sha256,
        card,
        changed: true,
    };
    let events = to_new_events(
        callee.id,
        changes::events_for(&BTreeMap::new(), &new),
        actor,
    );
    let appended = match store
        .register_callee(&callee, &snapshot, &events, now)
        .await
    {
        Err(StoreError::Conflict(_)) => return Err(conflict(&callee.card_url)),
        other => other?,
    };
    Ok(CalleeDetail {
        callee,
        subjects: appended.into_iter().map(|(_, s)| s).collect(),
        latest_card: Some(snapshot),
        last_probes: BTreeMap::new(),
    })
}

fn conflict(card_url: &CardUrl) -> ServiceError {
    ServiceError::Conflict(format!(
        "a callee with card_url {card_url} is already registered"
    ))
}

/// How a refresh treats a card that may not have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revalidate {
    /// Conditional request; the same bytes (or a 304) record nothing new.
    IfChanged,
    /// Fetch and judge the card afresh even if unchanged (after the pinned keys changed).
    Always,
}

/// Fetches the callee's card again and records what changed (trust-model.md, "Scheduling").
pub async fn refresh(
    store: &Store,
    discovery: &Discovery,
    callee_id: CalleeId,
    revalidate: Revalidate,
    actor: &str,
    now: Timestamp,
) -> Result<RefreshOutcome, ServiceError> {
    let callee = store
        .callee(callee_id)
        .await
        .map_err(|e| not_found(e, callee_id))?;
    let latest = store.latest_snapshot(callee_id).await?;
    let subjects: BTreeMap<_, _> = store
        .subjects(callee_id)
        .await?
        .into_iter()
        .map(|s| (s.protocol_version, s.state))
        .collect();
    // Only a trusted snapshot may be revalidated by a 304: an untrusted one is judged afresh
    // (its keys may have been pinned since).
    let reusable = latest
        .as_ref()
        .filter(|s| s.assessment.trusted && revalidate == Revalidate::IfChanged);
    let validators = reusable.map(|s| Validators {
        url: s.url.clone(),
        etag: s.etag.clone(),
        last_modified: s.last_modified.clone(),
    });

    let (status, snapshot, error, new_events) =
        match discovery.fetch(&callee.card_url, validators.as_ref()).await {
            Err(e) => {
                let reason = format!("the card could not be fetched: {e}");
                let events = changes::events_for(
                    &subjects,
                    &NewCard::Untrusted {
                        snapshot_id: None,
                        reason: &reason,
                    },
                );
                (FetchStatus::Failed, None, Some(reason), events)
            }
            Ok(Fetch::Body { bytes, .. })
                if reusable.is_some_and(|l| l.sha256 == discovery::sha256_hex(&bytes)) =>
            {
                (
                    FetchStatus::Unchanged,
                    None,
                    None,
                    restore(&subjects, latest.as_ref()),
                )
            }
            Ok(Fetch::NotModified { .. }) => (
                FetchStatus::Unchanged,
                None,
                None,
                restore(&subjects, latest.as_ref()),
            ),
            Ok(Fetch::Body {
                url,
                etag,
                last_modified,
                bytes,
            }) => {
                let assessment = discovery
                    .assess(&url, &bytes, callee.trusted_keys.as_ref())
                    .await;
                let snapshot = discovery::snapshot(
                    callee_id,
                    now,
                    &url,
                    &bytes,
                    etag,
                    last_modified,
                    assessment,
                );
                let changed = latest.as_ref().is_none_or(|l| l.sha256 != snapshot.sha256);
                let (status, error, events) =
                    match (&snapshot.assessment.card, &snapshot.assessment.problem) {
                        (Some(card), None) => {
                            let new = NewCard::Trusted {
                                snapshot_id: snapshot.id,
                                sha256: &snapshot.sha256,
                                card,
                                changed,
                            };
                            (
                                FetchStatus::Fetched,
                                None,
                                changes::events_for(&subjects, &new),
                            )
                        }
                        (_, problem) => {
                            let reason = problem.clone().unwrap_or_default();
                            let new = NewCard::Untrusted {
                                snapshot_id: Some(snapshot.id),
                                reason: &reason,
                            };
                            (
                                FetchStatus::Untrusted,
                                Some(reason.clone()),
                                changes::events_for(&subjects, &new),
                            )
                        }
                    };
                (status, Some(snapshot), error, events)
            }
        };
    let fetch = FetchState {
        last_at: Some(now),
        status: Some(status),
        error: error.clone(),
    };
    let events = to_new_events(callee_id, new_events, actor);
    let appended = store
        .record_refresh(callee_id, snapshot.as_ref(), &fetch, &events, now)
        .await?;
    Ok(RefreshOutcome {
        status,
        snapshot_id: snapshot.map(|s| s.id),
        error,
        events: appended.into_iter().map(|(e, _)| e).collect(),
    })
}

/// An unchanged, trusted card lifts an earlier fetch failure.
fn restore(
    subjects: &BTreeMap<crate::domain::version::ProtocolVersion, crate::domain::gate::SubjectState>,
    latest: Option<&CardSnapshot>,
) -> Vec<(
    crate::domain::version::ProtocolVersion,
    crate::domain::ledger::EventBody,
)> {
    let Some(latest) = latest else {
        return Vec::new();
    };
    let Some(card) = &latest.assessment.card else {
        return Vec::new();
    };
    let new = NewCard::Trusted {
        snapshot_id: latest.id,
        sha256: &latest.sha256,
        card,
        changed: false,
    };
    changes::events_for(subjects, &new)
}

fn to_new_events(
    callee_id: CalleeId,
    events: Vec<(
        crate::domain::version::ProtocolVersion,
        crate::domain::ledger::EventBody,
    )>,
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
    store: &Store,
    discovery: &Discovery,
    callee_id: CalleeId,
    jwks: Option<Value>,
    actor: &str,
    now: Timestamp,
) -> Result<RefreshOutcome, ServiceError> {
    if let Some(jwks) = &jwks {
        parse_jwks(jwks).map_err(|e| ServiceError::Invalid(format!("trusted_keys: {e}")))?;
    }
    store
        .set_trusted_keys(callee_id, jwks.as_ref())
        .await
        .map_err(|e| not_found(e, callee_id))?;
    refresh(store, discovery, callee_id, Revalidate::Always, actor, now).await
}

pub async fn get(store: &Store, id: CalleeId) -> Result<CalleeDetail, ServiceError> {
    let callee = store.callee(id).await.map_err(|e| not_found(e, id))?;
    detail(store, callee).await
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

/// Maps a store miss on a callee to a message naming it.
pub(crate) fn not_found(err: StoreError, id: CalleeId) -> ServiceError {
    match err {
        StoreError::NotFound => ServiceError::NotFound(format!("no callee with id {id}")),
        other => other.into(),
    }
}
