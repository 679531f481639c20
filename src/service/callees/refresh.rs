//! Refreshing a callee's card: fetched again (conditionally), judged, decided by
//! `domain::card::refresh` and recorded with the probes it calls for; and the pinned keys
//! replaced, which judges the card afresh.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{RefreshOutcome, probes_for, to_new_events};
use crate::domain::callee::{Callee, FetchStatus};
use crate::domain::card::CardSnapshot;
use crate::domain::card::refresh::Revalidate;
use crate::domain::card::refresh::{self, Fetched};
use crate::domain::card::signature::{SignatureVerdict, parse_jwks};
use crate::domain::gate::SubjectState;
use crate::domain::ids::{CalleeId, JobId};
use crate::domain::version::ProtocolVersion;
use crate::remote::FetchError;
use crate::service::discovery::{self, Fetch, Validators};
use crate::service::{Queued, ServiceError, Services, no_callee};
use crate::storage::{RefreshRecord, Store, StoreError};

/// Fetches the callee's card again and records what changed (docs/trust-model.md, "Scheduling").
/// A new version or a newly advertised capability queues a probe of that subject.
///
/// `job`: the queue job (and its holder) this refresh carries out; it is completed in the same
/// transaction that records the outcome.
pub(crate) async fn refresh(
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
        Err(e @ FetchError::Throttled { until, .. }) => Fetched::Deferred {
            reason: e.to_string(),
            until,
        },
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
    let fetch = match decided.retry_at {
        Some(until) => seen
            .callee
            .fetch
            .deferred(decided.error.clone(), until, now),
        None => seen.callee.fetch.after(
            decided.status,
            decided.error.clone(),
            &services.cards.backoff,
            now,
        ),
    };
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

/// Replaces the callee's pinned keys (`None` clears them) and judges the card afresh with them.
pub(crate) async fn set_trusted_keys(
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
