//! Gate state per subject, derived by folding the subject's ledger events.
//!
//! The rules are docs/trust-model.md's: every subject starts `card-trusted`; only a passing probe
//! cycle promotes to `lifecycle-trusted`; a demotion trigger on a `lifecycle-trusted` subject
//! demotes; a demoted subject is promoted again only by a probe that *started* after the
//! demotion. A card that stops verifying overlays `untrusted` without erasing the gate, because
//! card trust and lifecycle trust are separate facts.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::capability::CapabilityMap;
use super::demotion::DemotionClass;
use super::ids::CalleeId;
use super::ledger::{EventBody, EventRecord, NewEvent};
use super::time::Timestamp;
use super::version::ProtocolVersion;

/// The one-way promotion ladder of a subject. A demoted subject carries its demotion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateState {
    CardTrusted,
    LifecycleTrusted,
    Demoted {
        /// When the last trigger was recorded (for people; rules use `seq`).
        at: Timestamp,
        /// The ledger seq of the last trigger: a re-promoting probe must have started after
        /// it in ledger order. `None` on states folded before seqs were kept.
        seq: Option<i64>,
        /// Every trigger class since the subject was last trusted.
        classes: BTreeSet<DemotionClass>,
    },
}

/// A gate state without its data: what is stored beside it, and what tables compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateKind {
    CardTrusted,
    LifecycleTrusted,
    Demoted,
}

impl GateState {
    pub fn kind(&self) -> GateKind {
        match self {
            Self::CardTrusted => GateKind::CardTrusted,
            Self::LifecycleTrusted => GateKind::LifecycleTrusted,
            Self::Demoted { .. } => GateKind::Demoted,
        }
    }

    pub fn is_demoted(&self) -> bool {
        matches!(self, Self::Demoted { .. })
    }

    /// Demoted, with `class` among the reasons.
    pub fn demoted_for(&self, class: DemotionClass) -> bool {
        matches!(self, Self::Demoted { classes, .. } if classes.contains(&class))
    }
}

/// What callers are told: the gate, or `untrusted` when the current card cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectiveGate {
    Untrusted,
    CardTrusted,
    LifecycleTrusted,
    Demoted,
}

impl EffectiveGate {
    pub fn as_str(self) -> &'static str {
        match self {
            EffectiveGate::Untrusted => "untrusted",
            EffectiveGate::CardTrusted => "card-trusted",
            EffectiveGate::LifecycleTrusted => "lifecycle-trusted",
            EffectiveGate::Demoted => "demoted",
        }
    }
}

impl fmt::Display for EffectiveGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything the ledger says about one subject, folded. Stored as JSON in the flat form of
/// [`StoredSubjectState`]; a stored state that breaks the rules fails to read, as corrupt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredSubjectState", into = "StoredSubjectState")]
pub struct SubjectState {
    pub gate: GateState,
    /// Set while the callee's current card cannot be trusted, with the reason.
    pub card_untrusted: Option<String>,
    /// The current card no longer offers this version.
    pub withdrawn: bool,
    /// Capabilities the card advertises for this subject, each with the start of its current
    /// uninterrupted advertisement (for people; rules use `advertised_seq`).
    pub advertised: CapabilityMap<Timestamp>,
    /// The ledger seq of the event that started each current advertisement: a probe that
    /// started before it says nothing about the capability.
    pub advertised_seq: CapabilityMap<i64>,
}

/// The stored form of [`SubjectState`]: the gate's kind and its demotion side by side, as
/// every stored row has it.
#[derive(Serialize, Deserialize)]
struct StoredSubjectState {
    gate: GateKind,
    demoted_at: Option<Timestamp>,
    #[serde(default)]
    demoted_seq: Option<i64>,
    demotion_classes: BTreeSet<DemotionClass>,
    card_untrusted: Option<String>,
    withdrawn: bool,
    advertised: CapabilityMap<Timestamp>,
    #[serde(default)]
    advertised_seq: CapabilityMap<i64>,
}

impl TryFrom<StoredSubjectState> for SubjectState {
    type Error = String;

    fn try_from(s: StoredSubjectState) -> Result<Self, String> {
        let gate = match (s.gate, s.demoted_at) {
            (GateKind::CardTrusted, _) => GateState::CardTrusted,
            (GateKind::LifecycleTrusted, _) => GateState::LifecycleTrusted,
            (GateKind::Demoted, Some(at)) => GateState::Demoted {
                at,
                seq: s.demoted_seq,
                classes: s.demotion_classes,
            },
            (GateKind::Demoted, None) => return Err("a demoted subject without demoted_at".into()),
        };
        Ok(Self {
            gate,
            card_untrusted: s.card_untrusted,
            withdrawn: s.withdrawn,
            advertised: s.advertised,
            advertised_seq: s.advertised_seq,
        })
    }
}

impl From<SubjectState> for StoredSubjectState {
    fn from(s: SubjectState) -> Self {
        let kind = s.gate.kind();
        let (demoted_at, demoted_seq, demotion_classes) = match s.gate {
            GateState::Demoted { at, seq, classes } => (Some(at), seq, classes),
            _ => (None, None, BTreeSet::new()),
        };
        Self {
            gate: kind,
            demoted_at,
            demoted_seq,
            demotion_classes,
            card_untrusted: s.card_untrusted,
            withdrawn: s.withdrawn,
            advertised: s.advertised,
            advertised_seq: s.advertised_seq,
        }
    }
}

/// Where a probe run started, in ledger order: the ledger head seq it recorded when it
/// started (every event up to it was committed before), and the time, for people. The order
/// of events never rests on two machines' clocks (docs/trust-model.md, gate states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeStart {
    pub head_seq: Option<i64>,
    pub at: Timestamp,
}

impl ProbeStart {
    /// Whether the probe started after the event at `seq` (recorded at `at`): the event was
    /// in the ledger when the probe read its head. Runs and events from before seqs were
    /// kept fall back to their times.
    pub fn is_after(&self, seq: Option<i64>, at: Option<Timestamp>) -> bool {
        match (self.head_seq, seq) {
            (Some(head), Some(seq)) => head >= seq,
            _ => at.is_some_and(|at| self.at > at),
        }
    }
}

/// An event that the current state does not allow. The store refuses to append it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("the first event of a subject must be version-appeared, not {0}")]
    NotStarted(&'static str),
    #[error("the subject already exists; version-appeared cannot start it again")]
    AlreadyStarted,
    #[error("promotion refused: {0}")]
    PromotionRefused(String),
    #[error(
        "demotion refused: the subject is {0}, and only a lifecycle-trusted subject can be demoted"
    )]
    DemotionRefused(&'static str),
}

impl SubjectState {
    /// The state a subject starts in, from its first event.
    pub fn start(body: &EventBody, at: Timestamp, seq: i64) -> Result<Self, GateError> {
        let EventBody::VersionAppeared { advertised, .. } = body else {
            return Err(GateError::NotStarted(body.kind()));
        };
        Ok(Self {
            gate: GateState::CardTrusted,
            card_untrusted: None,
            withdrawn: false,
            advertised: advertised.iter().map(|c| (*c, at)).collect(),
            advertised_seq: advertised.iter().map(|c| (*c, seq)).collect(),
        })
    }

    /// Whether a probe that started at `start` is fresh for the current demotion.
    pub fn fresh_for_repromotion(&self, start: &ProbeStart) -> bool {
        match &self.gate {
            GateState::Demoted { at, seq, .. } => start.is_after(*seq, Some(*at)),
            _ => false,
        }
    }

    /// The state after `body`, the event at ledger `seq` recorded at `at`; an error when the
    /// rules forbid the event.
    pub fn apply(&self, body: &EventBody, at: Timestamp, seq: i64) -> Result<Self, GateError> {
        let mut next = self.clone();
        match body {
            EventBody::VersionAppeared { advertised, .. } => {
                if !self.withdrawn {
                    return Err(GateError::AlreadyStarted);
                }
                // A version that comes back is the same subject: its gate and evidence stand,
                // like a republish. Its capabilities are advertised afresh.
                next.withdrawn = false;
                next.advertised = advertised.iter().map(|c| (*c, at)).collect();
                next.advertised_seq = advertised.iter().map(|c| (*c, seq)).collect();
            }
            EventBody::VersionWithdrawn { .. } => {
                next.withdrawn = true;
                next.advertised.clear();
                next.advertised_seq.clear();
            }
            EventBody::CapabilityAdvertised { capability, .. } => {
                next.advertised.get_or_insert(*capability, at);
                next.advertised_seq.get_or_insert(*capability, seq);
            }
            EventBody::CapabilityWithdrawn { capability, .. } => {
                next.advertised.remove(capability);
                next.advertised_seq.remove(capability);
            }
            EventBody::CardUntrusted { reason, .. } => next.card_untrusted = Some(reason.clone()),
            EventBody::CardTrustRestored { .. } => next.card_untrusted = None,
            EventBody::Promoted {
                probe_started_at,
                probe_start_seq,
                ..
            } => {
                let start = ProbeStart {
                    head_seq: *probe_start_seq,
                    at: *probe_started_at,
                };
                next.gate = self.promoted(&start)?;
            }
            EventBody::Demoted { class, .. } => next.gate = self.demoted(*class, at, seq)?,
            EventBody::CardRepublished { .. }
            | EventBody::ProbeFinished { .. }
            | EventBody::ReportReceived { .. }
            | EventBody::Rejudged { .. } => {}
        }
        Ok(next)
    }

    /// The gate after a passing probe that started at `start`.
    fn promoted(&self, start: &ProbeStart) -> Result<GateState, GateError> {
        match &self.gate {
            GateState::CardTrusted => Ok(GateState::LifecycleTrusted),
            GateState::LifecycleTrusted => Err(GateError::PromotionRefused(
                "the subject is already lifecycle-trusted".into(),
            )),
            GateState::Demoted { .. } if self.fresh_for_repromotion(start) => {
                Ok(GateState::LifecycleTrusted)
            }
            GateState::Demoted { seq, .. } => Err(GateError::PromotionRefused(format!(
                "the probe started at ledger seq {} and the subject was demoted at seq {}; only a \
                 probe that started after the demotion re-promotes",
                start.head_seq.map_or("?".into(), |s| s.to_string()),
                seq.map_or("?".into(), |s| s.to_string()),
            ))),
        }
    }

    /// The gate after a `class` trigger recorded at ledger `seq`, at `at`.
    fn demoted(
        &self,
        class: DemotionClass,
        at: Timestamp,
        seq: i64,
    ) -> Result<GateState, GateError> {
        let mut classes = match &self.gate {
            GateState::CardTrusted => return Err(GateError::DemotionRefused("card-trusted")),
            GateState::LifecycleTrusted => BTreeSet::new(),
            GateState::Demoted { classes, .. } => classes.clone(),
        };
        // A second trigger while demoted adds its class and restarts the clock: the
        // re-promoting probe must postdate every known violation.
        classes.insert(class);
        Ok(GateState::Demoted {
            at,
            seq: Some(seq),
            classes,
        })
    }

    /// Folds a subject's events in ledger order. `None` for no events.
    pub fn derive<'a>(
        events: impl IntoIterator<Item = (&'a EventBody, Timestamp, i64)>,
    ) -> Result<Option<Self>, GateError> {
        let mut state: Option<Self> = None;
        for (body, at, seq) in events {
            state = Some(match &state {
                None => Self::start(body, at, seq)?,
                Some(s) => s.apply(body, at, seq)?,
            });
        }
        Ok(state)
    }

    /// The gate as callers see it.
    pub fn effective(&self) -> EffectiveGate {
        if self.card_untrusted.is_some() {
            return EffectiveGate::Untrusted;
        }
        match self.gate {
            GateState::CardTrusted => EffectiveGate::CardTrusted,
            GateState::LifecycleTrusted => EffectiveGate::LifecycleTrusted,
            GateState::Demoted { .. } => EffectiveGate::Demoted,
        }
    }
}

/// A subject (one callee, one protocol version): its folded state and where in the ledger it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub callee_id: CalleeId,
    pub protocol_version: ProtocolVersion,
    pub state: SubjectState,
    pub last_seq: i64,
    pub last_hash: String,
    pub last_change: SubjectChange,
    pub created_at: Timestamp,
}

/// Where the subject's effective gate last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubjectChange {
    pub seq: i64,
    pub at: Timestamp,
}

impl Subject {
    pub fn gate(&self) -> EffectiveGate {
        self.state.effective()
    }
}

impl Subject {
    /// The subject after `event`, sealed as `record` at the ledger's head: its state folded
    /// forward (or started, for its first event), its place in the ledger, and where its
    /// effective gate last changed. An error when the gate rules refuse the event; nothing
    /// is then written.
    pub fn after(
        current: Option<&Subject>,
        event: &NewEvent,
        record: &EventRecord,
    ) -> Result<Subject, GateError> {
        let (seq, at) = (record.seq, record.recorded_at);
        let state = match current {
            None => SubjectState::start(&event.body, at, seq)?,
            Some(subject) => subject.state.apply(&event.body, at, seq)?,
        };
        let last_change = match current {
            Some(s) if s.gate() == state.effective() => s.last_change,
            _ => SubjectChange { seq, at },
        };
        Ok(Subject {
            callee_id: event.callee_id,
            protocol_version: event.protocol_version,
            state,
            last_seq: seq,
            last_hash: record.hash.clone(),
            last_change,
            created_at: current.map_or(at, |s| s.created_at),
        })
    }
}

#[cfg(test)]
mod tests;
