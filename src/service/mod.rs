//! Use cases shared by the HTTP API, the CLI and background work. Each function reads what it
//! needs from the store, calls the pure domain, and writes the outcome; none knows about HTTP.
//!
//! [`Services`] is what the use cases depend on, named one by one; `app` composes it, and the
//! HTTP layer and the background runtime hold it. Nothing here imports either of them.

pub(crate) mod attestations;
pub(crate) mod callees;
pub mod credentials;
pub mod discovery;
pub(crate) mod events;
pub mod hosts;
pub(crate) mod key_file;
pub(crate) mod keys;
pub mod ledger;
pub mod policy;
pub mod probe;
pub mod readmodel;
pub(crate) mod reports;
pub mod retention;
pub mod rulebook;
pub(crate) mod sessions;
pub mod standing;
pub(crate) mod status;
pub mod transparency;
pub mod trust;
pub mod webhooks;

use std::fmt;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::domain::ids::{ApiKeyId, CalleeId, DeliveryId, ProbeRunId, SnapshotId, SubscriptionId};
use crate::domain::time::{Clock, Timestamp};
use crate::domain::version::ProtocolVersion;
use crate::remote::Outbound;
use crate::storage::{Store, StoreError};
use callees::CardPolicy;
use discovery::Discovery;
use probe::ProbeSettings;
use readmodel::ReadModel;
use transparency::Transparency;
use webhooks::WebhookSettings;

/// The dependencies of the use cases. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    /// The one guarded client for everything cardgate fetches.
    pub outbound: Outbound,
    pub discovery: Discovery,
    pub probe: ProbeSettings,
    pub cards: CardPolicy,
    /// Wakes the job worker when a use case enqueues a job.
    pub wake: Arc<Notify>,
    /// What decisions and key checks read: the store's state, in memory.
    pub view: ReadModel,
    /// How webhook deliveries are sent.
    pub webhooks: WebhookSettings,
    /// Wakes the webhook sender when deliveries may have become due outside the ledger (a
    /// subscription resumed); appends wake it through the read model's change signal.
    pub deliveries: Arc<Notify>,
    /// Signs checkpoints and receipts.
    pub transparency: Transparency,
    /// Seals and opens the credentials presented to callees.
    pub secrets: credentials::SecretsKey,
    /// OAuth 2.0 tokens fetched for probes, shared by this process's probes.
    pub tokens: crate::remote::presentation::TokenCache,
}

impl Services {
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn wake_deliveries(&self) {
        self.deliveries.notify_one();
    }

    /// What every use case does after its write commits, in one place so none forgets
    /// read-your-writes: the webhook sender looks for deliveries at once rather than at its
    /// next poll (appends queue them in the same transaction), the read model catches up (a
    /// caller reads its own write), and the worker wakes for the jobs the write queued.
    pub async fn committed(&self, queued: Queued) {
        // Deliveries do not wait on the read model: the sender starts while it catches up.
        self.wake_deliveries();
        self.view.sync().await;
        if queued == Queued::Jobs {
            self.wake.notify_one();
        }
    }

    /// Before answering a read of what background work wrote: this process's read model
    /// catches up, so the answer and the decisions agree.
    pub async fn caught_up(&self) {
        self.view.sync().await;
    }
}

/// What a committed write set in motion, for [`Services::committed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    Nothing,
    /// Jobs for the worker (probes, refreshes).
    Jobs,
}

impl Queued {
    /// `Jobs` when `jobs` holds any.
    pub fn jobs<T>(jobs: &[T]) -> Self {
        if jobs.is_empty() {
            Queued::Nothing
        } else {
            Queued::Jobs
        }
    }
}

/// Why a use case failed, in terms a caller can act on. Storage failures are interpreted
/// here, once: callers above the services never see a storage type.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    NotFound(Missing),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    /// The callee's card cannot be used (fetch, parse or signature); nothing was stored.
    #[error("{0}")]
    Unusable(String),
    /// A webhook URL the outbound policy refuses (a private address, say); nothing was stored.
    #[error("{0}")]
    Undeliverable(String),
    /// A credential that does not fit the card's security scheme of that name (or names no
    /// scheme the card declares); nothing was stored.
    #[error("{0}")]
    Mismatch(String),
    /// The input is over a size bound.
    #[error("{0}")]
    TooLarge(String),
    /// The database cannot be reached or is overloaded: worth retrying shortly.
    #[error("the database is unavailable; retry shortly")]
    Unavailable(#[source] StoreError),
    /// This replica has not caught up with what the caller already knows: retry shortly.
    #[error("{0}")]
    Behind(String),
    /// A bug or corrupt data. The cause is for the log, never for the caller.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// What a lookup did not find. The one place "not found" messages are worded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Callee(CalleeId),
    /// The callee exists but has no such subject; `offered` lists the versions it has.
    Subject {
        callee: CalleeId,
        version: ProtocolVersion,
        offered: Vec<ProtocolVersion>,
    },
    Snapshot(CalleeId, SnapshotId),
    ProbeRun(ProbeRunId),
    ApiKey(ApiKeyId),
    Subscription(SubscriptionId),
    Delivery(SubscriptionId, DeliveryId),
    /// No credential is set for this scheme.
    Credential {
        callee: CalleeId,
        scheme: String,
    },
    /// No running probe has this webhook token.
    PushToken,
    /// A row the store did not find, with nothing more known.
    Record,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Callee(id) => write!(f, "no callee with id {id}"),
            Self::Subject {
                callee,
                version,
                offered,
            } if offered.is_empty() => write!(f, "callee {callee} has no subject {version}"),
            Self::Subject {
                callee,
                version,
                offered,
            } => {
                let offered: Vec<String> = offered.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "callee {callee} has no subject {version} (it offers {})",
                    offered.join(", ")
                )
            }
            Self::Snapshot(callee, id) => write!(f, "callee {callee} has no snapshot {id}"),
            Self::ProbeRun(id) => write!(f, "no probe run with id {id}"),
            Self::ApiKey(id) => write!(f, "no API key with id {id}"),
            Self::Subscription(id) => write!(f, "no subscription with id {id}"),
            Self::Delivery(sub, id) => write!(f, "subscription {sub} has no delivery {id}"),
            Self::Credential { callee, scheme } => {
                write!(f, "callee {callee} has no credential for scheme `{scheme}`")
            }
            Self::PushToken => f.write_str("no running probe has this token"),
            Self::Record => f.write_str("not found"),
        }
    }
}

impl ServiceError {
    /// A store miss reported as `missing`; any other store error as itself.
    pub(crate) fn missing(missing: Missing) -> impl FnOnce(StoreError) -> Self {
        move |err| match err {
            StoreError::NotFound => Self::NotFound(missing),
            other => other.into(),
        }
    }
}

/// Fails with `NotFound` unless callee `id` is registered: the lookups of a callee's records
/// answer "no such callee" rather than an empty page.
pub(crate) async fn require_callee(store: &Store, id: CalleeId) -> Result<(), ServiceError> {
    store.callee(id).await.map(drop).map_err(no_callee(id))
}

/// A store miss on callee `id`, named; any other store error as itself.
pub(crate) fn no_callee(id: CalleeId) -> impl FnOnce(StoreError) -> ServiceError {
    ServiceError::missing(Missing::Callee(id))
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound => Self::NotFound(Missing::Record),
            StoreError::Conflict(what) => {
                // The detail names database internals (a constraint): for the log only.
                tracing::debug!(conflict = %what, "a write conflicted with existing data");
                Self::Conflict("the request conflicts with existing data".into())
            }
            StoreError::Refused(gate) => Self::Conflict(gate.to_string()),
            unavailable @ StoreError::Unavailable(_) => Self::Unavailable(unavailable),
            other => Self::Internal(other.into()),
        }
    }
}
