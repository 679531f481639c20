//! Typed identifiers. Each is a UUID v7, so ids sort by creation time and can be used as cursors.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }
    };
}

id_type!(
    /// A registered callee.
    CalleeId
);
id_type!(
    /// One recorded fetch of a callee's card.
    SnapshotId
);
id_type!(
    /// One probe run against one subject.
    ProbeRunId
);
id_type!(
    /// A caller's violation report.
    ReportId
);
id_type!(
    /// An API key (its id, never its secret).
    ApiKeyId
);
id_type!(
    /// A job in the work queue.
    JobId
);

id_type!(
    /// A webhook subscription.
    SubscriptionId
);

id_type!(
    /// One delivery of one event to one subscription: its `webhook-id`, the same on every attempt.
    DeliveryId
);
