//! Registering and reading callees.

use crate::domain::callee::{Callee, CardUrl};
use crate::domain::ids::CalleeId;
use crate::domain::time::Timestamp;
use crate::storage::{Store, StoreError, Subject};

use super::ServiceError;

/// A callee with its subjects.
#[derive(Debug, Clone)]
pub struct CalleeDetail {
    pub callee: Callee,
    pub subjects: Vec<Subject>,
}

/// What an operator supplies to register a callee.
#[derive(Debug, Clone)]
pub struct Registration {
    pub card_url: String,
    pub name: Option<String>,
}

pub const MAX_NAME_LEN: usize = 200;

/// Registers a callee. Until card discovery runs, it has no subjects.
pub async fn register(
    store: &Store,
    registration: Registration,
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
    let callee = Callee {
        id: CalleeId::new(),
        card_url,
        name,
        created_at: now,
    };
    match store.insert_callee(&callee).await {
        Ok(()) => Ok(CalleeDetail {
            callee,
            subjects: Vec::new(),
        }),
        Err(StoreError::Conflict(_)) => Err(ServiceError::Conflict(format!(
            "a callee with card_url {} is already registered",
            callee.card_url
        ))),
        Err(e) => Err(e.into()),
    }
}

pub async fn get(store: &Store, id: CalleeId) -> Result<CalleeDetail, ServiceError> {
    let callee = store.callee(id).await.map_err(|e| not_found(e, id))?;
    let subjects = store.subjects(id).await?;
    Ok(CalleeDetail { callee, subjects })
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
        let subjects = store.subjects(callee.id).await?;
        page.push(CalleeDetail { callee, subjects });
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
