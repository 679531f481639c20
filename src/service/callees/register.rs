//! Registering a callee: its card fetched, parsed and verified now, and stored with its
//! subjects and their first probes in one transaction, or nothing stored and the reason said.

use std::collections::BTreeMap;

use serde_json::Value;
use url::Url;

use super::{CalleeDetail, MAX_NAME_LEN, Registration, probes_for, to_new_events};
use crate::domain::callee::{Callee, CardUrl, FetchState, FetchStatus};
use crate::domain::card::changes::{self, NewCard};
use crate::domain::card::signature::parse_jwks;
use crate::domain::card::{Assessment, CardSnapshot};
use crate::domain::ids::CalleeId;
use crate::domain::time::Timestamp;
use crate::service::credentials;
use crate::service::discovery::{self, Fetch};
use crate::service::{Queued, ServiceError, Services};
use crate::storage::StoreError;

/// Registers a callee: fetches, parses and verifies its card now. On any failure nothing is
/// stored and the error says precisely why. Its subjects' probes are queued.
pub(crate) async fn register(
    services: &Services,
    registration: Registration,
    actor: &str,
) -> Result<CalleeDetail, ServiceError> {
    let (card_url, name) = validate(&registration)?;
    credentials::check_all_alone(&registration.credentials)?;
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
    let sealed = credentials::seal_all(
        services,
        callee.id,
        card,
        &registration.credentials,
        actor,
        now,
    )?;
    let probes = probes_for(services, callee.id, "registration", &events, now);
    let appended = match services
        .store
        .register_callee(&callee, &snapshot, &events, &probes, &sealed, now)
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
