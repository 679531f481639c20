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
            | EventBody::ReportReceived { .. } => {}
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
mod tests {
    use super::*;
    use crate::capability::Capability;
    use crate::ids::{ProbeRunId, ReportId, SnapshotId};
    use chrono::{TimeZone, Utc};

    fn t(secs: i64) -> Timestamp {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn appeared(caps: &[Capability]) -> EventBody {
        EventBody::VersionAppeared {
            snapshot_id: SnapshotId::new(),
            advertised: caps.to_vec(),
        }
    }

    /// A promotion by a probe that started at ledger head seq `started`, at that many seconds.
    fn promoted(started: i64) -> EventBody {
        EventBody::Promoted {
            probe_run_id: ProbeRunId::new(),
            probe_started_at: t(started),
            probe_start_seq: Some(started),
        }
    }

    fn demoted(class: DemotionClass) -> EventBody {
        EventBody::Demoted {
            class,
            probe_run_id: None,
            report_id: Some(ReportId::new()),
            reason: "test".into(),
        }
    }

    /// Runs `events` (body, n) from a fresh subject, each the event at ledger seq `n`
    /// recorded at `n` seconds; returns the final result.
    fn run(events: &[(EventBody, i64)]) -> Result<Option<SubjectState>, GateError> {
        SubjectState::derive(events.iter().map(|(b, at)| (b, t(*at), *at)))
    }

    /// (case, events with their times, final gate or the start of the refusal message)
    type Case = (
        &'static str,
        Vec<(EventBody, i64)>,
        Result<GateKind, &'static str>,
    );

    #[test]
    fn gate_derivation_table() {
        use GateKind::*;
        let table: Vec<Case> = vec![
            (
                "new subject starts card-trusted",
                vec![(appeared(&[]), 0)],
                Ok(CardTrusted),
            ),
            (
                "a passing probe promotes",
                vec![(appeared(&[]), 0), (promoted(5), 10)],
                Ok(LifecycleTrusted),
            ),
            (
                "a trigger on a lifecycle-trusted subject demotes",
                vec![
                    (appeared(&[]), 0),
                    (promoted(5), 10),
                    (demoted(DemotionClass::Timestamp), 20),
                ],
                Ok(Demoted),
            ),
            (
                "a probe that started after the demotion re-promotes",
                vec![
                    (appeared(&[]), 0),
                    (promoted(5), 10),
                    (demoted(DemotionClass::History), 20),
                    (promoted(21), 30),
                ],
                Ok(LifecycleTrusted),
            ),
            (
                "a probe that started before the demotion does not re-promote",
                vec![
                    (appeared(&[]), 0),
                    (promoted(5), 10),
                    (demoted(DemotionClass::History), 20),
                    (promoted(19), 30),
                ],
                Err("promotion refused"),
            ),
            (
                "a probe whose ledger head was the event before the demotion does not re-promote",
                vec![
                    (appeared(&[]), 0),
                    (promoted(5), 10),
                    (demoted(DemotionClass::Push), 20),
                    (promoted(19), 30),
                ],
                Err("promotion refused"),
            ),
            (
                "a probe whose ledger head was the demotion itself started after it",
                vec![
                    (appeared(&[]), 0),
                    (promoted(5), 10),
                    (demoted(DemotionClass::Push), 20),
                    (promoted(20), 30),
                ],
                Ok(GateKind::LifecycleTrusted),
            ),
            (
                "a republish moves nothing",
                vec![
                    (appeared(&[]), 0),
                    (promoted(5), 10),
                    (demoted(DemotionClass::Terminal), 20),
                    (
                        EventBody::CardRepublished {
                            snapshot_id: SnapshotId::new(),
                            sha256: "ab".into(),
                        },
                        30,
                    ),
                ],
                Ok(Demoted),
            ),
            (
                "a card-trusted subject cannot be demoted",
                vec![(appeared(&[]), 0), (demoted(DemotionClass::Timestamp), 20)],
                Err("demotion refused"),
            ),
            (
                "promotion is one-way: promoting twice is refused",
                vec![(appeared(&[]), 0), (promoted(5), 10), (promoted(11), 12)],
                Err("promotion refused"),
            ),
            (
                "a subject must start with version-appeared",
                vec![(promoted(5), 10)],
                Err("the first event"),
            ),
        ];
        for (name, events, expected) in table {
            let got = run(&events);
            match (got, expected) {
                (Ok(Some(state)), Ok(gate)) => assert_eq!(state.gate.kind(), gate, "{name}"),
                (Err(err), Err(prefix)) => {
                    assert!(err.to_string().starts_with(prefix), "{name}: {err}")
                }
                (got, expected) => panic!("{name}: got {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn a_second_trigger_while_demoted_adds_its_class_and_restarts_the_clock() {
        let state = run(&[
            (appeared(&[]), 0),
            (promoted(5), 10),
            (demoted(DemotionClass::Timestamp), 20),
            (demoted(DemotionClass::History), 40),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            state.gate,
            GateState::Demoted {
                at: t(40),
                seq: Some(40),
                classes: BTreeSet::from([DemotionClass::Timestamp, DemotionClass::History]),
            }
        );
        // A probe that started between the two demotions no longer re-promotes.
        assert!(matches!(
            state.apply(&promoted(30), t(50), 50),
            Err(GateError::PromotionRefused(why)) if why.contains("demoted at seq 40")
        ));
        let again = state.apply(&promoted(41), t(50), 50).unwrap();
        // Trusted again, with no demotion left behind.
        assert_eq!(again.gate, GateState::LifecycleTrusted);
    }

    #[test]
    fn untrusted_card_overlays_the_gate_and_restoring_it_returns_the_gate() {
        let snapshot_id = SnapshotId::new();
        let state = run(&[
            (appeared(&[]), 0),
            (promoted(5), 10),
            (
                EventBody::CardUntrusted {
                    snapshot_id: Some(snapshot_id),
                    reason: "bad signature".into(),
                },
                20,
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(state.effective(), EffectiveGate::Untrusted);
        assert_eq!(state.gate, GateState::LifecycleTrusted);
        let restored = state
            .apply(&EventBody::CardTrustRestored { snapshot_id }, t(30), 30)
            .unwrap();
        assert_eq!(restored.effective(), EffectiveGate::LifecycleTrusted);
    }

    #[test]
    fn capability_advertisement_keeps_the_start_of_the_current_run() {
        let snapshot_id = SnapshotId::new();
        let cap = Capability::Streaming;
        let state = run(&[
            (appeared(&[cap]), 0),
            (
                EventBody::CapabilityAdvertised {
                    capability: cap,
                    snapshot_id,
                },
                10,
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            state.advertised.get(&cap),
            Some(&t(0)),
            "re-advertising keeps the start"
        );
        let state = state
            .apply(
                &EventBody::CapabilityWithdrawn {
                    capability: cap,
                    snapshot_id,
                },
                t(20),
                20,
            )
            .unwrap()
            .apply(
                &EventBody::CapabilityAdvertised {
                    capability: cap,
                    snapshot_id,
                },
                t(30),
                30,
            )
            .unwrap();
        assert_eq!(
            state.advertised.get(&cap),
            Some(&t(30)),
            "a new run starts later"
        );
    }

    #[test]
    fn a_withdrawn_version_can_reappear_with_its_gate_intact() {
        let snapshot_id = SnapshotId::new();
        let state = run(&[
            (appeared(&[]), 0),
            (promoted(5), 10),
            (EventBody::VersionWithdrawn { snapshot_id }, 20),
            (appeared(&[Capability::Streaming]), 30),
        ])
        .unwrap()
        .unwrap();
        assert!(!state.withdrawn);
        assert_eq!(state.gate, GateState::LifecycleTrusted);
        assert_eq!(state.advertised.get(&Capability::Streaming), Some(&t(30)));
        assert_eq!(
            state.apply(&appeared(&[]), t(40), 40),
            Err(GateError::AlreadyStarted)
        );
    }

    #[test]
    fn the_stored_form_round_trips_and_a_demotion_without_its_time_is_refused() {
        let state = run(&[
            (appeared(&[]), 0),
            (promoted(5), 10),
            (demoted(DemotionClass::Push), 20),
        ])
        .unwrap()
        .unwrap();
        let stored = serde_json::to_value(&state).unwrap();
        // The flat form every stored row has.
        assert_eq!(stored["gate"], "demoted");
        assert_eq!(stored["demoted_seq"], 20);
        assert_eq!(stored["demotion_classes"], serde_json::json!(["push"]));
        let back: SubjectState = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(back, state);

        let mut corrupt = stored;
        corrupt["demoted_at"] = serde_json::Value::Null;
        let err = serde_json::from_value::<SubjectState>(corrupt).unwrap_err();
        assert!(err.to_string().contains("without demoted_at"), "{err}");
    }
}
