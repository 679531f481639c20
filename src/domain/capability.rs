//! The optional A2A capabilities a caller can depend on, each gated behind its own probe.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How one capability fared in a probe run: what the probe judged, and what decisions read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum CapabilityOutcome {
    Passed,
    Failed { reason: String },
    NotAdvertised,
    NotExercised { reason: String },
}

/// A card capability flag whose semantics cardgate verifies by probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Capability {
    #[serde(rename = "streaming")]
    Streaming,
    #[serde(rename = "pushNotifications")]
    PushNotifications,
    /// Exists only on v0.2/v0.3 cards; removed in A2A v1.0 (#1396).
    #[serde(rename = "stateTransitionHistory")]
    StateTransitionHistory,
}

impl Capability {
    pub const ALL: [Capability; 3] = [
        Capability::Streaming,
        Capability::PushNotifications,
        Capability::StateTransitionHistory,
    ];

    /// The name as it appears in `capabilities` on a card and in `requires=` queries.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Streaming => "streaming",
            Capability::PushNotifications => "pushNotifications",
            Capability::StateTransitionHistory => "stateTransitionHistory",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown capability `{0}`; expected one of streaming, pushNotifications, stateTransitionHistory"
)]
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCapability(s.to_string()))
    }
}
