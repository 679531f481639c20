//! Why a subject is demoted: the classes of demotion trigger. Probe findings, callers'
//! reports and ledger events all name one; the gate keeps the set a demoted subject carries.

use serde::{Deserialize, Serialize};

/// The classes of demotion trigger (docs/trust-model.md, "Demotion triggers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DemotionClass {
    /// A terminal transition without `status.timestamp`.
    Timestamp,
    /// `stateTransitionHistory` length not increasing across a state change.
    History,
    /// Push webhook registration failing after the retry budget.
    Push,
    /// More than one terminal transition, or a transition after a terminal one.
    Terminal,
    /// A failure of a rule the operator's policy makes blocking (the reason names the rule).
    Policy,
}

impl DemotionClass {
    pub fn as_str(self) -> &'static str {
        match self {
            DemotionClass::Timestamp => "timestamp",
            DemotionClass::History => "history",
            DemotionClass::Push => "push",
            DemotionClass::Terminal => "terminal",
            DemotionClass::Policy => "policy",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Timestamp,
            Self::History,
            Self::Push,
            Self::Terminal,
            Self::Policy,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}
