//! Use cases shared by the HTTP API, the CLI and background work. Each function reads what it
//! needs from the store, calls the pure domain, and writes the outcome; none knows about HTTP.

pub mod callees;
pub mod discovery;
pub mod keys;
pub mod ledger;
pub mod probe;
pub mod reports;
pub mod schedule;
pub mod trust;
pub mod worker;

use crate::storage::StoreError;

/// Why a use case failed, in terms a caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    /// The callee's card cannot be used (fetch, parse or signature); nothing was stored.
    #[error("{0}")]
    Unusable(String),
    /// The input is over a size bound.
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
