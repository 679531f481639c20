//! Response types shared by several endpoints. Domain types never derive `ToSchema`; these
//! mirror them, so the published contract changes only when this file does.

use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::gate::EffectiveGate;

/// A subject's gate as callers see it.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum GateStateView {
    /// The current card failed to fetch, parse or verify: not even for routing.
    Untrusted,
    /// Card verified: route and select skills only.
    CardTrusted,
    /// A full probe cycle passed.
    LifecycleTrusted,
    /// A demotion trigger fired; only a fresh passing probe re-promotes.
    Demoted,
}

impl From<EffectiveGate> for GateStateView {
    fn from(g: EffectiveGate) -> Self {
        match g {
            EffectiveGate::Untrusted => Self::Untrusted,
            EffectiveGate::CardTrusted => Self::CardTrusted,
            EffectiveGate::LifecycleTrusted => Self::LifecycleTrusted,
            EffectiveGate::Demoted => Self::Demoted,
        }
    }
}
