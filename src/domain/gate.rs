//! Gate state per subject, derived by folding the subject's ledger events.
//!
//! The rules are trust-model.md's: every subject starts `card-trusted`; only a passing probe
//! cycle promotes to `lifecycle-trusted`; a demotion trigger on a `lifecycle-trusted` subject
//! demotes; a demoted subject is promoted again only by a probe that *started* after the
//! demotion. A card that stops verifying overlays `untrusted` without erasing the gate, because
//! card trust and lifecycle trust are separate facts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::capability::Capability;
use super::demotion::DemotionClass;
use super::ids::CalleeId;
use super::ledger::{EventBody, EventRecord, NewEvent};
use super::time::Timestamp;
use super::version::ProtocolVersion;

/// The one-way promotion ladder of a subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateState {
    CardTrusted,
    LifecycleTrusted,
    Demoted,
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

/// Everything the ledger says about one subject, folded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectState {
    pub gate: GateState,
    /// When the subject was last demoted (for people; rules use `demoted_seq`).
    pub demoted_at: Option<Timestamp>,
    /// The ledger seq of the last demotion: a re-promoting probe must have started after it
    /// in ledger order. `None` on states folded before seqs were kept.
    #[serde(default)]
    pub demoted_seq: Option<i64>,
    /// Why it is demoted (empty unless `gate` is `Demoted`).
    pub demotion_classes: BTreeSet<DemotionClass>,
    /// Set while the callee's current card cannot be trusted, with the reason.
    pub card_untrusted: Option<String>,
    /// The current card no longer offers this version.
    pub withdrawn: bool,
    /// Capabilities the card advertises for this subject, each with the start of its current
    /// uninterrupted advertisement (for people; rules use `advertised_seq`).
    pub advertised: BTreeMap<Capability, Timestamp>,
    /// The ledger seq of the event that started each current advertisement: a probe that
    /// started before it says nothing about the capability.
    #[serde(default)]
    pub advertised_seq: BTreeMap<Capability, i64>,
}

/// Where a probe run started, in ledger order: the ledger head seq it recorded when it
/// started (every event up to it was committed before), and the time, for people. The order
/// of events never rests on two machines' clocks (trust-model.md, gate states).
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
            demoted_at: None,
            demoted_seq: None,
            demotion_classes: BTreeSet::new(),
            card_untrusted: None,
            withdrawn: false,
            advertised: advertised.iter().map(|c| (*c, at)).collect(),
            advertised_seq: advertised.iter().map(|c| (*c, seq)).collect(),
        })
    }

    /// Whether a probe that started at `start` is fresh for the current demotion.
    pub fn fresh_for_repromotion(&self, start: &ProbeStart) -> bool {
        start.is_after(self.demoted_seq, self.demoted_at)
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
                next.advertised.entry(*capability).or_insert(at);
                next.advertised_seq.entry(*capability).or_insert(seq);
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
            } => match self.gate {
                GateState::CardTrusted => next.gate = GateState::LifecycleTrusted,
                GateState::LifecycleTrusted => {
                    return Err(GateError::PromotionRefused(
                        "the subject is already lifecycle-trusted".into(),
                    ));
                }
                GateState::Demoted => {
                    let start = ProbeStart {
                        head_seq: *probe_start_seq,
                        at: *probe_started_at,
                    };
                    if !self.fresh_for_repromotion(&start) {
                        return Err(GateError::PromotionRefused(format!(
                            "the probe started at ledger seq {} and the subject was demoted at \
                             seq {}; only a probe that started after the demotion re-promotes",
                            start.head_seq.map_or("?".into(), |s| s.to_string()),
                            self.demoted_seq.map_or("?".into(), |s| s.to_string()),
                        )));
                    }
                    next.gate = GateState::LifecycleTrusted;
                    next.demoted_at = None;
                    next.demoted_seq = None;
                    next.demotion_classes.clear();
                }
            },
            EventBody::Demoted { class, .. } => match self.gate {
                GateState::CardTrusted => return Err(GateError::DemotionRefused("card-trusted")),
                GateState::LifecycleTrusted | GateState::Demoted => {
                    // A second trigger while demoted adds its class and restarts the clock:
                    // the re-promoting probe must postdate every known violation.
                    next.gate = GateState::Demoted;
                    next.demoted_at = Some(at);
                    next.demoted_seq = Some(seq);
                    next.demotion_classes.insert(*class);
                }
            },
            EventBody::CardRepublished { .. }
            | EventBody::ProbeFinished { .. }
            | EventBody::ReportReceived { .. } => {}
        }
        Ok(next)
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
            GateState::Demoted => EffectiveGate::Demoted,
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
    use crate::domain::ids::{ProbeRunId, ReportId, SnapshotId};
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
        Result<GateState, &'static str>,
    );

    #[test]
    fn gate_derivation_table() {
        use GateState::*;
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
                Ok(GateState::LifecycleTrusted),
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
                (Ok(Some(state)), Ok(gate)) => assert_eq!(state.gate, gate, "{name}"),
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
            state.demotion_classes,
            BTreeSet::from([DemotionClass::Timestamp, DemotionClass::History])
        );
        assert_eq!(state.demoted_at, Some(t(40)));
        // A probe that started between the two demotions no longer re-promotes.
        assert!(matches!(
            state.apply(&promoted(30), t(50), 50),
            Err(GateError::PromotionRefused(why)) if why.contains("demoted at seq 40")
        ));
        let again = state.apply(&promoted(41), t(50), 50).unwrap();
        assert_eq!(again.gate, GateState::LifecycleTrusted);
        assert!(again.demotion_classes.is_empty());
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
}
